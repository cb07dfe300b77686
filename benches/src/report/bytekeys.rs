//! The byte-key section ([`crate::bytekeys`]): one row per map and workload, then the
//! speed targets against this run.

use super::block::{format_opt_ns, format_rate, Block};
use super::{Report, ReportSection};
use crate::bytekeys::{ByteKeyResults, ByteKeyRow, TargetCheck, SCAN_RECORDS};

/// The byte-key tables.
pub(super) struct ByteKeys;

fn title(s: &ByteKeyResults) -> String {
    format!(
        "byte keys through the store: one thread, each map a fresh Store (Store::create in its \
         own pool file, batched fences, default configurations: CCEH, FAST&FAIR with FAST \
         shifts) beside the u64 -> u64 map of the same kind in the same run; {} records \
         loaded (one insert each, keys in a random order), then A, B, C with {} operations \
         each and E with {} scans, uniform keys",
        s.records, s.ops, s.scans
    )
}

fn row_cells(r: &ByteKeyRow) -> Vec<String> {
    vec![
        r.map.clone(),
        if r.keys == "u64" {
            "u64 -> u64".to_string()
        } else {
            format!("{} -> {} B", r.keys, r.value_bytes)
        },
        format!("{} ({})", r.workload, r.operation),
        r.ops.to_string(),
        format_rate(r.ops_per_sec),
        format_opt_ns(r.p50_ns),
        format_opt_ns(r.p99_ns),
        format_opt_ns(r.p999_ns),
        format!("{:.2}", r.fences_per_op),
        r.median_call_fences
            .map_or_else(|| "-".to_string(), |f| format!("{f:.0}")),
        format!("{:.2}", r.flushes_per_op),
        format!("{:.0}", r.media_bytes_per_op),
        r.ratio_to_u64
            .map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
    ]
}

fn legend(s: &ByteKeyResults) -> Vec<String> {
    vec![
        format!(
            "p50/p99/p99.9: every {}th call timed on its own (Instant, about {:.0} ns each \
             included); median fences/call: the median of those calls' fences (for the load, \
             an insert without a split); fences, flushes and bytes (flushed lines + \
             non-temporal bytes sent to the media) per operation: the thread's counters over \
             the whole run",
            s.latency_every, s.timer_ns
        ),
        format!(
            "x u64: ops/s over the u64 -> u64 map's ops/s, same map kind and workload; E: \
             range(key..) taking {SCAN_RECORDS} pairs from a uniformly chosen loaded key (the \
             target's 100-record scans; YCSB's E draws 1..100 with 5% inserts); user:%011d \
             keys share their first 8 bytes, so the ordered map of them is layered"
        ),
        format!(
            "section wall time {:.1} s (key generation and page touching included)",
            s.total_seconds
        ),
    ]
}

fn rows_block(s: &ByteKeyResults) -> Block {
    Block {
        title: Some(title(s)),
        header: vec![
            "map",
            "keys -> values",
            "workload",
            "ops",
            "ops/s",
            "p50 ns",
            "p99 ns",
            "p99.9 ns",
            "fences/op",
            "median fences/call",
            "flushes/op",
            "bytes/op",
            "x u64",
        ],
        rows: s.rows.iter().map(row_cells).collect(),
        text_columns: &[0, 1, 2],
        group_gaps: true,
        legend: legend(s),
    }
}

fn target_cells(t: &TargetCheck) -> Vec<String> {
    let figure = |x: f64| {
        if t.at_most {
            format!("{x:.0}")
        } else {
            format_rate(x)
        }
    };
    vec![
        t.target.clone(),
        t.row.clone(),
        figure(t.measured),
        format!(
            "{} {}",
            if t.at_most { "<=" } else { ">=" },
            figure(t.bound)
        ),
        if t.met { "yes" } else { "NO" }.to_string(),
    ]
}

fn targets_block(s: &ByteKeyResults) -> Block {
    let missed = s.targets.iter().filter(|t| !t.met).count();
    Block {
        title: Some(format!(
            "byte-key speed targets (stated at 1M keys; this run loaded {}): {} of {} met",
            s.records,
            s.targets.len() - missed,
            s.targets.len()
        )),
        header: vec!["target", "row", "measured", "bound", "met"],
        rows: s.targets.iter().map(target_cells).collect(),
        text_columns: &[0, 1, 4],
        group_gaps: false,
        legend: vec![
            "ops/s as in the table above; fences: the median fences of the sampled inserts"
                .to_string(),
        ],
    }
}

impl ReportSection for ByteKeys {
    fn blocks(&self, report: &Report) -> Vec<Block> {
        report
            .byte_keys
            .iter()
            .flat_map(|s| [rows_block(s), targets_block(s)])
            .collect()
    }
}
