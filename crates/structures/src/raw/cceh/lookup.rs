//! The lock-free lookup ([`Cceh::get`], [`Cceh::get_batch`]) and the prefetching of a key's
//! lookup path that lookups, writers and the helper thread share.
//!
//! One file past 600 lines: the lookup and the prefetching of its path walk the same
//! directory, segment and bucket reads, and read best side by side.
//!
//! A lookup takes no lock and never waits for a writer. It runs in a read section
//! ([`ReadSection`]: two plain stores, no barrier; so no directory it loads is freed under it),
//! reads the current directory (its fast pass from the handle's cache, `directory_cache.rs`;
//! its walk from the root) and the key's entry, scans the probing window (each bucket's keys
//! in one vector compare: `Words::key_hits_of_line_unchecked`), loads a found key's value and
//! then the key again (a slot reused in between means a rescan), and at the end checks that
//! the root still names that directory and the key's entry is the one it started from: a
//! split or doubling that ran meanwhile means a retry from the top. Why each writer's store
//! order keeps this right is told where the stores are: `write.rs` (slot commits),
//! `displace.rs` (moves), `split.rs` (splits and doublings); `interleaving_tests/` checks it
//! schedule by schedule.
//!
//! One file past 600 lines on purpose: the fast pass, the retrying walk it falls back to and
//! the path prefetch take the same steps under the same validation argument, which is easiest
//! to check with all three side by side.

use pmem_ordering::isa::KeySplat;
use pmem_ordering::{Backend, Words};

use crate::sync::readers::ReadSection;

use super::access::SegmentView;
use super::hashing::{hash, prefix};
use super::layout::{bucket_word, key_word, pool_word, segment_word_offset, value_word};
use super::layout::{Directory, Entry, WORDS_PER_BUCKET};
use super::{Cceh, SlotProbe};
use super::{CcehError, Place, EMPTY_KEY, MAX_DEPTH, PROBE_BUCKETS, RESERVED, SLOTS_PER_BUCKET};

/// Lookups of [`Cceh::get_batch`] in one read section.
const BATCH_PIN_CHUNK: usize = 1024;

/// Points of a lookup where tests may interfere (see `Cceh::get_observed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LookupStep {
    /// The directory entry was read; the window is next.
    Located,
    /// The keys of one bucket were read (and compared with the key looked up).
    BucketRead,
    /// The key was found and its value loaded; the key is loaded again next.
    ValueRead,
    /// The window was scanned; the directory pointer and entry are checked next.
    Scanned,
}

impl<B: Backend> Cceh<B> {
    /// The values of `keys`, in order ([`Cceh::get`] for each), with the lookup path of the
    /// key `ahead` places on prefetched before each lookup, so the cache misses of several
    /// lookups overlap (the inline prefetch of [`super::BatchOptions::inline_prefetch`], for
    /// reads). Key 0 anywhere in the batch is refused before anything is looked up.
    pub fn get_batch(&self, keys: &[u64], ahead: usize) -> Result<Vec<Option<u64>>, CcehError> {
        if keys.contains(&EMPTY_KEY) {
            return Err(CcehError::ReservedKey(RESERVED));
        }
        let ahead = ahead.max(1);
        let words = self.pool_words()?;
        let mut values = Vec::with_capacity(keys.len());
        // One read section per chunk: a doubling waiting for lookups waits for one chunk at
        // most.
        for (c, chunk) in keys.chunks(BATCH_PIN_CHUNK).enumerate() {
            let section = ReadSection::enter();
            for (i, &key) in chunk.iter().enumerate() {
                if let Some(&next) = keys.get(c * BATCH_PIN_CHUNK + i + ahead) {
                    self.prefetch_path(words, hash(next));
                }
                values.push(self.lookup(words, &key, |value| value, &section, |_| ())?);
            }
        }
        Ok(values)
    }

    /// The value of `key`, if present. Takes no lock and never waits for a writer, not even
    /// for a split or doubling (see [`Cceh`]), and issues no barrier: its read section is two
    /// plain stores (see `crate::sync::readers`). Nothing is prefetched either: with no barrier
    /// in the way, the CPU starts the window's loads as soon as their addresses are known.
    pub fn get(&self, key: u64) -> Result<Option<u64>, CcehError> {
        self.get_probe(&key, |value| value)
    }

