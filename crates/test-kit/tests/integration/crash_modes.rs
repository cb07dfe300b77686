//! The deeper crash modes over every structure and policy ([`cases::all`]), each bounded to
//! seconds in release mode: crashes of recovery itself, exhaustive (enumerated) images of a
//! small workload, and torn lines with the verdict each design predicts. The long sweep is in
//! `long_sweep.rs` (ignored).

use pmem_ordering::sim::{CrashPoints, Images, Report};
use pmem_test_kit::cases::{self, CrashCase};

fn of(structure: &str) -> Vec<CrashCase> {
    let cases: Vec<CrashCase> = cases::all()
        .into_iter()
        .filter(|c| c.structure == structure)
        .collect();
    assert!(!cases.is_empty(), "no crash case for {structure}");
    cases
}

/// Every policy of `structure`: `ops` operations crashed at a sample of points; recovery runs
/// traced on each image and is crashed at a sample of its own events, and every image of
/// those crashes must recover to an allowed state too. Some recovery must have repaired
/// something (written the pool), or the crashes of it were all the same image.
fn recovery_crashes(structure: &str, ops: usize, points: usize) {
    for case in of(structure) {
        let test = case
            .test(case.sim)
            .points(CrashPoints::Sample(points))
            .images(Images::Random(1))
            .seed(11)
            .recovery_crashes(CrashPoints::Sample(12), Images::Random(1));
        let report = case.run(&test, ops, 11).unwrap_or_else(|f| panic!("{f}"));
        assert!(
            report.recovery_runs_writing > 0 && report.recovery_images > report.recovery_runs,
            "{}: no recovery repaired anything to crash: {report:?}",
            case.name()
        );
    }
}

#[test]
fn recovery_of_cceh_survives_its_own_crashes() {
    // Enough inserts to split segments, so recoveries finish interrupted splits.
    recovery_crashes("cceh", 120, 30);
}

#[test]
fn recovery_of_fastfair_survives_its_own_crashes() {
    recovery_crashes("fastfair", 24, 30);
}

#[test]
fn recovery_of_datalog_survives_its_own_crashes() {
    recovery_crashes("datalog", 8, 40);
}

#[test]
fn recovery_of_the_record_maps_survives_its_own_crashes() {
    recovery_crashes("records", 6, 20);
}

#[test]
fn recovery_of_the_store_survives_its_own_crashes() {
    recovery_crashes("store", 10, 20);
}

#[test]
fn recovery_of_undo_transactions_survives_its_own_crashes() {
    recovery_crashes("undo-tx", 8, 30);
}

#[test]
fn recovery_of_the_allocator_survives_its_own_crashes() {
    recovery_crashes("undo-alloc", 8, 30);
}

/// The first policy of `structure`, `ops` operations crashed at every event, every image
/// enumerated wherever there are at most 64 (one random image elsewhere).
fn exhaustive(structure: &str, ops: usize) -> Report {
    let case = of(structure).remove(0);
    let test = case
        .test(case.sim)
        .points(CrashPoints::Every)
        .images(Images::Enumerate {
            limit: 64,
            fallback: 1,
        })
        .seed(3);
    let report = case.run(&test, ops, 3).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.points, report.events + 1, "{}", case.name());
    assert!(
        report.enumerated > 0,
        "{}: nothing was enumerated: {report:?}",
        case.name()
    );
    report
}

#[test]
fn every_image_of_small_workloads_recovers() {
    for (structure, ops) in [
        ("cceh", 8),
        ("fastfair", 6),
        ("datalog", 4),
        ("records", 1),
        ("store", 2),
        ("undo-tx", 3),
        ("undo-alloc", 3),
    ] {
        exhaustive(structure, ops);
    }
}

/// What torn lines (8-byte granularity instead of a line's stores persisting in order) do to
/// a case: pass, or fail with a message holding `expected`.
enum Verdict {
    Survives,
    Fails(&'static [&'static str]),
}

/// A slot or an entry written as value then key in one line, with one flush after both:
/// the prefix rule keeps the key from persisting without its value; torn, it can.
const KEY_WITHOUT_VALUE: Verdict = Verdict::Fails(&["unlike the model", "the tree holds"]);

