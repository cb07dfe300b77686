//! Crashes at every event of hooked inserts, upserts and removes on a tree of 128-byte nodes
//! (so they split and merge), under each shift policy. The hooks set the bit of the record a
//! put writes and clear the bit of the one it replaces or removes, with a store and a flush
//! and no fence, as the byte-key maps do. In every crash image:
//!
//! * the tree opens, is well formed, and holds the state before or after the interrupted
//!   operation (which bits of that operation are durable is the map's recovery's business);
//! * every bit no interrupted operation touches says whether its record is live after the
//!   operations that returned: in particular, right after a call returns (with nothing pending
//!   persisted) its hook's stores are durable, made so by the operation's own fences.
//!
//! The workload also runs the same operations through the hook-free API on a twin tree and
//! requires the same number of fences for each call: the hook adds none.

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use pmem_ordering::sim::{
    CrashPoints, CrashTest, Images, Report, SimBackend, SimConfig, SplitMix64,
};
use pmem_ordering::Pool;
use pmem_undo_log::Heap;

use super::fixture::{
    contents, fences_of, sim_heap, sim_pool, small_tree, Bits, LAYOUT, POOL_BYTES, ROOT_AREA,
};
use crate::fastfair::{FastFair, ShiftPolicy};

/// A write of the workload; the value it writes is its record id, its index plus one.
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64),
    Upsert(u64),
    Remove(u64),
}

/// Operations, keys below `keys`: a growing half (inserts, some upserts), then a shrinking
/// half (removes, some upserts).
fn workload(n: usize, keys: u64, seed: u64) -> Vec<Op> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|i| {
            let key = rng.below(keys);
            match (i % 5, i < n / 2) {
                (0..=2, true) => Op::Insert(key),
                (3, true) => Op::Upsert(key),
                (_, false) if i % 7 == 0 => Op::Upsert(key),
                _ => Op::Remove(key),
            }
        })
        .collect()
}

/// The record id op `index` writes.
fn record_of(index: usize) -> u64 {
    index as u64 + 1
}

/// The model: the map after each prefix of `ops` (`states[i]` after `i` operations), and the
/// records each operation's hook marks.
struct Model {
    states: Vec<BTreeMap<u64, u64>>,
    touched: Vec<BTreeSet<u64>>,
}

impl Model {
    fn of(ops: &[Op]) -> Model {
        let mut map = BTreeMap::new();
        let mut states = vec![map.clone()];
        let mut touched = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let record = record_of(i);
            let mut marks = BTreeSet::new();
            match *op {
                Op::Insert(k) => {
                    if let std::collections::btree_map::Entry::Vacant(e) = map.entry(k) {
                        e.insert(record);
                        marks.insert(record);
                    }
                }
                Op::Upsert(k) => {
                    marks.insert(record);
                    marks.extend(map.insert(k, record));
                }
                Op::Remove(k) => marks.extend(map.remove(&k)),
            }
            states.push(map.clone());
            touched.push(marks);
        }
        Model { states, touched }
    }
}

/// Run `op` (op `index`) with the hook that marks its records' bits.
fn hooked(tree: &super::fixture::SimTree, bits: Bits<'_>, index: usize, op: Op) -> Option<u64> {
    match op {
        Op::Insert(k) => tree.put_with(k, record_of(index), false, bits.put_hook(record_of(index))),
        Op::Upsert(k) => tree.put_with(k, record_of(index), true, bits.put_hook(record_of(index))),
        Op::Remove(k) => tree.remove_with(k, bits.remove_hook()),
    }
    .expect("a hooked write")
}

/// Run `op` (op `index`) through the hook-free API: what it returns, as `hooked` returns it.
fn plain(tree: &super::fixture::SimTree, index: usize, op: Op) -> Option<u64> {
    match op {
        Op::Insert(k) => {
            let present = tree.get(k).expect("a lookup");
            let inserted = tree.insert(k, record_of(index)).expect("an insert");
            assert_eq!(inserted, present.is_none());
            present
        }
        Op::Upsert(k) => tree.upsert(k, record_of(index)).expect("an upsert"),
        Op::Remove(k) => tree.remove(k).expect("a remove"),
    }
}

