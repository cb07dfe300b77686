//! Fuzz the FAST&FAIR tree against a `BTreeMap` model, with crash injection.
//!
//! The input is a `pmem_test_kit::fuzz_input::FastFairInput`: a set-up (the shift policy:
//! per-shift, FAST or redo; nodes of 128 or 256 bytes, one or three entry lines; the seed of
//! the crash points), then `FastFairOp`s on keys 0..128 of a tree on a simulated pool: inserts,
//! upserts, removes, lookups, range scans and operations on the reserved key `u64::MAX`, which
//! must be refused and change nothing. The committed seeds (fuzz/seeds/fastfair_ops), written
//! by `cargo run -p pmem-test-kit --example fuzz_seeds`, grow trees of small nodes through
//! splits, then shrink them through merges.
//!
//! Every result and the tree's length are compared with the model while the sequence runs, and
//! the simulator must have seen every store persisted before its operation returned. The
//! sequence is crashed at a seeded sample of its events (the kit's crash driver around the
//! simulator's `CrashTest`, random crash images besides the two extremes): each image is
//! recovered with `Heap::open` and `FastFair::open`, and must hold, in key order, the model
//! after the operations that had returned, or after the one that was running too; the tree
//! must be well formed and the heap must hold exactly its nodes and redo area.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimConfig};
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_test_kit::fastfair::crash_ops;
use pmem_test_kit::fuzz_input::FastFairInput;

const POOL_SIZE: u64 = 512 << 10;
const ROOT_SIZE: u64 = 1024;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 256;
/// Crash points sampled per input.
const CRASH_POINTS: usize = 24;

fuzz_target!(|input: FastFairInput| {
    let setup = input.setup;
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let config = FastFairConfig {
        node_size: setup.node_size(),
        policy: setup.policy,
    };
    let test = CrashTest::new("fastfair-fuzz", SimConfig::x86())
        .pool("fastfair-fuzz", POOL_SIZE, ROOT_SIZE)
        .points(CrashPoints::Sample(CRASH_POINTS))
        .images(Images::Random(2))
        .seed(u64::from(setup.crash_seed))
        .fail_on_unpersisted(true);
    crash_ops(&test, config, ops);
});
