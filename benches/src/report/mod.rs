//! The results of a run, as text tables, JSON and markdown.
//!
//! [`Report`] holds the results of every section that ran, and serializes them as JSON. Each
//! section prints itself through the one trait [`ReportSection`], as one or more [`Block`]s
//! (a title, a table and its footnotes) behind an optional preface, in this order: the
//! primitives ([`Row`], one per variant), the transaction sections of [`crate::txbench`]
//! ([`TxRow`], [`WorkloadRow`] with an average, [`ObjectRow`]), CCEH, FAST&FAIR, the datalog,
//! the store path against the raw structures, byte keys through the store beside the `u64`
//! path ([`ByteKeyResults`]), the YCSB tables (one per structure) and, with the `pmdk` feature, the PMDK comparison
//! ([`PmdkResults`]). Adding a section takes a file with a type implementing [`ReportSection`],
//! a field of [`Report`] for its results, and an entry in [`SECTIONS`].

mod block;
mod bytekeys;
mod cceh;
mod datalog;
mod fastfair;
mod pmdk;
mod primitives;
mod store;
mod transactions;
mod ycsb;

use serde::Serialize;

use crate::bytekeys::ByteKeyResults;
use crate::ccehbench::CcehResults;
use crate::datalogbench::DatalogResults;
use crate::fastfairbench::FastFairResults;
use crate::machine::Machine;
use crate::measure::{Measurement, Plan};
use crate::storebench::StorePathResults;
use crate::txbench::threads::ThreadResults;
use crate::ycsb::YcsbResults;

pub use block::{format_rate, Block};
pub use pmdk::{PmdkCopyRow, PmdkResults, PmdkTxRow, SideTiming, PMDK_HINT};
pub use primitives::Row;
pub use transactions::{
    paper_figure, Cell, ObjectRow, TxMeasurement, TxRow, WorkloadAverage, WorkloadRow,
    PAPER_NT_T_SHARE, PAPER_THEMIS_SPEEDUP,
};

/// One section of the report: its tables, printed as text or markdown. A section that was not
/// measured has no blocks and prints nothing.
pub trait ReportSection {
    /// A paragraph before the section's tables, saying how they were all measured.
    fn preface(&self, _report: &Report) -> Option<String> {
        None
    }

    /// The section's tables, in print order (none when it was not measured).
    fn blocks(&self, report: &Report) -> Vec<Block>;

    /// The preface and a blank line, then every table followed by a blank line.
    fn text(&self, report: &Report) -> String {
        let blocks = self.blocks(report);
        if blocks.is_empty() {
            return String::new();
        }
        let mut out = match self.preface(report) {
            Some(preface) => format!("{preface}\n\n"),
            None => String::new(),
        };
        for block in &blocks {
            out.push_str(&block.text());
            out.push('\n');
        }
        out
    }

    /// The preface as a paragraph, then every table with its footnotes as a list.
    fn markdown(&self, report: &Report) -> String {
        let blocks = self.blocks(report);
        if blocks.is_empty() {
            return String::new();
        }
        let mut out = match self.preface(report) {
            Some(preface) => format!("\n{preface}\n"),
            None => String::new(),
        };
        for block in &blocks {
            out.push_str(&block.markdown());
        }
        out
    }
}

/// Every section, in print order.
pub const SECTIONS: [&dyn ReportSection; 9] = [
    &primitives::Primitives,
    &transactions::Transactions,
    &cceh::Cceh,
    &fastfair::FastFair,
    &datalog::Datalog,
    &store::StorePath,
    &bytekeys::ByteKeys,
    &ycsb::Ycsb,
    &pmdk::Pmdk,
];

/// Where and how the run was made.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    /// The machine.
    pub machine: Machine,
    /// The flush instruction chosen by `Isa::detected()`.
    pub flush: String,
    /// The stores pools stream with (`isa::nt_store_words`: movnti).
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

/// A whole run. The field order is the JSON layout.
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
    /// Every Themis workload with one and two threads (`None` if not measured).
    pub themis_threads: Option<ThreadResults>,
    /// The CCEH section (`None` if it was not measured).
    pub cceh: Option<CcehResults>,
    /// The datalog section (`None` if it was not measured).
    pub datalog: Option<DatalogResults>,
    /// The FAST&FAIR section (`None` if it was not measured).
    pub fastfair: Option<FastFairResults>,
    /// CCEH and FAST&FAIR through the store against the raw structures (`None` if not
    /// measured).
    pub store_path: Option<StorePathResults>,
    /// Byte keys through the store beside the `u64` path (`None` if not measured).
    pub byte_keys: Option<ByteKeyResults>,
    /// The PMDK comparison (`None` without the `pmdk` feature).
    pub pmdk: Option<PmdkResults>,
    /// The YCSB workloads (`None` if not run).
    pub ycsb: Option<YcsbResults>,
}

impl Report {
    /// The report of the primitives' `measurements` and the transaction sections' `tx` (rows
    /// whose variants were not all measured are left out); the other sections are `None` until
    /// the caller sets them.
    pub fn new(setup: Setup, measurements: &[Measurement], tx: &[TxMeasurement]) -> Report {
        let tables = transactions::TxTables::new(tx);
        Report {
            setup,
            rows: primitives::rows(measurements),
            transactions: tables.transactions,
            workloads: tables.workloads,
            workload_average: tables.workload_average,
            objects: tables.objects,
            themis_threads: None,
            cceh: None,
            datalog: None,
            fastfair: None,
            store_path: None,
            byte_keys: None,
            pmdk: None,
            ycsb: None,
        }
    }

    /// The header line: machine, instructions, pool and what its granularity means.
    pub fn header(&self) -> String {
        let s = &self.setup;
        format!(
            "host {} | CPU {} | {} cores | flush {} (Isa::detected), streaming {} | pool {} | {}",
            s.machine.hostname,
            s.machine.cpu_model,
            s.machine.cores,
            s.flush,
            s.copy,
            s.pool_path,
            s.granularity_note
        )
    }

    /// The header line, then every section measured, as text.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n", self.header());
        for section in SECTIONS {
            out.push_str(&section.text(self));
        }
        out
    }

    /// The header, then every section measured, as markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!("{}\n\n", self.header());
        for section in SECTIONS {
            out.push_str(&section.markdown(self));
        }
        out
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(self)
    }
}
