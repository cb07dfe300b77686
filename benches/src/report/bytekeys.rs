//! The byte-key section ([`crate::bytekeys`]): one row per map and workload, ours against the
//! peers (LMDB, redb) with the run's conditions, then the speed targets against this run.

use super::block::{format_opt_ns, format_rate, Block};
use super::{Report, ReportSection};
use crate::bytekeys::{
    ByteKeyResults, ByteKeyRow, Conditions, PeerComparison, TargetCheck, SCAN_RECORDS,
};

/// The byte-key tables.
pub(super) struct ByteKeys;

fn title(s: &ByteKeyResults) -> String {
    format!(
        "byte keys through the store: one thread, each map a fresh Store (Store::create in its \
         own pool file, batched fences, default configurations: CCEH, FAST&FAIR with FAST \
         shifts; the leaf map (the Store's leaf layout) raw, in a heap of its own pool file, \
         8 KiB leaves) beside the u64 -> u64 map of the same kind in the same run{}; {} records \
         loaded (one insert each, keys in a random order), then A, B, C with {} operations \
         each and E with {} scans, uniform keys; {}",
        if s.peers.is_empty() {
            ""
        } else {
            ", and the peers (below) with the same keys and operations"
        },
        s.records,
        s.ops,
        s.scans,
        conditions(&s.conditions)
    )
}

/// The conditions every number of the section was measured under, in one phrase.
fn conditions(c: &Conditions) -> String {
    let medium = match c.tmpfs {
        Some(true) => "tmpfs, i.e. DRAM",
        Some(false) => "not tmpfs",
        None => "medium unknown",
    };
    let load =
        |l: Option<[f64; 3]>| l.map_or_else(|| "unknown".to_string(), |l| format!("{:.2}", l[0]));
    let state = match c.loaded() {
        Some(true) => "loaded by other work",
        Some(false) => "otherwise idle",
        None => "load unknown",
    };
    format!(
        "{} thread, files in {} ({medium}), our pools' granularity: {} (NOT persistent \
         memory unless the pool directory is on a DAX device), machine {state}: 1-minute load \
         average {} at the start, {} at the end, {} cores",
        c.threads,
        c.dir.display(),
        c.granularity,
        load(c.load_before),
        load(c.load_after),
        c.cores
    )
}

/// `x` formatted, or `-`.
fn optional(x: Option<f64>, format: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "-".to_string(), format)
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
        optional(r.fences_per_op, |f| format!("{f:.2}")),
        optional(r.median_call_fences, |f| format!("{f:.0}")),
        optional(r.flushes_per_op, |f| format!("{f:.2}")),
        optional(r.media_bytes_per_op, |b| format!("{b:.0}")),
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
             the whole run (ours only: a peer's syncs are not counted, shown -)",
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

fn ratio(x: Option<f64>) -> String {
    optional(x, |x| format!("{x:.2}x"))
}

fn comparison_cells(c: &PeerComparison) -> Vec<String> {
    let rate = |x: Option<f64>| optional(x, format_rate);
    vec![
        format!("{} ({})", c.workload, c.operation),
        rate(c.hash),
        rate(c.ordered),
        rate(c.leaf),
        rate(c.store_leaf),
        rate(c.lmdb),
        rate(c.redb),
        ratio(c.hash_over_lmdb),
        ratio(c.ordered_over_lmdb),
        ratio(c.leaf_over_lmdb),
        ratio(c.store_leaf_over_lmdb),
        ratio(c.hash_over_redb),
        ratio(c.ordered_over_redb),
        ratio(c.leaf_over_redb),
        ratio(c.store_leaf_over_redb),
    ]
}

fn peers_block(s: &ByteKeyResults) -> Option<Block> {
    if s.comparison.is_empty() {
        return None;
    }
    let mut legend = vec![
        "ops/s over each whole run, as in the table above (the same rows); ours / peer: our \
         map's ops/s over the peer's, same workload, same run"
            .to_string(),
        "ours: every insert and upsert durable when the call returns (its flushes and fences \
         issued); gets: get_into(key, buffer), a buffer reused across calls; scans: the ordered map's \
         range_encoded(key..) taking 100 pairs, each lent (borrowed bytes, as the peers' \
         scans read); the leaf map (raw, in a heap file of its own): get_into a reused \
         buffer, scan(key..) lending 100 pairs to a callback; the Store's leaves (the same \
         leaves through Store::btree_map_with(name, BTreeLayout::leaves())): get_into a \
         reused buffer, range_with(key..) lending pairs until 100 were taken"
            .to_string(),
    ];
    legend.extend(s.opens.iter().map(|o| {
        format!(
            "{} {} open after its workloads ({} records, the DRAM index rebuilt from the \
             leaves): {:.1} ms",
            o.map,
            o.label,
            o.records,
            o.seconds * 1e3
        )
    }));
    legend.extend(s.peers.iter().map(|p| {
        format!(
            "{} ({}): writes {}; reads: {}",
            p.engine, p.version, p.writes, p.reads
        )
    }));
    legend.push(format!(
        "every result checked alike: inserts inserted, gets found their record's value, \
         updates replaced one, scans start at their key, ascend, and carry values written for \
         loaded records; {}",
        conditions(&s.conditions)
    ));
    Some(Block {
        title: Some(format!(
            "byte keys beside LMDB and redb: 16 random bytes -> 100 B, the same {} keys, the \
             same operations in the same order on each, one thread",
            s.records
        )),
        header: vec![
            "workload",
            "ours, hash",
            "ours, ordered",
            "ours, leaf",
            "ours, Store leaves",
            "LMDB",
            "redb",
            "hash / LMDB",
            "ordered / LMDB",
            "leaf / LMDB",
            "Store leaves / LMDB",
            "hash / redb",
            "ordered / redb",
            "leaf / redb",
            "Store leaves / redb",
        ],
        rows: s.comparison.iter().map(comparison_cells).collect(),
        text_columns: &[0],
        group_gaps: false,
        legend,
    })
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
            .flat_map(|s| {
                std::iter::once(rows_block(s))
                    .chain(peers_block(s))
                    .chain(std::iter::once(targets_block(s)))
            })
            .collect()
    }
}
