//! The maps' iterators: the structure's own, in the store's error type, followed by the key
//! the structure reserves (whose value the catalog entry keeps) when it is in the map. The
//! ordered map's takes the tree's pairs in batches ([`BTreeEntries`]).

use std::cell::Cell;

use pmem_ordering::Backend;

use super::error::Error;
use crate::cceh;
use crate::fastfair;

/// `(key, value)` pairs of a map, each `Ok`, or an error that ends the walk.
///
/// The reserved key's pair comes last: for the ordered map it is `u64::MAX`, the largest key,
/// so the order holds.
#[derive(Debug)]
pub struct Entries<I> {
    raw: I,
    last: Option<(u64, u64)>,
    done: bool,
}

/// The pairs of a [`HashMap`](super::HashMap), in no particular order.
pub type HashEntries = Entries<cceh::Iter>;

/// The tree's own range scan, under the ordered map.
type TreeRange<'a, B> = fastfair::Range<'a, B>;

impl<I> Entries<I> {
    pub(crate) fn new(raw: I, last: Option<(u64, u64)>) -> Entries<I> {
        Entries {
            raw,
            last,
            done: false,
        }
    }
}

impl<I, E> Iterator for Entries<I>
where
    I: Iterator<Item = Result<(u64, u64), E>>,
    Error: From<E>,
{
    type Item = Result<(u64, u64), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.raw.next() {
            Some(Ok(pair)) => Some(Ok(pair)),
            Some(Err(e)) => {
                self.done = true;
                Some(Err(Error::from(e)))
            }
            None => {
                self.done = true;
                self.last.take().map(Ok)
            }
        }
    }
}

/// `(key, value)` pairs of a [`BTreeMap`](super::BTreeMap) in a range, in key order, each
/// `Ok`, or an error that ends the walk; the reserved key (`u64::MAX`, the largest) last, when
/// in the range.
///
/// The tree's pairs come in batches of whole leaves ([`fastfair::Range::next_leaves`]: one
/// validated copy per leaf, where `next` checks each pair, and no leaf read twice, where
/// batches cut at a count resume inside a leaf and read it again) into a buffer handed out
/// one pair per call. A batch is read before its pairs are handed out, which a scan beside
/// writers may do anyway: every key present for the scan's whole duration is still seen, and
/// each once.
pub struct BTreeEntries<'a, B: Backend> {
    raw: TreeRange<'a, B>,
    /// The batch being handed out, from `at` on.
    buf: Vec<(u64, u64)>,
    at: usize,
    /// Pairs the next batch asks for at least (it ends at a leaf's end): growing, so a short
    /// scan reads few leaves past what it takes.
    batch: usize,
    /// Pairs one leaf of the tree holds at most: the buffer holds a batch and one leaf.
    leaf_pairs: usize,
    /// The tree's range gave its last batch (or failed).
    raw_done: bool,
    /// The tree's error, returned once the pairs read before it are handed out.
    error: Option<Error>,
    last: Option<(u64, u64)>,
}

/// The first batch's pairs.
const FIRST_BATCH: usize = 16;
/// The largest batch. `next_leaves` appends less than its minimum plus a leaf's pairs, so the
/// buffer holds `MAX_BATCH - 1` plus a leaf's pairs (at most about 5 KiB, for the largest
/// nodes) and is never reallocated.
const MAX_BATCH: usize = 63;

thread_local! {
    /// The buffer of the thread's last scan, for its next one: a scan then allocates nothing.
    static SPARE: Cell<Vec<(u64, u64)>> = const { Cell::new(Vec::new()) };
}

impl<'a, B: Backend> BTreeEntries<'a, B> {
    /// The pairs `raw` reads, in a tree whose leaves hold at most `leaf_pairs` pairs
    /// ([`fastfair::FastFair::capacity`]), then `last`.
    pub(crate) fn new(raw: TreeRange<'a, B>, leaf_pairs: usize, last: Option<(u64, u64)>) -> Self {
        BTreeEntries {
            raw,
            buf: Vec::new(),
            at: 0,
            batch: FIRST_BATCH,
            leaf_pairs,
            raw_done: false,
            error: None,
            last,
        }
    }

    /// The next pair of the batch in hand, if any: the common case, inlined into the typed
    /// iterator.
    #[inline(always)]
    pub(super) fn next_buffered(&mut self) -> Option<(u64, u64)> {
        let pair = *self.buf.get(self.at)?;
        self.at += 1;
        Some(pair)
    }

    /// End the walk: nothing more comes (the typed iterator met a pair it cannot decode).
    pub(super) fn stop(&mut self) {
        self.buf.clear();
        self.at = 0;
        self.raw_done = true;
        self.error = None;
        self.last = None;
    }

    /// The next pair once the batch is handed out: the first of a new batch, else the tree's
    /// error, else the reserved key's pair.
    #[inline(never)]
    fn refill(&mut self) -> Option<Result<(u64, u64), Error>> {
        self.buf.clear();
        self.at = 0;
        if !self.raw_done {
            if self.buf.capacity() == 0 {
                self.buf = SPARE.try_with(Cell::take).unwrap_or_default();
                self.buf.reserve_exact(MAX_BATCH - 1 + self.leaf_pairs);
            }
            match self.raw.next_leaves(&mut self.buf, self.batch) {
                // Fewer than asked for only at the range's end.
                Ok(n) => self.raw_done = n < self.batch,
                Err(e) => {
                    // The pairs read before the error come first, as `next` hands them out.
                    self.raw_done = true;
                    self.error = Some(Error::from(e));
                    self.last = None;
                }
            }
            self.batch = (self.batch * 2).min(MAX_BATCH);
            if let Some(&pair) = self.buf.first() {
                self.at = 1;
                return Some(Ok(pair));
            }
        }
        if let Some(e) = self.error.take() {
            return Some(Err(e));
        }
        self.last.take().map(Ok)
    }
}

impl<B: Backend> Iterator for BTreeEntries<'_, B> {
    type Item = Result<(u64, u64), Error>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_buffered() {
            Some(pair) => Some(Ok(pair)),
            None => self.refill(),
        }
    }
}

impl<B: Backend> Drop for BTreeEntries<'_, B> {
    fn drop(&mut self) {
        // Kept whenever allocated: it never grows past what `refill` reserved (a batch and a
        // leaf), so a thread keeps at most one buffer of a few KiB.
        if self.buf.capacity() > 0 {
            self.buf.clear();
            let buf = std::mem::take(&mut self.buf);
            // After the thread's slot is gone (its exit), the buffer is just freed.
            let _ = SPARE.try_with(|spare| spare.set(buf));
        }
    }
}
