//! The byte-key hash map: a CCEH table whose slots hold `(hash of the key, record offset)`.
//!
//! One file past 600 lines: the map's open, reads and writes each follow the record protocol's
//! steps in the same order (stage, name in an intent line, fence, publish in the slot, fence),
//! and read best side by side.
//!
//! The slot's key word is the key's 64-bit hash (XXH3, never 0): a *fingerprint* good enough
//! that a lookup reads a record only for the key it looks for, except on a full 64-bit
//! collision, which the table allows (its `Hashed` mode) and tells apart by the record's key.
//! Writes follow the record protocol of [`super`]: two fences for an insert, an overwrite or a
//! remove that needs no split.
//!
//! # Root object ([`ROOT_BYTES`], 64-byte aligned)
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic ([`StructureKind::RecordHashMap`]) |
//! | 8 | format version |
//! | 16 | the intent area's offset |
//! | 64..96 | the CCEH table's root |

use std::cell::RefCell;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::error::RecordMapError;
use super::head;
use super::layout::{self, check_sizes, FirstLine, MAX_KEY_BYTES};
use super::verify::{self, RecordWalk};
use super::{Records, Resolved};
use crate::cceh::{self, Cceh, CcehConfig, CcehError, SlotProbe};
use crate::kind::StructureKind;
use crate::verify::{Problem, Verification};

/// Bytes of the root object.
pub const ROOT_BYTES: u64 = 128;
/// Where the CCEH table's root sits in the root object.
const TABLE_AT: u64 = 64;

type Result<T, E = RecordMapError> = std::result::Result<T, E>;

/// The slot key word of `key`: its XXH3 hash, moved off the table's empty-slot word 0.
pub fn key_word(key: &[u8]) -> u64 {
    match xxhash_rust::xxh3::xxh3_64(key) {
        cceh::EMPTY_KEY => 1,
        h => h,
    }
}

/// A lookup's probe: the key's hash word, and its bytes to compare with a record's. The first
/// line of the record that matched is kept, so the value is read without reading it again.
pub(super) struct KeyProbe<'a, B: Backend> {
    word: u64,
    key: &'a [u8],
    pool: &'a Pool<B>,
    matched: RefCell<Option<(u64, FirstLine)>>,
    /// A record under the key's word that could not be read (its header impossible, or it
    /// held another key and failed its checksum): most likely the key's own record, damaged (a
    /// 64-bit hash collision is far less likely), so a lookup that finds no match reports it
    /// instead of "absent", and a write refuses to add the key a second time.
    damaged: RefCell<Option<RecordMapError>>,
    /// A whole record under the key's word whose key hashes to another word: the slot's
    /// damage, if the slot held it (under the stripe lock, it did; a lock-free lookup may have
    /// paired the word of a slot being reused with its next value, so [`KeyProbe::absent`]
    /// looks for the pair once more before it believes it).
    misfiled: RefCell<Option<(u64, Vec<u8>)>>,
}

impl<B: Backend> SlotProbe for KeyProbe<'_, B> {
    #[inline]
    fn word(&self) -> u64 {
        self.word
    }

    /// `value` is a record offset; in a lock-free lookup it may be stale, so every read is
    /// range-checked. Stale or not, it names a whole record (one published before any slot
    /// held it, and not reused while the caller is pinned or holds the stripe lock), so a
    /// record that cannot be read is damage: noted, and no match.
    fn matches(&self, value: u64) -> bool {
        let line = match layout::first_line(self.pool, value) {
            Ok(line) => line,
            Err(e) => {
                self.note(e);
                return false;
            }
        };
        match line.key_equals(self.pool, value, self.key) {
            Ok(true) => {
                *self.matched.borrow_mut() = Some((value, line));
                true
            }
            Ok(false) => {
                // Another key's record, or this key's damaged: the checksum tells; a whole
                // record of a key of another word means the slot's value word is damaged.
                match line.checked_key_value(self.pool, value) {
                    Err(e) => self.note(e),
                    Ok((other, _)) if key_word(&other) != self.word => {
                        self.misfiled.borrow_mut().get_or_insert((value, other));
                    }
                    Ok(_) => {}
                }
                false
            }
            Err(e) => {
                self.note(RecordMapError::CorruptRecord {
                    offset: value,
                    reason: format!("its key cannot be read: {e}"),
                });
                false
            }
        }
    }
}

