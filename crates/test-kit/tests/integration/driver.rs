//! The crash driver fails a test that checked nothing, and passes the harness's verdicts on;
//! a history admits exactly the models before and after the interrupted operation.

use pmem_ordering::sim::{CrashPoints, CrashTest, SimConfig};
use pmem_test_kit::cceh::CcehOp;
use pmem_test_kit::{crash_test_outcome, run_crash_test, History};

fn one_persisted_store(pool: &std::sync::Arc<pmem_ordering::Pool<pmem_ordering::sim::SimBackend>>) {
    let w = pool.store_u64(pool.root_offset(), 1).unwrap();
    pool.persist(w);
    pool.operation_completed();
}

#[test]
fn a_crash_test_that_checks_every_point_returns_its_report() {
    let report = run_crash_test(
        &CrashTest::new("kit-driver", SimConfig::x86()),
        |_| {},
        one_persisted_store,
        |_, _| Ok(()),
    );
    assert_eq!(report.operations, 1);
    assert!(
        report.points >= 4 && report.images >= report.points,
        "{report:?}"
    );
}

#[test]
#[should_panic(expected = "checked 0 crash points")]
fn a_crash_test_that_checks_no_point_fails() {
    run_crash_test(
        &CrashTest::new("kit-driver-empty", SimConfig::x86()).points(CrashPoints::At(vec![])),
        |_| {},
        one_persisted_store,
        |_, _| Ok(()),
    );
}

#[test]
#[should_panic(expected = "crash test `kit-driver-failing` failed: recovery says no")]
fn a_failing_check_fails_the_test_with_the_harness_report() {
    run_crash_test(
        &CrashTest::new("kit-driver-failing", SimConfig::x86()),
        |_| {},
        one_persisted_store,
        |_, _| Err("recovery says no".into()),
    );
}

#[test]
fn an_expected_failure_is_returned() {
    let failure = crash_test_outcome(
        &CrashTest::new("kit-driver-expected", SimConfig::x86()),
        |_| {},
        one_persisted_store,
        |_, _| Err("expected".into()),
    )
    .expect_err("the check fails");
    assert_eq!(failure.message, "expected");
}

#[test]
fn a_history_admits_the_models_around_the_interrupted_operation_only() {
    let ops = [
        CcehOp::Insert(1, 10),
        CcehOp::Upsert(1, 11),
        CcehOp::Remove(1),
    ];
    let history = History::of(&ops);
    let holding = |v: Option<u64>| v.into_iter().map(|v| (1, v)).collect();
    assert_eq!(history.last(), &holding(None));
    assert!(history.admits(&holding(None), 0));
    assert!(history.admits(&holding(Some(10)), 0));
    assert!(!history.admits(&holding(Some(11)), 0));
    assert!(history.admits(&holding(Some(11)), 2));
    assert!(history.admits(&holding(None), 2));
    assert!(!history.admits(&holding(Some(10)), 2));
    assert!(history.admits(&holding(None), 3));
    assert!(!history.admits(&holding(Some(11)), 3));
}
