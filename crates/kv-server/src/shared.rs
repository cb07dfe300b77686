//! What every connection of a server shares: the keyspace, scan cursors, limits and the
//! connection counts.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use pmem_structures::Granularity;

use crate::config::Limits;
use crate::db::Db;
use crate::scan::Cursors;
use crate::session::Session;

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) db: Db,
    pub(crate) cursors: Mutex<Cursors>,
    pub(crate) limits: Limits,
    pub(crate) addr: SocketAddr,
    pub(crate) granularity: Granularity,
    pub(crate) threads: usize,
    /// Plain writes of a pipeline are committed together (`ServerConfig::pipeline_batches`).
    pub(crate) pipeline_batches: bool,
    pub(crate) started: Instant,
    /// Connections being served.
    pub(crate) clients: AtomicUsize,
    /// Connections accepted and served since the start (the last one's `CLIENT ID`).
    pub(crate) connections_received: AtomicU64,
    /// Connections refused at the limit.
    pub(crate) rejected_connections: AtomicU64,
}

impl Shared {
    pub(crate) fn new(
        db: Db,
        limits: Limits,
        addr: SocketAddr,
        granularity: Granularity,
        threads: usize,
        pipeline_batches: bool,
    ) -> Shared {
        Shared {
            db,
            cursors: Mutex::new(Cursors::new(cursor_seed())),
            limits,
            addr,
            granularity,
            threads,
            pipeline_batches,
            started: Instant::now(),
            clients: AtomicUsize::new(0),
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
        }
    }

    /// A new connection's state, with the next client id.
    pub(crate) fn new_session(&self, peer: Option<SocketAddr>) -> Session {
        let id = self.connections_received.fetch_add(1, Ordering::Relaxed) + 1;
        Session::new(id, peer)
    }
}

/// A per-run starting cursor number, so a cursor kept across a restart is refused rather
/// than taken for another scan's.
fn cursor_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // Keep clear of the top so the counter does not wrap in any realistic run.
    (nanos ^ u64::from(std::process::id()).rotate_left(32)) >> 8
}
