//! Range scans that lend each pair: pairs, in key order, are copied (and checked) into a
//! buffer under the map's lock, a batch at a time, then lent to the caller's callback with
//! the lock released; the next batch starts after the last key lent. Batches start small and
//! double (16 pairs, then 32, up to 256): a short scan copies few pairs it does not lend, a
//! long one takes the lock seldom. While a batch is copied, the slots [`PREFETCH_AHEAD`]
//! pairs ahead in key order (into the next leaf too) are asked for, so their misses overlap;
//! nothing is asked for past the batch's end. The buffers are the thread's, reused: a scan
//! allocates nothing per pair, and nothing at all once they are large enough.

use std::cell::Cell;
use std::ops::{Bound, ControlFlow};

use pmem_ordering::Backend;

use super::index::LeafBound;
use super::leaf::Leaf;
use super::{Index, LeafMap, Result};

/// Pairs copied, `(start, key_len, value_len)` of each in `bytes`.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    pairs: Vec<(usize, usize, usize)>,
    /// The last key lent.
    last: Vec<u8>,
}

thread_local! {
    /// This thread's scan buffers between scans (a scan inside a scan's callback makes its
    /// own).
    static SPARE: Cell<Option<Box<Batch>>> = const { Cell::new(None) };
}

/// Pairs of a scan's first batch; each next batch doubles, up to [`LAST_BATCH_PAIRS`].
const FIRST_BATCH_PAIRS: usize = 16;
/// Pairs of a batch at most.
const LAST_BATCH_PAIRS: usize = 256;
/// How many pairs ahead of the one being copied its slot is asked for: enough misses in
/// flight to cover the memory's latency, few enough not to stall on full miss buffers.
const PREFETCH_AHEAD: usize = 12;

/// Where a batch starts.
#[derive(Clone, Copy)]
enum From {
    /// The scan's lower bound.
    Start,
    /// After the last key lent.
    AfterLast,
}

/// The slot number [`Slots`] yields on entering a leaf with slots found damaged at open (a
/// key in range may be in one of them): past every slot.
const DAMAGED: u8 = u8::MAX;

/// The slots of a range of leaves in key order: from a position of a first leaf, then every
/// slot of the leaves after it ([`DAMAGED`] on entering a damaged one).
#[derive(Clone)]
struct Slots<'i, L> {
    /// The leaves after the current one.
    leaves: L,
    leaf: &'i Leaf,
    /// The current leaf's slots still to come.
    rest: &'i [u8],
}

impl<'i, L: Iterator<Item = (&'i LeafBound, &'i Leaf)>> Iterator for Slots<'i, L> {
    /// A slot, and its leaf.
    type Item = (&'i Leaf, u8);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((&slot, rest)) = self.rest.split_first() {
                self.rest = rest;
                return Some((self.leaf, slot));
            }
            let (_, leaf) = self.leaves.next()?;
            self.leaf = leaf;
            self.rest = leaf.ordered();
            if leaf.damaged != 0 {
                return Some((leaf, DAMAGED));
            }
        }
    }
}

impl<B: Backend> LeafMap<B> {
    /// Visit the pairs whose keys lie between `start` and `end`, in key order, lending each
    /// key and value to `f` until it breaks: how many pairs it was lent. No pair is allocated.
    ///
    /// The scan holds the map's lock while it copies a batch of pairs, not while `f` runs, so
    /// `f` may read or write the map. It is not a snapshot: a pair written during the scan
    /// may or may not be visited, as its key lies before or after the scan's position; each
    /// key is visited at most once, in increasing order.
    pub fn scan(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        mut f: impl FnMut(&[u8], &[u8]) -> ControlFlow<()>,
    ) -> Result<u64> {
        let mut batch = SPARE.with(|s| s.take()).unwrap_or_default();
        let mut visited = 0u64;
        let mut from = From::Start;
        let mut limit = FIRST_BATCH_PAIRS;
        let outcome = loop {
            let ended = {
                let index = self.read();
                match self.fill(&index, &mut batch, from, start, end, limit) {
                    Ok(ended) => ended,
                    Err(e) => break Err(e),
                }
            };
            let mut stop = ended;
            for &(at, key_len, value_len) in &batch.pairs {
                let key = &batch.bytes[at..at + key_len];
                let value = &batch.bytes[at + key_len..at + key_len + value_len];
                visited += 1;
                if f(key, value).is_break() {
                    stop = true;
                    break;
                }
            }
            if stop {
                break Ok(visited);
            }
            if let Some(&(at, key_len, _)) = batch.pairs.last() {
                let Batch { bytes, last, .. } = &mut *batch;
                last.clear();
                last.extend_from_slice(&bytes[at..at + key_len]);
            }
            from = From::AfterLast;
            limit = (limit * 2).min(LAST_BATCH_PAIRS);
        };
        SPARE.with(|s| s.set(Some(batch)));
        outcome
    }

