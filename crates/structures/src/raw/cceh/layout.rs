//! Where every word of a CCEH table lives: the only file that knows offsets.
//!
//! Pure arithmetic on pool offsets and word indices, no loads or stores (the module docs of
//! [`super`] describe the layout in prose; the checked reads built on these offsets are in
//! `access.rs`). Everything is `#[inline]`: the lookup's hot loop is built from these helpers
//! and must compile to the same few instructions as the arithmetic written out.

use super::{PROBE_BUCKETS, SLOTS_PER_BUCKET};

/// The root's first word, which tells a CCEH root from anything else.
pub(super) const ROOT_MAGIC: u64 = crate::kind::StructureKind::HashMap.magic();
/// Bytes of a bucket: one cache line.
pub(super) const BUCKET_BYTES: u64 = 64;
/// Words of a bucket: four `(key, value)` slots.
pub(super) const WORDS_PER_BUCKET: u64 = BUCKET_BYTES / 8;
/// Bytes of a slot: the key word, then the value word.
pub(super) const SLOT_BYTES: u64 = 16;
/// The low bits of a directory entry that hold the segment's local depth (segments are 64-byte
/// aligned, so these bits of the offset are free).
pub(super) const DEPTH_MASK: u64 = 63;

/// The 32-byte root at a caller-chosen, 64-byte aligned offset: magic, the directory's offset,
/// the buckets per segment, and the offset of a retired directory (0 if none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Root(u64);

impl Root {
    /// The root at pool offset `offset`.
    #[inline]
    pub(super) const fn at(offset: u64) -> Root {
        Root(offset)
    }

    /// The root's own offset (the first word: the magic).
    #[inline]
    pub(super) const fn offset(self) -> u64 {
        self.0
    }

    /// The word holding [`ROOT_MAGIC`].
    #[inline]
    pub(super) const fn magic(self) -> u64 {
        self.0
    }

    /// The word holding the current directory's offset.
    #[inline]
    pub(super) const fn directory(self) -> u64 {
        self.0 + 8
    }

    /// The word holding the number of buckets per segment.
    #[inline]
    pub(super) const fn buckets_per_segment(self) -> u64 {
        self.0 + 16
    }

    /// The word holding the offset of the directory the last doubling retired (0 if none).
    #[inline]
    pub(super) const fn retired(self) -> u64 {
        self.0 + 24
    }

    /// The bytes of a new root naming `directory`, with `buckets` buckets per segment and no
    /// retired directory.
    pub(super) fn image(directory: u64, buckets: u64) -> [u8; super::ROOT_BYTES as usize] {
        let mut root = [0u8; super::ROOT_BYTES as usize];
        root[0..8].copy_from_slice(&ROOT_MAGIC.to_le_bytes());
        root[8..16].copy_from_slice(&directory.to_le_bytes());
        root[16..24].copy_from_slice(&buckets.to_le_bytes());
        root
    }
}

/// A directory: its global depth `G` (one word), then `2^G` entries (one word each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Directory(u64);

impl Directory {
    /// The directory at pool offset `offset`.
    #[inline]
    pub(super) const fn at(offset: u64) -> Directory {
        Directory(offset)
    }

    /// The directory's own offset (what the root and the heap know it by).
    #[inline]
    pub(super) const fn offset(self) -> u64 {
        self.0
    }

    /// The word holding the global depth.
    #[inline]
    pub(super) const fn depth(self) -> u64 {
        self.0
    }

    /// The word holding entry `index`.
    #[inline]
    pub(super) const fn entry(self, index: u64) -> u64 {
        self.0 + 8 + 8 * index
    }

    /// Bytes of a directory of global depth `depth`.
    #[inline]
    pub(super) const fn bytes(depth: u64) -> u64 {
        8 + Directory::entries_bytes(depth)
    }

    /// Bytes of the entries of a directory of global depth `depth` (from [`Directory::entry`]
    /// 0 on).
    #[inline]
    pub(super) const fn entries_bytes(depth: u64) -> u64 {
        8 * (1 << depth)
    }

