//! A durable key-value service speaking the Redis protocol (RESP2, and RESP3 after `HELLO 3`)
//! over a [`pmem_structures::Store`], with Redis 7's replies and error texts.
//!
//! Keys and values are byte strings in one ordered map of the store (a FAST&FAIR B+-tree of
//! records), so `SCAN` walks keys in order; hashes' fields and expiry times are in maps beside
//! it. Every write is durable before its reply is sent
//! (a connection's pipelined plain writes are committed together, then answered):
//! the store flushes and fences it (on persistent memory; on DRAM, such as `/dev/shm`, the
//! same instructions run with the emulated granularity and only a process crash is
//! survived). Connections are tasks on a multi-threaded runtime, one worker per core.
//!
//! Commands: strings (`GET`, `SET` with `NX`/`XX`/`GET`/`EX`/`PX`/`EXAT`/`PXAT`/`KEEPTTL`,
//! `SETEX`, `PSETEX`, `GETEX`, `SETNX`, `GETSET`, `GETDEL`, `APPEND`, `STRLEN`, `SETRANGE`,
//! `GETRANGE`/`SUBSTR`, `INCR`/`DECR`/`INCRBY`/`DECRBY`, `INCRBYFLOAT`), hashes (`HSET`,
//! `HMSET`, `HSETNX`, `HGET`, `HMGET`, `HGETALL`, `HDEL`, `HLEN`, `HEXISTS`, `HKEYS`, `HVALS`,
//! `HINCRBY`, `HINCRBYFLOAT`, `HSTRLEN`, `HSCAN`: each field an entry of an ordered map, so
//! one field is read alone, and each write one write batch), several keys at
//! once (`MSET`, `MSETNX`, `RENAME`, `RENAMENX`, each one write batch of the store, all of
//! it or none after a crash; `COPY`; `MGET`, which never sees a batch in part), keys
//! (`DEL`/`UNLINK`, `EXISTS`, `TOUCH`, `TYPE`, `RANDOMKEY`, `KEYS` and `SCAN` with Redis's
//! glob patterns, `DBSIZE`, `FLUSHDB`/`FLUSHALL`), the connection (`PING`, `ECHO`, `HELLO`,
//! `AUTH`, `CLIENT ID|GETNAME|SETNAME|SETINFO|INFO`, `SELECT 0`, `RESET`, `QUIT`) and the
//! server (`INFO`, `CONFIG GET`, `COMMAND` and its `COUNT`/`DOCS`/`INFO`/`LIST`), and
//! expiry times (`EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` with `NX`/`XX`/`GT`/`LT`,
//! `TTL`, `PTTL`, `EXPIRETIME`, `PEXPIRETIME`, `PERSIST`): deadlines are kept in the store,
//! absolute, so they hold across crashes and restarts, and keys past them go lazily (when
//! named) and actively (in the background). `MULTI`, `EXEC`, `DISCARD` and `WATCH` are
//! refused, and so is every command between a `MULTI` and its `EXEC` or `DISCARD`, so a
//! transaction a client sends applies nothing.
//!
//! ```no_run
//! use pmem_kv_server::{Server, ServerConfig};
//! use pmem_structures::Granularity;
//!
//! let mut config = ServerConfig::new("/dev/shm/kv.pool");
//! config.granularity = Some(Granularity::Emulated); // tmpfs
//! config.bind = "127.0.0.1:0".parse().unwrap(); // any free port
//! let server = Server::start(config)?;
//! println!("serving on {}", server.local_addr());
//! server.shutdown();
//! # Ok::<(), pmem_kv_server::ServerError>(())
//! ```

mod args;
mod commands;
mod config;
mod connection;
mod counters;
mod db;
// The keyspace's expiry and hashes are parts of `db` (each names the other's maps), used
// across the crate by these short paths.
use db::{expiry, hashes};
mod error;
#[cfg(test)]
mod expiry_crash;
mod framing;
mod glob;
#[cfg(test)]
mod hash_crash;
mod info;
mod inline;
mod numbers;
#[doc(hidden)]
pub mod offline;
mod pipeline;
mod reply;
mod scan;
mod server;
mod session;
mod shared;

/// The protocol layer (requests out of a read buffer, replies in RESP2 or RESP3), shared with
/// the replicated server (`pmem-kv-cluster`), which serves the same protocol. Not a stable API.
#[doc(hidden)]
pub mod protocol {
    pub use crate::framing::{Framer, Next};
    pub use crate::reply::{Protocol, Reply};
}

pub use config::{Limits, ServerConfig};
pub use error::ServerError;
pub use server::{RunningServer, Server};