    /// Lock-free, as [`Cceh::get`]: the value of the first slot of the window whose key word
    /// is `probe`'s and whose value `probe` [matches](SlotProbe::matches), passed to `read`
    /// inside the lookup's read section once the lookup has validated it (the section protects
    /// the table's directories only: a caller that reads what the value points at protects it
    /// itself, as the record maps do with their epoch pin). Retries as `get` does; `read` is called at most once.
    #[inline]
    pub(crate) fn get_probe<R>(
        &self,
        probe: &impl SlotProbe,
        read: impl FnOnce(u64) -> R,
    ) -> Result<Option<R>, CcehError> {
        self.get_probe_observed(probe, read, |_| ())
    }

    /// [`Cceh::get`], calling `observe` at each step of the lookup: tests use it to change the
    /// table under a lookup at a chosen point, deterministically.
    #[cfg(test)]
    pub(super) fn get_observed(
        &self,
        key: u64,
        observe: impl FnMut(LookupStep),
    ) -> Result<Option<u64>, CcehError> {
        self.get_probe_observed(&key, |value| value, observe)
    }

    /// [`Cceh::get_probe`], calling `observe` at each step of the lookup (tests use it as
    /// `get_observed` does).
    #[inline(always)]
    pub(super) fn get_probe_observed<R>(
        &self,
        probe: &impl SlotProbe,
        read: impl FnOnce(u64) -> R,
        mut observe: impl FnMut(LookupStep),
    ) -> Result<Option<R>, CcehError> {
        let words = self.pool_words()?;
        if probe.word() == EMPTY_KEY {
            return Err(CcehError::ReservedKey(RESERVED));
        }
        // Inside the section, no directory this lookup loads can be freed under it (a doubling
        // retires the old one and frees it only after every section open at the swap has
        // ended).
        let section = ReadSection::enter();
        if let Some(found) = self.lookup_fast(words, probe, &mut observe) {
            let value = found.map(read);
            drop(section);
            return Ok(value);
        }
        // The section ends before the walk, which enters its own and reads everything again:
        // the fast pass's outcome then reaches the caller straight, not through the walk's.
        drop(section);
        self.lookup_walk_in_section(words, probe, read, observe)
    }

    /// [`Cceh::lookup_walk`] in a read section of its own.
    #[cold]
    #[inline(never)]
    fn lookup_walk_in_section<R>(
        &self,
        words: Words<'_>,
        probe: &impl SlotProbe,
        read: impl FnOnce(u64) -> R,
        observe: impl FnMut(LookupStep),
    ) -> Result<Option<R>, CcehError> {
        let _section = ReadSection::enter();
        self.lookup_walk(words, probe, read, observe)
    }

    /// A lookup inside `_section` (the proof that the caller entered one), read
    /// through `words` ([`Cceh::pool_words`]): `read` of the validated value, if `probe`'s key
    /// is found.
    ///
    /// Written for the CPU to overlap one lookup's cache miss with the next one's: few
    /// instructions (one pass of `lookup_fast`, one range check per segment, none per
    /// bucket), and no branch on where in a bucket the key is (see `hit_mask`). The walk
    /// below runs only where that pass gives up: it retries, and tells errors.
    #[inline(always)]
    fn lookup<R>(
        &self,
        words: Words<'_>,
        probe: &impl SlotProbe,
        read: impl FnOnce(u64) -> R,
        _section: &ReadSection,
        mut observe: impl FnMut(LookupStep),
    ) -> Result<Option<R>, CcehError> {
        if probe.word() == EMPTY_KEY {
            return Err(CcehError::ReservedKey(RESERVED));
        }
        match self.lookup_fast(words, probe, &mut observe) {
            Some(found) => Ok(found.map(read)),
            None => self.lookup_walk(words, probe, read, observe),
        }
    }

