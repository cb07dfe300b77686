//! The keyspace: one ordered map of byte strings in a `Store` (two more for expiry times:
//! see `expiry`; three for hashes: see `hashes`), and what the commands need around it (key
//! stripes for read-modify-writes, write batches for the commands that change several keys
//! at once, the swap on FLUSHDB, write statistics).
//!
//! Every write returns once the store has made it durable, so a reply sent after it
//! acknowledges a durable write.
//!
//! Lock order, the same for every command, so no two wait on each other: key stripes (in
//! stripe order, or taken without waiting once others are held), then the reclaim lock
//! (COPY of a hash, and the reclaiming of deleted hashes' fields), then the store's batch
//! lock, then the map's lock (read by commands, written by FLUSHDB), then the store's own
//! (writer gates, structure locks). Every writer of a key holds its stripe from its read to
//! its durable write, so what a command reads under its stripes stays true until it writes.

pub(crate) mod expiry;
pub(crate) mod hashes;

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_utils::sync::ShardedLock;
use parking_lot::{Mutex, MutexGuard};
use pmem_structures::raw::pmem_ordering::{Backend, Hardware};
use pmem_structures::{BTreeLayout, BTreeMap, Error, Store, WriteBatch};

use crate::counters::Counters;
use crate::hashes::highest_id;
use crate::reply::Reply;

/// The map's name in the store. Made in the leaf layout (pairs inline in persistent leaves,
/// inner nodes and a hash index in DRAM: a GET reads one slot, a pipeline's batch writes
/// the slots in place); a pool whose keyspace was made in the tree layout keeps it.
pub(crate) const KEYSPACE: &str = "db0";
/// Each key with an expiry time -> its deadline (milliseconds since the Unix epoch).
pub(crate) const EXPIRES: &str = "db0:expires";
/// The deadlines in order: big-endian deadline ++ key -> nothing (for active expiry).
pub(crate) const EXPIRY_INDEX: &str = "db0:expiry-index";
/// Each hash key -> its id and field count (see `hashes`).
pub(crate) const HASHES: &str = "db0:hashes";
/// Big-endian hash id ++ field -> value.
pub(crate) const HASH_FIELDS: &str = "db0:hash-fields";
/// Big-endian ids of deleted hashes whose fields are still to be deleted -> nothing.
pub(crate) const HASH_RECLAIM: &str = "db0:hash-reclaim";
/// The maps FLUSHDB removes, the keyspace first (the next open removes the others when it
/// is missing), then the hash maps (which must all go before the keyspace is made anew).
const MAPS: [&str; 6] = [
    KEYSPACE,
    HASHES,
    HASH_FIELDS,
    HASH_RECLAIM,
    EXPIRES,
    EXPIRY_INDEX,
];

/// Key stripes: writes to keys of one stripe are serialized, so the read-modify-writes (INCR,
/// INCRBYFLOAT, APPEND, SETRANGE, SETNX, SET NX/XX/GET, RENAME, COPY, MSETNX) see no write
/// slip in between their read and their write.
const STRIPES: usize = 1024;

/// The byte-string map commands run on.
pub(crate) type Keyspace = BTreeMap<Vec<u8>, Vec<u8>>;

/// The keyspace's maps. A key's deadline is in `expires` and `index` together (every
/// change of one writes both in one batch) and only while the key exists, except after a
/// FLUSHDB that could not remove the deadline maps whole: a deadline of an absent key is
/// then ignored, and removed when the key is next written or the deadline passes.
///
/// Generic over the store's backend so the expiry's crash test runs the same code on the
/// simulator; the server uses the defaults.
pub(crate) struct Maps<B: Backend = Hardware> {
    pub(crate) keys: BTreeMap<Vec<u8>, Vec<u8>, B>,
    pub(crate) expires: BTreeMap<Vec<u8>, u64, B>,
    pub(crate) index: BTreeMap<Vec<u8>, Vec<u8>, B>,
    pub(crate) hashes: BTreeMap<Vec<u8>, [u8; 16], B>,
    pub(crate) fields: BTreeMap<Vec<u8>, Vec<u8>, B>,
    pub(crate) reclaim: BTreeMap<Vec<u8>, Vec<u8>, B>,
    /// The id the next new hash takes.
    pub(crate) next_hash_id: AtomicU64,
    /// Set before a deadline is first written, cleared only by FLUSHDB (and at open when no
    /// key has one): while it is clear, a command's keys need no deadline lookup.
    pub(crate) any_deadline: Arc<AtomicBool>,
}

