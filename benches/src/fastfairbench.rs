//! The FAST&FAIR measurements of `pmem-bench` and of the `fastfair` criterion bench.
//!
//! Every tree is made fresh, with 512-byte nodes ([`FastFairConfig::default`]'s size), on its
//! own heap ([`HeapConfig::default`](pmem_undo_log::HeapConfig::default), batched fences for the split and merge transactions) in
//! its own pool file in the run's pool directory ([`FastFairHeap`]). The keys are uniformly
//! random and distinct ([`random_keys_except_max`]: the CCEH section's keys without the
//! reserved `u64::MAX`), generated before
//! anything is timed, as are the random orders of the lookups and the scans' start keys; the
//! value of a key is [`value_of`] it, so a lookup can be checked.
//!
//! `pmem-bench` ([`measure`]) runs [`FastFairPlan::rounds`] rounds; in each it loads the keys
//! into one fresh tree per [`ShiftPolicy`], the policies' order rotated from round to round,
//! one [`FastFair::insert`] per key, timing every [`LATENCY_EVERY`]th call on its own for the
//! latency percentiles. On each loaded tree it then looks every key up ([`FastFair::get`],
//! hits, random order) and runs [`FastFairPlan::scans`] range scans of [`SCAN_KEYS`] keys from
//! random existing keys. A phase's throughput is the median over the rounds; the policies'
//! ratios ([`FastFairResults::redo_over_per_shift`], [`FastFairResults::fast_over_per_shift`])
//! are medians of per-round ratios, the loads of one round running back to back. Fences,
//! flushes and bytes to the media per operation come from [`thread_stats`](pmem_ordering::thread_stats) deltas over the
//! phase: they include splits (about one insert in fifteen splits a 28-entry leaf).

use std::path::Path;

use pmem_ordering::{Granularity, Hardware};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, FastFairError, ShiftPolicy};
use pmem_undo_log::{FencePolicy, TxError};
use serde::Serialize;

use crate::keys::{random_keys_except_max, shuffled};
use crate::phase::{sampled_call, timer_overhead_ns, CountError, Phase};
use crate::poolfile::{HeapFile, PoolFile, SetupError};

/// Keys of a default `pmem-bench` run.
pub const FASTFAIR_KEYS: u64 = 1_000_000;
/// Keys of a `--quick` run.
pub const FASTFAIR_KEYS_QUICK: u64 = 100_000;
/// Every how many operations one is timed on its own, for the latency percentiles.
pub const LATENCY_EVERY: usize = 64;
/// Keys per range scan (the C++ reference's scans are of 100 keys).
pub const SCAN_KEYS: usize = 100;
/// The heaps' fence policy (only splits and merges run transactions).
pub const FASTFAIR_HEAP_POLICY: FencePolicy = FencePolicy::Batched;
/// Pool bytes per key: about four times what a tree of 512-byte nodes takes (about 30). The
/// pool file is sparse: only [`TOUCH_BYTES_PER_KEY`] per key are written before the load.
pub const POOL_BYTES_PER_KEY: u64 = 128;
/// Pool bytes per key written once before a load (so most pages the tree takes are not first
/// touched inside the timed phases), below what a tree takes so the pool's resident memory
/// stays that of the tree.
pub const TOUCH_BYTES_PER_KEY: u64 = 20;

/// The numbers to beat: the authors' C++ code (and the EuroSys'22 artifact) measured on another
/// machine when the work was planned, quoted; not measured by this run.
pub const REFERENCE: &str = "the FAST'18 authors' C++ FAST_FAIR (clflush with an mfence on \
each side, 512 B nodes) on an AMD EPYC VM (2 cores, DRAM), November 2026, not this run's \
machine: 1M keys 0.94 M inserts/s and 3.16 M lookups/s; 16M keys 0.60 M inserts/s, 1.04 M \
lookups/s, 315 K 100-key range scans/s; paired with this workspace on that VM 3.55 M lookups/s \
and 682 K 100-key scans/s at 1M keys, 373 instructions per lookup, 733 per insert, 1,842 per \
scan; the EuroSys'22 artifact's per-shift baseline 0.28-0.35 M inserts/s and its redo-logged \
variant 0.30-0.38";

