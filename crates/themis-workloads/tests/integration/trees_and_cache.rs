//! CTree, RB and PC against std models on an anonymous pool: every structure holds what the
//! model holds after random and proptest-generated operation sequences, owns exactly the heap's
//! live blocks, survives a reopen, rolls back with an enclosing transaction, and logs all of an
//! operation's words behind one fence under the batched policy.

use std::collections::BTreeMap;

use pmem_test_kit::fixture::{anonymous_heap_under, heap_holds_exactly, TEST_HEAP_16K_LOGS};
use pmem_test_kit::SplitMix64;
use pmem_themis_workloads::cache::{CacheEntry, CacheShape, Update};
use pmem_themis_workloads::{CritBitTree, PersistentCache, RedBlackTree};
use pmem_undo_log::{FencePolicy, Heap, TxError};
use proptest::prelude::*;

fn heap(policy: FencePolicy) -> Heap {
    anonymous_heap_under("trees", 16 << 20, TEST_HEAP_16K_LOGS, policy)
}

fn root(heap: &Heap) -> u64 {
    heap.pool().root_offset()
}

fn assert_owns_every_block(heap: &Heap, mut blocks: Vec<u64>) {
    blocks.sort_unstable();
    heap_holds_exactly(heap, &blocks, "structure").unwrap_or_else(|e| panic!("{e}"));
}

/// The two ordered maps under test, behind one interface.
trait OrderedMap {
    fn insert(&self, key: u64, value: u64) -> Result<Option<u64>, TxError>;
    fn remove(&self, key: u64) -> Result<Option<u64>, TxError>;
    fn get(&self, key: u64) -> Result<Option<u64>, TxError>;
    fn len(&self) -> Result<u64, TxError>;
    fn to_vec(&self) -> Result<Vec<(u64, u64)>, TxError>;
    fn blocks(&self) -> Result<Vec<u64>, TxError>;
}

macro_rules! ordered_map {
    ($t:ident) => {
        impl OrderedMap for $t<'_> {
            fn insert(&self, key: u64, value: u64) -> Result<Option<u64>, TxError> {
                $t::insert(self, key, value)
            }
            fn remove(&self, key: u64) -> Result<Option<u64>, TxError> {
                $t::remove(self, key)
            }
            fn get(&self, key: u64) -> Result<Option<u64>, TxError> {
                $t::get(self, key)
            }
            fn len(&self) -> Result<u64, TxError> {
                $t::len(self)
            }
            fn to_vec(&self) -> Result<Vec<(u64, u64)>, TxError> {
                $t::to_vec(self)
            }
            fn blocks(&self) -> Result<Vec<u64>, TxError> {
                $t::blocks(self)
            }
        }
    };
}
ordered_map!(CritBitTree);
ordered_map!(RedBlackTree);

/// Run `(insert?, key, value)` operations on `map` and a `BTreeMap`, comparing every answer,
/// then the contents and blocks.
fn check_against_btreemap(heap: &Heap, map: &dyn OrderedMap, ops: &[(bool, u64, u64)]) {
    let mut model = BTreeMap::new();
    for (step, &(insert, key, value)) in ops.iter().enumerate() {
        if insert {
            assert_eq!(
                map.insert(key, value).unwrap(),
                model.insert(key, value),
                "{step}"
            );
        } else {
            assert_eq!(map.remove(key).unwrap(), model.remove(&key), "{step}");
        }
        if step % 256 == 0 {
            assert_eq!(map.to_vec().unwrap(), Vec::from_iter(model.clone()));
        }
    }
    assert_eq!(map.to_vec().unwrap(), Vec::from_iter(model.clone()));
    assert_eq!(map.len().unwrap(), model.len() as u64);
    for (&k, &v) in model.iter().take(64) {
        assert_eq!(map.get(k).unwrap(), Some(v));
    }
    assert_owns_every_block(heap, map.blocks().unwrap());
}

/// Random operations: keys from a small range (so removes hit) mixed with full-width keys (so
/// every bit position is a crit bit somewhere), about two inserts per remove.
fn random_ops(n: usize, seed: u64) -> Vec<(bool, u64, u64)> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let key = if rng.below(4) == 0 {
                rng.next_u64()
            } else {
                rng.below(200)
            };
            (rng.below(3) < 2, key, rng.next_u64())
        })
        .collect()
}

#[test]
fn ctree_matches_a_btreemap() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        let tree = CritBitTree::create(&heap, root(&heap)).unwrap();
        check_against_btreemap(&heap, &tree, &random_ops(3000, 7));
        // Extreme keys differ in the top and bottom bits.
        for k in [0, 1, u64::MAX, u64::MAX - 1, 1 << 63] {
            tree.insert(k, k).unwrap();
            assert_eq!(tree.get(k).unwrap(), Some(k));
        }
        assert_owns_every_block(&heap, tree.blocks().unwrap());
    }
}

