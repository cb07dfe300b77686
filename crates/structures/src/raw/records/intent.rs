//! Intent lines: what a record write may leave in doubt if it is cut short.
//!
//! A write of a record map allocates without a transaction (the heap's reserve-then-publish
//! path): the new record's allocation bit, the old record's cleared bit and the slot that
//! switches from one to the other are stored in one epoch under one fence, so a crash can leave
//! any of them durable without the others. Before that epoch, the writer names both blocks in
//! an *intent line* of its structure, persisted with the record itself (the write's first
//! fence). At open, before anything allocates, every block an intent line names is *resolved*:
//! it is allocated exactly if the structure reaches it ([`super::RecordStore::resolve`]).
//!
//! Lines are never cleared (that would cost a fence per write), so a line can name a block of
//! a write that finished long ago, since freed and reused. Resolving such a block is harmless:
//! the heap only touches blocks of its record chunks, and a record names its owner, so a block
//! reused by another structure is left alone, and one reused by this structure is allocated
//! exactly when it is reachable, which is already so.
//!
//! Each line is one cache line: `[new offset, new size, old offset, old size, layer, retire]`
//! (0 for none; the last two words are 0). The *layer word* and the *retire word* are the
//! ordered map's (`tree/layout.rs`): the layer word names a layer a writer made and has not
//! published yet, the retire word a layer emptied by removes that is being unlinked or waits,
//! unlinked, for its readers to leave. Unlike the record words, they are cleared in the
//! transaction that frees their layer, or once it is published (or, for a retire word whose
//! unlink failed, kept), so they never name a freed layer. A line's retire word is held apart
//! from the line itself ([`IntentArea::claim_retire_word`]): a retired layer waits for readers
//! while the line serves other writes.
//! A torn line names a block of a write whose first fence had not passed: nothing of that write
//! is in doubt yet, and resolving whatever the line names changes nothing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crossbeam_utils::{Backoff, CachePadded};
use pmem_ordering::{Backend, Pending, Pool, PoolError};
use pmem_undo_log::{Tx, TxError};

/// Bytes of one intent line.
pub(crate) const LINE_BYTES: u64 = 64;
/// Intent lines per structure: writers that can be between their two fences at once.
pub(crate) const LINES: u64 = 16;
/// Bytes of a structure's intent area.
pub(crate) const AREA_BYTES: u64 = LINES * LINE_BYTES;

/// A block an intent line names: its offset and size.
pub(crate) type Named = (u64, u64);
/// Where the layer word sits in a line.
const LAYER_WORD: u64 = 32;
/// Where the retire word sits in a line.
const RETIRE_WORD: u64 = 40;

/// A layer an intent line's layer word names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LayerWord {
    /// The word's offset.
    pub at: u64,
    /// The layer's root object.
    pub layer: u64,
}

/// A structure's intent lines in the pool, and which of them a writer holds (DRAM).
pub(crate) struct IntentArea {
    offset: u64,
    held: Vec<CachePadded<AtomicBool>>,
    /// Which lines' retire words name a layer now.
    retire_held: Vec<AtomicBool>,
}

/// A line held by one writer until dropped.
pub(crate) struct IntentLine<'a> {
    area: &'a IntentArea,
    index: usize,
}

thread_local! {
    /// The line this thread tries first: threads spread over the lines.
    static FIRST_LINE: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
}

impl IntentArea {
    /// The area at `offset` (a block of [`AREA_BYTES`], 64-byte aligned).
    pub(crate) fn at(offset: u64) -> IntentArea {
        IntentArea {
            offset,
            held: (0..LINES)
                .map(|_| CachePadded::new(AtomicBool::new(false)))
                .collect(),
            retire_held: (0..LINES).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// The area's offset.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Hold a line: the thread's own if free, else the next free one, waiting if all are held.
    pub(crate) fn claim(&self) -> IntentLine<'_> {
        let first = FIRST_LINE.with(|f| *f);
        let backoff = Backoff::new();
        loop {
            for step in 0..self.held.len() {
                let index = (first + step) % self.held.len();
                if self.held[index]
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    return IntentLine { area: self, index };
                }
            }
            backoff.snooze();
        }
    }

