//! Crash-consistent persistent data structures built on `pmem-ordering` and `pmem-undo-log`.
//!
//! * [`cceh`]: CCEH, a write-optimised extendible hash table (FAST'19 CCEH), with the
//!   speculative helper thread of Optane buffering (EuroSys'22), Sec. 4.1.
//! * [`datalog`]: a NOVA-style log-structured object store (NOVA (FAST'16)) with copy-on-write
//!   and embedded writes (NOVA-datalog, Optane guide (FAST'20), Sec. 5.1.2).
//! * [`fastfair`]: FAST&FAIR, a B+-tree with in-place shifts and lock-free readers (FAST'18
//!   FAST&FAIR), with per-shift, FAST and redo-logged shift policies (Optane buffering
//!   (EuroSys'22), Sec. 4.2).
//!
//! The two `u64` maps, CCEH and FAST&FAIR, share one contract, [`U64Map`].
//!
//! Papers are cited by the short names of the repository's `docs/papers.md`. The structures
//! share one striped lock with reader versions (`sync`, private). `unsafe` appears in two
//! places: `sync::affinity`, which pins the CCEH helper thread through the OS, and the
//! datalog's streaming of a copy-on-write block that no other thread can reach yet
//! (`Pool::nt_write`, whose rule is stated in `pmem_ordering::pool`).
#![deny(missing_docs)]

pub mod cceh;
pub mod datalog;
pub mod fastfair;
pub mod kind;
mod sync;
mod u64map;

pub use kind::StructureKind;
pub use u64map::{ReservedKey, U64Map};
