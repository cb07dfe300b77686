//! The service section: our RESP2 server against Redis, and the store's byte-key maps against
//! redb, each pair measured in one run.
//!
//! Over the network: `redis-benchmark` `SET` then `GET` ([`CLIENTS`] clients, pipeline depths
//! [`PIPELINES`], random keys below [`ServicePlan::keyspace`], [`embedded::VALUE_BYTES`]-byte
//! values) against three servers started for the run: ours (`pmem_kv_server`, in this
//! process, a fresh pool with emulated granularity), `redis-server` with an append-only file
//! fsync'd on every write (`--appendonly yes --appendfsync always`), and `redis-server`
//! without persistence, the ceiling. Every cell (test, depth) runs the three back to back, the
//! order rotating from cell to cell; each row gives ours over that server's ops/s. Without
//! `redis-benchmark` or `redis-server` this half is skipped with the reason, not failed.
//!
//! In process ([`embedded`]): inserts and gets of the store's hash and ordered maps against
//! redb. Everything (pool, Redis directories, redb files) lives in one fresh directory under
//! the pool directory (tmpfs by default), removed at the end.

pub mod csv;
pub mod embedded;
pub mod redis;
pub mod report;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use pmem_kv_server::{Server, ServerConfig, ServerError};
use pmem_ordering::Granularity;
use serde::Serialize;

use crate::bytekeys::REDB_VERSION;
use crate::machine::{granularity_note, Machine};
use crate::poolfile::{is_tmpfs, SetupError};
use csv::BenchmarkLine;
use embedded::EmbeddedRow;
use redis::{run_benchmark, tool_version, BenchmarkArgs, Persistence, RedisServer};

/// `redis-benchmark`'s parallel connections (`-c`).
pub const CLIENTS: u32 = 50;
/// Pipeline depths measured (`-P`).
pub const PIPELINES: [u32; 2] = [1, 16];
/// The tests, in run order (`GET`s then find the keys the `SET`s wrote).
pub const TESTS: [&str; 2] = ["set", "get"];

/// The servers, in the order of a row group.
pub const SERVERS: [&str; 3] = ["ours", "redis: AOF, fsync always", "redis: no persistence"];

/// How much the section measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServicePlan {
    /// `redis-benchmark` requests per run (`-n`).
    pub requests: u64,
    /// Keys are `key:` and a number below this (`-r`).
    pub keyspace: u64,
    /// Keys inserted then read back in process.
    pub records: u64,
}

impl ServicePlan {
    /// The default run: 1,000,000 requests per run, 200,000 keys in process (a few minutes).
    pub fn full() -> ServicePlan {
        ServicePlan {
            requests: 1_000_000,
            keyspace: 1_000_000,
            records: 200_000,
        }
    }

    /// `--quick`: 20,000 requests per run, 10,000 keys in process (a few seconds).
    pub fn quick() -> ServicePlan {
        ServicePlan {
            requests: 20_000,
            keyspace: 1_000_000,
            records: 10_000,
        }
    }
}

