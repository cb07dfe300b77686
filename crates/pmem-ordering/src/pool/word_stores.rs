//! [`WordStores`]: a checked view for storing into a run of a pool's 8-byte words, for hot write
//! paths that store many words of one region (a tree node's in-place shift).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::Backend;
use crate::barrier::{Durable, Pending, Written};
use crate::stats;

use super::Pool;

/// The `count` 8-byte words at an offset of a pool, checked once ([`Pool::word_stores`]). Each
/// store is the same failure-atomic release store as [`Pool::store_u64`], made through the
/// backend (so the simulator traces it), in the order the caller makes them; only the
/// per-store range and alignment checks are gone. [`WordStores::flush`] and
/// [`WordStores::persist`] write back a run of the words (the same counted, traced flush as
/// [`Pool::flush`], checked against the view instead of the pool); [`WordStores::written`]
/// gives the token of a run for the pool's other persist calls.
///
/// The view's stores are counted in the thread's statistics ([`crate::stats`]) in batches:
/// at the view's next flush or persist (with it, in one look-up of the counters), or when the
/// view is dropped. The totals are those of one count per store; a hot shift saves a
/// counter update per store.
pub struct WordStores<'a, B: Backend> {
    pool: &'a Pool<B>,
    /// The first word, 8-byte aligned, with `len` words after it inside the mapping.
    base: *mut u64,
    /// The pool offset of `base`.
    offset: u64,
    len: usize,
    /// Stores made through the view and not yet counted in the thread's statistics.
    uncounted: Cell<u64>,
}

impl<'a, B: Backend> WordStores<'a, B> {
    /// Checked by [`Pool::word_stores`]: `base` is 8-aligned and `[base, base + len)` lies in
    /// the pool's mapping.
    pub(super) fn new(pool: &'a Pool<B>, base: *mut u64, offset: u64, len: usize) -> Self {
        WordStores {
            pool,
            base,
            offset,
            len,
            uncounted: Cell::new(0),
        }
    }

    /// Failure-atomic release store of word `index` (panics past the end, like slice indexing).
    #[inline]
    #[track_caller]
    pub fn store(&self, index: usize, value: u64) {
        // Checked against a copy, with an out-of-line panic taking values (as in `move_up`).
        let len = self.len;
        if index >= len {
            word_past_view(index, len);
        }
        // SAFETY: `index < len`, and the `len` words from `base` are 8-aligned and inside the
        // mapping (checked at creation), which outlives the pool borrow `'a`.
        unsafe { self.pool.backend.store_u64(self.base.add(index), value) };
        self.uncounted.set(self.uncounted.get() + 1);
    }

    /// Failure-atomic release stores of word `first` then word `second`, in that order: two
    /// [`WordStores::store`]s, range-checked in one step (panics past the end).
    #[inline]
    #[track_caller]
    pub fn store_two(&self, first: usize, first_value: u64, second: usize, second_value: u64) {
        // Checked against a copy, with an out-of-line panic taking values (as in `move_up`).
        let len = self.len;
        if first.max(second) >= len {
            word_past_view(first.max(second), len);
        }
        // SAFETY: both indices are below `len` (checked just above; `word_past_view` does not
        // return).
        unsafe { self.store_two_unchecked(first, first_value, second, second_value) }
    }

    /// [`WordStores::store_two`] without the range check: for a caller that checked the range
    /// of many stores once (a shift inside a node whose last slot it checked).
    ///
    /// # Safety
    ///
    /// `first < self.len()` and `second < self.len()`.
    #[inline]
    pub unsafe fn store_two_unchecked(
        &self,
        first: usize,
        first_value: u64,
        second: usize,
        second_value: u64,
    ) {
        debug_assert!(first.max(second) < self.len, "a store past the view");
        // The `len` words from `base` are 8-aligned and inside the mapping (checked at
        // creation), which outlives the pool borrow `'a`.
        // SAFETY: both indices are below `len` (the caller's promise), so both words lie in
        // that checked run.
        unsafe {
            self.pool
                .backend
                .store_u64(self.base.add(first), first_value);
            self.pool
                .backend
                .store_u64(self.base.add(second), second_value);
        }
        self.uncounted.set(self.uncounted.get() + 2);
    }

