//! Linked-list, hash-map, crit-bit-tree, red-black-tree and persistent-cache operations under
//! simulated crashes: after recovery
//! (`Heap::open`), the structure equals its std model after the operations that completed, or
//! after those plus the interrupted one, and its nodes are exactly the heap's live blocks (no
//! leak, no dangling node).
//!
//! Strict and batched survive under the x86 model; the themis policy (no nt -> t fence) is
//! caught under x86 and survives under the Themis model it is written for.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Debug;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, Report, SimBackend, SimConfig};
use pmem_test_kit::crash_test_outcome;
use pmem_test_kit::fixture::{heap_config, heap_holds_exactly, recover_heap, simulated_heap_with};
use pmem_test_kit::SplitMix64;
use pmem_themis_workloads::cache::{CacheEntry, CacheShape};
use pmem_themis_workloads::{ChainedHashMap, CritBitTree, List, PersistentCache, RedBlackTree};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, TxError};

type SimHeap = Heap<SimBackend>;

const POOL_SIZE: u64 = 64 << 10;
const ROOT_SIZE: u64 = 1024;
/// Buckets of the crash-tested map: few, so chains are long.
const BUCKETS: u64 = 4;
/// One lane whose log holds an insert's or a remove's snapshots, and the smallest chunks.
const WORKLOAD_HEAP: HeapConfig = heap_config(1, 1024, 4096);

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64),
    Remove(u64),
}

/// `n` operations on keys `0..keys`, about two inserts per remove, so the structure grows and
/// some operations find their key present (or absent) and write nothing.
fn ops(n: usize, keys: u64, seed: u64) -> Vec<Op> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| {
            let key = rng.below(keys);
            if rng.below(3) < 2 {
                Op::Insert(key)
            } else {
                Op::Remove(key)
            }
        })
        .collect()
}

/// The value stored for `key` by the `i`-th operation (so overwrites change the value).
fn value(i: usize, key: u64) -> u64 {
    key * 1000 + i as u64
}

fn set_models(ops: &[Op]) -> Vec<Vec<u64>> {
    let mut set = BTreeSet::new();
    let mut out = vec![Vec::new()];
    for op in ops {
        match *op {
            Op::Insert(k) => set.insert(k),
            Op::Remove(k) => set.remove(&k),
        };
        out.push(set.iter().copied().collect());
    }
    out
}

fn map_models(ops: &[Op]) -> Vec<HashMap<u64, u64>> {
    let mut map = HashMap::new();
    let mut out = vec![map.clone()];
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(k) => map.insert(k, value(i, k)),
            Op::Remove(k) => map.remove(&k),
        };
        out.push(map.clone());
    }
    out
}

fn ordered_models(ops: &[Op]) -> Vec<Vec<(u64, u64)>> {
    let mut map = BTreeMap::new();
    let mut out = vec![Vec::new()];
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Insert(k) => map.insert(k, value(i, k)),
            Op::Remove(k) => map.remove(&k),
        };
        out.push(map.clone().into_iter().collect());
    }
    out
}

/// The crash-tested cache: few sets and ways, so the short sequence fills sets and evicts.
const CACHE_SHAPE: CacheShape = CacheShape {
    sets: 2,
    ways: 2,
    value_words: 3,
};

/// The value the `i`-th operation caches under `key`: every word differs from the last
/// update's, so a torn update shows.
fn cache_value(i: usize, key: u64) -> Vec<u64> {
    (0..CACHE_SHAPE.value_words)
        .map(|w| value(i, key) * 10 + w)
        .collect()
}

/// Every operation is an update of its key (PC has no delete); the model fills and evicts
/// ways by the cache's rules, set by set.
fn cache_models(ops: &[Op]) -> Vec<Vec<CacheEntry>> {
    let ways = CACHE_SHAPE.ways as usize;
    let mut entries: Vec<CacheEntry> = vec![None; CACHE_SHAPE.sets as usize * ways];
    let mut out = vec![entries.clone()];
    for (i, op) in ops.iter().enumerate() {
        let (Op::Insert(key) | Op::Remove(key)) = *op;
        let base = CACHE_SHAPE.set_of(key) as usize * ways;
        let set = &mut entries[base..base + ways];
        let way = set
            .iter()
            .position(|e| e.as_ref().is_some_and(|(k, _)| *k == key))
            .or_else(|| set.iter().position(Option::is_none))
            .unwrap_or(CACHE_SHAPE.victim_of(key) as usize);
        set[way] = Some((key, cache_value(i, key)));
        out.push(entries.clone());
    }
    out
}

/// Where to crash and which images to check.
struct Plan {
    points: CrashPoints,
    images: Images,
    seed: u64,
}

impl Plan {
    /// Every event, a few random images each.
    fn every() -> Plan {
        Plan {
            points: CrashPoints::Every,
            images: Images::Random(6),
            seed: 0,
        }
    }

    /// A seeded sample of points.
    fn sample(points: usize, seed: u64) -> Plan {
        Plan {
            points: CrashPoints::Sample(points),
            images: Images::Random(4),
            seed,
        }
    }
}

