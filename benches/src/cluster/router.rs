//! A cluster client as a Redis Cluster client behaves with one shard: it keeps a connection
//! to the node it believes leads, goes where `-MOVED` points, and tries the next node when
//! one does not answer or has no leader (`-CLUSTERDOWN`, `-TRYAGAIN`).

use std::net::SocketAddr;
use std::time::Duration;

use super::resp::{Connection, Reply};

/// What became of one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered `+OK`: committed by a majority and applied.
    Acknowledged,
    /// Sent on or refused before it was proposed (`-MOVED`, `-CLUSTERDOWN`, no connection):
    /// certainly not applied.
    Refused,
    /// The connection failed after the request was sent, or the node answered an error: it
    /// may or may not be applied.
    InDoubt,
}

/// A client of the cluster's nodes.
pub struct Router {
    nodes: Vec<SocketAddr>,
    /// Where the next request goes.
    target: SocketAddr,
    connection: Option<Connection>,
    timeout: Duration,
}

impl Router {
    /// A client of `nodes` (at least one), each request bounded by `timeout`.
    pub fn new(nodes: Vec<SocketAddr>, timeout: Duration) -> Router {
        let target = nodes[0];
        Router {
            nodes,
            target,
            connection: None,
            timeout,
        }
    }

    /// The next node after the current target, in the list's order.
    fn next_node(&mut self) {
        let at = self.nodes.iter().position(|n| *n == self.target);
        self.target = self.nodes[at.map_or(0, |i| (i + 1) % self.nodes.len())];
        self.connection = None;
    }

    /// Send `args` once: the reply, or `None` when the node could not be reached (nothing
    /// was sent) and `Some(Err)` when the connection failed after sending.
    fn send(&mut self, args: &[&[u8]]) -> Option<std::io::Result<Reply>> {
        if self.connection.is_none() {
            match Connection::open(self.target, self.timeout) {
                Ok(c) => self.connection = Some(c),
                Err(_) => {
                    self.next_node();
                    return None;
                }
            }
        }
        let reply = self.connection.as_mut()?.command(args);
        if reply.is_err() {
            self.next_node();
        }
        Some(reply)
    }

    /// Follow a `-MOVED` or give up on a node without a leader; whether `message` was one.
    fn redirected(&mut self, message: &str) -> bool {
        if let Some(rest) = message.strip_prefix("MOVED ") {
            match rest.split(' ').nth(1).and_then(|a| a.parse().ok()) {
                Some(addr) => {
                    self.target = addr;
                    self.connection = None;
                }
                None => self.next_node(),
            }
            return true;
        }
        if message.starts_with("CLUSTERDOWN") || message.starts_with("TRYAGAIN") {
            self.next_node();
            return true;
        }
        false
    }

    /// `SET key value` once (no retry: a caller that retries uses a new key).
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Outcome {
        match self.send(&[&b"SET"[..], key, value]) {
            None => Outcome::Refused,
            Some(Err(_)) => Outcome::InDoubt,
            Some(Ok(Reply::Status(s))) if s == "OK" => Outcome::Acknowledged,
            Some(Ok(Reply::Error(e))) if self.redirected(&e) => Outcome::Refused,
            Some(Ok(_)) => Outcome::InDoubt,
        }
    }

    /// A read (or any command that may be repeated), retried through redirections and
    /// unreachable nodes for up to `attempts` tries: its reply, or the last failure.
    pub fn read(&mut self, args: &[&[u8]], attempts: usize) -> Result<Reply, String> {
        let mut last = String::from("no attempt");
        for _ in 0..attempts {
            match self.send(args) {
                None => last = format!("{} does not accept connections", self.target),
                Some(Err(e)) => last = format!("the connection failed: {e}"),
                Some(Ok(Reply::Error(e))) if self.redirected(&e) => last = e,
                Some(Ok(reply)) => return Ok(reply),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(last)
    }
}
