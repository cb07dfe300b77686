//! CCEH operations against a `HashMap` model.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use pmem_ordering::sim::{CrashFailure, CrashTest, Report};
use pmem_ordering::{Backend, Pool};
use pmem_structures::raw::cceh::{BatchOptions, Cceh, CcehConfig, CcehError};
use pmem_undo_log::{FencePolicy, Heap};

use crate::fixture::{heap_holds_exactly, simulated_heap};
use crate::key_value::{check_point, refused, KeyValueIndex, PointOp};
use crate::model::{agree, failed, run_each};
use crate::{
    crash_test_outcome_with_recovery, structure_verifies, History, ModelOp, ReservedKeyOp,
    SplitMix64,
};

/// What a CCEH table must hold.
pub type CcehModel = HashMap<u64, u64>;

/// Keys of fuzz inputs: 1..=FUZZ_KEYS, few enough that a short input fills tiny segments,
/// splits them and doubles the directory.
pub const FUZZ_KEYS: u64 = 64;

/// One operation on a CCEH table. Keys are never the reserved 0 (see [`CcehOp::Reserved`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum CcehOp {
    /// `insert(key, value)`: a key already present keeps its value.
    Insert(#[arbitrary(with = fuzz_key)] u64, u64),
    /// `upsert(key, value)`.
    Upsert(#[arbitrary(with = fuzz_key)] u64, u64),
    /// `remove(key)`.
    Remove(#[arbitrary(with = fuzz_key)] u64),
    /// `get(key)`.
    Get(#[arbitrary(with = fuzz_key)] u64),
    /// `insert_batch` of a few keys.
    InsertBatch(Batch),
    /// An operation on key 0, which must be refused and change nothing.
    Reserved(ReservedKeyOp),
}

/// An `insert_batch`: keys `first + i * stride` with values `value + i` for `i < len` (a zero
/// stride repeats one key inside the batch), optionally with key 0 at its end, which must make
/// the whole batch refused and write nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct Batch {
    #[arbitrary(with = fuzz_key)]
    pub first: u64,
    #[arbitrary(with = |u: &mut Unstructured| u.int_in_range(1..=8))]
    pub len: u64,
    #[arbitrary(with = |u: &mut Unstructured| u.int_in_range(0..=3))]
    pub stride: u64,
    pub value: u64,
    /// The speculative helper thread (Optane buffering (EuroSys'22), Sec. 4.1).
    pub helper: bool,
    pub inline_prefetch: bool,
    /// Prefetch depth 8 rather than 1.
    pub deep: bool,
    #[arbitrary(with = |u: &mut Unstructured| u.ratio(1u8, 8))]
    pub with_reserved_key: bool,
}

fn fuzz_key(u: &mut Unstructured) -> arbitrary::Result<u64> {
    u.int_in_range(1..=FUZZ_KEYS)
}

impl Batch {
    /// The batch's (key, value) pairs, in order.
    pub fn items(&self) -> Vec<(u64, u64)> {
        let mut items: Vec<(u64, u64)> = (0..self.len)
            .map(|i| (self.first + i * self.stride, self.value.wrapping_add(i)))
            .collect();
        if self.with_reserved_key {
            items.push((0, self.value));
        }
        items
    }

    /// The batch's options.
    pub fn options(&self) -> BatchOptions {
        BatchOptions {
            helper: self.helper,
            inline_prefetch: self.inline_prefetch,
            depth: if self.deep { 8 } else { 1 },
        }
    }
}

impl ModelOp for CcehOp {
    type Model = CcehModel;

    fn apply(&self, _index: usize, model: &mut CcehModel) {
        match *self {
            CcehOp::Insert(k, v) => {
                model.entry(k).or_insert(v);
            }
            CcehOp::Upsert(k, v) => {
                model.insert(k, v);
            }
            CcehOp::Remove(k) => {
                model.remove(&k);
            }
            CcehOp::InsertBatch(batch) if !batch.with_reserved_key => {
                for (k, v) in batch.items() {
                    model.entry(k).or_insert(v);
                }
            }
            CcehOp::InsertBatch(_) | CcehOp::Get(_) | CcehOp::Reserved(_) => {}
        }
    }
}

impl CcehOp {
    /// Runs the operation on `table`, checks its result and the table's length against
    /// `model`, then applies it to `model`.
    pub fn run_checked<B: Backend>(
        &self,
        table: &Cceh<B>,
        model: &mut CcehModel,
    ) -> Result<(), String> {
        let point = match *self {
            CcehOp::Insert(k, v) => PointOp::Insert(k, v),
            CcehOp::Upsert(k, v) => PointOp::Upsert(k, v),
            CcehOp::Remove(k) => PointOp::Remove(k),
            CcehOp::Get(k) => PointOp::Get(k),
            CcehOp::Reserved(op) => PointOp::Reserved(op),
            CcehOp::InsertBatch(batch) => {
                check_batch(table, &batch, model)?;
                self.apply(0, model);
                return agree("len".to_string(), table.len(), model.len() as u64);
            }
        };
        check_point(table, point, |k| model.get(&k).copied())?;
        self.apply(0, model);
        agree("len".to_string(), table.len(), model.len() as u64)
    }

    /// `n` operations on keys `1..=keys` from `seed`: inserts, upserts and removes in the ratio
    /// 3 : 2 : 1, values telling operations apart; the crash tests' workload.
    pub fn mixed(n: usize, keys: u64, seed: u64) -> Vec<CcehOp> {
        let mut rng = SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                let key = rng.below(keys) + 1;
                match i % 6 {
                    0..=2 => CcehOp::Insert(key, i as u64 + 1),
                    3 | 4 => CcehOp::Upsert(key, i as u64 + 1000),
                    _ => CcehOp::Remove(key),
                }
            })
            .collect()
    }

    /// Operations on keys in `keys` (which must not hold 0), every kind, inserts the most.
    #[cfg(feature = "proptest")]
    pub fn strategy(
        keys: std::ops::Range<u64>,
    ) -> impl proptest::strategy::Strategy<Value = CcehOp> {
        use proptest::prelude::*;
        assert!(keys.start > 0, "key 0 is reserved");
        let batch = (
            keys.clone(),
            1u64..=8,
            0u64..=3,
            any::<u64>(),
            any::<[bool; 3]>(),
        )
            .prop_flat_map(
                |(first, len, stride, value, [helper, inline_prefetch, deep])| {
                    prop::bool::weighted(0.125).prop_map(move |with_reserved_key| Batch {
                        first,
                        len,
                        stride,
                        value,
                        helper,
                        inline_prefetch,
                        deep,
                        with_reserved_key,
                    })
                },
            );
        prop_oneof![
            4 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| CcehOp::Insert(k, v)),
            2 => (keys.clone(), any::<u64>()).prop_map(|(k, v)| CcehOp::Upsert(k, v)),
            2 => keys.clone().prop_map(CcehOp::Remove),
            1 => keys.prop_map(CcehOp::Get),
            1 => batch.prop_map(CcehOp::InsertBatch),
            1 => ReservedKeyOp::strategy().prop_map(CcehOp::Reserved),
        ]
    }
}

