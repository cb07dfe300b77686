//! The key-value state machine on a store, as plain synchronous calls (the openraft trait
//! impl in `mod.rs` wraps them; the crash tests drive them directly on a simulated pool).
//!
//! Two maps: the keyspace `db0` (the standalone server's map, byte keys to byte values) and
//! `raft.sm`, a small map of markers: the last applied log id, the last applied membership,
//! and a flush in progress. What keeps the keyspace and "last applied" in agreement across a
//! crash at any point:
//!
//! * **an entry** (a write, a blank entry, a membership change) is applied in ONE write batch
//!   with its log id as "last applied" (and the membership, for a membership entry): after a
//!   crash both are there or neither. An entry the store refuses alike on every node (a key
//!   or value past the limits, a batch past its count) changes nothing but "last applied", in
//!   one batch, and answers an error; any other refusal (a full pool) stops the state machine
//!   with an error, applying nothing;
//! * **a flush** (`FLUSHALL`) frees the keyspace by removing the map and making it anew (one
//!   crash-safe step each, as the standalone server does): the flush's log id is recorded
//!   first, and "last applied" and the marker's removal commit in one batch after; an open
//!   that finds the marker does the flush again ([`SmCore::open`]);
//! * **a snapshot** is installed in one batch: every key it lacks removed, every pair it
//!   holds written, "last applied" and the membership set. A half-installed snapshot never
//!   survives. (Its size is bounded by a batch's: `MAX_BATCH_CHANGES` keys, the present and
//!   the snapshot's together; a larger one is refused with the store's typed error.)

use std::collections::BTreeSet;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use openraft::entry::RaftEntry;
use openraft::EntryPayload;
use pmem_structures::raw::pmem_ordering::{Backend, Hardware};
use pmem_structures::{Error, HashMap, Store, WriteBatch};
use serde::{Deserialize, Serialize};

use super::writes::{apply_in, Keyspace};
use crate::error::{decode, encode, ClusterError};
use crate::types::{Entry, LogId, Outcome, SnapshotMeta, StoredMembership, Write};

/// The keyspace's name in the store (the standalone server's).
pub const KEYSPACE: &str = "db0";
/// The state machine's small map of markers.
pub const SM_MAP: &str = "raft.sm";

const APPLIED: &str = "applied";
const MEMBERSHIP: &str = "membership";
const FLUSHING: &str = "flushing";

/// A keyspace's pairs, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// The first bytes of an encoded snapshot.
const SNAPSHOT_MAGIC: &[u8; 8] = b"PMKVSNP1";

/// The keyspace handle, shared with snapshot builders: a flush takes it whole (the map is
/// removed and made anew), a build reads under it.
/// `None` only between a flush's removal of the map and its making anew.
type SharedKeys<B> = Arc<RwLock<Option<Keyspace<B>>>>;

/// The state machine's maps: cheap to clone, shared by the applier and snapshot builders.
pub struct SmMaps<B: Backend = Hardware> {
    store: Store<B>,
    keys: SharedKeys<B>,
    meta: HashMap<String, Vec<u8>, B>,
}

impl<B: Backend> Clone for SmMaps<B> {
    fn clone(&self) -> Self {
        SmMaps {
            store: self.store.clone(),
            keys: self.keys.clone(),
            meta: self.meta.clone(),
        }
    }
}

/// What a snapshot holds: what it covers and the keyspace's pairs, in key order.
#[derive(Serialize, Deserialize)]
struct SnapshotBody {
    meta: SnapshotMeta,
    pairs: Pairs,
}

impl<B: Backend> SmMaps<B> {
    /// Run `f` on the keyspace (a flush waits for it).
    fn with_keys<T>(
        &self,
        f: impl FnOnce(&Keyspace<B>) -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        // A panic while a flush held the lock left the map removed or made (each step is
        // crash-safe, so the store is whole): go on with what the lock holds.
        let guard: RwLockReadGuard<'_, _> = self
            .keys
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(guard.as_ref().ok_or(ClusterError::KeyspaceGone)?)
    }