    /// The pairs whose keys lie between `start` and `end`, in key order, owned: a convenience
    /// over [`LeafMap::scan`].
    pub fn range_pairs(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut pairs = Vec::new();
        self.scan(start, end, |k, v| {
            pairs.push((k.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })?;
        Ok(pairs)
    }

    /// Copy into `batch` up to `limit` pairs in range, in key order, from `from` on: whether
    /// the scan has nothing after them (its end bound reached, or no leaf left).
    fn fill(
        &self,
        index: &Index,
        batch: &mut Batch,
        from: From,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        limit: usize,
    ) -> Result<bool> {
        batch.bytes.clear();
        batch.pairs.clear();
        let Batch { bytes, pairs, last } = batch;
        let lower = match from {
            From::Start => start,
            From::AfterLast => Bound::Excluded(&last[..]),
        };
        let (bound, first) = match lower {
            Bound::Unbounded => self.leaf_of(index, &[])?,
            Bound::Included(k) | Bound::Excluded(k) => self.leaf_of(index, k)?,
        };
        if let Some(e) = first.damage(&self.config) {
            return Err(e);
        }
        let position = self.lower_position(first, lower)?;
        let mut leaves = index.from(bound.as_slice());
        leaves.next();
        let mut copied = Slots {
            leaves,
            leaf: first,
            rest: &first.ordered()[position..],
        };
        // The slots `PREFETCH_AHEAD` pairs ahead: asked for, as the copy advances, until the
        // batch's end.
        let mut ahead = copied.clone();
        let pool = self.heap.pool();
        let slot_bytes = self.config.slot_bytes;
        let prefetch = |(leaf, slot): (&Leaf, u8)| {
            if slot != DAMAGED {
                pool.prefetch(self.config.slot_at(leaf.offset, slot as usize), slot_bytes);
            }
        };
        ahead
            .by_ref()
            .take(PREFETCH_AHEAD.min(limit))
            .for_each(prefetch);
        let slots = self.slots();
        while pairs.len() < limit {
            let Some((leaf, slot)) = copied.next() else {
                return Ok(true);
            };
            if slot == DAMAGED {
                match leaf.damage(&self.config) {
                    Some(e) => return Err(e),
                    None => continue,
                }
            }
            if pairs.len() + PREFETCH_AHEAD < limit {
                if let Some(next) = ahead.next() {
                    prefetch(next);
                }
            }
            let mark = bytes.len();
            let (at, key_len, value_len) =
                slots.append_pair(self.config.slot_at(leaf.offset, slot as usize), bytes)?;
            if past(&bytes[at..at + key_len], end) {
                bytes.truncate(mark);
                return Ok(true);
            }
            pairs.push((at, key_len, value_len));
        }
        Ok(false)
    }

    /// The first position of `leaf`'s key order whose key is inside `lower`.
    fn lower_position(&self, leaf: &Leaf, lower: Bound<&[u8]>) -> Result<usize> {
        let (key, inclusive) = match lower {
            Bound::Unbounded => return Ok(0),
            Bound::Included(k) => (k, true),
            Bound::Excluded(k) => (k, false),
        };
        let slots = self.slots();
        leaf.search(key, inclusive, |slot| {
            slots.compare(self.config.slot_at(leaf.offset, slot), key)
        })
    }
}

/// Whether `key` lies past `end`.
fn past(key: &[u8], end: Bound<&[u8]>) -> bool {
    match end {
        Bound::Unbounded => false,
        Bound::Included(e) => key > e,
        Bound::Excluded(e) => key >= e,
    }
}
