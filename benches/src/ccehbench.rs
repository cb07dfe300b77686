//! The CCEH measurements of `pmem-bench` and of the `cceh` criterion bench.
//!
//! Every table is made fresh, on its own heap ([`HeapConfig::default`](pmem_undo_log::HeapConfig::default), batched fences) in its
//! own pool file in the run's pool directory ([`CcehHeap`]), with the default shape of FAST'19:
//! 16 KiB segments of 256 buckets ([`CcehConfig::default`]). The keys are uniformly random,
//! distinct, nonzero `u64` ([`random_keys`]), generated before anything is timed, as are the
//! random orders in which they are looked up and removed ([`shuffled`]); the value of a key is
//! [`value_of`] it, so a lookup can be checked.
//!
//! `pmem-bench` ([`measure`]) runs [`CcehPlan::rounds`] rounds; in each it loads the keys into
//! four fresh tables, in forward order on even rounds and in reverse on odd ones:
//!
//! * with [`Cceh::insert`], one call per key, timing every [`LATENCY_EVERY`]th call on its own
//!   with [`Instant`](std::time::Instant) for the latency percentiles; then it looks every key up twice in one
//!   random order: with [`Cceh::get`] (hits, every [`LATENCY_EVERY`]th timed on its own) and
//!   with [`Cceh::get_batch`] ([`GET_BATCH_KEYS`] keys a call, prefetching [`HELPER_DEPTH`]
//!   ahead), the two passes taking turns going first; then it removes every key with
//!   [`Cceh::remove`] in another random order;
//! * with [`Cceh::insert_batch`], the speculative helper thread off;
//! * with [`Cceh::insert_batch`], the helper thread on, [`HELPER_DEPTH`] keys ahead;
//! * with [`Cceh::insert_batch`], the inserting thread prefetching the path of the key
//!   [`HELPER_DEPTH`] ahead itself (the helper's loads without its thread).
//!
//! A phase's throughput is the median over the rounds of keys / elapsed time; the helper's
//! effect ([`CcehResults::helper_on_over_off`]) is the median of the rounds' on/off ratios, as
//! the two loads of a round run back to back. Fences and flushes per operation come from
//! [`thread_stats`](pmem_ordering::thread_stats) deltas over the phase (they include the splits and directory doublings, so
//! an insert costs slightly more than one of each).
//!
//! The criterion bench uses the same pieces: [`CcehHeap`], [`random_keys`], and the one- or
//! two-thread drivers [`insert_all`], [`get_all`] and [`remove_all`].

use std::path::Path;

use pmem_ordering::Granularity;
// Named by the documentation's links only.
#[cfg(doc)]
use pmem_structures::raw::cceh::Cceh;
use pmem_structures::raw::cceh::{CcehConfig, CcehError};
use pmem_undo_log::{FencePolicy, TxError};
use serde::Serialize;

use crate::keys::{random_keys, shuffled};
use crate::phase::{check_count, sampled_call, CountError, Phase};
use crate::poolfile::SetupError;

mod table;

pub use table::{
    batch_options, get_all, insert_all, items, pool_size, remove_all, value_of, CcehHeap,
    LookAhead, Table,
};

/// Keys of a default `pmem-bench` run.
pub const CCEH_KEYS: u64 = 1_000_000;
/// Keys of a `--quick` run.
pub const CCEH_KEYS_QUICK: u64 = 100_000;
/// Every how many operations one is timed on its own, for the latency percentiles.
pub const LATENCY_EVERY: usize = 64;
/// How far ahead the helper thread walks (Optane buffering (EuroSys'22), Sec. 4.1 found 8 best).
pub const HELPER_DEPTH: usize = 8;
/// The heaps' fence policy (only splits and doublings run transactions).
pub const CCEH_POLICY: FencePolicy = FencePolicy::Batched;
/// Pool bytes per key: about four times what a table needs (30-40 bytes per key). The pool
/// file is sparse: only [`TOUCH_BYTES_PER_KEY`] per key are written before the loads, so the
/// rest costs memory only where the table's blocks land.
pub const POOL_BYTES_PER_KEY: u64 = 128;
/// Pool bytes per key written once before a load (so most pages the table takes are not
/// first touched inside the timed phases), below the 30-40 a table takes so the pool's
/// resident memory stays that of the table.
pub const TOUCH_BYTES_PER_KEY: u64 = 28;

