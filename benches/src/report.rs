//! The results of a run, as text tables, JSON and markdown.
//!
//! The sections, each present when it was run: the primitives (one row per variant, [`Row`]),
//! then the transaction sections
//! of [`crate::txbench`], whose rows put the variants compared side by side in one line: K words
//! per transaction ([`TxRow`]), the Themis workloads ([`WorkloadRow`], with an average row) and
//! object updates ([`ObjectRow`]). Then the CCEH section ([`CcehResults`] of
//! [`crate::ccehbench`]): one row per table operation, the FAST&FAIR and datalog sections, the
//! YCSB tables ([`YcsbResults`], one per structure) and, with the `pmdk` feature, the PMDK
//! comparison ([`PmdkResults`]).

use serde::Serialize;

use crate::ccehbench::CcehResults;
use crate::datalogbench::DatalogResults;
use crate::fastfairbench::FastFairResults;
use crate::machine::Machine;
use crate::measure::{Measurement, Plan, Timing};
use crate::primitives::{size_label, Group, Variant};
use crate::txbench::{
    Section, TxVariant, Workload, OBJECTS, OBJECT_POLICY, OBJECT_SIZES, TX_POOL_SIZE, TX_WORDS,
    WORDS,
};
use crate::ycsb::YcsbResults;
use pmem_undo_log::FencePolicy;

/// The share of fences Themis removes that seed 004 Sec. II-D reports, on average over its
/// workloads.
pub const PAPER_NT_T_SHARE: f64 = 0.917;

/// Where and how the run was made.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    /// The machine.
    pub machine: Machine,
    /// The flush instruction chosen by `Isa::detected()`.
    pub flush: String,
    /// The streaming-copy kind chosen by `Isa::detected()`.
    pub copy: String,
    /// The pool file.
    pub pool_path: String,
    /// The pool's granularity, by name.
    pub granularity: String,
    /// What the granularity means for these results.
    pub granularity_note: String,
    /// Timed batches per variant.
    pub reps: usize,
    /// Target duration of one batch, in milliseconds.
    pub batch_ms: f64,
    /// Whether this was a `--quick` run.
    pub quick: bool,
}

/// One variant's results.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The group's name.
    pub group: String,
    /// The variant's id, unique in the report.
    pub variant: String,
    /// Payload bytes per operation.
    pub bytes_per_op: u64,
    /// Median nanoseconds per operation.
    pub ns_per_op: f64,
    /// Operations per second at the median time.
    pub ops_per_sec: f64,
    /// The variant this one is compared with.
    pub baseline: Option<String>,
    /// This variant's time over the baseline's (below 1: faster).
    pub ratio: Option<f64>,
    /// Fences issued per operation (`None`: not counted, the variant bypasses the pool).
    pub fences_per_op: Option<f64>,
    /// Cache lines flushed per operation.
    pub flushes_per_op: Option<f64>,
    /// Bytes written with non-temporal stores per operation.
    pub nt_bytes_per_op: Option<f64>,
    /// Bytes covered by flushed lines per operation.
    pub flushed_bytes_per_op: Option<f64>,
    /// Operations per timed batch.
    pub ops_per_sample: u64,
    /// Nanoseconds per operation of each timed batch.
    pub samples_ns_per_op: Vec<f64>,
}

/// The measurements of one transaction variant.
#[derive(Clone, Debug)]
pub struct TxMeasurement {
    /// What was measured.
    pub variant: TxVariant,
    /// Its timing and counters.
    pub timing: Timing,
}

/// One transaction variant's results: per operation, i.e. per transaction.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// The variant's id.
    pub variant: String,
    /// The heap's fence policy.
    pub policy: String,
    /// Median nanoseconds per transaction.
    pub ns_per_op: f64,
    /// Transactions per second at the median time.
    pub ops_per_sec: f64,
    /// Fences per transaction (the heap's `TxStats`).
    pub fences_per_op: f64,
    /// Log-before-data (nt -> t) orderings per transaction that need a fence under the x86 model
    /// (`TxStats::nt_t_fences`), issued or not.
    pub nt_t_fences_per_op: f64,
    /// Cache lines flushed per transaction.
    pub flushes_per_op: f64,
    /// Bytes written with non-temporal stores (the log) per transaction.
    pub nt_bytes_per_op: f64,
    /// Bytes sent to the media per transaction: flushed lines plus non-temporal bytes.
    pub bytes_to_media_per_op: f64,
    /// Transactions per timed batch.
    pub ops_per_sample: u64,
    /// Nanoseconds per transaction of each timed batch.
    pub samples_ns_per_op: Vec<f64>,
}

impl TxMeasurement {
    /// Median nanoseconds per transaction.
    pub fn median_ns(&self) -> f64 {
        crate::measure::median(&self.timing.samples_ns_per_op)
    }

    /// The results as a report cell.
    pub fn cell(&self) -> Cell {
        let t = &self.timing;
        let ops = (t.ops_per_sample * t.samples_ns_per_op.len() as u64).max(1) as f64;
        let tx = t.tx.unwrap_or_default();
        let ns = self.median_ns();
        Cell {
            variant: self.variant.id(),
            policy: self.variant.policy().name().to_string(),
            ns_per_op: ns,
            ops_per_sec: 1e9 / ns,
            fences_per_op: tx.fences as f64 / ops,
            nt_t_fences_per_op: tx.nt_t_fences as f64 / ops,
            flushes_per_op: t.counted.flushes as f64 / ops,
            nt_bytes_per_op: t.counted.nt_bytes as f64 / ops,
            bytes_to_media_per_op: t.counted.bytes_to_media() as f64 / ops,
            ops_per_sample: t.ops_per_sample,
            samples_ns_per_op: t.samples_ns_per_op.clone(),
        }
    }
}

/// K words per transaction under the three policies.
#[derive(Clone, Debug, Serialize)]
pub struct TxRow {
    /// Words snapshot and written per transaction.
    pub words: u64,
    /// Under the strict policy.
    pub strict: Cell,
    /// Under the batched policy.
    pub batched: Cell,
    /// Under the ideal policy.
    pub ideal: Cell,
    /// Batched time over strict time (below 1: faster).
    pub batched_over_strict: f64,
    /// Ideal time over strict time.
    pub ideal_over_strict: f64,
}

