//! [`Range`]'s `next` in pieces, for iterators that wrap it (the Store's ordered map): the
//! pair of the leaf in hand (inlined), the pair after it (a call returning the pair alone),
//! the error that ended the walk, and a way to end it early. `next` itself is the two pieces
//! and the error in a row (`range.rs`).

use pmem_ordering::Backend;

use super::Range;
use crate::raw::fastfair::FastFairError;

impl<B: Backend> Range<'_, B> {
    /// `next`'s common case alone, for iterators that wrap this one and inline it: the next
    /// pair of the leaf in hand, read and validated in place, or `None` when more is needed (the
    /// run's end, a changed leaf, no leaf yet); `next` then goes on from there.
    #[inline(always)]
    pub fn next_in_leaf(&mut self) -> Option<(u64, u64)> {
        if self.at < self.end {
            // SAFETY: `at < end` only while `leaf` holds a leaf (the fields' invariant).
            let leaf = unsafe { self.leaf.as_mut().unwrap_unchecked() };
            return leaf.next_fast(&mut self.at);
        }
        None
    }

    /// `next` past [`Self::next_in_leaf`], for the same wrapping iterators: the next pair,
    /// found from the next leaf's run (or the leaf read again), or `None` at the range's end
    /// or on an error, which [`Self::take_error`] then gives. The pair alone comes back, so a
    /// wrapper whose own item is larger does not copy a `Result` per leaf.
    #[inline]
    pub fn next_after_leaf(&mut self) -> Option<(u64, u64)> {
        self.next_slow()
    }

    /// The error that ended the walk, once (after [`Self::next_after_leaf`] gave `None`).
    pub fn take_error(&mut self) -> Option<FastFairError> {
        self.error.take()
    }

    /// End the walk: nothing more comes, not even the rest of the leaf in hand (a wrapping
    /// iterator met a pair it cannot use).
    pub fn stop(&mut self) {
        (self.leaf, self.at, self.end) = (None, 0, 0);
        self.failed = true;
    }

    /// Whether an error ended the walk and [`Self::take_error`] has not taken it yet.
    pub fn has_error(&self) -> bool {
        self.error.is_some()
    }
}
