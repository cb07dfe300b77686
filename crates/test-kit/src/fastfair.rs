//! FAST&FAIR operations against a `BTreeMap` model.

use std::collections::BTreeMap;
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use pmem_ordering::sim::{CrashFailure, CrashTest, Report};
use pmem_ordering::{Backend, Pool};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, FastFairError};
use pmem_undo_log::{FencePolicy, Heap};

use crate::fixture::{heap_holds_exactly, simulated_heap};
use crate::key_value::{check_point, KeyValueIndex, PointOp};
use crate::model::{agree, failed, run_each};
use crate::{
    crash_test_outcome_with_recovery, structure_verifies, History, ModelOp, ReservedKeyOp,
    SplitMix64,
};

/// What a FAST&FAIR tree must hold, in key order.
pub type FastFairModel = BTreeMap<u64, u64>;

/// Keys of fuzz inputs: 0..FUZZ_KEYS, enough to grow trees of small nodes several levels deep.
pub const FUZZ_KEYS: u64 = 128;

/// One operation on a FAST&FAIR tree. Keys are never the reserved `u64::MAX` (see
/// [`FastFairOp::Reserved`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum FastFairOp {
    /// `insert(key, value)`: a key already present keeps its value.
    Insert(#[arbitrary(with = fuzz_key)] u64, u64),
    /// `upsert(key, value)`.
    Upsert(#[arbitrary(with = fuzz_key)] u64, u64),
    /// `remove(key)`.
    Remove(#[arbitrary(with = fuzz_key)] u64),
    /// `get(key)`.
    Get(#[arbitrary(with = fuzz_key)] u64),
    /// A scan of the keys from the smaller bound up to the larger, excluded.
    Range(
        #[arbitrary(with = fuzz_key)] u64,
        #[arbitrary(with = fuzz_key)] u64,
    ),
    /// An operation on `u64::MAX`, which must be refused and change nothing.
    Reserved(ReservedKeyOp),
}

fn fuzz_key(u: &mut Unstructured) -> arbitrary::Result<u64> {
    u.int_in_range(0..=FUZZ_KEYS - 1)
}

impl ModelOp for FastFairOp {
    type Model = FastFairModel;

    fn apply(&self, _index: usize, model: &mut FastFairModel) {
        match *self {
            FastFairOp::Insert(k, v) => {
                model.entry(k).or_insert(v);
            }
            FastFairOp::Upsert(k, v) => {
                model.insert(k, v);
            }
            FastFairOp::Remove(k) => {
                model.remove(&k);
            }
            FastFairOp::Get(_) | FastFairOp::Range(..) | FastFairOp::Reserved(_) => {}
        }
    }
}

impl<B: Backend> KeyValueIndex for FastFair<B> {
    type Error = FastFairError;
    const RESERVED_KEY: u64 = u64::MAX;

    fn insert(&self, key: u64, value: u64) -> Result<bool, FastFairError> {
        FastFair::insert(self, key, value)
    }
    fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, FastFairError> {
        FastFair::upsert(self, key, value)
    }
    fn remove(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        FastFair::remove(self, key)
    }
    fn get(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        FastFair::get(self, key)
    }
    fn is_reserved_key_error(error: &FastFairError) -> bool {
        matches!(error, FastFairError::ReservedKey(r) if r.key == u64::MAX)
    }
}

impl FastFairOp {
    /// Runs the operation on `tree`, checks its result and the tree's length against `model`,
    /// then applies it to `model`.
    pub fn run_checked<B: Backend>(
        &self,
        tree: &FastFair<B>,
        model: &mut FastFairModel,
    ) -> Result<(), String> {
        let point = match *self {
            FastFairOp::Insert(k, v) => PointOp::Insert(k, v),
            FastFairOp::Upsert(k, v) => PointOp::Upsert(k, v),
            FastFairOp::Remove(k) => PointOp::Remove(k),
            FastFairOp::Get(k) => PointOp::Get(k),
            FastFairOp::Reserved(op) => PointOp::Reserved(op),
            FastFairOp::Range(a, b) => {
                let (lo, hi) = (a.min(b), a.max(b));
                let got: Vec<(u64, u64)> = tree
                    .range(lo..hi)
                    .collect::<Result<_, _>>()
                    .map_err(|e| failed("range", e))?;
                let want: Vec<(u64, u64)> = model.range(lo..hi).map(|(&k, &v)| (k, v)).collect();
                return agree(format!("range({lo}..{hi})"), got, want);
            }
        };
        check_point(tree, point, |k| model.get(&k).copied())?;
        self.apply(0, model);
        agree("len".to_string(), tree.len(), model.len() as u64)
    }

    /// `n` operations on keys `0..keys` from `seed`: a growing phase (inserts and upserts), then
    /// a shrinking one (removes, a few upserts), so splits, merges, borrows and root changes in
    /// both directions all happen; the crash tests' workload.
    pub fn grow_then_shrink(n: usize, keys: u64, seed: u64) -> Vec<FastFairOp> {
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                let key = rng.below(keys);
                let grow = i < n / 2;
                match (i % 5, grow) {
                    (0..=2, true) => FastFairOp::Insert(key, i as u64 + 1),
                    (3, true) => FastFairOp::Upsert(key, i as u64 + 1000),
                    (_, false) if i % 10 == 0 => FastFairOp::Upsert(key, i as u64 + 1000),
                    _ => FastFairOp::Remove(key),
                }
            })
            .collect()
    }

    /// Operations on keys in `keys` (below `u64::MAX`), every kind, inserts the most.
    #[cfg(feature = "proptest")]
    pub fn strategy(
        keys: std::ops::Range<u64>,
    ) -> impl proptest::strategy::Strategy<Value = FastFairOp> {
        use proptest::prelude::*;
        assert!(keys.end < u64::MAX, "u64::MAX is reserved");
        prop_oneof![
            4 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| FastFairOp::Insert(k, v)),
            2 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| FastFairOp::Upsert(k, v)),
            3 => keys.clone().prop_map(FastFairOp::Remove),
            1 => keys.clone().prop_map(FastFairOp::Get),
            1 => (keys.clone(), keys).prop_map(|(a, b)| FastFairOp::Range(a, b)),
            1 => ReservedKeyOp::strategy().prop_map(FastFairOp::Reserved),
        ]
    }
}