/// Crash-test a workload: `setup` makes the structure (not crash tested), `apply(heap, i)` runs
/// operation `i`, `read` recovers the structure's state and its blocks, `models[n]` is the state
/// after `n` operations.
#[allow(clippy::too_many_arguments)]
fn crash_test<S: PartialEq + Debug>(
    name: &str,
    policy: FencePolicy,
    sim: SimConfig,
    plan: Plan,
    setup: impl Fn(&SimHeap),
    apply: impl Fn(&SimHeap, usize) -> Result<(), TxError>,
    read: impl Fn(&SimHeap) -> Result<(S, Vec<u64>), TxError>,
    models: &[S],
) -> Result<Report, String> {
    let operations = models.len() - 1;
    let test = CrashTest::new(&format!("{name}-{}", policy.name()), sim)
        .pool(name, POOL_SIZE, ROOT_SIZE)
        .points(plan.points)
        .images(plan.images)
        .seed(plan.seed);
    crash_test_outcome(
        &test,
        |pool| setup(&simulated_heap_with(pool, WORKLOAD_HEAP, policy)),
        |pool| {
            let heap = Heap::open(pool.clone()).expect("open the heap");
            for i in 0..operations {
                apply(&heap, i).expect("an operation failed");
                pool.operation_completed();
            }
        },
        |pool, crash| {
            let heap = recover_heap(pool)?;
            let (state, mut blocks) = read(&heap).map_err(|e| format!("reading: {e}"))?;
            let done = crash.operations_completed as usize;
            let ok = state == models[done] || models.get(done + 1) == Some(&state);
            if !ok {
                return Err(format!(
                    "after {done} operations the state is {state:?}, expected {:?} or {:?}",
                    models[done],
                    models.get(done + 1)
                ));
            }
            // The heap walk lists its blocks by offset.
            blocks.sort_unstable();
            heap_holds_exactly(&heap, &blocks, name)
        },
    )
    .map_err(|f| f.to_string())
}

fn list_test(
    policy: FencePolicy,
    sim: SimConfig,
    ops: &[Op],
    plan: Plan,
) -> Result<Report, String> {
    crash_test(
        "list",
        policy,
        sim,
        plan,
        |heap| {
            List::create(heap, heap.pool().root_offset()).expect("create the list");
        },
        |heap, i| {
            let list = List::open(heap, heap.pool().root_offset())?;
            match ops[i] {
                Op::Insert(k) => list.insert(k)?,
                Op::Remove(k) => list.remove(k)?,
            };
            Ok(())
        },
        |heap| {
            let list = List::open(heap, heap.pool().root_offset())?;
            Ok((list.to_vec()?, list.blocks()?))
        },
        &set_models(ops),
    )
}

fn map_test(policy: FencePolicy, sim: SimConfig, ops: &[Op], plan: Plan) -> Result<Report, String> {
    crash_test(
        "hashmap",
        policy,
        sim,
        plan,
        |heap| {
            ChainedHashMap::create(heap, heap.pool().root_offset(), BUCKETS)
                .expect("create the map");
        },
        |heap, i| {
            let map = ChainedHashMap::open(heap, heap.pool().root_offset())?;
            match ops[i] {
                Op::Insert(k) => map.insert(k, value(i, k))?,
                Op::Remove(k) => map.remove(k)?,
            };
            Ok(())
        },
        |heap| {
            let map = ChainedHashMap::open(heap, heap.pool().root_offset())?;
            Ok((map.to_std()?, map.blocks()?))
        },
        &map_models(ops),
    )
}

/// A crash test of an ordered tree, `$tree` (the crit-bit and red-black trees share their
/// create, open, insert, remove, `to_vec` and `blocks`), named `$label` in reports.
macro_rules! ordered_tree_test {
    ($test:ident, $tree:ident, $label:literal) => {
        fn $test(
            policy: FencePolicy,
            sim: SimConfig,
            ops: &[Op],
            plan: Plan,
        ) -> Result<Report, String> {
            crash_test(
                $label,
                policy,
                sim,
                plan,
                |heap| {
                    $tree::create(heap, heap.pool().root_offset()).expect("create the tree");
                },
                |heap, i| {
                    let tree = $tree::open(heap, heap.pool().root_offset())?;
                    match ops[i] {
                        Op::Insert(k) => tree.insert(k, value(i, k))?,
                        Op::Remove(k) => tree.remove(k)?,
                    };
                    Ok(())
                },
                |heap| {
                    // The red-black tree's `to_vec` checks its invariants too.
                    let tree = $tree::open(heap, heap.pool().root_offset())?;
                    Ok((tree.to_vec()?, tree.blocks()?))
                },
                &ordered_models(ops),
            )
        }
    };
}

ordered_tree_test!(ctree_test, CritBitTree, "ctree");
ordered_tree_test!(rbtree_test, RedBlackTree, "rbtree");

