//! Insert, upsert, put and remove: a slot written and fenced, then one 8-byte bitmap store
//! persisted (see the module docs); records and emptied leaves through the undo log.

use pmem_ordering::PPtr;
use pmem_undo_log::Tx;

use super::layout::{fingerprint, inline_header, out_of_line_slot, SLOT_HEADER};
use super::leaf::{key_prefix, Leaf, Pair, SlotBuf};
use super::{Index, LeafMap, Result};
use crate::records::layout::{self as record_layout, check_sizes, owner_of, Header};
use crate::records::RecordMapError;
use pmem_ordering::Backend;

/// What a write does with a key that is present.
enum Present<'a> {
    /// Leave it (an insert).
    Keep,
    /// Overwrite it, its old value copied here (an upsert).
    Copy(&'a mut Vec<u8>),
    /// Overwrite it, its old value unread (a put).
    Drop,
}

/// What a write found for its key.
struct Found {
    slot: usize,
    record: Option<u64>,
}

impl<B: Backend> LeafMap<B> {
    /// Insert `key -> value` if `key` is absent: `true` if inserted, `false` (and nothing
    /// written) if it was there.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.write_pair(key, value, Present::Keep)
    }

    /// Insert or overwrite `key -> value`; the old value if there was one.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut old = Vec::new();
        let replaced = !self.write_pair(key, value, Present::Copy(&mut old))?;
        Ok(replaced.then_some(old))
    }

    /// Insert or overwrite `key -> value` as [`LeafMap::upsert`] does, the old value neither
    /// copied nor checked (a write that drops it, as a `SET` does): `true` if `key` was
    /// absent, `false` if a value was replaced. The same slot write, bitmap store and fences
    /// as [`LeafMap::upsert`]; an old value whose bytes fail their checksum is written over,
    /// not reported.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.write_pair(key, value, Present::Drop)
    }

    /// Write `key -> value`, a present key as `present` says. Whether the key was absent.
    fn write_pair(&self, key: &[u8], value: &[u8], mut present: Present<'_>) -> Result<bool> {
        check_sizes(key, value)?;
        let mut guard = self.write();
        let index: &mut Index = &mut guard;
        let hash = index.keys.hash(key);
        loop {
            let (bound, leaf) = index.leaf_of_mut(key).ok_or_else(|| self.no_first_leaf())?;
            if let Some(e) = leaf.damage(&self.config) {
                return Err(e);
            }
            // The search below does not change the leaf's bitmap: its free slot now is the
            // one the write fills.
            let free = leaf.free_slot(self.config.slots());
            if let Some(free) = free {
                // The slot the write will fill and the leaf's bitmap word, asked for now:
                // their cache misses overlap the search for the key's slot, not follow it.
                let pool = self.heap.pool();
                pool.prefetch(
                    self.config.slot_at(leaf.offset, free),
                    self.config.slot_bytes,
                );
                pool.prefetch(leaf.offset, 8);
            }
            let mut buf = SlotBuf::new();
            let found = self.found(leaf, key, hash, &mut buf)?;
            if found.is_some() && matches!(present, Present::Keep) {
                return Ok(false);
            }
            let Some(free) = free else {
                let bound = bound.clone();
                self.split(index, bound.as_slice())?;
                continue;
            };
            if let Some(found) = found {
                if let Present::Copy(out) = &mut present {
                    let at = self.config.slot_at(leaf.offset, found.slot);
                    self.slots().value_into(at, key, &buf, out)?;
                }
                self.commit(leaf, free, Some(&found), key, hash, value)?;
                leaf.order_replace(found.slot, free);
                let from = self.config.slot_at(leaf.offset, found.slot);
                let to = self.config.slot_at(leaf.offset, free);
                index.keys.relocate(hash, from, to);
                return Ok(false);
            }
            let position = self.position(leaf, key)?;
            self.commit(leaf, free, None, key, hash, value)?;
            leaf.order_insert(position, free);
            let to = self.config.slot_at(leaf.offset, free);
            index.keys.insert(hash, to);
            index.len += 1;
            return Ok(true);
        }
    }

    /// Remove `key`; its value if it was there.
    pub fn remove(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > crate::records::MAX_KEY_BYTES {
            return Ok(None);
        }
        let mut guard = self.write();
        let index: &mut Index = &mut guard;
        let hash = index.keys.hash(key);
        let (bound, leaf) = index.leaf_of_mut(key).ok_or_else(|| self.no_first_leaf())?;
        if let Some(e) = leaf.damage(&self.config) {
            return Err(e);
        }
        let mut buf = SlotBuf::new();
        let Some(found) = self.found(leaf, key, hash, &mut buf)? else {
            return Ok(None);
        };
        let mut old = Vec::new();
        let at = self.config.slot_at(leaf.offset, found.slot);
        self.slots().value_into(at, key, &buf, &mut old)?;
        let bitmap = leaf.bitmap & !(1u64 << found.slot);
        if bitmap == 0 && leaf.offset != self.head {
            let bound = bound.clone();
            self.unlink(index, bound.as_slice(), found.record)?;
        } else {
            self.store_bitmap(leaf, bitmap, found.record)?;
            leaf.order_remove(found.slot);
        }
        index.keys.remove(hash, at);
        index.len -= 1;
        Ok(Some(old))
    }

    /// The slot of `leaf` holding `key` and the record it names, if any, its bytes left in
    /// `buf`.
    fn found(
        &self,
        leaf: &Leaf,
        key: &[u8],
        hash: u64,
        buf: &mut SlotBuf,
    ) -> Result<Option<Found>> {
        let Some(slot) = self.find(leaf, key, hash, buf)? else {
            return Ok(None);
        };
        let at = self.config.slot_at(leaf.offset, slot);
        let record = match self.slots().parsed(at, buf)? {
            Pair::Record { record } => Some(record),
            Pair::Inline { .. } => None,
        };
        Ok(Some(Found { slot, record }))
    }

    /// Where `key` (absent) goes in `leaf`'s key order: before the first larger key.
    pub(super) fn position(&self, leaf: &Leaf, key: &[u8]) -> Result<usize> {
        let slots = self.slots();
        leaf.search(key, true, |slot| {
            slots.compare(self.config.slot_at(leaf.offset, slot), key)
        })
    }

    /// Write `key -> value` (`hash`: the key's in the hash index) into the free slot `free`
    /// of `leaf` and publish it (taking the
    /// place of `old`, if any), durable on return; the leaf's bitmap and fingerprint in DRAM
    /// follow, its key order is the caller's.
    fn commit(
        &self,
        leaf: &mut Leaf,
        free: usize,
        old: Option<&Found>,
        key: &[u8],
        hash: u64,
        value: &[u8],
    ) -> Result<()> {
        let pool = self.heap.pool();
        let at = self.config.slot_at(leaf.offset, free);
        let bitmap = (leaf.bitmap | 1u64 << free) & !old.map_or(0, |f| 1u64 << f.slot);
        if key.len() + value.len() <= self.config.inline_bytes() {
            let header = inline_header(key, value);
            let mut w = pool.write(at, &header)?;
            w = w.merge(pool.write(at + SLOT_HEADER as u64, key)?);
            w = w.merge(pool.write(at + (SLOT_HEADER + key.len()) as u64, value)?);
            pool.fence(pool.flush(w));
            self.store_bitmap(leaf, bitmap, old.and_then(|f| f.record))?;
        } else {
            let owner = owner_of(self.root);
            self.heap.transaction(|tx| -> Result<()> {
                let record = tx
                    .alloc(record_layout::record_bytes(key.len(), value.len()))?
                    .offset();
                tx.write(record, &record_layout::header(owner, key, value))?;
                tx.write(Header::key_at(record), key)?;
                tx.write(Header::key_at(record) + key.len() as u64, value)?;
                tx.write(at, &out_of_line_slot(record))?;
                tx.write(leaf.offset, &bitmap.to_le_bytes())?;
                free_record(tx, old.and_then(|f| f.record))
            })?;
            leaf.bitmap = bitmap;
        }
        leaf.fps[free] = fingerprint(hash);
        leaf.prefixes[free] = key_prefix(key);
        Ok(())
    }

    /// Store `bitmap` as `leaf`'s, persisted, freeing `record` with it (in one transaction)
    /// if a pair it held was in one; the DRAM mirror follows.
    fn store_bitmap(&self, leaf: &mut Leaf, bitmap: u64, record: Option<u64>) -> Result<()> {
        let pool = self.heap.pool();
        match record {
            None => {
                pool.persist(pool.store_u64(leaf.offset, bitmap)?);
            }
            Some(_) => self.heap.transaction(|tx| -> Result<()> {
                tx.write(leaf.offset, &bitmap.to_le_bytes())?;
                free_record(tx, record)
            })?,
        }
        leaf.bitmap = bitmap;
        Ok(())
    }
}

/// Free `record` (a block a slot named) inside `tx`, if there is one.
pub(super) fn free_record<B: Backend>(tx: &Tx<'_, B>, record: Option<u64>) -> Result<()> {
    if let Some(r) = record {
        tx.free(PPtr::<u8>::new(r)).map_err(RecordMapError::from)?;
    }
    Ok(())
}
