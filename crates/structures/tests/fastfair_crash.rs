//! FAST&FAIR under simulated crashes, for every shift policy: after recovery the tree's
//! contents, in key order, equal a `BTreeMap` model after the operations that returned, plus
//! possibly the interrupted one (durable linearizability); the tree is well formed and the
//! heap holds exactly its nodes and redo area. Under torn lines FAST must fail, and does.

use std::collections::BTreeMap;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_ordering::Pool;
use pmem_structures::fastfair::{FastFair, FastFairConfig, ShiftPolicy};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64, u64),
    Upsert(u64, u64),
    Remove(u64),
}

/// `n` operations on keys below `keys`: a growing phase, then a shrinking one, so splits,
/// merges, borrows and root changes in both directions all happen.
fn ops(n: usize, keys: u64, seed: u64) -> Vec<Op> {
    let mut x = seed | 1;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % keys;
            let grow = i < n / 2;
            match (i % 5, grow) {
                (0..=2, true) => Op::Insert(key, i as u64 + 1),
                (3, true) => Op::Upsert(key, i as u64 + 1000),
                (_, false) if i % 10 == 0 => Op::Upsert(key, i as u64 + 1000),
                _ => Op::Remove(key),
            }
        })
        .collect()
}

fn apply(model: &mut BTreeMap<u64, u64>, op: Op) {
    match op {
        Op::Insert(k, v) => {
            model.entry(k).or_insert(v);
        }
        Op::Upsert(k, v) => {
            model.insert(k, v);
        }
        Op::Remove(k) => {
            model.remove(&k);
        }
    }
}

fn model_after(ops: &[Op], n: usize) -> Vec<(u64, u64)> {
    let mut m = BTreeMap::new();
    for &op in &ops[..n] {
        apply(&mut m, op);
    }
    m.into_iter().collect()
}

fn heap_config() -> HeapConfig {
    HeapConfig {
        lanes: 1,
        lane_log_bytes: 16 << 10,
        chunk_size: 4096,
    }
}

const POOL_BYTES: u64 = 512 << 10;

type SimTree<'h, 'p> = FastFair<'h, SimBackend, &'p Pool<SimBackend>>;

fn run_ops(tree: &SimTree<'_, '_>, pool: &Pool<SimBackend>, ops: &[Op]) {
    for &op in ops {
        match op {
            Op::Insert(k, v) => drop(tree.insert(k, v).unwrap()),
            Op::Upsert(k, v) => drop(tree.upsert(k, v).unwrap()),
            Op::Remove(k) => drop(tree.remove(k).unwrap()),
        }
        pool.operation_completed();
    }
}

/// Recover the crash image and check it against the model.
fn check_recovered(pool: &Pool<SimBackend>, ops: &[Op], done: usize) -> Result<(), String> {
    let heap = Heap::open(pool, FencePolicy::Batched).map_err(|e| e.to_string())?;
    let tree = FastFair::open(&heap, pool.root_offset()).map_err(|e| e.to_string())?;
    let now: Vec<(u64, u64)> = tree
        .range(..)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let before = model_after(ops, done);
    let matches = now == before || (done < ops.len() && now == model_after(ops, done + 1));
    if !matches {
        let missing: Vec<_> = before.iter().filter(|e| !now.contains(e)).take(4).collect();
        let extra: Vec<_> = now.iter().filter(|e| !before.contains(e)).take(4).collect();
        return Err(format!(
            "after {done} operations (next {:?}) the tree holds {} pairs, the model {}; \
             missing {missing:?}, unexpected {extra:?}",
            ops.get(done),
            now.len(),
            before.len()
        ));
    }
    let keys = tree.check().map_err(|e| e.to_string())?;
    if keys != now.len() as u64 {
        return Err(format!("check counts {keys} keys, the scan {}", now.len()));
    }
    for &(k, v) in &now {
        if tree.get(k).map_err(|e| e.to_string())? != Some(v) {
            return Err(format!("get({k}) disagrees with the scan"));
        }
    }
    let blocks: Vec<u64> = heap
        .check_heap()
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    if blocks != tree.blocks().map_err(|e| e.to_string())? {
        return Err("the heap's blocks are not exactly the tree's".into());
    }
    Ok(())
}

