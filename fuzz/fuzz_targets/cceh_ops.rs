//! Fuzz the CCEH table against a `HashMap` model, then reopen it from crash images.
//!
//! The input is a `pmem_test_kit::fuzz_input::CcehInput`: a set-up (the heap's fence policy:
//! batched, strict, or Themis on a simulated Themis pool; segments of 4 or 8 buckets, 8 making
//! full windows displace keys before they split; whether to reopen the current image too),
//! then `CcehOp`s on keys 1..=64 of a table with tiny segments, so a few keys split a segment
//! and double the directory: inserts, upserts, removes, lookups, batches (with and without the
//! helper thread and key 0) and operations on the reserved key 0, which must be refused and
//! change nothing. The committed seeds (fuzz/seeds/cceh_ops) are written by
//! `cargo run -p pmem-test-kit --example fuzz_seeds`.
//!
//! Every result and the table's length are compared with the model, and after the sequence the
//! simulator must have seen all its stores persisted (no pmemcheck-style `Unpersisted`
//! finding). Each operation persists before it returns, so the persisted image (and with the
//! set-up's flag the current one), opened as a fresh pool (`Heap::open` rolls back nothing,
//! `Cceh::open` checks the directory), must hold exactly the model, and the heap exactly the
//! table's directory and segments.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pmem_ordering::sim::{Finding, SimConfig};
use pmem_ordering::Pool;
use pmem_structures::raw::cceh::{Cceh, CcehConfig};
use pmem_test_kit::cceh::{check_table, run_all, CcehModel, FUZZ_KEYS};
use pmem_test_kit::fixture::{simulated_heap, simulated_pool};
use pmem_test_kit::fuzz_input::CcehInput;
use pmem_undo_log::{FencePolicy, Heap};

const LAYOUT: &str = "cceh-fuzz";
const POOL_SIZE: u64 = 64 << 10;
const ROOT_SIZE: u64 = 1024;
/// Operations run at most (the rest of a longer input is ignored).
const MAX_OPS: usize = 512;

/// Open `image` as a pool, heap and table, and check it holds exactly `model`.
fn check_image(image: &[u8], what: &str, sim: SimConfig, policy: FencePolicy, model: &CcehModel) {
    let pool = Pool::from_image(image, Some(LAYOUT), sim)
        .unwrap_or_else(|e| panic!("{what}: the pool does not open: {e}"));
    let heap = Heap::open(pool).unwrap_or_else(|e| panic!("{what}: the heap does not open: {e}"));
    assert_eq!(
        heap.policy(),
        policy,
        "{what}: the heap reopened under another policy"
    );
    let table = Cceh::open(&heap, heap.pool().root_offset())
        .unwrap_or_else(|e| panic!("{what}: the table does not open: {e}"));
    let contents =
        check_table(&heap, &table, 1..=FUZZ_KEYS).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(&contents, model, "{what}: contents differ from the model");
}

fuzz_target!(|input: CcehInput| {
    let setup = input.setup;
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let sim = setup.sim();
    let pool = simulated_pool(LAYOUT, POOL_SIZE, ROOT_SIZE, sim);
    let heap = simulated_heap(&pool, setup.policy);
    let mut model = CcehModel::new();
    {
        let buckets_per_segment = if setup.wide_segments { 8 } else { 4 };
        let config = CcehConfig {
            buckets_per_segment,
        };
        let table = Cceh::create(&heap, pool.root_offset(), config).expect("create the table");
        pool.operation_completed();
        run_all(&table, &pool, ops, &mut model).unwrap_or_else(|e| panic!("{e}"));
        let unpersisted: Vec<String> = pool
            .sim()
            .findings()
            .iter()
            .filter(|f| matches!(f, Finding::Unpersisted { .. }))
            .map(|f| f.to_string())
            .collect();
        assert!(unpersisted.is_empty(), "{unpersisted:?}");
    }

    check_image(
        &pool.sim().persisted_image(),
        "the persisted image",
        sim,
        setup.policy,
        &model,
    );
    if setup.check_current_image {
        let mut current = vec![0u8; pool.size() as usize];
        pool.read_bytes(0, &mut current)
            .expect("read the whole pool");
        check_image(&current, "the current image", sim, setup.policy, &model);
    }
});
