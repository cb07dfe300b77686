//! Tables of hashed key words under simulated crashes, at every event: after recovery
//! ([`Cceh::open_hashed`]) the entries equal a `BTreeMap` model after the operations that
//! returned, plus possibly the interrupted one; colliding entries (one key word, different
//! values) are all kept and a copy a crash left mid-displacement is not; the table checks, and
//! the heap holds exactly the table's blocks.

use std::collections::BTreeMap;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_test_kit::fixture::{simulated_heap, simulated_pool};
use pmem_test_kit::run_crash_test;
use pmem_undo_log::{FencePolicy, Heap};

use super::probe_tests::entries;
use super::test_heap::{payload, Colliding};
use super::{Cceh, CcehConfig, CcehError};

const POOL_BYTES: u64 = 256 << 10;

/// Key words shared by the ids: id `i` has word `1 + i % GROUPS`.
const GROUPS: u64 = 6;

/// An operation of the workload, on the key of an id.
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64, u32),
    Upsert(u64, u32),
    Remove(u64),
}

/// `id -> (key word, payload)`, as [`entries`] lists a table.
type Model = BTreeMap<u64, (u64, u32)>;

fn key(id: u64) -> Colliding {
    Colliding::grouped(id, GROUPS)
}

impl Op {
    /// The model after this operation.
    fn apply(self, model: &mut Model) {
        match self {
            Op::Insert(id, with) => {
                model.entry(id).or_insert((key(id).word, with));
            }
            Op::Upsert(id, with) => {
                model.insert(id, (key(id).word, with));
            }
            Op::Remove(id) => {
                model.remove(&id);
            }
        }
    }

    /// Run this operation on `table`, whose entries are `model` before it: what it returns
    /// (the old payload) must be the model's.
    fn run(self, table: &SimTable<'_, '_>, model: &Model) -> Result<(), String> {
        let ok = |_| Ok::<(), CcehError>(());
        let (old, expected) = match self {
            Op::Insert(id, with) => (
                table.put_probe(&key(id), key(id).value(with), false, ok),
                model.get(&id),
            ),
            Op::Upsert(id, with) => (
                table.put_probe(&key(id), key(id).value(with), true, ok),
                model.get(&id),
            ),
            Op::Remove(id) => (
                table.remove_probe(&key(id), |_| Ok::<(), CcehError>(())),
                model.get(&id),
            ),
        };
        let old = old.map_err(|e| format!("{self:?}: {e}"))?.map(payload);
        if old != expected.map(|&(_, p)| p) {
            return Err(format!("{self:?} returned {old:?}, the model {expected:?}"));
        }
        Ok(())
    }
}

type SimTable<'h, 'p> = Cceh<SimBackend>;

/// Ids 1..=36 inserted (six per key word), every third updated, every fourth removed, a few
/// of those inserted again.
fn workload() -> Vec<Op> {
    let mut ops: Vec<Op> = (1..=36).map(|id| Op::Insert(id, id as u32)).collect();
    ops.extend(
        (1..=36)
            .step_by(3)
            .map(|id| Op::Upsert(id, 1000 + id as u32)),
    );
    ops.extend((2..=36).step_by(4).map(Op::Remove));
    ops.extend(
        (2..=36)
            .step_by(8)
            .map(|id| Op::Insert(id, 2000 + id as u32)),
    );
    ops
}

/// The models after each prefix of `ops`.
fn history(ops: &[Op]) -> Vec<Model> {
    let mut model = Model::new();
    let mut after = vec![model.clone()];
    for op in ops {
        op.apply(&mut model);
        after.push(model.clone());
    }
    after
}

