//! The leaf map: an ordered map of byte-string keys and values kept **inline in persistent
//! leaves**, with its inner nodes in DRAM, rebuilt at open (after SIGMOD'16 FPTree
//! and VLDB'20 LB+-tree). A range scan reads the pairs of a leaf from consecutive slots
//! of one block, not one randomly placed record per pair as the trie of FAST&FAIR layers
//! ([`crate::records::RecordTreeMap`]) does.
//!
//! # On the media (format version 1)
//!
//! The **root object** ([`ROOT_BYTES`], at an offset the caller gives, 64-byte aligned):
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic, [`StructureKind::LeafMap`] (`LEAFMAP1`) |
//! | 8..16 | format version (1) |
//! | 16..24 | the first leaf (never freed) |
//! | 24..32 | bytes of a leaf block ([`LeafMapConfig::leaf_bytes`]) |
//! | 32..40 | bytes of a slot ([`LeafMapConfig::slot_bytes`]) |
//! | 40..48 | CRC-32C of bytes 0..40 |
//!
//! Written once, in the transaction that makes the map. A **leaf** is a heap block:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | bitmap: bit `i` set when slot `i` holds a pair (the commit word) |
//! | 8..16 | the next leaf, 0 for the last |
//! | 16..24 | tag: `LEAFNODE` XOR the map's root offset |
//! | 24..64 | zero |
//! | 64 + i * slot_bytes.. | slot `i` (up to 64 slots) |
//!
//! The leaves form one chain in key order: every key of a leaf sorts before every key of the
//! next. Inside a leaf the slots are in no order. A **slot** is:
//!
//! | bytes | field |
//! |---|---|
//! | 0..4 | checksum of bytes 4..8 and the payload: the low 32 bits of their XXH3-64 |
//! | 4..6 | key length; `0x8000` for a pair kept out of line |
//! | 6..8 | value length (0 out of line) |
//! | 8.. | inline: the key, then the value; out of line: the offset of a record (the record maps' format, [`crate::records`]: owner, lengths, CRC-32C, key, value) |
//!
//! A pair whose key and value fit in `slot_bytes - 8` bytes is inline; a larger one lives in
//! its record. Every read of a pair checks the checksum (XXH3 rather than the CRC-32C of the
//! other formats: a scan checks one per pair, and on 120 bytes XXH3 is the faster); a
//! mismatch is
//! [`RecordMapError::CorruptRecord`], never served.
//!
//! # Writes and crashes
//!
//! * **Insert** of an inline pair (no split): write a free slot, flush it, fence; then store
//!   the bitmap with the slot's bit set (one 8-byte store), flush, fence. Two fences. A crash
//!   before the bitmap store is durable leaves the slot free: its bytes are never read.
//! * **Overwrite**: write the new pair into a free slot, fence; then one bitmap store sets the
//!   new slot's bit and clears the old one's: the key moves atomically.
//! * **Remove**: one bitmap store clearing the slot's bit, persisted. One fence.
//! * A **record** (a large pair) is allocated, written, named by its slot and published by the
//!   bitmap store in one undo-log transaction; the record a remove or an overwrite drops is
//!   freed in the transaction that stores the bitmap. No block is ever in doubt after a crash.
//! * A full leaf **splits** in one transaction: a new leaf gets the upper half of the pairs
//!   (copied slot for slot, checksums unchanged), the old one's bitmap loses them and its next
//!   pointer names the new one. A remove that would empty a leaf other than the first unlinks
//!   and frees it in one transaction instead.
//!
//! * A **write batch** of the store (`batch.rs`) rewrites the leaves it touches from its
//!   log after its commit point: in place, or dealt to the leaf and new leaves (record
//!   blocks written before the commit point and published by the log), or a leaf it empties
//!   unlinked and freed with the log's clear. A leaf or a record may so be a record block or
//!   a transaction's block: both are allocated blocks, and a transaction frees either.
//!
//! Recovery is the heap's: [`Heap::open`] rolls back a transaction a crash interrupted (and
//! the store's load finishes a write batch a crash interrupted, before the map opens).
//! [`LeafMap::open`] then only reads: it walks the chain, checks every leaf (an allocated
//! block of the map's shape, its tag, a bitmap within its slots) and every live slot (its
//! lengths and checksum; a damaged slot is remembered, never served nor written over, and
//! reported by reads that may need it), and rebuilds the DRAM index.
//!
//! # In DRAM, and threads
//!
//! Per leaf: its bitmap's mirror, a fingerprint byte per slot (a write's search of its leaf
//! reads only the slots whose fingerprint matches: one slot, nearly always) and its live
//! slots in key order (a scan copies the slots it takes from a leaf in slot order, ascending
//! addresses, and lends them in this order; an insert finds its place by binary search on the
//! keys' first 16 bytes, kept per slot too, and a scan its start by counting them). Above the leaves, a
//! `BTreeMap` from each leaf's short lower bound to its number in an arena of leaf states:
//! the inner nodes (`index.rs`); beside the arena, each leaf's successor by number, so a scan
//! descends the tree once and walks the leaves through these links (the arena is asked for
//! 2 MiB pages: a hint, taken where the host has transparent huge pages). Beside them, a hash index from each key's hash to its slot
//! (`keys.rs`, after VLDB'21 Viper): a point read probes it (one cache line, nearly always)
//! and reads that one slot, without the inner nodes; and each leaf's number by where its
//! block lies, so a scan from a key present finds its first leaf through the key's slot,
//! without the inner nodes either. All of it is rebuilt at open.
//!
//! One `RwLock` for the whole map guards the DRAM state: lookups and scans share it, writes
//! take it alone. Chosen over per-leaf locks for simplicity: a write holds the lock across its
//! fences, so writers do not run in parallel (they would share the media's bandwidth anyway),
//! and readers wait for a writer's fences. A scan copies a batch of pairs at a time under the
//! lock (as many as it was asked for, if told; else as many as the thread's last such scan
//! lent, 16 to 128; then twice as many each time) and lends
//! them to its callback with the lock released, so a callback may read or write the map; the
//! next batch resumes where the last stopped unless a write came between (the index's
//! generation, which every write guard advances). Every pool access is the pool's atomic word access: whatever the pool
//! holds, no access races.
//!
//! | file | owns |
//! |---|---|
//! | `layout.rs` | the bytes: root, leaf header, slot; [`LeafMapConfig`] |
//! | `leaf.rs` | a leaf's DRAM state, and the reads of a slot's pair |
//! | `index.rs` | the DRAM index: leaves by their (short, inline) lower bounds |
//! | `keys.rs` | the DRAM hash index: each key's slot by the key's hash |
//! | `open.rs` | open: the walk of the chain, its checks, the DRAM index rebuilt |
//! | `write.rs` | insert, upsert, put, remove |
//! | `split.rs` | the structural transactions: split, unlink |
//! | `batch.rs` | a write batch's plan and apply |
//! | `scan.rs` | range scans that lend each pair |
//! | `verify.rs` | `verify()` and `blocks()` |

