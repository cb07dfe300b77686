//! Checked reads of the table's words. Every word of the root, of a directory and of a segment
//! that the table reads one at a time is read here, through a range-checked view of the whole
//! pool ([`Words`]): one size check for the view and one index check per load, instead of the
//! pool's offset, alignment and size checks, and the same acquire load as [`Pool::load_u64`]. Bulk copies (a whole segment
//! or directory for a split, a doubling or recovery) go through [`Pool::read_bytes`].

use pmem_ordering::isa::KeySplat;
use pmem_ordering::{Backend, Pool, PoolError, Words};

use super::layout::{key_word, pool_word, value_word, Directory, SegmentShape, WORDS_PER_BUCKET};
use super::{Cceh, CcehError};

/// The extent of a table's segments, for [`SegmentView`]: a segment is `line_mask + 8` words,
/// and `line_mask` (a multiple of 8) wraps a word index onto a bucket's first word. Made once
/// per table from its shape, whose bucket count (a power of two, at most 2^20) makes these
/// true; the constructor checks them, so a view's reads need no check of their own.
#[derive(Clone, Copy, Debug)]
pub(super) struct SegmentSpan {
    line_mask: usize,
    /// The last word of the pool a segment may start at (`pool words - segment words`), set
    /// by [`SegmentSpan::in_pool`] (0 before).
    last_start: usize,
}

impl SegmentSpan {
    /// The span of segments of `shape`, or `None` for a shape no table has (no bucket, or a
    /// bucket count that is not a power of two or overflows).
    pub(super) fn of(shape: SegmentShape) -> Option<SegmentSpan> {
        let buckets = usize::try_from(shape.buckets()).ok()?;
        if !buckets.is_power_of_two() {
            return None;
        }
        let line_mask = (buckets - 1).checked_mul(WORDS_PER_BUCKET as usize)?;
        line_mask.checked_add(WORDS_PER_BUCKET as usize)?;
        Some(SegmentSpan {
            line_mask,
            last_start: 0,
        })
    }

    /// This span, knowing that segments lie in a pool of `pool_words` words (for
    /// [`SegmentView::new`]'s one compare); `None` if no segment fits in it.
    pub(super) fn in_pool(self, pool_words: usize) -> Option<SegmentSpan> {
        Some(SegmentSpan {
            last_start: pool_words.checked_sub(self.words())?,
            ..self
        })
    }

    /// Words of a segment.
    #[inline(always)]
    pub(super) fn words(self) -> usize {
        // No overflow: checked in `of`.
        self.line_mask + WORDS_PER_BUCKET as usize
    }
}

/// The words of one segment, range-checked once as a whole, so that any of its buckets is read
/// without another check: a word index is wrapped onto one of the segment's bucket starts by
/// [`SegmentSpan`]'s mask. For the lookup's hot loop, which reads up to four buckets and a
/// slot per lookup. It keeps the whole pool's view and the segment's first word in it rather
/// than a view of the segment: the range check is then one compare.
#[derive(Clone, Copy)]
pub(super) struct SegmentView<'w> {
    /// Every word of the pool ([`Cceh::pool_words`]), from its start.
    words: Words<'w>,
    /// The segment's first word among `words`: `start + line_mask + 8 <= words.len()`.
    start: usize,
    line_mask: usize,
}

impl<'w> SegmentView<'w> {
    /// The segment at pool offset `segment` (a directory entry's, 64-byte aligned: the low six
    /// bits are ignored) of `span`'s size, out of `words` ([`Cceh::pool_words`]); `None` if it
    /// runs past the pool: one compare.
    ///
    /// # Safety
    ///
    /// `span` was made by [`SegmentSpan::in_pool`] for a pool of at most `words.len()` words.
    #[inline(always)]
    pub(super) unsafe fn new(words: Words<'w>, segment: u64, span: SegmentSpan) -> Option<Self> {
        // The word index of the segment's first word (offsets are below 2^64 bytes, so the
        // index fits a `usize` on 64-bit targets, and wraps harmlessly, refused below, on
        // others).
        let start = (segment >> 3) as usize & !7;
        if start > span.last_start {
            return None;
        }
        debug_assert!(start + span.words() <= words.len());
        Some(SegmentView {
            words,
            start,
            line_mask: span.line_mask,
        })
    }