pub(crate) struct Db {
    store: Store,
    /// `None` only if FLUSHDB removed the maps and could not make new ones. Sharded: every
    /// command takes it to read, on both cores, and only FLUSHDB writes.
    map: ShardedLock<Option<Maps>>,
    /// The maps' `any_deadline`, read without the map's lock.
    any_deadline: Arc<AtomicBool>,
    stripes: Box<[Mutex<()>]>,
    /// Held by COPY of a hash while it writes the copy's fields, and by each reclaiming cycle.
    reclaim: Mutex<()>,
    /// The sum of every deadline (INFO's `avg_ttl`), changed after each batch that changes
    /// deadlines commits (see `expiry`).
    pub(crate) deadline_sum: Mutex<i128>,
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
        // No keyspace but deadline maps: a crash inside FLUSHDB, which removes the keyspace
        // first and makes it anew last. Its deadlines go with it; if the pool is too full
        // to remove them, they stay, ignored as deadlines of absent keys (see `Maps`).
        // The hash maps go too, and must (a hash's metadata without its key would read as a
        // hash): removed, or emptied key by key in a pool too full to record their blocks.
        let names = store.names();
        if !names.iter().any(|name| name == KEYSPACE) {
            for name in [EXPIRES, EXPIRY_INDEX] {
                if names.iter().any(|n| n == name) {
                    let _ = store.remove_structure(name);
                }
            }
            for name in [HASHES, HASH_FIELDS, HASH_RECLAIM] {
                if names.iter().any(|n| n == name) {
                    remove_map(&store, name)?;
                }
            }
        }
        let any_deadline = Arc::new(AtomicBool::new(false));
        let map = open_maps(&store, &any_deadline)?;
        any_deadline.store(!map.expires.is_empty(), Ordering::Release);
        let deadline_sum = crate::expiry::sum_of_deadlines(&map)?;
        Ok(Db {
            store,
            map: ShardedLock::new(Some(map)),
            any_deadline,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            reclaim: Mutex::new(()),
            deadline_sum: Mutex::new(deadline_sum),
            counters: Counters::default(),
        })
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Whether some key may have a deadline (false: none has).
    pub(crate) fn may_have_deadlines(&self) -> bool {
        self.any_deadline.load(Ordering::Acquire)
    }

    /// Run `command` on the map (FLUSHDB waits for it to finish).
    pub(crate) fn with_map<T>(&self, command: impl FnOnce(&Keyspace) -> T) -> Result<T, DbError> {
        self.with_maps(|maps| command(&maps.keys))
    }