/// The numbers to beat: the authors' C++ code and PMDK measured side by side with this
/// workspace on another machine when the work was planned, quoted; not measured by this run.
pub const REFERENCE: &str = "the FAST'19 authors' C++ CCEH (clflush + 3 mfence per insert) on \
an AMD EPYC VM (2 cores, DRAM), November 2026, not this run's machine: when the work was planned \
1M keys 2.2 M inserts/s and 9.4 M lookups/s, 16M keys 1.6 M inserts/s and 4.7 M lookups/s, \
about 32 bytes of table per key, PMDK hashmap_rp 0.52 M inserts/s at 1M keys; paired with this \
workspace on that VM 10.55 M lookups/s at 1M keys and 4.84 M at 16M, 127 instructions per \
lookup and 596 per insert";

/// Keys per [`Cceh::get_batch`] call in the `get_batch` row.
pub const GET_BATCH_KEYS: usize = 8192;

/// How many times the table's size is sampled over the second half of a load.
pub const CYCLE_SAMPLES: usize = 32;

/// How much `pmem-bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcehPlan {
    /// Keys loaded into each table.
    pub keys: u64,
    /// Rounds; each loads four fresh tables.
    pub rounds: usize,
}

impl CcehPlan {
    /// The default run: [`CCEH_KEYS`] keys, 9 rounds (about 15 s).
    pub fn full() -> CcehPlan {
        CcehPlan {
            keys: CCEH_KEYS,
            rounds: 9,
        }
    }

    /// The `--quick` run: [`CCEH_KEYS_QUICK`] keys, 3 rounds.
    pub fn quick() -> CcehPlan {
        CcehPlan {
            keys: CCEH_KEYS_QUICK,
            rounds: 3,
        }
    }

    /// This plan with `keys` keys (at least 1), its rounds cut in proportion to keys beyond its
    /// own (at least one), so a 16M-key run takes minutes, not an hour.
    pub fn with_keys(self, keys: u64) -> CcehPlan {
        let keys = keys.max(1);
        CcehPlan {
            keys,
            rounds: rounds_for(self.rounds, self.keys, keys),
        }
    }
}

/// The rounds of a plan of `rounds` rounds over `planned` keys when it runs `keys` keys: as
/// many for fewer keys, proportionally fewer (rounded up, at least one) for more.
pub fn rounds_for(rounds: usize, planned: u64, keys: u64) -> usize {
    if keys <= planned {
        return rounds;
    }
    let scaled = (rounds as u128 * planned as u128).div_ceil(keys as u128);
    (scaled as usize).max(1)
}

/// An operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CcehOp {
    /// [`Cceh::insert`], one call per key.
    Insert,
    /// [`Cceh::insert_batch`], helper thread off.
    InsertBatch,
    /// [`Cceh::insert_batch`], helper thread on.
    InsertBatchHelper,
    /// [`Cceh::insert_batch`], helper thread off, the inserting thread prefetching instead.
    InsertBatchInline,
    /// [`Cceh::get`] of every key (hits), in a random order.
    Get,
    /// [`Cceh::get_batch`] of every key (hits), in the same order, [`HELPER_DEPTH`] ahead.
    GetBatch,
    /// [`Cceh::remove`] of every key, in a random order.
    Remove,
}

impl CcehOp {
    /// Every operation, in report order.
    pub const ALL: [CcehOp; 7] = [
        CcehOp::Insert,
        CcehOp::InsertBatch,
        CcehOp::InsertBatchHelper,
        CcehOp::InsertBatchInline,
        CcehOp::Get,
        CcehOp::GetBatch,
        CcehOp::Remove,
    ];

