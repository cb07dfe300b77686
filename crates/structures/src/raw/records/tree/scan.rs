//! Ordered scans across layers: a stack of layers, each read a batch of entries at a time,
//! the records of a batch copied out inside the pin that read their entries.
//!
//! A scan pins the map's epoch only while it refills (inside `next`), never between calls: an
//! idle scan holds back no block the map retires, and a scan that reads slowly holds back
//! only what was retired during one refill. What it keeps between refills is owned: copied
//! pairs, and the layers on its stack, held by `Arc` and checked at each refill (a layer found
//! dead was emptied and unlinked since: nothing is left in it to see, and its blocks may be
//! freed already, so it is not read again).

use std::collections::VecDeque;
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
/// Records prefetched ahead of the one a refill reads: their cache misses overlap.
const PREFETCH_AHEAD: usize = 8;

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// The `(key, value)`s with keys in `(start, end)`, in key order: read a batch of entries
    /// of a layer at a time without a lock, so a scan beside writers sees every key present
    /// for its whole duration, once (with the value it had at some moment of the scan). The
    /// scan pins the map's epoch only inside `next` (see the module docs).
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
            ready: VecDeque::new(),
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
    /// Pairs copied and not handed out yet, in key order.
    ready: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// No refill is left to do (the end bound is passed, or every layer read, or an error).
    finished: bool,
}

impl<B> Scan<'_, B>
where
    B: Backend,
{
    fn after_start(&self, key: &[u8]) -> bool {
        match &self.start {
            Bound::Included(s) => key >= s.as_slice(),
            Bound::Excluded(s) => key > s.as_slice(),
            Bound::Unbounded => true,
        }
    }

    fn before_end(&self, key: &[u8]) -> bool {
        match &self.end {
            Bound::Included(e) => key <= e.as_slice(),
            Bound::Excluded(e) => key < e.as_slice(),
            Bound::Unbounded => true,
        }
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

    /// Read the next batch of the innermost layer, pinned: its records' pairs go to `ready`
    /// (up to the end bound), and a layer entry ends the batch and goes on the stack.
    fn refill(&mut self) -> Result<()> {
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
        let mut entries = Vec::with_capacity(level.batch);
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
        for &(_, value) in entries.iter().take(PREFETCH_AHEAD) {
            prefetch_record(map, value);
        }
        let mut low = level.low;
        let mut bytes = 0;
        let mut child = None;
        let mut stopped = false;
        for (i, &(word, value)) in entries.iter().enumerate() {
            if let Some(&(_, ahead)) = entries.get(i + PREFETCH_AHEAD) {
                prefetch_record(map, ahead);
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
            let (key, record_value) = line.checked_key_value(pool, value)?;
            if !self.after_start(&key) {
                continue;
            }
            if !self.before_end(&key) {
                self.finished = true;
                return Ok(());
            }
            bytes += key.len() + record_value.len();
            self.ready.push_back((key, record_value));
            if bytes >= REFILL_BYTES && i + 1 < entries.len() {
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

/// Bring the first two lines of the record at `value` (if it is one) into the cache: a hint,
/// harmless on anything else.
fn prefetch_record<B>(map: &RecordTreeMap<B>, value: u64)
where
    B: Backend,
{
    if !is_layer(value) {
        map.heap.pool().prefetch(value, 128);
    }
}

impl<B> Iterator for Scan<'_, B>
where
    B: Backend,
{
    type Item = Result<(Vec<u8>, Vec<u8>), RecordMapError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(pair) = self.ready.pop_front() {
                return Some(Ok(pair));
            }
            if self.finished {
                return None;
            }
            if let Err(e) = self.refill() {
                self.finished = true;
                self.ready.clear();
                return Some(Err(e));
            }
        }
    }
}
