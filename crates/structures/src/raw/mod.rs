//! The engine room: the structures under the [`crate::Store`], for those who place structures
//! in a heap of their own or crash-test their code in the simulator. A service needs none of
//! it: the crate root has the store, its options, its handles and its errors.
//!
//! * [`cceh`]: CCEH, a write-optimised extendible hash table (FAST'19 CCEH), with the
//!   speculative helper thread of Optane buffering (EuroSys'22), Sec. 4.1.
//! * [`datalog`]: a NOVA-style log-structured object store (NOVA (FAST'16)) with copy-on-write
//!   and embedded writes (NOVA-datalog, Optane guide (FAST'20), Sec. 5.1.2).
//! * [`fastfair`]: FAST&FAIR, a B+-tree with in-place shifts and lock-free readers (FAST'18
//!   FAST&FAIR), with per-shift, FAST and redo-logged shift policies (Optane buffering
//!   (EuroSys'22), Sec. 4.2).
//! * [`records`]: out-of-line records of byte-string keys and values, published by one 8-byte
//!   store and freed crash-safely without a transaction per write, under a CCEH table
//!   ([`records::RecordHashMap`]) or a trie of FAST&FAIR layers ([`records::RecordTreeMap`],
//!   after EuroSys'12 Masstree, Sec. 4).
//! * [`leafmap`]: an ordered map of byte strings kept inline in persistent leaves, with
//!   fingerprints and its inner nodes in DRAM rebuilt at open (after SIGMOD'16 FPTree), whose
//!   scans read consecutive slots (not yet served by the store).
//! * [`verify`]: each structure's offline check, which the store's verification runs.
//! * [`kind`]: the kinds of structure a store names, and their root blocks' magic numbers.
//!
//! The two `u64` maps, CCEH and FAST&FAIR, share one contract, [`U64Map`]. The layers below
//! are re-exported as they are: [`pmem_ordering`] (pools, persist barriers, the crash
//! simulator) and [`pmem_undo_log`] (the heap, its transactions and allocator).
//!
//! Unlike the store, these types hand out their heap, whose pool can be written by anyone who
//! holds it: a structure's streaming stores (the datalog's copy-on-write blocks, a lane's log)
//! rely on no such write reaching their bytes while they run.

pub mod cceh;
pub mod datalog;
pub mod fastfair;
pub mod kind;
pub mod leafmap;
pub mod records;
pub(crate) mod u64map;
pub mod verify;

pub use crate::store::STORE_LAYOUT;
pub use pmem_ordering;
pub use pmem_undo_log;
pub use u64map::{ReservedKey, U64Map};