impl<B: Backend> KeyProbe<'_, B> {
    /// The value of the record at `record` into `out` (its capacity reused), checked, from the
    /// line `matches` kept when it is that record's: the probe's key stands for the record's
    /// (the match compared them), so the key is not copied.
    fn value_into(&self, record: u64, out: &mut Vec<u8>) -> Result<()> {
        if let Some((at, line)) = self.matched.borrow().as_ref() {
            if *at == record {
                return line.checked_value_into(self.pool, record, self.key, out);
            }
        }
        let value = value_at(self.pool, record)?;
        out.clear();
        out.extend_from_slice(&value);
        Ok(())
    }

    /// Keep the first damage met.
    fn note(&self, e: RecordMapError) {
        self.damaged.borrow_mut().get_or_insert(e);
    }

    /// What a lock-free lookup of `table` that found no record for the key returns: the
    /// damage met on the way, or none. A misfiled record counts once a validated lookup finds
    /// a slot of the key's word naming it (the caller is still pinned, so it is the record
    /// that was read).
    fn absent<T>(&self, table: &Cceh<B>) -> Result<Option<T>> {
        if let Some(e) = self.damaged.borrow_mut().take() {
            return Err(e);
        }
        if let Some((record, key)) = self.misfiled.borrow_mut().take() {
            let pair = OffsetProbe {
                word: self.word,
                offset: record,
            };
            if table.get_probe(&pair, |_| ())?.is_some() {
                return Err(misfiled(record, &key, self.word));
            }
        }
        Ok(None)
    }

    /// `Err` with the damage met so far, if any, under the stripe lock (so a misfiled record
    /// was the slot's own): a write that found no record for the key must not add one while
    /// a record it could not read may be the key's.
    fn undamaged(&self) -> Result<()> {
        if let Some(e) = self.damaged.borrow_mut().take() {
            return Err(e);
        }
        match self.misfiled.borrow_mut().take() {
            Some((record, key)) => Err(misfiled(record, &key, self.word)),
            None => Ok(()),
        }
    }
}

/// The error for the whole record at `record`, of key `key`, found under key word `word`,
/// which is not its key's: a slot's damaged value or key word.
fn misfiled(record: u64, key: &[u8], word: u64) -> RecordMapError {
    RecordMapError::CorruptRecord {
        offset: record,
        reason: format!(
            "a slot of key word {word:#x} names it, but its key hashes to {:#x}: the slot is \
             damaged",
            key_word(key)
        ),
    }
}

/// A probe for the slot of a key word that names one record.
struct OffsetProbe {
    word: u64,
    offset: u64,
}

impl SlotProbe for OffsetProbe {
    fn word(&self) -> u64 {
        self.word
    }

    fn matches(&self, value: u64) -> bool {
        value == self.offset
    }
}

/// The value of the record at `record`, checked, read inside a pinned epoch or under the lock
/// that keeps it.
fn value_at<B: Backend>(pool: &Pool<B>, record: u64) -> Result<Vec<u8>> {
    layout::first_line(pool, record)?.checked_value(pool, record)
}

/// A CCEH hash map from byte strings to byte strings, in a heap (see the module docs).
pub struct RecordHashMap<B: Backend> {
    pub(super) table: Cceh<B>,
    pub(super) records: Records,
    root: u64,
    resolved: Resolved,
}

