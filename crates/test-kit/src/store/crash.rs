//! Store operations under the crash driver: [`crash_ops`] checks every recovered image against
//! the model's history, and [`load`] opens a simulated store as a restart would.

use pmem_ordering::sim::{CrashFailure, CrashTest, Report, SimBackend};
use pmem_ordering::Pool;
use pmem_structures::{Error, Store};
use pmem_undo_log::Heap;
use std::sync::Arc;

use super::{observe, StoreDriver, StoreModel, StoreOp, StoreSetup};
use crate::model::failed;
use crate::{crash_test_outcome_with_recovery, store_verifies, History};

/// A simulated store: the pool's handle to it.
pub type SimStore = Store<SimBackend>;

/// Crash-tests `ops` on a fresh store made with `setup` on `test`'s pool (whose root object
/// must hold the catalog: [`StoreSetup::root_size`]). The workload checks every result against
/// the model (a reopen is `Heap::open` and `Store::load` on the pool); every crash image must
/// recover (`Heap::open`, `Store::load`) to a store whose heap holds exactly the structures'
/// blocks (`check_blocks`), whose `verify()` finds nothing, and whose names, kinds and pairs are the model's after the
/// operations that returned, or after the interrupted one too. Panics with the harness's
/// report on a failure.
pub fn crash_ops(test: &CrashTest, setup: StoreSetup, ops: &[StoreOp]) -> Report {
    crash_ops_outcome(test, setup, ops).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`crash_ops`] for a test that expects a failure: returns it instead of panicking.
pub fn crash_ops_outcome(
    test: &CrashTest,
    setup: StoreSetup,
    ops: &[StoreOp],
) -> Result<Report, Box<CrashFailure>> {
    let history = History::of(ops);
    crash_test_outcome_with_recovery(
        test,
        |pool| {
            SimStore::format(pool.clone(), &setup.options()).expect("format the store");
        },
        |pool| {
            let store = load(pool).expect("load the store");
            let mut driver =
                StoreDriver::new(store, setup, || load(pool)).unwrap_or_else(|e| panic!("{e}"));
            driver
                .run_all(pool, ops, &mut StoreModel::default())
                .unwrap_or_else(|e| panic!("{e}"));
        },
        |pool| {
            load(pool)
                .map(drop)
                .map_err(|e| failed("recovery (Heap::open, Store::load)", e))
        },
        |pool, crash| {
            let store = load(pool).map_err(|e| failed("recovery (Heap::open, Store::load)", e))?;
            store
                .check_blocks()
                .map_err(|e| failed("check_blocks", e))?;
            store_verifies(&store)?;
            let now = observe(&store, &setup)?;
            let done = crash.operations_completed as usize;
            let admitted = |n: usize| n <= ops.len() && history.after(n).catalog == now;
            if !admitted(done) && !admitted(done + 1) {
                return Err(format!(
                    "after {done} operations (next {:?}) the store holds {now:?}, the model {:?}",
                    ops.get(done),
                    history.after(done).catalog
                ));
            }
            Ok(())
        },
    )
}

/// The store on `pool`, opened as a restart would: `Heap::open`, then `Store::load`.
pub fn load(pool: &Arc<Pool<SimBackend>>) -> Result<SimStore, Error> {
    Store::load(Heap::open(pool.clone())?)
}
