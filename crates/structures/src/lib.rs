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
//! let orders = store.btree_map::<u64, u64>("orders", FastFairConfig::default())?;
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
//! let sessions = store.btree_map::<String, Vec<u8>>("sessions", FastFairConfig::default())?;
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
//! maps are typed ([`store::types`]): fixed-size keys and values of up to 8 bytes stay in the
//! structures' `u64` slots, anything else goes to out-of-line records ([`records`]). The raw structures below
//! stay public for those who place structures themselves and for the crash simulator:
//!
//! * [`cceh`]: CCEH, a write-optimised extendible hash table (FAST'19 CCEH), with the
//!   speculative helper thread of Optane buffering (EuroSys'22), Sec. 4.1.
//! * [`datalog`]: a NOVA-style log-structured object store (NOVA (FAST'16)) with copy-on-write
//!   and embedded writes (NOVA-datalog, Optane guide (FAST'20), Sec. 5.1.2).
//! * [`fastfair`]: FAST&FAIR, a B+-tree with in-place shifts and lock-free readers (FAST'18
//!   FAST&FAIR), with per-shift, FAST and redo-logged shift policies (Optane buffering
//!   (EuroSys'22), Sec. 4.2).
//!
//! * [`records`]: out-of-line records of byte-string keys and values, published by one 8-byte
//!   store and freed crash-safely without a transaction per write, under a CCEH table
//!   ([`records::RecordHashMap`]) or a trie of FAST&FAIR layers ([`records::RecordTreeMap`],
//!   after EuroSys'12 Masstree, Sec. 4).
//!
//! The two `u64` maps, CCEH and FAST&FAIR, share one contract, [`U64Map`].
//!
//! Papers are cited by the short names of the repository's `docs/papers.md`. The structures
//! share one striped lock with reader versions (`sync`, private). `unsafe` appears in three
//! places: `sync::affinity`, which pins the CCEH helper thread through the OS, and two
//! streamings of bytes no other thread can reach (`Pool::nt_write`, whose rule is stated in
//! `pmem_ordering::pool`): the datalog's copy-on-write blocks before they are published, and
//! a write batch's log in the store's write-batch area, which only the batch lock's holder
//! touches.
#![deny(missing_docs)]

pub mod cceh;
pub mod datalog;
pub mod fastfair;
pub mod kind;
pub mod records;
pub mod store;
mod sync;
mod u64map;
pub mod verify;

pub use kind::StructureKind;
pub use records::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use store::{
    thread_persist_counts, BTreeMap, Datalog, Error, HashMap, PersistCounts, Space, Store,
    StoreOptions, WriteBatch,
};
pub use verify::{Finding, Problem, Verification};

// What a user of the `Store` needs, so this crate is the one dependency.
pub use cceh::CcehConfig;
pub use datalog::{DatalogConfig, WriteMode};
pub use fastfair::{FastFairConfig, ShiftPolicy};
pub use pmem_ordering::{Granularity, PoolError};
pub use pmem_undo_log::{FencePolicy, HeapConfig};
// The raw layers, for those who build their own structures or crash-test their code.
pub use pmem_ordering;
pub use pmem_undo_log;

/// The crate README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
pub use u64map::{ReservedKey, U64Map};
