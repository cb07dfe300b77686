//! Snapshots of the state machine: built from one state read whole ([`SmMaps::build_snapshot`]:
//! magic, CRC-32C of the body, the body), checked on receipt, and installed in stages so
//! that a snapshot of any size is all there or not at all after a crash
//! ([`SmCore::install_snapshot`]; the steps and the recovery are `core`'s module doc).

use pmem_structures::raw::pmem_ordering::Backend;
use serde::{Deserialize, Serialize};

use super::core::{
    lock, remove_if_present, Pairs, SmCore, SmMaps, APPLIED, KEYSPACE_MARKER, MEMBERSHIP,
};
use super::writes::Keyspace;
use crate::error::{decode, encode, ClusterError};
use crate::types::SnapshotMeta;

/// The first bytes of an encoded snapshot.
const SNAPSHOT_MAGIC: &[u8; 8] = b"PMKVSNP1";

/// What a snapshot holds: what it covers and the keyspace's pairs, in key order.
#[derive(Serialize, Deserialize)]
struct SnapshotBody {
    meta: SnapshotMeta,
    pairs: Pairs,
}

impl<B: Backend> SmMaps<B> {
    /// A snapshot of the state machine: its metadata and its bytes (magic, CRC-32C of the
    /// body, the body).
    pub fn build_snapshot(&self) -> Result<(SnapshotMeta, Vec<u8>), ClusterError> {
        let (meta, pairs) = self.read_all()?;
        let body = SnapshotBody { meta, pairs };
        let encoded = encode(&body, || "a snapshot".to_string())?;
        let mut bytes = Vec::with_capacity(12 + encoded.len());
        bytes.extend_from_slice(SNAPSHOT_MAGIC);
        bytes.extend_from_slice(&crc32c::crc32c(&encoded).to_le_bytes());
        bytes.extend_from_slice(&encoded);
        Ok((body.meta, bytes))
    }
}

/// Decode and check an encoded snapshot that claims to cover `meta`.
fn decode_snapshot(meta: &SnapshotMeta, bytes: &[u8]) -> Result<Pairs, ClusterError> {
    let bad = |reason: String| ClusterError::BadSnapshot {
        snapshot: format!("up to {:?}", meta.last_log_id),
        reason,
    };
    if bytes.len() < 12 || &bytes[..8] != SNAPSHOT_MAGIC {
        return Err(bad(
            "it does not start as a snapshot of this build does".into()
        ));
    }
    let crc = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[12..]) != crc {
        return Err(bad(
            "its checksum does not match its bytes (torn or damaged)".into(),
        ));
    }
    let body: SnapshotBody = decode(&bytes[12..], || "a snapshot".to_string())?;
    if &body.meta != meta {
        return Err(bad(format!(
            "it holds the state up to {:?}, not what was offered",
            body.meta.last_log_id
        )));
    }
    if body.pairs.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(bad("its keys are not in strictly increasing order".into()));
    }
    Ok(body.pairs)
}

impl<B: Backend> SmCore<B> {
    /// Install the snapshot `bytes` covering `meta` (durable on return): staged into a fresh
    /// map under the keyspace's other name, switched to in one batch, the old map removed.
    /// Refused, nothing changed, when it is damaged, not what `meta` says, or older than what
    /// is applied; a store error while staging (a full pool) leaves the state as it was.
    pub fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        bytes: &[u8],
    ) -> Result<(), ClusterError> {
        let pairs = decode_snapshot(meta, bytes)?;
        let gate = self.maps.gate.clone();
        let _gate = lock(&gate);
        let (applied, _) = self.maps.applied_state()?;
        if meta.last_log_id < applied {
            return Err(ClusterError::StaleSnapshot {
                offered: meta.last_log_id,
                applied,
            });
        }
        let staging = self.keyspace.other();
        let staged = match self.stage(staging.name(), &pairs) {
            Ok(staged) => staged,
            Err(e) => {
                // Best effort: what is left under the staging name goes at the next install
                // or open.
                let _ = remove_if_present(&self.maps.store, staging.name());
                return Err(e);
            }
        };
        let maps = &self.maps;
        let mut keys = maps
            .keys
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // The switch: after a crash, either the old keyspace with the old applied state or
        // the new one with the snapshot's.
        maps.store.write(|batch| {
            maps.set_marker_in(batch, KEYSPACE_MARKER, &staging)?;
            match &meta.last_log_id {
                Some(last) => maps.set_marker_in(batch, APPLIED, last)?,
                None => maps.meta.delete_in(batch, APPLIED)?,
            }
            maps.set_marker_in(batch, MEMBERSHIP, &meta.last_membership)
        })?;
        let replaced = self.keyspace;
        self.keyspace = staging;
        // The store removes no map with a handle open: the old handle goes first.
        drop(keys.replace(staged));
        drop(keys);
        Ok(remove_if_present(&maps.store, replaced.name())?)
    }

    /// A fresh map `name` holding `pairs`, written `install_chunk` pairs per batch (anything
    /// under that name before, left by an install that failed without a crash, removed).
    fn stage(&self, name: &str, pairs: &Pairs) -> Result<Keyspace<B>, ClusterError> {
        let store = &self.maps.store;
        remove_if_present(store, name)?;
        let staged: Keyspace<B> = store.btree_map(name)?;
        for chunk in pairs.chunks(self.install_chunk) {
            store.write(|batch| {
                for (key, value) in chunk {
                    staged.put_in(batch, key, value)?;
                }
                Ok::<_, ClusterError>(())
            })?;
        }
        Ok(staged)
    }
}