fn cache_test(
    policy: FencePolicy,
    sim: SimConfig,
    ops: &[Op],
    plan: Plan,
) -> Result<Report, String> {
    crash_test(
        "cache",
        policy,
        sim,
        plan,
        |heap| {
            PersistentCache::create(heap, heap.pool().root_offset(), CACHE_SHAPE)
                .expect("create the cache");
        },
        |heap, i| {
            let cache = PersistentCache::open(heap, heap.pool().root_offset())?;
            let (Op::Insert(k) | Op::Remove(k)) = ops[i];
            cache.update(k, &cache_value(i, k))?;
            Ok(())
        },
        |heap| {
            let cache = PersistentCache::open(heap, heap.pool().root_offset())?;
            Ok((cache.entries()?, cache.blocks()))
        },
        &cache_models(ops),
    )
}

/// The structures whose crash tests follow the same plans.
const NEW_STRUCTURES: [(&str, StructureTest); 3] = [
    ("ctree", ctree_test),
    ("rbtree", rbtree_test),
    ("cache", cache_test),
];

/// A short sequence, crashed after every event.
fn short() -> Vec<Op> {
    ops(40, 10, 1)
}

/// A longer sequence over more keys, crashed at sampled events.
fn long() -> Vec<Op> {
    ops(300, 60, 2)
}

fn assert_reported(report: &Report, ops: usize) {
    assert_eq!(report.operations, ops as u64);
    assert!(report.points > 0 && report.images >= report.points);
}

/// A crash test of one structure: [`list_test`], [`map_test`], [`ctree_test`], [`rbtree_test`]
/// or [`cache_test`].
type StructureTest = fn(FencePolicy, SimConfig, &[Op], Plan) -> Result<Report, String>;

/// `test` passes under strict and batched on x86 with the short sequence crashed after every
/// event.
fn assert_survives_every_crash_under_x86(test: StructureTest) {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let report = test(policy, SimConfig::x86(), &short(), Plan::every()).unwrap();
        assert_reported(&report, short().len());
        assert_eq!(report.points, report.events + 1, "every event");
    }
}

#[test]
fn list_survives_every_crash_under_x86() {
    assert_survives_every_crash_under_x86(list_test);
}

#[test]
fn hashmap_survives_every_crash_under_x86() {
    assert_survives_every_crash_under_x86(map_test);
}

#[test]
fn long_sequences_survive_sampled_crashes_under_x86() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        let report =
            list_test(policy, SimConfig::x86(), &long(), Plan::sample(1500, 0x11)).unwrap();
        assert_reported(&report, long().len());
        let report = map_test(policy, SimConfig::x86(), &long(), Plan::sample(1500, 0x22)).unwrap();
        assert_reported(&report, long().len());
    }
}

#[test]
fn themis_policy_is_caught_under_x86() {
    let failure = list_test(
        FencePolicy::Themis,
        SimConfig::x86(),
        &short(),
        Plan::every(),
    )
    .unwrap_err();
    assert!(failure.contains("list-themis"), "{failure}");
    let failure = map_test(
        FencePolicy::Themis,
        SimConfig::x86(),
        &short(),
        Plan::every(),
    )
    .unwrap_err();
    assert!(failure.contains("hashmap-themis"), "{failure}");
}

#[test]
fn themis_policy_survives_every_crash_under_themis() {
    let report = list_test(
        FencePolicy::Themis,
        SimConfig::themis(),
        &short(),
        Plan::every(),
    )
    .unwrap();
    assert_reported(&report, short().len());
    let report = map_test(
        FencePolicy::Themis,
        SimConfig::themis(),
        &short(),
        Plan::every(),
    )
    .unwrap();
    assert_reported(&report, short().len());
}

#[test]
fn ctree_survives_every_crash_under_x86() {
    assert_survives_every_crash_under_x86(ctree_test);
}

#[test]
fn rbtree_survives_every_crash_under_x86() {
    assert_survives_every_crash_under_x86(rbtree_test);
}

#[test]
fn cache_survives_every_crash_under_x86() {
    assert_survives_every_crash_under_x86(cache_test);
}

#[test]
fn trees_and_cache_survive_sampled_crashes_of_long_sequences_under_x86() {
    for policy in [FencePolicy::Strict, FencePolicy::Batched] {
        for (i, (_, test)) in NEW_STRUCTURES.iter().enumerate() {
            let plan = Plan::sample(1500, 0x33 + i as u64);
            let report = test(policy, SimConfig::x86(), &long(), plan).unwrap();
            assert_reported(&report, long().len());
        }
    }
}

#[test]
fn themis_policy_on_trees_and_cache_is_caught_under_x86_and_survives_under_themis() {
    for (name, test) in NEW_STRUCTURES {
        let failure = test(
            FencePolicy::Themis,
            SimConfig::x86(),
            &short(),
            Plan::every(),
        )
        .unwrap_err();
        assert!(failure.contains(&format!("{name}-themis")), "{failure}");
        let report = test(
            FencePolicy::Themis,
            SimConfig::themis(),
            &short(),
            Plan::every(),
        )
        .unwrap();
        assert_reported(&report, short().len());
    }
}
