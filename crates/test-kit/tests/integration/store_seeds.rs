//! The store target's committed seeds run clean through the kit: decoded as the fuzz target
//! decodes them, crashed at sampled events as it crashes them, every result and every
//! recovered image agreeing with the model. (A seed that failed would stop the fuzz smoke run
//! before it mutated anything.)

use pmem_ordering::sim::{CrashPoints, CrashTest, Images};
use pmem_structures::raw::STORE_LAYOUT;
use pmem_test_kit::fuzz_input::{decode, StoreInput};
use pmem_test_kit::fuzz_seeds::seeds;
use pmem_test_kit::store::crash_ops;

#[test]
fn every_store_seed_runs_clean_under_sampled_crashes() {
    let mut ran = 0;
    for seed in seeds().iter().filter(|s| s.target == "store_ops") {
        let input: StoreInput = decode(&seed.bytes).unwrap();
        let setup = input.setup.store();
        let test = CrashTest::new(&seed.name, setup.sim())
            .pool(STORE_LAYOUT, 512 << 10, setup.root_size().unwrap())
            .points(CrashPoints::Sample(16))
            .images(Images::Random(2))
            .seed(u64::from(input.setup.crash_seed))
            .fail_on_unpersisted(true);
        let report = crash_ops(&test, setup, &input.ops);
        assert!(report.points > 0, "{}: {report:?}", seed.name);
        ran += 1;
    }
    assert_eq!(ran, 3, "the store target's seeds");
}
