//! [`Words`]: a checked, read-only view of a run of a pool's 8-byte words, for hot read paths.

use std::sync::atomic::{AtomicU64, Ordering};

/// A checked, read-only view of consecutive 8-byte words of a pool ([`super::Pool::words`]).
#[derive(Clone, Copy, Debug)]
pub struct Words<'a> {
    pub(super) words: &'a [AtomicU64],
}

impl<'a> Words<'a> {
    /// Acquire load of word `index` (panics past the end, like slice indexing).
    #[inline]
    pub fn load(&self, index: usize) -> u64 {
        self.words[index].load(Ordering::Acquire)
    }

    /// Acquire load of word `index` without the range check: for searches whose indices are
    /// in range by construction (a binary search over a node whose view was checked once).
    ///
    /// # Safety
    ///
    /// `index < self.len()`.
    #[inline]
    pub unsafe fn load_unchecked(&self, index: usize) -> u64 {
        debug_assert!(index < self.words.len(), "word {index} past the view");
        // SAFETY: the caller keeps `index` inside the view.
        unsafe { self.words.get_unchecked(index) }.load(Ordering::Acquire)
    }

    /// Acquire load of word `index`, or `None` past the end: for indices read from the pool
    /// itself, which a corrupted pool may have wrong.
    #[inline]
    pub fn get(&self, index: usize) -> Option<u64> {
        self.words.get(index).map(|w| w.load(Ordering::Acquire))
    }

    /// The eight words from word `start` on (one cache line when `start` is a multiple of 8),
    /// loaded one after the other in order with acquire loads, or `None` past the end: one
    /// range check for a whole line.
    #[inline]
    pub fn line(&self, start: usize) -> Option<[u64; 8]> {
        let line: &[AtomicU64; 8] = self
            .words
            .get(start..start.checked_add(8)?)?
            .try_into()
            .ok()?;
        Some(std::array::from_fn(|i| line[i].load(Ordering::Acquire)))
    }

    /// Words `start`, `start + 2`, `start + 4` and `start + 6` (the keys of a line of four
    /// key/value pairs), loaded in that order with acquire loads, or `None` past the end.
    #[inline]
    pub fn keys_of_line(&self, start: usize) -> Option<[u64; 4]> {
        let line: &[AtomicU64; 8] = self
            .words
            .get(start..start.checked_add(8)?)?
            .try_into()
            .ok()?;
        Some(std::array::from_fn(|i| line[2 * i].load(Ordering::Acquire)))
    }

    /// [`Words::keys_of_line`] without the range check: for lines whose range was checked once
    /// for many (a hash bucket, masked into a segment whose whole view was checked).
    ///
    /// # Safety
    ///
    /// `start + 8 <= self.len()`.
    #[inline]
    pub unsafe fn keys_of_line_unchecked(&self, start: usize) -> [u64; 4] {
        debug_assert!(
            start
                .checked_add(8)
                .is_some_and(|end| end <= self.words.len()),
            "line at word {start} past the view"
        );
        std::array::from_fn(|i| {
            // SAFETY: `start + 2 * i < start + 8 <= self.len()`, the caller's promise.
            unsafe { self.words.get_unchecked(start + 2 * i) }.load(Ordering::Acquire)
        })
    }

    /// Bit `4 * s` set for each of the four `(key, value)` pairs of the line at word `start`
    /// whose key (word `start + 2 * s`) equals `key`'s ([`crate::isa::key_hits_of_line`]: one
    /// vector compare on x86-64), the keys read in order as [`Words::keys_of_line_unchecked`]
    /// reads them, without the range check.
    ///
    /// # Safety
    ///
    /// `start + 8 <= self.len()`, and word `start` is 16-byte aligned (an even word of a view
    /// of a pool from its start: pools are page-aligned).
    #[inline]
    pub unsafe fn key_hits_of_line_unchecked(
        &self,
        start: usize,
        key: crate::isa::KeySplat,
    ) -> u32 {
        debug_assert!(
            start
                .checked_add(8)
                .is_some_and(|end| end <= self.words.len()),
            "line at word {start} past the view"
        );
        // SAFETY: `start + 8 <= self.len()` (the caller's promise), so the line's 64 bytes are
        // in the view, and 16-byte aligned (the caller's promise too).
        unsafe { crate::isa::key_hits_of_line(self.words.as_ptr().add(start), key) }
    }

    /// Append to `out` the `count` `(key, value)` pairs of words `start..start + 2 * count`
    /// (a key word, then its value), read in order as acquire loads would read them
    /// ([`crate::isa::copy_pairs`]: 16 bytes at a time on x86-64), without the range check;
    /// returns whether two neighbouring pairs of the copy share a key.
    ///
    /// # Safety
    ///
    /// `start + 2 * count <= self.len()`.
    #[inline(always)]
    pub unsafe fn append_pairs_unchecked(
        &self,
        start: usize,
        count: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> bool {
        debug_assert!(
            count
                .checked_mul(2)
                .and_then(|words| words.checked_add(start))
                .is_some_and(|end| end <= self.words.len()),
            "pairs from word {start} past the view"
        );
        out.reserve(count);
        // SAFETY: `start + 2 * count <= len` (the caller's promise).
        let src = unsafe { self.words.get_unchecked(start..start + 2 * count) };
        let duplicate = crate::isa::copy_pairs(src, &mut out.spare_capacity_mut()[..count]);
        // SAFETY: `copy_pairs` wrote each of the first `count` spare slots, within the capacity
        // (reserved above).
        unsafe { out.set_len(out.len() + count) };
        duplicate
    }

    /// Hint the CPU to bring the cache line holding word `index` into the cache; nothing past
    /// the end. A hint only: it reads and stores nothing.
    #[inline]
    pub fn prefetch(&self, index: usize) {
        if let Some(word) = self.words.get(index) {
            crate::isa::prefetch_line(word.as_ptr() as *const u8);
        }
    }

    /// The `count` words from word `start` on, or `None` if they run past the end.
    #[inline]
    pub fn sub(&self, start: usize, count: usize) -> Option<Words<'a>> {
        // Two compares (`start <= len`, `count <= len - start`), no overflow to check.
        self.words
            .get(start..)?
            .get(..count)
            .map(|words| Words { words })
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the view is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }
}