    /// Run `command` on the keyspace's maps (FLUSHDB waits for it to finish).
    pub(crate) fn with_maps<T>(&self, command: impl FnOnce(&Maps) -> T) -> Result<T, DbError> {
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
    /// One key (a plain SET, every single-key command) allocates nothing.
    pub(crate) fn lock_keys<'a>(
        &'a self,
        mut keys: impl Iterator<Item = &'a [u8]>,
    ) -> KeyLocks<'a> {
        let Some(first) = keys.next() else {
            return KeyLocks {
                _held: Held::Many {
                    _guards: Vec::new(),
                },
            };
        };
        let first = stripe_of(first);
        let Some(second) = keys.next() else {
            return KeyLocks {
                _held: Held::One {
                    _guard: self.stripes[first].lock(),
                },
            };
        };
        let mut stripes = vec![first, stripe_of(second)];
        stripes.extend(keys.map(stripe_of));
        stripes.sort_unstable();
        stripes.dedup();
        KeyLocks {
            _held: Held::Many {
                _guards: stripes
                    .into_iter()
                    .map(|s| self.stripes[s].lock())
                    .collect(),
            },
        }
    }

    /// Run `write` on the map and a new write batch, then commit the batch: what `write` put
    /// in it is durable, all of it, when this returns `Ok`; on an error nothing changed.
    /// `write` reads the keys whose stripes the caller holds with the map's plain reads (the
    /// stripes keep them as read). Waits for another thread's batch to end first.
    pub(crate) fn batch_write<T>(
        &self,
        keys: u64,
        write: impl FnOnce(&Maps, &mut WriteBatch) -> Result<T, Error>,
    ) -> Result<T, DbError> {
        // The batch lock before the map's (the module's lock order).
        let mut batch = self.store.batch()?;
        crate::expiry::take_deadline_change();
        let outcome = self.with_maps(|map| {
            let out = write(map, &mut batch)?;
            self.counted_write(keys, || batch.commit())?;
            Ok::<_, Error>(out)
        })?;
        // Committed: the deadlines it changed count from now on.
        let change = crate::expiry::take_deadline_change();
        if outcome.is_ok() && change != 0 {
            *self.deadline_sum.lock() += change;
        }
        Ok(outcome?)
    }

    /// Set every `(key, value, deadline)` of `writes` (`count` of them), all durable
    /// together or none (a later write of a key wins), each with the deadline given (`None`:
    /// none, as SET and MSET leave a key; `Some`: SET ... EX in a pipeline). One write of a key
    /// that keeps no deadline and is no hash is a single write. The caller holds the keys'
    /// stripes.
    pub(crate) fn set_all<'p>(
        &self,
        mut writes: impl Iterator<Item = (&'p [u8], &'p [u8], Option<u64>)>,
        count: usize,
    ) -> Result<(), DbError> {
        let keys = count as u64;
        let mut first = None;
        if count == 1 {
            let (key, value, deadline) = writes.next().expect("one write");
            let single = self.with_maps(|maps| {
                if deadline.is_some()
                    || maps.deadline(key)?.is_some()
                    || maps.hash_meta(key)?.is_some()
                {
                    return Ok(false);
                }
                self.counted_write(1, || maps.keys.put(key, value))
                    .map(|_| true)
            })??;
            if single {
                return Ok(());
            }
            first = Some((key, value, deadline));
        }
        self.batch_write(keys, |maps, batch| {
            // Each key's deadline as the batch leaves it so far: a key written twice changes
            // from what the first write made it.
            let mut deadlines: std::collections::HashMap<&[u8], Option<u64>> =
                std::collections::HashMap::new();
            for (key, value, deadline) in first.into_iter().chain(writes) {
                maps.keys.put_in(batch, key, value)?;
                maps.forget_hash_in(batch, key)?;
                if deadline.is_none() && deadlines.is_empty() && maps.expires.is_empty() {
                    // No deadline before, none after: nothing to change or remember (the
                    // common pipeline of plain SETs allocates nothing here).
                    continue;
                }
                let old = match deadlines.get(key) {
                    Some(old) => *old,
                    None => maps.deadline(key)?,
                };
                maps.change_deadline_in(batch, key, old, deadline)?;
                deadlines.insert(key, deadline);
            }
            Ok(())
        })
    }

    /// The stripe lock of `key` (for a pipeline holding several commands' stripes at once).
    pub(crate) fn stripe(&self, index: usize) -> &Mutex<()> {
        &self.stripes[index]
    }

    /// The reclaim lock (see `hashes`), waited for.
    pub(crate) fn reclaim_lock(&self) -> MutexGuard<'_, ()> {
        self.reclaim.lock()
    }

    /// The reclaim lock, if free.
    pub(crate) fn try_reclaim_lock(&self) -> Option<MutexGuard<'_, ()>> {
        self.reclaim.try_lock()
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
    /// few blocks, is removed. Whatever fails, the keyspace is left open and usable, except
    /// when a hash map could not go: then it is unavailable until a FLUSHDB succeeds.
    pub(crate) fn flush(&self) -> Result<(), DbError> {
        // The stripes before the map's lock (the module's lock order): a writer holding a
        // stripe may be waiting to read the map's lock.
        let _all = self.stripes.iter().map(Mutex::lock).collect::<Vec<_>>();
        let _reclaiming = self.reclaim.lock();
        let mut slot = self
            .map
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // The store removes no map with a live handle.
        drop(slot.take());
        // The keyspace first: a crash after it leaves deadlines without keys, which the next
        // open removes (see `open`).
        for name in MAPS {
            if let Err(error) = remove_map(&self.store, name) {
                // Left deadlines are ignored (see `Maps`), left hash maps are not: without
                // them all gone the keyspace stays unavailable until a FLUSHDB succeeds.
                if ![HASHES, HASH_FIELDS, HASH_RECLAIM].contains(&name) {
                    *slot = open_maps(&self.store, &self.any_deadline).ok();
                }
                return Err(error.into());
            }
        }
        // No writer runs (every stripe is held): no deadline is being written.
        self.any_deadline.store(false, Ordering::Release);
        *self.deadline_sum.lock() = 0;
        *slot = Some(open_maps(&self.store, &self.any_deadline)?);
        Ok(())
    }
}

