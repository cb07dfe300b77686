//! DRAM synchronisation shared by the structures: striped writer locks with reader versions
//! and per-stripe key counts ([`Stripes`]), a structure version whose odd value also
//! serialises the changes that free nodes or move a root ([`SeqVersion`]), lock-free read
//! sections whose reclaimer pays the barrier
//! ([`readers`]), writer gates that let a write batch keep a map's single writers out for the
//! same price (`gate`), and thread placement for helper threads ([`affinity`]). Nothing here
//! touches persistent memory: locks and versions live in DRAM and are rebuilt empty at every
//! open.
//!
//! Under `--cfg loom` the atomics are loom's ([`primitives`]) and [`model`] checks the reader
//! protocols (versions, and read sections against their grace periods) exhaustively; see
//! that module for the command.

pub(crate) mod affinity;
mod gate;
#[cfg(all(test, loom))]
mod model;
mod primitives;
pub(crate) mod readers;
mod stripes;
mod version;

pub(crate) use gate::{WriteSection, WriterGate};
pub(crate) use stripes::{set_bits, StripeGuard, StripeReader, StripeReaders, StripeSet, Stripes};
pub(crate) use version::SeqVersion;
