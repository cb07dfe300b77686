//! Range scans: leaf by leaf along the sibling links, with a fresh descent whenever a merge
//! or root change intervened. Two ways to hand out a leaf's pairs, both lock-free:
//!
//! * `next` hands them out in place ([`InPlace`]): it finds the leaf's run of slots in range
//!   once, then reads each pair straight from the node and keeps it only if the leaf's stripe
//!   version, loaded after the read, shows no writer changed the leaf since the run was
//!   found. Nothing is copied, and a pair costs two loads, a look at the next key (for a
//!   transient duplicate) and the version check.
//! * `next_into` copies each leaf's run into the caller's buffer and keeps the copy only if
//!   the stripe version then shows no change: one check per leaf. It stops at `max` pairs,
//!   inside a leaf, and resumes there (reading that leaf again); `next_leaves` copies whole
//!   leaves only, so each leaf of a scan taken in batches is read once.

use std::ops::{Bound, RangeBounds};

use pmem_ordering::{Backend, Words};

use super::layout::{self, NodeShape, NodeView};
use super::search::{by_shape, whole_pool};
use super::{FastFair, FastFairError, EMPTY_KEY};
use crate::sync::{StripeReader, StripeReaders};
use copy::append_entries;
#[cfg(test)]
use copy::keep_right_copies;

impl<B: Backend> FastFair<B> {
    /// Every pair, in key order: [`FastFair::range`] over all keys (see [`crate::raw::U64Map`]).
    pub fn iter(&self) -> Range<'_, B> {
        self.range(..)
    }

    /// The pairs with keys in `range`, in key order, read without a lock: leaf by leaf along
    /// the sibling links. Each leaf is read consistently; a scan running beside writers sees
    /// every key that was present for its whole duration.
    pub fn range<R: RangeBounds<u64>>(&self, range: R) -> Range<'_, B> {
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
            leaf: None,
            at: 0,
            end: 0,
            error: None,
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
    fn read_leaf_in(
        &self,
        shape: NodeShape,
        pool_words: Words<'_>,
        stripes: StripeReaders<'_>,
        node: u64,
        (from, last): (u64, u64),
        limit: usize,
        out: &mut Vec<(u64, u64)>,
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
        #[cfg(test)]
        super::test_interleaving::at(super::test_interleaving::Point::ScanRead(node));
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

/// An iterator over the pairs of a key range, in key order (see [`FastFair::range`]).
pub struct Range<'t, B: Backend> {
    walk: Walk<'t, B>,
    /// The leaf whose run of pairs `next` is handing out in place, if one is (the walk then
    /// stands past it: at its high key and sibling).
    leaf: Option<InPlace<'t>>,
    /// Key words of the leaf's next slot to hand out and of the slot one past its run.
    /// Invariant: `at < end` only while `leaf` holds a leaf (both are 0 when it holds none),
    /// and then `HEADER_WORDS <= at < end <= view.words()` with `end - at` even (key words
    /// of slots): `next`'s inlined path tests `at < end` alone.
    at: usize,
    end: usize,
    /// The error `next` met, until it returns it.
    error: Option<FastFairError>,
    failed: bool,
}

/// A leaf's run of slots in range, handed out in place: each pair read from the node and
/// kept only if the leaf's stripe version, loaded after the read, still shows the version
/// under which the run was found (with the structure version, so the leaf was live then).
///
/// The stripe alone then suffices for the rest of the run: a leaf changes only under its
/// stripe's lock with the stripe marked (shifts, splits), and a merge, the only change that
/// frees a node, marks the stripe of every node it reads, the freed ones among them
/// (`merge.rs`, `remove_and_merge`); a version never returns to a value it left, so a node
/// freed (and perhaps reused) after the run was found fails every later check. Only an
/// upsert of a present key stores without marking: one value word, read whole either way.
///
/// Where in the run it stands is the [`Range`]'s `at` and `end`, passed to its methods.
/// Invariant: `last_key_word == view.words() - 2` (the node's last slot).
struct InPlace<'t> {
    view: NodeView<'t>,
    /// Key word of the node's last slot: `next`'s inlined path reads the key after each
    /// pair's (to see a transient duplicate) at most from there.
    last_key_word: usize,
    stripe: StripeReader<'t>,
    seen: u64,
    /// The smallest key not yet handed out, as of the last validated read: where the walk
    /// resumes if the leaf changes.
    resume: u64,
    /// The leaf and the structure version it was found under.
    node: u64,
    structure: u64,
}

/// What [`InPlace::serve`] gave.
enum Served {
    Pair((u64, u64)),
    /// The run is handed out.
    Done,
    /// A writer changed the leaf: resume at [`InPlace::resume`].
    Changed,
}