/// The redo-shift claim (Optane buffering (EuroSys'22) C8, Sec. 4.2, Fig. 12), quoted.
pub const REDO_SHIFT_CLAIM: &str = "redo-logged shifts: up to 38.8% lower insert latency and \
    60.8% higher throughput than per-shift persists on first-generation Optane \
    (read-after-persist delays), no gain on the second generation";

/// The tree type measured: on the hardware backend, its heap holding its pool in an `Arc`.
pub type Tree = FastFair<Hardware>;

/// Size of the pool file for a tree of `keys` keys: [`POOL_BYTES_PER_KEY`] per key, rounded up
/// to a power of two, at least 16 MiB.
pub fn pool_size(keys: u64) -> u64 {
    keys.saturating_mul(POOL_BYTES_PER_KEY)
        .next_power_of_two()
        .max(16 << 20)
}

/// The value stored with `key`.
pub fn value_of(key: u64) -> u64 {
    crate::ccehbench::value_of(key)
}

/// A fresh heap in its own pool file, for one tree: the file is removed when this is dropped.
#[derive(Debug)]
pub struct FastFairHeap(HeapFile);

impl FastFairHeap {
    /// Create the pool file `file_name` in `dir` (a stale one is replaced), sized for `keys`
    /// keys ([`pool_size`]), with `granularity` forced (`None`: detected), and format a heap;
    /// [`TOUCH_BYTES_PER_KEY`] per key of it are written first (see
    /// [`HeapFile::create_touching`]).
    pub fn create(
        dir: &Path,
        file_name: &str,
        keys: u64,
        granularity: Option<Granularity>,
    ) -> Result<FastFairHeap, SetupError> {
        HeapFile::create_touching(
            dir,
            file_name,
            pool_size(keys),
            keys.saturating_mul(TOUCH_BYTES_PER_KEY),
            granularity,
            FASTFAIR_HEAP_POLICY,
        )
        .map(FastFairHeap)
    }

    /// Make an empty tree (512-byte nodes, `policy`) with its root in the pool's root object.
    pub fn tree(&self, policy: ShiftPolicy) -> Result<Tree, FastFairError> {
        let config = FastFairConfig {
            policy,
            ..FastFairConfig::default()
        };
        let heap = self.0.heap();
        FastFair::create(heap, heap.pool().root_offset(), config)
    }

    /// Bytes the heap has allocated (nodes and the redo area).
    pub fn bytes_allocated(&self) -> u64 {
        self.0.bytes_allocated()
    }

    /// The pool file.
    pub fn file(&self) -> &PoolFile {
        self.0.file()
    }
}

/// Insert every key (value [`value_of`]); how many were new.
pub fn insert_all(tree: &Tree, keys: &[u64]) -> Result<u64, FastFairError> {
    let mut inserted = 0;
    for &k in keys {
        inserted += u64::from(tree.insert(k, value_of(k))?);
    }
    Ok(inserted)
}

/// Look every key up; how many were found with their [`value_of`].
pub fn get_all(tree: &Tree, keys: &[u64]) -> Result<u64, FastFairError> {
    let mut hits = 0;
    for &k in keys {
        hits += u64::from(tree.get(k)? == Some(value_of(k)));
    }
    Ok(hits)
}

/// One scan of up to [`SCAN_KEYS`] pairs from `start`; the number of pairs read.
pub fn scan_from(tree: &Tree, start: u64) -> Result<u64, FastFairError> {
    let mut n = 0;
    for pair in tree.range(start..).take(SCAN_KEYS) {
        let (k, v) = pair?;
        if v == value_of(k) {
            n += 1;
        }
    }
    Ok(n)
}

/// Scan from each of `starts`; the pairs read in all.
pub fn scan_all(tree: &Tree, starts: &[u64]) -> Result<u64, FastFairError> {
    let mut n = 0;
    for &s in starts {
        n += scan_from(tree, s)?;
    }
    Ok(n)
}