fn torn_verdict(case: &CrashCase) -> Verdict {
    match (case.structure, case.policy.as_str()) {
        // CCEH commits a slot by its key after writing the value in the same line, unflushed
        // in between (FAST'19 CCEH, Sec. 4.1 relies on x86 ordering of one line's stores).
        ("cceh", _) => KEY_WITHOUT_VALUE,
        // FAST shifts in place and per-shift persists after each move, but both write an
        // entry's value and key into one line and rely on the prefix rule (FAST'18, Sec. 4).
        ("fastfair", "per-shift" | "fast") => KEY_WITHOUT_VALUE,
        // Redo logs each line, commits it with one 8-byte flag after the log is durable.
        ("fastfair", "redo") => Verdict::Survives,
        // Log entries are checksummed and committed by an 8-byte tail after they are durable.
        ("datalog", _) => Verdict::Survives,
        // The maps' slots are the trees' and tables' above: a slot can hold a key without
        // its record pointer, so blocks leak or a pair appears.
        ("records", "per-shift" | "fast") => Verdict::Fails(&["check_blocks", "the maps hold"]),
        // Observed, not proven: the byte-key hash map publishes a record by one 8-byte
        // pointer after the record is durable, and the ordered map's redo shifts survive
        // torn lines; no sampled torn crash of this case has broken it.
        ("records", "redo") => Verdict::Survives,
        // The store's maps of words are CCEH and FAST&FAIR.
        ("store", _) => Verdict::Fails(&["the store holds", "check_blocks"]),
        // Log entries are tagged and validated; data is flushed before the 8-byte commit.
        ("undo-tx" | "undo-alloc", _) => Verdict::Survives,
        _ => panic!("no torn-line verdict for {}", case.name()),
    }
}

/// Operations and sampled crash points for a torn-line run: enough for a failing design to
/// reach a crash that shows it (found by running these seeds), few enough for CI.
fn torn_workload(case: &CrashCase) -> (usize, usize) {
    match (case.structure, case.policy.as_str()) {
        ("cceh", _) => (24, 60),
        // A third of the store's writes go to its map of leaves (which commits a pair by one
        // 8-byte bitmap store after its slot is durable): as many to CCEH and FAST&FAIR as
        // the 24 writes over two maps had.
        ("store", _) => (36, 300),
        ("records", "per-shift" | "fast") => (24, 300),
        ("records", _) => (12, 40),
        _ => (8, 60),
    }
}

fn torn(structure: &str) {
    for case in of(structure) {
        let (ops, points) = torn_workload(&case);
        let test = case
            .test(case.sim.torn())
            .points(CrashPoints::Sample(points))
            .images(Images::Random(4))
            .seed(1);
        check_verdict(&case, case.run(&test, ops, 1));
    }
}

#[test]
fn torn_lines_break_cceh() {
    torn("cceh");
}

#[test]
fn torn_lines_break_fast_and_per_shift_but_not_redo() {
    torn("fastfair");
}

#[test]
fn torn_lines_do_not_break_datalog() {
    torn("datalog");
}

#[test]
fn torn_lines_break_the_record_maps_but_not_under_redo() {
    torn("records");
}

#[test]
fn torn_lines_break_the_store() {
    torn("store");
}

#[test]
fn torn_lines_do_not_break_undo_transactions_or_the_allocator() {
    torn("undo-tx");
    torn("undo-alloc");
}

fn check_verdict(case: &CrashCase, outcome: Result<Report, Box<pmem_ordering::sim::CrashFailure>>) {
    match (torn_verdict(case), outcome) {
        (Verdict::Survives, Ok(_)) => {}
        (Verdict::Survives, Err(f)) => panic!("{} must survive torn lines: {f}", case.name()),
        (Verdict::Fails(kinds), Err(f)) => {
            let message = f.to_string();
            assert!(
                kinds.iter().any(|k| message.contains(k)),
                "{} failed otherwise than expected ({kinds:?}): {message}",
                case.name()
            );
        }
        (Verdict::Fails(_), Ok(report)) => panic!(
            "{} survived torn lines, so its verdict is wrong: {report:?}",
            case.name()
        ),
    }
}