    /// [`SegmentView::new`] as a view of the segment's words alone (its start is word 0): two
    /// compares instead of one, but a bucket's words are then indexed from the segment's own
    /// base, with no start added to each. For writers, which read every bucket of a window
    /// and name the slot they choose by its word in the segment ([`SegmentView::bucket_keys`]'s
    /// `first`, counted from the segment's start either way).
    #[inline(always)]
    pub(super) fn alone(words: Words<'w>, segment: u64, span: SegmentSpan) -> Option<Self> {
        Some(SegmentView {
            words: words.sub(pool_word(segment & !63), span.words())?,
            start: 0,
            line_mask: span.line_mask,
        })
    }

    /// The first word of the bucket that word `word` wraps onto (word `8 * b` for bucket `b`,
    /// wrapping inside the segment, counted from the segment's start), and the bucket's four
    /// keys, loaded in order with acquire loads.
    #[inline(always)]
    pub(super) fn bucket_keys(&self, word: usize) -> (usize, [u64; 4]) {
        let first = word & self.line_mask;
        // SAFETY: `first <= line_mask`, so `start + first + 8 <= start + line_mask + 8`, at most
        // the view's length (checked in `new`).
        let keys = unsafe { self.words.keys_of_line_unchecked(self.start + first) };
        (first, keys)
    }

    /// [`SegmentView::bucket_keys`]'s first word of the bucket, and, instead of its keys, bit
    /// `4 * s` set for each slot `s` whose key equals `key`'s (one vector compare: see
    /// [`Words::key_hits_of_line_unchecked`]).
    #[inline(always)]
    pub(super) fn bucket_hits(&self, word: usize, key: KeySplat) -> (usize, u32) {
        let first = word & self.line_mask;
        // SAFETY: in the view as in `bucket_keys`; `start` and `first` are multiples of 8 in a
        // view of the whole pool from its page-aligned start, so the line is 64-byte aligned.
        let hits = unsafe {
            self.words
                .key_hits_of_line_unchecked(self.start + first, key)
        };
        (first, hits)
    }

    /// The word of the pool of slot `slot & 3`'s key in the bucket whose first word is `first`
    /// (from [`SegmentView::bucket_keys`]; any other is wrapped into the segment): at most
    /// `start + line_mask + 6`, so it and the value word after it are inside the view.
    #[inline(always)]
    fn key_at(&self, first: usize, slot: usize) -> usize {
        self.start + key_word(first & self.line_mask, slot & 3)
    }

    /// The value word of slot `slot & 3` of the bucket whose first word is `first` (from
    /// [`SegmentView::bucket_keys`]), an acquire load.
    #[inline(always)]
    pub(super) fn value(&self, first: usize, slot: usize) -> u64 {
        let at = self.key_at(first, slot);
        // SAFETY: `at + 1 <= start + line_mask + 7 < start + line_mask + 8`, at most the view's
        // length (checked in `new`).
        unsafe { self.words.load_unchecked(value_word(at)) }
    }

    /// Hint the CPU to fetch the bucket that word `word` wraps onto (as in
    /// [`SegmentView::bucket_keys`]).
    #[inline(always)]
    pub(super) fn prefetch_bucket(&self, word: usize) {
        self.words.prefetch(self.start + (word & self.line_mask));
    }

    /// The value word and then the key word of slot `slot & 3` of the bucket whose first word
    /// is `first` (from [`SegmentView::bucket_keys`]), each an acquire load, in that order.
    #[inline(always)]
    pub(super) fn value_then_key(&self, first: usize, slot: usize) -> (u64, u64) {
        let at = self.key_at(first, slot);
        // SAFETY: `at + 1 <= start + line_mask + 7 < start + line_mask + 8`, at most the view's
        // length (checked in `new`): both words are inside the view.
        let value = unsafe { self.words.load_unchecked(value_word(at)) };
        // SAFETY: `at < at + 1`, inside the view as above.
        let key = unsafe { self.words.load_unchecked(at) };
        (value, key)
    }
}

