//! Range scans: leaf by leaf along the sibling links, each leaf's entries read in place into
//! the scan's one buffer and kept only if its stripe version shows no writer changed the leaf
//! meanwhile, with a fresh descent whenever a merge or root change intervened.

use std::ops::{Bound, Deref, RangeBounds};

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::layout::{NodeShape, NodeView};
use super::search::by_shape;
use super::{FastFair, FastFairError, EMPTY_KEY};

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> FastFair<B, P, H> {
    /// Every pair, in key order: [`FastFair::range`] over all keys (see [`crate::U64Map`]).
    pub fn iter(&self) -> Range<'_, B, P, H> {
        self.range(..)
    }

    /// The pairs with keys in `range`, in key order, read without a lock: leaf by leaf along
    /// the sibling links. Each leaf is read consistently; a scan running beside writers sees
    /// every key that was present for its whole duration.
    pub fn range<R: RangeBounds<u64>>(&self, range: R) -> Range<'_, B, P, H> {
        let start = match range.start_bound() {
            Bound::Included(&k) => Some(k),
            Bound::Excluded(&k) => k.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        // The largest key the range admits (no key is EMPTY_KEY, so it is capped below it),
        // or `None` if it admits none.
        let last = match range.end_bound() {
            Bound::Included(&e) => Some(e),
            Bound::Excluded(&e) => e.checked_sub(1),
            Bound::Unbounded => Some(EMPTY_KEY),
        }
        .map(|e| e.min(EMPTY_KEY - 1));
        Range {
            tree: self,
            resume: start.filter(|&k| last.is_some_and(|last| k <= last)),
            last: last.unwrap_or(0),
            hop: None,
            // One allocation per scan: every leaf's entries fit, so no leaf grows it.
            buf: Vec::with_capacity(self.capacity),
            pos: 0,
            failed: false,
        }
    }

    /// Read leaf `node` consistently, appending to `out` its entries with keys from `from`
    /// through `last` (below [`EMPTY_KEY`]), a transient duplicate's right copy kept. Returns
    /// (high key, sibling), or `None` (and `out` as it was) if a writer changed the leaf
    /// meanwhile or it is no longer a leaf.
    ///
    /// The entries are read in place, word by word with the same acquire loads a lookup
    /// makes, and kept only if the stripe version then shows no change: a torn read (keys
    /// out of order, a duplicate) is taken back from `out` before the caller sees it.
    fn read_leaf_from(
        &self,
        node: u64,
        from: u64,
        last: u64,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        by_shape!(self, shape => self.read_leaf_in(shape, node, from, last, out))
    }

    /// [`Self::read_leaf_from`] for nodes of `shape`: always inlined into its arms of
    /// [`by_shape`], where `shape` is a constant.
    #[inline(always)]
    fn read_leaf_in(
        &self,
        shape: NodeShape,
        node: u64,
        from: u64,
        last: u64,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        let before = out.len();
        let stripe = self.stripes.reader(Self::stripe_index(node));
        let seen = stripe.read_begin();
        let header = NodeView::new(self.pool(), node, shape).map(|view| {
            view.prefetch();
            let header = (view.level(), view.high(), view.sibling());
            append_entries(&view, from, last, out);
            header
        });
        let valid = stripe.read_valid(seen);
        match header {
            Ok((0, high, sibling)) if valid => Ok(Some((high, sibling))),
            Err(e) if valid => Err(e.into()),
            _ => {
                out.truncate(before);
                Ok(None)
            }
        }
    }
}

/// Append to `out` the entries of the node `view` shows with keys from `from` through `last`
/// (below [`EMPTY_KEY`], so the copy also stops at the first free slot), a transient
/// duplicate's right copy kept.
///
/// The copy is a load and a store per word: it writes the entries as they lie, noting
/// whether two neighbours share a key, and only then (rarely: an interrupted shift not yet
/// repaired by an open, or a torn read the caller will discard) drops the left copies.
#[inline(always)]
fn append_entries(view: &NodeView<'_>, from: u64, last: u64, out: &mut Vec<(u64, u64)>) {
    let capacity = view.capacity();
    // At most the capacity (an upper bound of the search).
    let first = view.lower_bound(from);
    let start = out.len();
    out.reserve(capacity);
    let mut copied = 0;
    let mut duplicate = false;
    let mut previous = EMPTY_KEY;
    for (i, spare) in out.spare_capacity_mut()[..capacity - first]
        .iter_mut()
        .enumerate()
    {
        // SAFETY: `first + i < capacity`: the slice has `capacity - first` elements.
        let key = unsafe { view.key_unchecked(first + i) };
        if key > last {
            break;
        }
        // SAFETY: as above.
        let value = unsafe { view.value_unchecked(first + i) };
        spare.write((key, value));
        duplicate |= key == previous;
        previous = key;
        copied = i + 1;
    }
    // SAFETY: the first `copied` elements past the length were written in the loop above
    // (each iteration up to index `copied - 1` wrote its own), and they are within the
    // capacity, reserved above.
    unsafe { out.set_len(start + copied) };
    if duplicate {
        keep_right_copies(out, start);
    }
}