    /// The name in reports.
    pub fn name(self) -> String {
        match self {
            CcehOp::Insert => "insert (one call per key)".to_string(),
            CcehOp::InsertBatch => "insert_batch, helper off".to_string(),
            CcehOp::InsertBatchHelper => {
                format!("insert_batch, helper on (depth {HELPER_DEPTH})")
            }
            CcehOp::InsertBatchInline => {
                format!("insert_batch, inline prefetch (depth {HELPER_DEPTH})")
            }
            CcehOp::Get => "get (hits, random order)".to_string(),
            CcehOp::GetBatch => format!("get_batch (same order, prefetch {HELPER_DEPTH} ahead)"),
            CcehOp::Remove => "remove (random order)".to_string(),
        }
    }

    fn index(self) -> usize {
        CcehOp::ALL.iter().position(|&o| o == self).expect("listed")
    }
}

/// One operation's results.
#[derive(Clone, Debug, Serialize)]
pub struct CcehRow {
    /// What was measured.
    pub operation: String,
    /// Operations per second: the median over the rounds.
    pub ops_per_sec: f64,
    /// Nanoseconds per operation at that rate.
    pub ns_per_op: f64,
    /// Median latency of one call, in nanoseconds (`None`: not sampled for this operation).
    pub p50_ns: Option<f64>,
    /// 99th percentile latency of one call, in nanoseconds.
    pub p99_ns: Option<f64>,
    /// Latency samples taken over all rounds.
    pub latency_samples: usize,
    /// Fences per operation over all rounds (splits and doublings included).
    pub fences_per_op: f64,
    /// Cache lines flushed per operation over all rounds.
    pub flushes_per_op: f64,
    /// Operations per second of each round, in round order.
    pub samples_ops_per_sec: Vec<f64>,
}

/// The CCEH section of a run.
#[derive(Clone, Debug, Serialize)]
pub struct CcehResults {
    /// Keys loaded into each table.
    pub keys: u64,
    /// Rounds measured.
    pub rounds: usize,
    /// Buckets per segment of the tables.
    pub buckets_per_segment: u64,
    /// Size of each table's pool file.
    pub pool_bytes: u64,
    /// Every how many operations one was timed on its own.
    pub latency_every: usize,
    /// The median time of timing nothing (two `Instant` reads), in nanoseconds: included in
    /// every latency sample.
    pub timer_ns: f64,
    /// How far ahead the helper thread walked.
    pub helper_depth: usize,
    /// One row per operation, in report order.
    pub rows: Vec<CcehRow>,
    /// Bytes the heap allocated for the table (directory and segments) per key, after the load.
    pub table_bytes_per_key: f64,
    /// The same, averaged over the second half of the load (sampled [`CYCLE_SAMPLES`] times
    /// from half the keys to all of them): a table's fill rises and falls as its segments
    /// split in waves, and a doubling of the key count is one whole wave.
    pub table_bytes_per_key_cycle_mean: f64,
    /// The directory's global depth after the load.
    pub global_depth: u64,
    /// Bytes the heap allocated for the table after the load (directory and segments).
    pub table_bytes: u64,
    /// Bytes of the table's pool file resident after the load (its pages in memory).
    pub pool_resident_bytes: u64,
    /// Insert throughput with the helper thread on over with it off (above 1: the helper
    /// helps): the median over the rounds of the two loads' ratio in each round.
    pub helper_on_over_off: f64,
    /// Insert throughput with the inserting thread prefetching for itself over with no look
    /// ahead, paired by round the same way.
    pub inline_over_off: f64,
    /// Keys moved along their probing window during the load of one table (the last round's).
    pub displacements: u64,
    /// The numbers to beat ([`REFERENCE`]), quoted, not measured by this run.
    pub reference: String,
}