/// Remove the map `name` of `store` (every one has byte-string keys), or, when the pool is
/// too full to record its blocks, empty it key by key.
fn remove_map(store: &Store, name: &str) -> Result<(), Error> {
    match store.remove_structure(name) {
        // Not found: an earlier flush removed it and could not make the new one.
        Ok(()) | Err(Error::NotFound { .. }) => Ok(()),
        Err(Error::PoolFull { .. }) => {
            match name {
                EXPIRES => empty_map::<u64>(store, name)?,
                HASHES => empty_map::<[u8; 16]>(store, name)?,
                _ => empty_map::<Vec<u8>>(store, name)?,
            }
            // The emptied map stays if it cannot go: it holds no key either way.
            let _ = store.remove_structure(name);
            Ok(())
        }
        Err(error) => Err(error),
    }
}

/// Delete every key of the map `name` (of `V` values), a batch of keys at a time.
fn empty_map<V: pmem_structures::types::Value>(store: &Store, name: &str) -> Result<(), Error> {
    let map: BTreeMap<Vec<u8>, V> = store.btree_map(name)?;
    delete_every_key(
        |n| map.iter().take(n).map(|e| e.map(|(k, _)| k)).collect(),
        |key| map.remove(key).map(drop),
    )
}

/// The keyspace's maps in `store`, made empty where missing.
pub(crate) fn open_maps<B: Backend>(
    store: &Store<B>,
    any_deadline: &Arc<AtomicBool>,
) -> Result<Maps<B>, Error> {
    let fields = store.btree_map(HASH_FIELDS)?;
    let reclaim = store.btree_map(HASH_RECLAIM)?;
    // Past every id that still has fields or is listed for reclaiming (a live hash has
    // fields): ids of hashes reclaimed whole may be taken again, nothing refers to them. (One
    // id per hash made: 2^64 of them are never reached.)
    let highest = highest_id(&fields)?.max(highest_id(&reclaim)?);
    let next_hash_id = highest.map_or(1, |id| id.saturating_add(1));
    Ok(Maps {
        keys: store.btree_map_with(KEYSPACE, BTreeLayout::leaves())?,
        expires: store.btree_map(EXPIRES)?,
        index: store.btree_map(EXPIRY_INDEX)?,
        hashes: store.btree_map(HASHES)?,
        fields,
        reclaim,
        next_hash_id: AtomicU64::new(next_hash_id),
        any_deadline: any_deadline.clone(),
    })
}

/// Delete the keys of a map a batch at a time: `first(n)` reads its first `n` keys,
/// `remove` deletes one.
fn delete_every_key(
    first: impl Fn(usize) -> Result<Vec<Vec<u8>>, Error>,
    remove: impl Fn(&[u8]) -> Result<(), Error>,
) -> Result<(), Error> {
    const BATCH: usize = 1024;
    loop {
        let keys = first(BATCH)?;
        if keys.is_empty() {
            return Ok(());
        }
        for key in keys {
            remove(&key)?;
        }
    }
}

pub(crate) fn stripe_of(key: &[u8]) -> usize {
    (xxhash_rust::xxh3::xxh3_64(key) as usize) % STRIPES
}

/// Stripes held by one command, released when it drops.
pub(crate) struct KeyLocks<'a> {
    _held: Held<'a>,
}

/// The stripe guards a [`KeyLocks`] holds.
enum Held<'a> {
    One { _guard: MutexGuard<'a, ()> },
    Many { _guards: Vec<MutexGuard<'a, ()>> },
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

/// The error reply for a store refusal.
pub(crate) fn store_error(error: DbError) -> Reply {
    Reply::error(match error {
        DbError::Store(error @ Error::PoolFull { .. }) => format!("OOM {error}"),
        DbError::Store(error) => format!("ERR {error}"),
        DbError::Unavailable => "ERR the keyspace is unavailable: FLUSHDB removed it and could not make a new one (see the server's log); FLUSHDB again to retry".into(),
    })
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
