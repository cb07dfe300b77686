//! The leaf map's operations against a `BTreeMap` model, its checks, its crash driver, and
//! the operations' fuzz encoding.
//!
//! Keys are drawn from four families of up to 64 keys each (short, sharing a prefix, long enough
//! to need a record in small slots, and the empty key's neighbours), values from empty to a
//! few hundred bytes (inline in small slots, or out of line in records), so a short sequence on
//! leaves of a few slots splits leaves, moves pairs between inline and out-of-line, and empties
//! leaves that are unlinked.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use pmem_ordering::sim::{CrashFailure, CrashTest, Report};
use pmem_ordering::{Backend, Pool};
use pmem_structures::raw::leafmap::{LeafMap, LeafMapConfig};
use pmem_undo_log::{FencePolicy, Heap};

use crate::fixture::{heap_holds_exactly, simulated_heap};
use crate::fuzz_input::{FuzzBytes, FuzzEncode, FuzzInput};
use crate::model::{agree, failed, run_each};
use crate::{crash_test_outcome_with_recovery, structure_verifies, History, ModelOp};

/// What a leaf map must hold.
pub type LeafModel = BTreeMap<Vec<u8>, Vec<u8>>;

pub use crate::fixture::SMALL_LEAVES;

/// The key of family `family` (0..4) and number `n` (0..64).
pub fn leaf_key(family: u8, n: u8) -> Vec<u8> {
    let n = n % 64;
    match family % 4 {
        0 => vec![n],
        1 => format!("user:{n:04}").into_bytes(),
        2 => {
            let mut k = vec![b'p'; 60];
            k.push(n);
            k
        }
        _ => vec![0; n as usize % 5],
    }
}

