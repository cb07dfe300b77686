//! FAST&FAIR against a `BTreeMap` model, without crashes: every policy, small and default
//! nodes, reopening, bad input, two threads, and the persistence cost of one insert.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use pmem_ordering::{reset_thread_stats, thread_stats};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, FastFairError, ShiftPolicy};
use pmem_test_kit::fastfair::{contents, FastFairModel, FastFairOp};
use pmem_test_kit::fixture::{anonymous_heap, anonymous_heap_with, heap_blocks, reopen, SIM_HEAP};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::Heap;
use proptest::prelude::*;

fn heap(size: u64) -> Heap {
    anonymous_heap("fastfair", size)
}

fn config(node_size: u64, policy: ShiftPolicy) -> FastFairConfig {
    FastFairConfig { node_size, policy }
}

type Tree = FastFair<pmem_ordering::Hardware>;

fn all(tree: &Tree) -> FastFairModel {
    contents(tree).unwrap()
}

fn run_against_model(node_size: u64, policy: ShiftPolicy, ops: u64, keys: u64) {
    let heap = heap(64 << 20);
    let root = heap.pool().root_offset();
    let tree = FastFair::create(&heap, root, config(node_size, policy)).unwrap();
    let mut model = FastFairModel::new();
    let mut rng = SplitMix64::new(node_size);
    let mut tallest = 0;
    for i in 0..ops {
        let key = rng.below(keys);
        // Grow for the first half, shrink in the second.
        let grow = i < ops / 2;
        let op = match rng.below(10) {
            0..=4 if grow => FastFairOp::Insert(key, i),
            5 | 6 => FastFairOp::Upsert(key, i),
            7 => FastFairOp::Get(key),
            _ => FastFairOp::Remove(key),
        };
        op.run_checked(&tree, &mut model).unwrap();
        tallest = tallest.max(tree.height().unwrap());
        if i % 997 == 0 {
            assert_eq!(tree.check().unwrap(), model.len() as u64);
        }
    }
    assert_eq!(tree.len(), model.len() as u64);
    assert_eq!(tree.check().unwrap(), model.len() as u64);
    assert_eq!(all(&tree), model);
    if node_size == 128 {
        assert!(
            tallest >= 5,
            "small nodes must make a deep tree, got {tallest}"
        );
    }
    // Remove everything: merges and root collapses bring it back to one leaf.
    let keys: Vec<u64> = model.keys().copied().collect();
    for k in keys {
        assert_eq!(tree.remove(k).unwrap(), model.remove(&k));
    }
    assert!(tree.is_empty());
    assert_eq!(
        tree.height().unwrap(),
        1,
        "the root must shrink back to a leaf"
    );
    assert_eq!(tree.check().unwrap(), 0);
    assert_eq!(
        tree.blocks().unwrap(),
        heap_blocks(&heap).unwrap(),
        "every freed node went back to the heap"
    );
}

#[test]
fn small_nodes_match_a_btreemap_under_every_policy() {
    for policy in ShiftPolicy::ALL {
        run_against_model(128, policy, 20_000, 3_000);
    }
}

#[test]
fn default_nodes_match_a_btreemap_under_every_policy() {
    for policy in ShiftPolicy::ALL {
        run_against_model(512, policy, 40_000, 20_000);
    }
}

/// Every valid node size has its own copy of the in-node search (its capacity a constant):
/// each must agree with the model.
#[test]
fn every_node_size_matches_a_btreemap() {
    let mut size = 128;
    while size <= 4096 {
        run_against_model(size, ShiftPolicy::Fast, 12_000, 6_000);
        size *= 2;
    }
}

