//! Fuzz the leaf map (`pmem_structures::raw::leafmap`) against a `BTreeMap<Vec<u8>, Vec<u8>>`
//! model, with crash injection.
//!
//! The input is a `pmem_test_kit::leafmap::LeafMapInput`: the seed of the crash points,
//! then `LeafOp`s on a map of leaves of 4 slots of 64 bytes on a simulated pool: inserts,
//! upserts, removes, lookups, scans between two keys stopped after a few pairs, and reopens
//! (the heap and the map opened afresh). Keys come from four families (one byte, `user:NNNN`,
//! 61 bytes sharing 60, runs of zero bytes), values from empty to 460 bytes, so pairs move
//! between their slot and a record of their own. The committed seeds (fuzz/seeds/leaf_map) are
//! written by `cargo run -p pmem-test-kit --example fuzz_seeds`.
//!
//! Every result and the map's length are compared with the model while the sequence runs, and
//! the simulator must have seen every store persisted before its operation returned. The
//! sequence is crashed at a seeded sample of its events (the kit's crash driver): each image
//! recovers with `Heap::open` and `LeafMap::open`, and must hold, in key order, the model after
//! the operations that had returned, or after the one that was running too; a lookup must find
//! every pair, `verify()` must find nothing and the heap must hold exactly the map's leaves and
//! records.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimConfig};
use pmem_test_kit::leafmap::{crash_ops, LeafMapInput, SMALL_LEAVES};

const POOL_SIZE: u64 = 512 << 10;
const ROOT_SIZE: u64 = 1024;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 256;
/// Crash points sampled per input.
const CRASH_POINTS: usize = 16;

fuzz_target!(|input: LeafMapInput| {
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let test = CrashTest::new("leafmap-fuzz", SimConfig::x86())
        .pool("leafmap-fuzz", POOL_SIZE, ROOT_SIZE)
        .points(CrashPoints::Sample(CRASH_POINTS))
        .images(Images::Random(1))
        .seed(u64::from(input.setup.crash_seed))
        .fail_on_unpersisted(true);
    crash_ops(&test, SMALL_LEAVES, ops);
});
