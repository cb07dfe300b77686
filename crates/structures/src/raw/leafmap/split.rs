//! The leaf map's structural changes, each one undo-log transaction: a full leaf split in two,
//! an emptied leaf unlinked and freed.

use pmem_ordering::{Backend, PPtr};

use super::index::{separator, Index, LeafBound};
use super::layout::{leaf_header, low_bits, LEAF_HEADER};
use super::leaf::Leaf;
use super::write::free_record;
use super::{LeafMap, Result};
use crate::records::RecordMapError;

impl<B: Backend> LeafMap<B> {
    /// Split the leaf whose bound is `bound`: a new leaf, linked after it, takes the upper
    /// half of its pairs (their slots copied as they are), in one transaction.
    pub(super) fn split(&self, index: &mut Index, bound: &[u8]) -> Result<()> {
        let pool = self.heap.pool();
        let leaf = index
            .get(bound)
            .ok_or_else(|| self.no_first_leaf())?
            .clone();
        let order = leaf.ordered();
        if order.len() < 2 {
            return Err(RecordMapError::Corrupt {
                root: self.root,
                reason: format!(
                    "leaf {:#x} is full but holds {} pairs it can move",
                    leaf.offset,
                    order.len()
                ),
            });
        }
        let half = order.len() / 2;
        let moved = &order[half..];
        let key_of = |slot: u8| {
            let at = self.config.slot_at(leaf.offset, slot as usize);
            self.slots().pair(at).map(|(key, _)| key)
        };
        let (last_kept, first_moved) = (key_of(order[half - 1])?, key_of(moved[0])?);
        let new_bound = LeafBound::new(separator(&last_kept, &first_moved));
        let next = pool.load_u64(leaf.offset + 8)?;
        let slot_bytes = self.config.slot_bytes as usize;
        let mut image = vec![0u8; LEAF_HEADER as usize + moved.len() * slot_bytes];
        image[..LEAF_HEADER as usize].copy_from_slice(&leaf_header(
            self.root,
            low_bits(moved.len() as u64),
            next,
        ));
        let mut moved_bits = 0u64;
        let mut fresh = Leaf::empty(0);
        // Each moved key's hash, for the hash index once the split is durable.
        let mut hashes = [0u64; 64];
        let slots = self.slots();
        for (j, &slot) in moved.iter().enumerate() {
            let to = LEAF_HEADER as usize + j * slot_bytes;
            let from = self.config.slot_at(leaf.offset, slot as usize);
            pool.read_bytes(from, &mut image[to..to + slot_bytes])?;
            hashes[j] =
                slots.with_key(from, &image[to..to + slot_bytes], |k| index.keys.hash(k))?;
            moved_bits |= 1u64 << slot;
            fresh.fps[j] = leaf.fps[slot as usize];
            fresh.prefixes[j] = leaf.prefixes[slot as usize];
            fresh.order[j] = j as u8;
        }
        let kept = leaf.bitmap & !moved_bits;
        let new = self.heap.transaction(|tx| -> Result<u64> {
            let new = tx.alloc(self.config.leaf_bytes)?.offset();
            tx.write(new, &image)?;
            tx.write(leaf.offset + 8, &new.to_le_bytes())?;
            tx.write(leaf.offset, &kept.to_le_bytes())?;
            Ok(new)
        })?;
        fresh.offset = new;
        fresh.bitmap = low_bits(moved.len() as u64);
        fresh.count = moved.len() as u8;
        let old = index.get_mut(bound).ok_or_else(|| self.no_first_leaf())?;
        old.bitmap = kept;
        old.count -= moved.len() as u8;
        for (j, &slot) in moved.iter().enumerate() {
            let from = self.config.slot_at(leaf.offset, slot as usize);
            index
                .keys
                .relocate(hashes[j], from, self.config.slot_at(new, j));
        }
        index.insert(new_bound, fresh);
        Ok(())
    }

    /// Unlink the leaf whose bound is `bound` (not the first), whose last pair a remove takes
    /// (with `record`, the record it named, if any), and free it, in one transaction.
    pub(super) fn unlink(
        &self,
        index: &mut Index,
        bound: &[u8],
        record: Option<u64>,
    ) -> Result<()> {
        let pool = self.heap.pool();
        let leaf = index.get(bound).ok_or_else(|| self.no_first_leaf())?.offset;
        let previous = index.before(bound).ok_or_else(|| self.no_first_leaf())?;
        let next = pool.load_u64(leaf + 8)?;
        self.heap.transaction(|tx| -> Result<()> {
            tx.write(previous.offset + 8, &next.to_le_bytes())?;
            tx.free(PPtr::<u8>::new(leaf))?;
            free_record(tx, record)
        })?;
        index.remove(bound);
        Ok(())
    }
}
