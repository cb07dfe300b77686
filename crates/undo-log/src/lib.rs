//! Undo-log transactions, fence policies and a crash-safe persistent allocator.
//!
//! A [`Heap`] formats a [`pmem_ordering::Pool`] with per-thread *lanes*, each an array-based
//! undo log, and an allocator. [`Heap::transaction`] runs a closure as one failure-atomic
//! transaction: [`Tx::write`] snapshots the bytes it overwrites into the lane's log with
//! non-temporal stores before writing the data with temporal stores; commit flushes the data,
//! fences, and invalidates the log with one 8-byte store, persisted before returning (seed 004,
//! Shahri et al., Sec. II-A). An `Err` or a panic rolls back; so does [`Heap::open`] for every
//! lane a crash left mid-transaction.
//!
//! The [`FencePolicy`] decides how the log-before-data ordering is paid for, which is where the
//! fences of undo logging go (seed 004 Sec. II-D/E): *strict* fences each entry, *batched*
//! shares one fence among a group of entries through the nt -> t tokens of
//! [`pmem_ordering::barrier`], *themis* relies on the Themis model's program-order rule, and
//! *ideal* issues no such fence at all (an upper bound, never crash safe).
//!
//! The allocator ([`Tx::alloc`], [`Tx::free`]) keeps size classes in chunks with persistent
//! bitmaps and runs of chunks for large blocks; its metadata changes go through the same
//! transaction, so a crash can neither leak a block nor hand it out twice.
#![deny(missing_docs)]

mod alloc;
mod error;
mod heap;
pub mod lane;
pub mod layout;
pub mod object;
mod tx;

pub use alloc::{AllocStats, MIN_CLASS};
pub use error::TxError;
pub use heap::{Heap, TxStats};
pub use layout::{HeapConfig, Layout};
pub use tx::{FencePolicy, Tx};