/// Check one crash image against the model (see the module docs).
fn check_image(
    pool: &Arc<Pool<SimBackend>>,
    model: &Model,
    done: usize,
    records: u64,
) -> Result<(), String> {
    let heap = Heap::open(pool.clone()).map_err(|e| format!("heap recovery: {e}"))?;
    let tree = FastFair::open(&heap, pool.root_offset()).map_err(|e| format!("open: {e}"))?;
    tree.check().map_err(|e| format!("check: {e}"))?;
    let got: BTreeMap<u64, u64> = tree
        .iter()
        .collect::<Result<_, _>>()
        .map_err(|e| format!("scan: {e}"))?;
    let before = &model.states[done];
    let after = model.states.get(done + 1);
    if got != *before && Some(&got) != after {
        return Err(format!(
            "after {done} operations the tree holds {got:?}, neither {before:?} nor {after:?}"
        ));
    }
    let live: BTreeSet<u64> = before.values().copied().collect();
    let in_flight = model.touched.get(done);
    for record in 1..=records {
        if in_flight.is_some_and(|t| t.contains(&record)) {
            continue;
        }
        let bit = Bits::read(pool, record)?;
        if bit != live.contains(&record) {
            return Err(format!(
                "after {done} operations record {record}'s bit is {bit} but the record is {}",
                if live.contains(&record) {
                    "live"
                } else {
                    "not live"
                }
            ));
        }
    }
    Ok(())
}

/// Crash every event of `n` hooked writes on `keys` keys under `policy`.
fn every_crash_of_hooked_writes(policy: ShiftPolicy, n: usize, keys: u64, seed: u64) -> Report {
    let ops = workload(n, keys, seed);
    let model = Model::of(&ops);
    let records = ops.len() as u64;
    assert!(records <= Bits::MAX_RECORD, "every record needs a bit word");
    let test = CrashTest::new(
        &format!("fastfair-hook-{}", policy.name()),
        SimConfig::x86(),
    )
    .pool(LAYOUT, POOL_BYTES, ROOT_AREA)
    .points(CrashPoints::Every)
    .images(Images::Random(3))
    .seed(seed);
    let ops_run = ops.clone();
    let (splits, merges, in_leaf) = (Cell::new(0), Cell::new(0), Cell::new(0));
    let report = test
        .run_with_setup(
            |pool| {
                let heap = sim_heap(pool);
                small_tree(&heap, policy);
            },
            |pool| {
                let heap = Heap::open(pool.clone()).expect("the heap");
                let tree = FastFair::open(&heap, pool.root_offset()).expect("the tree");
                let bits = Bits::new(pool);
                let twin_pool = sim_pool();
                let twin_heap = sim_heap(&twin_pool);
                let twin = small_tree(&twin_heap, policy);
                for (i, &op) in ops_run.iter().enumerate() {
                    let blocks_before = tree.blocks().expect("the blocks").len();
                    let (old, fences) = fences_of(|| hooked(&tree, bits, i, op));
                    let blocks_after = tree.blocks().expect("the blocks").len();
                    match blocks_after.cmp(&blocks_before) {
                        Ordering::Greater => splits.set(splits.get() + 1),
                        Ordering::Less => merges.set(merges.get() + 1),
                        Ordering::Equal => in_leaf.set(in_leaf.get() + 1),
                    }
                    pool.operation_completed();
                    let (plain_old, plain_fences) = fences_of(|| plain(&twin, i, op));
                    assert_eq!(
                        old, plain_old,
                        "op {i} {op:?}: the hooked and plain results"
                    );
                    assert_eq!(
                        fences, plain_fences,
                        "op {i} {op:?}: the hook changed the number of fences"
                    );
                }
                assert_eq!(
                    contents(&tree),
                    contents(&twin),
                    "the hooked and plain trees"
                );
                assert_eq!(contents(&tree), model.states[ops_run.len()], "the model");
            },
            |pool, crash| check_image(pool, &model, crash.operations_completed as usize, records),
        )
        .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(report.unpersisted().count(), 0, "{:?}", report.findings);
    assert_eq!(report.operations, records, "every operation completed");
    let (splits, merges, in_leaf) = (splits.get(), merges.get(), in_leaf.get());
    assert!(
        splits >= 3 && merges >= 3 && in_leaf >= 10,
        "{splits} splits, {merges} merges and {in_leaf} in-leaf writes: not the mix under test"
    );
    report
}

/// 90 writes on 16 keys in 4-entry nodes: splits, merges and in-leaf writes all happen.
fn run(policy: ShiftPolicy) {
    let report = every_crash_of_hooked_writes(policy, 90, 16, 0x400C);
    assert!(report.points > report.operations, "{report:?}");
}

#[test]
fn every_crash_of_hooked_writes_recovers_under_per_shift() {
    run(ShiftPolicy::PerShift);
}

#[test]
fn every_crash_of_hooked_writes_recovers_under_fast() {
    run(ShiftPolicy::Fast);
}

#[test]
fn every_crash_of_hooked_writes_recovers_under_redo() {
    run(ShiftPolicy::Redo);
}
