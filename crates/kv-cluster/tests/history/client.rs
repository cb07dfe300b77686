//! A client recording its operations in a [`History`]: SETs of unique values and GETs on a
//! few keys, sent to the node it believes leads, following `-MOVED`, moving on to the next
//! node when one fails it. Its own, not a cluster library's, so that no request is retried
//! out of its sight: each attempt is either known not applied (`-MOVED`, `-CLUSTERDOWN` with
//! no leader) or makes the operation's outcome unknown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stateright::semantics::register::{RegisterOp, RegisterRet};

use super::{History, Recorded, Value};

/// How long one operation may take before its outcome is unknown.
const OPERATION_TIME: Duration = Duration::from_secs(3);
/// How long a request waits for its reply.
const REPLY_TIME: Duration = Duration::from_secs(2);

pub struct RecordingClient {
    id: u64,
    nodes: Vec<SocketAddr>,
    keys: Vec<String>,
    at: usize,
    conn: Option<redis::Connection>,
    random: u64,
    written: u64,
}

/// What one attempt came to.
enum Attempt {
    Done(RegisterRet<Value>),
    /// Not applied: try again (at `at`, as moved there).
    NotApplied,
    /// Failed; a write's outcome is unknown.
    Failed,
}

impl RecordingClient {
    /// Client `id` of the nodes serving clients at `nodes`, on `keys`.
    pub fn new(id: u64, nodes: Vec<SocketAddr>, keys: Vec<String>) -> RecordingClient {
        RecordingClient {
            id,
            at: id as usize % nodes.len(),
            nodes,
            keys,
            conn: None,
            random: 0x9e37_79b9_7f4a_7c15 ^ (id + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            written: 0,
        }
    }

    /// Run in a thread until `stop`, a pause of `pause` between operations.
    pub fn spawn(
        mut self,
        history: Arc<History>,
        stop: Arc<AtomicBool>,
        pause: Duration,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                self.one(&history);
                std::thread::sleep(pause);
            }
        })
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*: a fixed sequence per client, no more is needed.
        self.random ^= self.random >> 12;
        self.random ^= self.random << 25;
        self.random ^= self.random >> 27;
        self.random.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// One operation, recorded.
    pub fn one(&mut self, history: &History) {
        let r = self.next_random();
        let key = self.keys[(r % self.keys.len() as u64) as usize].clone();
        let op = if r & (1 << 32) == 0 {
            self.written += 1;
            RegisterOp::Write(Some(format!("c{}-{}", self.id, self.written)))
        } else {
            RegisterOp::Read
        };
        self.run(history, key, op);
    }

    /// Run `op` on `key` and record it (a GET read through the leader).
    pub fn run(&mut self, history: &History, key: String, op: RegisterOp<Value>) {
        let invoked = history.now();
        let deadline = Instant::now() + OPERATION_TIME;
        let mut maybe_applied = false;
        let returned = loop {
            if Instant::now() > deadline {
                break None;
            }
            match self.attempt(&key, &op) {
                Attempt::Done(ret) => break Some((history.now(), ret)),
                Attempt::NotApplied => std::thread::sleep(Duration::from_millis(20)),
                Attempt::Failed => {
                    maybe_applied = true;
                    self.conn = None;
                    self.at = (self.at + 1) % self.nodes.len();
                    break None;
                }
            }
        };
        let write = matches!(op, RegisterOp::Write(_));
        match returned {
            Some(returned) => history.record(Recorded {
                thread: self.id,
                key,
                op,
                invoked,
                returned: Some(returned),
            }),
            // Pending: possibly applied, at any time from now on.
            None if write && maybe_applied => history.record(Recorded {
                thread: history.pending_thread(),
                key,
                op,
                invoked,
                returned: None,
            }),
            // A read that failed, or a write known not applied: no effect.
            None => {}
        }
    }

    fn attempt(&mut self, key: &str, op: &RegisterOp<Value>) -> Attempt {
        if self.conn.is_none() {
            match connect(self.nodes[self.at]) {
                Ok(conn) => self.conn = Some(conn),
                Err(_) => {
                    // Nothing was sent.
                    self.at = (self.at + 1) % self.nodes.len();
                    return Attempt::NotApplied;
                }
            }
        }
        let conn = self.conn.as_mut().expect("connected above");
        let reply = match op {
            RegisterOp::Write(value) => redis::cmd("SET")
                .arg(key)
                .arg(value.as_deref().expect("a write of a value"))
                .query::<String>(conn)
                .map(|_| RegisterRet::WriteOk),
            RegisterOp::Read => redis::cmd("GET")
                .arg(key)
                .query::<Option<String>>(conn)
                .map(RegisterRet::ReadOk),
        };
        match reply {
            Ok(ret) => Attempt::Done(ret),
            Err(e) if e.code() == Some("MOVED") => {
                let to = e.redirect_node().map(|(addr, _)| addr.to_string());
                self.conn = None;
                match self.nodes.iter().position(|n| Some(n.to_string()) == to) {
                    Some(i) => self.at = i,
                    None => self.at = (self.at + 1) % self.nodes.len(),
                }
                Attempt::NotApplied
            }
            // No leader known: nothing was proposed.
            Err(e)
                if e.code() == Some("CLUSTERDOWN")
                    && e.detail().is_some_and(|d| d.contains("no Raft leader")) =>
            {
                self.conn = None;
                self.at = (self.at + 1) % self.nodes.len();
                Attempt::NotApplied
            }
            Err(_) => Attempt::Failed,
        }
    }
}

fn connect(addr: SocketAddr) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://{addr}/"))?;
    let conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
    conn.set_read_timeout(Some(REPLY_TIME))?;
    conn.set_write_timeout(Some(REPLY_TIME))?;
    Ok(conn)
}