#[test]
fn range_bounds_are_honoured() {
    let heap = heap(16 << 20);
    let tree = FastFair::create(
        &heap,
        heap.pool().root_offset(),
        config(128, ShiftPolicy::Fast),
    )
    .unwrap();
    for k in (0..1000u64).map(|k| k * 3) {
        assert!(tree.insert(k, k + 1).unwrap());
    }
    let keys = |r: Vec<Result<(u64, u64), FastFairError>>| -> Vec<u64> {
        r.into_iter().map(|e| e.unwrap().0).collect()
    };
    assert_eq!(keys(tree.range(10..20).collect()), vec![12, 15, 18]);
    assert_eq!(keys(tree.range(9..=18).collect()), vec![9, 12, 15, 18]);
    assert_eq!(keys(tree.range(2990..).collect()), vec![2991, 2994, 2997]);
    assert_eq!(keys(tree.range(..4).collect()), vec![0, 3]);
    assert_eq!(tree.range(..).count(), 1000);
    assert_eq!(tree.range(5000..).count(), 0);
    // An end that admits no key, and one at the reserved key, which admits every key.
    assert_eq!(tree.range(..0).count(), 0);
    assert_eq!(tree.range(..=u64::MAX).count(), 1000);
    assert_eq!(keys(tree.range(2995..=u64::MAX).collect()), vec![2997]);
    let (lo, hi) = (20, 10);
    assert_eq!(tree.range(lo..hi).count(), 0);
    assert_eq!(
        tree.range((std::ops::Bound::Excluded(3), std::ops::Bound::Excluded(12)))
            .map(|e| e.unwrap().1)
            .collect::<Vec<_>>(),
        vec![7, 10]
    );
    // The largest valid key works; u64::MAX is reserved.
    assert!(tree.insert(u64::MAX - 1, 1).unwrap());
    assert_eq!(
        keys(tree.range(u64::MAX - 5..).collect()),
        vec![u64::MAX - 1]
    );
    assert!(matches!(
        tree.insert(u64::MAX, 1),
        Err(FastFairError::ReservedKey(_))
    ));
    assert!(matches!(
        tree.get(u64::MAX),
        Err(FastFairError::ReservedKey(_))
    ));
    assert!(matches!(
        tree.remove(u64::MAX),
        Err(FastFairError::ReservedKey(_))
    ));
}

#[test]
fn a_reopened_tree_keeps_its_keys_and_policy() {
    for policy in ShiftPolicy::ALL {
        let heap = heap(16 << 20);
        let root = heap.pool().root_offset();
        let mut model = BTreeMap::new();
        {
            let tree = FastFair::create(&heap, root, config(256, policy)).unwrap();
            for k in 0..3000u64 {
                let key = k.wrapping_mul(0x9E37_79B9) % 100_000;
                tree.upsert(key, k).unwrap();
                model.insert(key, k);
            }
        }
        let heap = reopen(heap);
        let tree = FastFair::open(&heap, root).unwrap();
        assert_eq!(tree.policy(), policy);
        assert_eq!(tree.node_size(), 256);
        assert_eq!(tree.len(), model.len() as u64);
        assert_eq!(all(&tree), model);
        tree.check().unwrap();
    }
}

#[test]
fn bad_configurations_and_foreign_roots_get_typed_errors() {
    let heap = heap(4 << 20);
    let root = heap.pool().root_offset();
    for size in [0, 64, 100, 192, 8192] {
        assert!(matches!(
            FastFair::create(&heap, root, config(size, ShiftPolicy::Fast)),
            Err(FastFairError::InvalidConfig { .. })
        ));
    }
    assert!(matches!(
        FastFair::create(&heap, root + 8, FastFairConfig::default()),
        Err(FastFairError::InvalidConfig { .. })
    ));
    assert!(FastFair::create(&heap, heap.pool().size(), FastFairConfig::default()).is_err());
    // Nothing was created at the root yet: open refuses it.
    assert!(matches!(
        FastFair::open(&heap, root),
        Err(FastFairError::WrongKind { .. })
    ));
    let tree = FastFair::create(&heap, root, FastFairConfig::default()).unwrap();
    tree.insert(1, 2).unwrap();
    drop(tree);
    // A damaged policy word and a damaged root pointer are refused, not trusted.
    let pool = heap.pool();
    let policy_word = pool.load_u64(root + 24).unwrap();
    pool.persist(pool.store_u64(root + 24, 9).unwrap());
    let err = FastFair::open(&heap, root).err().unwrap();
    assert!(err.to_string().contains("shift policy 9"), "{err}");
    pool.persist(pool.store_u64(root + 24, policy_word).unwrap());
    let root_node = pool.load_u64(root + 32).unwrap();
    pool.persist(pool.store_u64(root + 32, root_node + 64).unwrap());
    assert!(matches!(
        FastFair::open(&heap, root),
        Err(FastFairError::Corrupt { .. })
    ));
    pool.persist(pool.store_u64(root + 32, root_node).unwrap());
    assert_eq!(
        FastFair::open(&heap, root).unwrap().get(1).unwrap(),
        Some(2)
    );
}

