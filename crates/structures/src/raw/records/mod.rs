//! Out-of-line records: how the byte-key maps store a key and its value in a heap block,
//! publish it with one 8-byte store, and free it, crash-safely and without an undo-log
//! transaction per write.
//!
//! # One write, two fences
//!
//! 1. **Stage** (`Records::stage`): reserve a block in DRAM (the heap's reserve-then-publish
//!    path, [`Heap::reserve_record`]), write the record (its header carries the CRC-32C of
//!    the record, computed before the write: `layout.rs`) and flush it; name the new block and
//!    the old one (the record the key holds now, read by a lock-free lookup first) in one of
//!    the structure's intent lines and flush it; **one fence**.
//! 2. **Commit** (`Staged::commit`, run by the structure under its writer lock once the slot
//!    is chosen): store and flush the new block's allocation bit and the old block's cleared
//!    bit ([`Heap::publish_record`], [`Heap::retire_record`]); the structure then stores the
//!    slot and persists it: **one fence** for all three.
//!
//! A crash before the first fence leaves nothing in doubt: the new block was never marked
//! allocated and the old one is untouched. After it, any subset of the second epoch's stores
//! may be durable, and the intent line names both blocks, so the structure's open resolves
//! them (`Records::resolve`): each is allocated exactly if the structure reaches it. If the
//! slot turns out to hold another record than the one the lookup saw (a concurrent writer),
//! the commit names the real one and persists the line again before storing anything.
//!
//! The old record is freed on the media in the same epoch as the slot change, but readers
//! that loaded the slot before may still be copying it: the heap keeps the block out of use
//! until an epoch has passed (`limbo.rs`). The epoch is the map's own (`reclaim.rs`): a reader
//! of one map holds back nothing of another.
//!
//! # Integrity
//!
//! Every read of a record checks its checksum: `get`, `iter`, scans, the old value an
//! overwrite or remove returns, the key a layer push-down moves. A mismatch, or a header whose
//! lengths cannot be a record's, is [`RecordMapError::CorruptRecord`] naming the record's pool
//! offset, never "absent"; a write that meets the damaged record (an insert of the key, an
//! overwrite, a remove) fails with it and changes nothing, so a key is never added twice.
//! Calls that read a key's bytes and not its value (`contains_key`, an insert of a present
//! key) check the whole record when the key read differs from the one looked for.
//!
//! The index words that lead to records (the hash map's slots, the ordered map's entries) are
//! those of the `u64` structures, with no checksum. What a read can tell from the record it
//! reaches, it reports: a slot or entry naming a record whose key does not belong there (it
//! hashes to another word; it is not in the entry's slice) is an error. What it cannot: a
//! damaged key word makes the key's slot unreachable (the key reads as absent), and an entry
//! naming another record of the same word and slice is taken for that key's. `verify()` on
//! either map walks every block, slot, entry and record read-only and reports all of these
//! ([`crate::raw::verify::Verification`]: keys filed under another hash or slice, records reached twice,
//! blocks no slot reaches through `Store::verify()`). At open, a record an intent line names
//! that fails its checksum is not one a write left in doubt (see `intent.rs`) and is left
//! alone, and resolving one never reads another record, so damage elsewhere does not stop the
//! open.
//!
//! | file | owns |
//! |---|---|
//! | `layout.rs` | a record's bytes: owner, lengths, key, value; limits |
//! | `intent.rs` | intent lines: what a cut-short write leaves in doubt |
//! | `limbo.rs` | retired blocks waiting for readers to leave |
//! | `batch.rs` | a store write batch's changes: records staged, the structure's writes planned, applied |
//! | `reclaim.rs` | each map's own epoch, which its readers pin |
//! | `error.rs` | the maps' error |
//! | `head.rs` | the head of both maps' root objects: magic, version, intent area |
//! | `hash.rs` | the byte-key CCEH map |
//! | `verify.rs` | what both maps' `verify()` check alike: the head, the intent lines, each record |
//! | `tree/` | the byte-key ordered map: a trie of FAST&FAIR layers (`layers.rs`: making, opening and freeing layers; `scan.rs`: ordered scans; `check.rs`: walks and checks; `verify.rs`: its `verify()`) |

