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
//! * **a snapshot** is installed in stages ([`super::snapshot`]): its pairs written into a
//!   fresh map under the keyspace's other name, a batch of at most `install_chunk` pairs at a
//!   time; then ONE batch switches over (the `keyspace` marker names the new map, with "last
//!   applied" and the membership); then the old map is removed. An open removes any map under
//!   the name not in use: a staged copy a crash cut short, or the map a switch replaced. A
//!   half-installed snapshot never survives, whatever its size.
//!
//! Every change of the state machine (an entry applied, a flush, an install) holds the
//! `gate`; a snapshot build holds it too while it reads, so it reads one state whole without
//! retrying while the log store's own batches go on.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};

use openraft::entry::RaftEntry;
use openraft::EntryPayload;
use pmem_structures::raw::pmem_ordering::{Backend, Hardware};
use pmem_structures::{Error, HashMap, Store, WriteBatch, MAX_BATCH_CHANGES};
use serde::{Deserialize, Serialize};

use super::writes::{apply_in, Keyspace};
use crate::error::{decode, encode, ClusterError};
use crate::types::{Entry, LogId, Outcome, SnapshotMeta, StoredMembership, Write};

/// The keyspace's name in the store until a snapshot is installed (the standalone server's).
pub const KEYSPACE: &str = "db0";
/// The keyspace's other name: a snapshot is staged under the name not in use.
pub const KEYSPACE_STAGED: &str = "db0.snapshot";
/// The state machine's small map of markers.
pub const SM_MAP: &str = "raft.sm";
/// A snapshot's pairs written per write batch while it is staged (a batch takes at most
/// `MAX_BATCH_CHANGES`).
pub const INSTALL_CHUNK: usize = 4096;

pub(super) const APPLIED: &str = "applied";
pub(super) const MEMBERSHIP: &str = "membership";
const FLUSHING: &str = "flushing";
/// Which of the two names the keyspace is under (absent: [`KEYSPACE`]).
pub(super) const KEYSPACE_MARKER: &str = "keyspace";

/// A keyspace's pairs, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// Which of its two names the keyspace is under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum KeyspaceName {
    /// [`KEYSPACE`].
    First,
    /// [`KEYSPACE_STAGED`].
    Second,
}

impl KeyspaceName {
    pub(super) fn name(self) -> &'static str {
        match self {
            KeyspaceName::First => KEYSPACE,
            KeyspaceName::Second => KEYSPACE_STAGED,
        }
    }

    pub(super) fn other(self) -> KeyspaceName {
        match self {
            KeyspaceName::First => KeyspaceName::Second,
            KeyspaceName::Second => KeyspaceName::First,
        }
    }
}

