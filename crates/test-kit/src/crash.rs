//! The one crash driver: every crash test of the structures and every crash-injecting fuzz
//! target runs through it, so none can pass having checked nothing.
//!
//! The modes, all chosen on the [`CrashTest`]: sampled or every crash point
//! ([`CrashPoints`](pmem_ordering::sim::CrashPoints)); random, extreme or enumerated images
//! ([`Images`](pmem_ordering::sim::Images)); torn lines ([`SimConfig::torn`]); and crashes of
//! recovery itself ([`CrashTest::recovery_crashes`]), for which the `*_with_recovery` forms
//! take the structure's recovery (what a restart runs before serving) to run traced.
//!
//! [`SimConfig::torn`]: pmem_ordering::sim::SimConfig::torn

use pmem_ordering::sim::{Crash, CrashFailure, CrashTest, Report, SimBackend};
use pmem_ordering::{Backend, Pool};
use pmem_structures::raw::verify::Verification;
use pmem_structures::{Store, StoreOptions};
use pmem_undo_log::{FencePolicy, Heap};
use std::sync::Arc;

/// Runs `test` (`setup` untraced, then `workload` traced, then `check` on every crash image) and
/// returns its report. Panics with the harness's failure report (seed, event, lines, how to
/// replay) if a check fails, and if the test checked no crash point or no image.
pub fn run_crash_test(
    test: &CrashTest,
    setup: impl FnOnce(&Arc<Pool<SimBackend>>),
    workload: impl FnOnce(&Arc<Pool<SimBackend>>),
    check: impl Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String>,
) -> Report {
    crash_test_outcome(test, setup, workload, check).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`run_crash_test`] for a test that expects a failure: returns the failure instead of
/// panicking. A passing run must still have checked something.
pub fn crash_test_outcome(
    test: &CrashTest,
    setup: impl FnOnce(&Arc<Pool<SimBackend>>),
    workload: impl FnOnce(&Arc<Pool<SimBackend>>),
    check: impl Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String>,
) -> Result<Report, Box<CrashFailure>> {
    let report = test.run_with_setup(setup, workload, check)?;
    checked_something(test, &report);
    Ok(report)
}

/// [`run_crash_test`] with the structure's `recover`, which a test with
/// [`CrashTest::recovery_crashes`] runs traced on each crash image and crashes in turn; every
/// image of those crashes must pass `check` as well.
pub fn run_crash_test_with_recovery(
    test: &CrashTest,
    setup: impl FnOnce(&Arc<Pool<SimBackend>>),
    workload: impl FnOnce(&Arc<Pool<SimBackend>>),
    recover: impl Fn(&Arc<Pool<SimBackend>>) -> Result<(), String>,
    check: impl Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String>,
) -> Report {
    crash_test_outcome_with_recovery(test, setup, workload, recover, check)
        .unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`run_crash_test_with_recovery`] for a test that expects a failure: returns it instead of
/// panicking.
pub fn crash_test_outcome_with_recovery(
    test: &CrashTest,
    setup: impl FnOnce(&Arc<Pool<SimBackend>>),
    workload: impl FnOnce(&Arc<Pool<SimBackend>>),
    recover: impl Fn(&Arc<Pool<SimBackend>>) -> Result<(), String>,
    check: impl Fn(&Arc<Pool<SimBackend>>, &Crash) -> Result<(), String>,
) -> Result<Report, Box<CrashFailure>> {
    let report = test.run_with_recovery(setup, workload, recover, check)?;
    checked_something(test, &report);
    Ok(report)
}

/// A passing run that checked nothing (or crashed no recovery it was asked to) proves nothing.
fn checked_something(test: &CrashTest, report: &Report) {
    assert!(
        report.points > 0 && report.images > 0,
        "the crash test checked {} crash points and {} images: it would pass having checked \
         nothing ({} events, {} operations; {test:?})",
        report.points,
        report.images,
        report.events,
        report.operations,
    );
    assert!(
        !test.crashes_recovery() || report.recovery_images > 0,
        "the crash test was to crash recovery but checked no image of a recovery run \
         ({} recovery runs; {test:?})",
        report.recovery_runs,
    );
}

/// `Err` with the report if `verify()` of a recovered store finds anything. Recovery and the
/// verifier must agree: what recovery accepts (and leaves as it found it, or repairs) holds
/// nothing a verification may report, so every crash driver asks both.
pub fn store_verifies<B: Backend>(store: &Store<B>) -> Result<(), String> {
    let report = store.verify();
    if report.is_healthy() {
        Ok(())
    } else {
        Err(format!("verify() after recovery: {report}"))
    }
}

/// A recovered store whole: its heap walk finds every block a structure reaches allocated and
/// no other ([`Store::check_blocks`]), and [`store_verifies`].
pub fn store_is_whole<B: Backend>(store: &Store<B>) -> Result<(), String> {
    store
        .check_blocks()
        .map_err(|e| format!("heap walk after recovery: {e}"))?;
    store_verifies(store)
}

/// The store on a crash image, opened as a restart would (`Heap::open`, then `Store::load`),
/// its error as text for a crash check.
pub fn reload_store<B: Backend>(pool: &Arc<Pool<B>>) -> Result<Store<B>, String> {
    let heap = Heap::open(pool.clone()).map_err(|e| format!("Heap::open: {e}"))?;
    Store::load(heap).map_err(|e| format!("Store::load: {e}"))
}

/// The options of a store in a crash test: batched fences and small lanes and chunks (two
/// lanes of 16 KiB logs, 16 KiB chunks), so a few writes reach every path; `max_structures`
/// names.
pub fn crash_store_options(max_structures: u64) -> StoreOptions {
    StoreOptions::new()
        .max_structures(max_structures)
        .fence_policy(FencePolicy::Batched)
        .heap(crate::fixture::heap_config(2, 16 << 10, 16 << 10))
}

/// [`store_verifies`] for one raw structure's `verify()`.
pub fn structure_verifies(report: Verification) -> Result<(), String> {
    if report.is_healthy() {
        Ok(())
    } else {
        Err(format!("verify() after recovery: {report}"))
    }
}
