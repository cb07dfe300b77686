//! The leaf map under simulated crashes: every event of a sequence of inserts, overwrites,
//! removes and scans on leaves of 4 slots, through leaf splits, pairs moving between their
//! slot and a record of their own (values past the 56 inline bytes), and leaves emptied and
//! unlinked; then a sample of a longer one, the same under torn lines, and crashes of
//! recovery itself. After recovery (`Heap::open`, which rolls back an interrupted split,
//! unlink or record write, then `LeafMap::open`) the map holds the model's contents after the
//! operations that returned, or after the interrupted one too; a lookup finds every pair,
//! `verify()` finds nothing, and the heap holds exactly the map's leaves and records.

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, Report, SimConfig};
use pmem_test_kit::leafmap::{crash_ops, LeafOp, SMALL_LEAVES};

const POOL_BYTES: u64 = 512 << 10;

fn test(name: &str, sim: SimConfig, points: CrashPoints, seed: u64) -> CrashTest {
    CrashTest::new(name, sim)
        .pool("leafmap", POOL_BYTES, 1024)
        .points(points)
        .images(Images::Random(2))
        .seed(seed)
        .fail_on_unpersisted(true)
}

/// The workload reaches what it is meant to: splits, records and unlinks.
fn covers_every_path(ops: &[LeafOp]) {
    let inserts = ops
        .iter()
        .filter(|op| matches!(op, LeafOp::Insert(..) | LeafOp::Upsert(..)))
        .count();
    let long = ops
        .iter()
        .filter(|op| matches!(op, LeafOp::Insert(k, v) | LeafOp::Upsert(k, v) if k.len() + v.len() > 56))
        .count();
    let removes = ops
        .iter()
        .filter(|op| matches!(op, LeafOp::Remove(_)))
        .count();
    assert!(
        inserts > 12 && long > 3 && removes > 8,
        "{inserts} {long} {removes}"
    );
}

#[test]
fn every_crash_of_a_small_sequence_recovers() {
    let ops = LeafOp::grow_then_shrink(60, 6, 1);
    covers_every_path(&ops);
    let report: Report = crash_ops(
        &test("leafmap-every", SimConfig::x86(), CrashPoints::Every, 1),
        SMALL_LEAVES,
        &ops,
    );
    assert!(report.points > 300, "{} crash points", report.points);
    assert_eq!(report.unpersisted().count(), 0, "{:?}", report.findings);
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_a_longer_sequence_recovers() {
    let ops = LeafOp::grow_then_shrink(200, 16, 2);
    crash_ops(
        &test(
            "leafmap-every-long",
            SimConfig::x86(),
            CrashPoints::Every,
            2,
        ),
        SMALL_LEAVES,
        &ops,
    );
}

#[test]
fn a_sample_of_crashes_of_a_long_sequence_recovers() {
    let ops = LeafOp::grow_then_shrink(400, 40, 3);
    crash_ops(
        &test(
            "leafmap-sample",
            SimConfig::x86(),
            CrashPoints::Sample(300),
            3,
        ),
        SMALL_LEAVES,
        &ops,
    );
}

/// The map relies on no line's prefix rule: a slot is fenced before the 8-byte bitmap store
/// that publishes it, and structural changes are undo-logged. So it survives torn lines.
#[test]
fn crashes_with_torn_lines_recover() {
    let torn = SimConfig {
        torn_lines: true,
        ..SimConfig::x86()
    };
    let ops = LeafOp::grow_then_shrink(120, 10, 4);
    crash_ops(
        &test("leafmap-torn", torn, CrashPoints::Sample(400), 4),
        SMALL_LEAVES,
        &ops,
    );
}

/// `LeafMap::open` writes nothing, but the heap's open rolls back the transaction a crash
/// interrupted (a split, an unlink, a record's write): crashed in turn at every event, a
/// second recovery must still find the model's state.
#[test]
fn recovery_survives_a_crash_of_its_own() {
    let ops = LeafOp::grow_then_shrink(40, 4, 5);
    let test = test(
        "leafmap-recovery",
        SimConfig::x86(),
        CrashPoints::Sample(60),
        5,
    )
    .recovery_crashes(CrashPoints::Every, Images::Random(1));
    let report = crash_ops(&test, SMALL_LEAVES, &ops);
    assert!(report.recovery_images > 0);
}
