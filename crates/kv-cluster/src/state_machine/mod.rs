//! openraft's state machine on a store: [`StateMachine`] (the applier) and
//! [`SnapshotBuilder`]. The persistence rules are [`core`]'s; every call is durable when it
//! returns, so a client's reply (sent through the entry's responder) follows a durable apply.
//!
//! The last snapshot built or installed is kept in memory for the replication tasks to
//! send; after a restart openraft builds a new one when it needs one.

pub mod core;
pub mod snapshot;
pub mod writes;

use std::io::Cursor;
use std::sync::{Arc, Mutex};

use futures_util::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{OptionalSend, RaftSnapshotBuilder};
use pmem_structures::Store;

use self::core::{SmCore, SmMaps};
use crate::error::ClusterError;
use crate::types::{KvRaft, LogId, SnapshotMeta, StoredMembership};

/// A snapshot's bytes, as openraft carries them.
pub type SnapshotData = Cursor<Vec<u8>>;
/// A snapshot: what it covers and its bytes.
pub type Snapshot = openraft::alias::SnapshotOf<KvRaft, SnapshotData>;

/// The last snapshot built or installed.
type Current = Arc<Mutex<Option<(SnapshotMeta, Vec<u8>)>>>;

/// The key-value state machine of a node, in its store.
pub struct StateMachine {
    core: SmCore,
    current: Current,
}

impl StateMachine {
    /// Open the state machine in `store` (made if new), finishing a flush a crash
    /// interrupted.
    pub fn open(store: &Store) -> Result<StateMachine, ClusterError> {
        Ok(StateMachine {
            core: SmCore::open(store)?,
            current: Arc::default(),
        })
    }

    /// The keyspace's value of `key`, as this node has applied it.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ClusterError> {
        self.core.maps().get(key)
    }

    /// The maps, for readers sharing the node's state machine.
    pub fn maps(&self) -> SmMaps {
        self.core.maps().clone()
    }
}

fn remember(current: &Current, meta: &SnapshotMeta, bytes: &[u8]) {
    let mut slot = current
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *slot = Some((meta.clone(), bytes.to_vec()));
}

/// Builds a snapshot from the store's maps, as one batch left them.
pub struct SnapshotBuilder {
    maps: SmMaps,
    current: Current,
}

impl RaftSnapshotBuilder<KvRaft> for SnapshotBuilder {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, std::io::Error> {
        // A whole keyspace read and encoded: off the runtime's worker threads.
        let maps = self.maps.clone();
        let (meta, bytes) = tokio::task::spawn_blocking(move || maps.build_snapshot())
            .await
            .map_err(std::io::Error::other)??;
        remember(&self.current, &meta, &bytes);
        Ok(Snapshot {
            meta,
            snapshot: Cursor::new(bytes),
        })
    }
}

impl RaftStateMachine<KvRaft> for StateMachine {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), std::io::Error> {
        Ok(self.core.maps().applied_state()?)
    }

    async fn apply<S>(&mut self, mut entries: S) -> Result<(), std::io::Error>
    where
        S: Stream<Item = Result<EntryResponder<KvRaft>, std::io::Error>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let outcome = self.core.apply(&entry)?;
            if let Some(responder) = responder {
                responder.send(outcome);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            maps: self.core.maps().clone(),
            current: self.current.clone(),
        }
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: SnapshotData,
    ) -> Result<(), std::io::Error> {
        let bytes = snapshot.into_inner();
        self.core.install_snapshot(meta, &bytes)?;
        remember(&self.current, meta, &bytes);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, std::io::Error> {
        let slot = self
            .current
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok(slot.as_ref().map(|(meta, bytes)| Snapshot {
            meta: meta.clone(),
            snapshot: Cursor::new(bytes.clone()),
        }))
    }
}
