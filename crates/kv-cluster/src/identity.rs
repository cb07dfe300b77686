//! Which cluster and which node a pool belongs to. The first start records both in the
//! store; every later start must name the same ones, so a pool is never served by two nodes,
//! nor moved into another cluster (whose log would not be its own).

use std::path::Path;

use pmem_structures::Store;
use serde::{Deserialize, Serialize};

use crate::error::{decode, encode, ClusterError};
use crate::types::NodeId;

/// The map holding the pool's identity.
pub const IDENTITY_MAP: &str = "raft.identity";
const IDENTITY: &str = "identity";

/// What a pool records of its node.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    cluster: String,
    node: NodeId,
}

/// A cluster's id on the wire: a 128-bit hash of its name (XXH3), in every RPC frame.
pub fn cluster_id(name: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(name.as_bytes())
}

/// Record that the pool at `path` (its `store`) belongs to node `node` of cluster `cluster`,
/// or check that it does: [`ClusterError::OtherCluster`] or [`ClusterError::OtherNode`] if
/// it records others. One durable write on first use.
pub fn claim(store: &Store, path: &Path, cluster: &str, node: NodeId) -> Result<(), ClusterError> {
    let map = store.hash_map::<String, Vec<u8>>(IDENTITY_MAP)?;
    let asked = Identity {
        cluster: cluster.to_string(),
        node,
    };
    let what = || format!("the identity recorded in {}", path.display());
    match map.get(IDENTITY)? {
        None => {
            map.upsert(IDENTITY, encode(&asked, what)?)?;
            Ok(())
        }
        Some(bytes) => {
            let recorded: Identity = decode(&bytes, what)?;
            if recorded.cluster != asked.cluster {
                Err(ClusterError::OtherCluster {
                    path: path.to_path_buf(),
                    recorded: recorded.cluster,
                    asked: asked.cluster,
                })
            } else if recorded.node != asked.node {
                Err(ClusterError::OtherNode {
                    path: path.to_path_buf(),
                    recorded: recorded.node,
                    asked: asked.node,
                })
            } else {
                Ok(())
            }
        }
    }
}
