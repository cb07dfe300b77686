//! Three nodes in one process, each with its log store and state machine on its own pool
//! file, over an in-memory network that can take a node off (its RPCs unreachable both
//! ways). Writes go through the leader; the leader is killed; the two others elect a new one
//! that takes more writes; the old leader is restarted from its pool file and catches up.
//! Every acknowledged write must be on every node, with its value.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::error::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::type_config::async_runtime::WatchReceiver;
use openraft::AnyError;
use openraft::{Config, SnapshotPolicy};
use pmem_kv_cluster::state_machine::core::SmMaps;
use pmem_kv_cluster::state_machine::{Snapshot, SnapshotData};
use pmem_kv_cluster::types::Vote;
use pmem_kv_cluster::{Condition, KvRaft, LogStore, Member, NodeId, Outcome, StateMachine, Write};
use pmem_structures::{Store, StoreOptions};

type Raft = openraft::Raft<KvRaft, StateMachine>;

/// The nodes reachable in the network, by id.
#[derive(Clone, Default)]
struct Router {
    nodes: Arc<Mutex<BTreeMap<NodeId, Raft>>>,
}

impl Router {
    fn node(&self, id: NodeId) -> Option<Raft> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }
}

fn unreachable(why: &str) -> Unreachable<KvRaft> {
    Unreachable::new(&AnyError::error(why))
}

/// A node's client of one peer.
struct Peer {
    router: Router,
    from: NodeId,
    to: NodeId,
}

impl Peer {
    /// The peer, if both ends are in the network.
    fn target(&self) -> Result<Raft, Unreachable<KvRaft>> {
        if self.router.node(self.from).is_none() {
            return Err(unreachable("the sender is off the network"));
        }
        self.router
            .node(self.to)
            .ok_or_else(|| unreachable("the peer is off the network"))
    }
}

impl RaftNetworkV2<KvRaft> for Peer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KvRaft>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<KvRaft>, RPCError<KvRaft>> {
        let target = self.target()?;
        target
            .append_entries(rpc)
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<KvRaft>,
        _option: RPCOption,
    ) -> Result<VoteResponse<KvRaft>, RPCError<KvRaft>> {
        let target = self.target()?;
        target
            .vote(rpc)
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<KvRaft>, StreamingError<KvRaft>> {
        let target = self.target()?;
        target
            .install_full_snapshot(vote, snapshot)
            .await
            .map_err(|e| StreamingError::Unreachable(Unreachable::new(&e)))
    }
}

struct Network {
    router: Router,
    from: NodeId,
}

impl RaftNetworkFactory<KvRaft> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, _node: &Member) -> Peer {
        Peer {
            router: self.router.clone(),
            from: self.from,
            to: target,
        }
    }
}

/// Short timeouts; `snapshot_every`: a snapshot after that many entries, and the log purged
/// up to it (none: openraft's defaults).
fn config(snapshot_every: Option<u64>) -> Arc<Config> {
    let mut config = Config {
        cluster_name: "kv-cluster-test".into(),
        heartbeat_interval: 50,
        election_timeout_min: 300,
        election_timeout_max: 600,
        ..Default::default()
    };
    if let Some(every) = snapshot_every {
        config.snapshot_policy = SnapshotPolicy::LogsSinceLast(every);
        config.max_in_snapshot_log_to_keep = 0;
        config.purge_batch_size = 1;
    }
    Arc::new(config.validate().expect("a valid config"))
}

/// Start node `id` on the store at `path` (made if new) and put it on the network; its
/// state machine's maps for reading what it applied.
async fn start(
    router: &Router,
    id: NodeId,
    path: &Path,
    snapshot_every: Option<u64>,
) -> (Raft, SmMaps) {
    let store = if path.exists() {
        Store::open(path).expect("reopen the node's pool")
    } else {
        Store::create(path, 32 << 20, &StoreOptions::new()).expect("make the node's pool")
    };
    let log = LogStore::open(&store).expect("open the log");
    let sm = StateMachine::open(&store).expect("open the state machine");
    let maps = sm.maps();
    let network = Network {
        router: router.clone(),
        from: id,
    };
    let raft = Raft::new(id, config(snapshot_every), network, log, sm)
        .await
        .expect("start the node");
    router.nodes.lock().unwrap().insert(id, raft.clone());
    (raft, maps)
}

async fn wait_for_leader(raft: &Raft, not: Option<NodeId>) -> NodeId {
    let metrics = raft
        .wait(Some(Duration::from_secs(20)))
        .metrics(
            |m| m.current_leader.is_some() && m.current_leader != not,
            "a leader is elected",
        )
        .await
        .expect("a leader within 20 s");
    metrics.current_leader.unwrap()
}

