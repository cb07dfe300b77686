//! Random sequences of operations on the leaf map against a `BTreeMap<Vec<u8>, Vec<u8>>`:
//! inserts, overwrites, removes, lookups, bounded and stopped scans, and reopens (the heap
//! and the map opened afresh from the pool), on leaves of 4 slots and on the default shape.
//! Every result is predicted; at the end the map is whole (a lookup per pair, `verify()`, the
//! heap holding exactly its leaves and records) and holds the model.

use std::sync::Arc;

use pmem_ordering::{Pool, PoolOptions};
use pmem_structures::raw::leafmap::{LeafMap, LeafMapConfig};
use pmem_test_kit::fixture::TEST_HEAP;
use pmem_test_kit::leafmap::{check_map, run_all, LeafModel, LeafOp, SMALL_LEAVES};
use pmem_undo_log::{FencePolicy, Heap};
use proptest::prelude::*;

fn run(config: LeafMapConfig, ops: &[LeafOp]) -> Result<(), TestCaseError> {
    let pool = Arc::new(Pool::anonymous("leafmap", 8 << 20, &PoolOptions::new()).unwrap());
    let root = pool.root_offset();
    {
        let heap = Heap::create(pool.clone(), TEST_HEAP, FencePolicy::Batched).unwrap();
        LeafMap::create(&heap, root, config).unwrap();
    }
    let mut model = LeafModel::new();
    run_all(&pool, root, ops, &mut model).map_err(TestCaseError::fail)?;
    let heap = Heap::open(pool.clone()).unwrap();
    let map = LeafMap::open(&heap, root).unwrap();
    let now = check_map(&heap, &map).map_err(TestCaseError::fail)?;
    prop_assert_eq!(now, model);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sequences_on_small_leaves_match_the_model(
        ops in proptest::collection::vec(LeafOp::strategy(), 1..300)
    ) {
        run(SMALL_LEAVES, &ops)?;
    }

    #[test]
    fn sequences_on_the_default_shape_match_the_model(
        ops in proptest::collection::vec(LeafOp::strategy(), 1..300)
    ) {
        run(LeafMapConfig::default(), &ops)?;
    }
}