/// Remove the structure `name` if the store has one.
pub(super) fn remove_if_present<B: Backend>(store: &Store<B>, name: &str) -> Result<(), Error> {
    match store.remove_structure(name) {
        Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Take `mutex`: a panic while another holder had it left each store step whole (each is
/// crash-safe), so what it guards is usable.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The keyspace handle, shared with snapshot builders: a flush takes it whole (the map is
/// removed and made anew), a build reads under it.
/// `None` only between a flush's removal of the map and its making anew.
type SharedKeys<B> = Arc<RwLock<Option<Keyspace<B>>>>;

/// The state machine's maps: cheap to clone, shared by the applier and snapshot builders.
pub struct SmMaps<B: Backend = Hardware> {
    pub(super) store: Store<B>,
    pub(super) keys: SharedKeys<B>,
    pub(super) meta: HashMap<String, Vec<u8>, B>,
    /// Held by every change of the state machine and by a snapshot's read of it.
    pub(super) gate: Arc<Mutex<()>>,
}

impl<B: Backend> Clone for SmMaps<B> {
    fn clone(&self) -> Self {
        SmMaps {
            store: self.store.clone(),
            keys: self.keys.clone(),
            meta: self.meta.clone(),
            gate: self.gate.clone(),
        }
    }
}

impl<B: Backend> SmMaps<B> {
    /// Run `f` on the keyspace (a flush waits for it).
    pub(super) fn with_keys<T>(
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

    /// Every pair of the keyspace with the applied state, between two changes of the state
    /// machine (never an entry in part). Changes wait meanwhile; reads do not.
    pub fn read_all(&self) -> Result<(SnapshotMeta, Pairs), ClusterError> {
        let _gate = lock(&self.gate);
        self.with_keys(|keys| {
            let pairs = keys.iter().collect::<Result<Vec<_>, _>>()?;
            let (last_log_id, last_membership) = self.applied_state()?;
            let meta = SnapshotMeta {
                last_log_id,
                last_membership,
            };
            Ok((meta, pairs))
        })
    }

    pub(super) fn marker<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, ClusterError> {
        match self.meta.get(key)? {
            Some(bytes) => Ok(Some(decode(&bytes, || {
                format!("the state machine's {key} marker")
            })?)),
            None => Ok(None),
        }
    }

    pub(super) fn set_marker_in<T: Serialize>(
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

/// The state machine's writer.
pub struct SmCore<B: Backend = Hardware> {
    pub(super) maps: SmMaps<B>,
    /// The name the keyspace is under.
    pub(super) keyspace: KeyspaceName,
    /// Pairs per batch while a snapshot is staged.
    pub(super) install_chunk: usize,
}

impl<B: Backend> SmCore<B> {
    /// Open the state machine in `store` (its maps made if new), finishing a flush a crash
    /// interrupted and removing what an interrupted snapshot install left.
    pub fn open(store: &Store<B>) -> Result<SmCore<B>, ClusterError> {
        let meta = store.hash_map::<String, Vec<u8>>(SM_MAP)?;
        let read = |key: &str| -> Result<Option<Vec<u8>>, ClusterError> { Ok(meta.get(key)?) };
        let keyspace: KeyspaceName = match read(KEYSPACE_MARKER)? {
            Some(bytes) => decode(&bytes, || "the state machine's keyspace marker".into())?,
            None => KeyspaceName::First,
        };
        // A map under the other name is a staged snapshot a crash cut short (before its
        // switch) or the keyspace a switch replaced (after it): neither is the state's.
        remove_if_present(store, keyspace.other().name())?;
        let flushing: Option<LogId> = match read(FLUSHING)? {
            Some(bytes) => Some(decode(&bytes, || {
                "the state machine's flush marker".into()
            })?),
            None => None,
        };
        if flushing.is_some() {
            remove_if_present(store, keyspace.name())?;
        }
        let keys = store.btree_map::<Vec<u8>, Vec<u8>>(keyspace.name())?;
        let core = SmCore {
            maps: SmMaps {
                store: store.clone(),
                keys: Arc::new(RwLock::new(Some(keys))),
                meta,
                gate: Arc::default(),
            },
            keyspace,
            install_chunk: INSTALL_CHUNK,
        };
        if let Some(log_id) = flushing {
            core.finish_flush(&log_id)?;
        }
        Ok(core)
    }

    /// Stage snapshots `pairs` at a time (at least 1, at most a batch's limit; the default
    /// is [`INSTALL_CHUNK`]). Tests use small chunks to cut an install at every step.
    pub fn set_install_chunk(&mut self, pairs: usize) {
        self.install_chunk = pairs.clamp(1, MAX_BATCH_CHANGES);
    }

    /// The maps, for readers and snapshot builders.
    pub fn maps(&self) -> &SmMaps<B> {
        &self.maps
    }

    /// Apply `entry` (durable on return) and answer what its client is told.
    pub fn apply(&mut self, entry: &Entry) -> Result<Outcome, ClusterError> {
        let log_id = entry.log_id();
        let gate = self.maps.gate.clone();
        let _gate = lock(&gate);
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
            // The store removes no map with a handle open: this one goes first, and readers
            // wait on the lock meanwhile (snapshot builds wait on the gate).
            drop(keys.take());
            let name = self.keyspace.name();
            remove_if_present(&self.maps.store, name)?;
            *keys = Some(self.maps.store.btree_map::<Vec<u8>, Vec<u8>>(name)?);
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
}
