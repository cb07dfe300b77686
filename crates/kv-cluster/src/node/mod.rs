//! A replicated node: its store (log, state machine, identity), its Raft, the listener for
//! its peers' RPCs and the Redis-protocol listener for clients.
//!
//! * `front`: client connections (the standalone server's framing and replies);
//! * `pipeline`: a connection's consecutive writes proposed together, consecutive reads
//!   behind one read index;
//! * `commands`: the keyed commands, routed to the leader (`-MOVED`), writes through
//!   `client_write`, reads behind a read index;
//! * `admin`: `CLUSTER` (slots, shards, nodes, and the Raft membership commands);
//! * `info`: `INFO` with its `replication` and `raft` sections;
//! * `slot`: a key's hash slot, as Redis computes it.

mod admin;
mod commands;
mod front;
mod info;
mod pipeline;
mod routing;
mod session;
pub mod slot;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{Config, ReadPolicy};
use pmem_kv_server::Limits;
use pmem_structures::{Granularity, Store, StoreOptions};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::ClusterError;
use crate::identity::{claim, cluster_id};
use crate::net::{server, Cut, RpcService, TcpNetwork};
use crate::state_machine::core::SmMaps;
use crate::types::{Member, NodeId};
use crate::{LogStore, Raft, StateMachine};

/// How to start a node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// The cluster's name (its id on the wire is a hash of it); recorded in the pool.
    pub cluster: String,
    /// This node's id, unique in the cluster; recorded in the pool.
    pub node_id: NodeId,
    /// Where peers' RPCs are served (and what the node's member record names).
    pub raft_addr: SocketAddr,
    /// Where clients are served (what `-MOVED` and `CLUSTER SLOTS` name).
    pub redis_addr: SocketAddr,
    /// The pool file: opened if it exists, created (`pool_size` bytes) otherwise.
    pub pool: PathBuf,
    /// The size of a pool the node creates.
    pub pool_size: u64,
    /// Force a granularity (`None`: detected from the file; tmpfs wants `Emulated`).
    pub granularity: Option<Granularity>,
    /// The leader's heartbeat period.
    pub heartbeat: Duration,
    /// A follower waits a random time in this range without a heartbeat before it stands
    /// for election.
    pub election_timeout: (Duration, Duration),
    /// How a read is made linearizable: `ReadIndex` (a round of heartbeats per read) or
    /// `LeaseRead` (the leader's lease, weaker: it assumes bounded clock drift).
    pub read_policy: ReadPolicy,
    /// How long a write waits to be committed and applied before the client is told it is
    /// unconfirmed.
    pub write_timeout: Duration,
    /// How long `CLUSTER RAFT ADD-LEARNER` waits for the new node to catch up with the log
    /// before it answers an error (the node stays a learner).
    pub learner_timeout: Duration,
    /// Request limits (the standalone server's).
    pub limits: Limits,
    /// Serve `CLUSTER RAFT PARTITION`, the test-only cut of this node from named peers
    /// (refused unless set).
    pub test_partitions: bool,
}

impl NodeConfig {
    /// The defaults for node `node_id` of `cluster`.
    pub fn new(
        cluster: impl Into<String>,
        node_id: NodeId,
        raft_addr: SocketAddr,
        redis_addr: SocketAddr,
        pool: impl Into<PathBuf>,
    ) -> NodeConfig {
        NodeConfig {
            cluster: cluster.into(),
            node_id,
            raft_addr,
            redis_addr,
            pool: pool.into(),
            pool_size: 1 << 30,
            granularity: None,
            heartbeat: Duration::from_millis(100),
            election_timeout: (Duration::from_millis(500), Duration::from_millis(1000)),
            read_policy: ReadPolicy::ReadIndex,
            write_timeout: Duration::from_secs(10),
            learner_timeout: Duration::from_secs(60),
            limits: Limits::default(),
            test_partitions: false,
        }
    }

    fn raft_config(&self) -> Result<Arc<Config>, ClusterError> {
        let millis = |d: Duration| d.as_millis().min(u64::MAX as u128) as u64;
        let config = Config {
            cluster_name: self.cluster.clone(),
            heartbeat_interval: millis(self.heartbeat),
            election_timeout_min: millis(self.election_timeout.0),
            election_timeout_max: millis(self.election_timeout.1),
            ..Config::default()
        };
        let config = config.validate().map_err(|e| ClusterError::Io {
            what: format!("the Raft settings are refused: {e}"),
            source: std::io::ErrorKind::InvalidInput.into(),
        })?;
        Ok(Arc::new(config))
    }
}

