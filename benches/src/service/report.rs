//! The service section's tables: the servers under `redis-benchmark`, then our maps against
//! redb in process.

use super::{ServiceResults, CLIENTS};
use crate::report::{format_rate as rate, Block};

fn ms(x: f64) -> String {
    format!("{x:.3}")
}

fn network(r: &ServiceResults) -> Block {
    let version = |v: &Option<String>| v.clone().unwrap_or_else(|| "not installed".to_string());
    Block {
        title: Some(format!(
            "service: redis-benchmark against ours, redis-server with AOF (fsync always) and \
             redis-server without persistence, in one run ({CLIENTS} clients, {} requests per \
             run, random keys below {}, {} B values)",
            r.requests, r.keyspace, r.value_bytes
        )),
        header: vec![
            "test",
            "pipeline",
            "server",
            "ops/s",
            "avg ms",
            "p50 ms",
            "p99 ms",
            "ours / this",
        ],
        rows: r
            .network
            .iter()
            .map(|row| {
                vec![
                    row.test.clone(),
                    row.pipeline.to_string(),
                    row.server.clone(),
                    rate(row.line.ops_per_sec),
                    ms(row.line.avg_ms),
                    ms(row.line.p50_ms),
                    ms(row.line.p99_ms),
                    format!("{:.2}", row.ours_over_this),
                ]
            })
            .collect(),
        text_columns: &[0, 2],
        group_gaps: true,
        legend: vec![
            "ops/s and latencies as redis-benchmark reports them (--csv); ours / this: ours \
             over the row's ops/s in the same cell; the three servers run back to back in \
             each cell, the order rotating from cell to cell; SETs run before GETs, so GETs \
             find the keys the SETs wrote"
                .to_string(),
            format!(
                "ours: pmem-kv-server in the benchmark's process, a fresh pool in {}: {}; \
                 every SET durable (flushed and fenced) before its reply",
                r.dir, r.medium
            ),
            format!(
                "redis: {}, its append-only file in the same directory: tmpfs, so each \
                 fsync is cheap (no device); on a disk or SSD appendfsync always costs far more",
                version(&r.redis_server_version)
            ),
            format!(
                "{}; machine: {}, {} ({} cores), shared with other work, so the numbers are noisy",
                version(&r.redis_benchmark_version),
                r.machine.hostname,
                r.machine.cpu_model,
                r.machine.cores
            ),
        ],
    }
}

fn embedded(r: &ServiceResults) -> Block {
    let mut legend = vec![
        "ops/s over the whole run (one thread); ours / redb: the row's ops/s over redb's in \
         the same mode"
            .to_string(),
        format!(
            "files in {}: ours {}; redb's fsync on the same tmpfs",
            r.dir, r.medium
        ),
    ];
    for row in &r.embedded {
        let line = format!("{}, {}s: {}", row.engine, row.operation, row.note);
        if !legend.contains(&line) {
            legend.push(line);
        }
    }
    Block {
        title: Some(format!(
            "service, in process: the store's byte-key maps against redb {} ({} keys of 16 \
             random bytes, {} B values)",
            r.redb_version, r.records, r.value_bytes
        )),
        header: vec!["operation", "commit", "engine", "ops/s", "ours / redb"],
        rows: r
            .embedded
            .iter()
            .map(|row| {
                vec![
                    row.operation.clone(),
                    row.commit.clone(),
                    row.engine.clone(),
                    rate(row.ops_per_sec),
                    row.ours_over_redb
                        .map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
                ]
            })
            .collect(),
        text_columns: &[0, 1, 2],
        group_gaps: true,
        legend,
    }
}

/// The section's tables, in print order (no network table when it was skipped).
pub fn blocks(r: &ServiceResults) -> Vec<Block> {
    let mut blocks = Vec::new();
    if r.network_skipped.is_none() {
        blocks.push(network(r));
    }
    blocks.push(embedded(r));
    blocks
}

/// The tables as text, after the reason when the network half was skipped.
pub fn text(r: &ServiceResults) -> String {
    let mut out = match &r.network_skipped {
        Some(reason) => format!("service: {reason}\n\n"),
        None => String::new(),
    };
    for block in blocks(r) {
        out.push_str(&format!("{}\n", block.text()));
    }
    out
}

/// The tables as markdown, after the reason when the network half was skipped.
pub fn markdown(r: &ServiceResults) -> String {
    let mut out = match &r.network_skipped {
        Some(reason) => format!("\nservice: {reason}\n"),
        None => String::new(),
    };
    out.extend(blocks(r).iter().map(|b| b.markdown()));
    out
}