/// Runs `batch` on `table` and checks how many keys it inserted against `model` (or, with key 0
/// in it, that it was refused).
fn check_batch<B: Backend>(
    table: &Cceh<B>,
    batch: &Batch,
    model: &CcehModel,
) -> Result<(), String> {
    let items = batch.items();
    let what = format!("insert_batch({items:?})");
    let result = table.insert_batch(&items, batch.options());
    if batch.with_reserved_key {
        return refused(
            &what,
            result,
            |e| matches!(e, CcehError::ReservedKey(r) if r.key == 0),
        );
    }
    let inserted = result.map_err(|e| failed("insert_batch", e))?;
    let mut fresh = model.clone();
    let expected = items
        .iter()
        .filter(|&&(k, v)| match fresh.entry(k) {
            Entry::Vacant(e) => {
                e.insert(v);
                true
            }
            Entry::Occupied(_) => false,
        })
        .count() as u64;
    agree(what, inserted, expected)
}

impl<B: Backend> KeyValueIndex for Cceh<B> {
    type Error = CcehError;
    const RESERVED_KEY: u64 = 0;

    fn insert(&self, key: u64, value: u64) -> Result<bool, CcehError> {
        Cceh::insert(self, key, value)
    }
    fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, CcehError> {
        Cceh::upsert(self, key, value)
    }
    fn remove(&self, key: u64) -> Result<Option<u64>, CcehError> {
        Cceh::remove(self, key)
    }
    fn get(&self, key: u64) -> Result<Option<u64>, CcehError> {
        Cceh::get(self, key)
    }
    fn is_reserved_key_error(error: &CcehError) -> bool {
        matches!(error, CcehError::ReservedKey(r) if r.key == 0)
    }
}

/// Runs `ops` in order on `table`, each checked against `model` ([`CcehOp::run_checked`]),
/// telling the pool after each that an operation returned.
pub fn run_all<B: Backend>(
    table: &Cceh<B>,
    pool: &Pool<B>,
    ops: &[CcehOp],
    model: &mut CcehModel,
) -> Result<(), String> {
    run_each(pool, ops, model, |_, op, model| {
        op.run_checked(table, model)
    })
}

/// What `table` holds, by iteration.
pub fn contents<B: Backend>(table: &Cceh<B>) -> Result<CcehModel, String> {
    table
        .iter()
        .collect::<Result<_, _>>()
        .map_err(|e| failed("iter", e))
}

