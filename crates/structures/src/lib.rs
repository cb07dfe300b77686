//! Crash-consistent persistent data structures built on `pmem-ordering` and `pmem-undo-log`.
//!
//! * [`cceh`]: CCEH, a write-optimised extendible hash table (Nam et al., FAST'19; seed 001
//!   Sec. 4.1).
//! * [`fastfair`]: FAST&FAIR, a B+-tree with in-place shifts and lock-free readers (Hwang et
//!   al., FAST'18), with per-shift, FAST and redo-logged shift policies (seed 001 Sec. 4.2).
#![deny(missing_docs)]

pub mod cceh;
pub mod fastfair;