impl<B> RecordHashMap<B>
where
    B: Backend,
{
    /// Make an empty map at `root` (an all-zero, 64-byte aligned range of [`ROOT_BYTES`]), in
    /// one transaction (joining the caller's, if any).
    pub fn create(heap: &Heap<B>, root: u64, config: CcehConfig) -> Result<Self> {
        head::check_new(heap.pool(), root, ROOT_BYTES)?;
        let (table, area) = heap.transaction(|tx| -> Result<_> {
            let area = head::write_head(tx, root, StructureKind::RecordHashMap)?;
            let table = Cceh::create_hashed(heap, root + TABLE_AT, config)?;
            Ok((table, area))
        })?;
        Ok(RecordHashMap {
            table,
            records: Records::new(root, area),
            root,
            resolved: Resolved::default(),
        })
    }

    /// Open the map at `root`: the table recovers, then every record an interrupted write left
    /// in doubt is resolved. Must run before anything else allocates from the heap after a
    /// crash (the [`crate::Store`] opens its record maps when it loads).
    pub fn open(heap: &Heap<B>, root: u64) -> Result<Self> {
        let (area, _) = head::read_head(heap, root, StructureKind::RecordHashMap)?;
        let table = Cceh::open_hashed(heap, root + TABLE_AT)?;
        let mut map = RecordHashMap {
            table,
            records: Records::new(root, area),
            root,
            resolved: Resolved::default(),
        };
        // A record is reachable if a slot of its key's word names it: told without reading
        // any other record, so damage elsewhere does not stop the open.
        let resolved = map.records.resolve(map.table.heap(), |offset, key| {
            let probe = OffsetProbe {
                word: key_word(key),
                offset,
            };
            Ok::<_, RecordMapError>(map.table.get_probe(&probe, |_| ())?.is_some())
        })?;
        map.resolved = resolved;
        Ok(map)
    }
}

