//! Nodes started in this process (`Node::start`, what the binary runs) over TCP on loopback,
//! driven through their client port: `CLUSTER RAFT ADD-LEARNER` answers once the learner has
//! caught up, by a snapshot past one write batch's limit when the leader's log is purged;
//! for a learner that never answers it gives up once the learner timeout has passed, with
//! an error that says so, the node staying a learner and the leader serving on. Pipelined
//! requests (runs of writes proposed together, runs of reads behind one read index) take
//! effect in the order sent.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use openraft::type_config::async_runtime::WatchReceiver;
use pmem_kv_cluster::{Node, NodeConfig};
use pmem_structures::{Granularity, MAX_BATCH_CHANGES};
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn config(dir: &Path, id: u64) -> NodeConfig {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let pool = dir.join(format!("node{id}.pool"));
    let mut config = NodeConfig::new("kv-nodes-test", id, any, any, pool);
    config.pool_size = 128 << 20;
    config.granularity = Some(Granularity::Emulated);
    config
}

fn connection(node: &Node) -> redis::Connection {
    let client = redis::Client::open(format!("redis://{}/", node.member().client)).unwrap();
    let conn = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    conn
}

/// Make `node` a cluster of one and wait until it leads and its first membership is
/// committed (a write after it is).
fn init_alone(rt: &Runtime, node: &Node, conn: &mut redis::Connection) {
    let ok: String = redis::cmd("CLUSTER")
        .arg("RAFT")
        .arg("INIT")
        .query(conn)
        .unwrap();
    assert_eq!(ok, "OK");
    let id = node.raft().metrics().borrow_watched().id;
    rt.block_on(
        node.raft()
            .wait(Some(Duration::from_secs(20)))
            .metrics(|m| m.current_leader == Some(id), "it leads"),
    )
    .unwrap();
    let ok: String = redis::cmd("SET")
        .arg("initialized")
        .arg("yes")
        .query(conn)
        .unwrap();
    assert_eq!(ok, "OK");
}

fn add_learner(
    conn: &mut redis::Connection,
    id: u64,
    raft: &str,
    client: &str,
) -> redis::RedisResult<String> {
    redis::cmd("CLUSTER")
        .arg("RAFT")
        .arg("ADD-LEARNER")
        .arg(id)
        .arg(raft)
        .arg(client)
        .query(conn)
}

#[test]
fn add_learner_gives_up_after_the_learner_timeout_and_says_why() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let mut leader_config = config(dir.path(), 1);
    leader_config.learner_timeout = Duration::from_millis(1500);
    let leader = rt.block_on(Node::start(leader_config)).unwrap();
    let mut conn = connection(&leader);
    init_alone(&rt, &leader, &mut conn);

    // Nobody listens at this address once the listener is gone.
    let nobody = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let started = Instant::now();
    let e = add_learner(&mut conn, 9, &nobody, &nobody).expect_err("nobody runs node 9");
    let waited = started.elapsed();
    let text = e.to_string();
    assert!(
        text.contains("node 9 was added as a learner but has not caught up with the log in 1.5s"),
        "{text}"
    );
    assert!(
        text.contains("it stays a learner") && text.contains(&nobody),
        "{text}"
    );
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
    let info: String = redis::cmd("INFO").arg("raft").query(&mut conn).unwrap();
    assert!(info.contains("raft_learners:9\r\n"), "{info}");
    // The leader goes on taking writes (a learner has no vote).
    let ok: String = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    assert_eq!(ok, "OK");
    rt.block_on(leader.shutdown());
}

