//! The transaction sections of [`crate::txbench`]: each row puts the variants compared side by
//! side in one line: K words per transaction ([`TxRow`]), the Themis workloads
//! ([`WorkloadRow`], with an average row, and every workload with one and two threads from
//! [`crate::txbench::threads`]) and object updates ([`ObjectRow`]).

use serde::Serialize;

use super::block::{format_ns, format_rate, format_share, Block};
use super::{Report, ReportSection};
use crate::measure::Timing;
use crate::primitives::size_label;
use crate::txbench::threads::{ThreadResults, THREAD_COUNTS};
use crate::txbench::{
    Section, TxVariant, Workload, OBJECTS, OBJECT_POLICY, OBJECT_SIZES, TX_POOL_SIZE, TX_WORDS,
    WORDS,
};
use pmem_undo_log::FencePolicy;

/// The share of fences Themis removes, on average over its workloads (Themis, Sec. II-D).
pub const PAPER_NT_T_SHARE: f64 = 0.917;

/// The paper's figure for a workload: Themis's speedup over the x86 baseline where the text
/// of Themis, Sec. V-B states it (Fig. 9 plots every workload; the text quotes PC's 87%, the
/// 77.4-87% range of SPS, PC and LL and the 12.8-20.6% range of RB, TATP and TPCC). The paper
/// gives no per-workload share of removed fences, only the 91.7% average.
pub fn paper_figure(workload: Workload) -> &'static str {
    match workload {
        Workload::Pc => "Fig. 9: 1.87x",
        Workload::Sps | Workload::List => "Fig. 9: 1.77-1.87x",
        Workload::Rb | Workload::Tatp | Workload::Tpcc => "Fig. 9: 1.13-1.21x",
        Workload::Hashmap | Workload::Queue | Workload::CTree => "Fig. 9: not in the text",
    }
}

/// Themis's mean speedup over the x86 baseline on its workloads (Themis, Sec. V-B).
pub const PAPER_THEMIS_SPEEDUP: f64 = 1.458;

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
    /// The paper's figure for the workload ([`paper_figure`]).
    pub paper: String,
}

/// Means over the workloads.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadAverage {
    /// Mean nt -> t share (Themis, Sec. II-D: 91.7%).
    pub nt_t_share: f64,
    /// Mean batched speedup.
    pub speedup_batched: f64,
    /// Mean ideal speedup (Themis, Fig. 3: 1.67x on its real-hardware runs).
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

/// The rows of the three transaction sections, as [`Report`] keeps them.
pub(super) struct TxTables {
    pub(super) transactions: Vec<TxRow>,
    pub(super) workloads: Vec<WorkloadRow>,
    pub(super) workload_average: Option<WorkloadAverage>,
    pub(super) objects: Vec<ObjectRow>,
}

impl TxTables {
    /// The rows of `tx`; a row whose variants were not all measured is left out.
    pub(super) fn new(tx: &[TxMeasurement]) -> TxTables {
        let cell = |v: TxVariant| tx.iter().find(|m| m.variant == v).map(|m| m.cell());
        let policies = |make: &dyn Fn(FencePolicy) -> TxVariant| {
            Some((
                cell(make(FencePolicy::Strict))?,
                cell(make(FencePolicy::Batched))?,
                cell(make(FencePolicy::Ideal))?,
            ))
        };
        let transactions = TX_WORDS
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
                    paper: paper_figure(workload).to_string(),
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
        TxTables {
            transactions,
            workloads,
            workload_average,
            objects,
        }
    }
}

/// The three transaction tables, introduced by how they were measured.
pub(super) struct Transactions;

