//! A connection's pipelined requests in runs: consecutive writes proposed together (one
//! message to Raft, appended in order, each answered in order once committed and applied),
//! consecutive keyed reads served behind one read index. A run ends at any other request, so
//! a connection's requests still take effect in the order sent: a read waits for the writes
//! before it, a write is proposed after the reads before it were served.

use bytes::Bytes;
use pmem_kv_server::protocol::Reply;

use super::commands::{self, Read};
use super::NodeShared;
use crate::types::Write;

/// A request that may wait in a run of its kind.
pub(crate) enum Queued {
    /// A write.
    Write(Write),
    /// A keyed read and its keys.
    Read(Read, Vec<Bytes>),
}

/// The requests of a connection waiting to run together: all writes or all reads.
#[derive(Default)]
pub(crate) struct Run {
    writes: Vec<Write>,
    reads: Vec<(Read, Vec<Bytes>)>,
}

impl Run {
    /// Add `queued`, first running what waits if it is of the other kind (its replies
    /// appended to `replies`).
    pub(crate) async fn push(
        &mut self,
        shared: &NodeShared,
        queued: Queued,
        replies: &mut Vec<Reply>,
    ) {
        match queued {
            Queued::Write(write) => {
                if !self.reads.is_empty() {
                    self.finish(shared, replies).await;
                }
                self.writes.push(write);
            }
            Queued::Read(read, keys) => {
                if !self.writes.is_empty() {
                    self.finish(shared, replies).await;
                }
                self.reads.push((read, keys));
            }
        }
    }

    /// Run what waits, its replies appended to `replies` in order.
    pub(crate) async fn finish(&mut self, shared: &NodeShared, replies: &mut Vec<Reply>) {
        if !self.writes.is_empty() {
            let writes = std::mem::take(&mut self.writes);
            replies.extend(commands::propose_all(shared, writes).await);
        }
        if !self.reads.is_empty() {
            let reads = std::mem::take(&mut self.reads);
            replies.extend(commands::read_all(shared, reads).await);
        }
    }
}

/// A write or a keyed read that may run with its neighbours of the same kind, or `None`.
pub(crate) fn queueable(args: &[Bytes]) -> Option<Queued> {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let read = match (name.as_str(), args.len()) {
        ("get", 2) => Read::Get,
        ("strlen", 2) => Read::Strlen,
        ("mget", n) if n >= 2 => Read::MGet,
        ("exists", n) if n >= 2 => Read::Exists,
        _ => {
            return match commands::parse_write(&name, args) {
                Some(Ok(write)) => Some(Queued::Write(write)),
                _ => None,
            }
        }
    };
    Some(Queued::Read(read, args[1..].to_vec()))
}
