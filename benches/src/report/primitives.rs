//! The primitives section: one row per variant of [`crate::primitives`], with its baseline.

use serde::Serialize;

use super::block::{format_ns, format_rate, Block};
use super::{Report, ReportSection};
use crate::measure::Measurement;
use crate::primitives::{Group, Variant};

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

/// One row per measurement, in order, each with its baseline's ratio when that was measured.
pub(super) fn rows(measurements: &[Measurement]) -> Vec<Row> {
    let find = |v: Variant| measurements.iter().find(|m| m.variant == v);
    measurements
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
        .collect()
}

/// The primitives table, introduced by how it was measured.
pub(super) struct Primitives;

impl Primitives {
    /// How the numbers were taken.
    fn method(report: &Report) -> String {
        format!(
            "ns/op: median of {} batches of ~{} ms per variant, the variants of a group \
             interleaved; ratio: ns/op over the baseline's; per-op counts from the pool's \
             thread_stats (- = bypasses the pool)",
            report.setup.reps, report.setup.batch_ms
        )
    }

    /// One line per group measured saying what its operations are.
    fn legend(report: &Report) -> Vec<String> {
        Group::ALL
            .into_iter()
            .filter(|group| report.rows.iter().any(|r| r.group == group.name()))
            .map(|group| format!("{}: {}", group.name(), group.description()))
            .collect()
    }
}

impl ReportSection for Primitives {
    fn preface(&self, report: &Report) -> Option<String> {
        Some(Primitives::method(report))
    }

    fn blocks(&self, report: &Report) -> Vec<Block> {
        if report.rows.is_empty() {
            return Vec::new();
        }
        let opt = |x: Option<f64>, decimals: usize| match x {
            Some(v) => format!("{v:.decimals$}"),
            None => "-".to_string(),
        };
        let rows = report
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
        vec![Block {
            title: None,
            header: vec![
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
            ],
            rows,
            text_columns: &[0, 1, 5],
            group_gaps: true,
            legend: Primitives::legend(report),
        }]
    }

    /// First in the document, where the header's blank line already sets it apart.
    fn markdown(&self, report: &Report) -> String {
        self.blocks(report)
            .iter()
            .map(|block| format!("{}\n{}", Primitives::method(report), block.markdown()))
            .collect()
    }
}
