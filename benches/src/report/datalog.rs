//! The datalog section ([`crate::datalogbench`]): one row per operation, write path and size.

use super::block::{timing_cells, Block, TIMING_HEADER};
use super::{Report, ReportSection};
use crate::datalogbench::{DatalogResults, DATALOG_POLICY};

/// The datalog table.
pub(super) struct Datalog;

/// What the section measured and how.
fn title(d: &DatalogResults) -> String {
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
        DATALOG_POLICY.name(),
        d.pool_bytes >> 20,
        d.rounds,
        d.latency_every,
    )
}

fn rows(d: &DatalogResults) -> Vec<Vec<String>> {
    d.rows
        .iter()
        .map(|r| {
            let mut cells = vec![r.operation.clone(), r.mode.clone(), r.size.to_string()];
            let (p50, p99) = (Some(r.p50_ns), Some(r.p99_ns));
            cells.extend(timing_cells(r.ops_per_sec, r.ns_per_op, p50, p99));
            cells.extend([
                format!("{:.2}", r.fences_per_op),
                format!("{:.2}", r.flushes_per_op),
                format!("{:.0}", r.bytes_stored_per_op),
                format!("{:.0}", r.bytes_to_media_per_op),
                r.write_amplification
                    .map_or_else(|| "-".to_string(), |a| format!("{a:.2}")),
            ]);
            cells
        })
        .collect()
}

/// The footnotes of the table.
fn legend(d: &DatalogResults) -> Vec<String> {
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
        "the paper, quoted, not measured by this run: \"{}\"; this run is on DRAM, not Optane",
        d.reference
    ));
    out
}

/// The section's one table.
fn block(d: &DatalogResults) -> Block {
    Block {
        title: Some(title(d)),
        header: [
            &["operation", "path", "bytes"][..],
            &TIMING_HEADER,
            &[
                "fences/op",
                "flushes/op",
                "stored B/op",
                "to media B/op",
                "amplification",
            ],
        ]
        .concat(),
        rows: rows(d),
        text_columns: &[0, 1],
        group_gaps: false,
        legend: legend(d),
    }
}

impl ReportSection for Datalog {
    fn blocks(&self, report: &Report) -> Vec<Block> {
        report.datalog.iter().map(block).collect()
    }
}
