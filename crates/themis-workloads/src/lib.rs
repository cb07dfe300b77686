//! The Themis paper's transaction workloads (Themis, Table II) as small persistent structures
//! built on the transactions of [`pmem_undo_log`].
//!
//! The Themis paper evaluates its fence-less ordering on undo-logging workloads whose
//! transactions range from one store (TATP's `update_location`) to over a hundred (SPS)
//! (Themis, Sec. V-A, Table II, Fig. 8). This crate rebuilds them on a [`Heap`], as the
//! benchmark driver's workload section and its tests use them; they are not part of the
//! undo-log library, and they use only its public API.
//!
//! | module (file) | Themis name | one operation |
//! |---|---|---|
//! | [`sps`] (`sps.rs`) | SPS | swap pairs of entries of an array (many per transaction) |
//! | [`list`] (`list.rs`) | LL | insert or delete a node of a sorted singly linked list |
//! | [`hashmap`] (`hashmap.rs`) | Hashmap | insert or delete an entry of a chained hash map |
//! | [`queue`] (`queue.rs`) | CQ | enqueue or dequeue a node of a linked FIFO queue |
//! | [`tatp`] (`tatp.rs`) | TATP | `update_location`: one store to a subscriber record |
//! | [`tpcc`] (`tpcc.rs`) | TPCC | `new_order`: a district counter, an order and its lines, stock levels |
//! | [`ctree`] (`ctree.rs`) | CTree | insert or delete a key of a crit-bit tree |
//! | [`cache`] (`cache.rs`) | PC | update a key's value array in place in a set-associative hash table |
//! | [`rbtree`] (`rbtree.rs`) | RB | insert or delete a key of a red-black tree (with its rotations) |
//!
//! The helpers every structure shares (walk bounds, the corruption error, word reads) are in
//! this file. Their model checks are in `tests/integration/workloads.rs` (CTree, PC and RB, with proptest
//! sequences, in `tests/integration/trees_and_cache.rs`), their crash tests in `tests/integration/crash_workloads.rs`.
//!
//! # Shape shared by every structure
//!
//! * A structure lives from a *root*: a few words at an offset the caller chooses (usually in
//!   the pool's root object; each type's `ROOT_BYTES` says how many), written by `create` and
//!   read back by `open`. Everything else (arrays, nodes) is allocated from the heap, so after
//!   recovery [`Heap::check_heap`] lists exactly the blocks the structure's `blocks()` reaches.
//! * Every update runs in [`Heap::transaction`] and writes only through [`pmem_undo_log::Tx`], so under
//!   [`pmem_undo_log::FencePolicy::Strict`] and [`pmem_undo_log::FencePolicy::Batched`] a crash leaves each
//!   structure as it was before or after the interrupted operation. Calls made inside an open
//!   transaction of the same heap join it (nested transactions flatten), so several operations
//!   can be made one atomic unit by calling them inside `heap.transaction(..)`.
//! * Each operation snapshots everything it will overwrite *before* its first write, so under
//!   the batched policy its log entries share one fence (Themis, Sec. II-D: the fences that only
//!   order a log entry before its data are the ones Themis removes).
//! * Pointer walks are bounded by the number of blocks the pool can hold, so a damaged pool
//!   (a cycle) gives [`TxError::CorruptHeap`] instead of a hang.
//! * Handles are not synchronized: two threads must not update one structure at once (wrap it
//!   in a lock); the heap itself may be shared.
//!
//! Handles hold a `&Heap<B>`, so they work on every backend: a file pool on hardware, an
//! anonymous pool in tests, or the simulated pool the crash harness hands a workload.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::{TxError, MIN_CLASS};

pub mod cache;
pub mod ctree;
pub mod hashmap;
pub mod list;
pub mod queue;
pub mod rbtree;
pub mod sps;
pub mod tatp;
pub mod tpcc;

pub use cache::PersistentCache;
pub use ctree::CritBitTree;
pub use hashmap::ChainedHashMap;
pub use list::List;
pub use queue::Queue;
pub use rbtree::RedBlackTree;
pub use sps::Sps;
pub use tatp::Tatp;
pub use tpcc::Tpcc;

#[cfg(doc)]
use pmem_undo_log::Heap;

/// Most pointer-chasing steps a walk of `pool` can make without revisiting a block: every block
/// takes at least [`MIN_CLASS`] bytes.
pub(crate) fn step_limit<B: Backend>(pool: &Pool<B>) -> u64 {
    pool.size() / MIN_CLASS + 1
}

/// The error for a structure that cannot be right.
pub(crate) fn corrupt(what: &str, root: u64, detail: impl std::fmt::Display) -> TxError {
    TxError::CorruptHeap {
        reason: format!("the {what} at root {root:#x}: {detail}"),
    }
}

/// Read `N` consecutive little-endian words at `offset`.
pub(crate) fn words<B: Backend, const N: usize>(
    pool: &Pool<B>,
    offset: u64,
) -> Result<[u64; N], TxError>
where
    [u64; N]: bytemuck::Pod,
{
    Ok(pool.read::<[u64; N]>(offset)?)
}
