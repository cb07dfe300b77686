//! Range scans: leaf by leaf along the sibling links, each leaf's entries read in place into
//! the scan's buffer and kept only if its stripe version shows no writer changed the leaf
//! meanwhile, with a fresh descent whenever a merge or root change intervened.
//!
//! `next` hands out pairs from a buffer inside the range itself ([`Chunk`]), which holds a
//! whole leaf of the default node size, so a scan allocates nothing and serving a pair is an
//! index compare and a load. A leaf of a larger node is read whole into a heap buffer (once
//! per scan) and moved to the chunk a piece at a time.

use std::mem::MaybeUninit;
use std::ops::{Bound, Deref, RangeBounds};

use pmem_ordering::{Backend, Pool, Words};
use pmem_undo_log::Heap;

use super::layout::{self, NodeShape, NodeView};
use super::search::{by_shape, whole_pool};
use super::{FastFair, FastFairError, DEFAULT_NODE_SIZE, EMPTY_KEY};
use crate::sync::StripeReaders;

/// Pairs a [`Range`] holds in place for `next`: at least a whole leaf of the default size.
const CHUNK: usize = 32;
const _: () = assert!(layout::capacity(DEFAULT_NODE_SIZE) <= CHUNK);

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
            walk: Walk {
                tree: self,
                // Cannot fail (offset 0, the pool's size); `fill` names the error if it did.
                pool_words: whole_pool(self.pool()).ok(),
                stripes: self.stripes.readers(),
                resume: start.filter(|&k| last.is_some_and(|last| k <= last)),
                last: last.unwrap_or(0),
                hop: None,
            },
            chunk: Chunk::new(),
            pos: 0,
            // Allocated only for nodes larger than the chunk holds, by the first `next`.
            spill: Vec::new(),
            spill_pos: 0,
            failed: false,
        }
    }

    /// Read leaf `node` consistently, appending to `out` its entries with keys from `from`
    /// through `last` (below [`EMPTY_KEY`]), a transient duplicate's right copy kept, but of
    /// more than `limit` such entries only the first `limit` (at least 1). `out` is as it was
    /// unless the read is [`LeafRead::Read`]. `pool_words` is the whole pool ([`whole_pool`]),
    /// `stripes` the tree's. For nodes of `shape`: always inlined into the arms of
    /// [`by_shape`], where `shape` is a constant.
    ///
    /// The entries are read in place, word by word with the same acquire loads a lookup
    /// makes, and kept only if the stripe version then shows no change: a torn read (keys
    /// out of order, a duplicate) is taken back from `out` before the caller sees it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn read_leaf_in<S: PairSink>(
        &self,
        shape: NodeShape,
        pool_words: Words<'_>,
        stripes: StripeReaders<'_>,
        node: u64,
        (from, last): (u64, u64),
        limit: usize,
        out: &mut S,
    ) -> LeafRead {
        let stripe = stripes.reader(Self::stripe_index(node));
        let seen = stripe.read_begin();
        let Some(view) = NodeView::within(pool_words, node, shape) else {
            // No node there: the pool's error, unless a writer changed the leaf that linked
            // here meanwhile (the caller reads again).
            return if stripe.read_valid(seen) {
                LeafRead::Missing
            } else {
                LeafRead::Changed
            };
        };
        view.prefetch();
        let (level, high, sibling) = (view.level(), view.high(), view.sibling());
        let before = out.len();
        append_entries(&view, from, last, limit, out);
        if level == 0 && stripe.read_valid(seen) {
            return LeafRead::Read { high, sibling };
        }
        out.truncate(before);
        LeafRead::Changed
    }

    /// The error for a link to `node`, where no whole node of the tree's size lies (see
    /// [`LeafRead::Missing`]), or `None` if the pool says there is one after all.
    #[cold]
    fn missing_leaf(&self, node: u64, shape: NodeShape) -> Option<FastFairError> {
        NodeView::new(self.pool(), node, shape)
            .err()
            .map(FastFairError::from)
    }
}

/// What one leaf's read gave.
enum LeafRead {
    /// Its pairs in range were appended; its high key and sibling link.
    Read { high: u64, sibling: u64 },
    /// A writer changed it meanwhile, or it is no longer a leaf: read it again.
    Changed,
    /// No whole node lies at its offset, and no writer changed the leaf that linked there.
    Missing,
}

