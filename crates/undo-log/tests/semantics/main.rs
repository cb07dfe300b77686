//! What transactions and the allocator promise, on ordinary (non-simulated) pools: rollback on
//! `Err` and on panic, flattened nesting, the typed errors of the log and the allocator, the
//! allocator's bookkeeping, reopening a file pool, and concurrent use. One test binary: this file
//! holds the helpers, each module one of those promises.

use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use pmem_ordering::{Granularity, PPtr, Pool, PoolOptions};
use pmem_test_kit::fixture::{
    anonymous_heap_under, anonymous_heap_with, anonymous_pool, chunk_table_chunks, heap_config,
};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, Layout, TxError};

mod allocator;
mod concurrency;
mod lifecycle;
mod log_capacity;
mod record_concurrency;
mod records;
mod rollback;

/// The layout name of every pool of these tests.
const LAYOUT: &str = "semantics";

/// A heap with 2 lanes of 4 KiB, 16 KiB chunks, in a 1 MiB pool.
fn small_heap(policy: FencePolicy) -> Heap {
    anonymous_heap_under(LAYOUT, 1 << 20, heap_config(2, 4096, 16 << 10), policy)
}

fn bytes(pool: &Pool, offset: u64, len: u64) -> Vec<u8> {
    let mut buf = vec![0u8; len as usize];
    pool.read_bytes(offset, &mut buf).unwrap();
    buf
}

/// A recognisable pattern for `len` bytes.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8 + 1)
        .collect()
}

/// Run `f` on another thread and fail if it does not finish in time (a lane leaked by a
/// transaction would make the next one wait forever).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} did not finish: a lane was never released"))
}

/// The error type of an application using the heap.
#[derive(Debug)]
enum AppError {
    Tx(TxError),
    Refused(u32),
}

impl From<TxError> for AppError {
    fn from(e: TxError) -> Self {
        AppError::Tx(e)
    }
}

fn alloc_one(heap: &Heap, size: u64) -> PPtr<u8> {
    heap.transaction(|tx| {
        let p = tx.alloc(size)?;
        tx.write(p.offset(), &pattern(size, size.min(256) as usize))?;
        Ok::<_, TxError>(p)
    })
    .unwrap()
}

fn free_one(heap: &Heap, p: PPtr<u8>) {
    heap.transaction(|tx| tx.free(p)).unwrap();
}

/// Free `blocks`, `per_tx` of them in each transaction.
fn free_in_batches(heap: &Heap, blocks: &[PPtr<u8>], per_tx: usize) {
    for batch in blocks.chunks(per_tx) {
        heap.transaction(|tx| {
            for &p in batch {
                tx.free(p)?;
            }
            Ok::<_, TxError>(())
        })
        .unwrap();
    }
}

fn offsets(blocks: &[(u64, u64)]) -> BTreeSet<u64> {
    blocks.iter().map(|b| b.0).collect()
}