    /// Every block the lines name, in line order (for resolution at open).
    pub(crate) fn named<B: Backend>(&self, pool: &Pool<B>) -> Result<Vec<Named>, PoolError> {
        let mut bytes = vec![0u8; AREA_BYTES as usize];
        pool.read_bytes(self.offset, &mut bytes)?;
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8"));
        let mut named = Vec::new();
        for line in 0..LINES as usize {
            let base = line * (LINE_BYTES as usize / 8);
            for pair in [0, 2] {
                let (offset, size) = (word(base + pair), word(base + pair + 1));
                if offset != 0 && size != 0 {
                    named.push((offset, size));
                }
            }
        }
        Ok(named)
    }
}

impl IntentArea {
    /// Every nonzero layer word and retire word.
    pub(crate) fn layer_words<B: Backend>(
        &self,
        pool: &Pool<B>,
    ) -> Result<Vec<LayerWord>, PoolError> {
        let mut words = Vec::new();
        for line in 0..LINES {
            for word in [LAYER_WORD, RETIRE_WORD] {
                let at = self.offset + line * LINE_BYTES + word;
                let layer = pool.load_u64(at)?;
                if layer != 0 {
                    words.push(LayerWord { at, layer });
                }
            }
        }
        Ok(words)
    }

    /// Hold a retire word that names nothing, if one is free (its index).
    pub(crate) fn claim_retire_word(&self) -> Option<usize> {
        self.retire_held.iter().position(|held| {
            held.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// The offset of retire word `index`.
    pub(crate) fn retire_word(&self, index: usize) -> u64 {
        self.offset + index as u64 * LINE_BYTES + RETIRE_WORD
    }

    /// Let retire word `index` go (it names nothing again).
    pub(crate) fn release_retire_word(&self, index: usize) {
        self.retire_held[index].store(false, Ordering::Release);
    }
}

/// Store `layer` in the word at `at` (a retire word), persisted.
pub(crate) fn name_layer<B: Backend>(pool: &Pool<B>, at: u64, layer: u64) -> Result<(), PoolError> {
    let w = pool.store_u64(at, layer)?;
    pool.persist(w);
    Ok(())
}

/// Clear a layer word (persisted: a layer it named is published or freed).
pub(crate) fn clear_layer_word<B: Backend>(pool: &Pool<B>, at: u64) -> Result<(), PoolError> {
    let w = pool.store_u64(at, 0)?;
    pool.persist(w);
    Ok(())
}

/// Clear a layer word inside `tx` (the one that frees the layer it names).
pub(crate) fn clear_layer_word_in<B: Backend>(tx: &Tx<'_, B>, at: u64) -> Result<(), TxError> {
    tx.write(at, &0u64.to_le_bytes())
}

impl IntentLine<'_> {
    fn line_offset(&self) -> u64 {
        self.area.offset + self.index as u64 * LINE_BYTES
    }

    /// The offset of this line's layer word.
    pub(crate) fn layer_word(&self) -> u64 {
        self.line_offset() + LAYER_WORD
    }

    /// Name `new` and `old` (either may be none) in the line and flush it: the caller's next
    /// fence makes it durable.
    pub(crate) fn name<B: Backend>(
        &self,
        pool: &Pool<B>,
        new: Option<Named>,
        old: Option<Named>,
    ) -> Result<Pending, PoolError> {
        let (n, o) = (new.unwrap_or((0, 0)), old.unwrap_or((0, 0)));
        let mut bytes = [0u8; 32];
        for (i, w) in [n.0, n.1, o.0, o.1].into_iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        let w = pool.write(self.line_offset(), &bytes)?;
        Ok(pool.flush(w))
    }
}

impl Drop for IntentLine<'_> {
    fn drop(&mut self) {
        self.area.held[self.index].store(false, Ordering::Release);
    }
}
