//! Where a client is sent when this node cannot answer it, and how members are named to
//! cluster-aware clients.

use openraft::error::ForwardToLeader;
use pmem_kv_server::protocol::Reply;

use crate::types::{KvRaft, NodeId};

/// Where a client is sent when this node is not the leader.
pub(crate) fn elsewhere(forward: &ForwardToLeader<KvRaft>, slot: u16) -> Reply {
    match &forward.leader_node {
        Some(leader) => Reply::error(format!("MOVED {slot} {}", leader.client)),
        None => cluster_down(),
    }
}

/// No leader is known: `-CLUSTERDOWN`.
pub(crate) fn cluster_down() -> Reply {
    Reply::error(
        "CLUSTERDOWN The cluster is down: no Raft leader is known (an election is under way, or a majority of the nodes is unreachable)",
    )
}

/// A member's 40-hex-digit id, as Redis Cluster names nodes: the cluster id's top 96 bits
/// and the node id.
pub(crate) fn redis_id(cluster_id: u128, node: NodeId) -> String {
    format!("{:024x}{node:016x}", cluster_id >> 32)
}