/// Of each run of equal neighbouring keys in `out[start..]`, keep the rightmost pair only
/// (the transient-duplicate rule).
#[cold]
fn keep_right_copies(out: &mut Vec<(u64, u64)>, start: usize) {
    let mut kept = start;
    for i in start..out.len() {
        let pair = out[i];
        if kept > start && out[kept - 1].0 == pair.0 {
            out[kept - 1] = pair;
        } else {
            out[kept] = pair;
            kept += 1;
        }
    }
    out.truncate(kept);
}

/// An iterator over the pairs of a key range, in key order (see [`FastFair::range`]).
pub struct Range<'t, B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    tree: &'t FastFair<B, P, H>,
    /// The smallest key not yet returned, `None` when done.
    resume: Option<u64>,
    /// The largest key the range admits (below [`EMPTY_KEY`]).
    last: u64,
    /// The next leaf along the sibling link and the structure version it was read under.
    hop: Option<(u64, u64)>,
    /// The current leaf's pairs in range, reused from leaf to leaf (sized for a full leaf).
    buf: Vec<(u64, u64)>,
    /// The next pair of `buf` to return.
    pos: usize,
    failed: bool,
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Range<'_, B, P, H> {
    /// Read the next leaf with keys in range into `buf`.
    fn refill(&mut self) -> Result<(), FastFairError> {
        let tree = self.tree;
        let mut steps = 0;
        while let Some(from) = self.resume {
            if from > self.last {
                self.resume = None;
                break;
            }
            steps += 1;
            if steps > tree.step_limit() * 4 {
                return Err(tree.corrupt(format!("a scan from {from} does not end")));
            }
            // Follow the sibling link if no merge ran since it was read, else descend again.
            let (leaf, structure) = match self.hop.take() {
                Some((next, seen)) if next != 0 && tree.structure_version.read_valid(seen) => {
                    (next, seen)
                }
                _ => tree.lock_free_leaf(from)?,
            };
            self.pos = 0;
            self.buf.clear();
            let read = tree.read_leaf_from(leaf, from, self.last, &mut self.buf)?;
            if !tree.structure_version.read_valid(structure) {
                self.buf.clear();
                continue;
            }
            let Some((high, sibling)) = read else {
                // Changed under us: read it again from a fresh descent.
                self.buf.clear();
                continue;
            };
            if from >= high {
                // The leaf split after we found it: its upper keys are to the right.
                self.buf.clear();
                self.hop = Some((sibling, structure));
                continue;
            }
            self.resume = (high != EMPTY_KEY).then_some(high);
            self.hop = Some((sibling, structure));
            if !self.buf.is_empty() {
                break;
            }
        }
        Ok(())
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Iterator
    for Range<'_, B, P, H>
{
    type Item = Result<(u64, u64), FastFairError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        // The common case first: a pair of the leaf already read.
        if let Some(&pair) = self.buf.get(self.pos) {
            self.pos += 1;
            return Some(Ok(pair));
        }
        self.next_leaf()
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Range<'_, B, P, H> {
    /// Append the next pairs, up to `max` of them, to `out`; returns how many (fewer only at
    /// the end of the range). The pairs are those [`Iterator::next`] would return, copied a
    /// leaf at a time instead of handed out one call each: for callers that take a scan's
    /// pairs in bulk. After an error the range returns nothing more.
    pub fn next_into(
        &mut self,
        out: &mut Vec<(u64, u64)>,
        max: usize,
    ) -> Result<usize, FastFairError> {
        let mut added = 0;
        while !self.failed {
            let ready = self.buf.get(self.pos..).unwrap_or_default();
            let take = ready.len().min(max - added);
            out.extend_from_slice(&ready[..take]);
            self.pos += take;
            added += take;
            if added == max {
                break;
            }
            if let Err(e) = self.refill() {
                self.failed = true;
                self.buf.clear();
                return Err(e);
            }
            if self.pos == self.buf.len() {
                // The range is done (a refill found nothing more).
                break;
            }
        }
        Ok(added)
    }

    /// `next` when the current leaf's pairs are used up: read the next leaf.
    #[inline(never)]
    fn next_leaf(&mut self) -> Option<Result<(u64, u64), FastFairError>> {
        if self.failed {
            return None;
        }
        if let Err(e) = self.refill() {
            self.failed = true;
            self.buf.clear();
            return Some(Err(e));
        }
        let pair = self.buf.get(self.pos).copied()?;
        self.pos += 1;
        Some(Ok(pair))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Dropping left copies keeps, of each run of equal neighbouring keys after `start`,
        /// the rightmost pair, and leaves the pairs before `start` alone.
        #[test]
        fn keep_right_copies_keeps_the_rightmost_of_each_run(
            mut keys in proptest::collection::vec(0u64..12, 0..40),
            start in 0usize..5,
        ) {
            keys.sort_unstable();
            let pairs: Vec<(u64, u64)> =
                keys.iter().enumerate().map(|(i, &k)| (k, i as u64)).collect();
            let start = start.min(pairs.len());
            let mut expected = pairs[..start].to_vec();
            for (i, &pair) in pairs.iter().enumerate().skip(start) {
                if pairs.get(i + 1).is_none_or(|next| next.0 != pair.0) {
                    expected.push(pair);
                }
            }
            let mut out = pairs.clone();
            keep_right_copies(&mut out, start);
            proptest::prop_assert_eq!(out, expected);
        }
    }
}