#[test]
fn rbtree_matches_a_btreemap() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        let tree = RedBlackTree::create(&heap, root(&heap)).unwrap();
        check_against_btreemap(&heap, &tree, &random_ops(3000, 8));
    }
}

#[test]
fn rbtree_stays_balanced_under_sorted_inserts_and_removes() {
    let heap = heap(FencePolicy::Batched);
    let tree = RedBlackTree::create(&heap, root(&heap)).unwrap();
    // Ascending inserts are a linked list's worst case: the rotations must keep the depth
    // logarithmic, which `to_vec` checks (equal black heights, no red-red edge).
    let ops: Vec<(bool, u64, u64)> = (0..1024)
        .map(|k| (true, k, k))
        .chain((0..1024).step_by(3).map(|k| (false, k, 0)))
        .chain((0..1024).rev().map(|k| (false, k, 0)))
        .collect();
    check_against_btreemap(&heap, &tree, &ops);
    assert!(tree.is_empty().unwrap());
    assert_eq!(heap.alloc_stats().objects, 0);
}

#[test]
fn ctree_empties_and_refills() {
    let heap = heap(FencePolicy::Batched);
    let tree = CritBitTree::create(&heap, root(&heap)).unwrap();
    for round in 0..3 {
        for k in 0..100 {
            assert_eq!(tree.insert(k * 37, round).unwrap(), None);
        }
        for k in 0..100 {
            assert_eq!(tree.remove(k * 37).unwrap(), Some(round));
            assert_eq!(tree.remove(k * 37).unwrap(), None);
        }
        assert!(tree.is_empty().unwrap());
        assert_owns_every_block(&heap, Vec::new());
    }
}

/// The cache's std model: the same sets and ways, filled and evicted by the same rules.
struct CacheModel {
    shape: CacheShape,
    entries: Vec<CacheEntry>,
}

impl CacheModel {
    fn new(shape: CacheShape) -> CacheModel {
        CacheModel {
            shape,
            entries: vec![None; (shape.sets * shape.ways) as usize],
        }
    }

    fn update(&mut self, key: u64, value: &[u64]) -> Update {
        let base = (self.shape.set_of(key) * self.shape.ways) as usize;
        let set = &mut self.entries[base..base + self.shape.ways as usize];
        let (way, outcome) = if let Some(w) = set
            .iter()
            .position(|e| e.as_ref().is_some_and(|(k, _)| *k == key))
        {
            (w, Update::Overwrote)
        } else if let Some(w) = set.iter().position(Option::is_none) {
            (w, Update::Inserted)
        } else {
            let w = self.shape.victim_of(key) as usize;
            (w, Update::Evicted(set[w].as_ref().expect("full set").0))
        };
        set[way] = Some((key, value.to_vec()));
        outcome
    }
}

#[test]
fn cache_matches_a_set_associative_model() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        let shape = CacheShape {
            sets: 16,
            ways: 4,
            value_words: 6,
        };
        let pc = PersistentCache::create(&heap, root(&heap), shape).unwrap();
        let mut model = CacheModel::new(shape);
        let mut rng = SplitMix64::new(9);
        let mut evictions = 0;
        for step in 0..3000 {
            // More keys than entries, so sets fill and evict.
            let key = rng.below(160);
            let value: Vec<u64> = (0..6).map(|_| rng.next_u64()).collect();
            let outcome = pc.update(key, &value).unwrap();
            assert_eq!(outcome, model.update(key, &value), "{step}");
            evictions += u64::from(matches!(outcome, Update::Evicted(_)));
            assert_eq!(pc.get(key).unwrap(), Some(value));
        }
        assert!(evictions > 0);
        assert_eq!(pc.entries().unwrap(), model.entries);
        let cached = model.entries.iter().flatten().count() as u64;
        assert_eq!(pc.len().unwrap(), cached);
        assert_owns_every_block(&heap, pc.blocks());
    }
}

