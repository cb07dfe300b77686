//! The store path against the raw structures, paired in one run.
//!
//! The speed requirement: the `Store` path costs nothing measurable; CCEH and
//! FAST&FAIR through a [`Store`](pmem_structures::Store)'s handles run within 3% of the raw
//! structures ([`TARGET_RATIO`]). [`measure`] runs every operation both ways in the same run,
//! interleaved, and reports store ops/s over raw ops/s per operation.
//!
//! Each of [`StorePlan::repetitions`] repetitions makes, per structure measured, a fresh raw
//! structure exactly as its own section does (its own heap, batched fences, in its own pool
//! file: [`CcehHeap`], [`FastFairHeap`], default configuration) and a fresh store in its own
//! pool file of the same size ([`StoreFile`]: `Store::create`, batched fences too), holding one
//! map of the same configuration (`Store::hash_map_with` with [`CcehConfig::default`],
//! `Store::btree_map` with [`FastFairConfig::default`]). Both live through the repetition, and
//! each phase is cut into [`CHUNKS`] chunks of its operations, each chunk run on both sides
//! back to back, the order alternating from chunk to chunk (and each repetition starting with
//! the side the previous one did not), so that a burst of noise on a shared machine, and the
//! cache warmth one side leaves the other, land on both alike. A side's rate is the phase's
//! operations over the sum of its chunks' times. The phases:
//!
//! * CCEH: every key inserted (one call each), looked up (hits, random order) and removed
//!   (another random order): the single-call rows of [`crate::ccehbench`]. Its batched loads
//!   (`insert_batch`, helper thread off or on) have no store equivalent and stay raw-only.
//! * FAST&FAIR: every key inserted, looked up, then [`StorePlan::scans`] scans of
//!   [`SCAN_KEYS`] pairs from random keys (`range(start..)` taking [`SCAN_KEYS`]): the rows of
//!   [`crate::fastfairbench`] for the default (FAST) policy.
//! * YCSB, per structure, through the YCSB driver ([`run_plan`]) with the same plans on both
//!   sides: the load (one insert per record on both sides), then workloads A, B, C, E
//!   (FAST&FAIR only) and insert-only, uniform keys, one thread.
//!
//! No latency is sampled: each timed chunk is its calls back to back (a YCSB chunk is a plan
//! of its own for [`run_plan`], which times it). A repetition's store/raw ratio is the median
//! of its chunks' ratios (a burst of noise hitting one side of one chunk moves a sum, not a
//! median); a row's ratio is the median over the repetitions; its raw and store ops/s are the
//! medians of each side's rates (the operations over the sum of the chunks' times).

use std::path::Path;
use std::time::Instant;

use pmem_ordering::Granularity;
use pmem_structures::cceh::{CcehConfig, CcehError};
use pmem_structures::fastfair::{FastFairConfig, FastFairError};
use pmem_structures::{BTreeMap, HashMap};
use serde::Serialize;

use crate::ccehbench::{self, CcehHeap, CcehOp};
use crate::fastfairbench::{self, FastFairHeap, FastFairOp, SCAN_KEYS};
use crate::keys::{random_keys, random_keys_except_max, shuffled};
use crate::phase::{check_count, CountError};
use crate::poolfile::{SetupError, StoreFile};
use crate::ycsb::store_targets::{with_store_target, StoreMapKind};
use crate::ycsb::targets::MakeError;
use crate::ycsb::{
    plan, run_plan, with_target, KeyDistribution, KeySpace, Op, Plan, Scale, Structure, Target,
    Variant, Workload, YcsbError,
};

/// The target: store ops/s at least this fraction of raw ops/s ("within 3%").
pub const TARGET_RATIO: f64 = 0.97;

/// Chunks each phase is cut into, each run on both sides back to back.
pub const CHUNKS: usize = 16;

