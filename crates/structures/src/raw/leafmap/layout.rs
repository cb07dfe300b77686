//! The bytes of the leaf map on the media: its root object, a leaf's header and a slot. The
//! only file that knows them (the tables are in the module docs, `mod.rs`).

use pmem_ordering::{Backend, Pool};

use crate::kind::StructureKind;
use crate::records::RecordMapError;

/// Bytes of the root object.
pub const ROOT_BYTES: u64 = 64;
/// The format version this build writes and reads.
pub(crate) const VERSION: u64 = 1;
/// Bytes of a leaf's header (the bitmap, the next leaf, the tag; the rest zero).
pub(crate) const LEAF_HEADER: u64 = 64;
/// Bytes of a slot's header: checksum, key length, value length.
pub(crate) const SLOT_HEADER: usize = 8;
/// Slots of a leaf at most: one bit each in the 8-byte bitmap.
pub(crate) const MAX_SLOTS: u64 = 64;
/// The key-length bit that marks a slot whose pair lives in a record of its own.
const OUT_OF_LINE: u16 = 0x8000;
/// What a leaf's tag word holds, XORed with its map's root offset: a leaf of another map, or
/// a block that is no leaf, is told apart from this map's leaves.
const LEAF_MAGIC: u64 = u64::from_le_bytes(*b"LEAFNODE");
/// Root fields the root's checksum covers (magic, version, head, leaf and slot bytes).
const ROOT_CHECKED: usize = 40;

/// The shape of a map's leaves, fixed when it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafMapConfig {
    /// Bytes of a leaf block: a multiple of 64, at most 1 MiB.
    pub leaf_bytes: u64,
    /// Bytes of a slot: a multiple of 8 from 32 to 4096. A pair whose key and value fit in
    /// `slot_bytes - 8` bytes is kept in its slot; a larger one in a record of its own.
    pub slot_bytes: u64,
}

impl Default for LeafMapConfig {
    /// 8 KiB leaves of 63 slots of 128 bytes: pairs of up to 120 bytes inline (a 16-byte key
    /// and a 100-byte value fit).
    fn default() -> Self {
        LeafMapConfig {
            leaf_bytes: 8192,
            slot_bytes: 128,
        }
    }
}

impl LeafMapConfig {
    /// Slots per leaf: as many as fit, at most 64.
    pub fn slots(&self) -> u64 {
        (self.leaf_bytes.saturating_sub(LEAF_HEADER) / self.slot_bytes.max(1)).min(MAX_SLOTS)
    }

    /// Bytes of key and value a slot holds inline.
    pub fn inline_bytes(&self) -> usize {
        self.slot_bytes as usize - SLOT_HEADER
    }

    /// Whether the shape is one a map can have.
    pub(crate) fn check(&self) -> Result<(), String> {
        if !self.slot_bytes.is_multiple_of(8) || !(32..=4096).contains(&self.slot_bytes) {
            return Err(format!(
                "slot_bytes {} must be a multiple of 8 from 32 to 4096",
                self.slot_bytes
            ));
        }
        if !self.leaf_bytes.is_multiple_of(64) || self.leaf_bytes > 1 << 20 {
            return Err(format!(
                "leaf_bytes {} must be a multiple of 64 and at most 1 MiB",
                self.leaf_bytes
            ));
        }
        if self.slots() < 2 {
            return Err(format!(
                "a leaf of {} bytes holds {} slots of {} bytes: at least 2 are needed",
                self.leaf_bytes,
                self.slots(),
                self.slot_bytes
            ));
        }
        Ok(())
    }

    /// Offset of slot `slot` of the leaf at `leaf`.
    #[inline]
    pub(crate) fn slot_at(&self, leaf: u64, slot: usize) -> u64 {
        leaf + LEAF_HEADER + slot as u64 * self.slot_bytes
    }
}

/// The bits of the first `n` slots.
#[inline]
pub(crate) fn low_bits(n: u64) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The tag word of a leaf of the map at `root`.
pub(crate) fn leaf_tag(root: u64) -> u64 {
    LEAF_MAGIC ^ root
}

