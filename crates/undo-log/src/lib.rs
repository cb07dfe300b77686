//! Undo-log transactions, fence policies and a crash-safe persistent allocator.
//!
//! ```
//! use pmem_ordering::{Pool, PoolOptions};
//! use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = Pool::anonymous("accounts", 8 << 20, &PoolOptions::new())?;
//! let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
//! let (a, b) = (heap.pool().root_offset(), heap.pool().root_offset() + 8);
//! heap.transaction(|tx| tx.write_value(a, &100u64))?;
//! // Move 30 from one account to the other: both writes persist, or neither does.
//! heap.transaction(|tx| {
//!     tx.write_value(a, &70u64)?;
//!     tx.write_value(b, &30u64)
//! })?;
//! assert_eq!((heap.pool().load_u64(a)?, heap.pool().load_u64(b)?), (70, 30));
//! # Ok(())
//! # }
//! ```
//!
//! A [`Heap`] formats a [`pmem_ordering::Pool`] with per-thread *lanes*, each an array-based
//! undo log, and an allocator. [`Heap::transaction`] runs a closure as one failure-atomic
//! transaction: [`Tx::write`] snapshots the bytes it overwrites into the lane's log with
//! non-temporal stores before writing the data with temporal stores; commit flushes the data,
//! fences, and invalidates the log with one 8-byte store, persisted before returning (Themis,
//! Sec. II-A). An `Err` or a panic rolls back; so does [`Heap::open`] for every lane a crash
//! left mid-transaction.
//!
//! The [`FencePolicy`] decides how the log-before-data ordering is paid for, which is where the
//! fences of undo logging go (Themis, Sec. II-D, II-E): *strict* fences each entry, *batched*
//! shares one fence among a group of entries through the nt -> t tokens of
//! [`pmem_ordering::barrier`], *themis* relies on the Themis model's program-order rule, and
//! *ideal* issues no such fence at all (an upper bound, never crash safe).
//!
//! The allocator ([`Tx::alloc`], [`Tx::free`]) keeps size classes in chunks with persistent
//! bitmaps and runs of chunks for large blocks; its metadata changes go through the same
//! transaction, so a crash can neither leak a block nor hand it out twice. Record blocks
//! ([`Heap::reserve_record`] and what follows it) are allocated outside transactions, for
//! structures that publish one block per operation with a fence of their own.
//!
//! # Where things are
//!
//! | file | owns |
//! |---|---|
//! | `heap.rs` | [`Heap`]: create and open (recovery of every lane at open), the lane pool, running a transaction (nesting, commit or abort), [`TxStats`] |
//! | `heap/records.rs` | the [`Heap`]'s record-block API and the protocol a structure follows with it |
//! | `tx.rs` | [`Tx`]: snapshot, write, alloc and free inside a transaction; commit and abort of one transaction |
//! | `lane/mod.rs` | the lane protocol, its one owner: begin, append, commit, roll back (after an abort, and after a crash at open), the generation |
//! | `lane/entry.rs` | the on-media format of a log entry, and the scan that finds a generation's entries |
//! | `policy.rs` | [`FencePolicy`] |
//! | `layout.rs` | [`HeapConfig`], [`Layout`]: the superblock and where the lanes and the allocator live |
//! | `alloc/` | the persistent allocator (its `mod.rs` says which file holds what) |
//! | `object.rs` | in-place and out-of-place object updates built on transactions |
//! | `error.rs` | [`TxError`] |
//!
//! So a transaction is rolled back after an `Err` or a panic by `tx.rs` (abort) through
//! `lane/mod.rs`, and after a crash by [`Heap::open`] through `lane/mod.rs` too.
//!
//! The modules import each other one way only, a DAG (each also uses `error`):
//!
//! ```text
//! object -> heap
//! heap   -> tx, alloc, layout, policy
//! tx     -> alloc, lane, policy
//! alloc  -> layout
//! layout -> lane
//! lane, policy: nothing else
//! ```
// No unsafe code here: every pool access, the lane log's streaming stores included, is safe.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod alloc;
mod error;
mod heap;
mod lane;
mod layout;
pub mod object;
mod policy;
mod tx;

pub use alloc::{AllocStats, RecordBlock, MIN_CLASS};
pub use error::TxError;
pub use heap::{Heap, TxStats};
pub use layout::{HeapConfig, Layout};
pub use policy::FencePolicy;
pub use tx::Tx;
