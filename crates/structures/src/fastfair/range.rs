//! Range scans: leaf by leaf along the sibling links, each leaf's entries read in place into
//! the scan's one buffer and kept only if its stripe version shows no writer changed the leaf
//! meanwhile, with a fresh descent whenever a merge or root change intervened.

use std::ops::{Bound, Deref, RangeBounds};

use pmem_ordering::{Backend, Pool, PoolError};
use pmem_undo_log::Heap;

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
        let end = match range.end_bound() {
            Bound::Included(&k) => Bound::Included(k),
            Bound::Excluded(&k) => Bound::Excluded(k),
            Bound::Unbounded => Bound::Unbounded,
        };
        Range {
            tree: self,
            resume: start.filter(|&k| k != EMPTY_KEY),
            end,
            hop: None,
            // One allocation per scan: every leaf's entries fit, so no leaf grows it.
            buf: Vec::with_capacity(self.capacity),
            pos: 0,
            failed: false,
        }
    }

    /// Read leaf `node` consistently into `out` (cleared first): its entries with keys from
    /// `from` on that `end` admits, a transient duplicate's right copy kept. Returns (high key,
    /// sibling), or `None` (and `out` to be discarded) if a writer changed the leaf meanwhile
    /// or it is no longer a leaf.
    ///
    /// The entries are read in place, word by word with the same acquire loads a lookup
    /// makes, and kept only if the stripe version then shows no change: a torn read (keys
    /// out of order, a duplicate) can only reach `out`, never the caller.
    fn read_leaf_from(
        &self,
        node: u64,
        from: u64,
        end: Bound<u64>,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        out.clear();
        let stripe = Self::stripe_index(node);
        let seen = self.stripes.read_begin(stripe);
        // The largest key `end` admits, as one compare per entry; no key is EMPTY_KEY, so
        // capping it there also stops the read at the first free slot.
        let (last, admits_any) = match end {
            Bound::Included(e) => (e, true),
            Bound::Excluded(e) => (e.saturating_sub(1), e > 0),
            Bound::Unbounded => (EMPTY_KEY, true),
        };
        let last = last.min(EMPTY_KEY - 1);
        let header = (|| -> Result<(u64, u64, u64), PoolError> {
            let view = self.view(node)?;
            view.prefetch();
            let (level, high, sibling) = (view.level(), view.high(), view.sibling());
            let mut slot = if admits_any {
                view.lower_bound(from)
            } else {
                view.capacity()
            };
            while slot < view.capacity() {
                // SAFETY: `slot < capacity`, the loop's bound.
                let key = unsafe { view.key_unchecked(slot) };
                if key > last {
                    break;
                }
                // SAFETY: as above.
                let value = unsafe { view.value_unchecked(slot) };
                match out.last_mut() {
                    Some(last) if last.0 == key => last.1 = value,
                    _ => out.push((key, value)),
                }
                slot += 1;
            }
            Ok((level, high, sibling))
        })();
        if !self.stripes.read_valid(stripe, seen) {
            return Ok(None);
        }
        let (level, high, sibling) = header?;
        if level != 0 {
            return Ok(None);
        }
        Ok(Some((high, sibling)))
    }
}

/// Whether `end` admits `key`.
#[inline]
fn within(end: Bound<u64>, key: u64) -> bool {
    match end {
        Bound::Included(e) => key <= e,
        Bound::Excluded(e) => key < e,
        Bound::Unbounded => true,
    }
}

/// An iterator over the pairs of a key range, in key order (see [`FastFair::range`]).
pub struct Range<'t, B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    tree: &'t FastFair<B, P, H>,
    /// The smallest key not yet returned, `None` when done.
    resume: Option<u64>,
    end: Bound<u64>,
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
            if !within(self.end, from) {
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
            let read = tree.read_leaf_from(leaf, from, self.end, &mut self.buf)?;
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
