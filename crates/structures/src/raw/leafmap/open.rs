//! Open: the root checked, the chain of leaves walked and checked, the DRAM index rebuilt. It
//! writes nothing: what a crash interrupted, the heap's open has rolled back.

use std::sync::RwLock;

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use super::index::{separator, Index, LeafBound};
use super::layout::{fingerprint, leaf_tag, low_bits, read_root, ROOT_BYTES};
use super::leaf::{key_prefix, Leaf, Slots};
use super::{LeafMap, Result};
use crate::records::layout as record_layout;
use crate::records::RecordMapError;

impl<B: Backend> LeafMap<B> {
    /// Open the map at `root` (after [`Heap::open`], which rolls back a structural change a
    /// crash interrupted): check its root and every leaf, read every live slot (a damaged one
    /// is remembered and reported by the reads that meet it, see the module docs), and
    /// rebuild the DRAM index. Reads only. A root of another kind is
    /// [`RecordMapError::WrongKind`]; a damaged root or chain, [`RecordMapError::Corrupt`].
    pub fn open(heap: &Heap<B>, root: u64) -> Result<Self> {
        let pool = heap.pool();
        if !root.is_multiple_of(64) {
            return Err(RecordMapError::InvalidConfig {
                reason: format!("root offset {root:#x} must be 64-byte aligned"),
            });
        }
        pool.check_range(root, ROOT_BYTES)?;
        let found = read_root(pool, root)?;
        let config = found.config;
        let corrupt = |reason: String| RecordMapError::Corrupt { root, reason };
        let slots = Slots { pool, config };
        let mut index = Index::new(config.leaf_bytes);
        let most_leaves = pool.size() / config.leaf_bytes;
        let mut previous_max: Option<Vec<u8>> = None;
        let mut previous_bound: Option<Vec<u8>> = None;
        let mut walked = 0u64;
        // Each live, undamaged slot's key hash, for the hash index once the walk is done.
        let mut located: Vec<(u64, u64)> = Vec::new();
        let mut at = found.head;
        while at != 0 {
            walked += 1;
            if walked > most_leaves {
                return Err(corrupt(format!(
                    "its chain of leaves is longer than the pool holds ({most_leaves}): a loop"
                )));
            }
            if !at.is_multiple_of(64)
                || heap.block_size(at).is_none_or(|s| s < config.leaf_bytes)
                || pool.check_range(at, config.leaf_bytes).is_err()
            {
                return Err(corrupt(format!(
                    "leaf {at:#x} is not an allocated, aligned block of {} bytes",
                    config.leaf_bytes
                )));
            }
            let words = pool.words(at, 3)?;
            let (bitmap, next, tag) = (words.load(0), words.load(1), words.load(2));
            if tag != leaf_tag(root) {
                return Err(corrupt(format!(
                    "block {at:#x} in its chain is not one of its leaves (tag {tag:#x})"
                )));
            }
            if bitmap & !low_bits(config.slots()) != 0 {
                return Err(corrupt(format!(
                    "leaf {at:#x}'s bitmap {bitmap:#x} names slots past its {}",
                    config.slots()
                )));
            }
            let mut leaf = Leaf::empty(at);
            leaf.bitmap = bitmap;
            let mut keyed: Vec<(Vec<u8>, u8)> = Vec::with_capacity(bitmap.count_ones() as usize);
            let mut live = bitmap;
            while live != 0 {
                let slot = live.trailing_zeros() as usize;
                live &= live - 1;
                let slot_at = config.slot_at(at, slot);
                match slots.pair(slot_at) {
                    Ok((key, _)) if record_owned(heap, &slots, slot_at, root)? => {
                        let hash = index.keys.hash(&key);
                        located.push((hash, slot_at));
                        leaf.fps[slot] = fingerprint(hash);
                        leaf.prefixes[slot] = key_prefix(&key);
                        keyed.push((key, slot as u8));
                    }
                    Ok(_) | Err(RecordMapError::CorruptRecord { .. }) => {
                        leaf.damaged |= 1u64 << slot;
                    }
                    Err(e) => return Err(e),
                }
            }
            keyed.sort_unstable();
            if keyed.windows(2).any(|w| w[0].0 == w[1].0) {
                return Err(corrupt(format!("leaf {at:#x} holds a key twice")));
            }
            if let (Some(max), Some((min, _))) = (&previous_max, keyed.first()) {
                if min <= max {
                    return Err(corrupt(format!(
                        "leaf {at:#x} holds a key that does not sort after the leaves before it"
                    )));
                }
            }
            let bound = match (&previous_max, keyed.first()) {
                _ if at == found.head => Vec::new(),
                (Some(max), Some((min, _))) => separator(max, min).to_vec(),
                (None, Some((min, _))) => min[..min.len().min(1)].to_vec(),
                // A leaf whose every pair is damaged: just above the keys before it.
                (max, None) => {
                    let mut above = max.clone().unwrap_or_default();
                    above.push(0);
                    above
                }
            };
            if previous_bound.as_ref().is_some_and(|b| *b >= bound) {
                return Err(corrupt(format!(
                    "leaf {at:#x} is out of order in its chain"
                )));
            }
            if at != found.head && keyed.is_empty() && leaf.damaged == 0 {
                return Err(corrupt(format!(
                    "leaf {at:#x} is empty: only the first leaf may be (an emptied leaf is \
                     unlinked in the transaction that empties it)"
                )));
            }
            for (i, (_, slot)) in keyed.iter().enumerate() {
                leaf.order[i] = *slot;
            }
            leaf.count = keyed.len() as u8;
            if leaf.damaged != 0 {
                index.damaged_leaves += 1;
            }
            index.len += keyed.len() as u64;
            if let Some((max, _)) = keyed.pop() {
                previous_max = Some(max);
            }
            previous_bound = Some(bound.clone());
            index.insert(LeafBound::new(&bound), leaf);
            at = next;
        }
        index.keys.extend(&located);
        if index.count() == 0 {
            return Err(corrupt("its first leaf is missing (offset 0)".into()));
        }
        Ok(LeafMap {
            heap: heap.clone(),
            root,
            config,
            head: found.head,
            index: RwLock::new(index),
        })
    }
}

/// Whether the pair of the slot at `slot` is inline, or in a record of the map at `root` that
/// is an allocated block of its size (else freeing it would free what the map does not own:
/// the slot counts as damaged).
fn record_owned<B: Backend>(
    heap: &Heap<B>,
    slots: &Slots<'_, B>,
    slot: u64,
    root: u64,
) -> Result<bool> {
    let Some(record) = slots.record_of(slot)? else {
        return Ok(true);
    };
    let line = record_layout::first_line(heap.pool(), record)?;
    Ok(line.header.owner == record_layout::owner_of(root)
        && heap
            .block_size(record)
            .is_some_and(|s| s >= line.header.record_bytes()))
}
