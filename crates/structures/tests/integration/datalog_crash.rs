//! The datalog store under simulated crashes: after recovery every file equals a `Vec<u8>`
//! model after the operations that returned, plus possibly the interrupted one, all or nothing
//! (durable linearizability); the namespace equals the model's; and the heap holds exactly the
//! store's blocks (nothing leaked, nothing freed twice).

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimConfig};
use pmem_structures::raw::datalog::{
    CleaningStats, Datalog, DatalogConfig, FileStats, Policy, WriteMode, PAGE,
};
use pmem_test_kit::datalog::{contents, crash_ops, file_name, run_all, DatalogModel, DatalogOp};
use pmem_test_kit::fixture::{simulated_heap, simulated_pool};
use pmem_undo_log::FencePolicy;
use proptest::prelude::*;

const POOL_BYTES: u64 = 512 << 10;

/// The files of the explicit sequences below.
const A: u8 = 0;
const B: u8 = 1;
const C: u8 = 2;
const D: u8 = 3;

/// A policy that cleans logs eagerly, so short workloads crash inside log cleaning.
fn eager_cleaning(mode: WriteMode) -> Policy {
    Policy {
        mode,
        fold_after_entries: 6,
        compact_live_percent: 60,
        compact_min_pages: 2,
        ..Policy::default()
    }
}

fn run(name: &str, policy: Policy, ops: Vec<DatalogOp>, points: CrashPoints, seed: u64) -> u64 {
    run_on(SimConfig::x86(), name, policy, ops, points, seed)
}

fn run_on(
    sim: SimConfig,
    name: &str,
    policy: Policy,
    ops: Vec<DatalogOp>,
    points: CrashPoints,
    seed: u64,
) -> u64 {
    let test = CrashTest::new(&format!("datalog-{name}"), sim)
        .pool("datalog", POOL_BYTES, 1024)
        .points(points)
        .images(Images::Random(3))
        .seed(seed)
        // Durable when it returns: no store of an operation may still be pending then.
        .fail_on_unpersisted(true);
    crash_ops(&test, policy, &ops).points
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_small_embedded_writes_recovers() {
    let points = run(
        "embedded",
        eager_cleaning(WriteMode::Embedded),
        DatalogOp::small_writes(40, WriteMode::Embedded, 1),
        CrashPoints::Every,
        1,
    );
    assert!(points > 300, "{points} crash points");
}

/// The commit protocol does not rely on stores to one line persisting in order: lines torn at
/// 8-byte granularity recover too (the checksums are never what decides validity).
#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_mixed_writes_recovers_with_torn_lines() {
    let mut ops = DatalogOp::small_writes(16, WriteMode::Embedded, 8);
    ops.extend(
        DatalogOp::small_writes(4, WriteMode::CopyOnWrite, 9)
            .into_iter()
            .skip(1),
    );
    run_on(
        SimConfig::x86().torn(),
        "torn",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Every,
        8,
    );
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_small_copy_on_write_writes_recovers() {
    run(
        "cow",
        eager_cleaning(WriteMode::CopyOnWrite),
        DatalogOp::small_writes(12, WriteMode::CopyOnWrite, 2),
        CrashPoints::Every,
        2,
    );
}

#[test]
fn every_crash_of_truncates_renames_and_removes_recovers() {
    let e = WriteMode::Embedded;
    let c = WriteMode::CopyOnWrite;
    let ops = vec![
        DatalogOp::Create(A),
        DatalogOp::write(A, 10, 100, e),
        DatalogOp::write(A, PAGE - 5, 20, e),
        DatalogOp::Create(B),
        DatalogOp::write(B, 0, 200, c),
        DatalogOp::Truncate(A, 50),
        DatalogOp::write(A, 3000, 9, e),
        DatalogOp::Rename(A, C),
        DatalogOp::Truncate(C, PAGE + 100),
        DatalogOp::Rename(B, D),
        DatalogOp::write(D, 4, 4, e),
        DatalogOp::Remove(C),
        DatalogOp::Create(A),
        DatalogOp::write(A, 1, 1, e),
        DatalogOp::Truncate(D, 0),
        DatalogOp::Remove(D),
    ];
    run(
        "namespace",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Every,
        3,
    );
}

/// A truncate into the middle of a page keeps the page (it allocates nothing, so a full store
/// can shrink) and the next growth writes it anew with zeros past the old end: crashes around
/// both, with embeds left past the cut, growth by writes that reach the kept page or pass it,
/// growth by truncate, and log compaction in between, recover to the model (which reads
/// zeros past every old end).
#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_around_truncates_that_keep_a_partial_page_recovers() {
    let e = WriteMode::Embedded;
    let c = WriteMode::CopyOnWrite;
    let ops = vec![
        DatalogOp::Create(A),
        DatalogOp::write(A, 0, 2 * PAGE + 300, c),
        DatalogOp::write(A, PAGE + 10, 50, e),
        DatalogOp::write(A, 2 * PAGE + 100, 100, e),
        DatalogOp::Truncate(A, PAGE + 30),
        DatalogOp::write(A, 3 * PAGE, 10, e),
        DatalogOp::write(A, 3 * PAGE + 2, 40, e),
        DatalogOp::Truncate(A, 3 * PAGE + 5),
        DatalogOp::Truncate(A, 4 * PAGE),
        DatalogOp::Truncate(A, 100),
        DatalogOp::write(A, 50, 100, e),
        DatalogOp::write(A, 20, 20, e),
        DatalogOp::Truncate(A, 30),
        DatalogOp::write(A, 10, 5, e),
        DatalogOp::write(A, 200, 8, e),
    ];
    run(
        "partial-page-truncates",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Every,
        11,
    );
}

