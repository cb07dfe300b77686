//! Ordered scans across layers: a stack of layers, each read a batch of entries at a time,
//! the records of a batch copied out inside the pin that read their entries.
//!
//! A scan pins the map's epoch only while it refills (inside `next_pair`), never between
//! calls: an idle scan holds back no block the map retires, and a scan that reads slowly holds
//! back only what was retired during one refill. What it keeps between refills is owned:
//! copied pairs, and the layers on its stack, held by `Arc` and checked at each refill (a
//! layer found dead was emptied and unlinked since: nothing is left in it to see, and its
//! blocks may be freed already, so it is not read again). Every record copied is checked
//! against its checksum first: damage is a [`RecordMapError::CorruptRecord`], never a pair.
//!
//! A refill copies its pairs into one arena ([`Arena`]: the bytes of each key and value, one
//! after the other, and where each pair lies), cleared and filled again in place by the next
//! refill, and taken over from the thread's last scan: once the arena has grown to a batch's
//! bytes, a scan allocates nothing per pair. [`Scan::next_pair`] lends each pair from it; the
//! owned [`Iterator`] copies what it lends.

use std::cell::Cell;
use std::ops::Bound;
use std::sync::Arc;

use pmem_ordering::Backend;

use super::{is_layer, slice_word, Layer, RecordMapError, RecordTreeMap, Result, LAYER_TAG, SLICE};
use crate::records::layout;

/// Entries a refill takes from a layer, at most.
const SCAN_BATCH: usize = 64;
/// The first refill of a layer: small, so that a short scan reads few records it does not
/// return; doubling up to [`SCAN_BATCH`].
const FIRST_BATCH: usize = 8;
/// Bytes of pairs a refill copies before it stops (it copies at least one pair).
const REFILL_BYTES: usize = 1 << 20;
/// Records prefetched ahead of the one a refill reads, so that their cache misses overlap:
/// the first line of the record `2 * PREFETCH_AHEAD` ahead, and the rest of the one
/// `PREFETCH_AHEAD` ahead, as far as its header (in that first line, fetched by then) says.
const PREFETCH_AHEAD: usize = 8;
/// Bytes of a record prefetched at most: past them a long value is read as a stream.
const PREFETCH_BYTES: u64 = 512;
/// Bytes of a record's first line.
const LINE: u64 = 64;
/// The largest arena a thread keeps for its next scan (a refill stops past [`REFILL_BYTES`],
/// so only a batch of large values grows one past this).
const KEPT_ARENA_BYTES: usize = 2 * REFILL_BYTES;

thread_local! {
    /// The arena of the thread's last scan, for its next one.
    static SPARE: Cell<Arena> = const { Cell::new(Arena::new()) };
}

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// The `(key, value)`s with keys in `(start, end)`, in key order: read a batch of entries
    /// of a layer at a time without a lock, so a scan beside writers sees every key present
    /// for its whole duration, once (with the value it had at some moment of the scan). The
    /// scan pins the map's epoch only inside `next_pair` (see the module docs). The pairs are
    /// lent by [`Scan::next_pair`], or copied out by the scan's [`Iterator`].
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Scan<'_, B> {
        let low = match start {
            Bound::Included(k) | Bound::Excluded(k) => Bound::Included(slice_word(k, 0)),
            Bound::Unbounded => Bound::Unbounded,
        };
        Scan {
            map: self,
            start: start.map(<[u8]>::to_vec),
            end: end.map(<[u8]>::to_vec),
            stack: vec![Level::new(self.top.clone(), low)],
            arena: SPARE.try_with(Cell::take).unwrap_or_default(),
            finished: false,
        }
    }

    /// Every `(key, value)`, in key order.
    pub fn iter(&self) -> Scan<'_, B> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }
}

/// One layer of a scan in progress.
struct Level<B: Backend> {
    layer: Arc<Layer<B>>,
    /// Whether the layer was reached by the start key's own path: only then does the start
    /// key's slice bound the layer's entries (another layer may hold the same slice word for
    /// other keys, all of which sort after the start key).
    on_start_path: bool,
    /// The lowest word still to read.
    low: Bound<u64>,
    exhausted: bool,
    /// Entries the next refill takes.
    batch: usize,
}

impl<B: Backend> Level<B> {
    fn new(layer: Arc<Layer<B>>, low: Bound<u64>) -> Self {
        Level {
            layer,
            on_start_path: low != Bound::Unbounded,
            low,
            exhausted: false,
            batch: FIRST_BATCH,
        }
    }
}