/// The bytes of a leaf's header: `bitmap`, `next`, the tag of the map at `root`.
pub(crate) fn leaf_header(root: u64, bitmap: u64, next: u64) -> [u8; LEAF_HEADER as usize] {
    let mut h = [0u8; LEAF_HEADER as usize];
    h[0..8].copy_from_slice(&bitmap.to_le_bytes());
    h[8..16].copy_from_slice(&next.to_le_bytes());
    h[16..24].copy_from_slice(&leaf_tag(root).to_le_bytes());
    h
}

/// The root object of a map whose first leaf is `head`.
pub(crate) fn root_bytes(head: u64, config: LeafMapConfig) -> [u8; ROOT_BYTES as usize] {
    let mut r = [0u8; ROOT_BYTES as usize];
    r[0..8].copy_from_slice(&StructureKind::LeafMap.magic().to_le_bytes());
    r[8..16].copy_from_slice(&VERSION.to_le_bytes());
    r[16..24].copy_from_slice(&head.to_le_bytes());
    r[24..32].copy_from_slice(&config.leaf_bytes.to_le_bytes());
    r[32..40].copy_from_slice(&config.slot_bytes.to_le_bytes());
    let crc = crc32c::crc32c(&r[..ROOT_CHECKED]) as u64;
    r[40..48].copy_from_slice(&crc.to_le_bytes());
    r
}

/// What a root object holds, checked: its first leaf and the leaves' shape.
pub(crate) struct Root {
    pub head: u64,
    pub config: LeafMapConfig,
}

/// Read and check the root object at `root`: the kind, the version, the checksum and the shape.
pub(crate) fn read_root<B: Backend>(pool: &Pool<B>, root: u64) -> Result<Root, RecordMapError> {
    let mut r = [0u8; ROOT_BYTES as usize];
    pool.read_bytes(root, &mut r)?;
    let word = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().expect("8 bytes"));
    let magic = word(0);
    if magic != StructureKind::LeafMap.magic() {
        return Err(RecordMapError::WrongKind {
            root,
            found: crate::kind::describe_magic(magic),
            wanted: StructureKind::LeafMap,
        });
    }
    let corrupt = |reason: String| RecordMapError::Corrupt { root, reason };
    let version = word(8);
    if version != VERSION {
        return Err(corrupt(format!(
            "format version {version}, this build reads {VERSION}"
        )));
    }
    let computed = crc32c::crc32c(&r[..ROOT_CHECKED]) as u64;
    if word(40) != computed {
        return Err(corrupt(format!(
            "its root object's checksum is {:#x}, its bytes' is {computed:#x}",
            word(40)
        )));
    }
    let config = LeafMapConfig {
        leaf_bytes: word(24),
        slot_bytes: word(32),
    };
    config
        .check()
        .map_err(|e| corrupt(format!("its leaf shape is not one a map has: {e}")))?;
    Ok(Root {
        head: word(16),
        config,
    })
}

/// A slot's header, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotHeader {
    /// The checksum it records.
    pub crc: u32,
    /// Bytes of the key (inline pairs).
    pub key_len: usize,
    /// Bytes of the value (inline pairs).
    pub value_len: usize,
    /// The pair lives in a record, whose offset follows the header.
    pub out_of_line: bool,
}

impl SlotHeader {
    /// Parse the first 8 bytes of a slot of `inline_bytes` bytes of payload; `None` if the
    /// lengths cannot be a slot's.
    pub fn parse(word: u64, inline_bytes: usize) -> Option<SlotHeader> {
        let b = word.to_le_bytes();
        let crc = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let key_field = u16::from_le_bytes([b[4], b[5]]);
        let value_len = u16::from_le_bytes([b[6], b[7]]) as usize;
        if key_field == OUT_OF_LINE {
            return (value_len == 0).then_some(SlotHeader {
                crc,
                key_len: 0,
                value_len: 0,
                out_of_line: true,
            });
        }
        let key_len = key_field as usize;
        (key_field & OUT_OF_LINE == 0 && key_len + value_len <= inline_bytes).then_some(
            SlotHeader {
                crc,
                key_len,
                value_len,
                out_of_line: false,
            },
        )
    }
}

/// A slot's checksum of `bytes` (its bytes from 4 to the payload's end): the low 32 bits of
/// their XXH3-64. Not CRC-32C as elsewhere: a scan checks one slot per pair, and on slots of
/// about 120 bytes XXH3 is several times faster than the CRC's serial chain of instructions.
#[inline]
pub(crate) fn slot_checksum(bytes: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64(bytes) as u32
}

