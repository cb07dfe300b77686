//! The store-path section ([`crate::storebench`]): one row per operation, raw ops/s, store
//! ops/s and their ratio.

use super::block::{format_rate, Block};
use super::{Report, ReportSection};
use crate::fastfairbench::SCAN_KEYS;
use crate::storebench::{StorePathResults, CHUNKS};

/// The store path vs raw table.
pub(super) struct StorePath;

/// What the section measured and how.
fn title(s: &StorePathResults) -> String {
    let keys = |name: &str, keys: Option<u64>| keys.map(|k| format!("{name} {k} keys"));
    let sizes: Vec<String> = [
        keys("CCEH", s.cceh_keys),
        keys("FAST&FAIR", s.fastfair_keys),
    ]
    .into_iter()
    .flatten()
    .collect();
    format!(
        "store path vs raw: each operation through a Store's handle (Store::create on its own \
         pool file, hash_map_with / btree_map, default configurations) and on the raw \
         structure as the sections above make it (its own heap and pool file, same size, \
         same fences and granularity), paired in one run: {} repetitions, each phase cut into \
         {} chunks run on both sides back to back, the order alternating from chunk to chunk; \
         {}; YCSB {} records, {} operations per run; ops/s: median of the repetitions, no \
         latency sampled",
        s.repetitions,
        CHUNKS,
        sizes.join(", "),
        s.ycsb.records,
        s.ycsb.ops
    )
}

fn rows(s: &StorePathResults) -> Vec<Vec<String>> {
    s.rows
        .iter()
        .map(|r| {
            vec![
                r.structure.clone(),
                r.operation.clone(),
                r.ops.to_string(),
                format_rate(r.raw_ops_per_sec),
                format_rate(r.store_ops_per_sec),
                format!("{:.3}", r.ratio),
                if r.within_target { "yes" } else { "NO" }.to_string(),
            ]
        })
        .collect()
}

/// The footnotes of the table.
fn legend(s: &StorePathResults) -> Vec<String> {
    let missed: Vec<String> = s
        .rows
        .iter()
        .filter(|r| !r.within_target)
        .map(|r| format!("{} {} ({:.3})", r.structure, r.operation, r.ratio))
        .collect();
    vec![
        format!(
            "store/raw: store ops/s over raw ops/s, the median of the repetitions' ratios, \
             each the median of its {} chunks' ratios (raw time over store time, the same \
             operations); raw and store ops/s: the operations over the chunks' summed time; \
             the target is \"within 3%\": at least {:.2}",
            CHUNKS, s.target_ratio
        ),
        format!(
            "missing the target: {}",
            if missed.is_empty() {
                "none".to_string()
            } else {
                missed.join("; ")
            }
        ),
        format!(
            "scans: {} of {SCAN_KEYS} pairs from random keys per side (range(start..) taking \
             {SCAN_KEYS}); YCSB: uniform keys, one thread, the same plans on both sides, the \
             load one insert per record on both (the handles have no batched insert)",
            s.scans
        ),
        "CCEH's insert_batch rows (helper thread off, on, inline prefetch) have no store \
         equivalent and are measured raw only, above"
            .to_string(),
    ]
}

/// The section's one table.
fn block(s: &StorePathResults) -> Block {
    Block {
        title: Some(title(s)),
        header: vec![
            "structure",
            "operation",
            "ops",
            "raw ops/s",
            "store ops/s",
            "store/raw",
            "within 3%",
        ],
        rows: rows(s),
        text_columns: &[0, 1, 6],
        group_gaps: true,
        legend: legend(s),
    }
}

impl ReportSection for StorePath {
    fn blocks(&self, report: &Report) -> Vec<Block> {
        report.store_path.iter().map(block).collect()
    }
}