#[test]
fn a_full_pool_is_an_error_and_loses_nothing() {
    // The small heap of the crash tests, on a 1 MiB pool.
    let heap = anonymous_heap_with("fastfair", 1 << 20, SIM_HEAP);
    let tree = FastFair::create(
        &heap,
        heap.pool().root_offset(),
        config(128, ShiftPolicy::Redo),
    )
    .unwrap();
    let mut model = BTreeMap::new();
    let mut failed = false;
    for k in 0..100_000u64 {
        match tree.insert(k, k) {
            Ok(true) => {
                model.insert(k, k);
            }
            Ok(false) => unreachable!("keys are distinct"),
            Err(FastFairError::Tx(pmem_undo_log::TxError::PoolFull { .. })) => {
                failed = true;
                break;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(
        failed,
        "a 1 MiB pool cannot hold 100k keys in 128-byte nodes"
    );
    assert_eq!(all(&tree), model);
    tree.check().unwrap();
}

/// Two writers of disjoint key sets and a lock-free reader: the reader must always find the
/// keys no one removes, and scans must stay sorted; at the end the tree equals the model.
#[test]
fn two_writers_and_a_reader_agree_with_the_model() {
    for policy in ShiftPolicy::ALL {
        let heap = heap(64 << 20);
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config(128, policy)).unwrap();
        // Stable keys: multiples of 3, inserted first, never touched again.
        for k in (0..3000u64).map(|k| k * 3) {
            tree.insert(k, k).unwrap();
        }
        let done = AtomicBool::new(false);
        let models: Vec<BTreeMap<u64, u64>> = std::thread::scope(|s| {
            let writers: Vec<_> = [1u64, 2]
                .into_iter()
                .map(|residue| {
                    let tree = &tree;
                    s.spawn(move || {
                        let mut model = BTreeMap::new();
                        let mut rng = SplitMix64::new(residue * 7777);
                        for i in 0..20_000u64 {
                            let key = rng.below(3000) * 3 + residue;
                            if i % 3 == 2 {
                                assert_eq!(tree.remove(key).unwrap(), model.remove(&key));
                            } else {
                                assert_eq!(tree.upsert(key, i).unwrap(), model.insert(key, i));
                            }
                        }
                        model
                    })
                })
                .collect();
            let reader = s.spawn(|| {
                let mut rng = SplitMix64::new(99);
                let mut rounds = 0;
                while !done.load(Ordering::Relaxed) || rounds < 100 {
                    let k = rng.below(3000) * 3;
                    assert_eq!(tree.get(k).unwrap(), Some(k), "stable key {k} vanished");
                    let lo = k;
                    let scanned: Vec<(u64, u64)> =
                        tree.range(lo..lo + 90).collect::<Result<_, _>>().unwrap();
                    assert!(scanned.windows(2).all(|w| w[0].0 < w[1].0), "scan unsorted");
                    let stable: Vec<u64> =
                        scanned.iter().map(|e| e.0).filter(|k| k % 3 == 0).collect();
                    let expected: Vec<u64> =
                        (lo..lo + 90).filter(|k| k % 3 == 0 && *k < 9000).collect();
                    assert_eq!(stable, expected, "a scan missed a stable key");
                    rounds += 1;
                }
                rounds
            });
            let models = writers.into_iter().map(|w| w.join().unwrap()).collect();
            done.store(true, Ordering::Relaxed);
            assert!(reader.join().unwrap() >= 100);
            models
        });
        let mut expected: BTreeMap<u64, u64> = (0..3000u64).map(|k| (k * 3, k * 3)).collect();
        for m in models {
            expected.extend(m);
        }
        assert_eq!(all(&tree), expected);
        tree.check().unwrap();
    }
}

/// Four writers on interleaved keys (each owns one residue mod 4, so all four write the same
/// leaves) in a tree of 4-entry nodes: a growing phase of splits up to new roots, then a
/// shrinking one of merges down to root collapses, while splits and merges of neighbouring
/// leaves run at once. The tree must end as the union of the writers' models, with every
/// freed node back in the heap.
#[test]
fn four_writers_splitting_and_merging_side_by_side_agree_with_the_model() {
    for policy in ShiftPolicy::ALL {
        let heap = heap(32 << 20);
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config(128, policy)).unwrap();
        let models: Vec<BTreeMap<u64, u64>> = std::thread::scope(|s| {
            let writers: Vec<_> = (0..4u64)
                .map(|residue| {
                    let tree = &tree;
                    s.spawn(move || {
                        let mut model = BTreeMap::new();
                        let mut rng = SplitMix64::new(residue * 31 + 5);
                        for i in 0..6_000u64 {
                            let key = rng.below(1500) * 4 + residue;
                            // Mostly inserts, then mostly removes.
                            let removing = if i < 3_000 { i % 4 == 3 } else { i % 4 != 3 };
                            if removing {
                                assert_eq!(tree.remove(key).unwrap(), model.remove(&key));
                            } else {
                                assert_eq!(tree.upsert(key, i).unwrap(), model.insert(key, i));
                            }
                        }
                        model
                    })
                })
                .collect();
            writers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let mut expected = BTreeMap::new();
        for m in models {
            expected.extend(m);
        }
        assert_eq!(all(&tree), expected, "{policy:?}");
        assert_eq!(tree.check().unwrap(), expected.len() as u64);
        assert_eq!(tree.len(), expected.len() as u64);
        assert_eq!(
            tree.blocks().unwrap(),
            heap_blocks(&heap).unwrap(),
            "{policy:?}: every freed node went back to the heap"
        );
    }
}

/// The persistence cost of one insert into a leaf with room, under each policy: a leaf of 20
/// entries (keys 10, 20, .. 200) in 512-byte nodes; inserting 15 moves 19 entries and writes
/// slots 1..=20, which lie on 6 cache lines (slot `i` is at byte 64 + 16 i).
#[test]
fn one_insert_without_a_split_costs_what_its_policy_says() {
    for policy in ShiftPolicy::ALL {
        let heap = heap(4 << 20);
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config(512, policy)).unwrap();
        for k in 1..=20u64 {
            tree.insert(k * 10, k).unwrap();
        }
        reset_thread_stats();
        assert!(tree.insert(15, 0).unwrap());
        let middle = thread_stats();
        reset_thread_stats();
        assert!(tree.insert(1000, 0).unwrap());
        let at_end = thread_stats();
        let (entries, lines) = (20, 6);
        match policy {
            // One flush and one fence per moved entry and for the new one.
            ShiftPolicy::PerShift => {
                assert_eq!((middle.flushes, middle.fences), (entries, entries));
                assert_eq!((at_end.flushes, at_end.fences), (1, 1));
            }
            // One flush and one fence per line the shift crosses.
            ShiftPolicy::Fast => {
                assert_eq!((middle.flushes, middle.fences), (lines, lines));
                assert_eq!((at_end.flushes, at_end.fences), (1, 1));
            }
            // Per logged line: log, commit, apply (a flush and a fence each) and a clear
            // (flushed with the next line's log); one fence more for the last clear.
            ShiftPolicy::Redo => {
                assert_eq!((middle.flushes, middle.fences), (4 * lines, 3 * lines + 1));
                assert_eq!((at_end.flushes, at_end.fences), (4, 4));
            }
        }
        assert_eq!(middle.redundant_fences, 0, "{policy:?}");
        assert_eq!(tree.get(15).unwrap(), Some(0));
        assert_eq!(tree.range(..).count(), 22);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_sequences_match_a_btreemap(
        ops in proptest::collection::vec(FastFairOp::strategy(0..400), 1..600),
        policy in proptest::sample::select(ShiftPolicy::ALL.to_vec()),
        node_size in prop_oneof![Just(128u64), Just(256u64)],
    ) {
        let heap = heap(8 << 20);
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config(node_size, policy)).unwrap();
        let mut model = FastFairModel::new();
        for op in &ops {
            let checked = op.run_checked(&tree, &mut model);
            prop_assert!(checked.is_ok(), "{:?}: {}", op, checked.unwrap_err());
        }
        prop_assert_eq!(tree.check().unwrap(), model.len() as u64);
        prop_assert_eq!(all(&tree), model);
    }
}
