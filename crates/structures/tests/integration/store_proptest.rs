//! Random sequences of catalog and map operations on a `Store` against the test kit's model
//! (`pmem_test_kit::store`): every result and every error predicted, on an anonymous store,
//! a simulated one and a file, reopened along the way; and random sequences crashed at sampled
//! events, each recovered image holding the model before or after the interrupted operation.

use pmem_ordering::sim::{CrashPoints, CrashTest, Images};
use pmem_ordering::{Granularity, Pool};
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{ShiftPolicy, Store};
use pmem_test_kit::fuzz_input::CCEH_FENCE_POLICIES;
use pmem_test_kit::store::{crash_ops, load, StoreDriver, StoreModel, StoreOp, StoreSetup};
use proptest::prelude::*;
use std::sync::Arc;

const STORE_BYTES: u64 = 1 << 20;

fn ops(max: usize) -> impl Strategy<Value = Vec<StoreOp>> {
    proptest::collection::vec(StoreOp::strategy(), 1..max)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sequences_on_an_anonymous_store_agree_with_the_model(ops in ops(200)) {
        let setup = StoreSetup::default();
        let (pool, store) = setup.anonymous_store(STORE_BYTES).unwrap();
        let reopen_pool = pool.clone();
        let mut driver = StoreDriver::new(store, setup, move || {
            Store::load(pmem_undo_log::Heap::open(reopen_pool.clone())?)
        })
        .map_err(TestCaseError::fail)?;
        let mut model = StoreModel::default();
        driver.run_all(&pool, &ops, &mut model).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn sequences_on_a_simulated_store_agree_with_the_model(
        ops in ops(200),
        policy in proptest::sample::select(CCEH_FENCE_POLICIES.to_vec()),
        shift in proptest::sample::select(ShiftPolicy::ALL.to_vec()),
        wide_segments in any::<bool>(),
    ) {
        let setup = StoreSetup { policy, shift, wide_segments };
        let pool = Pool::simulated(
            STORE_LAYOUT,
            STORE_BYTES,
            setup.root_size().unwrap(),
            setup.sim(),
        )
        .map(Arc::new)
        .unwrap();
        let store = Store::format(pool.clone(), &setup.options()).unwrap();
        let mut driver = StoreDriver::new(store, setup, || load(&pool))
            .map_err(TestCaseError::fail)?;
        let mut model = StoreModel::default();
        driver.run_all(&pool, &ops, &mut model).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    // Each case creates a file and maps it several times.
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn sequences_on_a_file_store_agree_with_the_model(ops in ops(120)) {
        let dir = pmem_test_kit::fixture::scratch_dir("pmem-store-proptest");
        let path = dir.path().join("store.pool");
        let setup = StoreSetup::default();
        let options = setup.options().granularity(Granularity::Emulated);
        let store = Store::create(&path, STORE_BYTES, &options).unwrap();
        // The driver reopens the file as a restarted service would; the store and every handle
        // are dropped first, so the pool file's lock is free.
        let mut driver = StoreDriver::new(store, setup, || Store::open_with(&path, &options))
            .map_err(TestCaseError::fail)?;
        let mut model = StoreModel::default();
        for op in &ops {
            driver.run_checked(op, &mut model).map_err(|e| TestCaseError::fail(format!("{op:?}: {e}")))?;
        }
        // The full comparison at the end, whatever the sequence's own checks were.
        driver.check(&model).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    // Each case crash-tests its sequence at sampled events.
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn crashed_sequences_recover_to_the_model_before_or_after_the_interrupted_operation(
        ops in ops(60),
        policy in proptest::sample::select(CCEH_FENCE_POLICIES.to_vec()),
        shift in proptest::sample::select(ShiftPolicy::ALL.to_vec()),
        seed in any::<u64>(),
    ) {
        let setup = StoreSetup { policy, shift, wide_segments: false };
        let test = CrashTest::new("store-proptest", setup.sim())
            .pool(STORE_LAYOUT, STORE_BYTES, setup.root_size().unwrap())
            .points(CrashPoints::Sample(32))
            .images(Images::Random(2))
            .seed(seed);
        let report = crash_ops(&test, setup, &ops);
        prop_assert!(report.points > 0 && report.images > 0, "{report:?}");
    }
}
