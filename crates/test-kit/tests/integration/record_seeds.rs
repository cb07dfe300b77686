//! The byte-key maps target's committed seeds run clean through the kit, decoded as the fuzz
//! target decodes them: every result agrees with the model, across the midway reopen, and
//! both maps and the heap check at the end; their small operations recover from sampled
//! crashes. (A seed that failed would stop the fuzz smoke run
//! before it mutated anything.) Also: keys past the limit, and the driver catching a store that
//! differs from its model, and random sequences from the kit's strategy.

use pmem_test_kit::fuzz_input::{decode, RecordInput};
use pmem_test_kit::fuzz_seeds::seeds;
use pmem_test_kit::records::{
    crash_small_ops, run_record_ops, KeyShape, RecordDriver, RecordKey, RecordModel, RecordOp,
    RecordSetup, RecordValue,
};
use proptest::prelude::*;

#[test]
fn every_record_maps_seed_runs_clean() {
    let mut ran = 0;
    for seed in seeds().iter().filter(|s| s.target == "record_maps") {
        let input: RecordInput = decode(&seed.bytes).unwrap();
        run_record_ops(input.setup.records(), &input.ops)
            .unwrap_or_else(|e| panic!("{}: {e}", seed.name));
        // As the fuzz target crashes them, with more points.
        let report = crash_small_ops(
            input.setup.records(),
            &input.ops,
            u64::from(input.setup.crash_seed),
            16,
        )
        .unwrap_or_else(|| panic!("{}: no small write to crash", seed.name));
        assert!(report.points > 0, "{}: {report:?}", seed.name);
        ran += 1;
    }
    assert_eq!(ran, 4, "the byte-key maps target's seeds");
}

#[test]
fn a_key_past_the_limit_is_refused_and_changes_nothing() {
    let too_long = RecordKey::new(KeyShape::TooLong, b"a");
    let fitting = RecordKey::new(KeyShape::Max, b"a");
    let value = RecordValue::new(10, 1);
    let ops = [
        RecordOp::Insert(too_long.clone(), value),
        RecordOp::Upsert(too_long.clone(), value),
        RecordOp::Get(too_long.clone()),
        RecordOp::Remove(too_long),
        RecordOp::Insert(fitting.clone(), value),
        RecordOp::Get(fitting),
        RecordOp::Check,
    ];
    // The driver predicts `KeyTooLarge` for the writes and nothing for the lookups: a run
    // that passes saw exactly that from both maps.
    run_record_ops(RecordSetup::default(), &ops).unwrap();
}

#[test]
fn the_driver_reports_a_store_that_differs_from_the_model() {
    let setup = RecordSetup::default();
    let (_pool, store) = setup.anonymous_store(8 << 20).unwrap();
    let mut driver = RecordDriver::new(store, setup, || unreachable!("no reopen")).unwrap();
    let key = RecordKey::new(KeyShape::Shares7, b"b");
    // A model holding a pair the maps never got.
    let mut model = RecordModel::new();
    model.insert(key.bytes(), RecordValue::new(5, 2).bytes());
    let check = driver.check(&model).unwrap_err();
    assert!(check.contains("the hash map holds keys"), "{check}");
    let get = driver
        .run_checked(&RecordOp::Get(key), &mut model)
        .unwrap_err();
    assert!(get.contains("hash get gave None"), "{get}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn random_record_sequences_agree_with_the_model(
        ops in proptest::collection::vec(RecordOp::strategy(), 1..80),
        wide_segments in any::<bool>(),
        large_nodes in any::<bool>(),
    ) {
        let setup = RecordSetup { wide_segments, large_nodes, ..RecordSetup::default() };
        if let Err(e) = run_record_ops(setup, &ops) {
            return Err(TestCaseError::fail(e));
        }
    }
}
