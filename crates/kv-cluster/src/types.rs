//! The types the cluster's Raft runs on: what a log entry carries (a write to the keyspace),
//! what applying it answers, and what a member is (where clients and peers reach it).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A node's number in its cluster (chosen by the operator, unique in the cluster).
pub type NodeId = u64;

/// Where a member is reached: by clients (the Redis protocol) and by its peers (the Raft
/// RPCs). Both `host:port`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Member {
    /// The address clients connect to (what `-MOVED` and `CLUSTER SLOTS` name).
    pub client: String,
    /// The address of its Raft RPC listener.
    pub raft: String,
}

impl fmt::Display for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (raft {})", self.client, self.raft)
    }
}

/// When a `SET` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Condition {
    /// Always.
    Always,
    /// Only if the key is absent (`NX`, `SETNX`).
    IfAbsent,
    /// Only if the key is present (`XX`).
    IfPresent,
}

/// A write to the keyspace, as the log carries it. The leader only parses the command; every
/// node decides its effect when it applies the entry, in log order, so all nodes agree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Write {
    /// `SET key value [NX|XX] [GET]`, `SETNX`.
    Set {
        /// The key.
        key: Vec<u8>,
        /// The new value.
        value: Vec<u8>,
        /// When it writes.
        when: Condition,
        /// Reply with the old value (`GET`), else `OK` or nil.
        get: bool,
        /// Reply 1 or 0 (`SETNX`), else as `SET`.
        integer_reply: bool,
    },
    /// `APPEND key value`.
    Append {
        /// The key.
        key: Vec<u8>,
        /// The bytes appended.
        value: Vec<u8>,
    },
    /// `INCR`, `DECR`, `INCRBY`, `DECRBY`.
    IncrBy {
        /// The key.
        key: Vec<u8>,
        /// What is added.
        by: i64,
    },
    /// `MSET key value [key value ...]`.
    MSet {
        /// The pairs, in the command's order (a later pair for a key wins).
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// `DEL` and `UNLINK`.
    Del {
        /// The keys.
        keys: Vec<Vec<u8>>,
    },
    /// `FLUSHDB`, `FLUSHALL`.
    Flush,
}

impl Write {
    /// The keys the write touches (none for a flush).
    pub fn keys(&self) -> Vec<&[u8]> {
        match self {
            Write::Set { key, .. } | Write::Append { key, .. } | Write::IncrBy { key, .. } => {
                vec![key]
            }
            Write::MSet { pairs } => pairs.iter().map(|(k, _)| k.as_slice()).collect(),
            Write::Del { keys } => keys.iter().map(Vec::as_slice).collect(),
            Write::Flush => Vec::new(),
        }
    }
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Write::Set { .. } => "SET",
            Write::Append { .. } => "APPEND",
            Write::IncrBy { .. } => "INCRBY",
            Write::MSet { .. } => "MSET",
            Write::Del { .. } => "DEL",
            Write::Flush => "FLUSHALL",
        };
        write!(f, "{name} on {} key(s)", self.keys().len())
    }
}

/// What applying a write answers its client: a Redis reply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// `+OK`.
    #[default]
    Ok,
    /// Nil.
    Null,
    /// An integer.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// An error reply, its code first (`ERR ...`, `OOM ...`).
    Error(String),
}

openraft::declare_raft_types!(
    /// The cluster's Raft types: the log carries [`Write`]s, applying one answers an
    /// [`Outcome`], members are [`Member`]s numbered by [`NodeId`].
    pub KvRaft:
        D = Write,
        R = Outcome,
        NodeId = NodeId,
        Node = Member,
);

/// A log entry's position: its leader's term and node, and its index.
pub type LogId = openraft::alias::LogIdOf<KvRaft>;
/// A vote (a term and the candidate or leader), as the log store keeps it.
pub type Vote = openraft::alias::VoteOf<KvRaft>;
/// A log entry.
pub type Entry = openraft::alias::EntryOf<KvRaft>;
/// The membership a state machine last applied, with the log id that carried it.
pub type StoredMembership = openraft::alias::StoredMembershipOf<KvRaft>;
/// What a snapshot covers: the last log id and membership it holds.
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<KvRaft>;
