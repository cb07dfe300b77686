//! Failover, round after round: a writer thread sets fresh keys through the cluster as fast
//! as it is answered; the leader is killed with SIGKILL; the failover time is from the kill
//! to the first write sent after it that is acknowledged (through the two nodes left). The
//! killed node is then restarted from its pool and left to catch up before the next round.
//! At the end every acknowledged write is read back from the leader (linearizable reads):
//! one missing or with another value is a lost write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::nodes::{field, Cluster, REQUEST_TIMEOUT};
use super::resp::Reply;
use super::router::{Outcome, Router};
use super::ClusterBenchError;

/// How long a round may wait for a write to be acknowledged after the kill.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);
/// How long a restarted node may take to catch up.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);
/// Keys read back per `MGET`.
const CHECK_CHUNK: usize = 500;

/// One round.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverRound {
    /// The round, from 1.
    pub round: usize,
    /// The leader killed.
    pub killed: u64,
    /// The leader after it.
    pub new_leader: u64,
    /// From the kill to the first acknowledged write sent after it, milliseconds.
    pub failover_ms: f64,
    /// From the restart of the killed node to its catching up with the leader's commit
    /// index as it was then, milliseconds.
    pub catch_up_ms: f64,
}

/// The rounds and what became of the writes.
#[derive(Clone, Debug, Serialize)]
pub struct FailoverResults {
    /// The rounds, in order.
    pub rounds: Vec<FailoverRound>,
    /// Writes answered `+OK`.
    pub acknowledged: u64,
    /// Writes refused before being proposed (sent on, no leader).
    pub refused: u64,
    /// Writes of unknown outcome (a connection cut by the kill).
    pub in_doubt: u64,
    /// Acknowledged writes not read back with their value.
    pub lost: u64,
}

/// An acknowledged write: its number (key and value derive from it) and when it was sent
/// and answered.
#[derive(Clone, Copy)]
struct Ack {
    n: u64,
    sent: Instant,
    answered: Instant,
}

fn key(n: u64) -> String {
    format!("failover:{n}")
}

fn value(n: u64) -> String {
    format!("value-{n}")
}

/// The writer thread and what it shares.
struct Writer {
    acks: Arc<Mutex<Vec<Ack>>>,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(u64, u64)>,
}

