//! The workspace's test kit (dev-only, never published): what the structures' tests and the
//! fuzz targets share, written once.
//!
//! * [`SplitMix64`], the one deterministic generator (re-exported from the simulator, so a
//!   seed printed by a failing test replays the same keys and the same crash images);
//! * [`fixture`]: anonymous and simulated pools, and heaps with the test configurations;
//! * one operation enum per structure, [`cceh::CcehOp`], [`fastfair::FastFairOp`] and
//!   [`datalog::DatalogOp`], each with its std model (`HashMap`, `BTreeMap`, `Vec<u8>` files),
//!   its `apply` to the model, a checked run against the structure, an `Arbitrary` derive for
//!   cargo-fuzz and a proptest strategy (feature `proptest`, on by default);
//! * [`store::StoreOp`], the same for the `Store`: its catalog (names, kinds, every refusal),
//!   its map handles (the reserved keys included), dropped handles, removal and reopening,
//!   against a model of names, kinds, pairs and live handles;
//! * [`records::RecordOp`], the same for the byte-key maps (`Vec<u8>` keys and values, in
//!   records): both map kinds of one store against one `BTreeMap` model, keys of shared
//!   7/14/21-byte prefixes and up to 64 KiB, values up to 48 KiB, reopens and full checks;
//! * [`leafmap::LeafOp`], the same for the raw leaf map (byte keys of four families, values
//!   inline or in records, reopens), with its crash driver;
//! * [`kill`]: the harness of the kill tests: a test re-executed as a child process that
//!   writes a store file, killed with SIGKILL at seeded moments;
//! * [`cases`]: every structure under every policy as one crash case of a chosen length, for
//!   the crash modes that must cover them all; [`undo`] holds the undo log's two workloads;
//! * [`crash`]: the one crash driver around `pmem_ordering::sim::CrashTest`, which fails when
//!   it checked nothing, and the model [`History`] recovered states are judged against
//!   (durable linearizability: every operation that returned before the crash is present, the
//!   interrupted one is all or nothing, nothing else changed).
#![forbid(unsafe_code)]

pub mod cases;
pub mod cceh;
pub mod crash;
pub mod damage;
pub mod datalog;
pub mod fastfair;
pub mod fixture;
pub mod fuzz_input;
pub mod fuzz_seeds;
mod key_value;
pub mod kill;
pub mod leafmap;
mod model;
pub mod records;
pub mod store;
pub mod undo;

pub use crash::{
    crash_store_options, crash_test_outcome, crash_test_outcome_with_recovery, reload_store,
    run_crash_test, run_crash_test_with_recovery, store_is_whole, store_verifies,
    structure_verifies,
};
pub use model::{History, ModelOp, ReservedKeyOp};
pub use pmem_ordering::sim::SplitMix64;

/// The repository README's example (the `Store`), compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct RootReadmeDoctest;
/// The crash simulator's example of docs/crash-testing.md, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/crash-testing.md")]
pub struct CrashTestingDoctest;
