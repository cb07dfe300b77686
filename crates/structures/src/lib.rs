//! Crash-consistent persistent data structures for persistent memory, named in one pool file.
//!
//! ```
//! use pmem_structures::{FastFairConfig, Granularity, Store, StoreOptions};
//!
//! # fn main() -> Result<(), pmem_structures::Error> {
//! // In DRAM for the example; `Store::open_or_create(path, size, &options)` for a pool file.
//! let options = StoreOptions::new().granularity(Granularity::Emulated);
//! let store = Store::anonymous(16 << 20, &options)?;
//! let users = store.hash_map::<u64, u64>("users")?;
//! let orders = store.btree_map::<u64, u64>("orders")?;
//! users.insert(7, 700)?; // durable when it returns
//! for order in [30, 10, 20] {
//!     orders.insert(order, order * 2)?;
//! }
//! assert_eq!(users.get(7)?, Some(700));
//! let scan: Vec<(u64, u64)> = orders.range(10..=20).collect::<Result<_, _>>()?;
//! assert_eq!(scan, [(10, 20), (20, 40)]);
//! assert_eq!(store.names(), ["orders", "users"]);
//!
//! // Byte strings and other wide types live in out-of-line records.
//! let sessions = store.btree_map::<String, Vec<u8>>("sessions")?;
//! sessions.insert("user:ada", b"token-1")?;
//! sessions.insert("user:alan", b"token-2")?;
//! sessions.insert("admin:root", b"token-0")?;
//! let users: Vec<String> = sessions
//!     .range("user:".."user;")
//!     .map(|pair| pair.map(|(user, _)| user))
//!     .collect::<Result<_, _>>()?;
//! assert_eq!(users, ["user:ada", "user:alan"]);
//! # Ok(())
//! # }
//! ```
//!
//! A [`Store`] owns its pool file and the file's lock (a second open is refused, never allowed
//! to corrupt it), an undo-log heap and a persistent catalog of named structures. Its handles
//! ([`HashMap`], [`BTreeMap`], [`Datalog`]) are cheap to clone and `Send + Sync + 'static`;
//! they read everything the store records (policies, sizes, key and value types) at open. The
//! maps are typed ([`types`]): fixed-size keys and values of up to 8 bytes stay in the
//! structures' `u64` slots, anything else goes to out-of-line records. Several writes become
//! durable and visible together in a [`WriteBatch`]. [`Store::verify`] and [`verify_pool`]
//! check a store's every structure offline.
//!
//! The crate root is what a service needs: the store, its options ([`StoreOptions`] and the
//! structures' configurations), the typed handles and their iterators, the key and value
//! traits, the one [`Error`], verification, the store's space and limits. The structures under
//! it, and the layers under them, are in [`raw`], for those who place structures in a heap of
//! their own or crash-test their code.
//!
//! Papers are cited by the short names of the repository's `docs/papers.md`. The structures
//! share one striped lock with reader versions (`sync`, private). `unsafe` is kept to what
//! persistent memory and speed need, each block with its SAFETY comment: the unchecked word
//! loads of CCEH's and FAST&FAIR's hot paths (a segment's or node's bounds checked once when
//! its view is made), the record tree's layer references (kept alive by the map's epoch),
//! `sync::readers`' `membarrier`, `sync::affinity`, which pins the CCEH helper thread through
//! the OS, and [`Store::raw_heap`], whose rule is stated there. Streaming stores need none:
//! `Pool::nt_write` is safe (whole words, atomic).
#![deny(missing_docs)]

pub mod raw;
mod store;
mod sync;

// The raw modules by their short names inside the crate.
use raw::{cceh, datalog, fastfair, kind, leafmap, records, u64map, verify};

pub use kind::StructureKind;
pub use records::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use store::types;
pub use store::{
    thread_persist_counts, verify_pool, BTreeEntries, BTreeIter, BTreeLayout, BTreeMap, Datalog,
    EncodedRange, Entries, Error, HashEntries, HashIter, HashMap, LentPair, PersistCounts, Space,
    Store, StoreFinding, StoreOptions, StoreProblem, StoreVerification, StructureVerification,
    WriteBatch, MAX_BATCH_CHANGES, MAX_NAME_BYTES, MAX_STRUCTURES,
};

// The options' parts, so this crate is a store user's one dependency.
pub use cceh::CcehConfig;
pub use datalog::{DatalogConfig, WriteMode};
pub use fastfair::{FastFairConfig, ShiftPolicy};
pub use leafmap::LeafMapConfig;
pub use pmem_ordering::{Granularity, PoolError};
pub use pmem_undo_log::{FencePolicy, HeapConfig};

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