pub(crate) mod batch;
pub(crate) mod error;
pub mod hash;
mod head;
pub(crate) mod intent;
pub(crate) mod layout;
mod limbo;
mod reclaim;
pub mod tree;
mod verify;

use crossbeam_epoch::Guard;
use pmem_ordering::{Backend, Pool, PoolError};
use pmem_undo_log::{Heap, RecordBlock, Tx, TxError};

use self::intent::{IntentArea, IntentLine, LayerWord, Named};
use self::layout::Header;
use self::limbo::Limbo;
use self::reclaim::Reclaim;

pub(crate) use batch::RecordPlan;
pub use error::RecordMapError;
pub use hash::RecordHashMap;
pub use layout::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use tree::RecordTreeMap;

/// How long a reservation that finds the heap full waits, at most, for this structure's retired
/// records to come back (they do once every reader of this map pinned before their retirement
/// has left: a hash map iterator alive on another thread holds them back) before it reports
/// the heap full.
const FULL_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

/// A structure's record machinery: its owner field, intent lines, epoch and retired blocks.
pub(crate) struct Records {
    owner: u64,
    intents: IntentArea,
    reclaim: Reclaim,
    limbo: Limbo<RecordBlock>,
}

/// A record written and persisted, not yet published: the write's first epoch is done.
pub(crate) struct Staged<'r> {
    records: &'r Records,
    line: IntentLine<'r>,
    new: Option<RecordBlock>,
    old_named: Option<Named>,
    /// The old record, retired by the commit.
    retired: Option<RecordBlock>,
    committed: bool,
}

/// What resolution at open did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// Blocks the intent lines named that belong to this structure.
    pub examined: u64,
    /// Of those, how many the heap's allocation had to change (a write cut short).
    pub changed: u64,
}

impl Records {
    /// The machinery of the structure whose root is `root`, with its intent area at `area`.
    pub(crate) fn new(root: u64, area: u64) -> Records {
        Records {
            owner: layout::owner_of(root),
            intents: IntentArea::at(area),
            reclaim: Reclaim::default(),
            limbo: Limbo::default(),
        }
    }

    /// Pin the map's epoch: records (and layers) it retires from now on are not reused until
    /// the guard is dropped. Readers pin around every read of a slot and what it points at.
    #[inline]
    pub(crate) fn pin(&self) -> Guard {
        self.reclaim.pin()
    }

    /// The intent area's offset (a block the structure owns).
    pub(crate) fn intent_area(&self) -> u64 {
        self.intents.offset()
    }

    /// The owner field this structure's records carry.
    pub(crate) fn owner(&self) -> u64 {
        self.owner
    }