/// A view of every whole word of `pool`.
pub(super) fn whole_pool<B: Backend>(pool: &Pool<B>) -> Result<Words<'_>, PoolError> {
    pool.words(0, pool_word(pool.size()))
}

impl<B: Backend> Cceh<B> {
    /// Every whole word of the pool, range-checked once. The view borrows the heap through
    /// `self`, so the handle (which owns its heap holder) cannot keep one: a hot path takes it
    /// once per operation and passes it to the `_in` reads below; colder paths read through
    /// [`Cceh::word`], which takes it per call.
    #[inline]
    pub(super) fn pool_words(&self) -> Result<Words<'_>, CcehError> {
        Ok(whole_pool(self.heap.pool())?)
    }

    /// The directory the root names now.
    #[inline]
    pub(super) fn current_directory(&self) -> Result<Directory, CcehError> {
        self.current_directory_in(self.pool_words()?)
    }

    /// [`Cceh::current_directory`], read through `words` ([`Cceh::pool_words`]).
    #[inline]
    pub(super) fn current_directory_in(&self, words: Words<'_>) -> Result<Directory, CcehError> {
        Ok(Directory::at(self.word_in(words, self.root.directory())?))
    }

    /// The words of a segment, range-checked once, out of `words` ([`Cceh::pool_words`]).
    #[inline]
    pub(super) fn segment_words<'w>(
        &self,
        words: Words<'w>,
        segment: u64,
    ) -> Result<Words<'w>, CcehError> {
        let count = self.shape.words();
        // Segment offsets come from directory entries, whose low bits are masked off: always
        // 64-byte aligned, so only the range needs checking.
        match words.sub(pool_word(segment), count) {
            Some(segment_words) => Ok(segment_words),
            None => Err(self.bad_offset(segment, self.shape.bytes())),
        }
    }

    /// The word at `offset` of the pool (an acquire load, as [`Pool::load_u64`]).
    #[inline]
    pub(super) fn word(&self, offset: u64) -> Result<u64, CcehError> {
        self.word_in(self.pool_words()?, offset)
    }

    /// [`Cceh::word`], read through `words` ([`Cceh::pool_words`]).
    #[inline]
    pub(super) fn word_in(&self, words: Words<'_>, offset: u64) -> Result<u64, CcehError> {
        if offset.is_multiple_of(8) {
            if let Some(word) = words.get(pool_word(offset)) {
                return Ok(word);
            }
        }
        Err(self.bad_offset(offset, 8))
    }

    /// The word at `offset` of `words` ([`Cceh::pool_words`]), or `None` outside the pool or
    /// misaligned: for speculative walks, which may follow offsets read from a table changing
    /// under them.
    #[inline]
    pub(super) fn peek(words: Words<'_>, offset: u64) -> Option<u64> {
        offset
            .is_multiple_of(8)
            .then(|| words.get(pool_word(offset)))
            .flatten()
    }

    /// Hint the CPU to fetch the line holding the word at `offset` of `words`
    /// ([`Cceh::pool_words`]); nothing outside the pool.
    #[inline]
    pub(super) fn prefetch_word(words: Words<'_>, offset: u64) {
        words.prefetch(pool_word(offset));
    }

    /// The pool's own error for a read of `len` bytes at `offset` that [`Cceh::word`] or
    /// [`Cceh::segment_words`] refused.
    #[cold]
    #[inline(never)]
    pub(super) fn bad_offset(&self, offset: u64, len: u64) -> CcehError {
        let pool = self.heap.pool();
        match pool
            .check_range(offset, len)
            .and_then(|()| pool.load_u64(offset))
        {
            Err(e) => e.into(),
            // Unreachable for the offsets refused above; an error either way.
            Ok(_) => CcehError::Corrupt {
                root: self.root.offset(),
                reason: format!("offset {offset:#x} refused"),
            },
        }
    }
}
