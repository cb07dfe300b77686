//! Ordered scans across layers: a stack of layers, each read a batch of entries at a time.

use std::ops::{Bound, Deref};

use crossbeam_epoch as epoch;
use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::{
    is_layer, slice_word, Layer, RecordMapError, RecordTreeMap, Result, LAYER_TAG, SCAN_BATCH,
    SLICE,
};
use crate::records::layout;

impl<B, P, H> RecordTreeMap<B, P, H>
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>>,
{
    /// The `(key, value)`s with keys in `(start, end)`, in key order: read a batch of entries
    /// of a layer at a time without a lock, so a scan beside writers sees every key present
    /// for its whole duration, once. The iterator pins the epoch while it lives (see
    /// [`crate::records::RecordHashMap::iter`]).
    pub fn range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Scan<'_, B, P, H> {
        let low = match start {
            Bound::Included(k) | Bound::Excluded(k) => Bound::Included(slice_word(k, 0)),
            Bound::Unbounded => Bound::Unbounded,
        };
        Scan {
            map: self,
            start: start.map(<[u8]>::to_vec),
            end: end.map(<[u8]>::to_vec),
            stack: vec![Level {
                layer: &self.top,
                depth: 0,
                on_start_path: true,
                low,
                buffer: Vec::new(),
                next: 0,
                exhausted: false,
                batch: FIRST_BATCH,
            }],
            _guard: epoch::pin(),
            done: false,
        }
    }

    /// Every `(key, value)`, in key order.
    pub fn iter(&self) -> Scan<'_, B, P, H> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }
}

/// One layer of a scan in progress.
struct Level<'a, B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    layer: &'a Layer<B, P, H>,
    depth: usize,
    /// Whether the layer was reached by the start key's own path: only then does the start
    /// key's slice bound the layer's entries (another layer may hold the same slice word for
    /// other keys, all of which sort after the start key).
    on_start_path: bool,
    /// The lowest word still to read.
    low: Bound<u64>,
    buffer: Vec<(u64, u64)>,
    next: usize,
    exhausted: bool,
    /// Entries the next refill takes: small first (a short scan returns early), doubling up
    /// to [`SCAN_BATCH`].
    batch: usize,
}

/// Records prefetched ahead of the one a scan reads: their cache misses overlap.
const PREFETCH_AHEAD: usize = 8;
/// The first refill of a layer.
const FIRST_BATCH: usize = 16;

/// The `(key, value)` pairs of a [`RecordTreeMap`] in a range ([`RecordTreeMap::range`]).
pub struct Scan<'a, B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    map: &'a RecordTreeMap<B, P, H>,
    start: Bound<Vec<u8>>,
    end: Bound<Vec<u8>>,
    stack: Vec<Level<'a, B, P, H>>,
    _guard: epoch::Guard,
    done: bool,
}

impl<B, P, H> Scan<'_, B, P, H>
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>>,
{
    /// The next entry of the innermost layer, refilling its buffer from the tree.
    fn next_entry(&mut self) -> Result<Option<(usize, bool, u64, u64)>> {
        let Some(level) = self.stack.last_mut() else {
            return Ok(None);
        };
        if level.next == level.buffer.len() {
            if level.exhausted {
                self.stack.pop();
                return self.next_entry();
            }
            level.buffer.clear();
            level.next = 0;
            for entry in level
                .layer
                .range((level.low, Bound::Unbounded))
                .take(level.batch)
            {
                level.buffer.push(entry?);
            }
            level.exhausted = level.buffer.len() < level.batch;
            level.batch = (level.batch * 2).min(SCAN_BATCH);
            if let Some(&(last, _)) = level.buffer.last() {
                level.low = Bound::Excluded(last);
            }
            if level.buffer.is_empty() {
                self.stack.pop();
                return self.next_entry();
            }
            for &(_, value) in level.buffer.iter().take(PREFETCH_AHEAD) {
                prefetch_record(self.map, value);
            }
        }
        let (word, value) = level.buffer[level.next];
        if let Some(&(_, ahead)) = level.buffer.get(level.next + PREFETCH_AHEAD) {
            prefetch_record(self.map, ahead);
        }
        level.next += 1;
        Ok(Some((level.depth, level.on_start_path, word, value)))
    }

    fn advance(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        let pool = self.map.heap.pool();
        while let Some((depth, on_start_path, word, value)) = self.next_entry()? {
            if is_layer(value) {
                // Inside a layer the start bound cuts only where the path is the start key's.
                let low = match &self.start {
                    Bound::Included(k) | Bound::Excluded(k)
                        if on_start_path
                            && slice_word(k, depth) == word
                            && k.len() > (depth + 1) * SLICE =>
                    {
                        Bound::Included(slice_word(k, depth + 1))
                    }
                    _ => Bound::Unbounded,
                };
                self.stack.push(Level {
                    layer: self.map.layer(value & !LAYER_TAG)?,
                    depth: depth + 1,
                    on_start_path: low != Bound::Unbounded,
                    low,
                    buffer: Vec::new(),
                    next: 0,
                    exhausted: false,
                    batch: FIRST_BATCH,
                });
                continue;
            }
            let line = layout::first_line(pool, value)?;
            // Read whole and checked before the bounds decide on the key: the range's first
            // layer starts at the start key's word, so few records are read only to be skipped.
            let (key, record_value) = line.checked_key_value(pool, value)?;
            let after_start = match &self.start {
                Bound::Included(s) => key >= *s,
                Bound::Excluded(s) => key > *s,
                Bound::Unbounded => true,
            };
            if !after_start {
                continue;
            }
            let before_end = match &self.end {
                Bound::Included(e) => key <= *e,
                Bound::Excluded(e) => key < *e,
                Bound::Unbounded => true,
            };
            if !before_end {
                return Ok(None);
            }
            return Ok(Some((key, record_value)));
        }
        Ok(None)
    }
}

/// Bring the first two lines of the record at `value` (if it is one) into the cache: a hint,
/// harmless on anything else.
fn prefetch_record<B, P, H>(map: &RecordTreeMap<B, P, H>, value: u64)
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>>,
{
    if !is_layer(value) {
        map.heap.pool().prefetch(value, 128);
    }
}

impl<B, P, H> Iterator for Scan<'_, B, P, H>
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>>,
{
    type Item = Result<(Vec<u8>, Vec<u8>), RecordMapError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(Some(pair)) => Some(Ok(pair)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
