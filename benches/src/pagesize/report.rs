//! The page-size section's tables: the pages each pool got, then 4 KiB against 2 MiB per
//! structure and operation.

use super::PageResults;
use crate::report::{format_rate as rate, Block};

fn opt(value: Option<f64>, f: impl Fn(f64) -> String) -> String {
    value.map_or_else(|| "-".to_string(), f)
}

/// The section's tables, in print order.
pub fn blocks(r: &PageResults) -> Vec<Block> {
    let pools = Block {
        title: Some(format!(
            "page size: pages obtained per pool (anonymous, or a file on hugetlbfs; emulated \
             granularity, DRAM; /proc/self/smaps after the load of {} YCSB records)",
            r.records
        )),
        header: vec![
            "structure",
            "asked",
            "pool MiB",
            "2 MiB-aligned",
            "obtained",
        ],
        rows: r
            .pools
            .iter()
            .map(|p| {
                vec![
                    p.structure.clone(),
                    p.requested.clone(),
                    (p.pool_bytes >> 20).to_string(),
                    if p.aligned_2m { "yes" } else { "no" }.to_string(),
                    p.obtained.clone(),
                ]
            })
            .collect(),
        text_columns: &[0, 1, 3, 4],
        group_gaps: false,
        legend: Vec::new(),
    };
    let dtlb_note = match &r.dtlb_unavailable {
        Some(reason) => format!("dTLB misses/op: not available: {reason}"),
        None => "dTLB misses/op: user-mode dTLB read misses (perf_event_open) over the run, \
                 per operation"
            .to_string(),
    };
    let mut speed = Block {
        title: Some(format!(
            "page size: 4 KiB against 2 MiB pages (transparent, and hugetlbfs where the host has it), paired in one run ({} rounds, sides \
             alternating; {} lookups of every loaded key in one random order, YCSB C {} \
             operations)",
            r.rounds, r.records, r.ycsb_ops
        )),
        header: vec![
            "structure",
            "operation",
            "4k ops/s",
            "2m ops/s",
            "2m / 4k",
            "hugetlbfs ops/s",
            "hugetlbfs / 4k",
            "4k dTLB/op",
            "2m dTLB/op",
            "hugetlbfs dTLB/op",
        ],
        rows: r
            .rows
            .iter()
            .map(|row| {
                vec![
                    row.structure.clone(),
                    row.operation.clone(),
                    opt(row.base_ops_per_sec, rate),
                    opt(row.huge_ops_per_sec, rate),
                    opt(row.huge_over_base, |x| format!("{x:.3}")),
                    opt(row.hugetlbfs_ops_per_sec, rate),
                    opt(row.hugetlbfs_over_base, |x| format!("{x:.3}")),
                    opt(row.base_dtlb_per_op, |x| format!("{x:.3}")),
                    opt(row.huge_dtlb_per_op, |x| format!("{x:.3}")),
                    opt(row.hugetlbfs_dtlb_per_op, |x| format!("{x:.3}")),
                ]
            })
            .collect(),
        text_columns: &[0, 1],
        group_gaps: true,
        legend: vec![
            "ops/s: median over the rounds; 2m / 4k, hugetlbfs / 4k: medians of the rounds' \
             ratios (above 1: huge pages faster); 2m: anonymous memory on transparent huge \
             pages; hugetlbfs: a pool file on a hugetlbfs mount"
                .to_string(),
            dtlb_note,
            "Optane page size, Sec. 3 (Fig. 1): page size dominates, up to 5x; with 4 KiB pages a random \
             access over a large pool walks the page table. Here the pools are DRAM."
                .to_string(),
        ],
    };
    speed.legend.extend(r.skipped.iter().cloned());
    vec![pools, speed]
}

/// The tables as text.
pub fn text(r: &PageResults) -> String {
    blocks(r)
        .iter()
        .map(|b| format!("{}\n", b.text()))
        .collect()
}

/// The tables as markdown.
pub fn markdown(r: &PageResults) -> String {
    blocks(r).iter().map(Block::markdown).collect()
}