impl Writer {
    fn start(cluster: &Cluster) -> Writer {
        let acks = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut router = Router::new(cluster.clients(), Duration::from_secs(2));
        let (shared, stopped) = (acks.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let (mut refused, mut in_doubt) = (0, 0);
            let mut n = 0;
            while !stopped.load(Ordering::Relaxed) {
                let sent = Instant::now();
                match router.set(key(n).as_bytes(), value(n).as_bytes()) {
                    Outcome::Acknowledged => {
                        let answered = Instant::now();
                        let mut acks = shared.lock().unwrap_or_else(|p| p.into_inner());
                        acks.push(Ack { n, sent, answered });
                    }
                    Outcome::Refused => {
                        refused += 1;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Outcome::InDoubt => {
                        in_doubt += 1;
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                n += 1;
            }
            (refused, in_doubt)
        });
        Writer { acks, stop, handle }
    }

    /// The first write sent at or after `since` and acknowledged, once there is one.
    fn first_ack_after(&self, since: Instant, limit: Duration) -> Option<Ack> {
        let deadline = since + limit;
        while Instant::now() < deadline {
            let acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(ack) = acks.iter().rev().take_while(|a| a.sent >= since).last() {
                return Some(*ack);
            }
            drop(acks);
            std::thread::sleep(Duration::from_millis(2));
        }
        None
    }

    fn stop(self) -> (Vec<Ack>, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let counts = self.handle.join().unwrap_or((0, 0));
        let acks = std::mem::take(&mut *self.acks.lock().unwrap_or_else(|p| p.into_inner()));
        (acks, counts.0, counts.1)
    }
}

/// Wait until node `index` has applied the log up to `index_at_least`.
fn catch_up(cluster: &Cluster, node: usize, at_least: u64) -> Result<(), ClusterBenchError> {
    let deadline = Instant::now() + CATCH_UP_LIMIT;
    loop {
        let applied = cluster.nodes[node]
            .raft_info()
            .and_then(|i| field(&i, "raft_last_applied_index"));
        if applied.is_some_and(|a| a >= at_least) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(ClusterBenchError::NoCatchUp {
                node: cluster.nodes[node].id,
                secs: CATCH_UP_LIMIT.as_secs(),
                applied,
                needed: at_least,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kill one leader and bring it back.
fn round(
    cluster: &mut Cluster,
    writer: &Writer,
    number: usize,
) -> Result<FailoverRound, ClusterBenchError> {
    let leader = cluster.leader(FAILOVER_LIMIT)?;
    let killed = cluster.nodes[leader].id;
    // The round starts from a cluster that takes writes.
    writer
        .first_ack_after(Instant::now(), FAILOVER_LIMIT)
        .ok_or(ClusterBenchError::NoFailover {
            round: number,
            secs: FAILOVER_LIMIT.as_secs(),
        })?;
    let killed_at = Instant::now();
    cluster.nodes[leader].kill();
    let ack =
        writer
            .first_ack_after(killed_at, FAILOVER_LIMIT)
            .ok_or(ClusterBenchError::NoFailover {
                round: number,
                secs: FAILOVER_LIMIT.as_secs(),
            })?;
    let failover_ms = ack.answered.duration_since(killed_at).as_secs_f64() * 1e3;
    let new_index = cluster.leader(FAILOVER_LIMIT)?;
    let new_leader = cluster.nodes[new_index].id;
    let restarted_at = Instant::now();
    cluster.nodes[leader].start()?;
    let committed = cluster.nodes[new_index]
        .raft_info()
        .and_then(|i| field(&i, "raft_committed_index"))
        .unwrap_or(0);
    catch_up(cluster, leader, committed)?;
    Ok(FailoverRound {
        round: number,
        killed,
        new_leader,
        failover_ms,
        catch_up_ms: restarted_at.elapsed().as_secs_f64() * 1e3,
    })
}

/// How many of `acks` the leader does not return with their value.
fn lost(cluster: &Cluster, acks: &[Ack]) -> Result<u64, ClusterBenchError> {
    let mut router = Router::new(cluster.clients(), REQUEST_TIMEOUT);
    let mut lost = 0;
    for chunk in acks.chunks(CHECK_CHUNK) {
        let keys: Vec<String> = chunk.iter().map(|a| key(a.n)).collect();
        let mut args: Vec<&[u8]> = vec![&b"MGET"[..]];
        args.extend(keys.iter().map(|k| k.as_bytes()));
        let reply = router
            .read(&args, 200)
            .map_err(|reason| ClusterBenchError::Refused {
                what: "MGET of the acknowledged keys".into(),
                reply: reason,
            })?;
        let Reply::Array(Some(values)) = reply else {
            return Err(ClusterBenchError::Refused {
                what: "MGET of the acknowledged keys".into(),
                reply: format!("{reply:?}"),
            });
        };
        for (ack, got) in chunk.iter().zip(&values) {
            if *got != Reply::Bulk(Some(value(ack.n).into_bytes())) {
                lost += 1;
            }
        }
        lost += chunk.len().saturating_sub(values.len()) as u64;
    }
    Ok(lost)
}

/// `rounds` rounds on `cluster`, then the check of every acknowledged write.
pub fn measure(
    cluster: &mut Cluster,
    rounds: usize,
    mut line: impl FnMut(&str),
) -> Result<FailoverResults, ClusterBenchError> {
    let writer = Writer::start(cluster);
    let mut done = Vec::new();
    for number in 1..=rounds {
        match round(cluster, &writer, number) {
            Ok(r) => {
                line(&format!(
                    "cluster: failover round {number}/{rounds}: leader {} killed, node {} \
                     took writes after {:.0} ms",
                    r.killed, r.new_leader, r.failover_ms
                ));
                done.push(r);
            }
            Err(e) => {
                writer.stop();
                return Err(e);
            }
        }
    }
    let (acks, refused, in_doubt) = writer.stop();
    let lost = lost(cluster, &acks)?;
    Ok(FailoverResults {
        rounds: done,
        acknowledged: acks.len() as u64,
        refused,
        in_doubt,
        lost,
    })
}
