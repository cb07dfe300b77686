//! What the server is told at start: where to listen, which pool, and the limits it enforces.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use pmem_structures::Granularity;

/// The limits a client's requests are held to. A request over a limit gets an error reply;
/// one the connection cannot be read past (a bulk string or array too long to skip safely)
/// also closes the connection, as Redis does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest bulk string a request may carry, so the longest value (default 64 MiB;
    /// Redis's `proto-max-bulk-len` is 512 MiB). Keys are held to the store's own limit,
    /// `pmem_structures::MAX_KEY_BYTES` (64 KiB), with an error reply that keeps the connection.
    pub max_value_bytes: usize,
    /// The most arguments one request may have, command name included (default 1,048,576).
    pub max_args: usize,
    /// The most connections served at once (default 1,024); the next one gets an error reply
    /// and is closed.
    pub max_connections: usize,
    /// The longest inline command (a line of text, as `telnet` sends), 64 KiB as in Redis.
    pub max_inline_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_value_bytes: 64 << 20,
            max_args: 1 << 20,
            max_connections: 1024,
            max_inline_bytes: 64 << 10,
        }
    }
}

/// How to start a [`Server`](crate::Server).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The address to listen on (default `127.0.0.1:6379`; port 0 picks a free port, which
    /// [`RunningServer::local_addr`](crate::RunningServer::local_addr) reports).
    pub bind: SocketAddr,
    /// The pool file: opened if it exists, created otherwise.
    pub pool: PathBuf,
    /// The size of a pool the server creates (default 1 GiB); an existing pool keeps its own.
    pub pool_size: u64,
    /// Force a granularity (see `pmem_structures::StoreOptions`); `None` detects it from the
    /// file. A file on tmpfs (`/dev/shm`) is detected as `Page` (every write ends in `msync`):
    /// pass `Emulated` there to run as on persistent memory.
    pub granularity: Option<Granularity>,
    /// Worker threads serving connections (default: one per core).
    pub threads: usize,
    /// Request limits.
    pub limits: Limits,
    /// Commit the plain writes (`SET key value`, with or without an expiry option, `MSET`) of
    /// a connection's pipeline that arrive together as one write batch, each reply sent once
    /// the batch is durable. Off by default: each write then runs and is made durable on its
    /// own, which measured as fast or faster on DRAM, with the keyspace in trees and in
    /// leaves alike (a batch does per key what a single write does and copies each slot
    /// twice more, through its log; it saves only fences, cheap on DRAM; and batches run one
    /// at a time per store while single writes run on every worker; docs/server.md).
    pub pipeline_batches: bool,
    /// Stop cleanly on SIGTERM and SIGINT (the binary sets this; an embedding program that
    /// handles signals itself leaves it off and calls
    /// [`RunningServer::shutdown`](crate::RunningServer::shutdown)).
    pub stop_on_signals: bool,
}

impl ServerConfig {
    /// The defaults for a pool at `pool`.
    pub fn new(pool: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, 6379)),
            pool: pool.into(),
            pool_size: 1 << 30,
            granularity: None,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            limits: Limits::default(),
            pipeline_batches: false,
            stop_on_signals: false,
        }
    }

    /// Refuse settings no server can run with, naming the setting.
    pub(crate) fn validate(&self) -> Result<(), String> {
        let limits = &self.limits;
        if self.threads == 0 || self.threads > 1024 {
            return Err(format!("threads must be 1 to 1024, not {}", self.threads));
        }
        if limits.max_value_bytes == 0 || limits.max_value_bytes > pmem_structures::MAX_VALUE_BYTES
        {
            return Err(format!(
                "max value bytes must be 1 to {} (the store's limit), not {}",
                pmem_structures::MAX_VALUE_BYTES,
                limits.max_value_bytes
            ));
        }
        if limits.max_args < 3 {
            return Err(format!(
                "max args must be at least 3 (SET key value), not {}",
                limits.max_args
            ));
        }
        if limits.max_connections == 0 {
            return Err("max connections must be at least 1".into());
        }
        if limits.max_inline_bytes < 16 {
            return Err(format!(
                "max inline bytes must be at least 16, not {}",
                limits.max_inline_bytes
            ));
        }
        Ok(())
    }
}
