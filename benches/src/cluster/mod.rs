//! The cluster section: the key-value server replicated on three nodes (`pmem-kv-cluster`,
//! Raft through openraft) against the standalone server and Redis, in one run, then leader
//! failover.
//!
//! Throughput: `redis-benchmark` `SET` then `GET` ([`CLIENTS`] clients, pipeline depths
//! [`PIPELINES`], random keys below [`ClusterPlan::keyspace`], 100-byte values) against four
//! servers started for the run: the cluster's leader (three node processes on loopback,
//! [`nodes`]), our standalone server (in this process, as the service section runs it),
//! `redis-server` with every write fsync'd (`appendfsync always`) and `redis-server` without
//! persistence. Every cell (test, depth) runs the four back to back, the order rotating from
//! cell to cell; each row gives the cluster's ops/s over that server's: the cost of
//! replication. A Raft election during a cluster run (a term change) is recorded on its row.
//! Without `redis-benchmark` or `redis-server` this half is skipped with the reason.
//!
//! Failover ([`failover`]): the leader killed with SIGKILL, round after round; the time until
//! a write is acknowledged again through the two nodes left; every acknowledged write read
//! back at the end. Pools live in one fresh directory under the pool directory, removed at
//! the end.

pub mod failover;
pub mod nodes;
pub mod report;
pub mod resp;
pub mod router;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use pmem_kv_server::{Server, ServerConfig, ServerError};
use pmem_ordering::Granularity;
use serde::Serialize;

use crate::machine::{granularity_note, Machine};
use crate::poolfile::is_tmpfs;
use crate::service::csv::BenchmarkLine;
use crate::service::embedded::VALUE_BYTES;
use crate::service::redis::{run_benchmark, tool_version, BenchmarkArgs, Persistence, RedisServer};
use crate::service::ServiceError;
use failover::FailoverResults;
use nodes::Cluster;

/// `redis-benchmark`'s parallel connections (`-c`).
pub const CLIENTS: u32 = 50;
/// Pipeline depths measured (`-P`).
pub const PIPELINES: [u32; 2] = [1, 16];
/// The tests, in run order (`GET`s then find the keys the `SET`s wrote).
pub const TESTS: [&str; 2] = ["set", "get"];
/// The servers, in the order of a row group.
pub const SERVERS: [&str; 4] = [
    "replicated: 3 nodes",
    "ours: standalone",
    "redis: AOF, fsync always",
    "redis: no persistence",
];

/// How much the section measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterPlan {
    /// `redis-benchmark` requests per run (`-n`).
    pub requests: u64,
    /// Keys are `key:` and a number below this (`-r`).
    pub keyspace: u64,
    /// Leaders killed.
    pub failover_rounds: usize,
}

impl ClusterPlan {
    /// The default run: 100,000 requests per run, 10 leaders killed (a few minutes).
    pub fn full() -> ClusterPlan {
        ClusterPlan {
            requests: 100_000,
            keyspace: 100_000,
            failover_rounds: 10,
        }
    }

    /// `--quick`: 10,000 requests per run, one leader killed (a few seconds). Fewer can
    /// finish inside `redis-benchmark`'s millisecond timer on a fast server (pipelined GETs of
    /// 1,000 requests did), and it then reports no rate (`inf`).
    pub fn quick() -> ClusterPlan {
        ClusterPlan {
            requests: 10_000,
            keyspace: 100_000,
            failover_rounds: 1,
        }
    }
}