fn run(
    policy: ShiftPolicy,
    sim: SimConfig,
    ops: Vec<Op>,
    points: CrashPoints,
    seed: u64,
    node_size: u64,
) -> Result<pmem_ordering::sim::Report, String> {
    let workload_ops = ops.clone();
    let config = FastFairConfig { node_size, policy };
    CrashTest::new(&format!("fastfair-{}", policy.name()), sim)
        .pool("fastfair", POOL_BYTES, 1024)
        .points(points)
        .images(Images::Random(4))
        .seed(seed)
        .run_with_setup(
            |pool| {
                let heap = Heap::create(pool, heap_config(), FencePolicy::Batched).unwrap();
                FastFair::create(&heap, pool.root_offset(), config).unwrap();
            },
            |pool| {
                let heap = Heap::open(pool, FencePolicy::Batched).unwrap();
                let tree = FastFair::open(&heap, pool.root_offset()).unwrap();
                run_ops(&tree, pool, &workload_ops);
            },
            |pool, crash| check_recovered(pool, &ops, crash.operations_completed as usize),
        )
        .map_err(|f| f.to_string())
}

#[test]
fn the_workloads_split_merge_and_change_the_root() {
    let pool = Pool::simulated("fastfair", POOL_BYTES, 1024, SimConfig::x86()).unwrap();
    let heap = Heap::create(&pool, heap_config(), FencePolicy::Batched).unwrap();
    let config = FastFairConfig {
        node_size: 128,
        policy: ShiftPolicy::Fast,
    };
    let tree = FastFair::create(&heap, pool.root_offset(), config).unwrap();
    let ops = ops(130, 40, 1);
    let grow = ops.len() / 2;
    run_ops(&tree, &pool, &ops[..grow]);
    let tall = tree.height().unwrap();
    assert!(tall >= 3, "height {tall}");
    let nodes = tree.blocks().unwrap().len();
    run_ops(&tree, &pool, &ops[grow..]);
    assert!(tree.height().unwrap() < tall, "the root must shrink");
    assert!(
        tree.blocks().unwrap().len() < nodes,
        "merges must free nodes"
    );
}

#[test]
fn every_crash_of_a_small_sequence_recovers_under_fast() {
    let report = run(
        ShiftPolicy::Fast,
        SimConfig::x86(),
        ops(130, 40, 1),
        CrashPoints::Every,
        1,
        128,
    )
    .unwrap();
    assert!(report.points > 1000, "{} crash points", report.points);
    assert_eq!(report.unpersisted().count(), 0, "{:?}", report.findings);
}

#[test]
fn every_crash_of_a_small_sequence_recovers_under_per_shift() {
    let report = run(
        ShiftPolicy::PerShift,
        SimConfig::x86(),
        ops(130, 40, 2),
        CrashPoints::Every,
        2,
        128,
    )
    .unwrap();
    assert_eq!(report.unpersisted().count(), 0, "{:?}", report.findings);
}

#[test]
fn every_crash_of_a_small_sequence_recovers_under_redo() {
    let report = run(
        ShiftPolicy::Redo,
        SimConfig::x86(),
        ops(130, 40, 3),
        CrashPoints::Every,
        3,
        128,
    )
    .unwrap();
    assert_eq!(report.unpersisted().count(), 0, "{:?}", report.findings);
}

/// 256-byte nodes put 12 entries on 3 cache lines, so shifts cross lines: the case FAST's
/// per-line persists and the redo log's per-line entries exist for.
#[test]
fn every_crash_of_shifts_across_lines_recovers_under_every_policy() {
    for (i, policy) in ShiftPolicy::ALL.into_iter().enumerate() {
        run(
            policy,
            SimConfig::x86(),
            ops(90, 60, 20 + i as u64),
            CrashPoints::Every,
            20 + i as u64,
            256,
        )
        .unwrap();
    }
}

#[test]
fn a_sample_of_crashes_of_a_long_sequence_recovers_under_every_policy() {
    for (i, policy) in ShiftPolicy::ALL.into_iter().enumerate() {
        run(
            policy,
            SimConfig::x86(),
            ops(500, 250, 10 + i as u64),
            CrashPoints::Sample(700),
            10 + i as u64,
            256,
        )
        .unwrap();
    }
}

/// Torn lines drop the prefix rule FAST relies on: some crash image must lose or corrupt a
/// pair. The test fails if FAST survives, since then it would not show what it claims.
#[test]
fn fast_fails_under_torn_lines_as_expected() {
    let torn = SimConfig {
        torn_lines: true,
        ..SimConfig::x86()
    };
    // Inserts only, into one leaf and beyond: long shifts inside single lines.
    let inserts: Vec<Op> = (0..40u64).rev().map(|k| Op::Insert(k * 2, k + 1)).collect();
    let outcome = run(ShiftPolicy::Fast, torn, inserts, CrashPoints::Every, 5, 256);
    let failure = outcome.expect_err("FAST must lose data when lines tear");
    assert!(
        failure.contains("the tree holds") || failure.contains("not a valid"),
        "unexpected failure: {failure}"
    );
}

