//! Fuzz the byte-key maps (`hash_map::<Vec<u8>, Vec<u8>>` and `btree_map::<Vec<u8>,
//! Vec<u8>>`, kept in out-of-line records) against a `BTreeMap<Vec<u8>, Vec<u8>>` model.
//!
//! The input is a `pmem_test_kit::fuzz_input::RecordInput`: a set-up (the ordered map's shift
//! policy, hash segments of 4 or 8 buckets, tree nodes of 128 or 256 bytes, the seed of the
//! crash points), then `RecordOp`s run on both maps of one store on an anonymous pool:
//! inserts, upserts, removes, lookups, range scans of the ordered map between any two bounds
//! (included, excluded or unbounded, crossed ones too), reopens and full checks. Keys are a tail of up to
//! three bytes of {0x00, 'a', 'b', 0xff} alone (the empty key among them) or after a prefix of
//! 7, 14, 21 or 221 bytes shared with other keys (the ordered map's layers), or padded to
//! exactly 64 KiB, or to one byte more (writes refused with `KeyTooLarge`); values run from
//! empty to 48 KiB.
//! The committed seeds (fuzz/seeds/record_maps) are written by
//! `cargo run -p pmem-test-kit --example fuzz_seeds`.
//!
//! Every result is predicted by the model; after each operation both maps' `len()` is the
//! model's. The store is reopened (`Heap::open`, `Store::load` on the same pool) halfway
//! through; at the end both maps' `check()` counts the model's pairs, their walks hold them
//! (the ordered map's in key order), `store.check_blocks()` finds exactly the structures'
//! blocks (no leak), and all of it again after a last reopen.
//!
//! Then the input's first 24 small operations (no 64 KiB key, no value past 4 KiB) run again
//! on a simulated 2 MiB pool, crashed at a seeded sample of 6 events (the kit's crash driver):
//! each image recovers with `Heap::open` and `Store::load`, must pass `check_blocks()`, and
//! each map must check and hold the model after the operations that had returned, or after
//! the one that was running too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pmem_test_kit::fuzz_input::RecordInput;
use pmem_test_kit::records::{crash_small_ops, run_record_ops};

/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 192;
/// Crash points sampled per input.
const CRASH_POINTS: usize = 6;

fuzz_target!(|input: RecordInput| {
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let setup = input.setup.records();
    if let Err(e) = run_record_ops(setup, ops) {
        panic!("{e}");
    }
    crash_small_ops(setup, ops, u64::from(input.setup.crash_seed), CRASH_POINTS);
});
