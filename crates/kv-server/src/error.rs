//! Why a server could not start.

use std::net::SocketAddr;
use std::path::PathBuf;

/// A server that could not start, and why.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A setting no server can run with.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The pool could not be opened or created (already open elsewhere, not a store, too
    /// small, ...).
    #[error("cannot open the store at {path}: {source}")]
    Store {
        /// The pool file.
        path: PathBuf,
        /// What the store said.
        #[source]
        source: pmem_structures::Error,
    },
    /// The address could not be bound (in use, not local, ...).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The worker threads could not start.
    #[error("cannot start the worker threads: {0}")]
    Runtime(#[source] std::io::Error),
}
