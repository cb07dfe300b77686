//! The ordered byte-key map's bytes on the media: the only file that knows its layer headers.
//!
//! # Format version 3 (this build)
//!
//! **Root object** ([`super::ROOT_BYTES`], 64-byte aligned):
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic ([`crate::kind::StructureKind::RecordBTreeMap`]) |
//! | 8 | format version: 3 |
//! | 16 | the intent area's offset |
//! | 64..128 | layer 0's FAST&FAIR root object |
//!
//! **Intent area**: 16 lines of 64 bytes (`records/intent.rs`), each
//! `[new record, its size, old record, its size, layer word, retire word, 0, 0]`. The *layer
//! word* names a layer being made and not yet published; the *retire word* names a layer
//! emptied by removes that is being unlinked, or is unlinked and waits for its readers before
//! its blocks are freed. The transaction that frees a layer clears the word that names it, so
//! neither ever names a freed layer; at open each layer a word names is kept if a walk reaches
//! it and freed if not (then the word is cleared).
//!
//! **A layer below the top** is a heap block holding a FAST&FAIR root object at 0, keyed by the
//! slice words of key bytes `7d .. 7d + 7` (`d`, the layer's *depth*; see [`super`]), reached
//! from its parent layer's entry under the slice word its keys share there (the entry's value
//! is the block's offset with bit 0 set). Every key under a layer of depth `d` is longer than
//! `7d` bytes. The block is one of:
//!
//! * **64 bytes**: a *plain* layer. Its depth is its parent's plus one: it skips no key bytes.
//! * **[`HEADER_END`] bytes or more**: a *path-compressed* layer, which skips the key bytes
//!   between its parent's slice and its own (all its keys share them), so that keys sharing a
//!   long run cost one layer, not one per 7 bytes:
//!
//!   | offset | field |
//!   |---|---|
//!   | 0..64 | FAST&FAIR root object |
//!   | 64 | [`LAYER_MAGIC`] |
//!   | 72 | depth `d` |
//!   | 80 | `skip_from`: the first key byte stored here, a multiple of 7 |
//!   | 88 | length of the skipped bytes, `7d - skip_from` (u32) |
//!   | 92 | CRC-32C of bytes 64..92 and the skipped bytes (u32) |
//!   | 96.. | the skipped bytes: key bytes `skip_from .. 7d`, shared by every key of the layer |
//!
//!   The header is written once, in the transaction that makes the layer, and never changed.
//!   `skip_from` is the end of the parent's slice when the layer was made; a layer made later
//!   between the two (when a key leaves the skipped run part way) takes over the first of
//!   those bytes, so a descent compares only the bytes from its parent's slice end to `7d`.
//!
//! # Older formats
//!
//! Version 2 wrote plain layers only, and version 3 reads them as they are: a version 2 map is
//! opened and its version word set to 3 (nothing else changes; a version 2 build then refuses
//! it, since it could not read the compressed layers written from then on). Version 1 (records
//! without checksums) is refused (`records/head.rs`).

use pmem_ordering::{isa, Backend};
use pmem_undo_log::{Heap, Tx, TxError};

use super::SLICE;
use crate::fastfair::ROOT_BYTES as TREE_ROOT_BYTES;
use crate::records::MAX_KEY_BYTES;

/// The format version this build writes, and the one before path compression (opened and
/// upgraded in place): kept with every map's format versions in `head.rs`.
pub(crate) use super::super::head::{
    TREE_VERSION as VERSION, TREE_VERSION_WITHOUT_COMPRESSION as VERSION_WITHOUT_COMPRESSION,
};

/// Bytes of a plain layer's block (a FAST&FAIR root object).
pub(crate) const PLAIN_BYTES: u64 = TREE_ROOT_BYTES;
/// Marks a compressed layer's header.
pub(crate) const LAYER_MAGIC: u64 = u64::from_le_bytes(*b"PMLAYSK3");
/// Where a compressed layer's header starts.
const HEADER_AT: u64 = TREE_ROOT_BYTES;
/// Bytes of the header's fields before the skipped bytes, from the block's start.
pub(crate) const HEADER_END: u64 = 96;

/// How a layer sits under its parent: its depth and the key bytes it skips.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LayerHeader {
    /// Its slice index: it is keyed by key bytes `7 * depth .. 7 * depth + 7`.
    pub depth: usize,
    /// The first key byte of `skipped`.
    pub skip_from: usize,
    /// Key bytes `skip_from .. 7 * depth`, shared by all its keys (empty for a plain layer).
    pub skipped: Vec<u8>,
}

impl LayerHeader {
    /// A layer of depth `depth` under a parent whose slice ends at `parent_end`, all of whose
    /// keys start with `key`'s bytes up to `7 * depth`.
    pub(crate) fn new(depth: usize, parent_end: usize, key: &[u8]) -> LayerHeader {
        LayerHeader {
            depth,
            skip_from: parent_end,
            skipped: key[parent_end..SLICE * depth].to_vec(),
        }
    }

