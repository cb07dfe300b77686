//! The CCEH section ([`crate::ccehbench`]): one row per table operation.

use super::block::{timing_cells, Block, TIMING_HEADER};
use super::{Report, ReportSection};
use crate::ccehbench::{CcehResults, CCEH_POLICY, TOUCH_BYTES_PER_KEY};

/// The CCEH table.
pub(super) struct Cceh;

/// What the section measured and how.
fn title(c: &CcehResults) -> String {
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
        CCEH_POLICY.name(),
        c.pool_bytes >> 20,
        c.rounds,
        c.latency_every,
    )
}

fn rows(c: &CcehResults) -> Vec<Vec<String>> {
    c.rows
        .iter()
        .map(|r| {
            let mut cells = vec![r.operation.clone()];
            cells.extend(timing_cells(r.ops_per_sec, r.ns_per_op, r.p50_ns, r.p99_ns));
            cells.extend([
                format!("{:.3}", r.fences_per_op),
                format!("{:.3}", r.flushes_per_op),
            ]);
            cells
        })
        .collect()
}

/// The footnotes of the table.
fn legend(c: &CcehResults) -> Vec<String> {
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
            "memory: the table's pool file holds {:.1} MiB resident after the load for {:.1} \
             MiB the heap allocated ({:.2}x; its {} MiB are sparse, {} bytes per key written \
             before the load)",
            c.pool_resident_bytes as f64 / (1 << 20) as f64,
            c.table_bytes as f64 / (1 << 20) as f64,
            c.pool_resident_bytes as f64 / c.table_bytes.max(1) as f64,
            c.pool_bytes >> 20,
            TOUCH_BYTES_PER_KEY,
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
            "to beat, quoted from earlier side-by-side measurements of the authors' C++ code and \
             PMDK (on the machine named), not measured by this run: \"{}\"",
            c.reference
        ),
    ]
}

/// The section's one table.
fn block(c: &CcehResults) -> Block {
    Block {
        title: Some(title(c)),
        header: [
            &["operation"][..],
            &TIMING_HEADER,
            &["fences/op", "flushes/op"],
        ]
        .concat(),
        rows: rows(c),
        text_columns: &[0],
        group_gaps: false,
        legend: legend(c),
    }
}

impl ReportSection for Cceh {
    fn blocks(&self, report: &Report) -> Vec<Block> {
        report.cceh.iter().map(block).collect()
    }
}