#[test]
fn a_learner_catches_up_by_a_snapshot_past_one_write_batchs_limit() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let leader = rt.block_on(Node::start(config(dir.path(), 1))).unwrap();
    let mut conn = connection(&leader);
    init_alone(&rt, &leader, &mut conn);

    let keys = MAX_BATCH_CHANGES + 3_000;
    let value = |i: usize| format!("value-{i}");
    for start in (0..keys).step_by(1000) {
        let mut mset = redis::cmd("MSET");
        for i in start..(start + 1000).min(keys) {
            mset.arg(format!("key:{i:06}")).arg(value(i));
        }
        let ok: String = mset.query(&mut conn).unwrap();
        assert_eq!(ok, "OK");
    }
    // The log behind a snapshot is purged: a new node can only start from the snapshot.
    let raft = leader.raft();
    let last = raft.metrics().borrow_watched().last_log_index.unwrap();
    rt.block_on(async {
        raft.trigger().snapshot().await.unwrap();
        raft.wait(Some(Duration::from_secs(60)))
            .metrics(
                |m| m.snapshot.as_ref().is_some_and(|s| s.index >= last),
                "a snapshot of the whole log",
            )
            .await
            .unwrap();
        raft.trigger().purge_log(last).await.unwrap();
        raft.wait(Some(Duration::from_secs(60)))
            .metrics(
                |m| m.purged.as_ref().is_some_and(|p| p.index >= last),
                "the log purged",
            )
            .await
            .unwrap();
    });

    let learner = rt.block_on(Node::start(config(dir.path(), 2))).unwrap();
    let member = learner.member().clone();
    let ok = add_learner(&mut conn, 2, &member.raft, &member.client).unwrap();
    assert_eq!(ok, "OK");
    // The leader has seen the learner take the log; the learner's own metrics follow.
    let metrics = rt
        .block_on(learner.raft().wait(Some(Duration::from_secs(30))).metrics(
            |m| m.last_applied.as_ref().is_some_and(|l| l.index >= last),
            "the learner applies the leader's log",
        ))
        .unwrap();
    assert!(
        metrics.snapshot.as_ref().is_some_and(|s| s.index >= last),
        "the learner caught up without the snapshot: {:?}",
        metrics.snapshot
    );
    let (meta, pairs) = learner.state_machine().read_all().unwrap();
    assert!(meta.last_log_id.is_some_and(|l| l.index >= last));
    // The keys written, and the one init_alone wrote before them (first in key order).
    assert_eq!(pairs.len(), keys + 1);
    assert_eq!(pairs[0], (b"initialized".to_vec(), b"yes".to_vec()));
    for (i, (key, got)) in pairs[1..].iter().enumerate() {
        assert_eq!(key, format!("key:{i:06}").as_bytes());
        assert_eq!(got, value(i).as_bytes(), "key:{i:06}");
    }
    rt.block_on(async {
        learner.shutdown().await;
        leader.shutdown().await;
    });
}

#[test]
fn pipelined_writes_and_reads_take_effect_in_the_order_sent() {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let leader = rt.block_on(Node::start(config(dir.path(), 1))).unwrap();
    let mut conn = connection(&leader);
    init_alone(&rt, &leader, &mut conn);
    // Runs of writes and of reads, each read after the writes sent before it, an unknown
    // command and a write the state machine refuses in between: sent at once, one reply
    // each, in order.
    let commands: [&[&str]; 14] = [
        &["SET", "a", "1"],
        &["GET", "a"],
        &["SET", "a", "2"],
        &["GET", "a"],
        &["INCR", "n"],
        &["INCR", "n"],
        &["GET", "n"],
        &["APPEND", "a", "x"],
        &["NOSUCH"],
        &["INCR", "a"],
        &["EXISTS", "a", "n", "b"],
        &["MGET", "a", "b"],
        &["DEL", "a"],
        &["GET", "a"],
    ];
    let mut request = Vec::new();
    for command in commands {
        request.extend_from_slice(format!("*{}\r\n", command.len()).as_bytes());
        for arg in command {
            request.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
        }
    }
    let expected = "+OK\r\n$1\r\n1\r\n+OK\r\n$1\r\n2\r\n:1\r\n:2\r\n$1\r\n2\r\n:2\r\n\
        -ERR unknown command 'NOSUCH'\r\n-ERR value is not an integer or out of range\r\n\
        :2\r\n*2\r\n$2\r\n2x\r\n$-1\r\n:1\r\n$-1\r\n";
    let mut socket = TcpStream::connect(&leader.member().client).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    socket.write_all(&request).unwrap();
    let mut replies = vec![0; expected.len()];
    socket.read_exact(&mut replies).unwrap();
    assert_eq!(String::from_utf8_lossy(&replies), expected);
    drop(socket);
    rt.block_on(leader.shutdown());
}
