//! The cluster section's tables: the four servers under `redis-benchmark`, then the failover
//! rounds.

use super::{ClusterResults, CLIENTS};
use crate::report::{format_rate as rate, Block};

fn ms(x: f64) -> String {
    format!("{x:.3}")
}

fn network(r: &ClusterResults) -> Block {
    let version = |v: &Option<String>| v.clone().unwrap_or_else(|| "not installed".to_string());
    let elections: u64 = r.network.iter().map(|row| row.elections).sum();
    Block {
        title: Some(format!(
            "cluster: redis-benchmark against the replicated server (3 nodes), the standalone \
             server, redis-server with AOF (fsync always) and redis-server without persistence, \
             in one run ({CLIENTS} clients, {} requests per run, random keys below {}, {} B \
             values)",
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
            "replicated / this",
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
                    format!("{:.2}", row.replicated_over_this),
                ]
            })
            .collect(),
        text_columns: &[0, 2],
        group_gaps: true,
        legend: vec![
            "ops/s and latencies as redis-benchmark reports them (--csv), sent to the cluster's \
             leader; replicated / this: the cluster's ops/s over the row's in the same cell (the \
             cost of replication against the standalone row); the four run back to back in each \
             cell, the order rotating from cell to cell"
                .to_string(),
            format!(
                "replicated: three pmem-kv-cluster processes on 127.0.0.1, pools in {}: {}; a \
                 SET is answered once a majority has it in its log and the leader applied it; a \
                 GET waits for a read index (a heartbeat round); heartbeat {} ms, election \
                 timeout {}-{} ms; Raft elections during the cluster's runs: {elections}",
                r.dir,
                r.medium,
                r.heartbeat_ms,
                r.election_timeout_ms,
                2 * r.election_timeout_ms
            ),
            format!(
                "ours: pmem-kv-server in the benchmark's process, same medium; redis: {}, its \
                 append-only file on the same tmpfs (each fsync cheap: no device)",
                version(&r.redis_server_version)
            ),
            format!(
                "{}; machine: {}, {} ({} cores), shared with other work: the nodes, the servers \
                 and redis-benchmark share its cores, so the numbers are noisy",
                version(&r.redis_benchmark_version),
                r.machine.hostname,
                r.machine.cpu_model,
                r.machine.cores
            ),
        ],
    }
}

fn failover(r: &ClusterResults) -> Block {
    let f = &r.failover;
    let mut times: Vec<f64> = f.rounds.iter().map(|x| x.failover_ms).collect();
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    let worst = times.last().copied().unwrap_or(f64::NAN);
    Block {
        title: Some(format!(
            "cluster: failover, the leader killed with SIGKILL {} time(s) while a client writes \
             (heartbeat {} ms, election timeout {}-{} ms)",
            f.rounds.len(),
            r.heartbeat_ms,
            r.election_timeout_ms,
            2 * r.election_timeout_ms
        )),
        header: vec![
            "round",
            "killed",
            "new leader",
            "failover ms",
            "catch-up ms",
        ],
        rows: f
            .rounds
            .iter()
            .map(|x| {
                vec![
                    x.round.to_string(),
                    x.killed.to_string(),
                    x.new_leader.to_string(),
                    format!("{:.0}", x.failover_ms),
                    format!("{:.0}", x.catch_up_ms),
                ]
            })
            .collect(),
        text_columns: &[],
        group_gaps: false,
        legend: vec![
            "failover: from the kill to the answer of the first write sent after it and \
             acknowledged, through the two nodes left (the client follows -MOVED and tries the \
             next node on -CLUSTERDOWN or a refused connection); catch-up: from the killed \
             node's restart on its pool to its applying the leader's commit index of then"
                .to_string(),
            format!(
                "failover median {median:.0} ms, worst {worst:.0} ms; writes acknowledged {}, \
                 refused before being proposed {}, of unknown outcome {}; acknowledged writes \
                 lost: {} (each read back from the leader after the last round)",
                f.acknowledged, f.refused, f.in_doubt, f.lost
            ),
        ],
    }
}

/// The section's tables, in print order (no throughput table when it was skipped).
pub fn blocks(r: &ClusterResults) -> Vec<Block> {
    let mut blocks = Vec::new();
    if r.network_skipped.is_none() {
        blocks.push(network(r));
    }
    blocks.push(failover(r));
    blocks
}

/// The tables as text, after the reason when the throughput half was skipped.
pub fn text(r: &ClusterResults) -> String {
    let mut out = match &r.network_skipped {
        Some(reason) => format!("cluster: {reason}\n\n"),
        None => String::new(),
    };
    for block in blocks(r) {
        out.push_str(&format!("{}\n", block.text()));
    }
    out
}

/// The tables as markdown, after the reason when the throughput half was skipped.
pub fn markdown(r: &ClusterResults) -> String {
    let mut out = match &r.network_skipped {
        Some(reason) => format!("\ncluster: {reason}\n"),
        None => String::new(),
    };
    out.extend(blocks(r).iter().map(|b| b.markdown()));
    out
}