/// The header of an inline slot of `key` and `value` (which fit), its checksum included.
pub(crate) fn inline_header(key: &[u8], value: &[u8]) -> [u8; SLOT_HEADER] {
    let mut lens = [0u8; 4];
    lens[0..2].copy_from_slice(&(key.len() as u16).to_le_bytes());
    lens[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    header_with(lens, key, value)
}

/// The slot (header and record offset) of a pair kept in the record at `record`.
pub(crate) fn out_of_line_slot(record: u64) -> [u8; SLOT_HEADER + 8] {
    let mut lens = [0u8; 4];
    lens[0..2].copy_from_slice(&OUT_OF_LINE.to_le_bytes());
    let offset = record.to_le_bytes();
    let h = header_with(lens, &offset, &[]);
    let mut slot = [0u8; SLOT_HEADER + 8];
    slot[..SLOT_HEADER].copy_from_slice(&h);
    slot[SLOT_HEADER..].copy_from_slice(&offset);
    slot
}

fn header_with(lens: [u8; 4], first: &[u8], second: &[u8]) -> [u8; SLOT_HEADER] {
    // The checksummed bytes in one piece, on the stack for the usual small slots.
    let len = 4 + first.len() + second.len();
    let mut small = [0u8; 256];
    let mut large = Vec::new();
    let bytes: &mut [u8] = if len <= small.len() {
        &mut small[..len]
    } else {
        large.resize(len, 0);
        &mut large
    };
    bytes[..4].copy_from_slice(&lens);
    bytes[4..4 + first.len()].copy_from_slice(first);
    bytes[4 + first.len()..].copy_from_slice(second);
    let crc = slot_checksum(bytes);
    let mut h = [0u8; SLOT_HEADER];
    h[0..4].copy_from_slice(&crc.to_le_bytes());
    h[4..8].copy_from_slice(&lens);
    h
}

/// The fingerprint of the key of hash `hash` (the DRAM index's, [`super::keys::KeyIndex`]):
/// one byte of it, bits the hash table's buckets do not depend on, kept per slot in DRAM so a
/// search of a leaf reads only the slots whose fingerprint matches (SIGMOD'16 FPTree).
#[inline]
pub(crate) fn fingerprint(hash: u64) -> u8 {
    (hash >> 32) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_headers_read_back_and_refuse_lengths_past_the_slot() {
        let h = inline_header(b"key", b"value");
        let parsed = SlotHeader::parse(u64::from_le_bytes(h), 8).expect("fits 8 bytes");
        assert_eq!((parsed.key_len, parsed.value_len), (3, 5));
        assert!(!parsed.out_of_line);
        let slot = [&h[..], b"keyvalue"].concat();
        assert_eq!(
            slot_checksum(&slot[4..]),
            parsed.crc,
            "over lengths, key, value"
        );
        assert_ne!(slot_checksum(&[&h[4..], b"keyvaluf"].concat()), parsed.crc);
        assert_eq!(SlotHeader::parse(u64::from_le_bytes(h), 7), None);
        let slot = out_of_line_slot(0x1240);
        let word = u64::from_le_bytes(slot[..8].try_into().unwrap());
        let parsed = SlotHeader::parse(word, 24).expect("an out-of-line slot");
        assert!(parsed.out_of_line);
        assert_eq!(slot_checksum(&slot[4..]), parsed.crc);
        // A key length with the out-of-line bit and more set is no slot's.
        let bad = u64::from_le_bytes(h) | (0x8001u64 << 32);
        assert_eq!(SlotHeader::parse(bad, 4000), None);
    }

    #[test]
    fn shapes_are_checked() {
        assert!(LeafMapConfig::default().check().is_ok());
        assert_eq!(LeafMapConfig::default().slots(), 63);
        let small = LeafMapConfig {
            leaf_bytes: 192,
            slot_bytes: 64,
        };
        assert_eq!(small.slots(), 2);
        assert!(small.check().is_ok());
        for bad in [(128, 64), (8192, 12), (8192, 8), (100, 32), (2 << 20, 128)] {
            let config = LeafMapConfig {
                leaf_bytes: bad.0,
                slot_bytes: bad.1,
            };
            assert!(config.check().is_err(), "{config:?}");
        }
        assert_eq!(low_bits(64), u64::MAX);
        assert_eq!(low_bits(3), 0b111);
    }
}
