//! One layer in DRAM: its FAST&FAIR tree, where it sits in the keys (its depth and the key
//! bytes it skips, read once from its header: see `layout.rs`), and whether it is dead (emptied
//! and being unlinked: no key may enter it again).

use std::cmp::Ordering as KeyOrder;
use std::sync::atomic::{AtomicBool, Ordering};

use pmem_ordering::Backend;

use super::layout::LayerHeader;
use super::SLICE;
use crate::fastfair::FastFair;

/// A layer of the trie (see the module docs of [`super`]).
pub(crate) struct Layer<B: Backend> {
    /// Its entries: slice word -> record, or layer root with bit 0 set.
    pub(super) tree: FastFair<B>,
    /// Its block: the FAST&FAIR root object's offset (the top layer's sits in the map's root
    /// object).
    pub(super) root: u64,
    /// Where it sits in the keys (depth 0, nothing skipped, for the top layer).
    pub(super) header: LayerHeader,
    /// Set, under the lock of its only leaf, when it is found empty and about to be unlinked
    /// (`retire.rs`): a writer that finds it set goes back to the top.
    dead: AtomicBool,
}

impl<B: Backend> Layer<B> {
    /// The layer at `root` whose tree is `tree`.
    pub(super) fn new(tree: FastFair<B>, root: u64, header: LayerHeader) -> Self {
        Layer {
            tree,
            root,
            header,
            dead: AtomicBool::new(false),
        }
    }

    /// Its depth: the slice of the keys it is keyed by.
    #[inline]
    pub(super) fn depth(&self) -> usize {
        self.header.depth
    }

    /// The first key byte of its slice.
    #[inline]
    pub(super) fn start(&self) -> usize {
        SLICE * self.header.depth
    }

    /// Whether it is dead (see the field).
    #[inline]
    pub(super) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Mark it dead (under the lock of its only leaf, found empty), or alive again (its unlink
    /// failed, with the layer still in its parent).
    pub(super) fn set_dead(&self, dead: bool) {
        self.dead.store(dead, Ordering::SeqCst);
    }

    /// Whether `key`, which reached this layer from a parent whose slice ends at `parent_end`,
    /// belongs under it: longer than its start, with the bytes it skips.
    #[inline]
    pub(super) fn admits(&self, key: &[u8], parent_end: usize) -> bool {
        if self.header.skipped.is_empty() {
            // A plain layer: the parent's word (a word of keys going on) said it all.
            return true;
        }
        self.compare_skipped(key, parent_end) == KeyOrder::Equal
    }

    /// How `key` (reached from a parent whose slice ends at `parent_end`) compares with the
    /// keys of this layer: `Equal` if it belongs under it, `Less` if it sorts before all of
    /// them, `Greater` if after.
    pub(super) fn compare_skipped(&self, key: &[u8], parent_end: usize) -> KeyOrder {
        let start = self.start();
        let skipped = &self.header.skipped[parent_end - self.header.skip_from..];
        let own = &key[parent_end.min(key.len())..start.min(key.len())];
        match own.cmp(skipped) {
            // Equal up to its start and ending there: shorter than every key of the layer.
            KeyOrder::Equal if key.len() <= start => KeyOrder::Less,
            // A proper prefix of the skipped bytes sorts first too; `cmp` says so.
            order => order,
        }
    }

    /// The slice word, at depth `depth` (between its parent's and its own), of the keys of this
    /// layer: the skipped bytes there, going on.
    pub(super) fn path_word(&self, depth: usize) -> u64 {
        let at = SLICE * depth - self.header.skip_from;
        let mut bytes = [0u8; 8];
        bytes[..SLICE].copy_from_slice(&self.header.skipped[at..at + SLICE]);
        bytes[SLICE] = 8;
        u64::from_be_bytes(bytes)
    }
}
