//! Persist-ordering primitives for persistent memory, with a crash simulator.
//!
//! ```
//! use pmem_ordering::{Pool, PoolOptions};
//!
//! let pool = Pool::anonymous("example", 1 << 16, &PoolOptions::new())?;
//! let root = pool.root::<[u64; 2]>()?;
//! // Data first, persisted; then the flag that makes it valid.
//! let data = pool.set(root, &[42, 0])?;
//! pool.persist(data);
//! let flag = pool.store_u64(root.offset() + 8, 1)?;
//! pool.persist(flag);
//! assert_eq!(pool.get(root)?, [42, 1]);
//! # Ok::<(), pmem_ordering::PoolError>(())
//! ```
//!
//! On persistent memory a store is not durable until its cache line is written back and a
//! fence orders the write-back, and the order in which stores become durable decides whether a
//! crash leaves a recoverable structure. This crate gives:
//!
//! * [`isa`]: `clwb` / `clflushopt` / `clflush`, `sfence` / `mfence`, `movnti` and streaming
//!   copies, chosen once at run time with fallbacks;
//! * [`barrier`]: typed persist barriers (`Written` -> `Pending` -> `Durable`), non-temporal ->
//!   temporal ordering with a per-thread fence epoch, and the [`PersistModel`] switch
//!   (x86 / Themis / ideal);
//! * [`Pool`]: pools on memory-mapped files (each locked against a second open while a pool
//!   holds it) or anonymous memory, with a checked header, a root object, persistent offset
//!   pointers and granularity detection;
//! * [`backend`]: the one trait every write, flush and fence goes through, with the
//!   [`Hardware`] backend;
//! * [`sim`]: a simulated backend that records every event and a harness that replays every
//!   crash the x86 persistency model allows;
//! * [`stats`]: per-thread counters of stores, flushes and fences.
//!
//! # The persistency model
//!
//! The rules, from the x86 persistency model as summarised in Themis, Sec. II-C (Mahdizadeh
//! Shahri et al., "(Almost) Fence-less Persist Ordering"), and the Themis extension of its
//! Sec. III-B. Papers are cited by the short names of the workspace's `docs/papers.md`.
//!
//! * a naturally aligned 8-byte store is failure-atomic; nothing larger is;
//! * a temporal store is guaranteed durable after `clwb`/`clflushopt` of its line and a later
//!   `sfence` of the same thread, or after `clflush` of its line;
//! * stores to one cache line persist in program order (a line written back carries a prefix of
//!   its stores);
//! * a non-temporal store is guaranteed durable after a later `sfence` of its thread;
//! * non-temporal -> temporal ordering needs a fence on x86, and program order alone under
//!   Themis (same thread only).
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

pub mod backend;
pub mod barrier;
pub mod isa;
mod mem;
pub mod pool;
pub mod sim;
pub mod stats;

pub use backend::{Backend, Granularity, Hardware};
pub use barrier::{Durable, NtOrdering, NtPending, Pending, PersistModel, Written};
pub use isa::{CopyKind, FlushKind, Isa};
pub use pool::{MagicText, PPtr, Pool, PoolError, PoolOptions, UnfinishedFile, WordStores, Words};
pub use stats::{reset_thread_stats, thread_stats, Stats, XPBUFFER_XPLINES, XPLINE};

/// The README's example, compiled and run as a doctest so it cannot go stale.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctest;
