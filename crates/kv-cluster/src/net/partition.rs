//! A test-only network partition: the peers a node drops Raft traffic to and from, set by
//! `CLUSTER RAFT PARTITION` on nodes started with `--test-partitions`, so a test cuts a node
//! off from the others without root-only tools (firewall rules, network namespaces).
//!
//! A request to a cut peer fails at once as unreachable (openraft backs off and retries); a
//! request from a cut peer has its connection closed unanswered, as a lost link would end it.
//! Cutting both sides (each node told of the others) makes the partition symmetric.

use std::collections::BTreeSet;
use std::sync::RwLock;

use crate::types::NodeId;

/// The peers this node is cut off from (none by default).
#[derive(Debug, Default)]
pub struct Cut {
    peers: RwLock<BTreeSet<NodeId>>,
}

impl Cut {
    /// Cut this node off from exactly `peers` (healing any other cut).
    pub fn set(&self, peers: BTreeSet<NodeId>) {
        *self.peers.write().unwrap_or_else(|e| e.into_inner()) = peers;
    }

    /// Whether traffic to or from `peer` is dropped.
    pub fn cuts(&self, peer: NodeId) -> bool {
        self.peers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&peer)
    }

    /// The peers cut off, in order.
    pub fn peers(&self) -> Vec<NodeId> {
        self.peers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }
}
