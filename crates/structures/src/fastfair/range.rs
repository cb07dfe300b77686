//! Range scans: leaf by leaf along the sibling links, each leaf's entries read in place into
//! the scan's one buffer and kept only if its stripe version shows no writer changed the leaf
//! meanwhile, with a fresh descent whenever a merge or root change intervened.

use std::ops::{Bound, Deref, RangeBounds};

use pmem_ordering::{Backend, Pool, Words};
use pmem_undo_log::Heap;

use super::layout::{NodeShape, NodeView};
use super::search::{by_shape, whole_pool};
use super::{FastFair, FastFairError, EMPTY_KEY};
use crate::sync::StripeReaders;

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
            // Cannot fail (offset 0, the pool's size); `refill` names the error if it did.
            pool_words: whole_pool(self.pool()).ok(),
            stripes: self.stripes.readers(),
            resume: start.filter(|&k| last.is_some_and(|last| k <= last)),
            last: last.unwrap_or(0),
            hop: None,
            // Allocated by the first `next` that reads a leaf.
            buf: Vec::new(),
            pos: 0,
            failed: false,
        }
    }

    /// Read leaf `node` consistently, appending to `out` its entries with keys from `from`
    /// through `last` (below [`EMPTY_KEY`]), a transient duplicate's right copy kept, but of
    /// more than `limit` such entries only the first `limit` (at least 1). Returns (high key,
    /// sibling), or `None` (and `out` as it was) if a writer changed the leaf meanwhile or it
    /// is no longer a leaf. `pool_words` is the whole pool ([`whole_pool`]), `stripes` the
    /// tree's. For nodes of `shape`: always inlined into the arms of [`by_shape`], where
    /// `shape` is a constant.
    ///
    /// The entries are read in place, word by word with the same acquire loads a lookup
    /// makes, and kept only if the stripe version then shows no change: a torn read (keys
    /// out of order, a duplicate) is taken back from `out` before the caller sees it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn read_leaf_in(
        &self,
        shape: NodeShape,
        pool_words: Words<'_>,
        stripes: StripeReaders<'_>,
        node: u64,
        (from, last): (u64, u64),
        limit: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        let stripe = stripes.reader(Self::stripe_index(node));
        let seen = stripe.read_begin();
        let Some(view) = NodeView::within(pool_words, node, shape) else {
            // No node there: the pool's error, unless a writer changed the leaf that linked
            // here meanwhile (the caller reads again).
            return match NodeView::new(self.pool(), node, shape) {
                Err(e) if stripe.read_valid(seen) => Err(e.into()),
                _ => Ok(None),
            };
        };
        view.prefetch();
        let (level, high, sibling) = (view.level(), view.high(), view.sibling());
        let before = out.len();
        append_entries(&view, from, last, limit, out);
        if level == 0 && stripe.read_valid(seen) {
            return Ok(Some((high, sibling)));
        }
        out.truncate(before);
        Ok(None)
    }
}

/// Append to `out` the entries of the node `view` shows with keys from `from` through `last`
/// (below [`EMPTY_KEY`], so the copy also stops at the first free slot), a transient
/// duplicate's right copy kept; of more than `limit` (at least 1) such slots, only the first
/// `limit` are copied.
///
/// Two searches bound the slots to copy (the first skipped when the node's first key is
/// already at or above `from`, as in every leaf of a scan after its first), so the copy is a
/// loop of known length: two loads and two stores per entry, and a compare noting whether two
/// neighbours share a key. Only then (rarely: an interrupted shift not yet repaired by an
/// open, or a torn read the caller will discard) are the left copies dropped; if the copy was
/// cut short by `limit`, the whole run is copied again first, so a duplicate cut at the
/// boundary cannot leave its left copy (the caller asks for one pair more than it hands out
/// to see such a cut).
#[inline(always)]
fn append_entries(
    view: &NodeView<'_>,
    from: u64,
    last: u64,
    limit: usize,
    out: &mut Vec<(u64, u64)>,
) {
    // A checked load: where the shape is a constant, so is the view's length, and the check
    // folds away.
    let first = if view.key(0) >= from {
        0
    } else {
        view.lower_bound(from)
    };
    // Both at most the capacity (bounds of searches); a torn read may make `end` smaller
    // than `first` (its copy is discarded anyway).
    let end = view.upper_bound(last);
    let all = end.saturating_sub(first);
    let count = all.min(limit);
    let start = out.len();
    if copy_slots(view, first, count, out) {
        if count < all {
            // A duplicate in a copy cut short: its right copy may lie past the cut.
            out.truncate(start);
            copy_slots(view, first, all, out);
        }
        keep_right_copies(out, start);
    }
}

