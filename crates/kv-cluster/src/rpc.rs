//! The Raft RPCs between nodes, on TCP: one request and its response at a time on a
//! connection, each a frame of a length, a CRC32C and a postcard-encoded message.
//!
//! Every request names the sender's cluster and the node it is meant for, so a node of
//! another cluster (or a pool started under the wrong node id) is refused before Raft sees
//! anything it sent.

use openraft::error::{Fatal, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{decode, encode, ClusterError};
use crate::types::{KvRaft, NodeId, SnapshotMeta, Vote};

/// The largest frame taken (a snapshot travels in one).
pub const MAX_FRAME: u64 = 4 << 30;

/// A request, with who sends it to whom.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope {
    /// The sender's cluster (0: the sender has none yet, which no node sends).
    pub cluster: u128,
    /// The sender.
    pub from: NodeId,
    /// The node it is meant for.
    pub to: NodeId,
    /// The request.
    pub request: Request,
}

/// What one node asks another.
#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// Replicate entries (or a heartbeat).
    Append(AppendEntriesRequest<KvRaft>),
    /// Vote for a candidate.
    Vote(VoteRequest<KvRaft>),
    /// Would you vote for this candidate (the pre-vote round)?
    PreVote(VoteRequest<KvRaft>),
    /// Install this snapshot: the leader's vote, what the snapshot covers and its file.
    Snapshot {
        /// The sender's vote.
        vote: Vote,
        /// What it covers.
        meta: SnapshotMeta,
        /// The snapshot's store file, whole.
        file: Vec<u8>,
    },
    /// Take over the leadership.
    TransferLeader(TransferLeaderRequest<KvRaft>),
}

/// The answer to a [`Request`].
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    /// To [`Request::Append`].
    Append(Result<AppendEntriesResponse<KvRaft>, RaftError<KvRaft>>),
    /// To [`Request::Vote`] and [`Request::PreVote`].
    Vote(Result<VoteResponse<KvRaft>, RaftError<KvRaft>>),
    /// To [`Request::Snapshot`].
    Snapshot(Result<SnapshotResponse<KvRaft>, Fatal<KvRaft>>),
    /// To [`Request::TransferLeader`].
    TransferLeader(Result<TransferLeaderResponse<KvRaft>, Fatal<KvRaft>>),
    /// Not taken: why (another cluster, another node, a partition the operator made, a
    /// snapshot that could not be stored).
    Refused(String),
}

/// Write one frame holding `message`.
pub async fn send<T: Serialize, W: AsyncWriteExt + Unpin>(
    socket: &mut W,
    message: &T,
) -> Result<(), ClusterError> {
    let payload = encode(message, || "an RPC message".into())?;
    let mut frame = Vec::with_capacity(payload.len() + 12);
    frame.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    frame.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    frame.extend_from_slice(&payload);
    socket
        .write_all(&frame)
        .await
        .map_err(|e| ClusterError::io("sending an RPC frame", e))
}

/// Read one frame and decode its message; `None` if the peer closed the connection before a
/// frame began.
pub async fn receive<T: serde::de::DeserializeOwned, R: AsyncReadExt + Unpin>(
    socket: &mut R,
) -> Result<Option<T>, ClusterError> {
    let mut header = [0u8; 12];
    match socket.read_exact(&mut header).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(ClusterError::io("reading an RPC frame", e)),
    }
    let len = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(header[8..].try_into().expect("4 bytes"));
    if len > MAX_FRAME {
        return Err(ClusterError::io(
            "reading an RPC frame",
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a frame of {len} bytes is over the {MAX_FRAME}-byte limit"),
            ),
        ));
    }
    let mut payload = vec![0u8; len as usize];
    socket
        .read_exact(&mut payload)
        .await
        .map_err(|e| ClusterError::io("reading an RPC frame", e))?;
    if crc32c::crc32c(&payload) != crc {
        return Err(ClusterError::io(
            "reading an RPC frame",
            std::io::Error::new(std::io::ErrorKind::InvalidData, "the frame's CRC32C does not match its bytes"),
        ));
    }
    decode(&payload, || "an RPC message".into()).map(Some)
}