/// How much `pmem-bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastFairPlan {
    /// Keys loaded into each tree.
    pub keys: u64,
    /// Range scans per tree.
    pub scans: usize,
    /// Rounds; each loads one fresh tree per policy.
    pub rounds: usize,
}

impl FastFairPlan {
    /// The default run: [`FASTFAIR_KEYS`] keys, 20 000 scans, 5 rounds.
    pub fn full() -> FastFairPlan {
        FastFairPlan {
            keys: FASTFAIR_KEYS,
            scans: 20_000,
            rounds: 5,
        }
    }

    /// The `--quick` run: [`FASTFAIR_KEYS_QUICK`] keys, 2 000 scans, 2 rounds.
    pub fn quick() -> FastFairPlan {
        FastFairPlan {
            keys: FASTFAIR_KEYS_QUICK,
            scans: 2_000,
            rounds: 2,
        }
    }

    /// This plan with `keys` keys (at least 1), its rounds cut in proportion to keys beyond its
    /// own (at least one), so a 16M-key run takes minutes, not an hour.
    pub fn with_keys(self, keys: u64) -> FastFairPlan {
        let keys = keys.max(1);
        FastFairPlan {
            keys,
            rounds: crate::ccehbench::rounds_for(self.rounds, self.keys, keys),
            ..self
        }
    }
}

/// An operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FastFairOp {
    /// [`FastFair::insert`] of every key into a fresh tree, one call per key.
    Insert,
    /// [`FastFair::get`] of every key (hits), in a random order.
    Get,
    /// [`FastFair::range`] scans of [`SCAN_KEYS`] pairs.
    Scan,
}

impl FastFairOp {
    /// Every operation, in report order.
    pub const ALL: [FastFairOp; 3] = [FastFairOp::Insert, FastFairOp::Get, FastFairOp::Scan];

    /// The name in reports.
    pub fn name(self) -> String {
        match self {
            FastFairOp::Insert => "insert".to_string(),
            FastFairOp::Get => "get (hits, random order)".to_string(),
            FastFairOp::Scan => format!("scan of {SCAN_KEYS} keys"),
        }
    }
}

/// One (policy, operation) result.
#[derive(Clone, Debug, Serialize)]
pub struct FastFairRow {
    /// The shift policy's name.
    pub policy: String,
    /// What was measured.
    pub operation: String,
    /// Operations per second: the median over the rounds.
    pub ops_per_sec: f64,
    /// Nanoseconds per operation at that rate.
    pub ns_per_op: f64,
    /// Median latency of one call, in nanoseconds.
    pub p50_ns: Option<f64>,
    /// 99th percentile latency of one call, in nanoseconds.
    pub p99_ns: Option<f64>,
    /// Fences per operation over all rounds (splits included).
    pub fences_per_op: f64,
    /// Cache lines flushed per operation over all rounds.
    pub flushes_per_op: f64,
    /// Bytes flushed or stored non-temporally per operation (what reaches the media).
    pub media_bytes_per_op: f64,
    /// Operations per second of each round, in round order.
    pub samples_ops_per_sec: Vec<f64>,
}

/// The FAST&FAIR section of a run.
#[derive(Clone, Debug, Serialize)]
pub struct FastFairResults {
    /// Keys loaded into each tree.
    pub keys: u64,
    /// Rounds measured.
    pub rounds: usize,
    /// Scans per tree per round.
    pub scans: usize,
    /// Bytes per node.
    pub node_size: u64,
    /// Size of each tree's pool file.
    pub pool_bytes: u64,
    /// Every how many operations one was timed on its own.
    pub latency_every: usize,
    /// The median time of timing nothing, in nanoseconds (in every latency sample).
    pub timer_ns: f64,
    /// One row per policy and operation.
    pub rows: Vec<FastFairRow>,
    /// Bytes the heap allocated per key after a load (FAST tree).
    pub tree_bytes_per_key: f64,
    /// Bytes the heap allocated for the FAST tree after the load (nodes and redo area).
    pub tree_bytes: u64,
    /// Bytes of the FAST tree's pool file resident after the load (its pages in memory).
    pub pool_resident_bytes: u64,
    /// Levels of a loaded tree.
    pub height: u64,
    /// Insert throughput, redo-logged over per-shift (median of per-round ratios).
    pub redo_over_per_shift: f64,
    /// Insert throughput, FAST over per-shift (median of per-round ratios).
    pub fast_over_per_shift: f64,
    /// The numbers to beat ([`REFERENCE`]), quoted, not measured by this run.
    pub reference: String,
    /// The redo-shift claim ([`REDO_SHIFT_CLAIM`]), quoted.
    pub claim: String,
}

