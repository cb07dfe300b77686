//! FAST&FAIR under simulated crashes, for every shift policy: after recovery the tree's
//! contents, in key order, equal a `BTreeMap` model after the operations that returned, plus
//! possibly the interrupted one (durable linearizability); the tree is well formed and the
//! heap holds exactly its nodes and redo area. Under torn lines FAST must fail, and does.

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, Report, SimConfig};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, ShiftPolicy};
use pmem_test_kit::fastfair::{
    contents, crash_ops, crash_ops_outcome, run_all, FastFairModel, FastFairOp,
};
use pmem_test_kit::fixture::{simulated_heap, simulated_pool};
use pmem_test_kit::{run_crash_test, structure_verifies};
use pmem_undo_log::{FencePolicy, Heap};

const POOL_BYTES: u64 = 512 << 10;

fn crash_test(policy: ShiftPolicy, sim: SimConfig, points: CrashPoints, seed: u64) -> CrashTest {
    CrashTest::new(&format!("fastfair-{}", policy.name()), sim)
        .pool("fastfair", POOL_BYTES, 1024)
        .points(points)
        .images(Images::Random(4))
        .seed(seed)
}

/// Crash `ops` on a tree of `node_size`-byte nodes at `points`; every recovery is checked
/// against the model, and the test fails if one breaks it.
fn run(
    policy: ShiftPolicy,
    sim: SimConfig,
    ops: Vec<FastFairOp>,
    points: CrashPoints,
    seed: u64,
    node_size: u64,
) -> Report {
    let config = FastFairConfig { node_size, policy };
    crash_ops(&crash_test(policy, sim, points, seed), config, &ops)
}

#[test]
fn the_workloads_split_merge_and_change_the_root() {
    let pool = simulated_pool("fastfair", POOL_BYTES, 1024, SimConfig::x86());
    let heap = simulated_heap(&pool, FencePolicy::Batched);
    let config = FastFairConfig {
        node_size: 128,
        policy: ShiftPolicy::Fast,
    };
    let tree = FastFair::create(&heap, pool.root_offset(), config).unwrap();
    let ops = FastFairOp::grow_then_shrink(130, 40, 1);
    let grow = ops.len() / 2;
    let mut model = FastFairModel::new();
    run_all(&tree, &pool, &ops[..grow], &mut model).unwrap();
    let tall = tree.height().unwrap();
    assert!(tall >= 3, "height {tall}");
    let nodes = tree.blocks().unwrap().len();
    run_all(&tree, &pool, &ops[grow..], &mut model).unwrap();
    assert!(tree.height().unwrap() < tall, "the root must shrink");
    assert!(
        tree.blocks().unwrap().len() < nodes,
        "merges must free nodes"
    );
}

