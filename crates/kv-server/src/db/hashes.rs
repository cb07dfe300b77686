//! Hashes: where a hash's fields live, and the writes the hash commands make.
//!
//! A hash key is in the keyspace like any key (so `EXISTS`, `DBSIZE`, `KEYS`, `SCAN`,
//! `RANDOMKEY` and expiry need nothing of their own), holding [`HASH_MARKER`] as its value.
//! Beside it, two maps of the store:
//!
//! * `hashes`: key -> the hash's metadata, its id and its number of fields (`HLEN`). It is
//!   what makes a key a hash: a keyspace value equal to the marker is a hash's only if the key
//!   is here too (a string may hold the marker's bytes), and a string value that is not the
//!   marker needs no second lookup, so `GET` costs what it did.
//! * `fields`: big-endian id ++ field -> value. The id has a fixed length, so the encoding is
//!   unambiguous, a hash's fields are one range of the map in field order, and `HGET` of one
//!   field is one lookup there (after the metadata's), whatever the hash's size.
//!
//! Ids are never those of a live hash or of fields not yet reclaimed: a new hash takes the next
//! one (at open, one past the highest id the fields and the reclaim list hold). Deleting a hash
//! (DEL, expiry, SET or RENAME over it, its last field's HDEL aside) removes its metadata and
//! puts its id on a third map, `reclaim` (big-endian id -> nothing), in one write batch with the
//! key's other changes: a constant amount of writing whatever the hash's size, so a delete is
//! atomic across a crash at any size. The fields of ids on that list are deleted in the
//! background a step at a time (each step a batch, the id leaving the list in the step that
//! finds its last fields); a crash part-way leaves the id listed, and the next open goes on.
//! `RENAME` of a hash moves its metadata and nothing else; `COPY` writes the copy's fields
//! under a new id, listed for reclaiming until the batch that publishes it (so a crash part-way
//! leaves nothing behind but fields to reclaim).

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::Ordering;

use pmem_structures::raw::pmem_ordering::Backend;
use pmem_structures::{BTreeMap, Error, WriteBatch};

use crate::db::{Db, DbError, Maps};

/// What a hash key holds in the keyspace map.
pub(crate) const HASH_MARKER: &[u8] = b"\0pmem-kv-server:hash\0";

/// The most field entries one step of reclaiming (or of copying a hash) writes in a batch:
/// small enough that its log fits any store's write-batch area.
pub(crate) const STEP: usize = 256;

/// A hash's metadata: its id and how many fields it has (never 0: a hash whose last field goes
/// is deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HashMeta {
    pub(crate) id: u64,
    pub(crate) len: u64,
}

impl HashMeta {
    pub(crate) fn encode(self) -> [u8; 16] {
        let mut bytes = [0; 16];
        bytes[..8].copy_from_slice(&self.id.to_le_bytes());
        bytes[8..].copy_from_slice(&self.len.to_le_bytes());
        bytes
    }

    pub(crate) fn decode(bytes: [u8; 16]) -> HashMeta {
        let (id, len) = bytes.split_at(8);
        HashMeta {
            id: u64::from_le_bytes(id.try_into().expect("8 bytes")),
            len: u64::from_le_bytes(len.try_into().expect("8 bytes")),
        }
    }
}

/// The `fields` map's key of `field` in the hash `id`.
pub(crate) fn field_key(id: u64, field: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + field.len());
    key.extend_from_slice(&id.to_be_bytes());
    key.extend_from_slice(field);
    key
}

/// The field of a `fields` map key (`None`: too short to be one).
pub(crate) fn field_of(entry: &[u8]) -> Option<&[u8]> {
    entry.get(8..)
}

fn id_of(entry: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(*entry.first_chunk::<8>()?))
}

/// The bounds in the `fields` map of the hash `id`'s fields within `low..high` (bounds on
/// fields).
pub(crate) fn field_range(
    id: u64,
    low: Bound<&[u8]>,
    high: Bound<&[u8]>,
) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let low = match low {
        Bound::Included(field) => Bound::Included(field_key(id, field)),
        Bound::Excluded(field) => Bound::Excluded(field_key(id, field)),
        Bound::Unbounded => Bound::Included(id.to_be_bytes().to_vec()),
    };
    let high = match high {
        Bound::Included(field) => Bound::Included(field_key(id, field)),
        Bound::Excluded(field) => Bound::Excluded(field_key(id, field)),
        Bound::Unbounded => match id.checked_add(1) {
            Some(next) => Bound::Excluded(next.to_be_bytes().to_vec()),
            None => Bound::Unbounded,
        },
    };
    (low, high)
}

