//! Crash-consistent persistent data structures built on `pmem-ordering` and `pmem-undo-log`.
//!
//! * [`cceh`]: CCEH, a write-optimised extendible hash table (Nam et al., FAST'19; seed 001
//!   Sec. 4.1).
//! * [`datalog`]: a NOVA-style log-structured object store with copy-on-write and embedded
//!   writes (Xu and Swanson, FAST'16; NOVA-datalog, seed 000 Sec. 5.1.2).
//! * [`fastfair`]: FAST&FAIR, a B+-tree with in-place shifts and lock-free readers (Hwang et
//!   al., FAST'18), with per-shift, FAST and redo-logged shift policies (seed 001 Sec. 4.2).
#![deny(missing_docs)]

pub mod cceh;
pub mod datalog;
pub mod fastfair;
mod sync;