/// The `(key, value)` pairs of a [`RecordTreeMap`] in a range ([`RecordTreeMap::range`]).
pub struct Scan<'a, B: Backend> {
    map: &'a RecordTreeMap<B>,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    stack: Vec<Level<B>>,
    /// The pairs of the last refill, handed out in key order.
    arena: Arena,
    /// No refill is left to do (the end bound is passed, or every layer read, or an error).
    finished: bool,
}

/// The pairs one refill copied, and its list of entries: kept from refill to refill (and from
/// scan to scan through the thread's spare), so their capacity is reused.
#[derive(Default)]
struct Arena {
    /// Each pair's key then its value, pair after pair.
    bytes: Vec<u8>,
    /// Where each pair lies in `bytes`, in key order.
    spans: Vec<Span>,
    /// The next pair to hand out.
    next: usize,
    /// The layer entries a refill reads (their records are copied after).
    entries: Vec<(u64, u64)>,
}

/// A pair in the arena: its key at `bytes[at..at + key_len]`, its value right after.
#[derive(Clone, Copy)]
struct Span {
    at: usize,
    key_len: usize,
    value_len: usize,
}

impl Arena {
    const fn new() -> Arena {
        Arena {
            bytes: Vec::new(),
            spans: Vec::new(),
            next: 0,
            entries: Vec::new(),
        }
    }

    /// Drop the pairs (the buffers keep their capacity).
    fn clear(&mut self) {
        self.bytes.clear();
        self.spans.clear();
        self.next = 0;
    }
}

/// Whether `key` is at or past the range's start.
fn after_start(start: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match start {
        Bound::Included(s) => key >= s.as_slice(),
        Bound::Excluded(s) => key > s.as_slice(),
        Bound::Unbounded => true,
    }
}

/// Whether `key` is before the range's end.
fn before_end(end: &Bound<Vec<u8>>, key: &[u8]) -> bool {
    match end {
        Bound::Included(e) => key <= e.as_slice(),
        Bound::Excluded(e) => key < e.as_slice(),
        Bound::Unbounded => true,
    }
}

