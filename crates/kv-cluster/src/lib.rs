//! The key-value server replicated on openraft: N nodes, each with its own store on its own
//! pool file, holding the Raft log and the keyspace.
//!
//! openraft does the consensus (elections, replication, membership changes, snapshots,
//! linearizable reads); this crate supplies what it asks of an application:
//!
//! * `log_store`: the Raft log and vote in the node's store (an ordered map by log index and
//!   a small map of markers), crash-safe at every persist point;
//! * `state_machine`: the keyspace (`db0`, the standalone server's map) with the last applied
//!   log id, each entry applied with it in one write batch;
//! * `types`: the log's entries (writes to the keyspace) and what applying them answers;
//! * `identity`: the cluster and node a pool belongs to, recorded on first start;
//! * `net`: openraft's RPCs between nodes over TCP (a versioned frame carrying the cluster id);
//! * `node`: a replicated node serving the Redis protocol;
//! * `cli`: the `pmem-kv-cluster` command line, which starts a node.

pub mod cli;
pub mod error;
pub mod identity;
pub mod log_store;
pub mod net;
pub mod node;
pub mod state_machine;
pub mod types;

pub use error::ClusterError;
pub use log_store::{LogReader, LogStore};
pub use node::{Node, NodeConfig};
pub use state_machine::{SnapshotBuilder, StateMachine};
pub use types::{Condition, KvRaft, Member, NodeId, Outcome, Write};

/// A node's Raft: openraft on this crate's types and state machine.
pub type Raft = openraft::Raft<KvRaft, StateMachine>;
