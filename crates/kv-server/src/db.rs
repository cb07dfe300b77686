//! The keyspace: one ordered map of byte strings in a `Store`, and what the commands need
//! around it (key stripes for read-modify-writes, write batches for the commands that change
//! several keys at once, the swap on FLUSHDB, write statistics).
//!
//! Every write returns once the store has made it durable, so a reply sent after it
//! acknowledges a durable write.
//!
//! Lock order, the same for every command, so no two wait on each other: key stripes (in
//! stripe order, or taken without waiting once others are held), then the store's batch
//! lock, then the map's lock (read by commands, written by FLUSHDB), then the store's own
//! (writer gates, structure locks). Every writer of a key holds its stripe from its read to
//! its durable write, so what a command reads under its stripes stays true until it writes.

use std::ops::Bound;

use crossbeam_utils::sync::ShardedLock;
use parking_lot::{Mutex, MutexGuard};
use pmem_structures::{BTreeMap, Error, FastFairConfig, Store, WriteBatch};

use crate::counters::Counters;

/// The map's name in the store.
pub(crate) const KEYSPACE: &str = "db0";

/// Key stripes: writes to keys of one stripe are serialized, so the read-modify-writes (INCR,
/// INCRBYFLOAT, APPEND, SETRANGE, SETNX, SET NX/XX/GET, RENAME, COPY, MSETNX) see no write
/// slip in between their read and their write.
const STRIPES: usize = 1024;

/// The byte-string map commands run on.
pub(crate) type Keyspace = BTreeMap<Vec<u8>, Vec<u8>>;

pub(crate) struct Db {
    store: Store,
    /// `None` only if FLUSHDB removed the map and could not make a new one. Sharded: every
    /// command takes it to read, on both cores, and only FLUSHDB writes.
    map: ShardedLock<Option<Keyspace>>,
    stripes: Box<[Mutex<()>]>,
    pub(crate) counters: Counters,
}

/// Why a command could not run on the keyspace.
#[derive(Debug)]
pub(crate) enum DbError {
    /// The store refused (full, key too long, damaged...).
    Store(Error),
    /// FLUSHDB removed the map and could not make a new one.
    Unavailable,
}

impl From<Error> for DbError {
    fn from(error: Error) -> DbError {
        DbError::Store(error)
    }
}

impl Db {
    pub(crate) fn open(store: Store) -> Result<Db, Error> {
        let map = store.btree_map::<Vec<u8>, Vec<u8>>(KEYSPACE, FastFairConfig::default())?;
        Ok(Db {
            store,
            map: ShardedLock::new(Some(map)),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            counters: Counters::default(),
        })
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Run `command` on the map (FLUSHDB waits for it to finish).
    pub(crate) fn with_map<T>(&self, command: impl FnOnce(&Keyspace) -> T) -> Result<T, DbError> {
        // A command that panicked while holding the lock left the map as it was: the
        // store's writes are all-or-nothing.
        let guard = self
            .map
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        guard.as_ref().map(command).ok_or(DbError::Unavailable)
    }

    /// Hold the stripes of `keys` (each once, in stripe order, so two commands never wait on
    /// each other).
    pub(crate) fn lock_keys<'a>(&'a self, keys: impl Iterator<Item = &'a [u8]>) -> KeyLocks<'a> {
        let mut stripes: Vec<usize> = keys.map(stripe_of).collect();
        stripes.sort_unstable();
        stripes.dedup();
        KeyLocks {
            _held: stripes
                .into_iter()
                .map(|s| self.stripes[s].lock())
                .collect(),
        }
    }

    /// Run `write` on the map and a new write batch, then commit the batch: what `write` put
    /// in it is durable, all of it, when this returns `Ok`; on an error nothing changed.
    /// `write` reads the keys whose stripes the caller holds with the map's plain reads (the
    /// stripes keep them as read). Waits for another thread's batch to end first.
    pub(crate) fn batch_write<T>(
        &self,
        keys: u64,
        write: impl FnOnce(&Keyspace, &mut WriteBatch) -> Result<T, Error>,
    ) -> Result<T, DbError> {
        // The batch lock before the map's (the module's lock order).
        let mut batch = self.store.batch()?;
        let outcome = self.with_map(|map| {
            let out = write(map, &mut batch)?;
            self.counted_write(keys, || batch.commit())?;
            Ok::<_, Error>(out)
        })?;
        Ok(outcome?)
    }

    /// Set every `(key, value)` of `pairs` (`count` of them), all durable together or none
    /// (a later pair of a key wins). One pair is a single write.
    pub(crate) fn set_all<'p>(
        &self,
        mut pairs: impl Iterator<Item = (&'p [u8], &'p [u8])>,
        count: usize,
    ) -> Result<(), DbError> {
        let keys = count as u64;
        if count == 1 {
            let (key, value) = pairs.next().expect("one pair");
            return self
                .with_map(|map| self.counted_write(1, || map.upsert(key, value)))?
                .map(drop)
                .map_err(DbError::Store);
        }
        self.batch_write(keys, |map, batch| {
            for (key, value) in pairs {
                map.put_in(batch, key, value)?;
            }
            Ok(())
        })
    }