/// One Themis workload under the three policies.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadRow {
    /// The paper's name for it.
    pub workload: String,
    /// What one transaction does.
    pub description: String,
    /// Under the strict policy.
    pub strict: Cell,
    /// Under the batched policy.
    pub batched: Cell,
    /// Under the ideal policy.
    pub ideal: Cell,
    /// Of the fences strict issues, the share that only order a log entry before its data
    /// (nt -> t): the ones Themis removes.
    pub nt_t_share: f64,
    /// Strict time over batched time (above 1: batched is faster).
    pub speedup_batched: f64,
    /// Strict time over ideal time.
    pub speedup_ideal: f64,
}

/// Means over the workloads.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadAverage {
    /// Mean nt -> t share (seed 004 Sec. II-D: 91.7%).
    pub nt_t_share: f64,
    /// Mean batched speedup.
    pub speedup_batched: f64,
    /// Mean ideal speedup (seed 004 Fig. 3: 1.67x on its real-hardware runs).
    pub speedup_ideal: f64,
}

/// In-place vs out-of-place update of one object size.
#[derive(Clone, Debug, Serialize)]
pub struct ObjectRow {
    /// Bytes of the object.
    pub bytes: u64,
    /// Snapshot + overwrite.
    pub in_place: Cell,
    /// Allocate + write + swing the pointer + free.
    pub out_of_place: Cell,
    /// Out-of-place time over in-place time.
    pub out_over_in: f64,
}

/// A whole run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Where and how.
    pub setup: Setup,
    /// One row per primitive variant, in report order.
    pub rows: Vec<Row>,
    /// One row per K words per transaction.
    pub transactions: Vec<TxRow>,
    /// One row per Themis workload.
    pub workloads: Vec<WorkloadRow>,
    /// Means over the workloads (`None` if none was measured).
    pub workload_average: Option<WorkloadAverage>,
    /// One row per object size.
    pub objects: Vec<ObjectRow>,
    /// The CCEH section (`None` if it was not measured).
    pub cceh: Option<CcehResults>,
    /// The datalog section (`None` if it was not measured).
    pub datalog: Option<DatalogResults>,
    /// The FAST&FAIR section (`None` if it was not measured).
    pub fastfair: Option<FastFairResults>,
    /// The PMDK comparison (`None` without the `pmdk` feature).
    pub pmdk: Option<PmdkResults>,
    /// The YCSB workloads (`None` if not run).
    pub ycsb: Option<YcsbResults>,
}

/// How to get the PMDK comparison, printed where it would be.
pub const PMDK_HINT: &str = "pmdk: not measured (built without the pmdk feature); to compare \
    with PMDK, install libpmem-dev and libpmemobj-dev (apt-get install libpmem-dev \
    libpmemobj-dev on Debian/Ubuntu), then run cargo run --release -p pmem-bench --features pmdk";

/// The timing of one side of a PMDK comparison.
#[derive(Clone, Debug, Serialize)]
pub struct SideTiming {
    /// Median nanoseconds per operation.
    pub ns_per_op: f64,
    /// Operations per second at the median time.
    pub ops_per_sec: f64,
    /// Operations per timed batch.
    pub ops_per_sample: u64,
    /// Nanoseconds per operation of each timed batch, in round order.
    pub samples_ns_per_op: Vec<f64>,
}

impl SideTiming {
    /// The median and samples of `timing`.
    pub fn new(timing: &Timing) -> SideTiming {
        let ns = crate::measure::median(&timing.samples_ns_per_op);
        SideTiming {
            ns_per_op: ns,
            ops_per_sec: 1e9 / ns,
            ops_per_sample: timing.ops_per_sample,
            samples_ns_per_op: timing.samples_ns_per_op.clone(),
        }
    }
}

/// One copy size: libpmem against our pool.
#[derive(Clone, Debug, Serialize)]
pub struct PmdkCopyRow {
    /// Bytes copied per operation.
    pub bytes: u64,
    /// `pmem_memcpy_persist` into a `pmem_map_file` mapping.
    pub pmdk: SideTiming,
    /// The pool's `nt_write` + fence.
    pub ours_nt: SideTiming,
    /// The pool's `write` + `persist` (flush + fence).
    pub ours_persist: SideTiming,
    /// Our nt_write time over libpmem's (below 1: ours is faster).
    pub nt_over_pmdk: f64,
    /// Our write + persist time over libpmem's.
    pub persist_over_pmdk: f64,
}

/// One K: a libpmemobj transaction against ours.
#[derive(Clone, Debug, Serialize)]
pub struct PmdkTxRow {
    /// Words snapshot and written per transaction.
    pub words: u64,
    /// libpmemobj.
    pub pmdk: SideTiming,
    /// Our heap under the strict policy.
    pub strict: Cell,
    /// Our heap under the batched policy (the default).
    pub batched: Cell,
    /// Strict time over libpmemobj's (below 1: ours is faster).
    pub strict_over_pmdk: f64,
    /// Batched time over libpmemobj's.
    pub batched_over_pmdk: f64,
}

/// The PMDK comparison: how PMDK was set up, and the two tables.
#[derive(Clone, Debug, Serialize)]
pub struct PmdkResults {
    /// The PMDK version the binary was built against.
    pub pmdk_version: String,
    /// `PMEM_IS_PMEM_FORCE` as the environment set it (`None`: unset, so the run set it to 1).
    pub pmem_is_pmem_force_env: Option<String>,
    /// Whether libpmem treated the copy's mapping as persistent memory.
    pub copy_is_pmem: bool,
    /// Whether libpmem treated the libpmemobj pools as persistent memory (false: msync).
    pub obj_is_pmem: bool,
    /// `pmem_has_auto_flush()`: the platform flushes caches on power loss (eADR).
    pub auto_flush: bool,
    /// The flush instruction libpmem uses, by its documented rules.
    pub libpmem_flush: String,
    /// When libpmem copies with non-temporal stores.
    pub libpmem_movnt: String,
    /// Our flush instruction (`Isa::detected`).
    pub our_flush: String,
    /// Our streaming-copy kind (`Isa::detected`).
    pub our_copy: String,
    /// Our pools' granularity.
    pub our_granularity: String,
    /// Timed batches per side.
    pub reps: usize,
    /// Target duration of one batch, in milliseconds.
    pub batch_ms: f64,
    /// One row per copy size.
    pub copy: Vec<PmdkCopyRow>,
    /// One row per K.
    pub tx: Vec<PmdkTxRow>,
}

