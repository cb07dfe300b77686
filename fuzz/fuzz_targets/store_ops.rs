//! Fuzz the `Store`'s catalog and map handles against the test kit's model, with crash
//! injection.
//!
//! The input is a `pmem_test_kit::fuzz_input::StoreInput`: a set-up (the heap's fence policy:
//! batched, strict, or Themis on a simulated Themis pool; the B+-trees' shift policy; hash map
//! segments of 4 or 8 buckets; the seed of the crash points), then `StoreOp`s on a store of
//! three catalog entries over eight names (five valid, then the empty name, one of 65 bytes and
//! one with a control character): opening each kind of structure by name, `get`, `insert`,
//! `upsert`, `remove` and range scans on the maps with keys 1..=32 and, one time in five, the
//! reserved keys 0 and `u64::MAX`; write batches of up to four changes over the maps,
//! committed or dropped (a crash inside one must leave all of it or none); dropping a name's
//! handle, removing a structure, reopening the store and full checks. The committed seeds (fuzz/seeds/store_ops) are written by
//! `cargo run -p pmem-test-kit --example fuzz_seeds`.
//!
//! The kit's model predicts every result and every error (`InvalidName`, `CatalogFull`,
//! `KindMismatch`, `NotFound`, `InUse`); a full check compares `check_blocks()` (the heap
//! holds exactly the structures' blocks), the names and kinds, and every map's pairs, length
//! and `check()`. The sequence is crashed at a seeded sample of its events (the kit's crash
//! driver): each image is recovered with `Heap::open` and `Store::load`, must pass
//! `check_blocks()`, and must hold the model after the operations that had returned, or after
//! the one that was running too.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{CrashPoints, CrashTest, Images};
use pmem_structures::raw::STORE_LAYOUT;
use pmem_test_kit::fuzz_input::StoreInput;
use pmem_test_kit::store::{crash_ops, StoreSetup};

const POOL_SIZE: u64 = 512 << 10;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 128;
/// Crash points sampled per input.
const CRASH_POINTS: usize = 8;

/// The root object holding the kit's catalog (the same for every set-up), computed once.
fn root_size() -> u64 {
    static ROOT_SIZE: OnceLock<u64> = OnceLock::new();
    *ROOT_SIZE.get_or_init(|| {
        StoreSetup::default()
            .root_size()
            .expect("the catalog's root size")
    })
}

fuzz_target!(|input: StoreInput| {
    let setup = input.setup;
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let store = setup.store();
    let test = CrashTest::new("store-fuzz", store.sim())
        .pool(STORE_LAYOUT, POOL_SIZE, root_size())
        .points(CrashPoints::Sample(CRASH_POINTS))
        .images(Images::Random(2))
        .seed(u64::from(setup.crash_seed))
        .fail_on_unpersisted(true);
    crash_ops(&test, store, ops);
});