    /// Whether the layer skips nothing (a 64-byte block, as format 2 wrote every layer).
    pub(crate) fn is_plain(&self) -> bool {
        self.skipped.is_empty()
    }

    /// Bytes of the layer's block.
    pub(crate) fn block_bytes(&self) -> u64 {
        if self.is_plain() {
            PLAIN_BYTES
        } else {
            HEADER_END + self.skipped.len() as u64
        }
    }

    /// The header's bytes (from offset 64 of the block), checksum included.
    fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity((HEADER_END - HEADER_AT) as usize + self.skipped.len());
        b.extend_from_slice(&LAYER_MAGIC.to_le_bytes());
        b.extend_from_slice(&(self.depth as u64).to_le_bytes());
        b.extend_from_slice(&(self.skip_from as u64).to_le_bytes());
        b.extend_from_slice(&(self.skipped.len() as u32).to_le_bytes());
        let crc = isa::crc32c_append(isa::crc32c(&b), &self.skipped);
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&self.skipped);
        b
    }

    /// Inside the transaction that makes the layer: zero its FAST&FAIR root object (for
    /// `FastFair::create`) and write its header, at `block` (fresh, [`Self::block_bytes`]).
    pub(crate) fn write<B: Backend>(&self, tx: &Tx<'_, B>, block: u64) -> Result<(), TxError> {
        tx.write(block, &[0u8; TREE_ROOT_BYTES as usize])?;
        if !self.is_plain() {
            tx.write(block + HEADER_AT, &self.bytes())?;
        }
        Ok(())
    }

    /// Read and check the header of the layer at `block`, reached from a parent of depth
    /// `parent_depth`: why it cannot be the layer's, if it cannot.
    pub(crate) fn read<B: Backend>(
        heap: &Heap<B>,
        block: u64,
        parent_depth: usize,
    ) -> Result<LayerHeader, String> {
        let parent_end = SLICE * (parent_depth + 1);
        let size = heap
            .block_size(block)
            .ok_or_else(|| format!("layer {block:#x} is not an allocated block"))?;
        if size < HEADER_END {
            return match size {
                PLAIN_BYTES => Ok(LayerHeader {
                    depth: parent_depth + 1,
                    skip_from: parent_end,
                    skipped: Vec::new(),
                }),
                _ => Err(format!("layer {block:#x} is a block of {size} bytes")),
            };
        }
        let pool = heap.pool();
        let mut fields = [0u8; (HEADER_END - HEADER_AT) as usize];
        pool.read_bytes(block + HEADER_AT, &mut fields)
            .map_err(|e| e.to_string())?;
        let word = |at: usize| u64::from_le_bytes(fields[at..at + 8].try_into().expect("8"));
        if word(0) != LAYER_MAGIC {
            return Err(format!(
                "layer {block:#x} is a block of {size} bytes without a layer header"
            ));
        }
        let (depth, skip_from) = (word(8), word(16));
        let len = u32::from_le_bytes(fields[24..28].try_into().expect("4")) as u64;
        let crc = u32::from_le_bytes(fields[28..32].try_into().expect("4"));
        let limit = (MAX_KEY_BYTES / SLICE) as u64 + 1;
        let shape_ok = depth <= limit
            && skip_from.is_multiple_of(SLICE as u64)
            && skip_from <= parent_end as u64
            && depth * SLICE as u64 >= parent_end as u64
            && len == depth * SLICE as u64 - skip_from
            && HEADER_END + len <= size;
        if !shape_ok {
            return Err(format!(
                "layer {block:#x} under a layer of depth {parent_depth} claims depth {depth}, \
                 skipped bytes from {skip_from}, {len} of them, in a block of {size} bytes"
            ));
        }
        let mut skipped = vec![0u8; len as usize];
        pool.read_bytes(block + HEADER_END, &mut skipped)
            .map_err(|e| e.to_string())?;
        let computed = isa::crc32c_append(isa::crc32c(&fields[..28]), &skipped);
        if computed != crc {
            return Err(format!(
                "layer {block:#x}'s header checksum is {crc:#010x}, its bytes' is \
                 {computed:#010x}"
            ));
        }
        Ok(LayerHeader {
            depth: depth as usize,
            skip_from: skip_from as usize,
            skipped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_holds_the_bytes_between_the_slices() {
        let key: Vec<u8> = (0..60u8).collect();
        let h = LayerHeader::new(5, 14, &key);
        assert_eq!(h.skipped, (14..35u8).collect::<Vec<_>>());
        assert_eq!(h.block_bytes(), HEADER_END + 21);
        let plain = LayerHeader::new(3, 21, &key);
        assert!(plain.is_plain());
        assert_eq!(plain.block_bytes(), PLAIN_BYTES);
        let bytes = h.bytes();
        assert_eq!(bytes.len() as u64, HEADER_END - HEADER_AT + 21);
        assert_eq!(&bytes[..8], b"PMLAYSK3");
    }
}