impl Transactions {
    /// The title of a transaction table.
    fn title(section: Section) -> String {
        match section {
            Section::TxWords => format!(
                "{}: one transaction snapshots K random words of a {} Ki-word array, then \
                 writes them",
                section.name(),
                WORDS >> 10
            ),
            Section::ThemisWorkloads => format!(
                "{}: Themis, Table II, one transaction per operation",
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

    /// The header and rows of a transaction table.
    fn cells(report: &Report, section: Section) -> (Vec<&'static str>, Vec<Vec<String>>) {
        match section {
            Section::TxWords => words_cells(&report.transactions),
            Section::ThemisWorkloads => {
                workload_cells(&report.workloads, report.workload_average.as_ref())
            }
            Section::ObjectUpdate => object_cells(&report.objects),
        }
    }

    /// What the columns of a transaction table mean.
    fn legend(report: &Report, section: Section) -> Vec<String> {
        match section {
            Section::TxWords => vec![
                "fences: per transaction; strict fences each log entry (K + 2), batched once for \
                 all of them (3), ideal never (2, not crash safe)"
                    .to_string(),
                "batched/strict, ideal/strict: time over strict time (below 1: faster)".to_string(),
            ],
            Section::ThemisWorkloads => {
                let mut out: Vec<String> = report
                    .workloads
                    .iter()
                    .map(|w| format!("{}: {}", w.workload, w.description))
                    .collect();
                out.push(format!(
                    "nt->t share: of the fences strict issues, those that only order a log entry \
                     before its data (TxStats::nt_t_fences / fences): the ones Themis removes; \
                     Themis, Sec. II-D: {} on average over its workloads",
                    format_share(PAPER_NT_T_SHARE)
                ));
                out.push(
                    "speedup: strict ns/tx over the policy's; average: arithmetic means (Themis, \
                     Fig. 3: ideal 1.67x on average on its machine)"
                        .to_string(),
                );
                out.push(
                    "paper (Themis): Themis hardware over the x86 baseline in gem5 (Sec. V-B, \
                     Fig. 9), comparable to our ideal column (Themis is near ideal there); Table \
                     II lists the workloads without figures, and the paper gives the share of \
                     removed fences only as the 91.7% average"
                        .to_string(),
                );
                out
            }
            Section::ObjectUpdate => vec![
                "in-place: snapshot the object into the log, overwrite it; out-of-place: allocate \
                 a block, write it, swing the 8-byte pointer, free the old block (Themis's \
                 undo log vs a copy-on-write update)"
                    .to_string(),
                "media B: bytes flushed plus bytes stored non-temporally, per update".to_string(),
            ],
        }
    }
}

impl ReportSection for Transactions {
    fn preface(&self, report: &Report) -> Option<String> {
        Some(format!(
            "Transactions: each variant on its own heap (HeapConfig::default(): 8 lanes of 64 KiB \
             logs, 256 KiB chunks) in a fresh {} MiB pool file in the same directory, same \
             granularity; ns/tx: median of {} batches of ~{} ms, the variants of one K, one \
             workload or one size interleaved; fences/tx and nt->t from the heap's TxStats, media \
             bytes (flushed + nt) from thread_stats, over the timed batches",
            TX_POOL_SIZE >> 20,
            report.setup.reps,
            report.setup.batch_ms
        ))
    }

    fn blocks(&self, report: &Report) -> Vec<Block> {
        let mut blocks: Vec<Block> = Section::ALL
            .into_iter()
            .filter_map(|section| {
                let (header, rows) = Transactions::cells(report, section);
                (!rows.is_empty()).then(|| Block {
                    title: Some(Transactions::title(section)),
                    header,
                    rows,
                    text_columns: &[0],
                    group_gaps: false,
                    legend: Transactions::legend(report, section),
                })
            })
            .collect();
        // The thread runs follow the one-thread workload table.
        if let Some(threads) = &report.themis_threads {
            let at = blocks
                .iter()
                .position(|b| {
                    b.title
                        .as_deref()
                        .is_some_and(|t| t.starts_with(Section::ObjectUpdate.name()))
                })
                .unwrap_or(blocks.len());
            blocks.insert(at, thread_block(threads));
        }
        blocks
    }
}

fn words_cells(rows: &[TxRow]) -> (Vec<&'static str>, Vec<Vec<String>>) {
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
    let rows = rows
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

fn workload_cells(
    workloads: &[WorkloadRow],
    average: Option<&WorkloadAverage>,
) -> (Vec<&'static str>, Vec<Vec<String>>) {
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
        "paper (Themis)",
    ];
    let mut rows: Vec<Vec<String>> = workloads
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
                r.paper.clone(),
            ]
        })
        .collect();
    if let Some(a) = average {
        let mut row = vec![String::new(); 6];
        row[0] = "average".to_string();
        row.extend([
            format_share(a.nt_t_share),
            format!("{:.2}x", a.speedup_batched),
            format!("{:.2}x", a.speedup_ideal),
            format!(
                "share {}, Sec. V-B: {:.2}x",
                format_share(PAPER_NT_T_SHARE),
                PAPER_THEMIS_SPEEDUP
            ),
        ]);
        rows.push(row);
    }
    (header, rows)
}

fn object_cells(rows: &[ObjectRow]) -> (Vec<&'static str>, Vec<Vec<String>>) {
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
    let rows = rows
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

/// The one-thread and two-thread runs of every workload as one table.
fn thread_block(results: &ThreadResults) -> Block {
    let header = vec![
        "workload",
        "strict 1T ops/s",
        "strict 2T ops/s",
        "strict 2T/1T",
        "batched 1T ops/s",
        "batched 2T ops/s",
        "batched 2T/1T",
        "nt->t share 1T",
        "nt->t share 2T",
    ];
    let [one, two] = THREAD_COUNTS;
    let rows = Workload::ALL
        .iter()
        .filter_map(|&w| {
            let strict1 = results.run(w, FencePolicy::Strict, one)?;
            let strict2 = results.run(w, FencePolicy::Strict, two)?;
            let batched1 = results.run(w, FencePolicy::Batched, one)?;
            let batched2 = results.run(w, FencePolicy::Batched, two)?;
            Some(vec![
                w.name().to_string(),
                format_rate(strict1.ops_per_sec),
                format_rate(strict2.ops_per_sec),
                format!("{:.2}", strict2.ops_per_sec / strict1.ops_per_sec),
                format_rate(batched1.ops_per_sec),
                format_rate(batched2.ops_per_sec),
                format!("{:.2}", batched2.ops_per_sec / batched1.ops_per_sec),
                format_share(strict1.nt_t_share),
                format_share(strict2.nt_t_share),
            ])
        })
        .collect();
    Block {
        title: Some(format!(
            "{}: every workload with {one} and {two} threads, each thread on its own instance in \
             one shared heap",
            Section::ThemisWorkloads.name()
        )),
        header,
        rows,
        text_columns: &[0],
        group_gaps: false,
        legend: vec![
            "ops/s: transactions per second over all threads (median of the rounds; the \
             one-thread and two-thread runs alternate on one heap with two instances); 2T/1T: \
             their ratio (2 would be perfect scaling)"
                .to_string(),
            "nt->t share: of the fences the strict policy issues, those Themis removes, over \
             all threads' transactions"
                .to_string(),
            format!(
                "cores the run had: a CPU-only loop scaled {:.2}x from 1 to 2 threads before the \
                 workloads and {:.2}x after (2 = two free cores; on a shared machine this bounds \
                 every 2T/1T above)",
                results.control_before.scaling(),
                results.control_after.scaling()
            ),
        ],
    }
}