/// Where a leaf's pairs are copied: a caller's `Vec` (bulk reads, a large node's whole leaf)
/// or a range's [`Chunk`].
trait PairSink {
    fn len(&self) -> usize;

    /// Drop the pairs from `len` on.
    fn truncate(&mut self, len: usize);

    /// The free slots after the pairs, at least `count` of them where the sink can hold that
    /// many (a chunk is filled only from empty, with leaves of at most [`CHUNK`] entries).
    fn spare(&mut self, count: usize) -> &mut [MaybeUninit<(u64, u64)>];

    /// Count the first `count` slots [`Self::spare`] returned as pairs.
    ///
    /// # Safety
    ///
    /// Those slots were written since.
    unsafe fn grow(&mut self, count: usize);

    /// The pairs.
    fn pairs_mut(&mut self) -> &mut [(u64, u64)];
}

impl PairSink for Vec<(u64, u64)> {
    #[inline(always)]
    fn len(&self) -> usize {
        Vec::len(self)
    }

    #[inline(always)]
    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len);
    }

    #[inline(always)]
    fn spare(&mut self, count: usize) -> &mut [MaybeUninit<(u64, u64)>] {
        self.reserve(count);
        self.spare_capacity_mut()
    }

    #[inline(always)]
    unsafe fn grow(&mut self, count: usize) {
        // SAFETY: the `count` slots after the length were written (the caller's promise),
        // within the capacity (`spare` returned them).
        unsafe { self.set_len(Vec::len(self) + count) };
    }

    #[inline(always)]
    fn pairs_mut(&mut self) -> &mut [(u64, u64)] {
        self
    }
}

/// A leaf's pairs held in place: the first `len` of `pairs` are written (`len <= CHUNK`).
struct Chunk {
    pairs: [MaybeUninit<(u64, u64)>; CHUNK],
    len: usize,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk {
            pairs: [const { MaybeUninit::uninit() }; CHUNK],
            len: 0,
        }
    }

    /// Pair `i`, if held.
    #[inline(always)]
    fn get(&self, i: usize) -> Option<(u64, u64)> {
        if i < self.len {
            // SAFETY: `i < len <= CHUNK`, and the first `len` pairs are written.
            Some(unsafe { self.pairs.get_unchecked(i).assume_init() })
        } else {
            None
        }
    }

    /// The pairs held.
    #[inline(always)]
    fn pairs(&self) -> &[(u64, u64)] {
        // SAFETY: the first `len <= CHUNK` slots are written, and a `MaybeUninit<T>` has the
        // layout of `T`.
        unsafe { std::slice::from_raw_parts(self.pairs.as_ptr().cast(), self.len) }
    }
}

impl PairSink for Chunk {
    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    #[inline(always)]
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    #[inline(always)]
    fn spare(&mut self, _count: usize) -> &mut [MaybeUninit<(u64, u64)>] {
        &mut self.pairs[self.len..]
    }

    #[inline(always)]
    unsafe fn grow(&mut self, count: usize) {
        // The caller wrote `count` of the `CHUNK - len` slots `spare` returned.
        debug_assert!(self.len + count <= CHUNK);
        self.len += count;
    }