    /// The stripe lock of `key` (for a pipeline holding several commands' stripes at once).
    pub(crate) fn stripe(&self, index: usize) -> &Mutex<()> {
        &self.stripes[index]
    }

    /// Run a write and count what it cost in flushes and fences for INFO.
    pub(crate) fn counted_write<T>(&self, keys: u64, write: impl FnOnce() -> T) -> T {
        let before = pmem_structures::thread_persist_counts();
        let result = write();
        let after = pmem_structures::thread_persist_counts();
        self.counters.write(
            keys,
            after.fences - before.fences,
            after.flushes - before.flushes,
        );
        result
    }

    /// Remove every key: the map is removed from the store and made anew, so the keys' space
    /// is freed in one crash-safe step (a crash in between leaves no map, and the next open
    /// makes an empty one). Waits for the commands running on the old map.
    ///
    /// Removing a large map records the list of its blocks first, in its own largest block
    /// when the list fits there and otherwise in a fresh block, which a full pool cannot give.
    /// Then the keys are deleted one by one (each delete frees its record and allocates
    /// nothing; a crash part-way keeps the keys not yet deleted) and the emptied map, now a
    /// few blocks, is removed. Whatever fails, the keyspace is left open and usable.
    pub(crate) fn flush(&self) -> Result<(), DbError> {
        // The stripes before the map's lock (the module's lock order): a writer holding a
        // stripe may be waiting to read the map's lock.
        let _all = self.stripes.iter().map(Mutex::lock).collect::<Vec<_>>();
        let mut slot = self
            .map
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // The store removes no map with a live handle.
        drop(slot.take());
        match self.store.remove_structure(KEYSPACE) {
            // Not found: an earlier flush removed it and could not make the new one.
            Ok(()) | Err(Error::NotFound { .. }) => {}
            Err(Error::PoolFull { .. }) => {
                let map = self.open_map()?;
                if let Err(error) = delete_every_key(&map) {
                    *slot = Some(map);
                    return Err(error.into());
                }
                drop(map);
                // The emptied map stays if it cannot go: it holds no key either way.
                let _ = self.store.remove_structure(KEYSPACE);
            }
            Err(error) => {
                *slot = self.open_map().ok();
                return Err(error.into());
            }
        }
        *slot = Some(self.open_map()?);
        Ok(())
    }

    fn open_map(&self) -> Result<Keyspace, Error> {
        self.store
            .btree_map::<Vec<u8>, Vec<u8>>(KEYSPACE, FastFairConfig::default())
    }
}

/// Delete the keys of `map` a batch at a time (a batch read, then deleted).
fn delete_every_key(map: &Keyspace) -> Result<(), Error> {
    const BATCH: usize = 1024;
    loop {
        let keys = map
            .iter()
            .take(BATCH)
            .map(|entry| entry.map(|(key, _)| key))
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() {
            return Ok(());
        }
        for key in keys {
            map.remove(&key[..])?;
        }
    }
}

pub(crate) fn stripe_of(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) as usize) % STRIPES
}

/// Stripes held by one command, released when it drops.
pub(crate) struct KeyLocks<'a> {
    _held: Vec<MutexGuard<'a, ()>>,
}

/// The smallest key above every key starting with `prefix` (`None`: there is none, every
/// key from the prefix on qualifies).
pub(crate) fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Bound::Excluded(end);
        }
    }
    Bound::Unbounded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_prefix_of_the_same_or_shorter_length() {
        assert_eq!(prefix_end(b"user:"), Bound::Excluded(b"user;".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Bound::Excluded(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), Bound::Unbounded);
        assert_eq!(prefix_end(b""), Bound::Unbounded);
    }
}