#[test]
fn cache_refuses_bad_input_without_a_transaction() {
    let heap = heap(FencePolicy::Batched);
    let shape = CacheShape {
        sets: 4,
        ways: 2,
        value_words: 3,
    };
    let pc = PersistentCache::create(&heap, root(&heap), shape).unwrap();
    let before = heap.tx_stats();
    assert!(matches!(
        pc.update(1, &[1, 2]),
        Err(TxError::InvalidConfig { .. })
    ));
    assert!(matches!(
        pc.update(u64::MAX, &[1, 2, 3]),
        Err(TxError::InvalidConfig { .. })
    ));
    assert_eq!(heap.tx_stats(), before);
    assert!(pc.is_empty().unwrap());
    for bad in [
        CacheShape { sets: 0, ..shape },
        CacheShape { ways: 0, ..shape },
        CacheShape {
            value_words: 0,
            ..shape
        },
        CacheShape {
            sets: u64::MAX,
            ..shape
        },
    ] {
        assert!(matches!(
            PersistentCache::create(&heap, root(&heap) + 64, bad),
            Err(TxError::InvalidConfig { .. })
        ));
    }
    assert!(matches!(
        PersistentCache::open(&heap, root(&heap) + 128),
        Err(TxError::CorruptHeap { .. })
    ));
}

#[test]
fn structures_reopen_with_their_contents() {
    let heap = heap(FencePolicy::Batched);
    let base = root(&heap);
    let shape = CacheShape {
        sets: 8,
        ways: 2,
        value_words: 2,
    };
    let ctree = CritBitTree::create(&heap, base).unwrap();
    let rb = RedBlackTree::create(&heap, base + 16).unwrap();
    let pc = PersistentCache::create(&heap, base + 32, shape).unwrap();
    for k in 0..40 {
        ctree.insert(k, k * 10).unwrap();
        rb.insert(k, k * 20).unwrap();
        pc.update(k, &[k, k + 1]).unwrap();
    }
    let entries = pc.entries().unwrap();
    let pool = heap
        .into_pool()
        .unwrap_or_else(|_| panic!("a structure still holds the heap"));
    let heap = Heap::open(pool).unwrap();
    let ctree = CritBitTree::open(&heap, base).unwrap();
    let rb = RedBlackTree::open(&heap, base + 16).unwrap();
    let pc = PersistentCache::open(&heap, base + 32).unwrap();
    assert_eq!(
        ctree.to_vec().unwrap(),
        (0..40).map(|k| (k, k * 10)).collect::<Vec<_>>()
    );
    assert_eq!(
        rb.to_vec().unwrap(),
        (0..40).map(|k| (k, k * 20)).collect::<Vec<_>>()
    );
    assert_eq!(pc.shape(), shape);
    assert_eq!(pc.entries().unwrap(), entries);
    let mut blocks = ctree.blocks().unwrap();
    blocks.extend(rb.blocks().unwrap());
    blocks.extend(pc.blocks());
    assert_owns_every_block(&heap, blocks);
}

#[test]
fn operations_in_a_failed_enclosing_transaction_roll_back() {
    let heap = heap(FencePolicy::Batched);
    let base = root(&heap);
    let shape = CacheShape {
        sets: 4,
        ways: 2,
        value_words: 2,
    };
    let ctree = CritBitTree::create(&heap, base).unwrap();
    let rb = RedBlackTree::create(&heap, base + 16).unwrap();
    let pc = PersistentCache::create(&heap, base + 32, shape).unwrap();
    for k in 0..20 {
        ctree.insert(k, k).unwrap();
        rb.insert(k, k).unwrap();
        pc.update(k, &[k, k]).unwrap();
    }
    let before = (
        ctree.to_vec().unwrap(),
        rb.to_vec().unwrap(),
        pc.entries().unwrap(),
    );
    let failed: Result<(), TxError> = heap.transaction(|_| {
        ctree.insert(100, 1)?;
        ctree.remove(3)?;
        rb.insert(100, 1)?;
        rb.remove(3)?;
        rb.remove(10)?;
        pc.update(100, &[7, 7])?;
        pc.update(4, &[8, 8])?;
        Err(TxError::NestedAborted)
    });
    assert!(failed.is_err());
    let after = (
        ctree.to_vec().unwrap(),
        rb.to_vec().unwrap(),
        pc.entries().unwrap(),
    );
    assert_eq!(after, before);
    let mut blocks = ctree.blocks().unwrap();
    blocks.extend(rb.blocks().unwrap());
    blocks.extend(pc.blocks());
    assert_owns_every_block(&heap, blocks);
}

/// Fences and nt -> t orderings of one call.
fn fences<R>(heap: &Heap, f: impl FnOnce() -> R) -> (u64, u64, R) {
    let before = heap.tx_stats();
    let r = f();
    let after = heap.tx_stats();
    (
        after.fences - before.fences,
        after.nt_t_fences - before.nt_t_fences,
        r,
    )
}

