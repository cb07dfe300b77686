//! DRAM synchronisation shared by the structures: striped writer locks with reader versions
//! and per-stripe key counts ([`Stripes`]), and thread placement for helper threads
//! ([`affinity`]). Nothing here touches persistent memory: locks and versions live in DRAM and
//! are rebuilt empty at every open.

pub(crate) mod affinity;
mod stripes;

pub(crate) use stripes::{StripeGuard, Stripes};