/// What every client connection of a node shares.
pub(crate) struct NodeShared {
    pub(crate) raft: Raft,
    pub(crate) maps: SmMaps,
    pub(crate) me: NodeId,
    pub(crate) member: Member,
    pub(crate) cluster: String,
    pub(crate) cluster_id: u128,
    pub(crate) read_policy: ReadPolicy,
    pub(crate) write_timeout: Duration,
    pub(crate) learner_timeout: Duration,
    pub(crate) limits: Limits,
    /// The test partition, when `CLUSTER RAFT PARTITION` is served.
    pub(crate) cut: Option<Arc<Cut>>,
    pub(crate) granularity: Granularity,
    pub(crate) pool: PathBuf,
    pub(crate) started: Instant,
    pub(crate) clients: AtomicUsize,
    pub(crate) connections: AtomicU64,
}

/// A started node.
pub struct Node {
    shared: Arc<NodeShared>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Node {
    /// Bind both addresses, open the pool (refusing one of another cluster or node), start
    /// Raft and serve. Must run inside a tokio runtime.
    pub async fn start(config: NodeConfig) -> Result<Node, ClusterError> {
        let bind = |addr: SocketAddr, what: &'static str| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| ClusterError::Io {
                    what: format!("bind the {what} address {addr}"),
                    source,
                })
        };
        let raft_listener = bind(config.raft_addr, "Raft").await?;
        let redis_listener = bind(config.redis_addr, "client").await?;
        let member = Member {
            client: front::bound(&redis_listener)?.to_string(),
            raft: server::bound(&raft_listener)?.to_string(),
        };
        let raft_config = config.raft_config()?;

        let mut options = StoreOptions::new();
        if let Some(granularity) = config.granularity {
            options = options.granularity(granularity);
        }
        let store = Store::open_or_create(&config.pool, config.pool_size, &options)?;
        claim(&store, &config.pool, &config.cluster, config.node_id)?;
        let granularity = store.granularity();
        let log = LogStore::open(&store)?;
        let sm = StateMachine::open(&store)?;
        let maps = sm.maps();
        let cluster = cluster_id(&config.cluster);
        let cut = Arc::new(Cut::default());
        let network = TcpNetwork::new(cluster, config.node_id, cut.clone());
        let raft = Raft::new(config.node_id, raft_config, network, log, sm)
            .await
            .map_err(|e| ClusterError::Io {
                what: format!("start Raft: {e}"),
                source: std::io::ErrorKind::Other.into(),
            })?;

        let shared = Arc::new(NodeShared {
            raft: raft.clone(),
            maps,
            me: config.node_id,
            member,
            cluster: config.cluster.clone(),
            cluster_id: cluster,
            read_policy: config.read_policy,
            write_timeout: config.write_timeout,
            learner_timeout: config.learner_timeout,
            limits: config.limits,
            cut: config.test_partitions.then(|| cut.clone()),
            granularity,
            pool: config.pool.clone(),
            started: Instant::now(),
            clients: AtomicUsize::new(0),
            connections: AtomicU64::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        let service = RpcService {
            raft,
            cluster,
            me: config.node_id,
            cut,
        };
        let tasks = vec![
            tokio::spawn(server::serve(raft_listener, service, stopped.clone())),
            tokio::spawn(front::serve(redis_listener, shared.clone(), stopped)),
        ];
        Ok(Node {
            shared,
            stop,
            tasks,
        })
    }

    /// What clients and peers reach this node at (the bound addresses).
    pub fn member(&self) -> &Member {
        &self.shared.member
    }

    /// The node's Raft.
    pub fn raft(&self) -> &Raft {
        &self.shared.raft
    }

    /// The node's state machine as this node has applied it (reads through it are not
    /// linearizable: a follower may lag).
    pub fn state_machine(&self) -> &SmMaps {
        &self.shared.maps
    }

    /// Stop serving and shut Raft down (the store closes when the last handle goes).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        let _ = self.shared.raft.shutdown().await;
    }
}