#[test]
fn batched_fences_each_operation_once_for_its_snapshots() {
    // PC: an overwrite of a V-word value logs V words; strict fences each, batched once.
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let heap = heap(policy);
        let shape = CacheShape {
            sets: 4,
            ways: 2,
            value_words: 8,
        };
        let pc = PersistentCache::create(&heap, root(&heap), shape).unwrap();
        pc.update(5, &[1; 8]).unwrap();
        let (f, nt_t, r) = fences(&heap, || pc.update(5, &[2; 8]));
        assert_eq!(r.unwrap(), Update::Overwrote);
        let expected = match policy {
            FencePolicy::Strict => (8 + 2, 8),
            _ => (3, 1),
        };
        assert_eq!((f, nt_t), expected, "{policy:?}");
    }
    // RB and CTree: under batched, an insert or a remove (rotations and all) orders its own
    // snapshots with one nt -> t ordering, plus one per allocator metadata word the commit
    // publishes (one or two here); strict pays one per logged word, so more.
    let per_policy: Vec<Vec<(u64, u64)>> = [FencePolicy::Strict, FencePolicy::Batched]
        .into_iter()
        .map(|policy| {
            let heap = heap(policy);
            let rb = RedBlackTree::create(&heap, root(&heap)).unwrap();
            let ctree = CritBitTree::create(&heap, root(&heap) + 16).unwrap();
            for k in 0..64 {
                rb.insert(k, k).unwrap();
                ctree.insert(k, k).unwrap();
            }
            let maps: [&dyn OrderedMap; 2] = [&rb, &ctree];
            maps.iter()
                .map(|map| {
                    let (_, insert_nt_t, r) = fences(&heap, || map.insert(64, 0));
                    r.unwrap();
                    let (_, remove_nt_t, r) = fences(&heap, || map.remove(10));
                    r.unwrap();
                    (insert_nt_t, remove_nt_t)
                })
                .collect()
        })
        .collect();
    for (strict, batched) in per_policy[0].iter().zip(&per_policy[1]) {
        assert!(batched.0 <= 3 && batched.1 <= 3, "{batched:?}");
        assert!(
            strict.0 > batched.0 && strict.1 > batched.1,
            "{strict:?} vs {batched:?}"
        );
    }
}

#[test]
fn a_damaged_tree_is_reported_not_followed() {
    let heap = heap(FencePolicy::Batched);
    let rb = RedBlackTree::create(&heap, root(&heap)).unwrap();
    for k in 0..8 {
        rb.insert(k, k).unwrap();
    }
    let nodes = rb.blocks().unwrap();
    // Point a leaf's left link back at the tree's root node: a cycle.
    let tree: u64 = heap.pool().read(root(&heap)).unwrap();
    heap.transaction(|tx| tx.write_value(nodes[0] + 32, &tree))
        .unwrap();
    assert!(matches!(rb.to_vec(), Err(TxError::CorruptHeap { .. })));
    let ctree = CritBitTree::create(&heap, root(&heap) + 16).unwrap();
    ctree.insert(1, 1).unwrap();
    ctree.insert(2, 2).unwrap();
    // An internal node whose child is itself.
    let link: u64 = heap.pool().read(root(&heap) + 16).unwrap();
    heap.transaction(|tx| tx.write_value((link & !1) + 8, &link))
        .unwrap();
    assert!(matches!(ctree.to_vec(), Err(TxError::CorruptHeap { .. })));
    assert!(matches!(ctree.get(1), Err(TxError::CorruptHeap { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn ctree_follows_any_sequence(ops in prop::collection::vec((any::<bool>(), 0u64..64, any::<u64>()), 0..120)) {
        let heap = heap(FencePolicy::Batched);
        let tree = CritBitTree::create(&heap, root(&heap)).unwrap();
        check_against_btreemap(&heap, &tree, &ops);
    }

    #[test]
    fn rbtree_follows_any_sequence(ops in prop::collection::vec((any::<bool>(), 0u64..64, any::<u64>()), 0..120)) {
        let heap = heap(FencePolicy::Batched);
        let tree = RedBlackTree::create(&heap, root(&heap)).unwrap();
        check_against_btreemap(&heap, &tree, &ops);
    }

    #[test]
    fn cache_follows_any_sequence(keys in prop::collection::vec(0u64..40, 0..120)) {
        let heap = heap(FencePolicy::Batched);
        let shape = CacheShape { sets: 4, ways: 2, value_words: 2 };
        let pc = PersistentCache::create(&heap, root(&heap), shape).unwrap();
        let mut model = CacheModel::new(shape);
        for (i, &key) in keys.iter().enumerate() {
            let value = [key, i as u64];
            prop_assert_eq!(pc.update(key, &value).unwrap(), model.update(key, &value));
        }
        prop_assert_eq!(pc.entries().unwrap(), model.entries);
    }
}