/// Checks a (recovered) table is consistent with itself and its heap: iteration lists each key
/// once, `len` agrees, `get` finds every listed pair and agrees with iteration on the `probe`
/// keys, the heap holds exactly the table's directory and segments, and `verify()` finds
/// nothing. Returns its contents.
pub fn check_table<B: Backend>(
    heap: &Heap<B>,
    table: &Cceh<B>,
    probe: impl IntoIterator<Item = u64>,
) -> Result<CcehModel, String> {
    let now = contents(table)?;
    let listed = table
        .iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed("iter", e))?
        .len();
    let checked = table.check().map_err(|e| failed("check", e))?;
    if table.len() != now.len() as u64 || listed != now.len() || checked != table.len() {
        return Err(format!(
            "len {}, {listed} pairs listed, {checked} keys checked, {} distinct keys",
            table.len(),
            now.len()
        ));
    }
    for (&k, &v) in &now {
        if table.get(k).map_err(|e| failed("get", e))? != Some(v) {
            return Err(format!("get({k}) disagrees with iteration"));
        }
    }
    for k in probe {
        agree(
            format!("get({k})"),
            table.get(k).map_err(|e| failed("get", e))?,
            now.get(&k).copied(),
        )?;
    }
    let blocks = table.blocks().map_err(|e| failed("blocks", e))?;
    heap_holds_exactly(heap, &blocks, "table")?;
    structure_verifies(table.verify())?;
    Ok(now)
}

/// What [`crash_ops`] found.
#[derive(Debug)]
pub struct CcehCrashOutcome {
    /// The harness's report.
    pub report: Report,
    /// Recoveries that finished a split the crash had interrupted (FAST'19 CCEH, Sec. 4).
    pub splits_finished: u64,
}

/// Crash-tests `ops` on a fresh table of `config` on a heap with fence `policy`. The workload
/// checks every result against the model; every crash image must recover (`Heap::open`,
/// `Cceh::open`) to a consistent table ([`check_table`]) holding the model after the operations
/// that returned, or after the interrupted one too, and a second open must find nothing more
/// to repair and the same contents. Panics with the harness's report on a failure.
pub fn crash_ops(
    test: &CrashTest,
    config: CcehConfig,
    policy: FencePolicy,
    ops: &[CcehOp],
) -> CcehCrashOutcome {
    crash_ops_outcome(test, config, policy, ops).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`crash_ops`] for a test that expects a failure: returns it instead of panicking.
pub fn crash_ops_outcome(
    test: &CrashTest,
    config: CcehConfig,
    policy: FencePolicy,
    ops: &[CcehOp],
) -> Result<CcehCrashOutcome, Box<CrashFailure>> {
    let history = History::of(ops);
    let splits_finished = AtomicU64::new(0);
    let report = crash_test_outcome_with_recovery(
        test,
        |pool| {
            let heap = simulated_heap(pool, policy);
            Cceh::create(&heap, pool.root_offset(), config).expect("create the table");
        },
        |pool| {
            let heap = Heap::open(pool.clone()).expect("open the heap");
            let table = Cceh::open(&heap, pool.root_offset()).expect("open the table");
            run_all(&table, pool, ops, &mut CcehModel::new()).unwrap_or_else(|e| panic!("{e}"));
        },
        recover,
        |pool, crash| {
            let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
            let table =
                Cceh::open(&heap, pool.root_offset()).map_err(|e| failed("Cceh::open", e))?;
            if table.repaired_at_open() > 0 {
                splits_finished.fetch_add(1, Ordering::Relaxed);
            }
            let now = check_table(&heap, &table, [])?;
            let done = crash.operations_completed as usize;
            if !history.admits(&now, done) {
                return Err(format!(
                    "after {done} operations the table holds {} keys, unlike the model",
                    now.len()
                ));
            }
            // The repair was made durable: a second open finds nothing to finish.
            drop(table);
            let again =
                Cceh::open(&heap, pool.root_offset()).map_err(|e| failed("Cceh::open", e))?;
            if again.repaired_at_open() != 0 || contents(&again)? != now {
                return Err("a second open found a different table".into());
            }
            Ok(())
        },
    )?;
    Ok(CcehCrashOutcome {
        report,
        splits_finished: splits_finished.into_inner(),
    })
}

/// CCEH's recovery, as a restart runs it: open the heap (rolling back an interrupted
/// transaction), then the table (finishing an interrupted split).
pub fn recover<B: Backend>(pool: &Arc<Pool<B>>) -> Result<(), String> {
    let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
    Cceh::open(&heap, pool.root_offset()).map_err(|e| failed("Cceh::open", e))?;
    Ok(())
}