    #[inline(always)]
    fn pairs_mut(&mut self) -> &mut [(u64, u64)] {
        // SAFETY: as in `pairs`, and the borrow is unique.
        unsafe { std::slice::from_raw_parts_mut(self.pairs.as_mut_ptr().cast(), self.len) }
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
fn append_entries<S: PairSink>(
    view: &NodeView<'_>,
    from: u64,
    last: u64,
    limit: usize,
    out: &mut S,
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
fn copy_slots<S: PairSink>(view: &NodeView<'_>, first: usize, count: usize, out: &mut S) -> bool {
    debug_assert!(first + count <= view.capacity());
    let mut duplicate = false;
    let mut previous = EMPTY_KEY;
    // An indexed loop (not a zipped iterator): one counter, its bound the slice's length.
    let spare = &mut out.spare(count)[..count];
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
    // SAFETY: the loop above wrote each of the first `count` spare slots.
    unsafe { out.grow(count) };
    duplicate
}

/// Of each run of equal neighbouring keys in `out`'s pairs from `start` on, keep the
/// rightmost pair only (the transient-duplicate rule).
#[cold]
fn keep_right_copies<S: PairSink>(out: &mut S, start: usize) {
    let pairs = out.pairs_mut();
    let mut kept = start;
    for i in start..pairs.len() {
        let pair = pairs[i];
        if kept > start && pairs[kept - 1].0 == pair.0 {
            pairs[kept - 1] = pair;
        } else {
            pairs[kept] = pair;
            kept += 1;
        }
    }
    out.truncate(kept);
}

/// An iterator over the pairs of a key range, in key order (see [`FastFair::range`]).
pub struct Range<'t, B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    walk: Walk<'t, B, P, H>,
    /// The pairs read and not yet handed out: the chunk's from `pos` on, then `spill`'s from
    /// `spill_pos` on.
    chunk: Chunk,
    pos: usize,
    /// A leaf of a node larger than the chunk holds, read whole (sized for a full leaf once
    /// per scan; empty for the default node size).
    spill: Vec<(u64, u64)>,
    spill_pos: usize,
    failed: bool,
}

/// Where a scan stands in the tree: what the next leaf read needs.
struct Walk<'t, B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    tree: &'t FastFair<B, P, H>,
    /// The whole pool's words ([`whole_pool`]), checked once per scan.
    pool_words: Option<Words<'t>>,
    /// The tree's stripes, taken once per scan.
    stripes: StripeReaders<'t>,
    /// The smallest key not yet read, `None` when done.
    resume: Option<u64>,
    /// The largest key the range admits (below [`EMPTY_KEY`]).
    last: u64,
    /// The next leaf along the sibling link and the structure version it was read under.
    hop: Option<(u64, u64)>,
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Walk<'_, B, P, H> {
    /// Read leaves with keys in range from `resume` on, appending their pairs in range to
    /// `out`, until it holds at least `wanted` pairs or the range is done. With `cut`, a
    /// leaf's copy stops one pair past `wanted` (see [`FastFair::read_leaf_in`]: that pair says
    /// where to resume, and shows a transient duplicate cut at the boundary). Returns the
    /// leaf that brought `out` to `wanted` pairs and the structure version it was read under,
    /// or `None` if the range ended first.
    fn fill<S: PairSink>(
        &mut self,
        out: &mut S,
        wanted: usize,
        cut: bool,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        by_shape!(self.tree, shape => self.fill_in(shape, out, wanted, cut))
    }

    /// [`Self::fill`] for nodes of `shape`: always inlined into its arms of [`by_shape`],
    /// where `shape` is a constant, so a walk over many leaves dispatches once. Few values
    /// stay live from leaf to leaf (where the walk stands is written back once, at the end),
    /// so they stay in registers.
    #[inline(always)]
    fn fill_in<S: PairSink>(
        &mut self,
        shape: NodeShape,
        out: &mut S,
        wanted: usize,
        cut: bool,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        let tree = self.tree;
        let pool_words = match self.pool_words {
            Some(words) => words,
            None => whole_pool(tree.pool())?,
        };
        let (stripes, last) = (self.stripes, self.last);
        // The length of `out` at which a leaf's copy stops: one pair past `wanted` with `cut`.
        let stop = if cut {
            wanted.saturating_add(1)
        } else {
            usize::MAX
        };
        let mut steps_left = tree.step_limit().saturating_mul(4);
        let (mut resume, mut hop) = (self.resume, self.hop.take());
        let mut filled = None;
        while let Some(from) = resume {
            if from > last {
                resume = None;
                break;
            }
            if steps_left == 0 {
                return Err(tree.corrupt(format!("a scan from {from} does not end")));
            }
            steps_left -= 1;
            // Follow the sibling link, else descend. Whether a merge ran since the link was
            // read is checked once, after the leaf's read: a freed node is still pool memory,
            // and what was read there is then dropped.
            let (leaf, structure) = match hop.take() {
                Some((next, seen)) if next != 0 => (next, seen),
                _ => tree.lock_free_leaf(from)?,
            };
            let before = out.len();
            // `before < wanted < stop` with `cut` (the walk goes on only while `out` holds
            // fewer than `wanted`), so the copy takes at least one pair more than wanted.
            let limit = stop - before;
            let read =
                tree.read_leaf_in(shape, pool_words, stripes, leaf, (from, last), limit, out);
            // A merge since the leaf was found may have freed it: what was read there, a
            // missing node included, is not the tree's.
            if !tree.structure_version.read_valid(structure) {
                out.truncate(before);
                continue;
            }
            let (high, sibling) = match read {
                LeafRead::Read { high, sibling } => (high, sibling),
                // Changed under us: read it again from a fresh descent.
                LeafRead::Changed => continue,
                LeafRead::Missing => match tree.missing_leaf(leaf, shape) {
                    Some(e) => return Err(e),
                    None => continue,
                },
            };
            hop = Some((sibling, structure));
            if from >= high {
                // The leaf split after we found it: its upper keys are to the right.
                out.truncate(before);
                continue;
            }
            resume = (high != EMPTY_KEY).then_some(high);
            if out.len() >= wanted {
                filled = Some((leaf, structure));
                break;
            }
        }
        (self.resume, self.hop) = (resume, hop);
        Ok(filled)
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Range<'_, B, P, H> {
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
        // First the pairs `next` has read and not handed out.
        let ready = self.chunk.pairs().get(self.pos..).unwrap_or_default();
        let take = ready.len().min(max);
        out.extend_from_slice(&ready[..take]);
        self.pos += take;
        let spilled = self.spill.get(self.spill_pos..).unwrap_or_default();
        let take = spilled.len().min(max - take);
        out.extend_from_slice(&spilled[..take]);
        self.spill_pos += take;
        let wanted = start + max;
        // Those are used up if more are wanted (else `max` pairs were taken from them).
        if out.len() < wanted && !self.failed {
            match self.walk.fill(out, wanted, true) {
                Ok(Some((leaf, structure))) => {
                    if let Some(&(next_key, _)) = out.get(wanted) {
                        // More than asked for: hand out `max`, and resume in this leaf at the
                        // first pair left (read again, and followed right if it split).
                        self.walk.resume = Some(next_key);
                        self.walk.hop = Some((leaf, structure));
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

    /// `next` when the chunk's pairs are used up: refill it from the spilled leaf, else
    /// read the next leaf (into the chunk itself where a whole leaf fits).
    #[inline(never)]
    fn next_leaf(&mut self) -> Option<Result<(u64, u64), FastFairError>> {
        if self.failed {
            return None;
        }
        self.chunk.len = 0;
        self.pos = 0;
        if self.spill_pos >= self.spill.len() {
            let capacity = self.walk.tree.capacity;
            let read = if capacity <= CHUNK {
                self.walk.fill(&mut self.chunk, 1, false)
            } else {
                self.spill.clear();
                self.spill_pos = 0;
                // Sized for a full leaf once per scan.
                self.spill.reserve(capacity);
                self.walk.fill(&mut self.spill, 1, false)
            };
            if let Err(e) = read {
                self.failed = true;
                self.chunk.len = 0;
                self.spill.clear();
                self.spill_pos = 0;
                return Some(Err(e));
            }
        }
        if let Some(rest) = self
            .spill
            .get(self.spill_pos..)
            .filter(|rest| !rest.is_empty())
        {
            let piece = &rest[..rest.len().min(CHUNK)];
            for (slot, &pair) in self.chunk.pairs.iter_mut().zip(piece) {
                slot.write(pair);
            }
            self.chunk.len = piece.len();
            self.spill_pos += piece.len();
        }
        let pair = self.chunk.get(0)?;
        self.pos = 1;
        Some(Ok(pair))
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Iterator
    for Range<'_, B, P, H>
{
    type Item = Result<(u64, u64), FastFairError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        // The common case first: a pair already read.
        if let Some(pair) = self.chunk.get(self.pos) {
            self.pos += 1;
            return Some(Ok(pair));
        }
        self.next_leaf()
    }
}

#[cfg(test)]
#[path = "range_tests.rs"]
mod tests;