/// How much [`measure`] measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorePlan {
    /// Keys of the CCEH rows.
    pub cceh_keys: u64,
    /// Keys of the FAST&FAIR rows.
    pub fastfair_keys: u64,
    /// Scans of the FAST&FAIR scan row, per side and repetition.
    pub scans: usize,
    /// Records and operations of the YCSB rows.
    pub ycsb: Scale,
    /// Repetitions; each runs every phase on both sides, in alternating order.
    pub repetitions: usize,
    /// Seed of the YCSB plans.
    pub seed: u64,
}

impl StorePlan {
    /// The default run: 1M keys and 20 000 scans, as the structures' sections; YCSB at its
    /// default scale; 3 repetitions.
    pub fn full() -> StorePlan {
        StorePlan {
            cceh_keys: ccehbench::CCEH_KEYS,
            fastfair_keys: fastfairbench::FASTFAIR_KEYS,
            scans: 20_000,
            ycsb: Scale::default(),
            repetitions: 3,
            seed: 0x5C5B,
        }
    }

    /// The `--quick` run: 20 000 keys, 2 000 scans, 5 000 YCSB records and operations, 2
    /// repetitions (each chunk run once in each order).
    pub fn quick() -> StorePlan {
        StorePlan {
            cceh_keys: 20_000,
            fastfair_keys: 20_000,
            scans: 2_000,
            ycsb: Scale {
                records: 5_000,
                ops: 5_000,
            },
            repetitions: 2,
            seed: 0x5C5B,
        }
    }
}

/// One operation measured both ways.
#[derive(Clone, Debug, Serialize)]
pub struct StorePathRow {
    /// The structure's name.
    pub structure: String,
    /// What was measured.
    pub operation: String,
    /// Operations of each timed run.
    pub ops: u64,
    /// Raw structure, operations per second: the median over the repetitions.
    pub raw_ops_per_sec: f64,
    /// Through the store's handle, operations per second: the median over the repetitions.
    pub store_ops_per_sec: f64,
    /// Store over raw ops/s: the median of the repetitions' ratios.
    pub ratio: f64,
    /// Whether the ratio is at least [`TARGET_RATIO`].
    pub within_target: bool,
    /// Raw ops/s of each repetition.
    pub raw_samples: Vec<f64>,
    /// Store ops/s of each repetition.
    pub store_samples: Vec<f64>,
    /// Store over raw of each repetition: the median of its chunks' ratios.
    pub ratio_samples: Vec<f64>,
}

/// The store-path section of a run.
#[derive(Clone, Debug, Serialize)]
pub struct StorePathResults {
    /// Repetitions measured.
    pub repetitions: usize,
    /// Keys of the CCEH rows (`None`: CCEH not measured).
    pub cceh_keys: Option<u64>,
    /// Keys of the FAST&FAIR rows (`None`: FAST&FAIR not measured).
    pub fastfair_keys: Option<u64>,
    /// Scans per side and repetition.
    pub scans: usize,
    /// YCSB records and operations.
    pub ycsb: Scale,
    /// The target ratio ([`TARGET_RATIO`]).
    pub target_ratio: f64,
    /// One row per operation, CCEH's then FAST&FAIR's single calls, then the YCSB rows.
    pub rows: Vec<StorePathRow>,
}

