//! What can go wrong in a node: its stores, its identity, the log's shape, snapshots, peers.
//!
//! openraft's storage traits return `std::io::Error`; a [`ClusterError`] travels inside one
//! (`io::Error::other`) and is found again with [`ClusterError::in_io`].

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::types::{LogId, NodeId};

/// A node's typed errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The store refused (full, damaged, a key too long, ...).
    #[error("the store refused: {0}")]
    Store(#[from] pmem_structures::Error),
    /// A record of the node's own (a log entry, the vote, a marker, an RPC) does not decode
    /// (the pool or the peer holds something this build did not write), or does not encode.
    #[error("{what}: {source}")]
    Codec {
        /// What was read.
        what: String,
        /// The decoder's complaint.
        #[source]
        source: postcard::Error,
    },
    /// The pool belongs to another node of the cluster.
    #[error("the pool {path} belongs to node {recorded}, not to node {asked}: start node {recorded} with it, or give node {asked} its own pool")]
    OtherNode {
        /// The pool file.
        path: PathBuf,
        /// The node id it records.
        recorded: NodeId,
        /// The node id this process was started as.
        asked: NodeId,
    },
    /// The pool belongs to another cluster.
    #[error("the pool {path} belongs to cluster {recorded:?}, not to cluster {asked:?}: a node joins one cluster for the life of its pool; give it a new pool to join {asked:?}")]
    OtherCluster {
        /// The pool file.
        path: PathBuf,
        /// The cluster name it records.
        recorded: String,
        /// The cluster name this process was started with.
        asked: String,
    },
    /// A peer of another cluster (or a node of another cluster started with this pool)
    /// reached this node; nothing it sent was taken.
    #[error("a request of cluster {theirs:032x} reached a node of cluster {ours:032x}; refused, nothing taken")]
    ForeignCluster {
        /// This node's cluster.
        ours: u128,
        /// The sender's.
        theirs: u128,
    },
    /// A frame's format version is not this build's.
    #[error("a Raft RPC frame of wire version {found} reached a node speaking version {expected}; refused")]
    WireVersion {
        /// The frame's.
        found: u8,
        /// This build's.
        expected: u8,
    },
    /// A frame announced a length past the limit; nothing of it is read.
    #[error("a Raft RPC frame longer than the limit of {max} bytes; refused")]
    FrameTooLarge {
        /// The limit.
        max: usize,
    },
    /// The connection ended inside a frame.
    #[error("the connection ended inside a Raft RPC frame ({pending} bytes of it received)")]
    TruncatedFrame {
        /// The frame's bytes received (its length prefix aside).
        pending: usize,
    },
    /// A frame too short to hold the header (version and cluster id).
    #[error("a Raft RPC frame of {len} bytes, shorter than its {header}-byte header; refused")]
    ShortFrame {
        /// The frame's length.
        len: usize,
        /// The header's.
        header: usize,
    },
    /// A frame whose body decodes with bytes left over.
    #[error("a Raft RPC frame with {extra} bytes after its message; refused")]
    TrailingBytes {
        /// The bytes left over.
        extra: usize,
    },
    /// The peer refused a request of this node and closed the connection.
    #[error("the peer refused the request: {reason}")]
    PeerRefused {
        /// What it said.
        reason: String,
    },
    /// The peer answered with a reply of another kind than the request's.
    #[error("the peer answered a {asked} request with a {answered} reply")]
    WrongReply {
        /// The request's kind.
        asked: &'static str,
        /// The reply's.
        answered: &'static str,
    },
    /// A request was meant for another node id than this one.
    #[error("a request for node {to} reached node {me}; refused (is a pool started under the wrong node id?)")]
    WrongNode {
        /// Whom it was for.
        to: NodeId,
        /// This node.
        me: NodeId,
    },
    /// The log has a hole: an index is missing between two present ones (the pool was
    /// edited, or damaged). Raft must never see such a log: the node refuses to start.
    #[error("the Raft log has a gap: index {present} is followed by {next}; the node will not start on a log with a hole")]
    LogGap {
        /// The last index before the hole.
        present: u64,
        /// The next index present.
        next: u64,
    },
    /// An entry's stored log id disagrees with the index it is stored under.
    #[error("the Raft log entry stored at index {index} says it is {found}: the log is damaged")]
    MisplacedEntry {
        /// Where it is stored.
        index: u64,
        /// What it says.
        found: LogId,
    },
    /// A snapshot that would take the state machine back.
    #[error("a snapshot up to {offered:?} is older than what the state machine has applied ({applied:?}); refused, nothing changed")]
    StaleSnapshot {
        /// What the snapshot covers.
        offered: Option<LogId>,
        /// What the state machine has applied.
        applied: Option<LogId>,
    },
    /// Bytes offered as a snapshot that are not a whole snapshot of what they claim to be.
    #[error("the snapshot {snapshot} is refused: {reason}; nothing changed")]
    BadSnapshot {
        /// Which snapshot (what its sender said it covers).
        snapshot: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A flush removed the keyspace and could not make it anew (the pool is full, say); the
    /// state machine serves nothing until a restart makes it.
    #[error("the keyspace is missing: a flush removed it and could not make it anew")]
    KeyspaceGone,
    /// `CLUSTER RAFT ADD-LEARNER` added the node, which had not caught up with the log when
    /// the learner timeout passed.
    #[error("node {node} was added as a learner but has not caught up with the log in {waited:?} (it has the log to {matched}, it needs it to index {needed}); it stays a learner: check that it runs and that its Raft address {raft_addr} is reachable from the leader, then send ADD-LEARNER again to wait once more, or REMOVE it", matched = matched.map_or_else(|| "no index the leader knows of".to_string(), |i| format!("index {i}")))]
    LearnerBehind {
        /// The learner.
        node: NodeId,
        /// The Raft address it was added with.
        raft_addr: String,
        /// How long the command waited.
        waited: Duration,
        /// The last log index the leader knows the learner has.
        matched: Option<u64>,
        /// The index of the membership entry that added it.
        needed: u64,
    },
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// What the system said.
        #[source]
        source: io::Error,
    },
}

impl ClusterError {
    /// The typed error inside an `io::Error` made from one, if it is.
    pub fn in_io(error: &io::Error) -> Option<&ClusterError> {
        error.get_ref()?.downcast_ref::<ClusterError>()
    }
}

impl From<io::Error> for ClusterError {
    /// A socket error (what the codecs of `tokio-util` need).
    fn from(source: io::Error) -> ClusterError {
        ClusterError::Io {
            what: "a Raft RPC connection".into(),
            source,
        }
    }
}

impl From<ClusterError> for io::Error {
    fn from(error: ClusterError) -> io::Error {
        match error {
            // Keep the kind a caller may act on.
            ClusterError::Io { ref source, .. } => io::Error::new(source.kind(), error),
            other => io::Error::other(other),
        }
    }
}

/// Encode a record of the node's own; `what` names it in the error.
pub(crate) fn encode<T: serde::Serialize>(
    value: &T,
    what: impl FnOnce() -> String,
) -> Result<Vec<u8>, ClusterError> {
    postcard::to_allocvec(value).map_err(|source| ClusterError::Codec {
        what: format!("{} does not encode", what()),
        source,
    })
}

/// Decode a record of the node's own; `what` names it in the error.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    what: impl FnOnce() -> String,
) -> Result<T, ClusterError> {
    postcard::from_bytes(bytes).map_err(|source| ClusterError::Codec {
        what: format!(
            "{} does not decode (the pool or the peer holds bytes this build did not write)",
            what()
        ),
        source,
    })
}