impl Setup {
    /// The setup of a run with `plan`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        machine: Machine,
        flush: &str,
        copy: &str,
        pool_path: &str,
        granularity: &str,
        granularity_note: String,
        plan: &Plan,
        quick: bool,
    ) -> Setup {
        Setup {
            machine,
            flush: flush.to_string(),
            copy: copy.to_string(),
            pool_path: pool_path.to_string(),
            granularity: granularity.to_string(),
            granularity_note,
            reps: plan.reps,
            batch_ms: plan.batch.as_secs_f64() * 1e3,
            quick,
        }
    }
}

impl Report {
    /// Build the rows from the measurements of every group, in order: the primitives'
    /// `measurements`, and the transaction sections' `tx` (rows whose variants were not all
    /// measured are left out).
    pub fn new(setup: Setup, measurements: &[Measurement], tx: &[TxMeasurement]) -> Report {
        let find = |v: Variant| measurements.iter().find(|m| m.variant == v);
        let rows = measurements
            .iter()
            .map(|m| {
                let ns = m.median_ns();
                let base = m.variant.baseline().and_then(find);
                Row {
                    group: m.variant.group().name().to_string(),
                    variant: m.variant.id(),
                    bytes_per_op: m.variant.bytes() as u64,
                    ns_per_op: ns,
                    ops_per_sec: 1e9 / ns,
                    baseline: base.map(|b| b.variant.id()),
                    ratio: base.map(|b| ns / b.median_ns()),
                    fences_per_op: m.per_op(|s| s.fences),
                    flushes_per_op: m.per_op(|s| s.flushes),
                    nt_bytes_per_op: m.per_op(|s| s.nt_bytes),
                    flushed_bytes_per_op: m.per_op(|s| s.flushed_bytes),
                    ops_per_sample: m.ops_per_sample,
                    samples_ns_per_op: m.samples_ns_per_op.clone(),
                }
            })
            .collect();
        let cell = |v: TxVariant| tx.iter().find(|m| m.variant == v).map(|m| m.cell());
        let policies = |make: &dyn Fn(FencePolicy) -> TxVariant| {
            Some((
                cell(make(FencePolicy::Strict))?,
                cell(make(FencePolicy::Batched))?,
                cell(make(FencePolicy::Ideal))?,
            ))
        };
        let transactions: Vec<TxRow> = TX_WORDS
            .iter()
            .filter_map(|&k| {
                let (strict, batched, ideal) = policies(&|policy| TxVariant::Words { k, policy })?;
                Some(TxRow {
                    words: k,
                    batched_over_strict: batched.ns_per_op / strict.ns_per_op,
                    ideal_over_strict: ideal.ns_per_op / strict.ns_per_op,
                    strict,
                    batched,
                    ideal,
                })
            })
            .collect();
        let workloads: Vec<WorkloadRow> = Workload::ALL
            .iter()
            .filter_map(|&workload| {
                let (strict, batched, ideal) =
                    policies(&|policy| TxVariant::Workload { workload, policy })?;
                Some(WorkloadRow {
                    workload: workload.name().to_string(),
                    description: workload.description(),
                    nt_t_share: strict.nt_t_fences_per_op / strict.fences_per_op,
                    speedup_batched: strict.ns_per_op / batched.ns_per_op,
                    speedup_ideal: strict.ns_per_op / ideal.ns_per_op,
                    strict,
                    batched,
                    ideal,
                })
            })
            .collect();
        let mean = |f: fn(&WorkloadRow) -> f64| {
            workloads.iter().map(f).sum::<f64>() / workloads.len() as f64
        };
        let workload_average = (!workloads.is_empty()).then(|| WorkloadAverage {
            nt_t_share: mean(|w| w.nt_t_share),
            speedup_batched: mean(|w| w.speedup_batched),
            speedup_ideal: mean(|w| w.speedup_ideal),
        });
        let objects = OBJECT_SIZES
            .iter()
            .filter_map(|&bytes| {
                let in_place = cell(TxVariant::Object {
                    bytes,
                    out_of_place: false,
                })?;
                let out_of_place = cell(TxVariant::Object {
                    bytes,
                    out_of_place: true,
                })?;
                Some(ObjectRow {
                    bytes,
                    out_over_in: out_of_place.ns_per_op / in_place.ns_per_op,
                    in_place,
                    out_of_place,
                })
            })
            .collect();
        Report {
            setup,
            rows,
            transactions,
            workloads,
            workload_average,
            objects,
            cceh: None,
            datalog: None,
            fastfair: None,
            pmdk: None,
            ycsb: None,
        }
    }

    /// The same report with the YCSB section.
    pub fn with_ycsb(mut self, ycsb: YcsbResults) -> Report {
        self.ycsb = Some(ycsb);
        self
    }

    /// The YCSB section as text: one table per structure (empty if it was not run).
    pub fn ycsb_tables(&self) -> String {
        let texts: Vec<String> = self.ycsb_sections().iter().map(Block::text).collect();
        texts.join("\n")
    }