    /// The walk of [`Cceh::lookup`] where its fast pass gave up (a read out of the pool, a
    /// validation that failed, a slot reused under the read): it retries until a validation
    /// passes, and tells errors. Out of line, so that the fast pass keeps the registers.
    #[cold]
    #[inline(never)]
    fn lookup_walk<R>(
        &self,
        words: Words<'_>,
        probe: &impl SlotProbe,
        read: impl FnOnce(u64) -> R,
        mut observe: impl FnMut(LookupStep),
    ) -> Result<Option<R>, CcehError> {
        let key = probe.word();
        let h = hash(key);
        let home = self.shape.home(h);
        loop {
            let directory = self.current_directory_in(words)?;
            let found = self.locate_in(words, directory, h).and_then(|place| {
                observe(LookupStep::Located);
                let segment = self.segment_words(words, place.segment)?;
                'scan: loop {
                    for step in 0..PROBE_BUCKETS {
                        let first = bucket_word(self.shape.bucket_after(home, step));
                        let Some(keys) = segment.keys_of_line(first) else {
                            return Err(
                                self.bad_offset(segment_word_offset(place.segment, first), 64)
                            );
                        };
                        observe(LookupStep::BucketRead);
                        let mut hits = hit_mask(&keys, key);
                        while hits != 0 {
                            let slot = hits.trailing_zeros() as usize;
                            hits &= hits - 1;
                            // The value is loaded after the key, and the key again after the
                            // value: a slot reused in between means a rescan.
                            let at = key_word(first, slot);
                            let value = segment.load(value_word(at));
                            observe(LookupStep::ValueRead);
                            // Possibly a value stored for another key (a slot being reused):
                            // `matches` must not trust it, and the re-read below and the final
                            // validation decide whether what was found counts.
                            if !probe.matches(value) {
                                continue;
                            }
                            if segment.load(at) != key {
                                continue 'scan;
                            }
                            return Ok((place, Some(value)));
                        }
                    }
                    return Ok((place, None));
                }
            });
            match found {
                // The key's entry unchanged means no split of its segment (and no doubling)
                // completed or started during the scan: the segment scanned was its home all
                // along, and no slot of it was reused for a key that moved away by a split.
                Ok((place, value)) => {
                    observe(LookupStep::Scanned);
                    if self.current_directory_in(words)? == directory
                        && self.word_in(words, place.entry_offset())? == place.entry()
                    {
                        return Ok(value.map(read));
                    }
                }
                // An error reading a directory that was swapped meanwhile (one a failed doubling
                // allocated and gave back) is no error of the table: read again.
                Err(e) => {
                    if self.current_directory_in(words)? == directory {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// One pass of the lookup of [`Cceh::lookup`] (same steps, same validation, same `observe`
    /// points), written for the fewest instructions. `Some(found)` is the validated outcome;
    /// `None` sends the caller along its own walk, which retries and tells errors: a read out
    /// of the pool, a validation that failed (a split or doubling ran meanwhile) or a slot
    /// reused under the read (both rare). Having no loop of its own, the pass computes each
    /// bucket's address only when it gets there (in a loop, the compiler computes all four
    /// ahead, as loop-invariant). The directory comes from the handle's cache, whose entries'
    /// range was checked when cached; the root's word is in the pool (checked at create and
    /// open); the segment's range is checked once ([`SegmentView`]: its buckets and slots are
    /// then read unchecked).
    #[inline(always)]
    fn lookup_fast(
        &self,
        words: Words<'_>,
        probe: &impl SlotProbe,
        observe: &mut impl FnMut(LookupStep),
    ) -> Option<Option<u64>> {
        let key = probe.word();
        let h = hash(key);
        let at = self.entry_cached(words, h);
        observe(LookupStep::Located);
        let segment = Entry::from_word(at.entry).segment;
        // SAFETY: `self.span` was made for this pool by `Cceh::with_shape`, and `words` is the
        // whole pool's view, whose size never changes.
        let segment = unsafe { SegmentView::new(words, segment, self.span) }?;
        // The home bucket's first word, before `SegmentView` wraps it into the segment (the
        // home bucket is the hash's low bits: `SegmentShape::home`); the high bits shifted out
        // are wrapped away anyway.
        let home_word = h.wrapping_mul(WORDS_PER_BUCKET) as usize;
        let splat = KeySplat::new(key);
        let found = 'scan: {
            for step in 0..PROBE_BUCKETS {
                let (first, hits) =
                    segment.bucket_hits(home_word.wrapping_add(bucket_word(step)), splat);
                observe(LookupStep::BucketRead);
                // The lowest slot holding the key (bit `4 * slot`), as `first_hit` tells; one
                // branch, on whether the bucket holds it (see `hit_mask`).
                if hits != 0 {
                    let slot = (hits.trailing_zeros() / 4) as usize;
                    // As in `lookup`: value after key, key again after value.
                    let (value, again) = segment.value_then_key(first, slot);
                    observe(LookupStep::ValueRead);
                    // A value not the probe's (key words of a hashed table shared by two keys:
                    // a later slot may hold the one looked up) or a slot reused under the read:
                    // the caller's walk sorts these out.
                    if !probe.matches(value) || again != key {
                        return None;
                    }
                    break 'scan Some(value);
                }
            }
            None
        };
        observe(LookupStep::Scanned);
        // As in `lookup`: the key's entry unchanged means no split or doubling ran, and the
        // root naming the cached directory that this directory was current.
        at.unchanged(words, self.directory_word).then_some(found)
    }

    /// `h`'s directory entry in the directory the handle caches (`directory_cache.rs`), with
    /// no check: the cache names a directory whose entries lie inside the pool. For lookups,
    /// which validate at their end that the root names that directory (they read it inside
    /// their read section, as they would read the root: see `directory_cache.rs`).
    #[inline(always)]
    fn entry_cached(&self, words: Words<'_>, h: u64) -> CachedEntry {
        let directory = self.directory_cache.load();
        let entry_word = directory.entry_word(directory.index(h));
        // The index is below `2^depth` (the top `depth` bits of `h`), so the word is one of
        // the cached directory's entries, checked to lie in the whole pool when cached.
        // SAFETY: so the word is inside `words`, the whole pool's view (`pool_words`): a
        // pool's size never changes.
        let entry = unsafe { words.load_unchecked(entry_word) };
        CachedEntry {
            directory: directory.offset(),
            entry_word,
            entry,
        }
    }

    /// One pass from the root to `h`'s directory entry, for the fast paths of lookups and
    /// writers: `None` when a read leaves the pool or the depth is out of range (the caller's
    /// own walk then retries and tells errors). The root's word is aligned (checked at create
    /// and open); the directory's offset is checked for alignment once.
    #[inline(always)]
    pub(super) fn entry_fast(&self, words: Words<'_>, h: u64) -> Option<FastEntry> {
        let root_word = self.directory_word;
        let directory = words.get(root_word)?;
        let depth_word = Self::peek_index(directory)?;
        let global_depth = words.get(depth_word)?;
        if global_depth > MAX_DEPTH {
            return None;
        }
        let index = prefix(h, global_depth);
        // Entry `i` is word `i + 1` of the directory.
        let entry_word = depth_word + 1 + index as usize;
        let entry = words.get(entry_word)?;
        Some(FastEntry {
            root_word,
            directory,
            global_depth,
            index,
            entry_word,
            entry,
        })
    }

    /// The index among the pool's words of the word at `offset`, if aligned.
    #[inline(always)]
    pub(super) fn peek_index(offset: u64) -> Option<usize> {
        offset.is_multiple_of(8).then(|| pool_word(offset))
    }

    #[cfg(test)]
    pub(super) fn locate(&self, h: u64) -> Result<Place, CcehError> {
        let words = self.pool_words()?;
        self.locate_in(words, self.current_directory_in(words)?, h)
    }

    /// Where `h` leads in `directory`, read through `words` ([`Cceh::pool_words`]).
    #[inline(always)]
    pub(super) fn locate_in(
        &self,
        words: Words<'_>,
        directory: Directory,
        h: u64,
    ) -> Result<Place, CcehError> {
        let global_depth = self.word_in(words, directory.depth())?;
        if global_depth > MAX_DEPTH {
            return Err(CcehError::Corrupt {
                root: self.root.offset(),
                reason: format!(
                    "directory {:#x} has global depth {global_depth}",
                    directory.offset()
                ),
            });
        }
        let index = prefix(h, global_depth);
        let entry = Entry::from_word(self.word_in(words, directory.entry(index))?);
        Ok(Place {
            directory,
            global_depth,
            index,
            segment: entry.segment,
            local_depth: entry.local_depth,
        })
    }

    /// Prefetch the lookup path of hash `h`, out of `words` ([`Cceh::pool_words`]): directory
    /// entry, then the window's four buckets. Loads only, without a guard or a lock: any of them may see a directory that a split is
    /// changing, and the worst outcome is a prefetch of the wrong line (pool loads are bounds
    /// checked, and out-of-pool prefetches are ignored).
    pub(super) fn prefetch_path(&self, words: Words<'_>, h: u64) {
        if let Some(segment) = self.peek_segment(words, h) {
            self.prefetch_window(words, segment, h);
        }
    }

    /// The segment the current directory names for hash `h`, read without a guard or a lock
    /// (see [`Cceh::prefetch_path`]); `None` where an offset falls outside the pool.
    #[inline]
    fn peek_segment(&self, words: Words<'_>, h: u64) -> Option<u64> {
        let directory = Directory::at(Self::peek(words, self.root.directory())?);
        let depth = Self::peek(words, directory.depth())?;
        let entry = Self::peek(words, directory.entry(prefix(h, depth.min(MAX_DEPTH))))?;
        Some(Entry::from_word(entry).segment)
    }

    /// Prefetch the four buckets of `h`'s window in `segment` (nothing outside the pool), out
    /// of `words` ([`Cceh::pool_words`]).
    pub(super) fn prefetch_window(&self, words: Words<'_>, segment: u64, h: u64) {
        let home = self.shape.home(h);
        for step in 0..PROBE_BUCKETS {
            let bucket = self.shape.bucket_after(home, step);
            Self::prefetch_word(words, self.shape.slot(segment, bucket, 0));
        }
    }
}

/// The first slot (0..4) of a bucket's four keys that holds `key`, or 4 if none: what
/// [`hit_mask`]'s lowest bit tells, in fewer instructions. The compiler picks branches or
/// conditional moves (writers, whose cost is elsewhere, get the fewer instructions).
#[inline(always)]
pub(super) fn first_hit(keys: &[u64; 4], key: u64) -> usize {
    // From the last slot to the first: the first slot holding `key` wins.
    let mut slot = SLOTS_PER_BUCKET as usize;
    for s in (0..SLOTS_PER_BUCKET as usize).rev() {
        if keys[s] == key {
            slot = s;
        }
    }
    slot
}

/// Bit `s` set for each slot `s` (0..4) of a bucket's four keys that holds `key`. The four
/// keys are compared into a bit mask rather than branched on one by one: a branch on which slot
/// holds the key would be mispredicted, and a mispredicted branch waiting on a cache miss keeps
/// the CPU from starting the next lookup's miss meanwhile. The one branch left (is the key in
/// this bucket?) is mostly right, as most keys sit in their home bucket.
#[inline(always)]
pub(super) fn hit_mask(keys: &[u64; 4], key: u64) -> u32 {
    (0..SLOTS_PER_BUCKET as usize).fold(0u32, |hits, s| hits | (u32::from(keys[s] == key) << s))
}

/// Where [`Cceh::entry_cached`] found a hash's directory entry, and the words it read there.
pub(super) struct CachedEntry {
    /// The cached directory's offset, as read.
    directory: u64,
    /// The entry's word among the pool's words.
    entry_word: usize,
    /// The entry, as read.
    entry: u64,
}

impl CachedEntry {
    /// Whether the root (its word among the pool's words: `root_word`) names the directory
    /// read from the cache, and the entry still reads as it did: then no split or doubling
    /// ran since.
    #[inline(always)]
    fn unchanged(&self, words: Words<'_>, root_word: usize) -> bool {
        // SAFETY: the root's words are inside the pool (checked when the handle was made:
        // `Cceh::with_shape`), and `words` is the whole pool's view.
        let root = unsafe { words.load_unchecked(root_word) };
        // SAFETY: an entry of the cached directory, inside the view (see `entry_cached`).
        let entry = unsafe { words.load_unchecked(self.entry_word) };
        root == self.directory && entry == self.entry
    }
}

/// Where [`Cceh::entry_fast`] found a hash's directory entry, and the words it read there.
pub(super) struct FastEntry {
    /// The root's word (the current directory's offset) among the pool's words.
    pub(super) root_word: usize,
    /// The directory's offset, as read.
    pub(super) directory: u64,
    pub(super) global_depth: u64,
    /// The entry's index in the directory.
    pub(super) index: u64,
    /// The entry's word among the pool's words.
    pub(super) entry_word: usize,
    /// The entry, as read.
    pub(super) entry: u64,
}

impl FastEntry {
    /// Whether the root and the entry still read as they did (`None`: a read left the pool):
    /// then no split or doubling ran since.
    #[inline(always)]
    pub(super) fn unchanged(&self, words: Words<'_>) -> Option<bool> {
        Some(
            words.get(self.root_word)? == self.directory
                && words.get(self.entry_word)? == self.entry,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::line_keys;
    use super::super::test_heap::{heap, keys_at_home, keys_with_top_bit};
    use super::super::CcehConfig;
    use super::*;

    #[test]
    fn the_first_hit_is_the_lowest_slot_holding_the_key() {
        assert_eq!(first_hit(&[5, 6, 7, 6], 6), 1);
        assert_eq!(first_hit(&[6, 6, 6, 6], 6), 0);
        assert_eq!(first_hit(&[5, 6, 7, 8], 8), 3);
        assert_eq!(first_hit(&[5, 6, 7, 8], 9), 4, "none");
        for keys in [[1, 2, 3, 4], [4, 4, 1, 1], [9, 9, 9, 2], [0, 0, 0, 0]] {
            for key in 0..6 {
                let mask = hit_mask(&keys, key);
                let lowest = if mask == 0 {
                    4
                } else {
                    mask.trailing_zeros() as usize
                };
                assert_eq!(first_hit(&keys, key), lowest, "{keys:?} {key}");
            }
        }
    }

    #[test]
    fn a_hit_mask_has_a_bit_for_each_slot_holding_the_key() {
        assert_eq!(hit_mask(&[5, 6, 7, 6], 6), 0b1010);
        assert_eq!(hit_mask(&[5, 6, 7, 8], 9), 0);
        assert_eq!(
            hit_mask(&line_keys(&[5, 6, 7, 8, 9, 10, 11, 12]), 9),
            0b0100
        );
        assert_eq!(
            hit_mask(&line_keys(&[5, 6, 7, 8, 9, 10, 11, 12]), 6),
            0,
            "6 is a value"
        );
    }

    #[test]
    fn a_lookup_survives_a_split_and_a_doubling_under_it_that_reuse_its_slot() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
        // One segment, global depth 0. The key that moves at the first split has top bit 1.
        let key = keys_with_top_bit(1, 1).next().unwrap();
        table.insert(key, 77).unwrap();
        let old = table.locate(hash(key)).unwrap();
        let slot = table.find(&old, &key, hash(key)).unwrap().unwrap().0;
        let mut interfered = false;
        let found = table
            .get_observed(key, |step| {
                if interfered || step != LookupStep::Located {
                    return;
                }
                interfered = true;
                // Fill the segment until it splits (the directory doubles to depth 1), then
                // insert keys that stay in the old segment until one takes the moved key's
                // stale slot. The lookup has already read the old directory.
                let mut fillers = keys_with_top_bit(0, 1_000);
                while table.global_depth().unwrap() == 0 {
                    table.insert(fillers.next().unwrap(), 1).unwrap();
                }
                while table.word(slot).unwrap() == key {
                    table.insert(fillers.next().unwrap(), 1).unwrap();
                }
                assert_eq!(table.global_depth().unwrap(), 1, "no second doubling");
            })
            .unwrap();
        assert!(interfered);
        assert_eq!(found, Some(77));
    }

    #[test]
    fn a_lookup_finds_its_key_when_a_displacement_moves_it_mid_scan() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 16,
        };
        let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
        // Buckets 0-2 full of keys at home in bucket 0, then the key under test (home 3) in
        // bucket 3, then three more home-0 keys: the window of bucket 0 is full, and only the
        // key under test can leave it (to bucket 4), making room for a chain of moves.
        let mut zeros = keys_at_home(0, 1);
        for _ in 0..12 {
            table.insert(zeros.next().unwrap(), 0).unwrap();
        }
        let key = keys_at_home(3, 1).next().unwrap();
        table.insert(key, 33).unwrap();
        for _ in 0..3 {
            table.insert(zeros.next().unwrap(), 0).unwrap();
        }
        let newcomer = zeros.next().unwrap();
        let mut buckets_read = 0;
        let found = table
            .get_observed(key, |step| {
                if step == LookupStep::BucketRead {
                    buckets_read += 1;
                    // The lookup has just found the key in its home bucket: move it now.
                    if buckets_read == 1 {
                        assert!(table.insert(newcomer, 99).unwrap());
                    }
                }
            })
            .unwrap();
        assert!(table.displacements() >= 1, "the newcomer displaced keys");
        assert_eq!(table.global_depth().unwrap(), 0, "and nothing split");
        assert_eq!(found, Some(33));
        assert_eq!(table.get(newcomer).unwrap(), Some(99));
    }
}