    /// The keyspace's value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ClusterError> {
        self.with_keys(|keys| Ok(keys.get(key)?))
    }

    /// The last applied log id and membership.
    pub fn applied_state(&self) -> Result<(Option<LogId>, StoredMembership), ClusterError> {
        let applied = self.marker(APPLIED)?;
        let membership = self.marker(MEMBERSHIP)?.unwrap_or_default();
        Ok((applied, membership))
    }

    /// Every pair of the keyspace with the applied state, as one batch left them (never a
    /// batch in part).
    pub fn read_all(&self) -> Result<(SnapshotMeta, Pairs), ClusterError> {
        self.with_keys(|keys| self.read_all_of(keys))
    }

    fn read_all_of(&self, keys: &Keyspace<B>) -> Result<(SnapshotMeta, Pairs), ClusterError> {
        // The markers' own decoding errors ride inside the store's `Ok`.
        self.store.read_consistent(|| {
            let pairs = keys.iter().collect::<Result<Vec<_>, _>>()?;
            Ok(self.applied_state().map(|(last_log_id, last_membership)| {
                let meta = SnapshotMeta {
                    last_log_id,
                    last_membership,
                };
                (meta, pairs)
            }))
        })?
    }

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

    fn marker<T: serde::de::DeserializeOwned>(&self, key: &str) -> Result<Option<T>, ClusterError> {
        match self.meta.get(key)? {
            Some(bytes) => Ok(Some(decode(&bytes, || {
                format!("the state machine's {key} marker")
            })?)),
            None => Ok(None),
        }
    }

    fn set_marker_in<T: Serialize>(
        &self,
        batch: &mut WriteBatch<B>,
        key: &str,
        value: &T,
    ) -> Result<(), ClusterError> {
        let bytes = encode(value, || format!("the state machine's {key} marker"))?;
        self.meta.put_in(batch, key, bytes)?;
        Ok(())
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

/// The state machine's writer.
pub struct SmCore<B: Backend = Hardware> {
    maps: SmMaps<B>,
}

impl<B: Backend> SmCore<B> {
    /// Open the state machine in `store` (its maps made if new), finishing a flush a crash
    /// interrupted.
    pub fn open(store: &Store<B>) -> Result<SmCore<B>, ClusterError> {
        let meta = store.hash_map::<String, Vec<u8>>(SM_MAP)?;
        let flushing: Option<LogId> = match meta.get(FLUSHING)? {
            Some(bytes) => Some(decode(&bytes, || {
                "the state machine's flush marker".into()
            })?),
            None => None,
        };
        if flushing.is_some() {
            match store.remove_structure(KEYSPACE) {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let keys = store.btree_map::<Vec<u8>, Vec<u8>>(KEYSPACE)?;
        let core = SmCore {
            maps: SmMaps {
                store: store.clone(),
                keys: Arc::new(RwLock::new(Some(keys))),
                meta,
            },
        };
        if let Some(log_id) = flushing {
            core.finish_flush(&log_id)?;
        }
        Ok(core)
    }

    /// The maps, for readers and snapshot builders.
    pub fn maps(&self) -> &SmMaps<B> {
        &self.maps
    }

    /// Apply `entry` (durable on return) and answer what its client is told.
    pub fn apply(&mut self, entry: &Entry) -> Result<Outcome, ClusterError> {
        let log_id = entry.log_id();
        let maps = &self.maps;
        match &entry.payload {
            EntryPayload::Blank => {
                maps.store
                    .write(|batch| maps.set_marker_in(batch, APPLIED, &log_id))?;
                Ok(Outcome::Ok)
            }
            EntryPayload::Membership(membership) => {
                let stored = StoredMembership::new(Some(log_id), membership.clone());
                maps.store.write(|batch| {
                    maps.set_marker_in(batch, APPLIED, &log_id)?;
                    maps.set_marker_in(batch, MEMBERSHIP, &stored)
                })?;
                Ok(Outcome::Ok)
            }
            EntryPayload::Normal(Write::Flush) => {
                self.flush(&log_id)?;
                Ok(Outcome::Ok)
            }
            EntryPayload::Normal(write) => {
                let applied = maps.with_keys(|keys| {
                    maps.store.write(|batch| {
                        let outcome = apply_in(keys, batch, write)?;
                        maps.set_marker_in(batch, APPLIED, &log_id)?;
                        Ok::<_, ClusterError>(outcome)
                    })
                });
                match applied {
                    Err(ClusterError::Store(
                        e @ (Error::KeyTooLarge { .. }
                        | Error::ValueTooLarge { .. }
                        | Error::BatchTooLarge { .. }),
                    )) => {
                        // Every node refuses it alike: the entry is applied as a no-op.
                        maps.store
                            .write(|batch| maps.set_marker_in(batch, APPLIED, &log_id))?;
                        Ok(Outcome::Error(format!("ERR {e}")))
                    }
                    other => other,
                }
            }
        }
    }

    /// `FLUSHALL` at `log_id`: the marker, the map removed and made anew, then "last applied"
    /// with the marker's removal in one batch.
    fn flush(&mut self, log_id: &LogId) -> Result<(), ClusterError> {
        let bytes = encode(log_id, || "the state machine's flush marker".into())?;
        self.maps.meta.upsert(FLUSHING, bytes)?;
        {
            let mut keys = self
                .maps
                .keys
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            // The store removes no map with a handle open: this one goes first, and the
            // snapshot builders and readers wait on the lock meanwhile.
            drop(keys.take());
            match self.maps.store.remove_structure(KEYSPACE) {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            *keys = Some(self.maps.store.btree_map::<Vec<u8>, Vec<u8>>(KEYSPACE)?);
        }
        self.finish_flush(log_id)
    }

    fn finish_flush(&self, log_id: &LogId) -> Result<(), ClusterError> {
        let maps = &self.maps;
        maps.store.write(|batch| {
            maps.set_marker_in(batch, APPLIED, log_id)?;
            maps.meta.delete_in(batch, FLUSHING)?;
            Ok::<_, ClusterError>(())
        })
    }

    /// Install the snapshot `bytes` covering `meta`, in one batch (durable on return).
    pub fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        bytes: &[u8],
    ) -> Result<(), ClusterError> {
        let pairs = decode_snapshot(meta, bytes)?;
        let (applied, _) = self.maps.applied_state()?;
        if meta.last_log_id < applied {
            return Err(ClusterError::StaleSnapshot {
                offered: meta.last_log_id,
                applied,
            });
        }
        let maps = &self.maps;
        let wanted: BTreeSet<&[u8]> = pairs.iter().map(|(k, _)| k.as_slice()).collect();
        maps.with_keys(|keys| {
            let present = keys
                .iter()
                .map(|pair| pair.map(|(k, _)| k))
                .collect::<Result<Vec<_>, _>>()?;
            maps.store.write(|batch| {
                for key in present.iter().filter(|k| !wanted.contains(k.as_slice())) {
                    keys.delete_in(batch, key)?;
                }
                for (key, value) in &pairs {
                    keys.put_in(batch, key, value)?;
                }
                match &meta.last_log_id {
                    Some(last) => maps.set_marker_in(batch, APPLIED, last)?,
                    None => maps.meta.delete_in(batch, APPLIED)?,
                }
                maps.set_marker_in(batch, MEMBERSHIP, &meta.last_membership)
            })
        })
    }
}