    /// One YCSB table per structure measured.
    fn ycsb_sections(&self) -> Vec<Block> {
        let Some(y) = &self.ycsb else {
            return Vec::new();
        };
        let mut structures: Vec<&str> = Vec::new();
        for r in &y.rows {
            if !structures.contains(&r.structure.as_str()) {
                structures.push(&r.structure);
            }
        }

        structures
            .into_iter()
            .map(|structure| {
                let rows = y
                    .rows
                    .iter()
                    .filter(|r| r.structure == structure)
                    .map(|r| {
                        vec![
                            r.variant.clone(),
                            r.workload.clone(),
                            r.distribution.clone().unwrap_or_else(|| "-".into()),
                            r.threads.to_string(),
                            format_rate(r.ops_per_sec),
                            format_opt_ns(r.p50_ns),
                            format_opt_ns(r.p99_ns),
                            format_opt_ns(r.p999_ns),
                            format!("{:.2}", r.fences_per_op),
                            format!("{:.2}", r.flushes_per_op),
                            format!("{:.0}", r.nt_bytes_per_op),
                            format!("{:.0}", r.media_bytes_per_op),
                            format!("{:.0}", r.xpline_bytes_per_op),
                            r.ewr.map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
                        ]
                    })
                    .collect();
                let mut legend = vec![format!(
                    "{} records loaded, then {} operations per workload run; keys, values and \
                     operations generated before timing; every operation timed with Instant \
                     (two reads, {:.0} ns, included); the latencies are HDR histograms \
                     (hdrhistogram, 3 significant digits) merged over the threads",
                    y.scale.records, y.scale.ops, y.timer_ns
                )];
                legend.push(
                    "A: 50% reads, 50% updates; B: 95/5; C: reads only; E: 95% scans of 1-100 \
                     records, 5% inserts; insert-only: new records; uniform or scrambled \
                     Zipfian (0.99) key choice"
                        .to_string(),
                );
                legend.push(
                    "media B: bytes sent to persistent memory (flushed lines + nt bytes); XPLine \
                     B: what an Optane DIMM would write for them at 256-byte XPLines through a \
                     16 KiB XPBuffer model (seed 000); EWR = media B / XPLine B, seed 000's \
                     effective write ratio (below 1: write amplification of 1/EWR)"
                        .to_string(),
                );
                for skip in y.skipped.iter().filter(|k| k.structure == structure) {
                    legend.push(format!(
                        "{} {}: workload {} skipped: {}",
                        skip.structure, skip.variant, skip.workload, skip.reason
                    ));
                }
                Block {
                    title: format!("YCSB: {structure}"),
                    header: vec![
                        "variant",
                        "workload",
                        "dist",
                        "thr",
                        "ops/s",
                        "p50 ns",
                        "p99 ns",
                        "p99.9 ns",
                        "fences/op",
                        "flushes/op",
                        "nt B/op",
                        "media B/op",
                        "XPLine B/op",
                        "EWR",
                    ],
                    rows,
                    text_columns: 3,
                    group_gaps: true,
                    legend,
                }
            })
            .collect()
    }

    /// The same report with the PMDK section, if it was measured.
    pub fn with_pmdk(mut self, pmdk: Option<PmdkResults>) -> Report {
        self.pmdk = pmdk;
        self
    }

    /// The PMDK section as text, or the line saying how to get it.
    pub fn pmdk_tables(&self) -> String {
        let blocks = self.pmdk_sections();
        if blocks.is_empty() {
            return format!("{PMDK_HINT}\n");
        }
        let texts: Vec<String> = blocks.iter().map(Block::text).collect();
        texts.join("\n")
    }

    /// The PMDK copy and transaction tables (none without the section).
    fn pmdk_sections(&self) -> Vec<Block> {
        let Some(p) = &self.pmdk else {
            return Vec::new();
        };
        let pmem = |is_pmem: bool| match is_pmem {
            true => "true",
            false => "FALSE: libpmem falls back to msync, not comparable",
        };
        let force = match &p.pmem_is_pmem_force_env {
            None => "PMEM_IS_PMEM_FORCE=1 set by pmem-bench before libpmem's first pmem_is_pmem \
                     call, when libpmem reads it"
                .to_string(),
            Some(v) => format!("PMEM_IS_PMEM_FORCE={v} from the environment"),
        };
        let setup = format!(
            "PMDK {} ({force}; libpmem flush {}, non-temporal copies {}, pmem_has_auto_flush {}) \
             vs ours (flush {}, copy {}, granularity {}); pools in the run's directory; ns/op: \
             median of {} batches of ~{:.0} ms per side, the sides of a row interleaved",
            p.pmdk_version,
            p.libpmem_flush,
            p.libpmem_movnt,
            p.auto_flush,
            p.our_flush,
            p.our_copy,
            p.our_granularity,
            p.reps,
            p.batch_ms,
        );
        let copy_rows = p
            .copy
            .iter()
            .map(|r| {
                vec![
                    size_label(r.bytes as usize),
                    format_ns(r.pmdk.ns_per_op),
                    format_ns(r.ours_nt.ns_per_op),
                    format_ns(r.ours_persist.ns_per_op),
                    format!("{:.2}", r.nt_over_pmdk),
                    format!("{:.2}", r.persist_over_pmdk),
                ]
            })
            .collect();
        let copy = Block {
            title: format!(
                "pmdk_copy: {}-byte ring of slots written in turn; PMDK: pmem_memcpy_persist into \
                 a pmem_map_file mapping (is_pmem {}; it flushes, never msyncs, either way); \
                 ours: the pool's nt_write + sfence (what the undo log uses for its entries) and \
                 write + persist ({} + sfence). {setup}",
                crate::primitives::RING_LEN,
                p.copy_is_pmem,
                p.our_flush,
            ),
            header: vec![
                "size",
                "pmdk ns",
                "ours nt ns",
                "ours persist ns",
                "nt/pmdk",
                "persist/pmdk",
            ],
            rows: copy_rows,
            text_columns: 1,
            group_gaps: false,
            legend: vec![
                "nt/pmdk, persist/pmdk: our time over pmem_memcpy_persist's (below 1: ours is \
                 faster); nt: nt_write + sfence; persist: write + persist (temporal stores, then \
                 the flush named above and sfence)"
                    .to_string(),
            ],
        };
        let tx_rows =
            p.tx.iter()
                .map(|r| {
                    vec![
                        r.words.to_string(),
                        format_ns(r.pmdk.ns_per_op),
                        format_ns(r.strict.ns_per_op),
                        format_ns(r.batched.ns_per_op),
                        format!("{:.2}", r.strict_over_pmdk),
                        format!("{:.2}", r.batched_over_pmdk),
                        format!("{:.2}", r.strict.fences_per_op),
                        format!("{:.2}", r.batched.fences_per_op),
                    ]
                })
                .collect();
        let tx = Block {
            title: format!(
                "pmdk_tx: one transaction snapshots K random words of a {} Ki-word array (one \
                 per K equal slices, the same words on both sides), then writes them; PMDK: \
                 libpmemobj (is_pmem {}), pmemobj_tx_add_range_direct of each word then the \
                 stores, the TX_BEGIN/TX_END stages through the function API without setjmp; \
                 ours: the undo-log Heap (HeapConfig::default()) under the strict and batched \
                 (default) policies, each side in its own fresh {} MiB pool file; set-up and \
                 timing as for pmdk_copy",
                WORDS >> 10,
                pmem(p.obj_is_pmem),
                TX_POOL_SIZE >> 20,
            ),
            header: vec![
                "K",
                "pmdk ns/tx",
                "strict ns/tx",
                "batched ns/tx",
                "strict/pmdk",
                "batched/pmdk",
                "fences strict",
                "fences batched",
            ],
            rows: tx_rows,
            text_columns: 1,
            group_gaps: false,
            legend: vec![
                "strict/pmdk, batched/pmdk: our time over libpmemobj's (below 1: ours is \
                 faster); fences: ours per transaction (TxStats), libpmemobj's are not counted"
                    .to_string(),
            ],
        };
        vec![copy, tx]
    }

