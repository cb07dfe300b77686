//! Helpers shared by the barrier test binaries (`barriers.rs`, `persist_tokens.rs`): an
//! anonymous pool of a given persistency model, its nt-store, and the per-thread counters.
#![allow(dead_code)]

use pmem_ordering::{reset_thread_stats, thread_stats, NtPending, PersistModel, Pool, PoolError};
use pmem_ordering::{PoolOptions, Stats};

pub const SIZE: u64 = 64 * 1024;
/// A line-aligned offset in the heap.
pub const AT: u64 = 8192;

pub fn pool(model: PersistModel) -> Pool {
    let pool = Pool::anonymous("barriers", SIZE, &PoolOptions::new().model(model)).unwrap();
    assert_eq!(pool.model(), model);
    pool
}

/// [`Pool::nt_write`] for this file's tests.
pub fn nt_write(pool: &Pool, offset: u64, bytes: &[u8]) -> Result<NtPending, PoolError> {
    pool.nt_write(offset, bytes)
}

/// The counters since the last reset, then reset them.
pub fn take() -> Stats {
    let s = thread_stats();
    reset_thread_stats();
    s
}