    /// Hold an intent line (for a layer of the ordered map).
    pub(crate) fn claim_line(&self) -> IntentLine<'_> {
        self.intents.claim()
    }

    /// Name the layer at `root` in `line`'s layer word, inside the transaction that makes it.
    pub(crate) fn name_layer_in<B: Backend>(
        &self,
        tx: &Tx<'_, B>,
        line: &IntentLine<'_>,
        root: u64,
    ) -> Result<(), TxError> {
        tx.write(line.layer_word(), &root.to_le_bytes())
    }

    /// Clear `line`'s layer word, persisted (its layer is published).
    pub(crate) fn clear_line_layer<B: Backend>(
        &self,
        pool: &Pool<B>,
        line: &IntentLine<'_>,
    ) -> Result<(), PoolError> {
        intent::clear_layer_word(pool, line.layer_word())
    }

    /// Clear `line`'s layer word inside the transaction that frees its layer.
    pub(crate) fn clear_line_layer_in<B: Backend>(
        &self,
        tx: &Tx<'_, B>,
        line: &IntentLine<'_>,
    ) -> Result<(), TxError> {
        intent::clear_layer_word_in(tx, line.layer_word())
    }

    /// Hold a retire word (for a layer of the ordered map being retired), if one is free.
    pub(crate) fn claim_retire_word(&self) -> Option<usize> {
        self.intents.claim_retire_word()
    }

    /// Name `layer` in retire word `index`, persisted.
    pub(crate) fn name_retired<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: usize,
        layer: u64,
    ) -> Result<(), PoolError> {
        intent::name_layer(pool, self.intents.retire_word(index), layer)
    }

    /// Clear retire word `index`, persisted (its layer stays: its unlink failed), and let it
    /// go.
    pub(crate) fn clear_retired<B: Backend>(
        &self,
        pool: &Pool<B>,
        index: usize,
    ) -> Result<(), PoolError> {
        intent::clear_layer_word(pool, self.intents.retire_word(index))?;
        self.intents.release_retire_word(index);
        Ok(())
    }

    /// Clear retire word `index` inside the transaction that frees its layer; the caller lets
    /// it go ([`Records::release_retire_word`]) once the transaction committed.
    pub(crate) fn clear_retired_in<B: Backend>(
        &self,
        tx: &Tx<'_, B>,
        index: usize,
    ) -> Result<(), TxError> {
        intent::clear_layer_word_in(tx, self.intents.retire_word(index))
    }

    /// Let retire word `index` go: it names nothing.
    pub(crate) fn release_retire_word(&self, index: usize) {
        self.intents.release_retire_word(index);
    }

    /// Every layer a layer word or a retire word names (at open).
    pub(crate) fn layer_words<B: Backend>(
        &self,
        pool: &Pool<B>,
    ) -> Result<Vec<LayerWord>, PoolError> {
        self.intents.layer_words(pool)
    }

    /// Clear a layer word found at open, persisted (its layer is published).
    pub(crate) fn clear_layer_word<B: Backend>(
        &self,
        pool: &Pool<B>,
        word: &LayerWord,
    ) -> Result<(), PoolError> {
        intent::clear_layer_word(pool, word.at)
    }

    /// Clear a layer word found at open inside the transaction that frees its layer.
    pub(crate) fn clear_layer_word_in<B: Backend>(
        &self,
        tx: &Tx<'_, B>,
        word: &LayerWord,
    ) -> Result<(), TxError> {
        intent::clear_layer_word_in(tx, word.at)
    }

    /// Hand retired blocks no reader can still see back to the heap.
    fn release_ready<B: Backend>(&self, heap: &Heap<B>) {
        for block in self.limbo.drain() {
            // A block the limbo holds was retired by this structure and released by no one
            // else: the heap refuses only blocks that are not retired, which cannot be here.
            let _ = heap.release_record(block);
        }
    }

    /// Hand every retired block back: the structure is being dropped, no reader is left.
    pub(crate) fn release_all<B: Backend>(&self, heap: &Heap<B>) {
        for block in self.limbo.take_all() {
            let _ = heap.release_record(block);
        }
    }

    /// Reserve a block for `bytes`, waiting a little for retired blocks if the heap is full.
    fn reserve<B: Backend>(&self, heap: &Heap<B>, bytes: u64) -> Result<RecordBlock, TxError> {
        self.release_ready(heap);
        match heap.reserve_record(bytes) {
            Err(TxError::PoolFull { .. }) if self.limbo.waiting() > 0 => {
                // Retired blocks come back once the epoch moves: push it along until every
                // one of this structure's has (or the wait is over), then try again once.
                let deadline = std::time::Instant::now() + FULL_WAIT;
                while self.limbo.waiting() > 0 && std::time::Instant::now() < deadline {
                    self.pin().flush();
                    std::thread::yield_now();
                }
                self.release_ready(heap);
                heap.reserve_record(bytes)
            }
            other => other,
        }
    }

    /// The first epoch of a write of `key -> value` (see the module docs): the record written
    /// and the intent line naming it and `old` (the record a lookup found for the key) durable.
    pub(crate) fn stage<B: Backend>(
        &self,
        heap: &Heap<B>,
        key: &[u8],
        value: &[u8],
        old: Option<u64>,
    ) -> Result<Staged<'_>, TxError> {
        let pool = heap.pool();
        let block = self.reserve(heap, layout::record_bytes(key.len(), value.len()))?;
        let record = match self.write_record(pool, block, key, value) {
            Ok(p) => p,
            Err(e) => {
                let _ = heap.cancel_record(block);
                return Err(e.into());
            }
        };
        let old_named = old
            .and_then(|o| heap.record_block(o))
            .map(|b| (b.offset, b.size));
        let line = self.intents.claim();
        let named = line.name(pool, Some((block.offset, block.size)), old_named);
        let named = match named {
            Ok(p) => p,
            Err(e) => {
                let _ = heap.cancel_record(block);
                return Err(e.into());
            }
        };
        pool.fence(record.and(named));
        Ok(Staged {
            records: self,
            line,
            new: Some(block),
            old_named,
            retired: None,
            committed: false,
        })
    }

    /// Write the record of `key -> value` into `block` and flush it (the caller fences).
    fn write_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        block: RecordBlock,
        key: &[u8],
        value: &[u8],
    ) -> Result<pmem_ordering::Pending, PoolError> {
        let header = layout::header(self.owner, key, value);
        let mut w = pool.write(block.offset, &header)?;
        w = w.merge(pool.write(Header::key_at(block.offset), key)?);
        let value_at = Header::key_at(block.offset) + key.len() as u64;
        w = w.merge(pool.write(value_at, value)?);
        Ok(pool.flush(w))
    }

    /// A write batch's record of `key -> value` (`batch.rs`): reserved, written and flushed,
    /// with no intent line and no fence (the batch's log names it, and its commit fence makes
    /// both durable). The block is the caller's to publish or cancel.
    pub(crate) fn stage_for_batch<B: Backend>(
        &self,
        heap: &Heap<B>,
        key: &[u8],
        value: &[u8],
    ) -> Result<RecordBlock, TxError> {
        let block = self.reserve(heap, layout::record_bytes(key.len(), value.len()))?;
        match self.write_record(heap.pool(), block, key, value) {
            // Flushed; the batch's commit fence makes it durable.
            Ok(_flushed) => Ok(block),
            Err(e) => {
                let _ = heap.cancel_record(block);
                Err(e.into())
            }
        }
    }

    /// Hand blocks a write batch retired to the limbo, once the batch's last fence made the
    /// retirement durable: they come back once readers pinned now have left.
    pub(crate) fn defer_retired(&self, blocks: impl IntoIterator<Item = RecordBlock>) {
        // Pinned after the retirement: the readers this waits for include every one that
        // could have reached the blocks.
        let guard = self.pin();
        for block in blocks {
            self.limbo.defer(block.offset, block, &guard);
        }
    }

    /// The first epoch of a remove: the intent line naming `old` durable.
    pub(crate) fn stage_remove<B: Backend>(
        &self,
        heap: &Heap<B>,
        old: u64,
    ) -> Result<Staged<'_>, TxError> {
        let pool = heap.pool();
        let old_named = heap.record_block(old).map(|b| (b.offset, b.size));
        let line = self.intents.claim();
        pool.fence(line.name(pool, None, old_named)?);
        Ok(Staged {
            records: self,
            line,
            new: None,
            old_named,
            retired: None,
            committed: false,
        })
    }

    /// Resolve every block the intent lines name: allocated exactly if `reachable` says the
    /// structure reaches it (given its offset and key). Blocks whose header is not one of this
    /// structure's records are left alone (see `intent.rs`). Run at open, before anything else
    /// allocates from the heap.
    pub(crate) fn resolve<B: Backend>(
        &self,
        heap: &Heap<B>,
        mut reachable: impl FnMut(u64, &[u8]) -> Result<bool, RecordMapError>,
    ) -> Result<Resolved, RecordMapError> {
        let pool = heap.pool();
        let mut resolved = Resolved::default();
        let named = self.intents.named(pool).map_err(TxError::from)?;
        for (offset, size) in named {
            // A header that does not parse, or another owner's: not a record of ours, so not
            // one a write of ours left in doubt (theirs are durable before their intent).
            let Ok(Some(header)) = layout::read_header(pool, offset, size) else {
                continue;
            };
            if header.owner != self.owner {
                continue;
            }
            // A record that fails its checksum is not one a write of ours left in doubt
            // either: those are whole (written and flushed before their intent line), and a
            // record cut short by the crash never had its slot stored.
            let key = match layout::read_checked_key(pool, offset, &header) {
                Ok(key) => key,
                Err(RecordMapError::CorruptRecord { .. }) => continue,
                Err(e) => return Err(e),
            };
            let allocated = reachable(offset, &key)?;
            resolved.examined += 1;
            let before = heap.record_block(offset).is_some();
            match heap.resolve_record(offset, size, allocated) {
                Ok(true) if before != allocated => resolved.changed += 1,
                Ok(_) => {}
                // A block this session reserved or retired (the structure is opened again
                // while the store is open): its writer owns it, nothing is in doubt.
                Err(TxError::InvalidRecord { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(resolved)
    }
}

impl Staged<'_> {
    /// The new record's block, if the write has one.
    pub(crate) fn new_offset(&self) -> Option<u64> {
        self.new.map(|b| b.offset)
    }

    /// The second epoch's allocation stores, run by the structure under its writer lock once
    /// it knows the record the slot holds now (`old`), before it stores the slot: the slot's
    /// own fence makes them durable. If `old` is not the block the intent line names, the line
    /// is corrected and persisted first.
    pub(crate) fn commit<B: Backend>(
        &mut self,
        heap: &Heap<B>,
        old: Option<u64>,
    ) -> Result<(), TxError> {
        let pool = heap.pool();
        let old_block = match old {
            Some(o) => Some(heap.record_block(o).ok_or(TxError::InvalidFree {
                offset: o,
                reason: "the slot points at a block that is not a published record",
            })?),
            None => None,
        };
        let old_named = old_block.map(|b| (b.offset, b.size));
        if old_named.map(|n| n.0) != self.old_named.map(|n| n.0) {
            let new = self.new.map(|b| (b.offset, b.size));
            pool.fence(self.line.name(pool, new, old_named)?);
            self.old_named = old_named;
        }
        // The tokens are dropped, not fenced: the structure's store of the slot comes next,
        // and its fence (a fence orders every flush this thread made) makes them durable.
        if let Some(o) = old_block {
            let (retired, _flushed) = heap.retire_record(o.offset)?;
            self.retired = Some(retired);
        }
        if let Some(n) = self.new {
            let _flushed = heap.publish_record(n)?;
        }
        self.committed = true;
        Ok(())
    }

    /// The structure's slot store is done: the old record waits for its readers to leave.
    pub(crate) fn finish(self) {
        if let Some(retired) = self.retired {
            let guard = self.records.pin();
            self.records.limbo.defer(retired.offset, retired, &guard);
        }
    }

    /// The structure failed after [`Staged::commit`] with its slot unchanged (a split's
    /// transaction found the heap full): undo the allocation stores, persisted. The new block
    /// is unpublished and handed back; the old one is published again.
    pub(crate) fn undo<B: Backend>(self, heap: &Heap<B>) -> Result<(), TxError> {
        if !self.committed {
            self.abandon(heap);
            return Ok(());
        }
        let pool = heap.pool();
        if let Some(n) = self.new {
            let (retired, flushed) = heap.retire_record(n.offset)?;
            pool.fence(flushed);
            heap.release_record(retired)?;
        }
        if let Some(o) = self.retired {
            let flushed = heap.restore_record(o)?;
            pool.fence(flushed);
        }
        Ok(())
    }

    /// The write did not happen (the key was there already, or the structure failed before
    /// [`Staged::commit`]): give the reserved block back.
    pub(crate) fn abandon<B: Backend>(self, heap: &Heap<B>) {
        if !self.committed {
            if let Some(n) = self.new {
                // Reserved by `stage` and not published: the heap takes it back.
                let _ = heap.cancel_record(n);
            }
        }
    }
}
