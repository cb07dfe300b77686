//! CCEH under simulated crashes: after recovery the table equals a `HashMap` model after the
//! operations that returned, plus possibly the interrupted one (durable linearizability), and
//! the heap holds exactly the table's directory and segments.

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_structures::raw::cceh::{BatchOptions, Cceh, CcehConfig};
use pmem_test_kit::cceh::{contents, crash_ops, run_all, CcehCrashOutcome, CcehModel, CcehOp};
use pmem_test_kit::fixture::{simulated_heap, simulated_pool};
use pmem_test_kit::{run_crash_test, structure_verifies, History};
use pmem_undo_log::{FencePolicy, Heap};

const CONFIG: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

/// Segments of 8 buckets: a window covers half a segment, so full windows move keys along
/// before they split (see the displacement tests).
const WIDE: CcehConfig = CcehConfig {
    buckets_per_segment: 8,
};

const POOL_BYTES: u64 = 256 << 10;

type SimTable<'h, 'p> = Cceh<SimBackend>;

fn run(
    policy: FencePolicy,
    sim: SimConfig,
    ops: Vec<CcehOp>,
    points: CrashPoints,
) -> CcehCrashOutcome {
    run_with(CONFIG, policy, sim, ops, points)
}

fn run_with(
    config: CcehConfig,
    policy: FencePolicy,
    sim: SimConfig,
    ops: Vec<CcehOp>,
    points: CrashPoints,
) -> CcehCrashOutcome {
    let test = CrashTest::new(&format!("cceh-{}", policy.name()), sim)
        .pool("cceh", POOL_BYTES, 1024)
        .points(points)
        .images(Images::Random(4))
        .seed(7);
    crash_ops(&test, config, policy, &ops)
}

#[test]
fn every_crash_of_a_small_sequence_recovers_under_batched() {
    let outcome = run(
        FencePolicy::Batched,
        SimConfig::x86(),
        CcehOp::mixed(120, 100, 1),
        CrashPoints::Every,
    );
    assert!(
        outcome.report.points > 500,
        "{} crash points",
        outcome.report.points
    );
    // Crashes between a split's transaction and its last directory store were among them,
    // and recovery finished those splits the way FAST'19 CCEH, Sec. 4, does.
    assert!(
        outcome.splits_finished > 10,
        "{} recoveries finished a split",
        outcome.splits_finished
    );
}

#[test]
fn every_crash_of_a_small_sequence_recovers_under_strict() {
    run(
        FencePolicy::Strict,
        SimConfig::x86(),
        CcehOp::mixed(120, 100, 2),
        CrashPoints::Every,
    );
}

#[test]
fn a_sample_of_crashes_of_a_long_sequence_recovers() {
    run(
        FencePolicy::Batched,
        SimConfig::x86(),
        CcehOp::mixed(600, 300, 3),
        CrashPoints::Sample(1500),
    );
}

#[test]
fn themis_policy_recovers_under_the_themis_model() {
    run(
        FencePolicy::Themis,
        SimConfig::themis(),
        CcehOp::mixed(120, 100, 4),
        CrashPoints::Every,
    );
}

#[test]
fn every_crash_of_a_sequence_with_displacements_recovers() {
    let outcome = run_with(
        WIDE,
        FencePolicy::Batched,
        SimConfig::x86(),
        CcehOp::mixed(150, 120, 5),
        CrashPoints::Every,
    );
    assert!(
        outcome.report.points > 500,
        "{} crash points",
        outcome.report.points
    );
}

/// A table made by `ops` without crashes, on a simulated pool as the crash tests use.
fn without_crashes(config: CcehConfig, ops: &[CcehOp], check: impl FnOnce(&SimTable<'_, '_>)) {
    let pool = simulated_pool("cceh", POOL_BYTES, 1024, SimConfig::x86());
    let heap = simulated_heap(&pool, FencePolicy::Batched);
    let table = Cceh::create(&heap, pool.root_offset(), config).unwrap();
    run_all(&table, &pool, ops, &mut CcehModel::new()).unwrap();
    check(&table);
}

#[test]
fn the_displacement_workload_really_moves_keys() {
    without_crashes(WIDE, &CcehOp::mixed(150, 120, 5), |table| {
        assert!(
            table.displacements() >= 3,
            "{} moves",
            table.displacements()
        );
        assert!(table.global_depth().unwrap() >= 2);
    });
}

#[test]
fn the_workload_really_splits_and_doubles() {
    let inserts: Vec<CcehOp> = CcehOp::mixed(120, 100, 1)
        .into_iter()
        .filter(|op| matches!(op, CcehOp::Insert(..)))
        .collect();
    without_crashes(CONFIG, &inserts, |table| {
        assert!(
            table.global_depth().unwrap() >= 2,
            "depth {}",
            table.global_depth().unwrap()
        );
        assert!(table.blocks().unwrap().len() >= 4);
    });
}

#[test]
fn a_batch_with_the_helper_thread_recovers_at_every_crash() {
    let items: Vec<(u64, u64)> = (1..=80u64).map(|k| (k * 7919 % 1000 + 1, k)).collect();
    let inserts: Vec<CcehOp> = items.iter().map(|&(k, v)| CcehOp::Insert(k, v)).collect();
    let history = History::of(&inserts);
    let report = run_crash_test(
        &CrashTest::new("cceh-batch-helper", SimConfig::x86())
            .pool("cceh", POOL_BYTES, 1024)
            .images(Images::Random(4)),
        |pool| {
            let heap = simulated_heap(pool, FencePolicy::Batched);
            Cceh::create(&heap, pool.root_offset(), CONFIG).unwrap();
        },
        |pool| {
            let heap = Heap::open(pool.clone()).unwrap();
            let table = Cceh::open(&heap, pool.root_offset()).unwrap();
            let options = BatchOptions {
                helper: true,
                inline_prefetch: true,
                depth: 8,
            };
            table.insert_batch(&items, options).unwrap();
        },
        |pool, _crash| {
            let heap = Heap::open(pool.clone()).map_err(|e| e.to_string())?;
            let table = Cceh::open(&heap, pool.root_offset()).map_err(|e| e.to_string())?;
            structure_verifies(table.verify())?;
            let now = contents(&table)?;
            // The batch is one operation: any prefix of its inserts may have completed.
            if !(0..=inserts.len()).any(|n| history.after(n) == &now) {
                return Err(format!("{} keys match no prefix of the batch", now.len()));
            }
            Ok(())
        },
    );
    assert!(report.points > 300);
}