#[test]
fn a_sample_of_crashes_of_multi_page_writes_recovers() {
    let e = WriteMode::Embedded;
    let c = WriteMode::CopyOnWrite;
    let a = WriteMode::Auto;
    let ops = vec![
        DatalogOp::Create(A),
        DatalogOp::write(A, 0, 5 * PAGE + 17, c),
        DatalogOp::write(A, 3 * PAGE - 40, 2 * PAGE + 80, e),
        DatalogOp::write(A, 100, 3 * PAGE, a),
        DatalogOp::Truncate(A, 2 * PAGE + 1),
        DatalogOp::write(A, 7 * PAGE + 1, 2 * PAGE, e),
        DatalogOp::Create(B),
        DatalogOp::write(B, 0, 1, e),
        DatalogOp::write(A, PAGE + 1, 2 * PAGE - 2, c),
        DatalogOp::Truncate(A, 9 * PAGE),
        DatalogOp::Remove(A),
        DatalogOp::write(B, 4000, 200, a),
    ];
    run(
        "multi-page",
        eager_cleaning(WriteMode::Auto),
        ops,
        CrashPoints::Sample(600),
        4,
    );
}

/// Small embedded writes, then small copy-on-write ones to the same file: pages fold and logs
/// are compacted under the eager policy.
fn cleaning_writes() -> Vec<DatalogOp> {
    let mut ops = DatalogOp::small_writes(150, WriteMode::Embedded, 5);
    ops.extend(
        DatalogOp::small_writes(30, WriteMode::CopyOnWrite, 6)
            .into_iter()
            .skip(1),
    );
    ops
}

#[test]
fn a_sample_of_crashes_of_a_long_overwrite_run_with_log_cleaning_recovers() {
    run(
        "cleaning",
        eager_cleaning(WriteMode::Auto),
        cleaning_writes(),
        CrashPoints::Sample(800),
        5,
    );
}

/// Embedded writes that each cover the one before: every log page but the tail's dies, and is
/// reclaimed (compaction is off).
fn reclaim_policy() -> Policy {
    Policy {
        compact_live_percent: 0,
        ..Policy::with_mode(WriteMode::Embedded)
    }
}

fn covering_writes(n: usize) -> Vec<DatalogOp> {
    let mut ops = vec![DatalogOp::Create(A)];
    ops.extend((0..n).map(|k| DatalogOp::write(A, 100 + (k % 2) as u64, 300, WriteMode::Embedded)));
    ops
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_while_dead_log_pages_are_reclaimed_recovers() {
    run(
        "reclaim",
        reclaim_policy(),
        covering_writes(40),
        CrashPoints::Every,
        6,
    );
}

/// Runs `ops` without crashes on a store with `policy`, as the crash tests' workload does,
/// checks the store equals the model after them, and returns its cleaning counters and its
/// file 0's.
fn without_crashes(policy: Policy, ops: &[DatalogOp]) -> (CleaningStats, FileStats) {
    let pool = simulated_pool("datalog", POOL_BYTES, 1024, SimConfig::x86());
    let heap = simulated_heap(&pool, FencePolicy::Batched);
    let store = Datalog::create(
        &heap,
        pool.root_offset(),
        DatalogConfig {
            max_files: 4,
            policy,
        },
    )
    .unwrap();
    let mut model = DatalogModel::new();
    run_all(&store, &pool, ops, &mut model).unwrap();
    assert_eq!(contents(&store).unwrap(), model);
    let id = store.open_file(&file_name(A)).unwrap();
    (store.cleaning_stats(), store.file_stats(id).unwrap())
}

#[test]
fn the_reclaim_workload_really_reclaims_pages() {
    let (stats, file) = without_crashes(reclaim_policy(), &covering_writes(40));
    assert!(stats.pages_reclaimed >= 2, "{stats:?}");
    assert_eq!(stats.compactions, 0, "{stats:?}");
    assert!(file.log_pages <= 2, "{file:?}");
}

/// Embedded writes cycling over three ranges: entries die fast, so a two-page log is
/// compacted every few writes under the eager policy.
fn compacting_writes(n: usize) -> Vec<DatalogOp> {
    let mut ops = vec![DatalogOp::Create(A)];
    ops.extend(
        (0..n).map(|k| DatalogOp::write(A, [0, 500, PAGE + 100][k % 3], 300, WriteMode::Embedded)),
    );
    ops
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_inside_log_compaction_recovers() {
    run(
        "compaction",
        eager_cleaning(WriteMode::Embedded),
        compacting_writes(30),
        CrashPoints::Every,
        7,
    );
}

#[test]
fn the_compaction_workload_really_compacts() {
    let (stats, _) = without_crashes(eager_cleaning(WriteMode::Embedded), &compacting_writes(30));
    assert!(stats.compactions >= 2, "{stats:?}");
}

#[test]
fn the_crash_workloads_really_fold_and_compact() {
    let (stats, _) = without_crashes(eager_cleaning(WriteMode::Auto), &cleaning_writes());
    assert!(stats.folds >= 3, "{stats:?}");
    assert!(stats.compactions >= 3, "{stats:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Random sequences on two files; operations the model refuses (a missing file, a taken
    /// name) must be refused by the store too and change nothing.
    #[test]
    fn random_sequences_recover_from_sampled_crashes(
        ops in proptest::collection::vec(DatalogOp::strategy(2, 3 * PAGE, 2 * PAGE), 1..14),
        seed in 0u64..1000,
    ) {
        run("proptest", eager_cleaning(WriteMode::Auto), ops, CrashPoints::Sample(60), seed);
    }
}