    /// The bytes of a directory of global depth `depth` holding `entries` (`2^depth` of them).
    pub(super) fn image(depth: u64, entries: impl IntoIterator<Item = Entry>) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(Directory::bytes(depth) as usize);
        bytes.extend_from_slice(&depth.to_le_bytes());
        for entry in entries {
            bytes.extend_from_slice(&entry.word().to_le_bytes());
        }
        debug_assert_eq!(bytes.len() as u64, Directory::bytes(depth));
        bytes
    }

    /// The entries of a directory, from the bytes of its entries (the directory past its depth
    /// word).
    pub(super) fn entries_from(bytes: &[u8]) -> impl Iterator<Item = Entry> + '_ {
        bytes.chunks_exact(8).map(|e| Entry::from_word(word_of(e)))
    }
}

/// A directory entry: a segment's offset with the segment's local depth in its low bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// The segment's offset (64-byte aligned).
    pub(super) segment: u64,
    /// The segment's local depth (at most [`super::MAX_DEPTH`]).
    pub(super) local_depth: u64,
}

impl Entry {
    /// The entry naming `segment` at local depth `local_depth`.
    #[inline]
    pub(super) const fn new(segment: u64, local_depth: u64) -> Entry {
        Entry {
            segment,
            local_depth,
        }
    }

    /// The entry stored as `word`.
    #[inline]
    pub(super) const fn from_word(word: u64) -> Entry {
        Entry {
            segment: word & !DEPTH_MASK,
            local_depth: word & DEPTH_MASK,
        }
    }

    /// The word that stores this entry.
    #[inline]
    pub(super) const fn word(self) -> u64 {
        self.segment | self.local_depth
    }
}

/// The shape of every segment of a table: `buckets` cache-line buckets (a power of two) of
/// [`SLOTS_PER_BUCKET`] slots, nothing else. A probing window is [`PROBE_BUCKETS`] buckets
/// from a key's home bucket on, wrapping inside the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SegmentShape {
    buckets: u64,
}

impl SegmentShape {
    /// Segments of `buckets` buckets (a power of two: see `valid_bucket_count`).
    #[inline]
    pub(super) const fn new(buckets: u64) -> SegmentShape {
        SegmentShape { buckets }
    }

    /// Buckets per segment.
    #[inline]
    pub(super) const fn buckets(self) -> u64 {
        self.buckets
    }

    /// Bytes of a segment.
    #[inline]
    pub(super) const fn bytes(self) -> u64 {
        self.buckets * BUCKET_BYTES
    }

    /// Words of a segment.
    #[inline]
    pub(super) const fn words(self) -> usize {
        (self.buckets * WORDS_PER_BUCKET) as usize
    }

    /// The mask that wraps a bucket number inside the segment.
    #[inline]
    pub(super) const fn mask(self) -> u64 {
        self.buckets - 1
    }

    /// The home bucket of hash `h`: its least significant bits.
    #[inline]
    pub(super) const fn home(self, h: u64) -> u64 {
        h & self.mask()
    }

    /// The bucket `step` buckets after `home`, wrapping inside the segment.
    #[inline]
    pub(super) const fn bucket_after(self, home: u64, step: u64) -> u64 {
        (home + step) & self.mask()
    }

    /// How many buckets after `home` bucket `bucket` is (wrapping): 0 for the home bucket.
    #[inline]
    pub(super) const fn distance(self, home: u64, bucket: u64) -> u64 {
        bucket.wrapping_sub(home) & self.mask()
    }

    /// Offset of slot `slot` of bucket `bucket` of the segment at `segment`.
    #[inline]
    pub(super) const fn slot(self, segment: u64, bucket: u64, slot: u64) -> u64 {
        segment + bucket * BUCKET_BYTES + slot * SLOT_BYTES
    }

    /// Offsets of the slots of `h`'s probing window in the segment at `segment`, in probing
    /// order.
    pub(super) fn window(self, segment: u64, h: u64) -> impl Iterator<Item = u64> {
        let home = self.home(h);
        (0..PROBE_BUCKETS).flat_map(move |step| {
            let bucket = self.bucket_after(home, step);
            (0..SLOTS_PER_BUCKET).map(move |s| self.slot(segment, bucket, s))
        })
    }
}