/// A value of `len` bytes (`len % 4` picks the size class: empty, short, about the inline
/// limit of small slots, out of line), filled from `seed`.
pub fn leaf_value(len: u16, seed: u8) -> Vec<u8> {
    let len = match len % 4 {
        0 => 0,
        1 => 1 + (len as usize / 4) % 16,
        2 => 30 + (len as usize / 4) % 24,
        _ => 60 + (len as usize / 4) % 400,
    };
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

fn fuzz_key(u: &mut Unstructured) -> arbitrary::Result<Vec<u8>> {
    Ok(leaf_key(u.arbitrary()?, u.arbitrary()?))
}

fn fuzz_value(u: &mut Unstructured) -> arbitrary::Result<Vec<u8>> {
    Ok(leaf_value(u.arbitrary()?, u.arbitrary()?))
}

/// One operation on a leaf map.
#[derive(Clone, Debug, PartialEq, Eq, Arbitrary)]
pub enum LeafOp {
    /// `insert(key, value)`: a present key keeps its value.
    Insert(
        #[arbitrary(with = fuzz_key)] Vec<u8>,
        #[arbitrary(with = fuzz_value)] Vec<u8>,
    ),
    /// `upsert(key, value)`.
    Upsert(
        #[arbitrary(with = fuzz_key)] Vec<u8>,
        #[arbitrary(with = fuzz_value)] Vec<u8>,
    ),
    /// `remove(key)`.
    Remove(#[arbitrary(with = fuzz_key)] Vec<u8>),
    /// `get_into(key)`.
    Get(#[arbitrary(with = fuzz_key)] Vec<u8>),
    /// A scan from the smaller key (included) to the larger (excluded), stopped after `limit`
    /// pairs (0: not stopped).
    Scan(
        #[arbitrary(with = fuzz_key)] Vec<u8>,
        #[arbitrary(with = fuzz_key)] Vec<u8>,
        u8,
    ),
    /// Close the map and its heap and open them again, as a restart would (the sequence runner
    /// does it; [`LeafOp::run_checked`] treats it as a no-op).
    Reopen,
}

impl ModelOp for LeafOp {
    type Model = LeafModel;

    fn apply(&self, _index: usize, model: &mut LeafModel) {
        match self {
            LeafOp::Insert(k, v) => {
                model.entry(k.clone()).or_insert_with(|| v.clone());
            }
            LeafOp::Upsert(k, v) => {
                model.insert(k.clone(), v.clone());
            }
            LeafOp::Remove(k) => {
                model.remove(k);
            }
            LeafOp::Get(_) | LeafOp::Scan(..) | LeafOp::Reopen => {}
        }
    }
}

impl LeafOp {
    /// Runs the operation on `map`, checks its result and the map's length against `model`,
    /// then applies it to `model`.
    pub fn run_checked<B: Backend>(
        &self,
        map: &LeafMap<B>,
        model: &mut LeafModel,
    ) -> Result<(), String> {
        match self {
            LeafOp::Insert(k, v) => {
                let got = map.insert(k, v).map_err(|e| failed("insert", e))?;
                agree("insert".into(), got, !model.contains_key(k))?;
            }
            LeafOp::Upsert(k, v) => {
                let got = map.upsert(k, v).map_err(|e| failed("upsert", e))?;
                agree("upsert".into(), got, model.get(k).cloned())?;
            }
            LeafOp::Remove(k) => {
                let got = map.remove(k).map_err(|e| failed("remove", e))?;
                agree("remove".into(), got, model.get(k).cloned())?;
            }
            LeafOp::Get(k) => {
                let mut out = vec![0xEE; 3];
                let found = map.get_into(k, &mut out).map_err(|e| failed("get", e))?;
                let got = found.then_some(out);
                agree("get".into(), got, model.get(k).cloned())?;
            }
            LeafOp::Scan(a, b, limit) => {
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let limit = if *limit == 0 {
                    usize::MAX
                } else {
                    *limit as usize
                };
                let mut got = Vec::new();
                map.scan(Bound::Included(lo), Bound::Excluded(hi), |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    if got.len() >= limit {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .map_err(|e| failed("scan", e))?;
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range::<Vec<u8>, _>((Bound::Included(lo), Bound::Excluded(hi)))
                    .take(limit)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                agree(format!("scan({lo:?}..{hi:?}, {limit})"), got, want)?;
            }
            LeafOp::Reopen => {}
        }
        self.apply(0, model);
        agree("len".into(), map.len(), model.len() as u64)?;
        match self {
            LeafOp::Insert(k, _) | LeafOp::Upsert(k, _) | LeafOp::Remove(k) => {
                gets_around(map, model, k)
            }
            _ => Ok(()),
        }
    }

    /// `n` operations from `seed` on keys of every family: a growing phase (inserts, upserts,
    /// some removes), then a shrinking one (removes, a few upserts), so leaves split, pairs move
    /// in and out of records, and emptied leaves are unlinked; the crash tests' workload.
    pub fn grow_then_shrink(n: usize, keys: u8, seed: u64) -> Vec<LeafOp> {
        let mut rng = crate::SplitMix64::new(seed);
        (0..n)
            .map(|i| {
                let key = leaf_key(rng.below(4) as u8, rng.below(keys as u64) as u8);
                let value = leaf_value(rng.below(1 << 12) as u16, i as u8);
                match (rng.below(8), i < n / 2) {
                    (0..=3, true) => LeafOp::Insert(key, value),
                    (4..=5, true) | (0, false) => LeafOp::Upsert(key, value),
                    (6, _) => LeafOp::Scan(key, leaf_key(3, 63), 5),
                    _ => LeafOp::Remove(key),
                }
            })
            .collect()
    }

    /// Any operation on keys of every family, inserts and upserts the most.
    #[cfg(feature = "proptest")]
    pub fn strategy() -> impl proptest::strategy::Strategy<Value = LeafOp> {
        use proptest::prelude::*;
        let key = || (any::<u8>(), any::<u8>()).prop_map(|(f, n)| leaf_key(f, n));
        let value = || (any::<u16>(), any::<u8>()).prop_map(|(l, s)| leaf_value(l, s));
        prop_oneof![
            4 => (key(), value()).prop_map(|(k, v)| LeafOp::Insert(k, v)),
            3 => (key(), value()).prop_map(|(k, v)| LeafOp::Upsert(k, v)),
            3 => key().prop_map(LeafOp::Remove),
            1 => key().prop_map(LeafOp::Get),
            1 => (key(), key(), any::<u8>()).prop_map(|(a, b, l)| LeafOp::Scan(a, b, l)),
            1 => Just(LeafOp::Reopen),
        ]
    }
}

/// Runs `ops` in order on the map of `heap` at `root` (a [`LeafOp::Reopen`] closes the map
/// and opens it again on a heap opened afresh from the pool, as a restart would), each checked
/// against `model`, telling the pool after each that an operation returned.
pub fn run_all<B: Backend>(
    pool: &Arc<Pool<B>>,
    root: u64,
    ops: &[LeafOp],
    model: &mut LeafModel,
) -> Result<(), String> {
    let open = || -> Result<LeafMap<B>, String> {
        let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
        LeafMap::open(&heap, root).map_err(|e| failed("LeafMap::open", e))
    };
    let mut map = Some(open()?);
    run_each(pool, ops, model, |_, op, model| {
        if *op == LeafOp::Reopen {
            // The map holds the heap's only handle: dropping it first drops the heap's DRAM
            // state, so no two heaps share the pool.
            map = None;
            map = Some(open()?);
            return Ok(());
        }
        match &map {
            Some(map) => op.run_checked(map, model),
            None => Err("no map open".into()),
        }
    })
}

/// Keys on each side of a written key whose lookups [`gets_around`] checks: more than a
/// small leaf holds, so a split's moved keys are among them.
const NEIGHBOURS: usize = 8;

/// After a write of `key`: `get_into` and `contains_key` of `key` and of its
/// [`NEIGHBOURS`] nearest keys on each side agree with `model` (the point reads go through
/// the map's DRAM hash index, which every write, split and unlink must keep in step).
fn gets_around<B: Backend>(map: &LeafMap<B>, model: &LeafModel, key: &[u8]) -> Result<(), String> {
    let below = model
        .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(key)))
        .rev()
        .take(NEIGHBOURS);
    let above = model
        .range::<[u8], _>((Bound::Excluded(key), Bound::Unbounded))
        .take(NEIGHBOURS);
    let mut out = Vec::new();
    let mut check = |k: &[u8]| -> Result<(), String> {
        let found = map.get_into(k, &mut out).map_err(|e| failed("get", e))?;
        agree(
            format!("get({k:?})"),
            found.then_some(&out[..]),
            model.get(k).map(|v| &v[..]),
        )?;
        let present = map.contains_key(k).map_err(|e| failed("contains_key", e))?;
        agree(
            format!("contains_key({k:?})"),
            present,
            model.contains_key(k),
        )
    };
    check(key)?;
    for (k, _) in below.chain(above) {
        check(k)?;
    }
    Ok(())
}

/// What `map` holds, by a full scan, which must be strictly increasing in key.
pub fn contents<B: Backend>(map: &LeafMap<B>) -> Result<LeafModel, String> {
    let pairs = map
        .range_pairs(Bound::Unbounded, Bound::Unbounded)
        .map_err(|e| failed("a full scan", e))?;
    if let Some(w) = pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
        return Err(format!(
            "the scan is not strictly increasing: {:?} then {:?}",
            w[0].0, w[1].0
        ));
    }
    Ok(pairs.into_iter().collect())
}

/// Checks a (recovered) map is whole: a lookup finds every scanned pair, the length agrees,
/// `verify()` finds nothing and the heap holds exactly the map's leaves and records.
/// Returns its contents.
pub fn check_map<B: Backend>(heap: &Heap<B>, map: &LeafMap<B>) -> Result<LeafModel, String> {
    let now = contents(map)?;
    for (k, v) in &now {
        let got = map.get(k).map_err(|e| failed("get", e))?;
        agree(format!("get({k:?})"), got.as_ref(), Some(v))?;
    }
    agree("len".into(), map.len(), now.len() as u64)?;
    structure_verifies(map.verify())?;
    let blocks = map.blocks().map_err(|e| failed("blocks", e))?;
    heap_holds_exactly(heap, &blocks, "leaf map")?;
    Ok(now)
}

/// Crash-tests `ops` on a fresh map of `config` at the pool's root object (batched fences).
/// The workload checks every result against the model; every crash image must recover
/// (`Heap::open`, `LeafMap::open`) to the model after the operations that returned, or after
/// the interrupted one too, in a whole map ([`check_map`]). Panics with the harness's report
/// on a failure.
pub fn crash_ops(test: &CrashTest, config: LeafMapConfig, ops: &[LeafOp]) -> Report {
    crash_ops_outcome(test, config, ops).unwrap_or_else(|failure| panic!("{failure}"))
}

/// [`crash_ops`] for a test that expects a failure: returns it instead of panicking.
pub fn crash_ops_outcome(
    test: &CrashTest,
    config: LeafMapConfig,
    ops: &[LeafOp],
) -> Result<Report, Box<CrashFailure>> {
    let history = History::of(ops);
    crash_test_outcome_with_recovery(
        test,
        |pool| {
            let heap = simulated_heap(pool, FencePolicy::Batched);
            LeafMap::create(&heap, pool.root_offset(), config).expect("create the map");
        },
        |pool| {
            run_all(pool, pool.root_offset(), ops, &mut LeafModel::new())
                .unwrap_or_else(|e| panic!("{e}"));
        },
        recover,
        |pool, crash| {
            let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
            let map =
                LeafMap::open(&heap, pool.root_offset()).map_err(|e| failed("LeafMap::open", e))?;
            let done = crash.operations_completed as usize;
            let now = check_map(&heap, &map)?;
            if !history.admits(&now, done) {
                return Err(format!(
                    "after {done} operations (next {:?}) the map holds {} pairs, the model {} \
                     (or {} after the next)",
                    ops.get(done),
                    now.len(),
                    history.after(done).len(),
                    history.after((done + 1).min(ops.len())).len()
                ));
            }
            Ok(())
        },
    )
}

/// The leaf map's recovery, as a restart runs it: open the heap (rolling back an interrupted
/// transaction: a split, an unlink, a record's write), then the map (which only reads).
pub fn recover<B: Backend>(pool: &Arc<Pool<B>>) -> Result<(), String> {
    let heap = Heap::open(pool.clone()).map_err(|e| failed("Heap::open", e))?;
    LeafMap::open(&heap, pool.root_offset()).map_err(|e| failed("LeafMap::open", e))?;
    Ok(())
}

/// The leaf map fuzz target's input.
pub type LeafMapInput = FuzzInput<LeafFuzzSetup, LeafOp>;

/// The leaf map fuzz target's set-up: the seed of the crash points it samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct LeafFuzzSetup {
    /// Seed of the crash points and images.
    pub crash_seed: u8,
}

impl FuzzEncode for LeafFuzzSetup {
    fn encode(&self, out: &mut FuzzBytes) {
        out.u8(self.crash_seed);
    }
}

/// The bytes `arbitrary` decodes back into this operation (the committed seeds'
/// [`crate::fuzz_seeds`]).
impl FuzzEncode for LeafOp {
    fn encode(&self, out: &mut FuzzBytes) {
        let key = |out: &mut FuzzBytes, key: &[u8]| {
            let (family, n) = (0..4u8)
                .flat_map(|f| (0..64u8).map(move |n| (f, n)))
                .find(|&(f, n)| leaf_key(f, n) == key)
                .unwrap_or_else(|| panic!("key {key:?} has no fuzz encoding"));
            out.u8(family);
            out.u8(n);
        };
        let value = |out: &mut FuzzBytes, value: &[u8]| {
            let seed = value.first().copied().unwrap_or(0);
            let len = (0..1600u16)
                .find(|&l| leaf_value(l, seed) == value)
                .unwrap_or_else(|| panic!("a value of {} bytes has no fuzz encoding", value.len()));
            // A `u16`, as `arbitrary` reads one: little-endian.
            out.u8(len as u8);
            out.u8((len >> 8) as u8);
            out.u8(seed);
        };
        match self {
            LeafOp::Insert(k, v) | LeafOp::Upsert(k, v) => {
                out.variant(u64::from(matches!(self, LeafOp::Upsert(..))), 6);
                key(out, k);
                value(out, v);
            }
            LeafOp::Remove(k) | LeafOp::Get(k) => {
                out.variant(
                    if matches!(self, LeafOp::Remove(_)) {
                        2
                    } else {
                        3
                    },
                    6,
                );
                key(out, k);
            }
            LeafOp::Scan(a, b, limit) => {
                out.variant(4, 6);
                key(out, a);
                key(out, b);
                out.u8(*limit);
            }
            LeafOp::Reopen => out.variant(5, 6),
        }
    }
}