/// Why the section failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterBenchError {
    /// A file, directory or socket operation.
    #[error("cluster section: cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A node exited before it answered.
    #[error("cluster section: node {node} exited ({status}) before serving; its log:\n{log}")]
    NodeExited {
        /// The node.
        node: u64,
        /// How it exited.
        status: ExitStatus,
        /// Its standard error.
        log: String,
    },
    /// A node did not answer `PING` in time.
    #[error("cluster section: node {node} did not answer PING in {secs} s; its log:\n{log}")]
    NodeNotReady {
        /// The node.
        node: u64,
        /// Seconds waited.
        secs: u64,
        /// Its standard error.
        log: String,
    },
    /// The running nodes did not agree on a running leader in time.
    #[error("cluster section: no leader agreed on in {secs} s (the nodes named {named})")]
    NoLeader {
        /// Seconds waited.
        secs: u64,
        /// What each running node named.
        named: String,
    },
    /// No write was acknowledged in time after a leader was killed.
    #[error("cluster section: failover round {round}: no write acknowledged within {secs} s")]
    NoFailover {
        /// The round.
        round: usize,
        /// Seconds waited.
        secs: u64,
    },
    /// A restarted node did not catch up in time.
    #[error("cluster section: restarted node {node} did not apply the log to {needed} in {secs} s (it applied {applied:?})")]
    NoCatchUp {
        /// The node.
        node: u64,
        /// Seconds waited.
        secs: u64,
        /// Its last applied index, if it answered.
        applied: Option<u64>,
        /// The index it had to reach.
        needed: u64,
    },
    /// A node answered a command otherwise than the section expects.
    #[error("cluster section: {what} was answered {reply}")]
    Refused {
        /// The command.
        what: String,
        /// The reply, or why there was none.
        reply: String,
    },
    /// Redis's tools, as the service section drives them.
    #[error(transparent)]
    Service(#[from] ServiceError),
    /// Our standalone server did not start.
    #[error("cluster section: the standalone server: {0}")]
    OurServer(#[from] ServerError),
}

/// One server's `redis-benchmark` line in one cell.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterRow {
    /// `SET` or `GET`.
    pub test: String,
    /// Pipeline depth.
    pub pipeline: u32,
    /// One of [`SERVERS`].
    pub server: String,
    /// Where in the cell's order it ran (0: first).
    pub position: usize,
    /// What `redis-benchmark` reported.
    #[serde(flatten)]
    pub line: BenchmarkLine,
    /// The cluster's ops/s over this server's in the same cell (1 on the cluster's rows).
    pub replicated_over_this: f64,
    /// Raft terms that began during the run (the cluster's rows; 0 elsewhere).
    pub elections: u64,
}

/// The section's results.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterResults {
    /// The machine.
    pub machine: Machine,
    /// The directory everything ran in.
    pub dir: String,
    /// What persistence means there.
    pub medium: String,
    /// `redis-benchmark` settings.
    pub clients: u32,
    /// Requests per run.
    pub requests: u64,
    /// The key range.
    pub keyspace: u64,
    /// Bytes of a value.
    pub value_bytes: usize,
    /// The nodes' heartbeat period, milliseconds.
    pub heartbeat_ms: u64,
    /// The nodes' shortest election timeout, milliseconds (the longest is twice it).
    pub election_timeout_ms: u64,
    /// `redis-server --version`, when installed.
    pub redis_server_version: Option<String>,
    /// `redis-benchmark --version`, when installed.
    pub redis_benchmark_version: Option<String>,
    /// Why the throughput half was not measured.
    pub network_skipped: Option<String>,
    /// The throughput rows.
    pub network: Vec<ClusterRow>,
    /// Failover.
    pub failover: FailoverResults,
}

/// A fresh directory for the section's files, removed with everything in it when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn create(parent: &Path, prefix: &str) -> Result<ScratchDir, ClusterBenchError> {
        let path = parent.join(format!("{prefix}-cluster-{}", std::process::id()));
        // A directory of the same name is a crashed run's leftover of this process id.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).map_err(|source| ClusterBenchError::Io {
            what: format!("create {}", path.display()),
            source,
        })?;
        Ok(ScratchDir(path))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Best effort: whatever is left goes with the directory.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Why the throughput half cannot run (a tool missing), or `None`.
fn missing_tools(benchmark: &Option<String>, server: &Option<String>) -> Option<String> {
    let mut missing = Vec::new();
    if benchmark.is_none() {
        missing.push("redis-benchmark is not installed (Debian package redis-tools)");
    }
    if server.is_none() {
        missing.push("redis-server is not installed (Debian package redis-server)");
    }
    (!missing.is_empty()).then(|| format!("skipped the throughput half: {}", missing.join("; ")))
}

/// MiB of a node's pool (and bytes of the standalone server's): every key of the run in the
/// keyspace, twice while a snapshot is installed, the Raft log until it is purged, a margin.
fn pool_mib(plan: &ClusterPlan) -> u64 {
    let keys = plan.keyspace.min(plan.requests * PIPELINES.len() as u64);
    (keys * 256 * 3 + (128 << 20)).div_ceil(1 << 20)
}

