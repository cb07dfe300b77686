//! Byte-key map operations under the crash driver: [`crash_record_ops`] checks every recovered
//! image against the model's history; [`crash_small_ops`] runs it on the small operations of
//! a fuzz input, at a seeded sample of crash points.

use pmem_ordering::sim::{
    CrashFailure, CrashPoints, CrashTest, Images, Report, SimBackend, SimConfig,
};
use pmem_ordering::Pool;
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{Error, Store};
use pmem_undo_log::Heap;
use std::sync::Arc;

use super::driver::{contents, HASH_NAME, TREE_NAME};
use super::{RecordDriver, RecordModel, RecordOp, RecordSetup};
use crate::model::{failed, run_each};
use crate::{crash_test_outcome_with_recovery, store_verifies, History};

type SimStore = Store<SimBackend>;

/// Crash-tests `ops` on both maps of a fresh store made with `setup` on `test`'s pool (whose
/// root object must hold the catalog: [`RecordSetup::root_size`]; the maps are made before the
/// traced run). The workload checks every result against the model (a reopen is `Heap::open`
/// and `Store::load` on the pool); every crash image must recover (`Heap::open`,
/// `Store::load`) to a store whose heap holds exactly the structures' blocks
/// (`check_blocks`), whose `verify()` finds nothing, whose maps both check, and where each map holds the model after the
/// operations that returned, or after the interrupted one too; the ordered map, written after
/// the hash map, never holds an operation the hash map lacks. Panics with the harness's report
/// on a failure.
pub fn crash_record_ops(test: &CrashTest, setup: RecordSetup, ops: &[RecordOp]) -> Report {
    crash_record_ops_outcome(test, setup, ops).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`crash_record_ops`] for a test that expects a failure: returns it instead of panicking.
pub fn crash_record_ops_outcome(
    test: &CrashTest,
    setup: RecordSetup,
    ops: &[RecordOp],
) -> Result<Report, Box<CrashFailure>> {
    let history = History::of(ops);
    crash_test_outcome_with_recovery(
        test,
        |pool| {
            let store = SimStore::format(pool.clone(), &setup.options()).expect("format the store");
            store
                .hash_map_with::<Vec<u8>, Vec<u8>>(HASH_NAME, setup.table())
                .expect("make the hash map");
            store
                .btree_map_with::<Vec<u8>, Vec<u8>>(TREE_NAME, setup.tree())
                .expect("make the ordered map");
        },
        |pool| {
            let store = load(pool).expect("load the store");
            let mut driver =
                RecordDriver::new(store, setup, || load(pool)).unwrap_or_else(|e| panic!("{e}"));
            run_each(pool, ops, &mut RecordModel::new(), |_, op, model| {
                driver.run_checked(op, model)
            })
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
            let (hashed, walked) = contents(&store, &setup)?;
            let done = crash.operations_completed as usize;
            let at = |m: &RecordModel| {
                (done..=(done + 1).min(ops.len())).find(|&n| history.after(n) == m)
            };
            let (Some(hash_at), Some(tree_at)) = (at(&hashed), at(&walked)) else {
                return Err(format!(
                    "after {done} operations (next {:?}) the maps hold {} and {} pairs, the \
                     model {} (or {} after the next)",
                    ops.get(done),
                    hashed.len(),
                    walked.len(),
                    history.after(done).len(),
                    history.after((done + 1).min(ops.len())).len()
                ));
            };
            if tree_at > hash_at && hashed != walked {
                return Err(format!(
                    "the ordered map holds operation {done} ({:?}) and the hash map, written \
                     first, not",
                    ops.get(done)
                ));
            }
            Ok(())
        },
    )
}

/// The simulated pool of [`crash_small_ops`]: room for [`CRASH_OPS`] small operations on
/// both maps.
pub const CRASH_POOL_BYTES: u64 = 2 << 20;
/// The operations [`crash_small_ops`] crash-tests, at most.
pub const CRASH_OPS: usize = 24;

/// Crash-tests ([`crash_record_ops`], x86 model) the first [`CRASH_OPS`] small operations of
/// `ops` ([`RecordOp::is_small`]) on a [`CRASH_POOL_BYTES`] pool, at `points` crash points
/// sampled with `seed`, each with the two extreme images and one random one. Panics with the
/// harness's report on a failure; `None` when `ops` has no small write to crash.
pub fn crash_small_ops(
    setup: RecordSetup,
    ops: &[RecordOp],
    seed: u64,
    points: usize,
) -> Option<Report> {
    let small: Vec<RecordOp> = ops
        .iter()
        .filter(|op| op.is_small())
        .take(CRASH_OPS)
        .cloned()
        .collect();
    let writes = small.iter().any(|op| {
        matches!(
            op,
            RecordOp::Insert(..) | RecordOp::Upsert(..) | RecordOp::Remove(_)
        )
    });
    if !writes {
        return None;
    }
    let root = setup
        .root_size()
        .unwrap_or_else(|e| panic!("the catalog's root size: {e}"));
    let test = CrashTest::new("record-maps-fuzz", SimConfig::x86())
        .pool(STORE_LAYOUT, CRASH_POOL_BYTES, root)
        .points(CrashPoints::Sample(points))
        .images(Images::Random(1))
        .seed(seed)
        .fail_on_unpersisted(true);
    Some(crash_record_ops(&test, setup, &small))
}

/// The store on `pool`, opened as a restart would: `Heap::open`, then `Store::load`.
fn load(pool: &Arc<Pool<SimBackend>>) -> Result<SimStore, Error> {
    Store::load(Heap::open(pool.clone())?)
}
