//! Three `pmem-kv-cluster` processes on 127.0.0.1: a cluster-aware client (the `redis`
//! crate's cluster client) writes while the leader is killed with SIGKILL and restarted,
//! round after round, or cut off from the majority (a test partition) and healed;
//! afterwards every acknowledged write must be in every node's pool (read offline, after all
//! three are killed). Meanwhile recording clients SET and GET a few keys, and each key's
//! history must be linearizable (stateright's tester). Also: a pool of another cluster, or
//! with a gap in its log, is refused at start, a gap offered over the network is refused, and
//! bad Raft frames are refused with a reason and the connection closed, the node serving on.
//!
//! One file over 600 lines: the harness (node processes, the cluster) and the scenarios that
//! drive it are one piece.

use super::history;

use std::collections::BTreeMap;
use std::io::{Read, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use history::client::RecordingClient;
use history::History;
use stateright::semantics::register::RegisterOp;

use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use pmem_kv_cluster::identity::cluster_id;
use pmem_kv_cluster::log_store::core::LOG_MAP;
use pmem_kv_cluster::net::frame::{open, seal, Envelope, Request, Response, WIRE_VERSION};
use pmem_kv_cluster::types::{Entry, LogId, Vote};
use pmem_kv_cluster::StateMachine;
use pmem_structures::{Granularity, Store, StoreOptions};
use redis::cluster::{ClusterClient, ClusterConnection};
use redis::Commands;

const CLUSTER: &str = "kv-multi-process-test";

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// One node: its addresses, its pool, its process while it runs.
struct NodeProcess {
    id: u64,
    raft: SocketAddr,
    redis: SocketAddr,
    pool: PathBuf,
    child: Option<Child>,
}

impl NodeProcess {
    fn new(id: u64, dir: &Path) -> NodeProcess {
        NodeProcess {
            id,
            raft: free_addr(),
            redis: free_addr(),
            pool: dir.join(format!("node{id}.pool")),
            child: None,
        }
    }

    fn command(&self, cluster: &str) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pmem-kv-cluster"));
        command
            .args(["--cluster", cluster, "--node-id", &self.id.to_string()])
            .args(["--raft-addr", &self.raft.to_string()])
            .args(["--redis-addr", &self.redis.to_string()])
            .arg("--pool")
            .arg(&self.pool)
            .args(["--pool-size-mib", "32", "--granularity", "emulated"])
            .args(["--heartbeat-ms", "100", "--election-timeout-ms", "500"])
            .arg("--test-partitions")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    }

    /// Start the process and wait until it answers PING.
    fn start(&mut self) {
        let mut child = self.command(CLUSTER).spawn().expect("start a node");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut stderr = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
                panic!("node {} exited at start ({status}): {stderr}", self.id);
            }
            if self.ping() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {} does not answer",
                self.id
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.child = Some(child);
    }

    fn ping(&self) -> bool {
        self.connection()
            .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// SIGKILL (std's `Child::kill` on Unix), and reap it.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(format!("redis://{}/", self.redis))?;
        let conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(conn)
    }

    /// `INFO raft` as a map, if the node answers.
    fn raft_info(&self) -> Option<BTreeMap<String, String>> {
        let mut conn = self.connection().ok()?;
        let text: String = redis::cmd("INFO").arg("raft").query(&mut conn).ok()?;
        Some(
            text.lines()
                .filter_map(|line| line.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect(),
        )
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Cluster {
    _dir: tempfile::TempDir,
    nodes: Vec<NodeProcess>,
}

impl Cluster {
    /// Three nodes started and the cluster made (`CLUSTER RAFT INIT` on node 1).
    fn start() -> Cluster {
        let dir = scratch_dir();
        let mut nodes: Vec<NodeProcess> =
            (1..=3).map(|id| NodeProcess::new(id, dir.path())).collect();
        for node in &mut nodes {
            node.start();
        }
        let mut init = redis::cmd("CLUSTER");
        init.arg("RAFT").arg("INIT");
        for node in &nodes {
            init.arg(node.id)
                .arg(node.raft.to_string())
                .arg(node.redis.to_string());
        }
        let reply: String = init.query(&mut nodes[0].connection().unwrap()).unwrap();
        assert_eq!(reply, "OK");
        let cluster = Cluster { _dir: dir, nodes };
        cluster.leader(Duration::from_secs(20));
        cluster
    }

    /// The index of the node every running node names as leader, once there is one.
    fn leader(&self, within: Duration) -> usize {
        self.leader_among(&[0, 1, 2], within)
    }

    /// The index of the node of `among` that the running nodes of `among` name as leader,
    /// once there is one.
    fn leader_among(&self, among: &[usize], within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let named: Vec<Option<String>> = among
                .iter()
                .map(|&i| &self.nodes[i])
                .filter(|n| n.child.is_some())
                .map(|n| n.raft_info().and_then(|i| i.get("raft_leader").cloned()))
                .collect();
            if let Some(Some(first)) = named.first() {
                if first != "none" && named.iter().all(|n| n.as_ref() == Some(first)) {
                    let id: u64 = first.parse().unwrap();
                    let index = self.nodes.iter().position(|n| n.id == id).unwrap();
                    if self.nodes[index].child.is_some() && among.contains(&index) {
                        return index;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no agreed leader: {named:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A cluster client that knows of the nodes `through` only.
    fn client(&self, through: &[usize]) -> redis::RedisResult<ClusterConnection> {
        let urls: Vec<String> = through
            .iter()
            .map(|&i| format!("redis://{}/", self.nodes[i].redis))
            .collect();
        ClusterClient::builder(urls)
            .retries(2)
            .min_retry_wait(50)
            .max_retry_wait(200)
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_secs(5))
            .build()?
            .get_connection()
    }

    /// Until the applied indexes of all three nodes agree (and each has applied every
    /// entry it has).
    fn converge(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let infos: Vec<_> = self.nodes.iter().map(|n| n.raft_info()).collect();
            let applied: Vec<Option<String>> = infos
                .iter()
                .map(|i| {
                    i.as_ref()
                        .and_then(|i| i.get("raft_last_applied_index").cloned())
                })
                .collect();
            let last: Vec<Option<String>> = infos
                .iter()
                .map(|i| {
                    i.as_ref()
                        .and_then(|i| i.get("raft_last_log_index").cloned())
                })
                .collect();
            if applied.iter().all(|a| a.is_some() && *a == applied[0]) && last == applied {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the nodes do not converge: applied {applied:?}, last {last:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Writes unique keys through a cluster client, remembering the acknowledged ones.
struct Writer {
    conn: Option<ClusterConnection>,
    /// The nodes its client knows of.
    through: Vec<usize>,
    next: u64,
    acked: BTreeMap<String, String>,
    failed: u64,
}

impl Writer {
    fn new() -> Writer {
        Writer {
            conn: None,
            through: vec![0, 1, 2],
            next: 0,
            acked: BTreeMap::new(),
            failed: 0,
        }
    }

    /// Write through a client that knows of `through` only (a new client).
    fn through(&mut self, through: &[usize]) {
        self.through = through.to_vec();
        self.conn = None;
    }

    /// Write until `count` more are acknowledged (a failed write is unacknowledged: it may or
    /// may not be applied, and its key is never written again); panics past `within`.
    fn write(&mut self, cluster: &Cluster, count: usize, within: Duration) {
        let deadline = Instant::now() + within;
        let goal = self.acked.len() + count;
        while self.acked.len() < goal {
            assert!(
                Instant::now() < deadline,
                "only {} of {count} writes acknowledged in {within:?} ({} failed)",
                count - (goal - self.acked.len()),
                self.failed
            );
            if self.conn.is_none() {
                match cluster.client(&self.through) {
                    Ok(conn) => self.conn = Some(conn),
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
            }
            let (key, value) = (format!("key-{}", self.next), format!("value-{}", self.next));
            self.next += 1;
            let done: redis::RedisResult<()> = self.conn.as_mut().unwrap().set(&key, &value);
            match done {
                Ok(()) => {
                    self.acked.insert(key, value);
                }
                Err(_) => {
                    self.failed += 1;
                    self.conn = None;
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
}

/// Every acknowledged write, and each recorded key's last value, read from the pool of
/// each node (all killed first); and none of `absent`.
fn every_pool_has(
    cluster: &mut Cluster,
    acked: &BTreeMap<String, String>,
    last: &BTreeMap<String, Option<String>>,
    absent: &[&str],
) {
    for node in &mut cluster.nodes {
        node.kill();
    }
    for node in &cluster.nodes {
        let options = StoreOptions::new().granularity(Granularity::Emulated);
        let store = Store::open_with(&node.pool, &options).expect("open a node's pool");
        let sm = StateMachine::open(&store).expect("open its state machine");
        for (key, value) in acked {
            let got = sm.get(key.as_bytes()).unwrap();
            assert_eq!(
                got.as_deref(),
                Some(value.as_bytes()),
                "node {} lost the acknowledged {key}={value}",
                node.id
            );
        }
        for (key, value) in last {
            let got = sm.get(key.as_bytes()).unwrap();
            assert_eq!(
                got.as_deref(),
                value.as_ref().map(|v| v.as_bytes()),
                "node {} does not end with the last value read of {key}",
                node.id
            );
        }
        for key in absent {
            assert_eq!(
                sm.get(key.as_bytes()).unwrap(),
                None,
                "node {} has {key}",
                node.id
            );
        }
    }
}

/// Clients recording SETs and GETs of a few keys in a history, while a scenario runs.
struct Recording {
    history: Arc<History>,
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<()>>,
    keys: Vec<String>,
}

impl Recording {
    /// Three clients on four keys.
    fn start(cluster: &Cluster) -> Recording {
        let history = Arc::new(History::default());
        let stop = Arc::new(AtomicBool::new(false));
        let keys: Vec<String> = (0..4).map(|k| format!("register-{k}")).collect();
        let nodes: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.redis).collect();
        let clients = (0..3)
            .map(|id| {
                RecordingClient::new(id, nodes.clone(), keys.clone()).spawn(
                    history.clone(),
                    stop.clone(),
                    Duration::from_millis(15),
                )
            })
            .collect();
        Recording {
            history,
            stop,
            clients,
            keys,
        }
    }

    /// Stop the clients, read every key once more (recorded too), and check each key's
    /// history; the keys' last values.
    fn finish(self, cluster: &Cluster) -> BTreeMap<String, Option<String>> {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.join().unwrap();
        }
        let nodes: Vec<SocketAddr> = cluster.nodes.iter().map(|n| n.redis).collect();
        let mut reader = RecordingClient::new(3, nodes, self.keys.clone());
        let mut last = BTreeMap::new();
        for key in &self.keys {
            let deadline = Instant::now() + Duration::from_secs(20);
            let value = loop {
                let before = self.history.counts().0;
                reader.run(&self.history, key.clone(), RegisterOp::Read);
                if self.history.counts().0 > before {
                    break self
                        .history
                        .last_read(3, key)
                        .expect("the read just recorded");
                }
                assert!(Instant::now() < deadline, "no read of {key} succeeds");
            };
            last.insert(key.clone(), value);
        }
        let checked = self.history.check().unwrap_or_else(|e| panic!("{e}"));
        let (completed, pending) = self.history.counts();
        assert_eq!(checked.len(), self.keys.len(), "every key was used");
        // Said, not asserted: how much the checker saw.
        eprintln!(
            "linearizable: {completed} operations completed and {pending} of unknown outcome on {} keys",
            checked.len()
        );
        last
    }
}

fn kill_the_leader_repeatedly(rounds: usize) {
    let mut cluster = Cluster::start();
    let mut writer = Writer::new();
    let recording = Recording::start(&cluster);
    let within = Duration::from_secs(30);
    writer.write(&cluster, 20, within);
    let mut longest = Duration::ZERO;
    for _ in 0..rounds {
        let leader = cluster.leader(within);
        let killed = Instant::now();
        cluster.nodes[leader].kill();
        // The two others elect a leader and take writes.
        writer.write(&cluster, 1, within);
        longest = longest.max(killed.elapsed());
        writer.write(&cluster, 9, within);
        let second = cluster.leader(within);
        assert_ne!(second, leader);
        cluster.nodes[leader].start();
        writer.write(&cluster, 10, within);
    }
    cluster.converge();
    let last = recording.finish(&cluster);
    // Said, not asserted: a test never measures speed.
    eprintln!(
        "{rounds} rounds: {} writes acknowledged, {} failed (unacknowledged); at most {longest:?} from a SIGKILL of the leader to the next acknowledged write",
        writer.acked.len(),
        writer.failed
    );
    let acked = std::mem::take(&mut writer.acked);
    assert!(acked.len() >= 20 + 20 * rounds);
    every_pool_has(&mut cluster, &acked, &last, &[]);

    // A node started with a pool of this cluster under another cluster's name is refused.
    let node = &cluster.nodes[0];
    let mut stranger = node.command("another-cluster").spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = stranger.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            stranger.kill().unwrap();
            panic!("a node started with another cluster's pool is still running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    stranger
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains(&format!(
            "belongs to cluster \"{CLUSTER}\", not to cluster \"another-cluster\""
        )),
        "{stderr}"
    );

    // A pool whose log lost an entry in its middle is refused at start, and left as it was.
    let options = StoreOptions::new().granularity(Granularity::Emulated);
    let indexes = |store: &Store| -> Vec<u64> {
        let log: pmem_structures::BTreeMap<u64, Vec<u8>> = store.btree_map(LOG_MAP).unwrap();
        log.iter().map(|pair| pair.unwrap().0).collect()
    };
    let kept = {
        let store = Store::open_with(&node.pool, &options).unwrap();
        let mut kept = indexes(&store);
        assert!(kept.len() >= 3, "a log of {} entries", kept.len());
        let hole = kept.remove(kept.len() / 2);
        let log: pmem_structures::BTreeMap<u64, Vec<u8>> = store.btree_map(LOG_MAP).unwrap();
        log.remove(hole).unwrap();
        kept
    };
    let output = node.command(CLUSTER).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("the Raft log has a gap"), "{stderr}");
    let store = Store::open_with(&node.pool, &options).unwrap();
    assert_eq!(indexes(&store), kept, "the refused node changed its log");
    let sm = StateMachine::open(&store).unwrap();
    for (key, value) in &acked {
        assert_eq!(
            sm.get(key.as_bytes()).unwrap().as_deref(),
            Some(value.as_bytes())
        );
    }
}

#[test]
fn followers_send_clients_to_the_leader() {
    let cluster = Cluster::start();
    let leader = cluster.leader(Duration::from_secs(20));
    let follower = (leader + 1) % 3;
    let mut conn = cluster.nodes[follower].connection().unwrap();
    for (command, args) in [("SET", vec!["foo", "bar"]), ("GET", vec!["foo"])] {
        let reply: redis::RedisResult<redis::Value> =
            redis::cmd(command).arg(&args).query(&mut conn);
        let error = reply.expect_err("a follower serves no keyed command");
        assert_eq!(error.code(), Some("MOVED"), "{command}: {error}");
        assert_eq!(
            error.redirect_node(),
            Some((cluster.nodes[leader].redis.to_string().as_str(), 12182)),
            "{command}: {error}"
        );
    }
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("foo")
        .query(&mut conn)
        .unwrap();
    assert_eq!(slot, 12182);
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .unwrap();
    assert!(info.contains("role:slave"), "{info}");
    assert!(
        info.contains(&format!(
            "master_port:{}",
            cluster.nodes[leader].redis.port()
        )),
        "{info}"
    );
    let mut on_leader = cluster.nodes[leader].connection().unwrap();
    let () = on_leader.set("foo", "bar").unwrap();
    let got: String = on_leader.get("foo").unwrap();
    assert_eq!(got, "bar");
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut on_leader)
        .unwrap();
    assert!(
        info.contains("role:master") && info.contains("connected_slaves:2"),
        "{info}"
    );
}

#[test]
fn acknowledged_writes_survive_the_leader_killed_three_times() {
    kill_the_leader_repeatedly(3);
}

#[test]
#[ignore = "long: 20 rounds of SIGKILL, a minute to several on a loaded machine; run by hand (docs/cluster.md)"]
fn acknowledged_writes_survive_the_leader_killed_twenty_times() {
    kill_the_leader_repeatedly(20);
}

/// Cut node `index` off from `peers` (their indexes), or heal it (none).
fn cut(cluster: &Cluster, index: usize, peers: &[usize]) {
    let mut command = redis::cmd("CLUSTER");
    command.arg("RAFT");
    if peers.is_empty() {
        command.arg("HEAL");
    } else {
        command.arg("PARTITION");
        for &peer in peers {
            command.arg(cluster.nodes[peer].id);
        }
    }
    let reply: String = command
        .query(&mut cluster.nodes[index].connection().unwrap())
        .unwrap();
    assert_eq!(reply, "OK");
}

#[test]
fn a_leader_cut_off_from_the_majority_acknowledges_nothing_and_the_majority_goes_on() {
    let mut cluster = Cluster::start();
    let within = Duration::from_secs(30);
    let mut writer = Writer::new();
    let recording = Recording::start(&cluster);
    writer.write(&cluster, 10, within);

    let old = cluster.leader(within);
    let majority: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let cut_at = Instant::now();
    cut(&cluster, old, &majority);
    for &i in &majority {
        cut(&cluster, i, &[old]);
    }
    // The old leader acknowledges no write: it cannot reach a majority.
    let mut on_old = cluster.nodes[old].connection().unwrap();
    let old_write = std::thread::spawn(move || {
        on_old
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        on_old.set::<_, _, ()>("cut-off-write", "never-acknowledged")
    });
    // The majority elects a leader of its own and acknowledges writes.
    let new = cluster.leader_among(&majority, within);
    assert_ne!(new, old);
    writer.through(&majority);
    writer.write(&cluster, 1, within);
    let failover = cut_at.elapsed();
    writer.write(&cluster, 19, within);
    assert!(
        old_write.join().unwrap().is_err(),
        "a leader cut off from the majority acknowledged a write"
    );

    for i in 0..3 {
        cut(&cluster, i, &[]);
    }
    cluster.converge();
    // All three agree on a leader again (the new one, or one elected since).
    cluster.leader(within);
    writer.through(&[0, 1, 2]);
    writer.write(&cluster, 10, within);
    cluster.converge();
    let last = recording.finish(&cluster);
    eprintln!(
        "partition: {} writes acknowledged, {} failed; {failover:?} from the cut to the majority's first acknowledged write",
        writer.acked.len(),
        writer.failed
    );
    let acked = std::mem::take(&mut writer.acked);
    assert!(acked.len() >= 40);
    // The old leader's write never reached a majority: it is gone from every node.
    every_pool_has(&mut cluster, &acked, &last, &["cut-off-write"]);
}

#[test]
fn partitions_are_refused_on_a_node_not_started_for_tests() {
    let dir = scratch_dir();
    let mut node = NodeProcess::new(1, dir.path());
    let for_tests = node.command(CLUSTER);
    let mut plain = Command::new(for_tests.get_program());
    plain
        .args(for_tests.get_args().filter(|a| *a != "--test-partitions"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    node.child = Some(plain.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !node.ping() {
        assert!(Instant::now() < deadline, "the node does not answer");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut conn = node.connection().unwrap();
    let refused: redis::RedisResult<String> = redis::cmd("CLUSTER")
        .arg("RAFT")
        .arg("PARTITION")
        .arg(2)
        .query(&mut conn);
    let error = refused.expect_err("a partition on a node not started for tests");
    assert!(error.to_string().contains("--test-partitions"), "{error}");
}

/// Send `payload` with a length prefix of `len`.
fn send(socket: &mut TcpStream, len: u32, payload: &[u8]) {
    socket.write_all(&len.to_be_bytes()).unwrap();
    socket.write_all(payload).unwrap();
}

/// The next reply frame, or `None` at the end of the connection.
fn receive(socket: &mut TcpStream) -> Option<Response> {
    let mut len = [0u8; 4];
    match socket.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
        Err(e) => panic!("reading a reply: {e}"),
    }
    let mut frame = vec![0u8; u32::from_be_bytes(len) as usize];
    socket.read_exact(&mut frame).unwrap();
    Some(open(cluster_id(CLUSTER), &frame).expect("a reply frame of the node's cluster"))
}

fn vote_request(to: u64) -> Envelope {
    Envelope {
        from: 7,
        to,
        request: Request::Vote(openraft::raft::VoteRequest::new(Vote::new(1, 7), None)),
    }
}

/// What a bad peer sends.
type BadFrame<'a> = Box<dyn Fn(&mut TcpStream) + 'a>;

#[test]
fn bad_raft_frames_are_refused_with_a_reason_and_the_connection_closed() {
    let dir = scratch_dir();
    let mut node = NodeProcess::new(1, dir.path());
    node.start();
    let ours = cluster_id(CLUSTER);
    let framed = |cluster: u128, envelope: &Envelope| seal(cluster, envelope).unwrap().to_vec();

    let mut wrong_version = framed(ours, &vote_request(1));
    wrong_version[0] = WIRE_VERSION + 1;
    let mut garbage = framed(ours, &vote_request(1))[..17].to_vec();
    garbage.extend_from_slice(&[0xff; 32]);
    let cases: Vec<(&str, BadFrame, &str)> = vec![
        (
            "another cluster",
            Box::new(|s| {
                let frame = framed(cluster_id("another-cluster"), &vote_request(1));
                send(s, frame.len() as u32, &frame)
            }),
            "reached a node of cluster",
        ),
        (
            "another version",
            Box::new(|s| send(s, wrong_version.len() as u32, &wrong_version)),
            "wire version",
        ),
        (
            "another node id",
            Box::new(|s| {
                let frame = framed(ours, &vote_request(9));
                send(s, frame.len() as u32, &frame)
            }),
            "for node 9 reached node 1",
        ),
        (
            "a malformed message",
            Box::new(|s| send(s, garbage.len() as u32, &garbage)),
            "does not decode",
        ),
        (
            "a short frame",
            Box::new(|s| send(s, 3, &[WIRE_VERSION, 0, 0])),
            "shorter than its 17-byte header",
        ),
        (
            "an oversized frame",
            Box::new(|s| send(s, u32::MAX, &[0; 64])),
            "longer than the limit",
        ),
        (
            "a truncated frame",
            Box::new(|s| {
                send(s, 100, &[WIRE_VERSION; 10]);
                s.shutdown(std::net::Shutdown::Write).unwrap();
            }),
            "ended inside a Raft RPC frame",
        ),
    ];
    for (what, bad, reason) in &cases {
        let mut socket = TcpStream::connect(node.raft).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        bad(&mut socket);
        match receive(&mut socket) {
            Some(Response::Refused(text)) => {
                assert!(text.contains(reason), "{what}: refused with {text:?}")
            }
            other => panic!("{what}: answered {other:?}"),
        }
        assert!(
            receive(&mut socket).is_none(),
            "{what}: the connection stays open"
        );
    }

    // The node serves on: a good request is answered, and so are clients.
    let mut socket = TcpStream::connect(node.raft).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let frame = framed(ours, &vote_request(1));
    send(&mut socket, frame.len() as u32, &frame);
    assert!(
        matches!(receive(&mut socket), Some(Response::Vote(_))),
        "a good vote request is answered"
    );
    assert!(node.ping(), "the node still serves clients");
    assert!(node.child.as_mut().unwrap().try_wait().unwrap().is_none());

    // Entries that would leave a gap after the node's (empty) log are answered with a
    // conflict, and nothing is appended.
    let at =
        |index: u64| -> LogId { openraft::testing::log_id::<pmem_kv_cluster::KvRaft>(1, 7, index) };
    let gap = Envelope {
        from: 7,
        to: 1,
        request: Request::Append(AppendEntriesRequest {
            vote: Vote::new_committed(1, 7),
            prev_log_id: Some(at(9)),
            entries: vec![Entry {
                log_id: at(10),
                payload: openraft::EntryPayload::Blank,
            }],
            leader_commit: Some(at(10)),
        }),
    };
    let frame = framed(ours, &gap);
    send(&mut socket, frame.len() as u32, &frame);
    assert!(
        matches!(
            receive(&mut socket),
            Some(Response::Append(AppendEntriesResponse::Conflict))
        ),
        "a gap is a conflict"
    );
    let info = node.raft_info().expect("the node answers INFO raft");
    assert_eq!(info["raft_last_log_index"], "0", "{info:?}");
}