/// What a key holds.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Absent,
    String(Vec<u8>),
    Hash(HashMeta),
}

/// The highest id of a map keyed by big-endian id first (`None`: empty), by a binary search
/// of range lookups (the maps walk forward only).
pub(crate) fn highest_id<B: Backend, V: pmem_structures::types::Value>(
    map: &BTreeMap<Vec<u8>, V, B>,
) -> Result<Option<u64>, Error> {
    let any_from = |id: u64| -> Result<bool, Error> {
        let from = id.to_be_bytes();
        Ok(map
            .range::<&[u8], _>((Bound::Included(&from[..]), Bound::Unbounded))
            .next()
            .transpose()?
            .is_some())
    };
    if !any_from(0)? {
        return Ok(None);
    }
    let (mut low, mut high) = (0u64, u64::MAX);
    while low < high {
        let middle = low + (high - low).div_ceil(2);
        if any_from(middle)? {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    Ok(Some(low))
}

/// The maps' side of the hash commands: each function reads and puts into a batch what one
/// command writes (the commands run them through `Db`; the crash test runs them on the
/// simulator).
impl<B: Backend> Maps<B> {
    /// `key`'s hash metadata, if it is a hash (no lookup while there is no hash).
    pub(crate) fn hash_meta(&self, key: &[u8]) -> Result<Option<HashMeta>, Error> {
        if self.hashes.is_empty() {
            return Ok(None);
        }
        Ok(self.hashes.get(key)?.map(HashMeta::decode))
    }

    /// What `key` holds, given its keyspace value.
    pub(crate) fn kind(&self, key: &[u8], value: Option<Vec<u8>>) -> Result<Kind, Error> {
        Ok(match value {
            None => Kind::Absent,
            Some(value) if value == HASH_MARKER => match self.hash_meta(key)? {
                Some(meta) => Kind::Hash(meta),
                None => Kind::String(value),
            },
            Some(value) => Kind::String(value),
        })
    }

    /// What `key` holds.
    pub(crate) fn read_kind(&self, key: &[u8]) -> Result<Kind, Error> {
        self.kind(key, self.keys.get(key)?)
    }

    /// A new hash's id.
    pub(crate) fn new_hash_id(&self) -> u64 {
        self.next_hash_id.fetch_add(1, Ordering::Relaxed)
    }

    /// If `key` is a hash, end it in `batch`: its metadata goes and its id is listed for
    /// reclaiming (the caller writes or deletes the key itself). Its metadata, if it was one.
    pub(crate) fn forget_hash_in(
        &self,
        batch: &mut WriteBatch<B>,
        key: &[u8],
    ) -> Result<Option<HashMeta>, Error> {
        let Some(meta) = self.hash_meta(key)? else {
            return Ok(None);
        };
        self.hashes.delete_in(batch, key)?;
        self.reclaim
            .put_in(batch, &meta.id.to_be_bytes()[..], &[][..])?;
        Ok(Some(meta))
    }

    /// Delete `key`, whatever it holds, and its deadline; its keyspace value, if it existed
    /// (DEL, GETDEL, EXPIRE to a past time, of a hash or a key with a deadline).
    pub(crate) fn delete_key_in(
        &self,
        batch: &mut WriteBatch<B>,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>, Error> {
        let removed = self.keys.remove_in(batch, key)?;
        self.forget_hash_in(batch, key)?;
        self.change_deadline_in(batch, key, self.deadline(key)?, None)?;
        Ok(removed)
    }

    /// RENAME's writes, `from` (holding `value`) and `to` being different keys: `to` takes
    /// `from`'s value and deadline (a hash its metadata alone: its fields stay under its id),
    /// whatever `to` held goes, and `from` is deleted.
    pub(crate) fn move_key_in(
        &self,
        batch: &mut WriteBatch<B>,
        from: &[u8],
        to: &[u8],
        value: Vec<u8>,
    ) -> Result<(), Error> {
        let deadline = self.deadline(from)?;
        let hash = match self.kind(from, Some(value.clone()))? {
            Kind::Hash(meta) => Some(meta),
            _ => None,
        };
        self.keys.put_in(batch, to, &value[..])?;
        // Before the metadata is written under `to` (a batch keeps a key's last write).
        self.forget_hash_in(batch, to)?;
        self.change_deadline_in(batch, to, self.deadline(to)?, deadline)?;
        if let Some(meta) = hash {
            self.hashes.delete_in(batch, from)?;
            self.hashes.put_in(batch, to, meta.encode())?;
        }
        self.keys.delete_in(batch, from)?;
        self.change_deadline_in(batch, from, deadline, None)
    }

    /// HSET's writes: each `(field, value)` of `pairs` set in `key`'s hash, whose metadata is
    /// `meta` (`None`: the key is absent, and becomes a hash). How many fields are new.
    pub(crate) fn hash_set_in(
        &self,
        batch: &mut WriteBatch<B>,
        key: &[u8],
        meta: Option<HashMeta>,
        pairs: &[(&[u8], &[u8])],
    ) -> Result<u64, Error> {
        let meta = match meta {
            Some(meta) => meta,
            None => {
                self.keys.put_in(batch, key, HASH_MARKER)?;
                // Only a deadline a FLUSHDB left behind (see `Maps`).
                self.change_deadline_in(batch, key, self.deadline(key)?, None)?;
                HashMeta {
                    id: self.new_hash_id(),
                    len: 0,
                }
            }
        };
        let mut seen = HashSet::new();
        let mut added = 0;
        for &(field, value) in pairs {
            let entry = field_key(meta.id, field);
            if seen.insert(field) && (meta.len == 0 || !self.fields.contains_key(&entry[..])?) {
                added += 1;
            }
            self.fields.put_in(batch, &entry[..], value)?;
        }
        if added > 0 {
            let meta = HashMeta {
                id: meta.id,
                len: meta.len + added,
            };
            self.hashes.put_in(batch, key, meta.encode())?;
        }
        Ok(added)
    }

    /// HDEL's writes: each of `fields` the hash has deleted, and the whole key (with its
    /// deadline) when none is left. How many fields went.
    pub(crate) fn hash_delete_in(
        &self,
        batch: &mut WriteBatch<B>,
        key: &[u8],
        meta: HashMeta,
        fields: &[&[u8]],
    ) -> Result<u64, Error> {
        let mut seen = HashSet::new();
        let mut removed = 0;
        for &field in fields {
            let entry = field_key(meta.id, field);
            if seen.insert(field) && self.fields.contains_key(&entry[..])? {
                self.fields.delete_in(batch, &entry[..])?;
                removed += 1;
            }
        }
        if removed > 0 && removed == meta.len {
            // Every field deleted here: nothing is left to reclaim.
            self.hashes.delete_in(batch, key)?;
            self.keys.delete_in(batch, key)?;
            self.change_deadline_in(batch, key, self.deadline(key)?, None)?;
        } else if removed > 0 {
            let meta = HashMeta {
                id: meta.id,
                len: meta.len - removed,
            };
            self.hashes.put_in(batch, key, meta.encode())?;
        }
        Ok(removed)
    }

    /// One step of reclaiming: up to [`STEP`] field entries of the first listed id deleted,
    /// and the id unlisted once none is left. How many entries it deleted (`None`: nothing is
    /// listed).
    pub(crate) fn reclaim_step_in(
        &self,
        batch: &mut WriteBatch<B>,
    ) -> Result<Option<usize>, Error> {
        let Some((listed, _)) = self.reclaim.iter().next().transpose()? else {
            return Ok(None);
        };
        let Some(id) = id_of(&listed) else {
            // Not an id: no fields are under it.
            self.reclaim.delete_in(batch, &listed[..])?;
            return Ok(Some(0));
        };
        let (low, high) = field_range(id, Bound::Unbounded, Bound::Unbounded);
        let entries = self
            .fields
            .range::<&[u8], _>((
                low.as_ref().map(Vec::as_slice),
                high.as_ref().map(Vec::as_slice),
            ))
            .take(STEP)
            .map(|entry| entry.map(|(entry, _)| entry))
            .collect::<Result<Vec<_>, _>>()?;
        for entry in &entries {
            self.fields.delete_in(batch, &entry[..])?;
        }
        if entries.len() < STEP {
            self.reclaim.delete_in(batch, &listed[..])?;
        }
        Ok(Some(entries.len()))
    }

    /// Whether the hash maps agree with each other and the keys: every hash's key holds the
    /// marker, its fields number its count (never 0) and its id is not listed for reclaiming;
    /// every field entry is a hash's or a listed id's; every id is below the next one. The
    /// number of hashes, or what disagrees.
    pub(crate) fn check_hashes(&self) -> Result<Result<u64, String>, Error> {
        let mut live = std::collections::HashMap::new();
        let next = self.next_hash_id.load(Ordering::Relaxed);
        for entry in self.hashes.iter() {
            let (key, meta) = entry?;
            let meta = HashMeta::decode(meta);
            if self.keys.get(&key[..])?.as_deref() != Some(HASH_MARKER) {
                return Ok(Err(format!(
                    "hash {key:?} without its marker in the keyspace"
                )));
            }
            if meta.len == 0 || meta.id >= next {
                return Ok(Err(format!(
                    "hash {key:?} has metadata {meta:?} (next id {next})"
                )));
            }
            if live.insert(meta.id, (key.clone(), meta.len)).is_some() {
                return Ok(Err(format!("id {} is two hashes'", meta.id)));
            }
        }
        let mut listed = HashSet::new();
        for entry in self.reclaim.iter() {
            let (entry, _) = entry?;
            match id_of(&entry) {
                Some(id) if id < next && !live.contains_key(&id) => listed.insert(id),
                _ => return Ok(Err(format!("reclaim entry {entry:?} is not a dead id"))),
            };
        }
        let mut counted = std::collections::HashMap::new();
        for entry in self.fields.iter() {
            let (entry, _) = entry?;
            match id_of(&entry) {
                Some(id) if live.contains_key(&id) => *counted.entry(id).or_insert(0u64) += 1,
                Some(id) if listed.contains(&id) => {}
                _ => return Ok(Err(format!("field entry {entry:?} of no hash"))),
            }
        }
        for (id, (key, len)) in &live {
            let found = counted.get(id).copied().unwrap_or(0);
            if found != *len {
                return Ok(Err(format!(
                    "hash {key:?} counts {len} fields, has {found}"
                )));
            }
        }
        Ok(Ok(live.len() as u64))
    }
}

impl Db {
    /// `key`'s hash metadata for a hash command: `Ok(None)` if it is absent, `Err` (WRONGTYPE)
    /// if it holds a string.
    pub(crate) fn hash_of(&self, key: &[u8]) -> Result<Result<Option<HashMeta>, ()>, DbError> {
        let kind = self.with_maps(|maps| maps.read_kind(key))??;
        Ok(match kind {
            Kind::Absent => Ok(None),
            Kind::Hash(meta) => Ok(Some(meta)),
            Kind::String(_) => Err(()),
        })
    }

    /// Set `pairs` in `key`'s hash (metadata `meta`, `None` for an absent key); how many
    /// fields are new. A value of an existing field of a hash is a single write; anything
    /// else one batch. The caller holds the key's stripe.
    pub(crate) fn hash_set(
        &self,
        key: &[u8],
        meta: Option<HashMeta>,
        pairs: &[(&[u8], &[u8])],
    ) -> Result<u64, DbError> {
        if let (Some(meta), [(field, value)]) = (meta, pairs) {
            let entry = field_key(meta.id, field);
            let replaced = self.with_maps(|maps| {
                if !maps.fields.contains_key(&entry[..])? {
                    return Ok(false);
                }
                self.counted_write(1, || maps.fields.put(&entry[..], *value))?;
                Ok::<_, Error>(true)
            })??;
            if replaced {
                return Ok(0);
            }
        }
        self.batch_write(1, |maps, batch| maps.hash_set_in(batch, key, meta, pairs))
    }

    /// Delete `fields` of `key`'s hash (and the key with its last field); how many went. The
    /// caller holds the key's stripe.
    pub(crate) fn hash_delete(
        &self,
        key: &[u8],
        meta: HashMeta,
        fields: &[&[u8]],
    ) -> Result<u64, DbError> {
        self.batch_write(1, |maps, batch| {
            maps.hash_delete_in(batch, key, meta, fields)
        })
    }

    /// Copy the hash `from` (metadata `meta`) to `to`, replacing what `to` holds; the copy
    /// takes the source's deadline. Its fields are written under a new id, listed for
    /// reclaiming first and published with the key by the last batch, so a failure or a crash
    /// part-way leaves `to` as it was. The caller holds both keys' stripes.
    pub(crate) fn copy_hash(&self, from: &[u8], meta: HashMeta, to: &[u8]) -> Result<(), DbError> {
        // The reclaimer leaves the new id alone while its fields are being written.
        let _reclaiming = self.reclaim_lock();
        let id = self.with_maps(Maps::new_hash_id)?;
        let listed = id.to_be_bytes();
        self.batch_write(0, |maps, batch| {
            maps.reclaim.put_in(batch, &listed[..], &[][..])
        })?;
        let (low, high) = field_range(meta.id, Bound::Unbounded, Bound::Unbounded);
        let mut low = low;
        loop {
            let step = self.with_maps(|maps| {
                maps.fields
                    .range::<&[u8], _>((
                        low.as_ref().map(Vec::as_slice),
                        high.as_ref().map(Vec::as_slice),
                    ))
                    .take(STEP)
                    .collect::<Result<Vec<_>, _>>()
            })??;
            let Some((last, _)) = step.last() else {
                break;
            };
            low = Bound::Excluded(last.clone());
            self.batch_write(0, |maps, batch| {
                for (entry, value) in &step {
                    let field = field_of(entry).unwrap_or_default();
                    maps.fields
                        .put_in(batch, &field_key(id, field)[..], &value[..])?;
                }
                Ok(())
            })?;
            if step.len() < STEP {
                break;
            }
        }
        self.batch_write(1, |maps, batch| {
            let (deadline, replaced) = (maps.deadline(from)?, maps.deadline(to)?);
            maps.forget_hash_in(batch, to)?;
            maps.keys.put_in(batch, to, HASH_MARKER)?;
            let copy = HashMeta { id, len: meta.len };
            maps.hashes.put_in(batch, to, copy.encode())?;
            maps.change_deadline_in(batch, to, replaced, deadline)?;
            maps.reclaim.delete_in(batch, &listed[..])
        })
    }

    /// Reclaim the fields of deleted hashes, a step at a time, until none is left or `budget`
    /// is spent (skipped while a COPY writes a hash). How many entries went.
    pub(crate) fn reclaim_cycle(&self, budget: std::time::Duration) -> Result<u64, DbError> {
        let started = std::time::Instant::now();
        let Some(_reclaiming) = self.try_reclaim_lock() else {
            return Ok(0);
        };
        let mut reclaimed = 0;
        loop {
            let step = self.batch_write(0, |maps, batch| maps.reclaim_step_in(batch))?;
            match step {
                Some(count) => reclaimed += count as u64,
                None => return Ok(reclaimed),
            }
            if started.elapsed() >= budget {
                return Ok(reclaimed);
            }
        }
    }

    /// Whether some hash's fields wait to be reclaimed.
    pub(crate) fn has_reclaimable(&self) -> bool {
        self.with_maps(|maps| !maps.reclaim.is_empty())
            .unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem_structures::{Granularity, Store, StoreOptions};

    #[test]
    fn metadata_and_field_keys_read_back_and_fields_sort_within_their_hash() {
        let meta = HashMeta {
            id: 0x0102_0304_0506_0708,
            len: 300,
        };
        assert_eq!(HashMeta::decode(meta.encode()), meta);
        let entry = field_key(7, b"field");
        assert_eq!(
            (id_of(&entry), field_of(&entry)),
            (Some(7), Some(&b"field"[..]))
        );
        // A hash's range holds its fields alone: the next id's empty field is past it.
        let (low, high) = field_range(7, Bound::Unbounded, Bound::Unbounded);
        assert_eq!(low, Bound::Included(7u64.to_be_bytes().to_vec()));
        assert_eq!(high, Bound::Excluded(field_key(8, b"")));
        assert!(field_key(7, &[0xff; 40]) < field_key(8, b""));
        let (_, high) = field_range(u64::MAX, Bound::Unbounded, Bound::Unbounded);
        assert_eq!(high, Bound::Unbounded);
        assert_eq!(
            field_range(7, Bound::Excluded(b"a"), Bound::Included(b"b")),
            (
                Bound::Excluded(field_key(7, b"a")),
                Bound::Included(field_key(7, b"b"))
            )
        );
    }

    #[test]
    fn the_highest_id_is_found_by_range_lookups() {
        let options = StoreOptions::new().granularity(Granularity::Emulated);
        let store = Store::anonymous(8 << 20, &options).unwrap();
        let map: BTreeMap<Vec<u8>, Vec<u8>> = store.btree_map("ids").unwrap();
        assert_eq!(highest_id(&map).unwrap(), None);
        for id in [0, 1, 5, 1 << 40, u64::MAX - 1] {
            map.insert(&field_key(id, b"f")[..], &[][..]).unwrap();
            assert_eq!(highest_id(&map).unwrap(), Some(id));
        }
        map.insert(&u64::MAX.to_be_bytes()[..], &[][..]).unwrap();
        assert_eq!(highest_id(&map).unwrap(), Some(u64::MAX));
    }
}
