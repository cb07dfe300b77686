//! [`BTreeLayout`]: how a new ordered map keeps its pairs, chosen at creation.

use crate::fastfair::FastFairConfig;
use crate::leafmap::LeafMapConfig;

/// How a new [`BTreeMap`](super::BTreeMap) keeps its pairs: the argument of
/// [`Store::btree_map_with`](super::Store::btree_map_with), recorded in the store with the map
/// (an existing map keeps the layout it was made with, whatever is asked when it is opened
/// again: [`BTreeMap::layout`](super::BTreeMap::layout) tells which it has).
///
/// A [`FastFairConfig`] converts into [`BTreeLayout::Trees`], a [`LeafMapConfig`] into
/// [`BTreeLayout::Leaves`], so `btree_map_with(name, FastFairConfig { .. })` reads as before.
///
/// Which to choose, as measured (pmem-bench's `byte-keys` section, 1M random 16-byte keys and
/// 100-byte values on `/dev/shm`, one thread, a loaded machine; the leaf map raw beside the
/// store's map of records, `docs/results/byte-keys.md`): 100-pair scans 2.8x faster in
/// leaves (73 k/s against 26 k/s), inserts 1.1x, a 50/50 get/upsert mix 1.6x, gets level
/// (0.95x). But the trees' reads take no lock, while the leaves take a map-wide reader-writer
/// lock (a write holds it across its two fences, a [`WriteBatch`](super::WriteBatch) across
/// its apply, and readers wait for it). Both layouts join write batches. The default stays
/// `Trees`: choose `Leaves` for a map read mostly by range scans, or written in pipelined
/// batches (the measurements of `docs/write-batches.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BTreeLayout {
    /// FAST&FAIR (FAST'18 FAST&FAIR) with this node size and shift policy: a map whose key
    /// and value both fit 8 bytes keeps them in the tree's slots, any other map is a trie of
    /// such trees keyed by 7 key bytes each, whose entries point at records
    /// ([`crate::records`]). The default.
    Trees(FastFairConfig),
    /// Pairs inline in persistent leaves of this shape (sorted across leaves, unsorted
    /// inside one), inner nodes in DRAM rebuilt when the store opens (SIGMOD'16 FPTree,
    /// VLDB'20 LB+-tree; [`crate::leafmap`]), for keys and values of any type: a pair larger
    /// than a slot lives in a record of its own. Opening the store reads every leaf, so it
    /// takes time in proportion to the map's size.
    Leaves(LeafMapConfig),
}

impl BTreeLayout {
    /// [`BTreeLayout::Leaves`] with the default leaves (8 KiB, 63 slots of 128 bytes: a
    /// 16-byte key and a 100-byte value fit a slot).
    pub fn leaves() -> BTreeLayout {
        BTreeLayout::Leaves(LeafMapConfig::default())
    }
}

impl Default for BTreeLayout {
    /// Trees with FAST&FAIR's default nodes (512 bytes, FAST shifts).
    fn default() -> Self {
        BTreeLayout::Trees(FastFairConfig::default())
    }
}

impl From<FastFairConfig> for BTreeLayout {
    fn from(config: FastFairConfig) -> Self {
        BTreeLayout::Trees(config)
    }
}

impl From<LeafMapConfig> for BTreeLayout {
    fn from(config: LeafMapConfig) -> Self {
        BTreeLayout::Leaves(config)
    }
}