/// Why the section failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// A file or directory operation.
    #[error("service section: cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A tool that is installed could not be started.
    #[error("service section: cannot run {tool}: {source}")]
    Tool {
        /// The tool.
        tool: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// `redis-server` exited before it answered.
    #[error("service section: redis-server exited ({status}) before serving; its log:\n{log}")]
    RedisExited {
        /// How it exited.
        status: ExitStatus,
        /// Its log file.
        log: String,
    },
    /// `redis-server` did not answer `PING` in time.
    #[error("service section: redis-server on port {port} did not answer PING in {secs} s; its log:\n{log}")]
    RedisNotReady {
        /// Its port.
        port: u16,
        /// Seconds waited.
        secs: u64,
        /// Its log file.
        log: String,
    },
    /// `redis-benchmark` exited with a failure.
    #[error(
        "service section: redis-benchmark {test} against {server} failed ({status}): {stderr}"
    )]
    BenchmarkFailed {
        /// The server.
        server: String,
        /// The test.
        test: String,
        /// How it exited.
        status: ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },
    /// `redis-benchmark` ran past its deadline and was killed.
    #[error(
        "service section: redis-benchmark {test} against {server} ran past {secs} s and was killed"
    )]
    BenchmarkTimeout {
        /// The server.
        server: String,
        /// The test.
        test: String,
        /// The deadline in seconds.
        secs: u64,
    },
    /// `redis-benchmark`'s output was not what the section reads.
    #[error("service section: against {server}: {source}")]
    Csv {
        /// The server.
        server: String,
        /// What was wrong.
        source: csv::CsvError,
    },
    /// Our server did not start.
    #[error("service section: our server: {0}")]
    OurServer(#[from] ServerError),
    /// Our store's pool file.
    #[error("service section: {0}")]
    Setup(#[from] SetupError),
    /// Our store.
    #[error("service section: our store: {0}")]
    Store(#[from] pmem_structures::Error),
    /// redb.
    #[error("service section: redb: {0}")]
    Redb(#[from] redb::Error),
    /// An insert found its key present: the keys were not distinct (a bug of the section).
    #[error("service section: {engine} found a key already present on its first insert")]
    Duplicate {
        /// The engine.
        engine: String,
    },
    /// A lookup missed a key or read a wrong value (a bug, not a measurement).
    #[error("service section: {engine} found {hits} of {expected} keys with their values")]
    Lookups {
        /// The engine.
        engine: String,
        /// Keys found with their value.
        hits: usize,
        /// Keys looked up.
        expected: usize,
    },
}

/// One server's `redis-benchmark` line in one cell.
#[derive(Clone, Debug, Serialize)]
pub struct NetworkRow {
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
    /// Ours over this server's ops/s in the same cell (1 on our rows).
    pub ours_over_this: f64,
}

/// The section's results.
#[derive(Clone, Debug, Serialize)]
pub struct ServiceResults {
    /// The machine.
    pub machine: Machine,
    /// The directory everything ran in, and what it is.
    pub dir: String,
    /// What persistence means there.
    pub medium: String,
    /// `redis-benchmark` settings.
    pub clients: u32,
    /// Requests per run.
    pub requests: u64,
    /// The key range.
    pub keyspace: u64,
    /// Bytes of a value (network and in process).
    pub value_bytes: usize,
    /// `redis-server --version`, when installed.
    pub redis_server_version: Option<String>,
    /// `redis-benchmark --version`, when installed.
    pub redis_benchmark_version: Option<String>,
    /// Why the network half was not measured.
    pub network_skipped: Option<String>,
    /// The network half's rows.
    pub network: Vec<NetworkRow>,
    /// redb's version.
    pub redb_version: String,
    /// Keys inserted and read in process.
    pub records: u64,
    /// The in-process rows.
    pub embedded: Vec<EmbeddedRow>,
}

/// A fresh directory for the section's files, removed with everything in it when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn create(parent: &Path, prefix: &str) -> Result<ScratchDir, ServiceError> {
        let path = parent.join(format!("{prefix}-service-{}", std::process::id()));
        // A directory of the same name is a crashed run's leftover of this process id.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir(&path).map_err(|source| ServiceError::Io {
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

/// Why the network half cannot run (a tool missing), or `None`.
fn missing_tools(benchmark: &Option<String>, server: &Option<String>) -> Option<String> {
    let mut missing = Vec::new();
    if benchmark.is_none() {
        missing.push("redis-benchmark is not installed (Debian package redis-tools)");
    }
    if server.is_none() {
        missing.push("redis-server is not installed (Debian package redis-server)");
    }
    (!missing.is_empty()).then(|| format!("skipped the Redis comparison: {}", missing.join("; ")))
}

/// Bytes of our server's pool: every `SET` of the run a new record (none reused), the index
/// of the keys, and a margin. A file on tmpfs takes only the pages written.
fn server_pool_bytes(plan: &ServicePlan) -> u64 {
    let sets = plan.requests * PIPELINES.len() as u64;
    (sets * 256 + plan.keyspace.min(sets) * 256 + (64 << 20)).next_multiple_of(1 << 20)
}

/// The network half: the three servers started, every cell measured, the servers stopped.
fn measure_network(plan: &ServicePlan, dir: &Path) -> Result<Vec<NetworkRow>, ServiceError> {
    let mut config = ServerConfig::new(dir.join("ours.pool"));
    // Port 0: the system picks a free port, which `local_addr` reports.
    config.bind = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    config.granularity = Some(Granularity::Emulated);
    config.pool_size = server_pool_bytes(plan);
    let ours = Server::start(config)?;
    let aof = RedisServer::start(&dir.join("redis-aof"), Persistence::AofAlways)?;
    let plain = RedisServer::start(&dir.join("redis-none"), Persistence::Nothing)?;
    let ports = [ours.local_addr().port(), aof.port(), plain.port()];
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
            value_bytes: embedded::VALUE_BYTES as u32,
        };
        let mut lines: [Option<(usize, BenchmarkLine)>; 3] = [None; 3];
        for position in 0..SERVERS.len() {
            let s = (cell + position) % SERVERS.len();
            lines[s] = Some((position, run_benchmark(SERVERS[s], ports[s], &args)?));
        }
        let ours_rate = lines[0].map_or(f64::NAN, |(_, l)| l.ops_per_sec);
        for (s, measured) in lines.into_iter().enumerate() {
            let Some((position, line)) = measured else {
                continue;
            };
            rows.push(NetworkRow {
                test: test.to_ascii_uppercase(),
                pipeline,
                server: SERVERS[s].to_string(),
                position,
                line,
                ours_over_this: ours_rate / line.ops_per_sec,
            });
        }
    }
    ours.shutdown();
    drop((aof, plain));
    Ok(rows)
}

/// Run the section: the plan for `quick`, a progress line through `line`, files under
/// `dir` named `{prefix}-service-*`.
pub fn run(
    quick: bool,
    dir: &Path,
    prefix: &str,
    line: impl Fn(&str),
) -> Result<ServiceResults, ServiceError> {
    let plan = if quick {
        ServicePlan::quick()
    } else {
        ServicePlan::full()
    };
    let redis_benchmark_version = tool_version("redis-benchmark");
    let redis_server_version = tool_version("redis-server");
    let skipped = missing_tools(&redis_benchmark_version, &redis_server_version);
    line(&format!(
        "service: redis-benchmark SET and GET, {CLIENTS} clients, pipelines 1 and 16, {} \
         requests each, against ours and redis-server with and without AOF{}; then {} keys \
         in process, ours against redb",
        plan.requests,
        if skipped.is_some() { " (skipped)" } else { "" },
        plan.records
    ));
    let scratch = ScratchDir::create(dir, prefix)?;
    let network = match &skipped {
        Some(_) => Vec::new(),
        None => measure_network(&plan, &scratch.0)?,
    };
    let embedded = embedded::measure(&scratch.0, prefix, plan.records)?;
    Ok(ServiceResults {
        machine: Machine::detect(),
        dir: dir.display().to_string(),
        medium: granularity_note(Granularity::Emulated, is_tmpfs(dir)),
        clients: CLIENTS,
        requests: plan.requests,
        keyspace: plan.keyspace,
        value_bytes: embedded::VALUE_BYTES,
        redis_server_version,
        redis_benchmark_version,
        network_skipped: skipped,
        network,
        redb_version: REDB_VERSION.to_string(),
        records: plan.records,
        embedded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redb_version_is_the_locked_one() {
        let lock = include_str!("../../../Cargo.lock");
        let locked = format!("name = \"redb\"\nversion = \"{REDB_VERSION}\"");
        assert!(lock.contains(&locked), "Cargo.lock has no {locked}");
    }

    #[test]
    fn a_missing_tool_is_named_with_its_package() {
        let v = Some("7.0.15".to_string());
        assert_eq!(missing_tools(&v, &v), None);
        let reason = missing_tools(&None, &v).unwrap();
        assert!(reason.contains("redis-benchmark") && reason.contains("redis-tools"));
        let reason = missing_tools(&v, &None).unwrap();
        assert!(reason.contains("Debian package redis-server"), "{reason}");
    }
}
