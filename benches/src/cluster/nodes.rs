//! The section's three nodes: each a process of this very binary (`pmem-bench` started with
//! [`NODE_COMMAND`] first runs one `pmem-kv-cluster` node: [`serve_if_asked`]), so the node
//! that is measured is always the benchmark's own build and there is no second program to
//! find. Loopback ports, pools and logs in the section's directory.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use super::resp::{info_fields, Connection, Reply};
use super::ClusterBenchError;
use crate::service::redis::free_port;

/// The first argument that makes `pmem-bench` a cluster node.
pub const NODE_COMMAND: &str = "cluster-node";
/// The cluster's name (recorded in each node's pool).
const CLUSTER_NAME: &str = "pmem-bench";
/// The nodes' Raft timing: `pmem-kv-cluster`'s defaults, named in the report.
pub const HEARTBEAT_MS: u64 = 100;
/// The shortest election timeout (the longest is twice it).
pub const ELECTION_TIMEOUT_MS: u64 = 500;
/// How long a node may take to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one request to a node may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// If this process was started as a node (`pmem-bench cluster-node <pmem-kv-cluster's
/// arguments>`), run the node until it is stopped and return its exit code.
pub fn serve_if_asked() -> Option<ExitCode> {
    let mut args = std::env::args_os();
    let _program = args.next();
    if args.next().as_deref() != Some(OsStr::new(NODE_COMMAND)) {
        return None;
    }
    let program = OsString::from("pmem-kv-cluster");
    Some(pmem_kv_cluster::cli::run(
        std::iter::once(program).chain(args),
    ))
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// One node: its addresses and files, its process while it runs.
pub struct NodeProcess {
    /// The node's id (1, 2, 3).
    pub id: u64,
    /// Where it serves Raft.
    pub raft: SocketAddr,
    /// Where it serves clients.
    pub client: SocketAddr,
    pool: PathBuf,
    log: PathBuf,
    pool_mib: u64,
    program: PathBuf,
    child: Option<Child>,
}

impl NodeProcess {
    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// Start the process (its pool reopened if it exists) and wait until it answers `PING`.
    pub fn start(&mut self) -> Result<(), ClusterBenchError> {
        let io = |what: String| move |source| ClusterBenchError::Io { what, source };
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io(format!("open {}", self.log.display())))?;
        let mut child = Command::new(&self.program)
            .arg(NODE_COMMAND)
            .args(["--cluster", CLUSTER_NAME, "--node-id", &self.id.to_string()])
            .args(["--raft-addr", &self.raft.to_string()])
            .args(["--redis-addr", &self.client.to_string()])
            .arg("--pool")
            .arg(&self.pool)
            .args(["--pool-size-mib", &self.pool_mib.to_string()])
            .args(["--granularity", "emulated"])
            .args(["--heartbeat-ms", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout-ms", &ELECTION_TIMEOUT_MS.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(io(format!(
                "start node {} ({})",
                self.id,
                self.program.display()
            )))?;
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(ClusterBenchError::NodeExited {
                    node: self.id,
                    status,
                    log: self.log_text(),
                });
            }
            let pong = self.request(&[&b"PING"[..]]);
            if matches!(pong, Ok(Reply::Status(ref s)) if s == "PONG") {
                self.child = Some(child);
                return Ok(());
            }
            if start.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ClusterBenchError::NodeNotReady {
                    node: self.id,
                    secs: START_TIMEOUT.as_secs(),
                    log: self.log_text(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether its process runs.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL (std's `Child::kill` on Unix) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// One command on a fresh connection.
    pub fn request(&self, args: &[&[u8]]) -> std::io::Result<Reply> {
        Connection::open(self.client, REQUEST_TIMEOUT)?.command(args)
    }

    /// `INFO raft` as a map, if the node answers it.
    pub fn raft_info(&self) -> Option<BTreeMap<String, String>> {
        match self.request(&[&b"INFO"[..], &b"raft"[..]]).ok()? {
            Reply::Bulk(Some(text)) => Some(info_fields(&text).into_iter().collect()),
            _ => None,
        }
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One `INFO raft` field as a number.
pub fn field(info: &BTreeMap<String, String>, name: &str) -> Option<u64> {
    info.get(name)?.parse().ok()
}

/// Three nodes on loopback, made one cluster.
pub struct Cluster {
    /// The nodes, ids 1, 2, 3 in order.
    pub nodes: Vec<NodeProcess>,
}

impl Cluster {
    /// Start three nodes of `program` (pools of `pool_mib` MiB in `dir`), make the cluster
    /// (`CLUSTER RAFT INIT` of all three, sent to node 1) and wait for its leader.
    pub fn start(program: &Path, dir: &Path, pool_mib: u64) -> Result<Cluster, ClusterBenchError> {
        let mut nodes = Vec::new();
        for id in 1..=3u64 {
            nodes.push(NodeProcess {
                id,
                raft: loopback(free_port()?),
                client: loopback(free_port()?),
                pool: dir.join(format!("node{id}.pool")),
                log: dir.join(format!("node{id}.log")),
                pool_mib,
                program: program.to_path_buf(),
                child: None,
            });
        }
        for node in &mut nodes {
            node.start()?;
        }
        let texts: Vec<String> = nodes
            .iter()
            .flat_map(|n| [n.id.to_string(), n.raft.to_string(), n.client.to_string()])
            .collect();
        let mut init: Vec<&[u8]> = vec![&b"CLUSTER"[..], &b"RAFT"[..], &b"INIT"[..]];
        init.extend(texts.iter().map(|t| t.as_bytes()));
        let reply = nodes[0]
            .request(&init)
            .map_err(|source| ClusterBenchError::Io {
                what: "send CLUSTER RAFT INIT to node 1".into(),
                source,
            })?;
        if reply != Reply::Status("OK".into()) {
            return Err(ClusterBenchError::Refused {
                what: "CLUSTER RAFT INIT".into(),
                reply: format!("{reply:?}"),
            });
        }
        let cluster = Cluster { nodes };
        cluster.leader(Duration::from_secs(30))?;
        Ok(cluster)
    }

    /// The index of the node every running node names as leader, once there is one
    /// (`INFO raft`).
    pub fn leader(&self, within: Duration) -> Result<usize, ClusterBenchError> {
        let deadline = Instant::now() + within;
        loop {
            let named: Vec<Option<String>> = self
                .nodes
                .iter()
                .filter(|n| n.running())
                .map(|n| n.raft_info().and_then(|i| i.get("raft_leader").cloned()))
                .collect();
            if let Some(Some(first)) = named.first() {
                let agreed = named.iter().all(|n| n.as_ref() == Some(first));
                let index = self.nodes.iter().position(|n| n.id.to_string() == *first);
                if let (true, Some(index)) = (agreed, index) {
                    if self.nodes[index].running() {
                        return Ok(index);
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(ClusterBenchError::NoLeader {
                    secs: within.as_secs(),
                    named: format!("{named:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The leader's Raft term (`INFO raft`), if it answers.
    pub fn term(&self, leader: usize) -> Option<u64> {
        self.nodes[leader]
            .raft_info()
            .and_then(|i| field(&i, "raft_term"))
    }

    /// The nodes' client addresses.
    pub fn clients(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(|n| n.client).collect()
    }
}