    /// The same report with the CCEH section.
    pub fn with_cceh(mut self, cceh: CcehResults) -> Report {
        self.cceh = Some(cceh);
        self
    }

    /// The same report with the datalog section.
    pub fn with_datalog(mut self, datalog: DatalogResults) -> Report {
        self.datalog = Some(datalog);
        self
    }

    /// What the datalog section measured and how (empty without one).
    pub fn datalog_title(&self) -> String {
        let Some(d) = &self.datalog else {
            return String::new();
        };
        format!(
            "datalog: {} random overwrites per row of a {} MiB file (offsets aligned to the \
             write size), then {} random 4 KiB reads of it, each row on a fresh store ({} \
             fences) in a fresh {} MiB pool file in the same directory, same granularity; \
             ops/s: median of {} rounds, the two write paths of a size back to back (reversed \
             on odd rounds); p50/p99: every {}th call timed on its own with Instant; per call \
             from thread_stats over the phase: fences, lines flushed, bytes stored (temporal + \
             non-temporal) and bytes to media (flushed lines + non-temporal bytes); \
             amplification: bytes to media over bytes written; log cleaning and folds included",
            d.writes,
            d.file_bytes >> 20,
            d.reads,
            crate::datalogbench::DATALOG_POLICY.name(),
            d.pool_bytes >> 20,
            d.rounds,
            d.latency_every,
        )
    }

