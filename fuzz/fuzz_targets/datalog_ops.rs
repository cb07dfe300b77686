//! Fuzz the datalog store against a model of `Vec<u8>` files, then crash it: recovery from
//! crash images at sampled events must give the model before or after the interrupted
//! operation, and a heap holding exactly the store's blocks.
//!
//! The input is a `pmem_test_kit::fuzz_input::DatalogInput`: a set-up (the store's write mode:
//! copy-on-write, embedded or auto; eager log cleaning, folding after 4 embeds and compacting
//! below 60% live from 2 pages; the seed of the crash points), then `DatalogOp`s on files
//! `f0`..`f3` of a store on a simulated pool: writes (1-16 bytes, 64-byte steps, unaligned
//! ends, or quarter-page steps, at offsets below three pages, in the store's mode or a named
//! one), truncates, renames, removes and creates. The committed seeds (fuzz/seeds/datalog_ops)
//! are written by `cargo run -p pmem-test-kit --example fuzz_seeds`.
//!
//! Operations on missing files must fail with `NotFound`, creating or renaming onto an
//! existing name with `Exists`, and change nothing. Every result is compared with the model,
//! and every file is read back in full after every operation (the kit's `datalog::crash_ops`,
//! which also checks that a recovered store takes one more write).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimConfig};
use pmem_test_kit::datalog::crash_ops;
use pmem_test_kit::fuzz_input::DatalogInput;

const POOL_SIZE: u64 = 256 << 10;
const ROOT_SIZE: u64 = 1024;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 48;
/// Crash points sampled per input.
const CRASH_POINTS: usize = 3;

fuzz_target!(|input: DatalogInput| {
    let setup = input.setup;
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let test = CrashTest::new("datalog-fuzz", SimConfig::x86())
        .pool("datalog-fuzz", POOL_SIZE, ROOT_SIZE)
        .points(CrashPoints::Sample(CRASH_POINTS))
        .images(Images::Random(2))
        .seed(u64::from(setup.crash_seed));
    crash_ops(&test, setup.policy(), ops);
});
