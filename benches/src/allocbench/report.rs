//! The allocator section's table: ops/s per allocator, size and thread count, and the ratio
//! to ours.

use super::AllocResults;
use crate::report::{format_rate as rate, Block};

/// The section's tables, in print order.
pub fn blocks(r: &AllocResults) -> Vec<Block> {
    let mut durability: Vec<String> = Vec::new();
    for row in &r.rows {
        let line = format!("{}: {}", row.allocator, row.durability);
        if !durability.contains(&line) {
            durability.push(line);
        }
    }
    let mut legend = vec![
        format!(
            "ops/s: allocations and frees together per second of wall time, median of {} \
             rounds of {:.0} ms runs (allocators in turn, order rotating); each thread \
             allocates {} blocks, then frees them, and again; no block is written",
            r.rounds, r.run_ms, r.batch
        ),
        "x ours: ops/s over ours (transaction) in the same round, median over the rounds"
            .to_string(),
        format!(
            "ours: anonymous pool, emulated granularity (DRAM), {}",
            r.our_pages
        ),
        format!("libpmemobj: {}", r.pmemobj),
    ];
    legend.extend(durability);
    vec![Block {
        title: Some(
            "alloc: allocator throughput, 64 B to 4 KiB, 1 and 2 threads, in one run \
             (PERC, Sec. 4.7)"
                .to_string(),
        ),
        header: vec!["size B", "threads", "allocator", "ops/s", "x ours"],
        rows: r
            .rows
            .iter()
            .map(|row| {
                vec![
                    row.size.to_string(),
                    row.threads.to_string(),
                    row.allocator.clone(),
                    rate(row.ops_per_sec),
                    format!("{:.2}", row.over_ours),
                ]
            })
            .collect(),
        text_columns: &[2],
        group_gaps: true,
        legend,
    }]
}

/// The table as text.
pub fn text(r: &AllocResults) -> String {
    blocks(r)
        .iter()
        .map(|b| format!("{}\n", b.text()))
        .collect()
}

/// The table as markdown.
pub fn markdown(r: &AllocResults) -> String {
    blocks(r).iter().map(Block::markdown).collect()
}
