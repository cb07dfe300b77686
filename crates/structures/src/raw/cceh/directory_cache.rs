//! The current directory's offset and global depth, kept in the handle beside the root, so
//! that a lookup reaches its directory entry with one load of DRAM the handle owns and no
//! check: the range of the entries was checked once, when the directory was cached.
//!
//! Only the handle's writers store it, after the root names the directory (at create and
//! open, and after a doubling's transaction commits), and before the grace period of the
//! directory it replaces starts (`reclaim.rs`). So a lookup's read section that reads the
//! cache reads a directory that cannot be freed before the section ends, as if it had read
//! the root (see `crate::sync::readers`: the cache's store comes before the reclaimer's heavy
//! barrier as the root's does). A lookup validates at its end that the root still names the
//! cached directory: between a doubling's root store and its cache store, lookups fail that
//! check and take their walk, which reads the root.

use std::sync::atomic::{AtomicU64, Ordering};

use pmem_ordering::Words;

use super::layout::{pool_word, Directory};
use super::MAX_DEPTH;

/// Bits of the packed word that hold `63 - depth` (depth at most [`MAX_DEPTH`] = 58 < 64).
const DEPTH_BITS: u32 = 6;

/// The packed `(first entry's word << 6) | (63 - depth)` of a directory whose `2^depth`
/// entries all lie inside the pool's view it was checked against (the shift a directory
/// index takes from a hash, and where its entries start: [`CachedDirectory`]); the empty
/// cache is a directory at offset 0 of depth 0, whose one entry (the pool's second word) is
/// inside any pool a table lives in (its root alone takes 32 bytes).
#[derive(Debug)]
pub(super) struct DirectoryCache {
    packed: AtomicU64,
}

/// A directory as [`DirectoryCache::load`] read it: the packed word, unpacked where used
/// (the shift by `x86-64`'s shift instruction, which takes its low six bits itself).
#[derive(Clone, Copy)]
pub(super) struct CachedDirectory {
    packed: u64,
}

impl CachedDirectory {
    /// The directory's offset (what the root holds while it is current).
    #[inline(always)]
    pub(super) fn offset(self) -> u64 {
        ((self.packed >> DEPTH_BITS) - 1) * 8
    }

    /// The global depth.
    #[cfg(test)]
    fn depth(self) -> u64 {
        63 - (self.packed & 63)
    }

    /// The directory index of hash `h`: its top `depth` bits (as `prefix`).
    #[inline(always)]
    pub(super) fn index(self, h: u64) -> u64 {
        // Two shifts, as in `prefix`: no shift by 64 at depth 0.
        (h >> 1) >> (self.packed & 63)
    }

    /// The word among the pool's words of entry `index` (`index < 2^depth`, as
    /// [`CachedDirectory::index`] gives): inside the view the directory was checked against.
    #[inline(always)]
    pub(super) fn entry_word(self, index: u64) -> usize {
        ((self.packed >> DEPTH_BITS) + index) as usize
    }
}

impl DirectoryCache {
    /// A cache naming `offset` with global depth `depth` if that directory lies inside
    /// `words` (the whole pool), else the empty cache (lookups then fail their validation
    /// and take their walk, which tells the error).
    pub(super) fn new(words: Words<'_>, offset: u64, depth: u64) -> DirectoryCache {
        let cache = DirectoryCache {
            packed: AtomicU64::new(0),
        };
        cache.set(words, offset, depth);
        cache
    }

    /// Cache the directory at `offset`, of global depth `depth`, if it lies inside `words`
    /// (the whole pool); else empty the cache.
    pub(super) fn set(&self, words: Words<'_>, offset: u64, depth: u64) {
        let inside = offset.is_multiple_of(8)
            && depth <= MAX_DEPTH
            && offset < 1 << (64 - DEPTH_BITS)
            && pool_word(Directory::at(offset).entry(0))
                .checked_add(1 << depth)
                .is_some_and(|end| end <= words.len());
        let (offset, depth) = if inside { (offset, depth) } else { (0, 0) };
        // The first entry is word `offset / 8 + 1`.
        let packed = ((offset / 8 + 1) << DEPTH_BITS) | (63 - depth);
        // Release: a lookup that reads it reads the directory's words as written.
        self.packed.store(packed, Ordering::Release);
    }

    /// The cached directory.
    #[inline(always)]
    pub(super) fn load(&self) -> CachedDirectory {
        CachedDirectory {
            packed: self.packed.load(Ordering::Acquire),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::hashing::prefix;
    use super::super::test_heap::heap;
    use super::super::{access::whole_pool, Cceh, CcehConfig};
    use super::*;

    #[test]
    fn a_directory_outside_the_pool_is_not_cached() {
        let heap = heap();
        let words = whole_pool(heap.pool()).unwrap();
        let len = words.len() as u64;
        let cache = DirectoryCache::new(words, 64, 3);
        let cached = cache.load();
        assert_eq!((cached.offset(), cached.depth()), (64, 3));
        assert_eq!(cached.entry_word(7), 8 + 1 + 7);
        for depth in [0, 1, 3, 16, MAX_DEPTH] {
            let directory = CachedDirectory {
                packed: (9 << DEPTH_BITS) | (63 - depth),
            };
            for h in [0, 1, u64::MAX, 1 << 63, 0x1234_5678_9abc_def0] {
                assert_eq!(directory.index(h), prefix(h, depth), "depth {depth} {h:#x}");
            }
        }
        // Entries running one word past the end, a misaligned offset, a depth too large.
        for (offset, depth) in [((len - 8) * 8, 3), (64 + 4, 0), (64, MAX_DEPTH + 1)] {
            cache.set(words, offset, depth);
            let cached = cache.load();
            assert_eq!(
                (cached.offset(), cached.depth()),
                (0, 0),
                "{offset} {depth}"
            );
        }
        // The last directory that fits.
        cache.set(words, (len - 9) * 8, 3);
        assert_eq!(cache.load().offset(), (len - 9) * 8);
    }

    #[test]
    fn the_cache_follows_the_root_through_doublings() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
        for k in 1..=2_000u64 {
            table.insert(k, k).unwrap();
            let cached = table.directory_cache.load();
            assert_eq!(cached.offset(), table.current_directory().unwrap().offset());
            assert_eq!(cached.depth(), table.global_depth().unwrap());
        }
        assert!(table.global_depth().unwrap() >= 3, "the table doubled");
        let root = heap.pool().root_offset();
        drop(table);
        let reopened = Cceh::open(&heap, root).unwrap();
        let cached = reopened.directory_cache.load();
        assert_eq!(
            cached.offset(),
            reopened.current_directory().unwrap().offset()
        );
        assert_eq!(cached.depth(), reopened.global_depth().unwrap());
    }
}