/// Append slots `first..first + count` of the node `view` shows to `out`; returns whether two
/// neighbours among them share a key.
#[inline(always)]
fn copy_slots(view: &NodeView<'_>, first: usize, count: usize, out: &mut Vec<(u64, u64)>) -> bool {
    debug_assert!(first + count <= view.capacity());
    out.reserve(count);
    let start = out.len();
    let mut duplicate = false;
    let mut previous = EMPTY_KEY;
    // An indexed loop (not a zipped iterator): one counter, its bound the slice's length.
    let spare = &mut out.spare_capacity_mut()[..count];
    let mut i = 0;
    while i < spare.len() {
        // SAFETY: `first + i < first + count`, at most the capacity (the callers copy slots
        // between two search bounds, each at most the capacity).
        let key = unsafe { view.key_unchecked(first + i) };
        // SAFETY: as above.
        let value = unsafe { view.value_unchecked(first + i) };
        spare[i].write((key, value));
        duplicate |= key == previous;
        previous = key;
        i += 1;
    }
    // SAFETY: the loop above wrote each of the `count` elements past the length, within the
    // capacity reserved above.
    unsafe { out.set_len(start + count) };
    duplicate
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
    /// The whole pool's words ([`whole_pool`]), checked once per scan.
    pool_words: Option<Words<'t>>,
    /// The tree's stripes, taken once per scan.
    stripes: StripeReaders<'t>,
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
    /// Read leaves with keys in range from `resume` on, appending their pairs in range to
    /// `out`, until it holds at least `wanted` pairs or the range is done. With `cut`, a
    /// leaf's copy stops one pair past `wanted` (see [`FastFair::read_leaf_in`]: that pair says
    /// where to resume, and shows a transient duplicate cut at the boundary). Returns the
    /// last leaf that added pairs and the structure version it was read under, or `None` if
    /// none did.
    fn fill(
        &mut self,
        out: &mut Vec<(u64, u64)>,
        wanted: usize,
        cut: bool,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        by_shape!(self.tree, shape => self.fill_in(shape, out, wanted, cut))
    }

    /// [`Self::fill`] for nodes of `shape`: always inlined into its arms of [`by_shape`],
    /// where `shape` is a constant, so a walk over many leaves dispatches once and keeps the
    /// pool's words and the stripes in registers.
    #[inline(always)]
    fn fill_in(
        &mut self,
        shape: NodeShape,
        out: &mut Vec<(u64, u64)>,
        wanted: usize,
        cut: bool,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        let tree = self.tree;
        let pool_words = match self.pool_words {
            Some(words) => words,
            None => whole_pool(tree.pool())?,
        };
        let (stripes, last) = (self.stripes, self.last);
        let step_limit = tree.step_limit().saturating_mul(4);
        let mut found = None;
        let mut steps = 0;
        while let Some(from) = self.resume {
            if from > last {
                self.resume = None;
                break;
            }
            steps += 1;
            if steps > step_limit {
                return Err(tree.corrupt(format!("a scan from {from} does not end")));
            }
            // Follow the sibling link, else descend. Whether a merge ran since the link was
            // read is checked once, after the leaf's read: a freed node is still pool memory,
            // and what was read there is then dropped.
            let (leaf, structure) = match self.hop.take() {
                Some((next, seen)) if next != 0 => (next, seen),
                _ => tree.lock_free_leaf(from)?,
            };
            let before = out.len();
            let limit = if cut {
                wanted.saturating_sub(before).saturating_add(1)
            } else {
                usize::MAX
            };
            let read =
                tree.read_leaf_in(shape, pool_words, stripes, leaf, (from, last), limit, out);
            // A merge since the leaf was found may have freed it: what was read there, an
            // error included, is not the tree's.
            if !tree.structure_version.read_valid(structure) {
                out.truncate(before);
                continue;
            }
            let Some((high, sibling)) = read? else {
                // Changed under us: read it again from a fresh descent.
                continue;
            };
            if from >= high {
                // The leaf split after we found it: its upper keys are to the right.
                out.truncate(before);
                self.hop = Some((sibling, structure));
                continue;
            }
            self.resume = (high != EMPTY_KEY).then_some(high);
            self.hop = Some((sibling, structure));
            if out.len() > before {
                found = Some((leaf, structure));
                if out.len() >= wanted {
                    break;
                }
            }
        }
        Ok(found)
    }

    /// Append the next pairs, up to `max` of them, to `out`; returns how many (fewer only at
    /// the end of the range). The pairs are those [`Iterator::next`] would return, copied
    /// from each leaf straight into `out` instead of handed out one call each: for callers
    /// that take a scan's pairs in bulk. After an error the range returns nothing more.
    pub fn next_into(
        &mut self,
        out: &mut Vec<(u64, u64)>,
        max: usize,
    ) -> Result<usize, FastFairError> {
        let start = out.len();
        // First the pairs of a leaf `next` has read and not handed out.
        let ready = self.buf.get(self.pos..).unwrap_or_default();
        let take = ready.len().min(max);
        out.extend_from_slice(&ready[..take]);
        self.pos += take;
        let wanted = start + max;
        // `buf` is used up if more are wanted (else `max` pairs were taken from it).
        if out.len() < wanted && !self.failed {
            match self.fill(out, wanted, true) {
                Ok(Some((leaf, structure))) => {
                    if let Some(&(next_key, _)) = out.get(wanted) {
                        // More than asked for: hand out `max`, and resume in this leaf at the
                        // first pair left (read again, and followed right if it split).
                        self.resume = Some(next_key);
                        self.hop = Some((leaf, structure));
                        out.truncate(wanted);
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    self.failed = true;
                    return Err(e);
                }
            }
        }
        Ok(out.len() - start)
    }

    /// `next` when the current leaf's pairs are used up: read the next leaf into `buf`.
    #[inline(never)]
    fn next_leaf(&mut self) -> Option<Result<(u64, u64), FastFairError>> {
        if self.failed {
            return None;
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        // Sized for a full leaf once per scan (bulk scans never allocate it).
        buf.reserve(self.tree.capacity);
        self.pos = 0;
        let read = self.fill(&mut buf, 1, false);
        self.buf = buf;
        if let Err(e) = read {
            self.failed = true;
            self.buf.clear();
            return Some(Err(e));
        }
        let pair = self.buf.get(self.pos).copied()?;
        self.pos += 1;
        Some(Ok(pair))
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::test_heap::heap;
    use super::super::{FastFairConfig, ShiftPolicy};
    use super::*;

    /// A bulk read whose cut falls anywhere around a transient duplicate (an interrupted
    /// shift's two equal neighbours) hands out the right copy, never the left one, and
    /// resumes after it: the copy of a leaf stops one pair past the cut, which shows the
    /// duplicate, and then the whole run is copied.
    #[test]
    fn a_bulk_read_cut_at_a_duplicate_keeps_its_right_copy() {
        use super::super::layout::{entry_offset, value_offset};

        // The left copy pairs key 20 with a stale value.
        let image = [(10, 10), (20, 1500), (20, 20), (30, 30), (40, 40)];
        let expected = [(10, 10), (20, 20), (30, 30), (40, 40)];
        for first_chunk in 0..=expected.len() {
            let heap = heap();
            let tree =
                FastFair::create(&heap, heap.pool().root_offset(), FastFairConfig::default())
                    .unwrap();
            for k in [10, 20, 30, 40] {
                tree.insert(k, k).unwrap();
            }
            let leaf = tree.root_node().unwrap();
            let pool = heap.pool();
            for (slot, (k, v)) in image.into_iter().enumerate() {
                let _ = pool.persist(pool.store_u64(entry_offset(leaf, slot), k).unwrap());
                let _ = pool.persist(pool.store_u64(value_offset(leaf, slot), v).unwrap());
            }
            let mut range = tree.range(..);
            let mut got = Vec::new();
            assert_eq!(range.next_into(&mut got, first_chunk).unwrap(), first_chunk);
            assert_eq!(got, expected[..first_chunk], "cut after {first_chunk}");
            let rest = range.next_into(&mut got, 10).unwrap();
            assert_eq!(rest, expected.len() - first_chunk);
            assert_eq!(got, expected, "cut after {first_chunk}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// A range read in bulk chunks of any size (0 standing for one `next`), which stop in
        /// the middle of leaves and resume there, returns exactly the model's pairs of the
        /// range, then nothing more.
        #[test]
        fn bulk_and_single_reads_return_the_range(
            keys in proptest::collection::vec(0u64..300, 0..150),
            start in 0u64..320,
            end in 0u64..320,
            chunks in proptest::collection::vec(0usize..40, 1..12),
        ) {
            let heap = heap();
            let config = FastFairConfig { node_size: 128, policy: ShiftPolicy::Fast };
            let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
            let mut model = BTreeMap::new();
            for k in keys {
                tree.upsert(k, k * 3).unwrap();
                model.insert(k, k * 3);
            }
            let expected: Vec<(u64, u64)> =
                model.range(start..end.max(start)).map(|(&k, &v)| (k, v)).collect();
            let mut range = tree.range(start..end.max(start));
            let mut got = Vec::new();
            for &n in chunks.iter().cycle() {
                if n == 0 {
                    match range.next() {
                        Some(pair) => got.push(pair.unwrap()),
                        None => break,
                    }
                } else {
                    let before = got.len();
                    let added = range.next_into(&mut got, n).unwrap();
                    proptest::prop_assert_eq!(got.len() - before, added);
                    if added < n {
                        break;
                    }
                }
            }
            proptest::prop_assert!(range.next().is_none());
            proptest::prop_assert_eq!(range.next_into(&mut got, 5).unwrap(), 0);
            proptest::prop_assert_eq!(got, expected);
        }

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
