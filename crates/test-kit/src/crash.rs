//! The one crash driver: every crash test of the structures and every crash-injecting fuzz
//! target runs through it, so none can pass having checked nothing.

use pmem_ordering::sim::{Crash, CrashFailure, CrashTest, Report, SimBackend};
use pmem_ordering::Pool;

/// Runs `test` (`setup` untraced, then `workload` traced, then `check` on every crash image) and
/// returns its report. Panics with the harness's failure report (seed, event, lines, how to
/// replay) if a check fails, and if the test checked no crash point or no image.
pub fn run_crash_test(
    test: &CrashTest,
    setup: impl FnOnce(&Pool<SimBackend>),
    workload: impl FnOnce(&Pool<SimBackend>),
    check: impl Fn(&Pool<SimBackend>, &Crash) -> Result<(), String>,
) -> Report {
    crash_test_outcome(test, setup, workload, check).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`run_crash_test`] for a test that expects a failure: returns the failure instead of
/// panicking. A passing run must still have checked something.
pub fn crash_test_outcome(
    test: &CrashTest,
    setup: impl FnOnce(&Pool<SimBackend>),
    workload: impl FnOnce(&Pool<SimBackend>),
    check: impl Fn(&Pool<SimBackend>, &Crash) -> Result<(), String>,
) -> Result<Report, Box<CrashFailure>> {
    let report = test.run_with_setup(setup, workload, check)?;
    assert!(
        report.points > 0 && report.images > 0,
        "the crash test checked {} crash points and {} images: it would pass having checked \
         nothing ({} events, {} operations; {test:?})",
        report.points,
        report.images,
        report.events,
        report.operations,
    );
    Ok(report)
}