/// Run `ops` on a table of `config` made before the first event, crashing at every event;
/// each recovery is checked. Returns the number of crash points checked.
fn crash_every_event(name: &str, config: CcehConfig, ops: &[Op]) -> u64 {
    let history = history(ops);
    let test = CrashTest::new(name, SimConfig::x86())
        .pool("cceh-hashed", POOL_BYTES, 1024)
        .points(CrashPoints::Every)
        .images(Images::Random(3))
        .seed(14);
    let report = run_crash_test(
        &test,
        |pool| {
            let heap = simulated_heap(pool, FencePolicy::Batched);
            Cceh::create_hashed(&heap, pool.root_offset(), config).expect("create the table");
        },
        |pool| {
            let heap = Heap::open(pool.clone()).expect("open the heap");
            let table = Cceh::open_hashed(&heap, pool.root_offset()).expect("open the table");
            for (op, before) in ops.iter().zip(&history) {
                op.run(&table, before).unwrap_or_else(|e| panic!("{e}"));
                pool.operation_completed();
            }
        },
        |pool, crash| {
            let heap = Heap::open(pool.clone()).map_err(|e| format!("Heap::open: {e}"))?;
            let table = Cceh::open_hashed(&heap, pool.root_offset())
                .map_err(|e| format!("Cceh::open_hashed: {e}"))?;
            let now = entries(&table)?;
            let done = crash.operations_completed as usize;
            if history.get(done) != Some(&now) && history.get(done + 1) != Some(&now) {
                return Err(format!(
                    "after {done} operations the table holds {now:?}, unlike the model"
                ));
            }
            let checked = table.check().map_err(|e| format!("check: {e}"))?;
            if checked != now.len() as u64 {
                return Err(format!("check counts {checked}, iteration {}", now.len()));
            }
            let owned: Vec<u64> = heap
                .check_heap()
                .map_err(|e| format!("heap walk: {e}"))?
                .into_iter()
                .map(|(offset, _)| offset)
                .collect();
            if owned != table.blocks().map_err(|e| format!("blocks: {e}"))? {
                return Err("the heap's blocks are not the table's".into());
            }
            drop(table);
            let again = Cceh::open_hashed(&heap, pool.root_offset())
                .map_err(|e| format!("second open: {e}"))?;
            if entries(&again)? != now || again.repaired_at_open() != 0 {
                return Err("a second open found a different table".into());
            }
            Ok(())
        },
    );
    report.points
}

/// The table `ops` leave without crashes, on a simulated pool as the crash tests use.
fn without_crashes(config: CcehConfig, ops: &[Op], check: impl FnOnce(&SimTable<'_, '_>)) {
    let pool = simulated_pool("cceh-hashed", POOL_BYTES, 1024, SimConfig::x86());
    let heap = simulated_heap(&pool, FencePolicy::Batched);
    let table = Cceh::create_hashed(&heap, pool.root_offset(), config).unwrap();
    let history = history(ops);
    for (op, before) in ops.iter().zip(&history) {
        op.run(&table, before).unwrap();
    }
    assert_eq!(&entries(&table).unwrap(), history.last().unwrap());
    check(&table);
}

const SPLITTING: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

/// Segments of 8 buckets: a window is half a segment, so full windows displace entries
/// before they split.
const DISPLACING: CcehConfig = CcehConfig {
    buckets_per_segment: 8,
};

#[test]
fn the_workloads_split_double_and_displace_colliding_entries() {
    without_crashes(SPLITTING, &workload(), |table| {
        assert!(
            table.global_depth().unwrap() >= 2,
            "depth {}",
            table.global_depth().unwrap()
        );
    });
    without_crashes(DISPLACING, &workload(), |table| {
        assert!(
            table.displacements() >= 1,
            "{} moves",
            table.displacements()
        );
        assert!(table.global_depth().unwrap() >= 1);
    });
}

#[test]
fn every_crash_through_splits_of_colliding_entries_recovers_to_the_model() {
    let points = crash_every_event("cceh-hashed-splits", SPLITTING, &workload());
    assert!(points > 300, "{points} crash points");
}

#[test]
fn every_crash_through_displacements_of_colliding_entries_recovers_to_the_model() {
    let points = crash_every_event("cceh-hashed-displacements", DISPLACING, &workload());
    assert!(points > 300, "{points} crash points");
}