impl InPlace<'_> {
    /// The next pair of the run if it is neither a left copy nor changed, nor the last slot of
    /// a full node: the common case, inlined into `next`. The key after the pair's is read
    /// from the next slot, inside the node: past the run it is above the range (or free),
    /// never equal; for a full node's last slot the pair's own key is read again, which
    /// sends it to [`Self::serve`].
    /// `at < end` are the range's (see [`Range`]'s invariant).
    #[inline(always)]
    fn next_fast(&mut self, at: &mut usize) -> Option<(u64, u64)> {
        // The fields in locals: after the acquire loads below, the compiler would load them
        // again from `self`.
        let (view, stripe, seen, next) = (self.view, self.stripe, self.seen, *at);
        let peek = (next + 2).min(self.last_key_word);
        // SAFETY: `at < end <= view.words()` with `end - at` even (the caller's), so
        // `at + 1 < end`; `peek` is at most `last_key_word < view.words()` (the invariant).
        let (key, value, after) = unsafe {
            (
                view.word_unchecked(next),
                view.word_unchecked(next + 1),
                view.word_unchecked(peek),
            )
        };
        #[cfg(test)]
        super::test_interleaving::at(super::test_interleaving::Point::ScanRead(self.node));
        if key == after || !stripe.read_valid(seen) {
            return None;
        }
        *at = next + 2;
        self.resume = after;
        Some((key, value))
    }

    /// The next pair of the run, a left copy skipped: any slot, every case. `at` and `end`
    /// are the range's (see [`Range`]'s invariant).
    #[inline]
    fn serve(&mut self, at_now: &mut usize, end: usize) -> Served {
        while *at_now < end {
            let at = *at_now;
            // SAFETY: `at < end <= view.words()` and `end - at` is even, so `at + 1 < end`
            // (the range's invariant); `at + 2` is read only if below `end`.
            let (key, value) = unsafe {
                (
                    self.view.word_unchecked(at),
                    self.view.word_unchecked(at + 1),
                )
            };
            // SAFETY: as above.
            let after = (at + 2 < end).then(|| unsafe { self.view.word_unchecked(at + 2) });
            #[cfg(test)]
            super::test_interleaving::at(super::test_interleaving::Point::ScanRead(self.node));
            if !self.stripe.read_valid(self.seen) {
                return Served::Changed;
            }
            *at_now = at + 2;
            if after == Some(key) {
                // The left copy of a transient duplicate: the right one follows.
                continue;
            }
            // Past the run's last key (at most the range's last, below `EMPTY_KEY`), if no
            // key follows in the run.
            self.resume = after.unwrap_or(key + 1);
            return Served::Pair((key, value));
        }
        Served::Done
    }
}

/// Where a scan stands in the tree: what the next leaf read needs.
struct Walk<'t, B: Backend> {
    tree: &'t FastFair<B>,
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

impl<'t, B: Backend> Walk<'t, B> {
    /// The next leaf's run of slots in range from `resume` on, to hand out in place, its
    /// bounds read and validated; the walk then stands past the leaf (at its high key and
    /// sibling), and the key words of its first slot and one past its last. `None` when the
    /// range is done.
    fn find_run(&mut self) -> Result<Option<(InPlace<'t>, usize, usize)>, FastFairError> {
        by_shape!(self.tree, shape => self.find_run_in(shape))
    }

    /// [`Self::find_run`] for nodes of `shape`: always inlined into its arms of [`by_shape`],
    /// where `shape` is a constant.
    #[inline(always)]
    fn find_run_in(
        &mut self,
        shape: NodeShape,
    ) -> Result<Option<(InPlace<'t>, usize, usize)>, FastFairError> {
        let tree = self.tree;
        let pool_words = match self.pool_words {
            Some(words) => words,
            None => whole_pool(tree.pool())?,
        };
        let mut steps_left = tree.step_limit().saturating_mul(4);
        while let Some(from) = self.resume {
            if from > self.last {
                self.resume = None;
                break;
            }
            if steps_left == 0 {
                return Err(tree.corrupt(format!("a scan from {from} does not end")));
            }
            steps_left -= 1;
            // As in `fill_in`: the sibling link, else a descent; the structure version is
            // checked once, after the leaf's read.
            let (node, structure) = match self.hop.take() {
                Some((next, seen)) if next != 0 => (next, seen),
                _ => tree.lock_free_leaf(from)?,
            };
            let stripe = self.stripes.reader(FastFair::<B>::stripe_index(node));
            let seen = stripe.read_begin();
            let Some(view) = NodeView::within(pool_words, node, shape) else {
                if stripe.read_valid(seen) && tree.structure_version.read_valid(structure) {
                    if let Some(e) = tree.missing_leaf(node, shape) {
                        return Err(e);
                    }
                }
                continue;
            };
            view.prefetch();
            let (level, high, sibling) = (view.level(), view.high(), view.sibling());
            // A checked load: the shape is a constant, so the check folds away.
            let first = if view.key(0) >= from {
                0
            } else {
                view.lower_bound(from)
            };
            let end = view.upper_bound(self.last);
            #[cfg(test)]
            super::test_interleaving::at(super::test_interleaving::Point::ScanRead(node));
            if level != 0
                || !stripe.read_valid(seen)
                || !tree.structure_version.read_valid(structure)
            {
                // Changed under us, or freed by a merge: from a fresh descent.
                continue;
            }
            self.hop = Some((sibling, structure));
            if from >= high {
                // The leaf split after we found it: its upper keys are to the right.
                continue;
            }
            self.resume = (high != EMPTY_KEY).then_some(high);
            if first < end {
                let leaf = InPlace {
                    view,
                    last_key_word: view.words() - 2,
                    stripe,
                    seen,
                    resume: from,
                    node,
                    structure,
                };
                return Ok(Some((leaf, layout::key_word(first), layout::key_word(end))));
            }
        }
        Ok(None)
    }