impl<B> Scan<'_, B>
where
    B: Backend,
{
    /// The next `(key, value)` in key order, lent from the scan's arena until the next call:
    /// nothing is allocated per pair once the arena has grown to a batch (the owned
    /// [`Iterator`] copies each pair). `None` at the range's end, and after an error.
    pub fn next_pair(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        while self.arena.next == self.arena.spans.len() {
            if self.finished {
                return None;
            }
            if let Err(e) = self.refill() {
                self.finished = true;
                self.arena.clear();
                return Some(Err(e));
            }
        }
        let Span {
            at,
            key_len,
            value_len,
        } = self.arena.spans[self.arena.next];
        self.arena.next += 1;
        let (key, rest) = self.arena.bytes[at..].split_at(key_len);
        Some(Ok((key, &rest[..value_len])))
    }

    /// Where a scan of the layer `child`, named in `parent` by `word`, starts: `None` if all
    /// its keys sort before the start key.
    fn child_start(&self, parent: &Level<B>, word: u64, child: &Layer<B>) -> Option<Bound<u64>> {
        let key = match &self.start {
            Bound::Included(k) | Bound::Excluded(k) if parent.on_start_path => k,
            _ => return Some(Bound::Unbounded),
        };
        let depth = parent.layer.depth();
        if slice_word(key, depth) != word {
            // The level starts at the start key's word: this one is above it.
            return Some(Bound::Unbounded);
        }
        match child.compare_skipped(key, parent.layer.start() + SLICE) {
            std::cmp::Ordering::Equal => Some(Bound::Included(slice_word(key, child.depth()))),
            std::cmp::Ordering::Less => Some(Bound::Unbounded),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// Read the next batch of the innermost layer, pinned: its records' pairs replace the
    /// arena's (up to the end bound), and a layer entry ends the batch and goes on the stack.
    fn refill(&mut self) -> Result<()> {
        self.arena.clear();
        let mut entries = std::mem::take(&mut self.arena.entries);
        entries.clear();
        let refilled = self.refill_from(&mut entries);
        self.arena.entries = entries;
        refilled
    }

    /// [`Scan::refill`], reading the layer's entries into `entries` (empty).
    fn refill_from(&mut self, entries: &mut Vec<(u64, u64)>) -> Result<()> {
        let map = self.map;
        let pool = map.heap.pool();
        let guard = map.records.pin();
        let Some(level) = self.stack.last() else {
            self.finished = true;
            return Ok(());
        };
        if level.exhausted || level.layer.is_dead() {
            self.stack.pop();
            return Ok(());
        }
        for entry in level
            .layer
            .tree
            .range((level.low, Bound::Unbounded))
            .take(level.batch)
        {
            let (word, value) = entry?;
            entries.push((word, value));
            if is_layer(value) {
                break;
            }
        }
        let ran_out = entries.len() < level.batch && entries.last().is_none_or(|e| !is_layer(e.1));
        // The first records' first two lines at once (nothing is fetched ahead of them yet),
        // the next ones' first lines.
        for (i, &(_, value)) in entries.iter().take(2 * PREFETCH_AHEAD).enumerate() {
            let lines = if i < PREFETCH_AHEAD { 2 } else { 1 };
            prefetch_lines(map, value, lines * LINE);
        }
        let mut low = level.low;
        let mut child = None;
        let mut stopped = false;
        for (i, &(word, value)) in entries.iter().enumerate() {
            if let Some(&(_, far)) = entries.get(i + 2 * PREFETCH_AHEAD) {
                prefetch_lines(map, far, LINE);
            }
            if let Some(&(_, near)) = entries.get(i + PREFETCH_AHEAD) {
                prefetch_rest(map, near);
            }
            low = Bound::Excluded(word);
            if is_layer(value) {
                let level = self.stack.last().expect("the level refilled");
                let layer = map.owned_at(value & !LAYER_TAG, &guard)?;
                if let Some(start) = self.child_start(level, word, &layer) {
                    child = Some(Level::new(layer, start));
                }
                break;
            }
            let line = layout::first_line(pool, value)?;
            // Read whole and checked before the bounds decide on the key: the range's first
            // layer starts at the start key's word, so few records are read only to be skipped.
            let arena = &mut self.arena;
            let at = arena.bytes.len();
            line.checked_append(pool, value, &mut arena.bytes)?;
            let (key_len, value_len) = (line.header.key_len, line.header.value_len);
            let key = &arena.bytes[at..at + key_len];
            if !after_start(&self.start, key) {
                arena.bytes.truncate(at);
                continue;
            }
            if !before_end(&self.end, key) {
                arena.bytes.truncate(at);
                self.finished = true;
                return Ok(());
            }
            arena.spans.push(Span {
                at,
                key_len,
                value_len,
            });
            if arena.bytes.len() >= REFILL_BYTES && i + 1 < entries.len() {
                stopped = true;
                break;
            }
        }
        let level = self.stack.last_mut().expect("the level refilled");
        level.low = low;
        level.exhausted = ran_out && !stopped;
        level.batch = (level.batch * 2).min(SCAN_BATCH);
        drop(guard);
        if let Some(child) = child {
            self.stack.push(child);
        }
        Ok(())
    }
}

/// Bring the first `bytes` of the record at `value` (if it is one) into the cache: a hint,
/// harmless on anything else.
fn prefetch_lines<B>(map: &RecordTreeMap<B>, value: u64, bytes: u64)
where
    B: Backend,
{
    if !is_layer(value) {
        map.heap.pool().prefetch(value, bytes);
    }
}

/// Bring the record at `value` past its first line (up to [`PREFETCH_BYTES`]) into the cache,
/// as long as the header in that line says it is: a hint, harmless on anything else (a header
/// that is none, or damaged, asks for lines of the pool a read checks anyway).
fn prefetch_rest<B>(map: &RecordTreeMap<B>, value: u64)
where
    B: Backend,
{
    if is_layer(value) {
        return;
    }
    let pool = map.heap.pool();
    if let Ok(Some(header)) = layout::read_header(pool, value, u64::MAX) {
        let bytes = header.record_bytes().min(PREFETCH_BYTES);
        if bytes > LINE {
            pool.prefetch(value + LINE, bytes - LINE);
        }
    }
}

impl<B> Iterator for Scan<'_, B>
where
    B: Backend,
{
    type Item = Result<(Vec<u8>, Vec<u8>), RecordMapError>;

    fn next(&mut self) -> Option<Self::Item> {
        let pair = self.next_pair()?;
        Some(pair.map(|(key, value)| (key.to_vec(), value.to_vec())))
    }
}

impl<B: Backend> Drop for Scan<'_, B> {
    fn drop(&mut self) {
        let mut arena = std::mem::take(&mut self.arena);
        if arena.bytes.capacity() <= KEPT_ARENA_BYTES {
            arena.clear();
            // After the thread's slot is gone (its exit), the arena is just freed.
            let _ = SPARE.try_with(|spare| spare.set(arena));
        }
    }
}