impl<B> RecordHashMap<B>
where
    B: Backend,
{
    /// The heap.
    pub fn heap(&self) -> &Heap<B> {
        self.table.heap()
    }

    /// The root object's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// What the last open's resolution of interrupted writes did.
    pub fn resolved_at_open(&self) -> Resolved {
        self.resolved
    }

    pub(super) fn probe<'a>(&'a self, key: &'a [u8]) -> KeyProbe<'a, B> {
        KeyProbe {
            word: key_word(key),
            key,
            pool: self.heap().pool(),
            matched: RefCell::new(None),
            damaged: RefCell::new(None),
            misfiled: RefCell::new(None),
        }
    }

    /// The offset of the record `key` has now, if any (lock-free; the caller pins the epoch,
    /// as the probe reads the keys of the records it meets); a damaged record under its word is
    /// [`RecordMapError::CorruptRecord`].
    pub(super) fn record_of(&self, key: &[u8]) -> Result<Option<u64>> {
        let probe = self.probe(key);
        match self.table.get_probe(&probe, |record| record)? {
            Some(record) => Ok(Some(record)),
            None => probe.absent(&self.table),
        }
    }

    /// The value of `key`, if present. Takes no lock.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// The value of `key` into `out` (cleared first; its capacity is reused, so a read
    /// allocates nothing once `out` is large enough): whether `key` is present (`out` is left
    /// empty if not). Takes no lock.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        if key.len() > MAX_KEY_BYTES {
            return Ok(false);
        }
        // Pinned while the lookup matches and reads: a record it reaches is not handed out
        // again while it is copied (a writer that retires it defers the block's reuse past the
        // epoch). The table's own read section protects only its directories.
        let _guard = self.records.pin();
        let probe = self.probe(key);
        match self
            .table
            .get_probe(&probe, |record| probe.value_into(record, out))?
        {
            Some(Ok(())) => Ok(true),
            Some(Err(e)) => {
                out.clear();
                Err(e)
            }
            None => probe.absent::<()>(&self.table).map(|_| false),
        }
    }

    /// Whether `key` is present. Takes no lock.
    pub fn contains_key(&self, key: &[u8]) -> Result<bool> {
        if key.len() > MAX_KEY_BYTES {
            return Ok(false);
        }
        // Pinned: the lookup reads the keys of the records it meets.
        let _guard = self.records.pin();
        Ok(self.record_of(key)?.is_some())
    }

    /// Insert `key -> value` if `key` is absent: `true` if inserted, `false` (and nothing
    /// written) if it was there.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        check_sizes(key, value)?;
        let heap = self.heap();
        let mut staged = self.records.stage(heap, key, value, None)?;
        let new = staged.new_offset().expect("a staged insert has a record");
        let probe = self.probe(key);
        let put = self.table.put_probe(&probe, new, false, |old| {
            probe.undamaged()?;
            staged.commit(heap, old).map_err(RecordMapError::from)
        });
        match put {
            Ok(None) => {
                staged.finish();
                Ok(true)
            }
            Ok(Some(_)) => {
                staged.abandon(heap);
                Ok(false)
            }
            Err(e) => {
                let _ = staged.undo(heap);
                Err(e)
            }
        }
    }

    /// Insert or overwrite `key -> value`; the old value if there was one.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        check_sizes(key, value)?;
        let heap = self.heap();
        let pool = heap.pool();
        let guess = {
            let _guard = self.records.pin();
            self.record_of(key)?
        };
        let mut staged = self.records.stage(heap, key, value, guess)?;
        let new = staged.new_offset().expect("a staged upsert has a record");
        let mut old_value = None;
        let probe = self.probe(key);
        let put = self.table.put_probe(&probe, new, true, |old| {
            probe.undamaged()?;
            if let Some(o) = old {
                // Under the writer lock the old record is intact: read it before retiring it.
                old_value = Some(value_at(pool, o)?);
            }
            staged.commit(heap, old).map_err(RecordMapError::from)
        });
        match put {
            Ok(_) => {
                staged.finish();
                Ok(old_value)
            }
            Err(e) => {
                let _ = staged.undo(heap);
                Err(e)
            }
        }
    }

    /// Remove `key`; its value if it was there.
    pub fn remove(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > MAX_KEY_BYTES {
            return Ok(None);
        }
        let heap = self.heap();
        let pool = heap.pool();
        let guess = {
            let _guard = self.records.pin();
            self.record_of(key)?
        };
        let Some(guess) = guess else {
            return Ok(None);
        };
        let mut staged = self.records.stage_remove(heap, guess)?;
        let mut old_value = None;
        let probe = self.probe(key);
        let removed = self.table.remove_probe(&probe, |old| {
            old_value = Some(value_at(pool, old)?);
            staged.commit(heap, Some(old)).map_err(RecordMapError::from)
        });
        match removed {
            Ok(Some(_)) => {
                staged.finish();
                Ok(old_value)
            }
            Ok(None) => {
                // Under the stripe lock: what the probe met was the slots' own.
                staged.abandon(heap);
                probe.undamaged()?;
                Ok(None)
            }
            Err(e) => {
                let _ = staged.undo(heap);
                Err(e)
            }
        }
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.table.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record offsets of every key, from a snapshot of the table's slots.
    fn record_offsets(&self) -> Result<Vec<u64>> {
        Ok(self
            .table
            .iter()
            .map(|slot| slot.map(|(_, record)| record))
            .collect::<Result<Vec<u64>, CcehError>>()?)
    }

    /// Every `(key, value)`, in no particular order: the table's slots, a segment snapshot at
    /// a time, whose records are read as the iterator goes, inside one pinned epoch (so records
    /// retired meanwhile stay readable; a key written meanwhile may be missed). The epoch is this
    /// map's own: blocks of records this map retires while the iterator lives are reused only
    /// once it is dropped (so an idle iterator lets the map grow by every record overwritten or
    /// removed meanwhile), while other maps reuse theirs as usual.
    pub fn iter(&self) -> Iter<'_, B> {
        let guard = self.records.pin();
        Iter {
            pool: self.heap().pool(),
            slots: self.table.iter(),
            _guard: guard,
        }
    }

    /// Every heap block the map owns: the table's, the intent area and each record.
    pub fn blocks(&self) -> Result<Vec<u64>> {
        let _guard = self.records.pin();
        let mut blocks = self.table.blocks()?;
        blocks.push(self.records.intent_area());
        blocks.extend(self.record_offsets()?);
        Ok(blocks)
    }

    /// Check the table ([`Cceh::check`]) and every record: allocated, of this map, big enough,
    /// its key hashing to its slot's word. The number of keys.
    pub fn check(&self) -> Result<u64> {
        let count = self.table.check()?;
        let heap = self.heap();
        let pool = heap.pool();
        let corrupt = |reason: String| RecordMapError::Corrupt {
            root: self.root,
            reason,
        };
        let _guard = self.records.pin();
        for slot in self.table.iter() {
            let (word, record) = slot?;
            let block = heap.record_block(record).ok_or_else(|| {
                corrupt(format!(
                    "key word {word:#x} points at {record:#x}, not a published record"
                ))
            })?;
            let header = layout::read_header(pool, record, block.size)?.ok_or_else(|| {
                corrupt(format!(
                    "the record at {record:#x} has a header that does not fit its block"
                ))
            })?;
            if header.owner != self.records.owner() {
                return Err(corrupt(format!(
                    "the record at {record:#x} belongs to another structure"
                )));
            }
            let key = layout::read_checked_key(pool, record, &header)?;
            if key_word(&key) != word {
                return Err(corrupt(format!(
                    "the record at {record:#x} holds a key hashing to {:#x}, its slot says {word:#x}",
                    key_word(&key)
                )));
            }
        }
        Ok(count)
    }
}

