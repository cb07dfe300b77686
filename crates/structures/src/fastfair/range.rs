//! Range scans: leaf by leaf along the sibling links, each leaf copied and validated against
//! its stripe version, with a fresh descent whenever a merge or root change intervened.

use std::ops::{Bound, Deref, RangeBounds};

use pmem_ordering::{Backend, Pool, PoolError};
use pmem_undo_log::Heap;

use super::layout::{decode_entries, entries_offset, ENTRY};
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
            buf: Vec::new(),
            raw: Vec::new(),
            pos: 0,
            failed: false,
        }
    }

    /// Read leaf `node` consistently: (high key, sibling, entries with keys `>= from`), or
    /// `None` if a writer changed it meanwhile or it is no longer a leaf.
    fn read_leaf_from(
        &self,
        node: u64,
        from: u64,
        raw: &mut Vec<u8>,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        raw.resize(self.capacity * ENTRY as usize, 0);
        let raw = &mut raw[..];
        let stripe = Self::stripe_index(node);
        let seen = self.stripes.read_begin(stripe);
        let header = (|| -> Result<(u64, u64, u64), PoolError> {
            let view = self.view(node)?;
            let (level, high, sibling) = (view.level(), view.high(), view.sibling());
            // One bulk copy of the entry area, decoded after validation.
            self.pool().read_bytes(entries_offset(node), raw)?;
            Ok((level, high, sibling))
        })();
        if !self.stripes.read_valid(stripe, seen) {
            return Ok(None);
        }
        let (level, high, sibling) = header?;
        if level != 0 {
            return Ok(None);
        }
        let start = out.len();
        for (k, v) in decode_entries(raw) {
            if k == EMPTY_KEY {
                break;
            }
            if k < from {
                continue;
            }
            match out[start..].last_mut() {
                Some(last) if last.0 == k => *last = (k, v),
                _ => out.push((k, v)),
            }
        }
        Ok(Some((high, sibling)))
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
    buf: Vec<(u64, u64)>,
    /// A leaf's entry bytes, reused from leaf to leaf.
    raw: Vec<u8>,
    pos: usize,
    failed: bool,
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Range<'_, B, P, H> {
    fn in_end(&self, key: u64) -> bool {
        match self.end {
            Bound::Included(e) => key <= e,
            Bound::Excluded(e) => key < e,
            Bound::Unbounded => true,
        }
    }

    /// Read the next leaf with keys in range into `buf`.
    fn refill(&mut self) -> Result<(), FastFairError> {
        let tree = self.tree;
        let mut steps = 0;
        while let Some(from) = self.resume {
            if !self.in_end(from) {
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
            self.buf.clear();
            self.pos = 0;
            let read = tree.read_leaf_from(leaf, from, &mut self.raw, &mut self.buf)?;
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
            let end = self.end;
            self.buf.retain(|&(k, _)| match end {
                Bound::Included(e) => k <= e,
                Bound::Excluded(e) => k < e,
                Bound::Unbounded => true,
            });
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

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.pos >= self.buf.len() {
            if let Err(e) = self.refill() {
                self.failed = true;
                return Some(Err(e));
            }
        }
        let item = self.buf.get(self.pos).copied()?;
        self.pos += 1;
        Some(Ok(item))
    }
}