/// Why the store-path measurements failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreBenchError {
    /// A pool, heap or store could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A raw CCEH operation failed.
    #[error("a CCEH operation failed: {0}")]
    Cceh(#[from] CcehError),
    /// A raw FAST&FAIR operation failed.
    #[error("a FAST&FAIR operation failed: {0}")]
    FastFair(#[from] FastFairError),
    /// An operation through the store failed.
    #[error("an operation through the store failed: {0}")]
    Store(#[from] pmem_structures::Error),
    /// An operation did not do what it should have (a bug, not a measurement).
    #[error(transparent)]
    Count(#[from] CountError),
    /// A YCSB run failed.
    #[error(transparent)]
    Ycsb(#[from] YcsbError),
}

impl From<MakeError> for StoreBenchError {
    fn from(e: MakeError) -> Self {
        StoreBenchError::Ycsb(e.into())
    }
}

/// A map measured both ways: the raw structure, or the store's handle over it.
trait PairedMap {
    /// What its operations fail with.
    type Error;
    fn insert(&self, key: u64, value: u64) -> Result<bool, Self::Error>;
    fn get(&self, key: u64) -> Result<Option<u64>, Self::Error>;
    fn remove(&self, key: u64) -> Result<Option<u64>, Self::Error>;
}

/// An ordered map measured both ways: one scan of up to [`SCAN_KEYS`] pairs from `start`,
/// the number of pairs read holding their key's value.
trait PairedScan: PairedMap {
    fn scan(&self, start: u64) -> Result<u64, Self::Error>;
}

/// [`PairedMap`] by the type's own methods of the same names.
macro_rules! paired_map {
    ($ty:ty, $error:ty) => {
        impl PairedMap for $ty {
            type Error = $error;
            fn insert(&self, key: u64, value: u64) -> Result<bool, $error> {
                <$ty>::insert(self, key, value)
            }
            fn get(&self, key: u64) -> Result<Option<u64>, $error> {
                <$ty>::get(self, key)
            }
            fn remove(&self, key: u64) -> Result<Option<u64>, $error> {
                <$ty>::remove(self, key)
            }
        }
    };
}

paired_map!(ccehbench::Table<'_>, CcehError);
paired_map!(fastfairbench::Tree<'_>, FastFairError);
paired_map!(HashMap, pmem_structures::Error);
paired_map!(BTreeMap, pmem_structures::Error);

impl PairedScan for fastfairbench::Tree<'_> {
    fn scan(&self, start: u64) -> Result<u64, FastFairError> {
        fastfairbench::scan_from(self, start)
    }
}

impl PairedScan for BTreeMap {
    fn scan(&self, start: u64) -> Result<u64, pmem_structures::Error> {
        let mut n = 0;
        for pair in self.range(start..).take(SCAN_KEYS) {
            let (k, v) = pair?;
            n += u64::from(v == ccehbench::value_of(k));
        }
        Ok(n)
    }
}

/// Insert every key with its value; how many were new.
fn insert_each<M: PairedMap>(map: &M, keys: &[u64]) -> Result<u64, M::Error> {
    let mut inserted = 0;
    for &k in keys {
        inserted += u64::from(map.insert(k, ccehbench::value_of(k))?);
    }
    Ok(inserted)
}

/// Look every key up; how many were found with their value.
fn get_each<M: PairedMap>(map: &M, keys: &[u64]) -> Result<u64, M::Error> {
    let mut hits = 0;
    for &k in keys {
        hits += u64::from(map.get(k)? == Some(ccehbench::value_of(k)));
    }
    Ok(hits)
}

/// Remove every key; how many were there.
fn remove_each<M: PairedMap>(map: &M, keys: &[u64]) -> Result<u64, M::Error> {
    let mut removed = 0;
    for &k in keys {
        removed += u64::from(map.remove(k)?.is_some());
    }
    Ok(removed)
}

/// Scan from every start; the pairs read in all.
fn scan_each<M: PairedScan>(map: &M, starts: &[u64]) -> Result<u64, M::Error> {
    let mut read = 0;
    for &s in starts {
        read += map.scan(s)?;
    }
    Ok(read)
}

/// What one side did on one chunk of a phase: its time, and how many of its operations did
/// what the phase counts.
#[derive(Clone, Copy, Debug)]
struct Timed {
    secs: f64,
    done: u64,
}

/// `f`, timed; `f` returns how many of its operations did what the phase counts.
fn timed<E>(f: impl FnOnce() -> Result<u64, E>) -> Result<Timed, StoreBenchError>
where
    StoreBenchError: From<E>,
{
    let start = Instant::now();
    let done = f()?;
    Ok(Timed {
        secs: start.elapsed().as_secs_f64(),
        done,
    })
}

/// Whether chunk `chunk` of repetition `rep` runs on the raw side first: the order alternates
/// from chunk to chunk, and each repetition starts where the last one did not.
fn raw_first(rep: usize, chunk: usize) -> bool {
    (rep + chunk).is_multiple_of(2)
}

/// One operation's rates on both sides, over the repetitions.
#[derive(Clone, Debug)]
struct Pair {
    structure: &'static str,
    operation: String,
    ops: u64,
    raw: Vec<f64>,
    store: Vec<f64>,
    /// Store/raw of each repetition: the median of its chunks' ratios.
    ratios: Vec<f64>,
}

impl Pair {
    fn new(structure: Structure, operation: String, ops: u64) -> Pair {
        Pair {
            structure: structure.name(),
            operation,
            ops,
            raw: Vec::new(),
            store: Vec::new(),
            ratios: Vec::new(),
        }
    }

    /// The name of the operation on one side, for error messages.
    fn label(&self, side: &str) -> String {
        format!("{} {} ({side})", self.structure, self.operation)
    }

    /// Repetition `rep` of the phase: `items` cut into [`CHUNKS`] chunks, each chunk run on
    /// both sides back to back, in an order alternating from chunk to chunk. Each side must do
    /// `what` `expected` times in all; its rate is the items over its summed time. The
    /// repetition's store/raw ratio is the median of its chunks' ratios (raw time over store
    /// time, the same operations on both): a burst of noise on the machine that hits one
    /// side of one chunk moves a sum, not a median.
    fn measure<T>(
        &mut self,
        rep: usize,
        items: &[T],
        expected: u64,
        what: &'static str,
        mut raw: impl FnMut(&[T]) -> Result<Timed, StoreBenchError>,
        mut store: impl FnMut(&[T]) -> Result<Timed, StoreBenchError>,
    ) -> Result<(), StoreBenchError> {
        // Time and count of the raw side, then of the store side.
        let mut sides = [(0f64, 0u64); 2];
        let mut chunk_ratios = Vec::with_capacity(CHUNKS);
        let per_chunk = items.len().div_ceil(CHUNKS).max(1);
        for (c, chunk) in items.chunks(per_chunk).enumerate() {
            let order = if raw_first(rep, c) {
                [false, true]
            } else {
                [true, false]
            };
            let mut secs = [0f64; 2];
            for on_store in order {
                let t = if on_store { store(chunk)? } else { raw(chunk)? };
                let side = &mut sides[usize::from(on_store)];
                side.0 += t.secs;
                side.1 += t.done;
                secs[usize::from(on_store)] = t.secs;
            }
            chunk_ratios.push(secs[0] / secs[1]);
        }
        for (name, (_, done)) in ["raw", "store"].into_iter().zip(sides) {
            check_count(|| self.label(name), expected, done, what)?;
        }
        let n = items.len() as f64;
        self.raw.push(n / sides[0].0);
        self.store.push(n / sides[1].0);
        self.ratios.push(crate::measure::median(&chunk_ratios));
        Ok(())
    }

    fn row(&self) -> StorePathRow {
        let ratio_samples = self.ratios.clone();
        let ratio = crate::measure::median(&ratio_samples);
        StorePathRow {
            structure: self.structure.to_string(),
            operation: self.operation.clone(),
            ops: self.ops,
            raw_ops_per_sec: crate::measure::median(&self.raw),
            store_ops_per_sec: crate::measure::median(&self.store),
            ratio,
            within_target: ratio >= TARGET_RATIO,
            raw_samples: self.raw.clone(),
            store_samples: self.store.clone(),
            ratio_samples,
        }
    }
}

/// Where the pool files go.
struct Files<'a> {
    dir: &'a Path,
    prefix: &'a str,
    granularity: Option<Granularity>,
}

impl Files<'_> {
    fn name(&self, what: &str) -> String {
        format!("{}-{what}.pool", self.prefix)
    }
}

/// The CCEH keys and their lookup and removal orders (the CCEH section's seeds).
struct CcehInputs {
    keys: Vec<u64>,
    get_order: Vec<u64>,
    remove_order: Vec<u64>,
}

/// One repetition of the CCEH single-call phases into `pairs` (insert, get, remove).
fn cceh_repetition(
    files: &Files<'_>,
    inputs: &CcehInputs,
    rep: usize,
    pairs: &mut [Pair; 3],
) -> Result<(), StoreBenchError> {
    let n = inputs.keys.len() as u64;
    let raw_heap = CcehHeap::create(files.dir, &files.name("cceh"), n, files.granularity)?;
    let raw = raw_heap.table()?;
    let store_file = StoreFile::create(
        files.dir,
        &files.name("cceh-store"),
        ccehbench::pool_size(n),
        files.granularity,
    )?;
    let store = store_file
        .store()
        .hash_map_with("cceh", CcehConfig::default())?;
    let [insert, get, remove] = pairs;
    insert.measure(
        rep,
        &inputs.keys,
        n,
        "inserted",
        |c| timed(|| insert_each(&raw, c)),
        |c| timed(|| insert_each(&store, c)),
    )?;
    get.measure(
        rep,
        &inputs.get_order,
        n,
        "found",
        |c| timed(|| get_each(&raw, c)),
        |c| timed(|| get_each(&store, c)),
    )?;
    remove.measure(
        rep,
        &inputs.remove_order,
        n,
        "removed",
        |c| timed(|| remove_each(&raw, c)),
        |c| timed(|| remove_each(&store, c)),
    )?;
    check_count(|| remove.label("raw"), 0, raw.len(), "keys left")?;
    check_count(|| remove.label("store"), 0, store.len(), "keys left")?;
    Ok(())
}

/// The FAST&FAIR keys, lookup order and scan starts (the FAST&FAIR section's seeds), and the
/// pairs the scans must read.
struct FastFairInputs {
    keys: Vec<u64>,
    get_order: Vec<u64>,
    scan_starts: Vec<u64>,
    expected_scanned: u64,
}

impl FastFairInputs {
    fn new(n: u64, scans: usize) -> FastFairInputs {
        let keys = random_keys_except_max(n, 0xFA57);
        let get_order = shuffled(&keys, 0x6E7);
        let scan_starts: Vec<u64> = shuffled(&keys, 0x5CA).into_iter().take(scans).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let expected_scanned = scan_starts
            .iter()
            .map(|s| {
                let at = sorted.partition_point(|k| k < s);
                (sorted.len() - at).min(SCAN_KEYS) as u64
            })
            .sum();
        FastFairInputs {
            keys,
            get_order,
            scan_starts,
            expected_scanned,
        }
    }
}

/// One repetition of the FAST&FAIR phases into `pairs` (insert, get, scan).
fn fastfair_repetition(
    files: &Files<'_>,
    inputs: &FastFairInputs,
    rep: usize,
    pairs: &mut [Pair; 3],
) -> Result<(), StoreBenchError> {
    let n = inputs.keys.len() as u64;
    let config = FastFairConfig::default();
    let raw_heap = FastFairHeap::create(files.dir, &files.name("fastfair"), n, files.granularity)?;
    let raw = raw_heap.tree(config.policy)?;
    let store_file = StoreFile::create(
        files.dir,
        &files.name("fastfair-store"),
        fastfairbench::pool_size(n),
        files.granularity,
    )?;
    let store = store_file.store().btree_map("fastfair", config)?;
    let [insert, get, scan] = pairs;
    insert.measure(
        rep,
        &inputs.keys,
        n,
        "inserted",
        |c| timed(|| insert_each(&raw, c)),
        |c| timed(|| insert_each(&store, c)),
    )?;
    get.measure(
        rep,
        &inputs.get_order,
        n,
        "found",
        |c| timed(|| get_each(&raw, c)),
        |c| timed(|| get_each(&store, c)),
    )?;
    scan.measure(
        rep,
        &inputs.scan_starts,
        inputs.expected_scanned,
        "pairs scanned",
        |c| timed(|| scan_each(&raw, c)),
        |c| timed(|| scan_each(&store, c)),
    )?;
    Ok(())
}

/// A structure's YCSB runs: the raw variant and store map they pair, and one plan per
/// workload, in run order, made once and run on both sides every repetition.
struct YcsbInputs {
    variant: Variant,
    kind: StoreMapKind,
    runs: Vec<(Workload, Plan)>,
    capacity: u64,
}

impl YcsbInputs {
    fn new(structure: Structure, plan_of: &StorePlan) -> Result<YcsbInputs, StoreBenchError> {
        let (variant, kind) = match structure {
            Structure::FastFair => (
                Variant::FastFair(FastFairConfig::default().policy),
                StoreMapKind::BTreeMap,
            ),
            _ => (Variant::CcehHelperOff, StoreMapKind::HashMap),
        };
        let Scale { records, ops } = plan_of.ycsb;
        let mut keys = KeySpace {
            loaded: records,
            next_insert: 0,
        };
        let mut runs = Vec::new();
        let mut capacity = records;
        let workloads = [Workload::Load]
            .into_iter()
            .chain(Workload::RUNS)
            .filter(|w| !w.scans() || structure.no_scan_reason().is_none());
        for workload in workloads {
            let p = plan(
                workload,
                KeyDistribution::Uniform,
                keys,
                ops,
                1,
                plan_of.seed,
            )
            .map_err(YcsbError::from)?;
            keys.next_insert = p.next_insert;
            capacity = capacity.saturating_add(workload.max_inserts(ops) + 1);
            runs.push((workload, p));
        }
        Ok(YcsbInputs {
            variant,
            kind,
            runs,
            capacity,
        })
    }

    /// The row names and sizes, in run order.
    fn pairs(&self) -> Vec<Pair> {
        self.runs
            .iter()
            .map(|(w, p)| {
                let operation = match w {
                    Workload::Load => "YCSB load (one insert per record)".to_string(),
                    Workload::InsertOnly => "YCSB insert-only (1 thread)".to_string(),
                    w => format!("YCSB {} (uniform, 1 thread)", w.name()),
                };
                Pair::new(self.variant.structure(), operation, p.ops())
            })
            .collect()
    }
}

/// One repetition of a structure's YCSB runs into `pairs` (one per run): a fresh raw
/// structure and a fresh store, each run on both back to back.
fn ycsb_repetition(
    files: &Files<'_>,
    inputs: &YcsbInputs,
    rep: usize,
    pairs: &mut [Pair],
) -> Result<(), StoreBenchError> {
    let setup = crate::ycsb::Setup {
        dir: files.dir.to_path_buf(),
        prefix: files.prefix.to_string(),
        granularity: files.granularity,
    };
    let variant = inputs.variant;
    with_target(variant, &setup, inputs.capacity, |raw| {
        with_store_target(inputs.kind, &setup, inputs.capacity, |store| {
            for ((workload, p), pair) in inputs.runs.iter().zip(pairs.iter_mut()) {
                let distribution = workload.chooses_keys().then_some(KeyDistribution::Uniform);
                let ops: Vec<Op> = p.threads.concat();
                // A chunk of the plan's operations, as a plan of its own. Not batched: the
                // store has no batched insert, so both sides load one call per record.
                let run = |target: &dyn Target, chunk: &[Op]| -> Result<Timed, StoreBenchError> {
                    let part = Plan {
                        threads: vec![chunk.to_vec()],
                        next_insert: p.next_insert,
                    };
                    let row = run_plan(target, variant, *workload, distribution, &part, false)?;
                    Ok(Timed {
                        secs: row.seconds,
                        done: row.ops,
                    })
                };
                let n = ops.len() as u64;
                pair.measure(
                    rep,
                    &ops,
                    n,
                    "operations run",
                    |c| run(raw, c),
                    |c| run(store, c),
                )?;
            }
            Ok(())
        })
    })
}

/// Run the paired measurements of the module's documentation for `structures` (CCEH and
/// FAST&FAIR; others are ignored) on pool files named `{prefix}-*.pool` in `dir`, with
/// `granularity` forced (`None`: detected). `progress(repetition, repetitions)` is called after
/// each repetition.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan_of: &StorePlan,
    structures: &[Structure],
    mut progress: impl FnMut(usize, usize),
) -> Result<StorePathResults, StoreBenchError> {
    let files = Files {
        dir,
        prefix,
        granularity,
    };
    let cceh = structures.contains(&Structure::Cceh).then(|| {
        let keys = random_keys(plan_of.cceh_keys, 0xCCE4);
        CcehInputs {
            get_order: shuffled(&keys, 0x6E7),
            remove_order: shuffled(&keys, 0x4E3),
            keys,
        }
    });
    let fastfair = structures
        .contains(&Structure::FastFair)
        .then(|| FastFairInputs::new(plan_of.fastfair_keys, plan_of.scans));
    let ycsb: Vec<YcsbInputs> = [Structure::Cceh, Structure::FastFair]
        .into_iter()
        .filter(|s| structures.contains(s))
        .map(|s| YcsbInputs::new(s, plan_of))
        .collect::<Result<_, _>>()?;

    let mut cceh_pairs = [CcehOp::Insert, CcehOp::Get, CcehOp::Remove]
        .map(|op| Pair::new(Structure::Cceh, op.name(), plan_of.cceh_keys));
    let mut fastfair_pairs = FastFairOp::ALL.map(|op| {
        let ops = match op {
            FastFairOp::Scan => plan_of.scans as u64,
            _ => plan_of.fastfair_keys,
        };
        Pair::new(Structure::FastFair, op.name(), ops)
    });
    let mut ycsb_pairs: Vec<Vec<Pair>> = ycsb.iter().map(YcsbInputs::pairs).collect();

    for rep in 0..plan_of.repetitions {
        if let Some(inputs) = &cceh {
            cceh_repetition(&files, inputs, rep, &mut cceh_pairs)?;
        }
        if let Some(inputs) = &fastfair {
            fastfair_repetition(&files, inputs, rep, &mut fastfair_pairs)?;
        }
        for (inputs, pairs) in ycsb.iter().zip(&mut ycsb_pairs) {
            ycsb_repetition(&files, inputs, rep, pairs)?;
        }
        progress(rep + 1, plan_of.repetitions);
    }

    let mut pairs: Vec<&Pair> = Vec::new();
    if cceh.is_some() {
        pairs.extend(&cceh_pairs);
    }
    if fastfair.is_some() {
        pairs.extend(&fastfair_pairs);
    }
    pairs.extend(ycsb_pairs.iter().flatten());
    Ok(StorePathResults {
        repetitions: plan_of.repetitions,
        cceh_keys: cceh.is_some().then_some(plan_of.cceh_keys),
        fastfair_keys: fastfair.is_some().then_some(plan_of.fastfair_keys),
        scans: plan_of.scans,
        ycsb: plan_of.ycsb,
        target_ratio: TARGET_RATIO,
        rows: pairs.into_iter().map(Pair::row).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> StorePlan {
        StorePlan {
            cceh_keys: 2_000,
            fastfair_keys: 2_000,
            scans: 20,
            ycsb: Scale {
                records: 500,
                ops: 500,
            },
            repetitions: 2,
            seed: 1,
        }
    }

    #[test]
    fn every_operation_is_measured_both_ways_with_a_ratio() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let all = [Structure::Cceh, Structure::FastFair, Structure::Datalog];
        let results = measure(
            dir.path(),
            "t",
            Some(Granularity::Emulated),
            &tiny(),
            &all,
            |_, _| {},
        )
        .unwrap();
        let names: Vec<(&str, &str)> = results
            .rows
            .iter()
            .map(|r| (r.structure.as_str(), r.operation.as_str()))
            .collect();
        // CCEH: 3 single calls + load, A, B, C, insert-only; FAST&FAIR: 3 + load, A, B, C, E,
        // insert-only.
        assert_eq!(names.len(), 3 + 5 + 3 + 6, "{names:?}");
        assert!(names.contains(&("CCEH", "remove (random order)")));
        assert!(names.contains(&("FAST&FAIR", "scan of 100 keys")));
        assert!(names.contains(&("FAST&FAIR", "YCSB E (uniform, 1 thread)")));
        assert!(!names.contains(&("CCEH", "YCSB E (uniform, 1 thread)")));
        for row in &results.rows {
            assert_eq!(row.ratio_samples.len(), 2, "{row:?}");
            assert!(row.raw_ops_per_sec > 0.0 && row.store_ops_per_sec > 0.0);
            assert!(row.ratio.is_finite() && row.ratio > 0.0, "{row:?}");
            assert_eq!(row.within_target, row.ratio >= TARGET_RATIO);
        }
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "pool files left behind"
        );
    }

    #[test]
    fn only_the_structures_asked_for_are_measured() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let results = measure(
            dir.path(),
            "t",
            Some(Granularity::Emulated),
            &tiny(),
            &[Structure::FastFair],
            |_, _| {},
        )
        .unwrap();
        assert!(results.rows.iter().all(|r| r.structure == "FAST&FAIR"));
        assert_eq!(results.rows.len(), 3 + 6);
        assert_eq!(results.cceh_keys, None);
    }

    #[test]
    fn the_ratio_is_the_median_of_the_repetitions_ratios() {
        let mut pair = Pair::new(Structure::Cceh, "x".into(), 1);
        let items = [0u8; 32];
        // Seconds per chunk on each side, by repetition: the raw side 1/16 s per chunk.
        for (rep, store_secs) in [0.9, 1.1, 1.0].into_iter().enumerate() {
            let secs = |s: f64| {
                move |c: &[u8]| -> Result<Timed, StoreBenchError> {
                    Ok(Timed {
                        secs: s / CHUNKS as f64,
                        done: c.len() as u64,
                    })
                }
            };
            pair.measure(rep, &items, 32, "done", secs(1.0), secs(store_secs))
                .unwrap();
        }
        let row = pair.row();
        let rounded: Vec<f64> = row
            .ratio_samples
            .iter()
            .map(|r| (r * 1e6).round() / 1e6)
            .collect();
        assert_eq!(
            rounded,
            [1.0f64 / 0.9, 1.0 / 1.1, 1.0].map(|r| (r * 1e6).round() / 1e6)
        );
        assert!((row.ratio - 1.0).abs() < 1e-9, "{row:?}");
        assert!(row.within_target);
        assert!((row.raw_ops_per_sec - 32.0).abs() < 1e-9, "{row:?}");
    }

    #[test]
    fn one_slow_chunk_moves_the_rates_but_not_the_ratio() {
        let mut pair = Pair::new(Structure::Cceh, "x".into(), 1);
        let items: Vec<u32> = (0..CHUNKS as u32).collect();
        let raw =
            |_: &[u32]| -> Result<Timed, StoreBenchError> { Ok(Timed { secs: 1.0, done: 1 }) };
        // Chunk 0 of the store side is preempted: ten times slower.
        let store = |c: &[u32]| -> Result<Timed, StoreBenchError> {
            Ok(Timed {
                secs: if c[0] == 0 { 10.0 } else { 1.0 },
                done: 1,
            })
        };
        pair.measure(0, &items, CHUNKS as u64, "done", raw, store)
            .unwrap();
        let row = pair.row();
        assert_eq!(row.ratio, 1.0, "{row:?}");
        assert!(row.store_ops_per_sec < 0.7 * row.raw_ops_per_sec, "{row:?}");
    }

    #[test]
    fn a_side_that_miscounts_fails_the_phase() {
        let mut pair = Pair::new(Structure::FastFair, "get".into(), 4);
        let ok = |c: &[u64]| -> Result<Timed, StoreBenchError> {
            Ok(Timed {
                secs: 1.0,
                done: c.len() as u64,
            })
        };
        let short = |c: &[u64]| -> Result<Timed, StoreBenchError> {
            Ok(Timed {
                secs: 1.0,
                done: c.len() as u64 - 1,
            })
        };
        let e = pair
            .measure(0, &[1, 2, 3, 4], 4, "found", ok, short)
            .unwrap_err();
        assert_eq!(e.to_string(), "FAST&FAIR get (store): 0 of 4 found");
        assert!(pair.raw.is_empty() && pair.store.is_empty());
    }
}
