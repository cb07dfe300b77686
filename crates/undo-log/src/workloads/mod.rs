//! The Themis workloads (seed 004 Table II) as small persistent structures built on
//! transactions.
//!
//! Seed 004 evaluates its fence-less ordering on undo-logging workloads whose transactions range
//! from one store (TATP's `update_location`) to over a hundred (SPS) (Sec. V-A, Table II,
//! Fig. 8). These modules rebuild them on a [`Heap`]:
//!
//! | module | seed 004 name | one operation |
//! |---|---|---|
//! | [`sps`] | SPS | swap pairs of entries of an array (many per transaction) |
//! | [`list`] | LL | insert or delete a node of a sorted singly linked list |
//! | [`hashmap`] | Hashmap | insert or delete an entry of a chained hash map |
//! | [`queue`] | CQ | enqueue or dequeue a node of a linked FIFO queue |
//! | [`tatp`] | TATP | `update_location`: one store to a subscriber record |
//! | [`tpcc`] | TPCC | `new_order`: a district counter, an order and its lines, stock levels |
//!
//! # Shape shared by every structure
//!
//! * A structure lives from a *root*: a few words at an offset the caller chooses (usually in
//!   the pool's root object; each type's `ROOT_BYTES` says how many), written by `create` and
//!   read back by `open`. Everything else (arrays, nodes) is allocated from the heap, so after
//!   recovery [`Heap::check_heap`] lists exactly the blocks the structure's `blocks()` reaches.
//! * Every update runs in [`Heap::transaction`] and writes only through [`crate::Tx`], so under
//!   [`crate::FencePolicy::Strict`] and [`crate::FencePolicy::Batched`] a crash leaves each
//!   structure as it was before or after the interrupted operation. Calls made inside an open
//!   transaction of the same heap join it (nested transactions flatten), so several operations
//!   can be made one atomic unit by calling them inside `heap.transaction(..)`.
//! * Each operation snapshots everything it will overwrite *before* its first write, so under
//!   the batched policy its log entries share one fence (seed 004 Sec. II-D: the fences that only
//!   order a log entry before its data are the ones Themis removes).
//! * Pointer walks are bounded by the number of blocks the pool can hold, so a damaged pool
//!   (a cycle) gives [`TxError::CorruptHeap`] instead of a hang.
//! * Handles are not synchronized: two threads must not update one structure at once (wrap it
//!   in a lock); the heap itself may be shared.
//!
//! Handles hold a `&Heap<B, P>`, so they work on every backend and pool holder: a file pool on
//! hardware, an anonymous pool in tests, or the `&Pool<SimBackend>` the crash harness hands a
//! workload.

use pmem_ordering::{Backend, Pool};

use crate::{TxError, MIN_CLASS};

pub mod hashmap;
pub mod list;
pub mod queue;
pub mod sps;
pub mod tatp;
pub mod tpcc;

pub use hashmap::ChainedHashMap;
pub use list::List;
pub use queue::Queue;
pub use sps::Sps;
pub use tatp::Tatp;
pub use tpcc::Tpcc;

#[cfg(doc)]
use crate::Heap;

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
