//! Range scans that lend each pair: whole leaves' pairs, in key order, are copied (and
//! checked) into a buffer under the map's lock (until it holds a few dozen), then lent to the caller's callback with the lock
//! released; the next leaf is found by its bound, or (if a write moved it) by the last key
//! lent. The buffers are the thread's, reused: a scan allocates nothing per pair, and nothing
//! at all once they are large enough.

use std::cell::Cell;
use std::ops::{Bound, ControlFlow};

use pmem_ordering::Backend;

use super::leaf::Leaf;
use super::{Index, LeafMap, Result};

/// One leaf's pairs, copied: `(start, key_len, value_len)` of each in `bytes`.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    pairs: Vec<(usize, usize, usize)>,
    /// The last key lent.
    last: Vec<u8>,
    /// The bound of the leaf after the batch's.
    next_bound: Vec<u8>,
}

thread_local! {
    /// This thread's scan buffers between scans (a scan inside a scan's callback makes its
    /// own).
    static SPARE: Cell<Option<Box<Batch>>> = const { Cell::new(None) };
}

/// Pairs a batch holds at least before it is lent (unless the scan ends first): whole leaves
/// are copied until it does, so a scan of 100 pairs takes the lock two or three times.
const BATCH_PAIRS: usize = 48;

/// Where a batch starts.
#[derive(Clone, Copy)]
enum From {
    /// The scan's lower bound.
    Start,
    /// The leaf whose bound is `next_bound`, else after the last key lent.
    NextLeaf,
}

impl<B: Backend> LeafMap<B> {
    /// Visit the pairs whose keys lie between `start` and `end`, in key order, lending each
    /// key and value to `f` until it breaks: how many pairs it was lent. No pair is allocated.
    ///
    /// The scan holds the map's lock while it copies one leaf's pairs, not while `f` runs, so
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
        let outcome = loop {
            let ended = {
                let index = self.read();
                match self.fill(&index, &mut batch, from, start, end) {
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
            from = From::NextLeaf;
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

    /// Copy into `batch` the pairs in range of the leaves from `from` on, whole leaves until
    /// it holds [`BATCH_PAIRS`]: whether the scan has nothing after them (its end bound
    /// reached, or no leaf left).
    fn fill(
        &self,
        index: &Index,
        batch: &mut Batch,
        from: From,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<bool> {
        batch.bytes.clear();
        batch.pairs.clear();
        let Batch {
            bytes,
            pairs,
            last,
            next_bound,
        } = batch;
        let (first_bound, mut lower): (&[u8], Bound<&[u8]>) = match from {
            From::Start => match start {
                Bound::Unbounded => (&[], Bound::Unbounded),
                Bound::Included(k) | Bound::Excluded(k) => {
                    (self.leaf_of(index, k)?.0.as_slice(), start)
                }
            },
            From::NextLeaf if index.get(&next_bound[..]).is_some() => {
                (&next_bound[..], Bound::Unbounded)
            }
            From::NextLeaf => (
                self.leaf_of(index, last)?.0.as_slice(),
                Bound::Excluded(&last[..]),
            ),
        };
        let slots = self.slots();
        let mut leaves = index.from(first_bound);
        let mut prefetched = false;
        while let Some((_, leaf)) = leaves.next() {
            if let Some(e) = leaf.damage(&self.config) {
                return Err(e);
            }
            let from_slot = self.lower_position(leaf, lower)?;
            lower = Bound::Unbounded;
            let ordered = &leaf.ordered()[from_slot..];
            // The leaves after the first were asked for while the one before was copied.
            if !prefetched {
                self.prefetch(leaf, ordered);
            }
            for &slot in ordered {
                let mark = bytes.len();
                let (at, key_len, value_len) =
                    slots.append_pair(self.config.slot_at(leaf.offset, slot as usize), bytes)?;
                if past(&bytes[at..at + key_len], end) {
                    bytes.truncate(mark);
                    return Ok(true);
                }
                pairs.push((at, key_len, value_len));
            }
            let Some((bound, next)) = leaves.clone().next() else {
                return Ok(true);
            };
            // The next leaf's lines are on their way while these pairs are copied or lent.
            self.prefetch(next, next.ordered());
            prefetched = true;
            if pairs.len() >= BATCH_PAIRS {
                next_bound.clear();
                next_bound.extend_from_slice(bound.as_slice());
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Ask for the lines of `slots` of `leaf` at once: they are read in key order, not in
    /// place order, and this way their misses overlap instead of following one another.
    fn prefetch(&self, leaf: &Leaf, slots: &[u8]) {
        for &slot in slots {
            let at = self.config.slot_at(leaf.offset, slot as usize);
            self.heap.pool().prefetch(at, self.config.slot_bytes);
        }
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