    /// Move words `start .. end` up by `by` words, to `start + by .. end + by`: the same
    /// failure-atomic release stores as [`WordStores::store`], made highest word first, each
    /// storing the value an acquire load of its source word read just before (so a move onto
    /// itself reads no word it has overwritten, as `copy_within` would). One range check and
    /// one count for the whole move (panics unless `start <= end` and `end + by` is inside
    /// the view, before storing anything).
    #[inline]
    #[track_caller]
    pub fn move_up(&self, start: usize, end: usize, by: usize) {
        // Copied out, and checked with an out-of-line panic taking values, so that no local's
        // address escapes: the loop keeps them in registers across its atomic accesses.
        let (base, len) = (self.base, self.len);
        if !(start <= end && end.checked_add(by).is_some_and(|top| top <= len)) {
            move_past_view(start, end, by, len);
        }
        let backend = &self.pool.backend;
        let mut word = end;
        while word > start {
            word -= 1;
            // Every access to pool words is atomic (but streaming stores, kept from these words).
            // SAFETY: `word < end`, `word + by <= len` (checked above): both are among the view's
            // 8-aligned words inside the mapping (checked at creation), which outlives `'a`.
            unsafe {
                let value = AtomicU64::from_ptr(base.add(word)).load(Ordering::Acquire);
                backend.store_u64(base.add(word + by), value);
            }
        }
        self.uncounted
            .set(self.uncounted.get() + (end - start) as u64);
    }

    /// The token of words `start .. end` (stored through this view), to flush them with
    /// (panics if the range is empty or runs past the end).
    #[inline]
    pub fn written(&self, start: usize, end: usize) -> Written {
        self.check_run(start, end);
        self.pool
            .written(self.offset + 8 * start as u64, 8 * (end - start))
    }

    /// Write back the lines of words `start .. end`, as [`Pool::flush`] of their
    /// [`WordStores::written`] token does, with one check against the view (panics if the
    /// range is empty or runs past the end).
    #[inline]
    pub fn flush(&self, start: usize, end: usize) -> Pending {
        self.check_run(start, end);
        self.count_stores();
        // SAFETY: `start < end <= len` (checked above), and the `len` words from `base` lie
        // inside the mapping (checked at creation).
        unsafe {
            self.pool
                .flush_at(self.base.add(start) as *const u8, 8 * (end - start))
        }
    }

    /// Flush and fence words `start .. end`: [`WordStores::flush`] then [`Pool::fence`].
    #[inline(always)]
    pub fn persist(&self, start: usize, end: usize) -> Durable {
        self.check_run(start, end);
        let stores = self.uncounted.replace(0);
        // SAFETY: as in `flush`: `start < end <= len`, inside the mapping.
        unsafe {
            self.pool
                .persist_at(stores, self.base.add(start) as *const u8, 8 * (end - start))
        }
    }

    /// Count the stores not counted yet in the thread's statistics.
    #[inline]
    fn count_stores(&self) {
        let stores = self.uncounted.replace(0);
        if stores > 0 {
            stats::count_stores(stores, 8 * stores as usize);
        }
    }

    /// Panics unless `start .. end` is a non-empty run of the view's words.
    #[inline]
    #[track_caller]
    fn check_run(&self, start: usize, end: usize) {
        // Checked against a copy, with an out-of-line panic taking values (as in `move_up`).
        let len = self.len;
        if !(start < end && end <= len) {
            run_outside_view(start, end, len);
        }
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<B: Backend> Drop for WordStores<'_, B> {
    /// Count what no flush or persist counted.
    #[inline]
    fn drop(&mut self) {
        self.count_stores();
    }
}

/// The panic of a store past the view, out of line: a panic message formatted in place takes
/// the view's fields by reference, and a view whose address escapes is kept in memory, its
/// fields loaded again after every (atomic) store.
#[cold]
#[inline(never)]
#[track_caller]
fn word_past_view(index: usize, len: usize) -> ! {
    panic!("word {index} past a view of {len}")
}

/// The panic of a flush of a run outside the view, out of line (see [`word_past_view`]).
#[cold]
#[inline(never)]
#[track_caller]
fn run_outside_view(start: usize, end: usize, len: usize) -> ! {
    panic!("words {start}..{end} of a view of {len}")
}

/// The panic of a [`WordStores::move_up`] past the view, out of line (see there).
#[cold]
#[inline(never)]
#[track_caller]
fn move_past_view(start: usize, end: usize, by: usize, len: usize) -> ! {
    panic!("words {start}..{end} moved up by {by} past a view of {len}")
}
