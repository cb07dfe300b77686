//! The keyspace: one ordered map of byte strings in a `Store`, and what the commands need
//! around it (key stripes for read-modify-writes, the swap on FLUSHDB, write statistics).
//!
//! Every write returns once the store has made it durable, so a reply sent after it
//! acknowledges a durable write.

use std::ops::Bound;

use crossbeam_utils::sync::ShardedLock;
use parking_lot::{Mutex, MutexGuard};
use pmem_structures::{BTreeMap, Error, FastFairConfig, Store};

use crate::counters::Counters;

/// The map's name in the store.
pub(crate) const KEYSPACE: &str = "db0";

/// Key stripes: writes to keys of one stripe are serialized, so INCR, SET NX/XX and MSET see
/// no write slip in between their read and their write.
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

    /// Run a write and count what it cost in flushes and fences for INFO.
    pub(crate) fn counted_write<T>(&self, keys: u64, write: impl FnOnce() -> T) -> T {
        let before = pmem_structures::pmem_ordering::thread_stats();
        let result = write();
        let after = pmem_structures::pmem_ordering::thread_stats();
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
    pub(crate) fn flush(&self) -> Result<(), DbError> {
        let mut map = self
            .map
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let _all = self.stripes.iter().map(Mutex::lock).collect::<Vec<_>>();
        if map.take().is_some() {
            self.store.remove_structure(KEYSPACE)?;
        }
        let fresh = self
            .store
            .btree_map::<Vec<u8>, Vec<u8>>(KEYSPACE, FastFairConfig::default())?;
        *map = Some(fresh);
        Ok(())
    }
}

fn stripe_of(key: &[u8]) -> usize {
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