impl<B> RecordHashMap<B>
where
    B: Backend,
{
    /// Walk the whole map and report every violation found, with the blocks and keys walked.
    /// Reads only: it changes nothing and takes no lock, so call it with no writers running.
    ///
    /// Checked: the head (magic, format version, the intent area an allocated block, each
    /// intent line well-formed); the CCEH table ([`Cceh::verify`], whose findings name the
    /// table); each record a live slot points at (on a cache line, inside the pool, reached
    /// from one slot only, a published record block, its lengths within it, of this map, its
    /// checksum right) and its key hashing to the slot's key word. For a healthy map,
    /// `blocks_walked` is the length of [`RecordHashMap::blocks`].
    pub fn verify(&self) -> Verification {
        let _guard = self.records.pin();
        let heap = self.heap();
        let mut report = Verification::new(StructureKind::RecordHashMap, self.root);
        verify::verify_head(
            heap,
            &mut report,
            self.root,
            StructureKind::RecordHashMap,
            &[],
        );
        let mut live = Vec::new();
        let table = self
            .table
            .verify_visiting(&mut |slot, word, record| live.push((slot, word, record)));
        report.keys = table.keys;
        verify::absorb(&mut report, table);
        let mut records = RecordWalk::new(heap, self.records.owner());
        for (slot, word, record) in live {
            let Some(key) = records.verify(&mut report, slot, record) else {
                continue;
            };
            let hash = key_word(&key);
            if hash != word {
                report.report(slot, Problem::KeyHashMismatch { record, word, hash });
            }
        }
        report
    }
}

impl<B: Backend> Drop for RecordHashMap<B> {
    /// No handle, so no reader, is left: records retired by this map go back to the heap now
    /// instead of after an epoch no one will wait for.
    fn drop(&mut self) {
        self.records.release_all(self.table.heap());
    }
}

/// The `(key, value)` pairs of a [`RecordHashMap`] ([`RecordHashMap::iter`]).
pub struct Iter<'a, B: Backend> {
    pool: &'a Pool<B>,
    slots: cceh::Iter,
    _guard: crossbeam_epoch::Guard,
}

impl<B: Backend> Iterator for Iter<'_, B> {
    type Item = Result<(Vec<u8>, Vec<u8>), RecordMapError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (word, record) = match self.slots.next()? {
            Ok(slot) => slot,
            Err(e) => return Some(Err(e.into())),
        };
        let read = || {
            let (key, value) =
                layout::first_line(self.pool, record)?.checked_key_value(self.pool, record)?;
            if key_word(&key) != word {
                return Err(misfiled(record, &key, word));
            }
            Ok((key, value))
        };
        Some(read())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

/// Fixed for tests: the key word function never yields the empty-slot word.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_word_is_never_the_empty_slot_word() {
        for key in [&b""[..], b"a", b"user:1", &[0u8; 64]] {
            assert_ne!(key_word(key), cceh::EMPTY_KEY);
        }
        assert_eq!(key_word(b"user:1"), key_word(b"user:1"));
        assert_ne!(key_word(b"user:1"), key_word(b"user:2"));
    }
}