/// The throughput half: the cluster's leader against the three other servers, every cell.
fn measure_network(
    plan: &ClusterPlan,
    cluster: &Cluster,
    dir: &Path,
) -> Result<Vec<ClusterRow>, ClusterBenchError> {
    let mut config = ServerConfig::new(dir.join("standalone.pool"));
    config.bind = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    config.granularity = Some(Granularity::Emulated);
    config.pool_size = pool_mib(plan) << 20;
    let ours = Server::start(config)?;
    let aof = RedisServer::start(&dir.join("redis-aof"), Persistence::AofAlways)?;
    let plain = RedisServer::start(&dir.join("redis-none"), Persistence::Nothing)?;
    let mut rows = Vec::new();
    let cells = TESTS
        .into_iter()
        .flat_map(|t| PIPELINES.into_iter().map(move |p| (t, p)));
    for (cell, (test, pipeline)) in cells.enumerate() {
        let args = BenchmarkArgs {
            test,
            clients: CLIENTS,
            requests: plan.requests,
            pipeline,
            keyspace: plan.keyspace,
            value_bytes: VALUE_BYTES as u32,
        };
        let mut lines: [Option<(usize, BenchmarkLine, u64)>; 4] = [None; 4];
        for position in 0..SERVERS.len() {
            let s = (cell + position) % SERVERS.len();
            let measured = if s == 0 {
                let leader = cluster.leader(Duration::from_secs(30))?;
                let before = cluster.term(leader).unwrap_or(0);
                let port = cluster.nodes[leader].client.port();
                let line = run_benchmark(SERVERS[0], port, &args)?;
                let after_leader = cluster.leader(Duration::from_secs(30))?;
                let after = cluster.term(after_leader).unwrap_or(before);
                (line, after.saturating_sub(before))
            } else {
                let port = [ours.local_addr().port(), aof.port(), plain.port()][s - 1];
                (run_benchmark(SERVERS[s], port, &args)?, 0)
            };
            lines[s] = Some((position, measured.0, measured.1));
        }
        let replicated = lines[0].map_or(f64::NAN, |(_, l, _)| l.ops_per_sec);
        for (s, measured) in lines.into_iter().enumerate() {
            let Some((position, line, elections)) = measured else {
                continue;
            };
            rows.push(ClusterRow {
                test: test.to_ascii_uppercase(),
                pipeline,
                server: SERVERS[s].to_string(),
                position,
                line,
                replicated_over_this: replicated / line.ops_per_sec,
                elections,
            });
        }
    }
    ours.shutdown();
    drop((aof, plain));
    Ok(rows)
}

/// Run the section: the plan for `quick`, the nodes as processes of `program` (this
/// binary), a progress line through `line`, files under `dir` named `{prefix}-cluster-*`.
pub fn run(
    quick: bool,
    program: &Path,
    dir: &Path,
    prefix: &str,
    line: impl Fn(&str),
) -> Result<ClusterResults, ClusterBenchError> {
    let plan = if quick {
        ClusterPlan::quick()
    } else {
        ClusterPlan::full()
    };
    let redis_benchmark_version = tool_version("redis-benchmark");
    let redis_server_version = tool_version("redis-server");
    let skipped = missing_tools(&redis_benchmark_version, &redis_server_version);
    line(&format!(
        "cluster: 3 nodes on loopback; redis-benchmark SET and GET, {CLIENTS} clients, \
         pipelines 1 and 16, {} requests each, against the cluster's leader, the standalone \
         server and redis-server with and without AOF{}; then {} leader kill(s)",
        plan.requests,
        if skipped.is_some() { " (skipped)" } else { "" },
        plan.failover_rounds
    ));
    let scratch = ScratchDir::create(dir, prefix)?;
    let mut cluster = Cluster::start(program, &scratch.0, pool_mib(&plan))?;
    let network = match &skipped {
        Some(_) => Vec::new(),
        None => measure_network(&plan, &cluster, &scratch.0)?,
    };
    let failover = failover::measure(&mut cluster, plan.failover_rounds, |l| line(l))?;
    drop(cluster);
    Ok(ClusterResults {
        machine: Machine::detect(),
        dir: dir.display().to_string(),
        medium: granularity_note(Granularity::Emulated, is_tmpfs(dir)),
        clients: CLIENTS,
        requests: plan.requests,
        keyspace: plan.keyspace,
        value_bytes: VALUE_BYTES,
        heartbeat_ms: nodes::HEARTBEAT_MS,
        election_timeout_ms: nodes::ELECTION_TIMEOUT_MS,
        redis_server_version,
        redis_benchmark_version,
        network_skipped: skipped,
        network,
        failover,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_is_named_with_its_package() {
        let v = Some("7.0.15".to_string());
        assert_eq!(missing_tools(&v, &v), None);
        let reason = missing_tools(&None, &v).unwrap();
        assert!(reason.contains("redis-benchmark") && reason.contains("redis-tools"));
        let reason = missing_tools(&v, &None).unwrap();
        assert!(reason.contains("Debian package redis-server"), "{reason}");
    }

    #[test]
    fn the_pools_hold_every_key_three_times_over() {
        let plan = ClusterPlan::full();
        assert!(pool_mib(&plan) << 20 >= plan.keyspace * 256 * 3);
        let quick = ClusterPlan::quick();
        assert!(pool_mib(&quick) << 20 >= quick.requests * 2 * 256 * 3);
    }
}