    /// Read leaves with keys in range from `resume` on, appending their pairs in range to
    /// `out`, until it holds at least `wanted` pairs or the range is done. With `cut`, a
    /// leaf's copy stops one pair past `wanted` (see [`FastFair::read_leaf_in`]: that pair says
    /// where to resume, and shows a transient duplicate cut at the boundary). Returns the
    /// leaf that brought `out` to `wanted` pairs and the structure version it was read under,
    /// or `None` if the range ended first.
    fn fill(
        &mut self,
        out: &mut Vec<(u64, u64)>,
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

impl<B: Backend> Range<'_, B> {
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
        if self.failed || max == 0 {
            return Ok(0);
        }
        self.leave_in_place();
        let wanted = start + max;
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
        Ok(out.len() - start)
    }

    /// Append the pairs of whole leaves to `out` until at least `min` pairs were appended
    /// (`min` 0 is taken as 1) or the range is done; returns how many (fewer than `min` only
    /// at the end of the range, 0 only there). The pairs are those [`Iterator::next`] would
    /// return, as with [`Self::next_into`], but no leaf is cut: past `min` the rest of the
    /// last leaf's pairs in range come too, so the next call starts at the next leaf (along
    /// its sibling link) instead of reading this one again to find where it stopped. `out`
    /// grows by less than `min` plus [`FastFair::capacity`] pairs (one leaf's entries): a
    /// caller reserving that much never reallocates. After an error the pairs read before it
    /// stay in `out`, and the range returns nothing more.
    pub fn next_leaves(
        &mut self,
        out: &mut Vec<(u64, u64)>,
        min: usize,
    ) -> Result<usize, FastFairError> {
        let start = out.len();
        if self.failed {
            return Ok(0);
        }
        self.leave_in_place();
        // Uncut, each leaf's copy is its whole run in range, a transient duplicate's left copy
        // already dropped (`append_entries`), and the walk stands past the leaf.
        if let Err(e) = self.walk.fill(out, start.saturating_add(min.max(1)), false) {
            self.failed = true;
            return Err(e);
        }
        Ok(out.len() - start)
    }

    /// Give back to the walk a leaf `next` is handing out in place, for a bulk read: it is
    /// read again from the first key not handed out (and followed right if it split
    /// meanwhile). A run handed out to its end leaves the walk past the leaf already.
    #[inline(always)]
    fn leave_in_place(&mut self) {
        if let Some(leaf) = self.leaf.take() {
            if self.at < self.end {
                self.walk.resume = Some(leaf.resume);
                self.walk.hop = Some((leaf.node, leaf.structure));
            }
        }
        (self.at, self.end) = (0, 0);
    }

    /// `next` past its inlined case: a run's last pair, a left copy, a changed leaf, or the
    /// next leaf's run to find. An error is left in `error` (the pair alone comes back, so
    /// the inlined case and this one meet in two registers, not a whole `Result`).
    #[inline(never)]
    fn next_slow(&mut self) -> Option<(u64, u64)> {
        loop {
            if self.failed {
                return None;
            }
            if let Some(leaf) = self.leaf.as_mut().filter(|_| self.at < self.end) {
                match leaf.serve(&mut self.at, self.end) {
                    Served::Pair(pair) => return Some(pair),
                    // The walk already stands past the leaf.
                    Served::Done => {}
                    Served::Changed => {
                        // Read the leaf again from the first key not handed out (followed
                        // right if it split; from a fresh descent if a merge ran).
                        self.walk.resume = Some(leaf.resume);
                        self.walk.hop = Some((leaf.node, leaf.structure));
                    }
                }
            }
            (self.leaf, self.at, self.end) = (None, 0, 0);
            match self.walk.find_run() {
                Ok(Some((leaf, at, end))) => (self.leaf, self.at, self.end) = (Some(leaf), at, end),
                Ok(None) => return None,
                Err(e) => {
                    self.failed = true;
                    self.error = Some(e);
                    return None;
                }
            }
        }
    }
}

impl<B: Backend> Iterator for Range<'_, B> {
    type Item = Result<(u64, u64), FastFairError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        // The common case first: a pair of the leaf in hand, read and validated in place.
        if let Some(pair) = self.next_in_leaf() {
            return Some(Ok(pair));
        }
        match self.next_slow() {
            Some(pair) => Some(Ok(pair)),
            None => self.error.take().map(Err),
        }
    }
}

#[path = "range_copy.rs"]
mod copy;
#[path = "range_wrapping.rs"]
mod wrapping;

#[cfg(test)]
#[path = "range_tests.rs"]
mod tests;
