//! The YCSB section ([`crate::ycsb`]): one table per structure, one row per variant, workload,
//! key distribution and thread count.

use super::block::{format_opt_ns, format_rate, Block};
use super::{Report, ReportSection};
use crate::ycsb::{YcsbResults, YcsbRow};

/// The YCSB tables.
pub(super) struct Ycsb;

fn cells(r: &YcsbRow) -> Vec<String> {
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
}

/// The footnotes of the table of `structure`.
fn legend(y: &YcsbResults, structure: &str) -> Vec<String> {
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
         16 KiB XPBuffer model; EWR = media B / XPLine B, the effective write ratio of \
         Optane guide (FAST'20), Sec. 5.1 (below 1: write amplification of 1/EWR)"
            .to_string(),
    );
    for skip in y.skipped.iter().filter(|k| k.structure == structure) {
        legend.push(format!(
            "{} {}: workload {} skipped: {}",
            skip.structure, skip.variant, skip.workload, skip.reason
        ));
    }
    legend
}

impl ReportSection for Ycsb {
    fn blocks(&self, report: &Report) -> Vec<Block> {
        let Some(y) = &report.ycsb else {
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
            .map(|structure| Block {
                title: Some(format!("YCSB: {structure}")),
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
                rows: y
                    .rows
                    .iter()
                    .filter(|r| r.structure == structure)
                    .map(cells)
                    .collect(),
                text_columns: &[0, 1, 2],
                group_gaps: true,
                legend: legend(y, structure),
            })
            .collect()
    }
}