/// Index, among a segment's words, of bucket `bucket`'s first word (its first key).
#[inline(always)]
pub(super) const fn bucket_word(bucket: u64) -> usize {
    (bucket * WORDS_PER_BUCKET) as usize
}

/// Index, among a segment's words, of the key of slot `slot` of the bucket whose first word is
/// `first`.
#[inline(always)]
pub(super) const fn key_word(first: usize, slot: usize) -> usize {
    first + 2 * slot
}

/// Index of the value word of the slot whose key word is `key`.
#[inline(always)]
pub(super) const fn value_word(key: usize) -> usize {
    key + 1
}

/// Offset of word `word` of the segment at `segment`.
#[inline(always)]
pub(super) const fn segment_word_offset(segment: u64, word: usize) -> u64 {
    segment + 8 * word as u64
}

/// Offset of the value word of the slot at `slot` (the word after its key).
#[inline(always)]
pub(super) const fn value_of(slot: u64) -> u64 {
    slot + 8
}

/// Index, among the pool's words, of the word at pool offset `offset` (8-byte aligned).
#[inline(always)]
pub(super) const fn pool_word(offset: u64) -> usize {
    (offset / 8) as usize
}

/// The key of slot `slot` of a bucket read as one line.
#[inline(always)]
pub(super) const fn line_key(line: &[u64; 8], slot: usize) -> u64 {
    line[2 * slot]
}

/// The value of slot `slot` of a bucket read as one line.
#[cfg(test)]
#[inline(always)]
pub(super) const fn line_value(line: &[u64; 8], slot: usize) -> u64 {
    line[2 * slot + 1]
}

/// The keys of a bucket read as one line, in slot order.
#[cfg(test)]
#[inline(always)]
pub(super) const fn line_keys(line: &[u64; 8]) -> [u64; SLOTS_PER_BUCKET as usize] {
    [line[0], line[2], line[4], line[6]]
}

/// The `(key, value)` pairs of a segment read as bytes, in slot order.
pub(super) fn slots_of(bytes: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    bytes
        .chunks_exact(SLOT_BYTES as usize)
        .map(|s| (word_of(&s[0..8]), word_of(&s[8..16])))
}

/// Write `(key, value)` into slot `index` (counting from the segment's first slot) of a
/// segment read as bytes.
pub(super) fn set_slot_of(bytes: &mut [u8], index: usize, key: u64, value: u64) {
    let at = index * SLOT_BYTES as usize;
    bytes[at..at + 8].copy_from_slice(&key.to_le_bytes());
    bytes[at + 8..at + 16].copy_from_slice(&value.to_le_bytes());
}