mod batch;
mod index;
mod keys;
mod layout;
mod leaf;
mod open;
mod scan;
mod split;
mod verify;
mod write;

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

pub(crate) use batch::LeafPlan;
pub use layout::{LeafMapConfig, ROOT_BYTES};

use self::index::{Index, LeafBound};
use self::layout::{fingerprint, leaf_header, root_bytes};
use self::leaf::{Leaf, SlotBuf, Slots};
use crate::kind::StructureKind;
use crate::records::layout::MAX_OWNER_ROOT;
use crate::records::{RecordMapError, MAX_KEY_BYTES};

type Result<T, E = RecordMapError> = std::result::Result<T, E>;

/// An ordered map of byte strings in persistent leaves (see the module docs).
pub struct LeafMap<B: Backend> {
    heap: Heap<B>,
    root: u64,
    config: LeafMapConfig,
    head: u64,
    index: RwLock<Index>,
}

impl<B: Backend> LeafMap<B> {
    /// Make an empty map at `root` (an all-zero, 64-byte aligned range of [`ROOT_BYTES`]) with
    /// leaves of `config`, in one transaction (joining the caller's, if any).
    pub fn create(heap: &Heap<B>, root: u64, config: LeafMapConfig) -> Result<Self> {
        config
            .check()
            .map_err(|reason| RecordMapError::InvalidConfig { reason })?;
        let pool = heap.pool();
        if !root.is_multiple_of(64) || root >= MAX_OWNER_ROOT {
            return Err(RecordMapError::InvalidConfig {
                reason: format!(
                    "root offset {root:#x} must be 64-byte aligned and below {MAX_OWNER_ROOT:#x}"
                ),
            });
        }
        pool.check_range(root, ROOT_BYTES)?;
        let magic = pool.read::<u64>(root)?;
        if magic != 0 {
            return Err(RecordMapError::AlreadyExists {
                root,
                found: crate::kind::describe_magic(magic),
            });
        }
        let head = heap.transaction(|tx| -> Result<u64> {
            let head = tx.alloc(config.leaf_bytes)?.offset();
            tx.write(head, &leaf_header(root, 0, 0))?;
            tx.write(root, &root_bytes(head, config))?;
            Ok(head)
        })?;
        let mut index = Index::new(config.leaf_bytes);
        index.insert(LeafBound::new(&[]), Leaf::empty(head));
        Ok(LeafMap {
            heap: heap.clone(),
            root,
            config,
            head,
            index: RwLock::new(index),
        })
    }