/// The redo log commits each line with an 8-byte store after the logged bytes are durable,
/// so it does not depend on the prefix rule: it survives torn lines.
#[test]
fn redo_survives_torn_lines() {
    let torn = SimConfig {
        torn_lines: true,
        ..SimConfig::x86()
    };
    let inserts: Vec<Op> = (0..40u64).rev().map(|k| Op::Insert(k * 2, k + 1)).collect();
    run(ShiftPolicy::Redo, torn, inserts, CrashPoints::Every, 5, 256).unwrap();
}

/// Recovery itself crashes: the setup leaves what an insert of 15 into `[10, 20, 30]`
/// interrupted mid-shift leaves behind (a transient duplicate in the leaf) and, for the redo
/// policy, the committed but unapplied log entry of that line; the workload is `open`, which
/// replays and repairs. Crashed at every event, a second recovery must find the insert whole
/// under redo (its entry was committed) and absent under FAST, never anything else.
#[test]
fn recovery_survives_a_crash_of_its_own() {
    for policy in [ShiftPolicy::Fast, ShiftPolicy::Redo] {
        let config = FastFairConfig {
            node_size: 512,
            policy,
        };
        let without = vec![(10, 10), (20, 20), (30, 30)];
        let with = vec![(10, 10), (15, 1500), (20, 20), (30, 30)];
        let report = CrashTest::new(
            &format!("fastfair-recovery-{}", policy.name()),
            SimConfig::x86(),
        )
        .pool("fastfair", POOL_BYTES, 1024)
        .points(CrashPoints::Every)
        .images(Images::Random(8))
        .run_with_setup(
            |pool| {
                let heap = Heap::create(pool, heap_config(), FencePolicy::Batched).unwrap();
                let root = pool.root_offset();
                let tree = FastFair::create(&heap, root, config).unwrap();
                for k in [10, 20, 30] {
                    tree.insert(k, k).unwrap();
                }
                // The layout of the module docs: the root object holds the root node at
                // +32 and the redo area at +40; entries start 64 bytes into a node.
                let leaf = pool.load_u64(root + 32).unwrap();
                let redo = pool.load_u64(root + 40).unwrap();
                let entries = leaf + 64;
                // Slot 1 has the new value but still key 20; 20 and 30 moved right.
                let torn: [u64; 8] = [10, 10, 20, 1500, 20, 20, 30, 30];
                for (i, w) in torn.iter().enumerate() {
                    let _ = pool.persist(pool.store_u64(entries + 8 * i as u64, *w).unwrap());
                }
                if policy == ShiftPolicy::Redo {
                    // Lane 0, slot 0: the line's final bytes, committed (address << 7 | len).
                    let line: [u64; 8] = [10, 10, 15, 1500, 20, 20, 30, 30];
                    let bytes: Vec<u8> = line.iter().flat_map(|w| w.to_le_bytes()).collect();
                    let _ = pool.persist(pool.write(redo, &bytes).unwrap());
                    let commit = (entries << 7) | bytes.len() as u64;
                    let _ = pool.persist(pool.store_u64(redo + 64, commit).unwrap());
                }
            },
            |pool| {
                let heap = Heap::open(pool, FencePolicy::Batched).unwrap();
                let tree = FastFair::open(&heap, pool.root_offset()).unwrap();
                let expected = if policy == ShiftPolicy::Redo {
                    &with
                } else {
                    &without
                };
                let now: Vec<(u64, u64)> = tree.range(..).map(|e| e.unwrap()).collect();
                assert_eq!(&now, expected, "recovery without a crash");
                pool.operation_completed();
            },
            |pool, _crash| {
                let heap = Heap::open(pool, FencePolicy::Batched).map_err(|e| e.to_string())?;
                let tree = FastFair::open(&heap, pool.root_offset()).map_err(|e| e.to_string())?;
                let now: Vec<(u64, u64)> = tree
                    .range(..)
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?;
                // The redo entry was durable before recovery began: replayed, whatever the
                // crash; the bare duplicate resolves to the insert not having happened.
                let expected = if policy == ShiftPolicy::Redo {
                    &with
                } else {
                    &without
                };
                if &now != expected {
                    return Err(format!("recovered {now:?}, expected {expected:?}"));
                }
                tree.check().map_err(|e| e.to_string())?;
                Ok(())
            },
        )
        .unwrap();
        assert!(report.points > 5, "{} crash points", report.points);
    }
}