/// Every crash of 130 operations on 40 keys in 128-byte nodes, under `policy`: no store may be
/// left unpersisted when its operation returns.
fn every_crash_of_a_small_sequence(policy: ShiftPolicy, seed: u64) -> Report {
    let report = run(
        policy,
        SimConfig::x86(),
        FastFairOp::grow_then_shrink(130, 40, seed),
        CrashPoints::Every,
        seed,
        128,
    );
    assert_eq!(report.unpersisted().count(), 0, "{:?}", report.findings);
    report
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_a_small_sequence_recovers_under_fast() {
    let report = every_crash_of_a_small_sequence(ShiftPolicy::Fast, 1);
    assert!(report.points > 1000, "{} crash points", report.points);
}

#[test]
fn every_crash_of_a_small_sequence_recovers_under_per_shift() {
    every_crash_of_a_small_sequence(ShiftPolicy::PerShift, 2);
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_a_small_sequence_recovers_under_redo() {
    every_crash_of_a_small_sequence(ShiftPolicy::Redo, 3);
}

/// 256-byte nodes put 12 entries on 3 cache lines, so shifts cross lines: the case FAST's
/// per-line persists and the redo log's per-line entries exist for.
#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_shifts_across_lines_recovers_under_every_policy() {
    for (i, policy) in ShiftPolicy::ALL.into_iter().enumerate() {
        run(
            policy,
            SimConfig::x86(),
            FastFairOp::grow_then_shrink(90, 60, 20 + i as u64),
            CrashPoints::Every,
            20 + i as u64,
            256,
        );
    }
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn a_sample_of_crashes_of_a_long_sequence_recovers_under_every_policy() {
    for (i, policy) in ShiftPolicy::ALL.into_iter().enumerate() {
        run(
            policy,
            SimConfig::x86(),
            FastFairOp::grow_then_shrink(500, 250, 10 + i as u64),
            CrashPoints::Sample(700),
            10 + i as u64,
            256,
        );
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
    let inserts: Vec<FastFairOp> = (0..40u64)
        .rev()
        .map(|k| FastFairOp::Insert(k * 2, k + 1))
        .collect();
    let config = FastFairConfig {
        node_size: 256,
        policy: ShiftPolicy::Fast,
    };
    let test = crash_test(ShiftPolicy::Fast, torn, CrashPoints::Every, 5);
    let failure = crash_ops_outcome(&test, config, &inserts)
        .expect_err("FAST must lose data when lines tear")
        .to_string();
    assert!(
        failure.contains("the tree holds") || failure.contains("not a valid"),
        "unexpected failure: {failure}"
    );
}

/// The redo log commits each line with an 8-byte store after the logged bytes are durable,
/// so it does not depend on the prefix rule: it survives torn lines.
#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn redo_survives_torn_lines() {
    let torn = SimConfig {
        torn_lines: true,
        ..SimConfig::x86()
    };
    let inserts: Vec<FastFairOp> = (0..40u64)
        .rev()
        .map(|k| FastFairOp::Insert(k * 2, k + 1))
        .collect();
    run(ShiftPolicy::Redo, torn, inserts, CrashPoints::Every, 5, 256);
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
        let test = CrashTest::new(
            &format!("fastfair-recovery-{}", policy.name()),
            SimConfig::x86(),
        )
        .pool("fastfair", POOL_BYTES, 1024)
        .points(CrashPoints::Every)
        .images(Images::Random(8));
        let expected: FastFairModel = if policy == ShiftPolicy::Redo {
            with.into_iter().collect()
        } else {
            without.into_iter().collect()
        };
        let report = run_crash_test(
            &test,
            |pool| {
                let heap = simulated_heap(pool, FencePolicy::Batched);
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
                    pool.persist(pool.store_u64(entries + 8 * i as u64, *w).unwrap());
                }
                if policy == ShiftPolicy::Redo {
                    // Lane 0, slot 0: the line's final bytes, committed (address << 7 | len).
                    let line: [u64; 8] = [10, 10, 15, 1500, 20, 20, 30, 30];
                    let bytes: Vec<u8> = line.iter().flat_map(|w| w.to_le_bytes()).collect();
                    pool.persist(pool.write(redo, &bytes).unwrap());
                    let commit = (entries << 7) | bytes.len() as u64;
                    pool.persist(pool.store_u64(redo + 64, commit).unwrap());
                }
            },
            |pool| {
                let heap = Heap::open(pool.clone()).unwrap();
                let tree = FastFair::open(&heap, pool.root_offset()).unwrap();
                let now = contents(&tree).unwrap();
                assert_eq!(now, expected, "recovery without a crash");
                pool.operation_completed();
            },
            |pool, _crash| {
                let heap = Heap::open(pool.clone()).map_err(|e| e.to_string())?;
                let tree = FastFair::open(&heap, pool.root_offset()).map_err(|e| e.to_string())?;
                let now = contents(&tree)?;
                // The redo entry was durable before recovery began: replayed, whatever the
                // crash; the bare duplicate resolves to the insert not having happened.
                if now != expected {
                    return Err(format!("recovered {now:?}, expected {expected:?}"));
                }
                tree.check().map_err(|e| e.to_string())?;
                structure_verifies(tree.verify())?;
                Ok(())
            },
        );
        assert!(report.points > 5, "{} crash points", report.points);
    }
}