/// Why the FAST&FAIR measurements failed.
#[derive(Debug, thiserror::Error)]
pub enum FastFairBenchError {
    /// A pool or heap could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A tree operation failed.
    #[error("a FAST&FAIR operation failed: {0}")]
    Tree(#[from] FastFairError),
    /// An operation did not do what it should have (a bug, not a measurement).
    #[error(transparent)]
    Count(#[from] CountError),
}

impl From<TxError> for FastFairBenchError {
    fn from(e: TxError) -> Self {
        FastFairBenchError::Tree(FastFairError::Tx(e))
    }
}

/// Time `f` as one run of `op` in `phase`: `n` operations, which must do `expected` of
/// `what`.
fn timed(
    phase: &mut Phase,
    op: FastFairOp,
    n: u64,
    expected: u64,
    what: &'static str,
    f: impl FnOnce(&mut Vec<f64>) -> Result<u64, FastFairError>,
) -> Result<(), FastFairBenchError> {
    phase.time_counted(n, expected, || format!("FAST&FAIR {}", op.name()), what, f)
}

/// Run `op` over `items`, timing every [`LATENCY_EVERY`]th call on its own.
fn sampled<T: Copy>(
    items: &[T],
    lat: &mut Vec<f64>,
    mut op: impl FnMut(T) -> Result<u64, FastFairError>,
) -> Result<u64, FastFairError> {
    let mut total = 0;
    for (i, &x) in items.iter().enumerate() {
        total += sampled_call(i, LATENCY_EVERY, Some(&mut *lat), || op(x))?;
    }
    Ok(total)
}

/// Run the FAST&FAIR measurements of `pmem-bench` (see the module's documentation) on pool
/// files named `{prefix}-fastfair.pool` in `dir`, with `granularity` forced (`None`:
/// detected). `progress(round, rounds)` is called after each round.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &FastFairPlan,
    mut progress: impl FnMut(usize, usize),
) -> Result<FastFairResults, FastFairBenchError> {
    let n = plan.keys;
    let keys = random_keys_except_max(n, 0xFA57);
    let get_order = shuffled(&keys, 0x6E7);
    let scan_starts: Vec<u64> = shuffled(&keys, 0x5CA)
        .into_iter()
        .take(plan.scans)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    // Pairs each scan must read: up to SCAN_KEYS from its start.
    let expected_scanned: u64 = scan_starts
        .iter()
        .map(|s| {
            let at = sorted.partition_point(|k| k < s);
            (sorted.len() - at).min(SCAN_KEYS) as u64
        })
        .sum();
    drop(sorted);
    let file_name = format!("{prefix}-fastfair.pool");
    let timer_ns = timer_overhead_ns();
    let policies = ShiftPolicy::ALL;
    let mut phases: Vec<Vec<Phase>> =
        vec![vec![Phase::default(); FastFairOp::ALL.len()]; policies.len()];
    let mut bytes_per_key = f64::NAN;
    let mut tree_bytes = 0;
    let mut pool_resident_bytes = 0;
    let mut height = 0;
    for round in 0..plan.rounds {
        for step in 0..policies.len() {
            let p = (step + round) % policies.len();
            let policy = policies[p];
            let fresh = FastFairHeap::create(dir, &file_name, n, granularity)?;
            let tree = fresh.tree(policy)?;
            timed(
                &mut phases[p][0],
                FastFairOp::Insert,
                n,
                n,
                "keys inserted",
                |lat| sampled(&keys, lat, |k| Ok(u64::from(tree.insert(k, value_of(k))?))),
            )?;
            if policy == ShiftPolicy::Fast {
                bytes_per_key = fresh.bytes_allocated() as f64 / tree.len().max(1) as f64;
                tree_bytes = fresh.bytes_allocated();
                pool_resident_bytes = fresh.file().resident_bytes()?;
                height = tree.height()?;
            }
            timed(
                &mut phases[p][1],
                FastFairOp::Get,
                n,
                n,
                "keys found",
                |lat| {
                    sampled(&get_order, lat, |k| {
                        Ok(u64::from(tree.get(k)? == Some(value_of(k))))
                    })
                },
            )?;
            let scans = scan_starts.len() as u64;
            timed(
                &mut phases[p][2],
                FastFairOp::Scan,
                scans,
                expected_scanned,
                "pairs scanned",
                |lat| sampled(&scan_starts, lat, |s| scan_from(&tree, s)),
            )?;
        }
        progress(round + 1, plan.rounds);
    }

    let mut rows = Vec::new();
    for (p, policy) in policies.iter().enumerate() {
        for (o, op) in FastFairOp::ALL.iter().enumerate() {
            let phase = &phases[p][o];
            let rate = crate::measure::median(&phase.rates);
            rows.push(FastFairRow {
                policy: policy.name().to_string(),
                operation: op.name(),
                ops_per_sec: rate,
                ns_per_op: 1e9 / rate,
                p50_ns: phase.latency(0.50),
                p99_ns: phase.latency(0.99),
                fences_per_op: phase.per_op(phase.stats.fences),
                flushes_per_op: phase.per_op(phase.stats.flushes),
                media_bytes_per_op: phase.per_op(phase.stats.bytes_to_media()),
                samples_ops_per_sec: phase.rates.clone(),
            });
        }
    }
    let ratio = |a: usize, b: usize| {
        let ratios: Vec<f64> = phases[a][0]
            .rates
            .iter()
            .zip(&phases[b][0].rates)
            .map(|(x, y)| x / y)
            .collect();
        crate::measure::median(&ratios)
    };
    let index = |policy: ShiftPolicy| policies.iter().position(|&p| p == policy).expect("listed");
    Ok(FastFairResults {
        keys: n,
        rounds: plan.rounds,
        scans: plan.scans,
        node_size: FastFairConfig::default().node_size,
        pool_bytes: pool_size(n),
        latency_every: LATENCY_EVERY,
        timer_ns,
        redo_over_per_shift: ratio(index(ShiftPolicy::Redo), index(ShiftPolicy::PerShift)),
        fast_over_per_shift: ratio(index(ShiftPolicy::Fast), index(ShiftPolicy::PerShift)),
        rows,
        tree_bytes_per_key: bytes_per_key,
        tree_bytes,
        pool_resident_bytes,
        height,
        reference: REFERENCE.to_string(),
        claim: REDO_SHIFT_CLAIM.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_measurement_counts_every_operation() {
        let dir = tempfile::tempdir().unwrap();
        let plan = FastFairPlan {
            keys: 3_000,
            scans: 50,
            rounds: 1,
        };
        let results = measure(
            dir.path(),
            "t",
            Some(Granularity::Emulated),
            &plan,
            |_, _| {},
        )
        .unwrap();
        assert_eq!(results.rows.len(), 9);
        for row in &results.rows {
            assert!(row.ops_per_sec > 0.0, "{row:?}");
        }
        let insert = |policy: &str| {
            results
                .rows
                .iter()
                .find(|r| r.policy == policy && r.operation == "insert")
                .unwrap()
                .clone()
        };
        // FAST persists per line, per-shift per entry: never more fences than per-shift.
        assert!(insert("fast").fences_per_op < insert("per-shift").fences_per_op);
        assert!(insert("redo").flushes_per_op > insert("fast").flushes_per_op);
        assert!(results.height >= 2);
    }
}
