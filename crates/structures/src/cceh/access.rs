//! Checked reads of the table's words. Every word of the root, of a directory and of a segment
//! that the table reads one at a time is read here, through a range-checked view of the whole
//! pool ([`Words`]): one size check for the view and one index check per load, instead of the
//! pool's offset, alignment and size checks, and the same acquire load as [`Pool::load_u64`]. Bulk copies (a whole segment
//! or directory for a split, a doubling or recovery) go through [`Pool::read_bytes`].

use std::ops::Deref;

use pmem_ordering::{Backend, Pool, PoolError, Words};
use pmem_undo_log::Heap;

use super::layout::{pool_word, Directory};
use super::{Cceh, CcehError};

/// A view of every whole word of `pool`.
pub(super) fn whole_pool<B: Backend>(pool: &Pool<B>) -> Result<Words<'_>, PoolError> {
    pool.words(0, pool_word(pool.size()))
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Cceh<B, P, H> {
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
