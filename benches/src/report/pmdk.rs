//! The PMDK comparison ([`PmdkResults`], measured by `crate::pmdk` with the `pmdk` feature):
//! copies against libpmem, transactions against libpmemobj. The types are here, not behind the
//! feature, so a report without the section has the same shape.

use serde::Serialize;

use super::block::{format_ns, Block};
use super::transactions::Cell;
use super::{Report, ReportSection};
use crate::measure::Timing;
use crate::primitives::{size_label, RING_LEN};
use crate::txbench::{TX_POOL_SIZE, WORDS};

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
    /// The stores our pools stream with (`isa::nt_store_words`: movnti).
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

/// The PMDK copy and transaction tables.
pub(super) struct Pmdk;

/// How PMDK and ours were set up, said in the copy table's title.
fn setup(p: &PmdkResults) -> String {
    let force = match &p.pmem_is_pmem_force_env {
        None => "PMEM_IS_PMEM_FORCE=1 set by pmem-bench before libpmem's first pmem_is_pmem \
                 call, when libpmem reads it"
            .to_string(),
        Some(v) => format!("PMEM_IS_PMEM_FORCE={v} from the environment"),
    };
    format!(
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
    )
}

fn copy_block(p: &PmdkResults) -> Block {
    let rows = p
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
    Block {
        title: Some(format!(
            "pmdk_copy: {}-byte ring of slots written in turn; PMDK: pmem_memcpy_persist into \
             a pmem_map_file mapping (is_pmem {}; it flushes, never msyncs, either way); \
             ours: the pool's nt_write + sfence (what the undo log uses for its entries) and \
             write + persist ({} + sfence). {}",
            RING_LEN,
            p.copy_is_pmem,
            p.our_flush,
            setup(p),
        )),
        header: vec![
            "size",
            "pmdk ns",
            "ours nt ns",
            "ours persist ns",
            "nt/pmdk",
            "persist/pmdk",
        ],
        rows,
        text_columns: &[0],
        group_gaps: false,
        legend: vec![
            "nt/pmdk, persist/pmdk: our time over pmem_memcpy_persist's (below 1: ours is \
             faster); nt: nt_write + sfence; persist: write + persist (temporal stores, then \
             the flush named above and sfence)"
                .to_string(),
        ],
    }
}

fn tx_block(p: &PmdkResults) -> Block {
    let is_pmem = match p.obj_is_pmem {
        true => "true",
        false => "FALSE: libpmem falls back to msync, not comparable",
    };
    let rows =
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
    Block {
        title: Some(format!(
            "pmdk_tx: one transaction snapshots K random words of a {} Ki-word array (one \
             per K equal slices, the same words on both sides), then writes them; PMDK: \
             libpmemobj (is_pmem {}), pmemobj_tx_add_range_direct of each word then the \
             stores, the TX_BEGIN/TX_END stages through the function API without setjmp; \
             ours: the undo-log Heap (HeapConfig::default()) under the strict and batched \
             (default) policies, each side in its own fresh {} MiB pool file; set-up and \
             timing as for pmdk_copy",
            WORDS >> 10,
            is_pmem,
            TX_POOL_SIZE >> 20,
        )),
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
        rows,
        text_columns: &[0],
        group_gaps: false,
        legend: vec![
            "strict/pmdk, batched/pmdk: our time over libpmemobj's (below 1: ours is \
             faster); fences: ours per transaction (TxStats), libpmemobj's are not counted"
                .to_string(),
        ],
    }
}

impl ReportSection for Pmdk {
    fn blocks(&self, report: &Report) -> Vec<Block> {
        match &report.pmdk {
            Some(p) => vec![copy_block(p), tx_block(p)],
            None => Vec::new(),
        }
    }

    /// Printed last: the tables one blank line apart, none after them.
    fn text(&self, report: &Report) -> String {
        let texts: Vec<String> = self.blocks(report).iter().map(Block::text).collect();
        texts.join("\n")
    }
}