/// Runs `ops` in order on `tree`, each checked against `model` ([`FastFairOp::run_checked`]),
/// telling the pool after each that an operation returned.
pub fn run_all<B: Backend>(
    tree: &FastFair<B>,
    pool: &Pool<B>,
    ops: &[FastFairOp],
    model: &mut FastFairModel,
) -> Result<(), String> {
    run_each(pool, ops, model, |_, op, model| op.run_checked(tree, model))
}

/// What `tree` holds, by a full scan, which must be strictly increasing in key.
pub fn contents<B: Backend>(tree: &FastFair<B>) -> Result<FastFairModel, String> {
    let scan: Vec<(u64, u64)> = tree
        .range(..)
        .collect::<Result<_, _>>()
        .map_err(|e| failed("a full scan", e))?;
    if let Some(w) = scan.windows(2).find(|w| w[0].0 >= w[1].0) {
        return Err(format!(
            "the scan is not strictly increasing: {:?} then {:?}",
            w[0], w[1]
        ));
    }
    Ok(scan.into_iter().collect())
}

/// Checks a (recovered) tree is well formed and consistent with its heap: the scan is strictly
/// increasing, `check` counts as many keys, `get` finds every scanned pair, and the heap holds
/// exactly the tree's nodes and redo area, and `verify()` finds nothing. Returns its contents.
pub fn check_tree<B: Backend>(heap: &Heap<B>, tree: &FastFair<B>) -> Result<FastFairModel, String> {
    let now = contents(tree)?;
    let keys = tree.check().map_err(|e| failed("check", e))?;
    if keys != now.len() as u64 {
        return Err(format!("check counts {keys} keys, the scan {}", now.len()));
    }
    for (&k, &v) in &now {
        if tree.get(k).map_err(|e| failed("get", e))? != Some(v) {
            return Err(format!("get({k}) disagrees with the scan"));
        }
    }
    let blocks = tree.blocks().map_err(|e| failed("blocks", e))?;
    heap_holds_exactly(heap, &blocks, "tree")?;
    structure_verifies(tree.verify())?;
    Ok(now)
}

/// Where `now` and `model` differ, briefly: a few missing and unexpected pairs.
pub fn difference(now: &FastFairModel, model: &FastFairModel) -> String {
    let missing: Vec<_> = model
        .iter()
        .filter(|(k, v)| now.get(k) != Some(v))
        .take(4)
        .collect();
    let extra: Vec<_> = now
        .iter()
        .filter(|(k, v)| model.get(k) != Some(v))
        .take(4)
        .collect();
    format!(
        "the tree holds {} pairs, the model {}; missing {missing:?}, unexpected {extra:?}",
        now.len(),
        model.len()
    )
}

/// Crash-tests `ops` on a fresh tree of `config` (batched fences). The workload checks every
/// result against the model; every crash image must recover (`Heap::open`, `FastFair::open`)
/// to the model after the operations that returned, or after the interrupted one too, in a
/// well-formed tree ([`check_tree`]). Panics with the harness's report on a failure.
pub fn crash_ops(test: &CrashTest, config: FastFairConfig, ops: &[FastFairOp]) -> Report {
    crash_ops_outcome(test, config, ops).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`crash_ops`] for a test that expects a failure: returns it instead of panicking.
pub fn crash_ops_outcome(
    test: &CrashTest,
    config: FastFairConfig,
    ops: &[FastFairOp],
) -> Result<Report, Box<CrashFailure>> {
    let history = History::of(ops);
    crash_test_outcome_with_recovery(
        test,
        |pool| {
            let heap = simulated_heap(pool, FencePolicy::Batched);
            FastFair::create(&heap, pool.root_offset(), config).expect("create the tree");
        },
        |pool| {
            let heap = Heap::open(pool.clone()).expect("open the heap");
            let tree = FastFair::open(&heap, pool.root_offset()).expect("open the tree");
            run_all(&tree, pool, ops, &mut FastFairModel::new()).unwrap_or_else(|e| panic!("{e}"));
        },
        recover,
        |pool, crash| {
            let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
            let tree = FastFair::open(&heap, pool.root_offset())
                .map_err(|e| failed("FastFair::open", e))?;
            let done = crash.operations_completed as usize;
            let now = contents(&tree)?;
            if !history.admits(&now, done) {
                return Err(format!(
                    "after {done} operations (next {:?}) {}",
                    ops.get(done),
                    difference(&now, history.after(done))
                ));
            }
            check_tree(&heap, &tree)?;
            Ok(())
        },
    )
}

/// FAST&FAIR's recovery, as a restart runs it: open the heap (rolling back an interrupted
/// transaction), then the tree (replaying a committed redo log of shifts).
pub fn recover<B: Backend>(pool: &Arc<Pool<B>>) -> Result<(), String> {
    let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
    FastFair::open(&heap, pool.root_offset()).map_err(|e| failed("FastFair::open", e))?;
    Ok(())
}