/// The little-endian word of 8 bytes.
fn word_of(bytes: &[u8]) -> u64 {
    u64::from_le_bytes(bytes.try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    //! Pure arithmetic: these run under Miri (`cargo +nightly miri test -p pmem-structures
    //! --lib cceh::layout`).

    use super::*;

    #[test]
    fn the_root_words_follow_each_other_from_its_offset() {
        let root = Root::at(0x1000);
        assert_eq!(root.offset(), 0x1000);
        assert_eq!(root.magic(), 0x1000);
        assert_eq!(root.directory(), 0x1008);
        assert_eq!(root.buckets_per_segment(), 0x1010);
        assert_eq!(root.retired(), 0x1018);
        assert_eq!(root.retired() + 8, root.offset() + super::super::ROOT_BYTES);
    }

    #[test]
    fn a_root_image_holds_magic_directory_buckets_and_no_retired_directory() {
        let image = Root::image(0xabc0, 256);
        assert_eq!(&image[0..8], b"CCEH\0v01");
        assert_eq!(word_of(&image[8..16]), 0xabc0);
        assert_eq!(word_of(&image[16..24]), 256);
        assert_eq!(word_of(&image[24..32]), 0);
    }

    #[test]
    fn directory_entries_follow_the_depth_word() {
        let dir = Directory::at(0x2000);
        assert_eq!(dir.offset(), 0x2000);
        assert_eq!(dir.depth(), 0x2000);
        assert_eq!(dir.entry(0), 0x2008);
        assert_eq!(dir.entry(5), 0x2030);
        assert_eq!(Directory::bytes(0), 16);
        assert_eq!(Directory::bytes(3), 72);
        assert_eq!(Directory::entries_bytes(3), 64);
        // The last entry of a directory of depth 3 is its last word.
        assert_eq!(dir.entry(7) + 8, dir.offset() + Directory::bytes(3));
    }

    #[test]
    fn a_directory_image_reads_back_as_its_entries() {
        let entries = [Entry::new(0x4000, 1), Entry::new(0x8040, 1)];
        let image = Directory::image(1, entries);
        assert_eq!(image.len() as u64, Directory::bytes(1));
        assert_eq!(word_of(&image[0..8]), 1);
        let back: Vec<Entry> = Directory::entries_from(&image[8..]).collect();
        assert_eq!(back, entries);
    }

    #[test]
    fn an_entry_packs_the_local_depth_into_the_segments_low_bits() {
        let entry = Entry::new(0x1_0000_0040, 58);
        assert_eq!(entry.word(), 0x1_0000_0040 | 58);
        assert_eq!(Entry::from_word(entry.word()), entry);
        assert_eq!(Entry::from_word(0x7fc0 | 63).segment, 0x7fc0);
        assert_eq!(Entry::from_word(0x7fc0 | 63).local_depth, 63);
    }

    #[test]
    fn a_segment_is_its_buckets_of_four_slots() {
        let shape = SegmentShape::new(16);
        assert_eq!(shape.buckets(), 16);
        assert_eq!(shape.bytes(), 1024);
        assert_eq!(shape.words(), 128);
        assert_eq!(shape.mask(), 15);
        assert_eq!(shape.slot(0x4000, 0, 0), 0x4000);
        assert_eq!(shape.slot(0x4000, 1, 0), 0x4040);
        assert_eq!(shape.slot(0x4000, 15, 3), 0x4000 + 1024 - 16);
        assert_eq!(value_of(shape.slot(0x4000, 2, 1)), 0x4098);
    }

    #[test]
    fn a_window_is_four_buckets_from_home_wrapping_inside_the_segment() {
        let shape = SegmentShape::new(16);
        let h = 0xdead_beef_0000_000e; // home bucket 14
        assert_eq!(shape.home(h), 14);
        let window: Vec<u64> = shape.window(0x4000, h).collect();
        let expected: Vec<u64> = [14, 15, 0, 1]
            .iter()
            .flat_map(|&b| (0..4).map(move |s| 0x4000 + b * 64 + s * 16))
            .collect();
        assert_eq!(window, expected);
        assert_eq!(shape.bucket_after(14, 3), 1);
        assert_eq!(shape.distance(14, 1), 3);
        assert_eq!(shape.distance(3, 3), 0);
    }

    #[test]
    fn word_indices_and_offsets_agree() {
        let shape = SegmentShape::new(8);
        let segment = 0x4000;
        for bucket in 0..shape.buckets() {
            for s in 0..SLOTS_PER_BUCKET as usize {
                let key = key_word(bucket_word(bucket), s);
                let slot = shape.slot(segment, bucket, s as u64);
                assert_eq!(segment_word_offset(segment, key), slot);
                assert_eq!(
                    segment_word_offset(segment, value_word(key)),
                    value_of(slot)
                );
                assert_eq!(
                    pool_word(slot) - pool_word(segment),
                    key,
                    "pool and segment word indices differ by the segment's"
                );
            }
        }
    }

    #[test]
    fn a_line_is_four_keys_each_followed_by_its_value() {
        let line = [1, 10, 2, 20, 3, 30, 4, 40];
        assert_eq!(line_keys(&line), [1, 2, 3, 4]);
        assert_eq!(line_key(&line, 2), 3);
        assert_eq!(line_value(&line, 2), 30);
        let bytes: Vec<u8> = line.iter().flat_map(|w| w.to_le_bytes()).collect();
        let slots: Vec<(u64, u64)> = slots_of(&bytes).collect();
        assert_eq!(slots, [(1, 10), (2, 20), (3, 30), (4, 40)]);
        let mut copy = vec![0u8; bytes.len()];
        for (i, (k, v)) in slots.into_iter().enumerate() {
            set_slot_of(&mut copy, i, k, v);
        }
        assert_eq!(copy, bytes);
    }
}
