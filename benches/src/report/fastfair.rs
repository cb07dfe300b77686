//! The FAST&FAIR section ([`crate::fastfairbench`]): one row per shift policy and operation.

use super::block::{timing_cells, Block, TIMING_HEADER};
use super::{Report, ReportSection};
use crate::fastfairbench::{FastFairResults, FASTFAIR_HEAP_POLICY, SCAN_KEYS, TOUCH_BYTES_PER_KEY};

/// The FAST&FAIR table.
pub(super) struct FastFair;

/// What the section measured and how.
fn title(f: &FastFairResults) -> String {
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
        FASTFAIR_HEAP_POLICY.name(),
        f.pool_bytes >> 20,
        f.scans,
        SCAN_KEYS,
        f.rounds,
        f.latency_every,
    )
}

fn rows(f: &FastFairResults) -> Vec<Vec<String>> {
    f.rows
        .iter()
        .map(|r| {
            let mut cells = vec![r.policy.clone(), r.operation.clone()];
            cells.extend(timing_cells(r.ops_per_sec, r.ns_per_op, r.p50_ns, r.p99_ns));
            cells.extend([
                format!("{:.2}", r.fences_per_op),
                format!("{:.2}", r.flushes_per_op),
                format!("{:.0}", r.media_bytes_per_op),
            ]);
            cells
        })
        .collect()
}

/// The footnotes of the table.
fn legend(f: &FastFairResults) -> Vec<String> {
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
            "memory: the FAST tree's pool file holds {:.1} MiB resident after the load for \
             {:.1} MiB the heap allocated ({:.2}x; its {} MiB are sparse, {} bytes per key \
             written before the load)",
            f.pool_resident_bytes as f64 / (1 << 20) as f64,
            f.tree_bytes as f64 / (1 << 20) as f64,
            f.pool_resident_bytes as f64 / f.tree_bytes.max(1) as f64,
            f.pool_bytes >> 20,
            TOUCH_BYTES_PER_KEY,
        ),
        format!(
            "insert throughput over per-shift (median of the rounds' ratios): redo-logged \
             {:.2}x, FAST {:.2}x",
            f.redo_over_per_shift, f.fast_over_per_shift
        ),
        format!(
            "the redo-shift claim (Optane buffering (EuroSys'22) C8, Sec. 4.2), quoted: \"{}\"",
            f.claim
        ),
        format!(
            "to beat, quoted from earlier side-by-side measurements of the authors' C++ code (on \
             the machine named), not measured by this run: \"{}\"",
            f.reference
        ),
    ]
}

/// The section's one table.
fn block(f: &FastFairResults) -> Block {
    Block {
        title: Some(title(f)),
        header: [
            &["policy", "operation"][..],
            &TIMING_HEADER,
            &["fences/op", "flushes/op", "media B/op"],
        ]
        .concat(),
        rows: rows(f),
        text_columns: &[0, 1],
        group_gaps: true,
        legend: legend(f),
    }
}

impl ReportSection for FastFair {
    fn blocks(&self, report: &Report) -> Vec<Block> {
        report.fastfair.iter().map(block).collect()
    }
}