/// `SET key value` through the leader, as a client does it: asked of the leader `any` node
/// names, again after a pause while there is none or it sends the client on (a leader not
/// yet sure of its lease). The index it was applied at once acknowledged.
async fn set(router: &Router, any: NodeId, key: &str, value: &str) -> u64 {
    let write = Write::Set {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        when: Condition::Always,
        get: false,
        integer_reply: false,
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let asked = router.node(any).expect("the node asked is on the network");
        let leader = asked.current_leader().await.and_then(|id| router.node(id));
        if let Some(leader) = leader {
            match leader.client_write(write.clone()).await {
                Ok(response) => {
                    assert_eq!(response.data, Outcome::Ok);
                    return response.log_id.index;
                }
                Err(e) if e.forward_to_leader().is_some() => {}
                Err(e) => panic!("the leader refused {key}: {e}"),
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no leader took {key} in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn has_every_write(
    raft: &Raft,
    maps: &SmMaps,
    upto: u64,
    acked: &BTreeMap<String, String>,
    who: &str,
) {
    raft.wait(Some(Duration::from_secs(20)))
        .applied_index_at_least(Some(upto), format!("{who} applies up to {upto}"))
        .await
        .unwrap_or_else(|e| panic!("{who}: {e}"));
    for (key, value) in acked {
        let got = maps.get(key.as_bytes()).unwrap();
        assert_eq!(
            got.as_deref(),
            Some(value.as_bytes()),
            "{who} lost the acknowledged {key}={value}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_the_leaders_death_and_reach_its_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = |id: NodeId| -> PathBuf { dir.path().join(format!("node{id}.pool")) };
    let router = Router::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        nodes.insert(id, start(&router, id, &path(id), None).await);
    }
    let members: BTreeMap<NodeId, Member> = (1..=3).map(|id| (id, Member::default())).collect();
    nodes[&1]
        .0
        .initialize(members)
        .await
        .expect("initialize the cluster");

    let first = wait_for_leader(&nodes[&1].0, None).await;
    let mut acked = BTreeMap::new();
    let mut last = 0;
    for i in 0..20 {
        let (key, value) = (format!("k{i}"), format!("v{i}-{first}"));
        last = set(&router, first, &key, &value).await;
        acked.insert(key, value);
    }

    // The leader dies: off the network, shut down, its handles dropped (its pool file stays).
    router.nodes.lock().unwrap().remove(&first);
    let (dead, dead_maps) = nodes.remove(&first).unwrap();
    dead.shutdown().await.expect("shut the leader down");
    drop((dead, dead_maps));

    let survivor = *nodes.keys().next().unwrap();
    let second = wait_for_leader(&nodes[&survivor].0, Some(first)).await;
    assert_ne!(second, first);
    for i in 10..30 {
        // Overwrites of the first writes and new keys.
        let (key, value) = (format!("k{i}"), format!("v{i}-{second}"));
        last = set(&router, second, &key, &value).await;
        acked.insert(key, value);
    }
    for (id, (raft, maps)) in &nodes {
        has_every_write(raft, maps, last, &acked, &format!("node {id}")).await;
    }

    // The old leader comes back from its pool file and catches up.
    let (raft, maps) = start(&router, first, &path(first), None).await;
    has_every_write(
        &raft,
        &maps,
        last,
        &acked,
        &format!("node {first} restarted"),
    )
    .await;
    let members: BTreeSet<NodeId> = raft
        .metrics()
        .borrow_watched()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    assert_eq!(members, (1..=3).collect());

    for (_, (raft, _)) in nodes {
        raft.shutdown().await.unwrap();
    }
    raft.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_while_the_log_is_purged_catches_up_by_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let router = Router::default();
    let mut nodes = BTreeMap::new();
    for id in 1..=3 {
        let path = dir.path().join(format!("node{id}.pool"));
        nodes.insert(id, start(&router, id, &path, Some(10)).await);
    }
    let members: BTreeMap<NodeId, Member> = (1..=3).map(|id| (id, Member::default())).collect();
    nodes[&1]
        .0
        .initialize(members)
        .await
        .expect("initialize the cluster");
    let leader = wait_for_leader(&nodes[&1].0, None).await;
    let mut acked = BTreeMap::new();
    let mut last = set(&router, leader, "before", "cut").await;
    acked.insert("before".to_string(), "cut".to_string());

    // A follower is cut off (its RPCs unreachable both ways) while 60 writes go in and the
    // two others snapshot and purge their logs past what it has.
    let cut = (1..=3).find(|&id| id != leader).unwrap();
    let cut_raft = router.nodes.lock().unwrap().remove(&cut).unwrap();
    for i in 0..60 {
        let (key, value) = (format!("k{}", i % 25), format!("v{i}"));
        last = set(&router, leader, &key, &value).await;
        acked.insert(key, value);
    }
    let metrics = nodes[&leader]
        .0
        .wait(Some(Duration::from_secs(20)))
        .metrics(
            |m| m.purged.is_some_and(|p| p.index > 20),
            "the leader purges its log",
        )
        .await
        .expect("the leader purges its log past the cut node's");
    assert!(metrics.snapshot.is_some(), "a purge follows a snapshot");

    // Back on the network: the entries it lacks are gone, so it takes the leader's snapshot.
    router.nodes.lock().unwrap().insert(cut, cut_raft);
    for (id, (raft, maps)) in &nodes {
        has_every_write(raft, maps, last, &acked, &format!("node {id}")).await;
    }
    let cut_metrics = nodes[&cut].0.metrics().borrow_watched().clone();
    assert!(
        cut_metrics.snapshot.is_some_and(|s| s.index > 1),
        "node {cut} caught up without a snapshot: {:?}",
        cut_metrics.snapshot
    );
    for (_, (raft, _)) in nodes {
        raft.shutdown().await.unwrap();
    }
}