    fn datalog_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "operation",
            "path",
            "bytes",
            "ops/s",
            "ns/op",
            "p50 ns",
            "p99 ns",
            "fences/op",
            "flushes/op",
            "stored B/op",
            "to media B/op",
            "amplification",
        ];
        let rows = self
            .datalog
            .iter()
            .flat_map(|d| &d.rows)
            .map(|r| {
                vec![
                    r.operation.clone(),
                    r.mode.clone(),
                    r.size.to_string(),
                    format_rate(r.ops_per_sec),
                    format_ns(r.ns_per_op),
                    format_ns(r.p50_ns),
                    format_ns(r.p99_ns),
                    format!("{:.2}", r.fences_per_op),
                    format!("{:.2}", r.flushes_per_op),
                    format!("{:.0}", r.bytes_stored_per_op),
                    format!("{:.0}", r.bytes_to_media_per_op),
                    r.write_amplification
                        .map_or_else(|| "-".to_string(), |a| format!("{a:.2}")),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The footnotes of the datalog table.
    fn datalog_legend(&self) -> Vec<String> {
        let Some(d) = &self.datalog else {
            return Vec::new();
        };
        let mut out = vec![format!(
            "p50/p99: one call timed at a time; each sample includes the timer ({:.0} ns here)",
            d.timer_ns
        )];
        for r in &d.ratios {
            out.push(format!(
                "{} B writes: copy-on-write takes {:.2}x the time per write of embedded \
                 ({:.2}x at p50) and sends {:.1}x the bytes to memory",
                r.size, r.throughput_ratio, r.p50_ratio, r.bytes_ratio
            ));
        }
        out.push(
            "reads: 4 KiB reads after the 64 B overwrites; after embedded writes a read merges \
             the page's embedded entries (checksums checked) over its base page"
                .to_string(),
        );
        out.push(format!(
            "the paper, quoted, not measured by us: \"{}\"; this run is on DRAM, not Optane",
            d.reference
        ));
        out
    }

    /// The datalog section as text: title, aligned table and footnotes (empty without one).
    pub fn datalog_table(&self) -> String {
        self.datalog_section()
            .map(|section| section.text())
            .unwrap_or_default()
    }

    fn datalog_section(&self) -> Option<Block> {
        self.datalog.as_ref()?;
        let (header, rows) = self.datalog_cells();
        Some(Block {
            title: self.datalog_title(),
            header,
            rows,
            text_columns: 2,
            group_gaps: false,
            legend: self.datalog_legend(),
        })
    }

    /// The same report with the FAST&FAIR section.
    pub fn with_fastfair(mut self, fastfair: FastFairResults) -> Report {
        self.fastfair = Some(fastfair);
        self
    }

    /// What the FAST&FAIR section measured and how (empty without one).
    pub fn fastfair_title(&self) -> String {
        let Some(f) = &self.fastfair else {
            return String::new();
        };
        format!(
            "fastfair: {} uniformly random distinct keys inserted one call at a time into a fresh \
             tree per shift policy ({}-byte nodes), each on its own heap ({} fences for splits \
             and merges) in a fresh {} MiB pool file in the same directory, same granularity; \
             then every key looked up in a random order and {} scans of {} keys from random \
             keys; ops/s: median of {} rounds, the policies' order rotated each round; p50/p99: \
             every {}th call timed on its own with Instant; fences/op, flushes/op, media B/op \
             (bytes flushed or stored non-temporally): thread_stats over the phase, splits \
             included",
            f.keys,
            f.node_size,
            crate::fastfairbench::FASTFAIR_HEAP_POLICY.name(),
            f.pool_bytes >> 20,
            f.scans,
            crate::fastfairbench::SCAN_KEYS,
            f.rounds,
            f.latency_every,
        )
    }

    fn fastfair_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "policy",
            "operation",
            "ops/s",
            "ns/op",
            "p50 ns",
            "p99 ns",
            "fences/op",
            "flushes/op",
            "media B/op",
        ];
        let rows = self
            .fastfair
            .iter()
            .flat_map(|f| &f.rows)
            .map(|r| {
                vec![
                    r.policy.clone(),
                    r.operation.clone(),
                    format_rate(r.ops_per_sec),
                    format_ns(r.ns_per_op),
                    format_opt_ns(r.p50_ns),
                    format_opt_ns(r.p99_ns),
                    format!("{:.2}", r.fences_per_op),
                    format!("{:.2}", r.flushes_per_op),
                    format!("{:.0}", r.media_bytes_per_op),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The footnotes of the FAST&FAIR table.
    fn fastfair_legend(&self) -> Vec<String> {
        let Some(f) = &self.fastfair else {
            return Vec::new();
        };
        vec![
            format!(
                "p50/p99: one call timed at a time, the timer included (an empty timed section \
                 takes {:.0} ns here)",
                f.timer_ns
            ),
            format!(
                "tree: {:.1} bytes per key (nodes and redo area the heap allocated, FAST tree), \
                 {} levels",
                f.tree_bytes_per_key, f.height
            ),
            format!(
                "insert throughput over per-shift (median of the rounds' ratios): redo-logged \
                 {:.2}x, FAST {:.2}x",
                f.redo_over_per_shift, f.fast_over_per_shift
            ),
            format!("seed 001's claim C8, quoted: \"{}\"", f.claim),
            format!(
                "to beat, quoted from the issue, not measured by us: \"{}\"",
                f.reference
            ),
        ]
    }

    /// The FAST&FAIR section as text: title, aligned table and footnotes (empty without one).
    pub fn fastfair_table(&self) -> String {
        self.fastfair_section()
            .map(|section| section.text())
            .unwrap_or_default()
    }

    fn fastfair_section(&self) -> Option<Block> {
        self.fastfair.as_ref()?;
        let (header, rows) = self.fastfair_cells();
        Some(Block {
            title: self.fastfair_title(),
            header,
            rows,
            text_columns: 2,
            group_gaps: true,
            legend: self.fastfair_legend(),
        })
    }

    /// The header line: machine, instructions, pool and what its granularity means.
    pub fn header(&self) -> String {
        let s = &self.setup;
        format!(
            "host {} | CPU {} | {} cores | flush {}, copy {} (Isa::detected) | pool {} | {}",
            s.machine.hostname,
            s.machine.cpu_model,
            s.machine.cores,
            s.flush,
            s.copy,
            s.pool_path,
            s.granularity_note
        )
    }

    /// How the numbers were taken.
    pub fn method(&self) -> String {
        format!(
            "ns/op: median of {} batches of ~{} ms per variant, the variants of a group \
             interleaved; ratio: ns/op over the baseline's; per-op counts from the pool's \
             thread_stats (- = bypasses the pool)",
            self.setup.reps, self.setup.batch_ms
        )
    }

    /// One line per group saying what its operations are.
    pub fn legend(&self) -> String {
        let mut out = String::new();
        for group in Group::ALL {
            if self.rows.iter().any(|r| r.group == group.name()) {
                out.push_str(&format!("{}: {}\n", group.name(), group.description()));
            }
        }
        out
    }

    fn cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "group",
            "variant",
            "ns/op",
            "ops/s",
            "ratio",
            "baseline",
            "fences/op",
            "flushes/op",
            "nt B/op",
            "flushed B/op",
        ];
        let opt = |x: Option<f64>, decimals: usize| match x {
            Some(v) => format!("{v:.decimals$}"),
            None => "-".to_string(),
        };
        let rows = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.group.clone(),
                    r.variant.clone(),
                    format_ns(r.ns_per_op),
                    format_rate(r.ops_per_sec),
                    opt(r.ratio, 2),
                    r.baseline.clone().unwrap_or_else(|| "-".to_string()),
                    opt(r.fences_per_op, 2),
                    opt(r.flushes_per_op, 2),
                    opt(r.nt_bytes_per_op, 0),
                    opt(r.flushed_bytes_per_op, 0),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The results as an aligned text table (text columns left, numbers right).
    pub fn table(&self) -> String {
        let (header, rows) = self.cells();
        align(&header, &rows, |col| matches!(col, 0 | 1 | 5), true)
    }

    /// How the transaction sections were measured.
    pub fn tx_method(&self) -> String {
        format!(
            "Transactions: each variant on its own heap (HeapConfig::default(): 8 lanes of 64 KiB \
             logs, 256 KiB chunks) in a fresh {} MiB pool file in the same directory, same \
             granularity; ns/tx: median of {} batches of ~{} ms, the variants of one K, one \
             workload or one size interleaved; fences/tx and nt->t from the heap's TxStats, media \
             bytes (flushed + nt) from thread_stats, over the timed batches",
            TX_POOL_SIZE >> 20,
            self.setup.reps,
            self.setup.batch_ms
        )
    }

    fn tx_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "K",
            "strict ns/tx",
            "batched ns/tx",
            "ideal ns/tx",
            "fences strict",
            "fences batched",
            "fences ideal",
            "batched/strict",
            "ideal/strict",
        ];
        let rows = self
            .transactions
            .iter()
            .map(|r| {
                vec![
                    r.words.to_string(),
                    format_ns(r.strict.ns_per_op),
                    format_ns(r.batched.ns_per_op),
                    format_ns(r.ideal.ns_per_op),
                    format!("{:.2}", r.strict.fences_per_op),
                    format!("{:.2}", r.batched.fences_per_op),
                    format!("{:.2}", r.ideal.fences_per_op),
                    format!("{:.2}", r.batched_over_strict),
                    format!("{:.2}", r.ideal_over_strict),
                ]
            })
            .collect();
        (header, rows)
    }

    fn workload_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "workload",
            "strict ns/tx",
            "batched ns/tx",
            "ideal ns/tx",
            "fences strict",
            "fences batched",
            "nt->t share",
            "speedup batched",
            "speedup ideal",
        ];
        let mut rows: Vec<Vec<String>> = self
            .workloads
            .iter()
            .map(|r| {
                vec![
                    r.workload.clone(),
                    format_ns(r.strict.ns_per_op),
                    format_ns(r.batched.ns_per_op),
                    format_ns(r.ideal.ns_per_op),
                    format!("{:.2}", r.strict.fences_per_op),
                    format!("{:.2}", r.batched.fences_per_op),
                    format_share(r.nt_t_share),
                    format!("{:.2}x", r.speedup_batched),
                    format!("{:.2}x", r.speedup_ideal),
                ]
            })
            .collect();
        if let Some(a) = &self.workload_average {
            rows.push(vec![
                "average".to_string(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
                format_share(a.nt_t_share),
                format!("{:.2}x", a.speedup_batched),
                format!("{:.2}x", a.speedup_ideal),
            ]);
        }
        (header, rows)
    }

    fn object_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "size",
            "in-place ns/op",
            "out-of-place ns/op",
            "out/in",
            "fences in",
            "fences out",
            "media B in",
            "media B out",
        ];
        let rows = self
            .objects
            .iter()
            .map(|r| {
                vec![
                    size_label(r.bytes as usize),
                    format_ns(r.in_place.ns_per_op),
                    format_ns(r.out_of_place.ns_per_op),
                    format!("{:.2}", r.out_over_in),
                    format!("{:.2}", r.in_place.fences_per_op),
                    format!("{:.2}", r.out_of_place.fences_per_op),
                    format!("{:.0}", r.in_place.bytes_to_media_per_op),
                    format!("{:.0}", r.out_of_place.bytes_to_media_per_op),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The title of a transaction section.
    fn section_title(section: Section) -> String {
        match section {
            Section::TxWords => format!(
                "{}: one transaction snapshots K random words of a {} Ki-word array, then \
                 writes them",
                section.name(),
                WORDS >> 10
            ),
            Section::ThemisWorkloads => format!(
                "{}: seed 004 Table II, one transaction per operation",
                section.name()
            ),
            Section::ObjectUpdate => format!(
                "{}: replace a whole object, {} objects round robin, {} policy",
                section.name(),
                OBJECTS,
                OBJECT_POLICY.name()
            ),
        }
    }

    fn section_cells(&self, section: Section) -> (Vec<&'static str>, Vec<Vec<String>>) {
        match section {
            Section::TxWords => self.tx_cells(),
            Section::ThemisWorkloads => self.workload_cells(),
            Section::ObjectUpdate => self.object_cells(),
        }
    }

    /// A transaction section as a printable block.
    fn tx_section(&self, section: Section) -> Block {
        let (header, rows) = self.section_cells(section);
        Block {
            title: Report::section_title(section),
            header,
            rows,
            text_columns: 1,
            group_gaps: false,
            legend: self.section_legend(section),
        }
    }

    /// What the columns of a transaction section mean.
    fn section_legend(&self, section: Section) -> Vec<String> {
        match section {
            Section::TxWords => vec![
                "fences: per transaction; strict fences each log entry (K + 2), batched once for \
                 all of them (3), ideal never (2, not crash safe)"
                    .to_string(),
                "batched/strict, ideal/strict: time over strict time (below 1: faster)".to_string(),
            ],
            Section::ThemisWorkloads => {
                let mut out: Vec<String> = self
                    .workloads
                    .iter()
                    .map(|w| format!("{}: {}", w.workload, w.description))
                    .collect();
                out.push(format!(
                    "nt->t share: of the fences strict issues, those that only order a log entry \
                     before its data (TxStats::nt_t_fences / fences): the ones Themis removes; \
                     seed 004 Sec. II-D: {} on average over its workloads",
                    format_share(PAPER_NT_T_SHARE)
                ));
                out.push(
                    "speedup: strict ns/tx over the policy's; average: arithmetic means (seed 004 \
                     Fig. 3: ideal 1.67x on average on its machine)"
                        .to_string(),
                );
                out
            }
            Section::ObjectUpdate => vec![
                "in-place: snapshot the object into the log, overwrite it; out-of-place: allocate \
                 a block, write it, swing the 8-byte pointer, free the old block (seed 004's \
                 undo log vs a copy-on-write update)"
                    .to_string(),
                "media B: bytes flushed plus bytes stored non-temporally, per update".to_string(),
            ],
        }
    }

    fn sections(&self) -> Vec<Section> {
        Section::ALL
            .into_iter()
            .filter(|&s| !self.section_cells(s).1.is_empty())
            .collect()
    }

    /// The transaction sections as text: for each, a title, an aligned table and its legend.
    pub fn tx_tables(&self) -> String {
        let mut out = String::new();
        for section in self.sections() {
            out.push_str(&self.tx_section(section).text());
            out.push('\n');
        }
        out
    }

    /// What the CCEH section measured and how (empty without one).
    pub fn cceh_title(&self) -> String {
        let Some(c) = &self.cceh else {
            return String::new();
        };
        format!(
            "cceh: {} uniformly random distinct keys loaded into fresh tables ({} KiB segments of \
             {} buckets), each on its own heap ({} fences) in a fresh {} MiB pool file in the \
             same directory, same granularity; ops/s: median of {} rounds, the four loads of a \
             round interleaved (reversed on odd rounds); p50/p99: every {}th call timed on its \
             own with Instant; fences/op, flushes/op: \
             thread_stats over the phase, splits and directory doublings included",
            c.keys,
            c.buckets_per_segment * 64 / 1024,
            c.buckets_per_segment,
            crate::ccehbench::CCEH_POLICY.name(),
            c.pool_bytes >> 20,
            c.rounds,
            c.latency_every,
        )
    }

    fn cceh_cells(&self) -> (Vec<&'static str>, Vec<Vec<String>>) {
        let header = vec![
            "operation",
            "ops/s",
            "ns/op",
            "p50 ns",
            "p99 ns",
            "fences/op",
            "flushes/op",
        ];
        let rows = self
            .cceh
            .iter()
            .flat_map(|c| &c.rows)
            .map(|r| {
                vec![
                    r.operation.clone(),
                    format_rate(r.ops_per_sec),
                    format_ns(r.ns_per_op),
                    format_opt_ns(r.p50_ns),
                    format_opt_ns(r.p99_ns),
                    format!("{:.3}", r.fences_per_op),
                    format!("{:.3}", r.flushes_per_op),
                ]
            })
            .collect();
        (header, rows)
    }

    /// The footnotes of the CCEH table.
    fn cceh_legend(&self) -> Vec<String> {
        let Some(c) = &self.cceh else {
            return Vec::new();
        };
        vec![
            format!(
                "p50/p99: one call timed at a time; each sample includes the timer (an empty \
                 timed section takes {:.0} ns here), and a lone timed call cannot overlap its \
                 neighbours as untimed calls do, so p50 can exceed ns/op",
                c.timer_ns
            ),
            format!(
                "table: {:.1} bytes per key after the load (the directory and segments the heap \
                 allocated, over the keys), {:.1} on average over its second half (one wave of \
                 splits); global depth {}; {} keys moved along their window to postpone a split",
                c.table_bytes_per_key,
                c.table_bytes_per_key_cycle_mean,
                c.global_depth,
                c.displacements
            ),
            format!(
                "helper thread: insert_batch with the helper on ran at {:.2}x the throughput of \
                 helper off (median of the rounds' on/off ratios, the two loads of a round back \
                 to back; above 1: the helper helps)",
                c.helper_on_over_off
            ),
            format!(
                "inline prefetch: the inserting thread prefetching the same path itself ran at \
                 {:.2}x the throughput of no look-ahead (paired by round the same way)",
                c.inline_over_off
            ),
            format!(
                "to beat, quoted from the issue, not measured by us: \"{}\"",
                c.reference
            ),
        ]
    }

    /// The CCEH section as text: title, aligned table and footnotes (empty without one).
    pub fn cceh_table(&self) -> String {
        self.cceh_section()
            .map(|section| section.text())
            .unwrap_or_default()
    }

    fn cceh_section(&self) -> Option<Block> {
        self.cceh.as_ref()?;
        let (header, rows) = self.cceh_cells();
        Some(Block {
            title: self.cceh_title(),
            header,
            rows,
            text_columns: 1,
            group_gaps: false,
            legend: self.cceh_legend(),
        })
    }

    /// The header, method and tables as markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!("{}\n\n", self.header());
        if !self.rows.is_empty() {
            let (header, rows) = self.cells();
            out.push_str(&format!("{}\n\n", self.method()));
            out.push_str(&markdown_table(&header, &rows, |i| matches!(i, 0 | 1 | 5)));
            out.push('\n');
            for line in self.legend().lines() {
                out.push_str(&format!("- {line}\n"));
            }
        }
        let sections = self.sections();
        if !sections.is_empty() {
            out.push_str(&format!("\n{}\n", self.tx_method()));
        }
        let structures = [
            self.cceh_section(),
            self.fastfair_section(),
            self.datalog_section(),
        ];
        let tx = sections.into_iter().map(|section| self.tx_section(section));
        let pmdk = self.pmdk_sections();
        let ycsb = self.ycsb_sections();
        for section in tx
            .chain(structures.into_iter().flatten())
            .chain(ycsb)
            .chain(pmdk)
        {
            out.push_str(&section.markdown());
        }
        out
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}

/// One titled table of the report with its footnotes, printed as text or as markdown.
struct Block {
    title: String,
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    /// The first this many columns are text (left-aligned); the rest are numbers.
    text_columns: usize,
    /// In the text form, a blank line between rows whose first cell differs.
    group_gaps: bool,
    legend: Vec<String>,
}

impl Block {
    /// Title, blank line, aligned table, then one footnote per line.
    fn text(&self) -> String {
        let mut out = format!("{}\n\n", self.title);
        out.push_str(&align(
            &self.header,
            &self.rows,
            |col| col < self.text_columns,
            self.group_gaps,
        ));
        out.push('\n');
        for line in &self.legend {
            out.push_str(line);
            out.push('\n');
        }
        out
    }

    /// Bold title, markdown table, then the footnotes as a list.
    fn markdown(&self) -> String {
        let mut out = format!("\n**{}**\n\n", self.title);
        out.push_str(&markdown_table(&self.header, &self.rows, |i| {
            i < self.text_columns
        }));
        out.push('\n');
        for line in &self.legend {
            out.push_str(&format!("- {line}\n"));
        }
        out
    }
}

/// An aligned text table: the columns `left` says are text go left, the others right; with
/// `blank_between_groups`, a blank line separates rows whose first cell differs.
fn align(
    header: &[&str],
    rows: &[Vec<String>],
    left: impl Fn(usize) -> bool,
    blank_between_groups: bool,
) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if left(i) {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    let mut out = line(&header);
    out.push('\n');
    let mut previous_group: Option<&String> = None;
    for row in rows {
        if blank_between_groups && previous_group.is_some_and(|g| *g != row[0]) {
            out.push('\n');
        }
        previous_group = Some(&row[0]);
        out.push_str(&line(row));
        out.push('\n');
    }
    out
}

/// A markdown table: header, rule (text columns per `left` aligned left) and rows.
fn markdown_table(header: &[&str], rows: &[Vec<String>], left: impl Fn(usize) -> bool) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    let rule: Vec<&str> = (0..header.len())
        .map(|i| if left(i) { "---" } else { "---:" })
        .collect();
    out.push_str(&format!("| {} |\n", rule.join(" | ")));
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

/// A share as a percentage with one decimal.
fn format_share(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Nanoseconds with three significant digits or more.
fn format_ns(ns: f64) -> String {
    if ns >= 100.0 {
        format!("{ns:.0}")
    } else if ns >= 10.0 {
        format!("{ns:.1}")
    } else {
        format!("{ns:.2}")
    }
}

/// [`format_ns`], or `-` for a figure not measured.
fn format_opt_ns(ns: Option<f64>) -> String {
    ns.map_or_else(|| "-".to_string(), format_ns)
}

/// A rate with a k / M / G suffix.
fn format_rate(per_sec: f64) -> String {
    if per_sec >= 1e9 {
        format!("{:.2} G", per_sec / 1e9)
    } else if per_sec >= 1e6 {
        format!("{:.2} M", per_sec / 1e6)
    } else if per_sec >= 1e3 {
        format!("{:.1} k", per_sec / 1e3)
    } else {
        format!("{per_sec:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::{align, format_ns, format_rate, format_share};

    #[test]
    fn numbers_are_formatted_with_units() {
        assert_eq!(format_ns(1234.4), "1234");
        assert_eq!(format_ns(12.34), "12.3");
        assert_eq!(format_ns(1.234), "1.23");
        assert_eq!(format_rate(2.5e6), "2.50 M");
        assert_eq!(format_rate(12_345.0), "12.3 k");
        assert_eq!(format_rate(3e9), "3.00 G");
        assert_eq!(format_rate(12.0), "12");
        assert_eq!(format_share(0.917), "91.7%");
    }

    #[test]
    fn tables_align_text_left_and_numbers_right() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["a".to_string(), "100".to_string()],
            vec!["bb".to_string(), "2".to_string()],
        ];
        assert_eq!(
            align(&["name", "n"], &rows, |c| c == 0, true),
            "name    n\na       1\na     100\n\nbb      2\n"
        );
        assert_eq!(
            align(&["name", "n"], &rows, |c| c == 0, false),
            "name    n\na       1\na     100\nbb      2\n"
        );
    }
}
