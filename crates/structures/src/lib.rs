//! Crash-consistent persistent data structures built on `pmem-ordering` and `pmem-undo-log`.
//!
//! * [`cceh`]: CCEH, a write-optimised extendible hash table (Nam et al., FAST'19; seed 001
//!   Sec. 4.1).
#![deny(missing_docs)]

pub mod cceh;
