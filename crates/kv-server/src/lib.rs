//! A durable key-value service speaking RESP2, the Redis protocol, over a
//! [`pmem_structures::Store`].
//!
//! Keys and values are byte strings in one ordered map of the store (a FAST&FAIR B+-tree of
//! records), so `SCAN` walks keys in order. Every write is durable before its reply is sent:
//! the store flushes and fences it (on persistent memory; on DRAM, such as `/dev/shm`, the
//! same instructions run with the emulated granularity and only a process crash is
//! survived). Connections are tasks on a multi-threaded runtime, one worker per core.
//!
//! Commands: `PING`, `ECHO`, `GET`, `SET` (`NX`, `XX`, `GET`), `DEL`, `EXISTS`, `INCR`,
//! `INCRBY`, `DECR`, `DECRBY`, `MGET`, `MSET`, `DBSIZE`, `SCAN` (`MATCH` prefix patterns,
//! `COUNT`, `TYPE`), `FLUSHDB`/`FLUSHALL`, `SELECT 0`, `INFO`, `CONFIG GET` (no parameters),
//! `QUIT`. Keys never expire.
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

mod commands;
mod config;
mod connection;
mod counters;
mod db;
mod error;
mod framing;
mod info;
#[doc(hidden)]
pub mod offline;
mod scan;
mod server;

pub use config::{Limits, ServerConfig};
pub use error::ServerError;
pub use server::{RunningServer, Server};