    /// The heap.
    pub fn heap(&self) -> &Heap<B> {
        &self.heap
    }

    /// The root object's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The leaves' shape.
    pub fn config(&self) -> LeafMapConfig {
        self.config
    }

    /// The kind of structure this is.
    pub const KIND: StructureKind = StructureKind::LeafMap;

    /// Number of pairs.
    pub fn len(&self) -> u64 {
        self.read().len
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of leaves.
    pub fn leaves(&self) -> usize {
        self.read().count()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// The value of `key` into `out` (cleared first; its capacity is reused, so a read
    /// allocates nothing once `out` is large enough): whether `key` is present (`out` is left
    /// empty if not). A key that may be in a slot found damaged at open is
    /// [`RecordMapError::CorruptRecord`].
    ///
    /// One probe of the DRAM hash index and one read of the slot it names, its checksum
    /// checked (see the module docs).
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        if key.len() > MAX_KEY_BYTES {
            return Ok(false);
        }
        let index = self.read();
        let slots = self.slots();
        let mut failed = None;
        let hash = index.keys.hash(key);
        let found = index.keys.find(hash, |slot| {
            slots.value_of(slot, key, out).unwrap_or_else(|e| {
                // Stop the probe: the error is the answer.
                failed = Some(e);
                true
            })
        });
        if let Some(e) = failed {
            out.clear();
            return Err(e);
        }
        match found {
            Some(_) => Ok(true),
            None => self.absent(&index, key).map(|()| false),
        }
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &[u8]) -> Result<bool> {
        if key.len() > MAX_KEY_BYTES {
            return Ok(false);
        }
        let index = self.read();
        let slots = self.slots();
        let mut buf = SlotBuf::new();
        let mut failed = None;
        let hash = index.keys.hash(key);
        let found = index.keys.find(hash, |slot| {
            slots.holds(slot, key, &mut buf).unwrap_or_else(|e| {
                failed = Some(e);
                true
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        match found {
            Some(_) => Ok(true),
            None => self.absent(&index, key).map(|()| false),
        }
    }

    /// For a key the hash index lacks: absent, unless its leaf has a slot found damaged at
    /// open, which may be the key's (an error then).
    fn absent(&self, index: &Index, key: &[u8]) -> Result<()> {
        if index.damaged_leaves == 0 {
            return Ok(());
        }
        let (_, leaf) = self.leaf_of(index, key)?;
        match leaf.damage(&self.config) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The slot of `leaf` holding `key` (of hash `hash`), if any, its bytes left in `buf`; a
    /// key that may be in a damaged slot is an error. (The writes' search: they need the
    /// leaf anyway; reads go through the hash index.)
    fn find(&self, leaf: &Leaf, key: &[u8], hash: u64, buf: &mut SlotBuf) -> Result<Option<usize>> {
        let slots = self.slots();
        let mut candidates = leaf.matching(fingerprint(hash));
        while candidates != 0 {
            let slot = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            // Another key of the same fingerprint (one lookup in 256 or so), or this key's slot
            // damaged: `holds` checks the checksum of a slot whose key differs.
            if slots.holds(self.config.slot_at(leaf.offset, slot), key, buf)? {
                return Ok(Some(slot));
            }
        }
        match leaf.damage(&self.config) {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// The leaf whose range holds `key`.
    fn leaf_of<'i>(&self, index: &'i Index, key: &[u8]) -> Result<(&'i LeafBound, &'i Leaf)> {
        index.leaf_of(key).ok_or_else(|| self.no_first_leaf())
    }

    fn no_first_leaf(&self) -> RecordMapError {
        RecordMapError::Corrupt {
            root: self.root,
            reason: "the DRAM index lost its first leaf".into(),
        }
    }

    fn slots(&self) -> Slots<'_, B> {
        Slots {
            pool: self.heap.pool(),
            config: self.config,
        }
    }

    /// The index, shared. A panic of another thread while it held the lock (a bug, or an
    /// allocation failure) leaves the index as that thread left it: every step of a write
    /// changes the DRAM state only after the pool's, so it still describes the pool.
    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    /// The index, alone (see [`LeafMap::read`]), its generation advanced: every change to
    /// the DRAM state is made through this guard.
    fn write(&self) -> RwLockWriteGuard<'_, Index> {
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        index.generation = index.generation.wrapping_add(1);
        index
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod scan_tests;