/// Why the CCEH measurements failed.
#[derive(Debug, thiserror::Error)]
pub enum CcehBenchError {
    /// A pool or heap could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A table operation failed.
    #[error("a CCEH operation failed: {0}")]
    Table(#[from] CcehError),
    /// An operation did not do what it should have (a bug, not a measurement).
    #[error(transparent)]
    Count(#[from] CountError),
}

impl From<TxError> for CcehBenchError {
    fn from(e: TxError) -> Self {
        CcehBenchError::Table(CcehError::Tx(e))
    }
}

/// Time `f` as one run of `op` in `phase`: `n` operations, all of which must do `what`.
fn timed(
    phase: &mut Phase,
    op: CcehOp,
    n: u64,
    what: &'static str,
    f: impl FnOnce(&mut Vec<f64>) -> Result<u64, CcehError>,
) -> Result<(), CcehBenchError> {
    phase.time_counted(n, n, || format!("CCEH {}", op.name()), what, f)
}

/// Look every key of `order` up with `get`, timing every [`LATENCY_EVERY`]th call on its own
/// into `lat`; returns how many were found with their value.
fn lookup_pass(
    order: &[u64],
    lat: &mut Vec<f64>,
    mut get: impl FnMut(u64) -> Result<Option<u64>, CcehError>,
) -> Result<u64, CcehError> {
    let mut hits = 0;
    for (i, &k) in order.iter().enumerate() {
        let v = sampled_call(i, LATENCY_EVERY, Some(&mut *lat), || get(k))?;
        hits += u64::from(v == Some(value_of(k)));
    }
    Ok(hits)
}

pub use crate::phase::{percentile, timer_overhead_ns};

/// Which table a round loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// One `insert` per key (then the gets and removes).
    Single,
    /// `insert_batch`, helper off.
    Batch,
    /// `insert_batch`, helper on.
    Helper,
    /// `insert_batch`, inline prefetch.
    Inline,
}

/// Run the CCEH measurements of `pmem-bench` (see the module's documentation) on pool files
/// named `{prefix}-cceh.pool` in `dir`, with `granularity` forced (`None`: detected).
/// `progress(round, rounds)` is called after each round.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &CcehPlan,
    mut progress: impl FnMut(usize, usize),
) -> Result<CcehResults, CcehBenchError> {
    let n = plan.keys;
    let keys = random_keys(n, 0xCCE4);
    let items = items(&keys);
    let get_order = shuffled(&keys, 0x6E7);
    let remove_order = shuffled(&keys, 0x4E3);
    let file_name = format!("{prefix}-cceh.pool");
    let timer_ns = timer_overhead_ns();
    let mut phases: Vec<Phase> = vec![Phase::default(); CcehOp::ALL.len()];
    let mut bytes_per_key = f64::NAN;
    let mut table_bytes = 0;
    let mut pool_resident_bytes = 0;
    let mut global_depth = 0;
    let mut displacements = 0;
    let mut cycle = Vec::new();
    for round in 0..plan.rounds {
        let mut loads = [Load::Single, Load::Batch, Load::Helper, Load::Inline];
        if round % 2 == 1 {
            loads.reverse();
        }
        for load in loads {
            let fresh = CcehHeap::create(dir, &file_name, n, granularity)?;
            let table = fresh.table()?;
            match load {
                Load::Single => {
                    let sample_every = (items.len() / 2 / CYCLE_SAMPLES).max(1);
                    cycle.clear();
                    timed(
                        &mut phases[CcehOp::Insert.index()],
                        CcehOp::Insert,
                        n,
                        "inserted",
                        |lat| {
                            let mut inserted = 0;
                            for (i, &(k, v)) in items.iter().enumerate() {
                                if i > items.len() / 2 && i.is_multiple_of(sample_every) {
                                    cycle.push(fresh.bytes_allocated() as f64 / table.len() as f64);
                                }
                                let new = sampled_call(i, LATENCY_EVERY, Some(&mut *lat), || {
                                    table.insert(k, v)
                                })?;
                                inserted += u64::from(new);
                            }
                            Ok(inserted)
                        },
                    )?;
                    bytes_per_key = fresh.bytes_allocated() as f64 / table.len().max(1) as f64;
                    table_bytes = fresh.bytes_allocated();
                    pool_resident_bytes = fresh.file().resident_bytes()?;
                    global_depth = table.global_depth()?;
                    displacements = table.displacements();
                    // A later lookup pass may find more of the table in the cache: the passes
                    // take turns going first.
                    let mut passes = [CcehOp::Get, CcehOp::GetBatch];
                    passes.rotate_left(round % 2);
                    for pass in passes {
                        match pass {
                            CcehOp::Get => {
                                timed(&mut phases[pass.index()], pass, n, "found", |lat| {
                                    lookup_pass(&get_order, lat, |k| table.get(k))
                                })?
                            }
                            _ => timed(&mut phases[pass.index()], pass, n, "found", |_| {
                                let mut hits = 0;
                                for chunk in get_order.chunks(GET_BATCH_KEYS) {
                                    let values = table.get_batch(chunk, HELPER_DEPTH)?;
                                    hits += chunk
                                        .iter()
                                        .zip(values)
                                        .filter(|&(&k, v)| v == Some(value_of(k)))
                                        .count() as u64;
                                }
                                Ok(hits)
                            })?,
                        }
                    }
                    timed(
                        &mut phases[CcehOp::Remove.index()],
                        CcehOp::Remove,
                        n,
                        "removed",
                        |_| remove_all(&table, &remove_order, 1),
                    )?;
                    check_count(
                        || format!("CCEH {}", CcehOp::Remove.name()),
                        0,
                        table.len(),
                        "keys left in the table",
                    )?;
                }
                Load::Batch | Load::Helper | Load::Inline => {
                    let (op, look_ahead) = match load {
                        Load::Helper => (CcehOp::InsertBatchHelper, LookAhead::Helper),
                        Load::Inline => (CcehOp::InsertBatchInline, LookAhead::Inline),
                        _ => (CcehOp::InsertBatch, LookAhead::Off),
                    };
                    timed(&mut phases[op.index()], op, n, "inserted", |_| {
                        insert_all(&table, &items, look_ahead.options(), 1)
                    })?;
                }
            }
        }
        progress(round + 1, plan.rounds);
    }

    let rows: Vec<CcehRow> = CcehOp::ALL
        .iter()
        .zip(&phases)
        .map(|(&op, p)| {
            let rate = crate::measure::median(&p.rates);
            CcehRow {
                operation: op.name(),
                ops_per_sec: rate,
                ns_per_op: 1e9 / rate,
                p50_ns: p.latency(0.50),
                p99_ns: p.latency(0.99),
                latency_samples: p.latencies.len(),
                fences_per_op: p.per_op(p.stats.fences),
                flushes_per_op: p.per_op(p.stats.flushes),
                samples_ops_per_sec: p.rates.clone(),
            }
        })
        .collect();
    // Paired by round: the two loads of a round run back to back, so a drift of the machine
    // between rounds cancels out of their ratio.
    let rates = |op: CcehOp| &rows[op.index()].samples_ops_per_sec;
    let over_off = |op: CcehOp| -> Vec<f64> {
        rates(op)
            .iter()
            .zip(rates(CcehOp::InsertBatch))
            .map(|(on, off)| on / off)
            .collect()
    };
    Ok(CcehResults {
        keys: n,
        rounds: plan.rounds,
        buckets_per_segment: CcehConfig::default().buckets_per_segment,
        pool_bytes: pool_size(n),
        latency_every: LATENCY_EVERY,
        timer_ns,
        helper_depth: HELPER_DEPTH,
        helper_on_over_off: crate::measure::median(&over_off(CcehOp::InsertBatchHelper)),
        inline_over_off: crate::measure::median(&over_off(CcehOp::InsertBatchInline)),
        displacements,
        rows,
        table_bytes_per_key: bytes_per_key,
        table_bytes_per_key_cycle_mean: cycle.iter().sum::<f64>() / cycle.len().max(1) as f64,
        global_depth,
        table_bytes,
        pool_resident_bytes,
        reference: REFERENCE.to_string(),
    })
}
