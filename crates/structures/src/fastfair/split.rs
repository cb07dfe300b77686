//! FAIR splits: a full leaf, and its ancestors as needed, split in one undo-log transaction
//! whose writes are staged in FAIR order (new sibling in full, link and high key, truncation,
//! parent, new root). The transaction is what makes a split crash-safe: a crash at any point
//! rolls the whole split back at [`pmem_undo_log::Heap::open`]. The order is for lock-free
//! readers, which may run beside it. A split locks only the nodes it changes
//! ([`FastFair::lock_for_split`]), so writers of other leaves run beside it too, and so may
//! other splits' transactions (the heap runs one per lane at once).

use std::ops::Deref;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::{Heap, Tx};

use super::layout::{entry_offset, entry_range_bytes, high_offset, sibling_offset, NodeImage};
use super::locks::HeldStripes;
use super::{FastFair, FastFairError, EMPTY_KEY};

/// Writes planned in order, as (offset, bytes): a split is planned, then logged, then written.
type Staged = Vec<(u64, Vec<u8>)>;

/// The write of the slots of node `offset` whose entry differs between `old` (as stored) and
/// `new`, if any: the transaction then logs and flushes only those lines, not the whole node.
fn changed_entries(offset: u64, old: &[(u64, u64)], new: &[(u64, u64)]) -> Option<(u64, Vec<u8>)> {
    let first = old
        .iter()
        .zip(new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    let end = old.len().max(new.len());
    if first >= end {
        return None;
    }
    Some((
        entry_offset(offset, first),
        entry_range_bytes(new, first..end),
    ))
}

/// A split's path, checked and locked: the stripes of `path[top..]` are held, which are the
/// nodes the split changes (the leaf, the full ancestors it splits, and the one above them
/// that takes the last separator, or the root and the root pointer when the root splits).
pub(super) struct LockedSplit<'a> {
    path: Vec<u64>,
    top: usize,
    root_splits: bool,
    _held: HeldStripes<'a>,
}

impl LockedSplit<'_> {
    /// The leaf to split.
    pub(super) fn leaf(&self) -> u64 {
        *self.path.last().expect("a path ends at a leaf")
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> FastFair<B, P, H> {
    /// Lock the nodes a split of `key`'s (full) leaf would change, and nothing else: find the
    /// path without a lock, lock the stripes of the path from the highest node the split
    /// changes down to the leaf, in index order, then check under the locks that the path
    /// still stands ([`FastFair::path_holds`]) and the split still stops within it (else
    /// let go and start again). The caller holds no stripe. The leaf may have gained room
    /// meanwhile: the caller checks it under the lock before it splits.
    pub(super) fn lock_for_split(&self, key: u64) -> Result<LockedSplit<'_>, FastFairError> {
        loop {
            let (path, structure) = self.lock_free_path(key)?;
            let guess = self.split_top(&path, 0)?;
            #[cfg(test)]
            super::interleave::at(super::interleave::Point::SplitPlanned);
            let held = self.lock_stripes(Self::stripe_mask(&path[guess..]));
            if !self.path_holds(&path, guess, key, structure)? {
                continue;
            }
            // Only the held nodes are read: the walk stops at `guess` at the latest.
            let top = self.split_top(&path, guess)?;
            let top_full = self.view(path[top])?.count() >= self.capacity;
            if top_full && top > 0 {
                // The split would now go above what is held: an ancestor filled meanwhile.
                continue;
            }
            return Ok(LockedSplit {
                root_splits: top == 0 && top_full,
                path,
                top,
                _held: held,
            });
        }
    }

    /// The nodes a split of `key`'s leaf would change now (the leaf full), for tests that
    /// pick writers whose nodes do not overlap it.
    #[cfg(test)]
    pub(super) fn split_changes(&self, key: u64) -> Result<Vec<u64>, FastFairError> {
        let (path, _) = self.lock_free_path(key)?;
        let top = self.split_top(&path, 0)?;
        Ok(path[top..].to_vec())
    }

    /// The highest index of `path` a split of its leaf changes, looking no higher than
    /// `floor`: going up from the leaf while the node is full (a full node splits and so
    /// changes its parent).
    fn split_top(&self, path: &[u64], floor: usize) -> Result<usize, FastFairError> {
        let mut top = path.len() - 1;
        while top > floor && self.view(path[top])?.count() >= self.capacity {
            top -= 1;
        }
        Ok(top)
    }

    /// Split the full leaf of `split` to insert `key`, and its ancestors as needed: one
    /// transaction, written in FAIR order (see the module docs), with the stripes of the
    /// nodes it changes marked, and the structure version too if the root splits.
    pub(super) fn split_insert(
        &self,
        split: &LockedSplit<'_>,
        key: u64,
        value: u64,
    ) -> Result<(), FastFairError> {
        let path = &split.path[split.top..];
        let run = || {
            self.with_nodes_versioned(path, || {
                self.heap.transaction(|tx| {
                    let mut staged = Vec::new();
                    self.split_in_tx(tx, path, key, value, &mut staged)?;
                    // Log every range before writing any: the log entries then share one
                    // fence, where logging each just before its write fenced once per range.
                    // The writes still follow in FAIR order, for lock-free readers.
                    for (offset, bytes) in &staged {
                        tx.snapshot(*offset, bytes.len() as u64)?;
                    }
                    for (offset, bytes) in &staged {
                        tx.write(*offset, bytes)?;
                        #[cfg(test)]
                        super::interleave::at(super::interleave::Point::SplitWrote(*offset));
                    }
                    Ok::<_, FastFairError>(())
                })
            })
        };
        if split.root_splits {
            self.with_structure_versioned(run)
        } else {
            run()
        }
    }

    /// Plan the split in `staged`, the writes in FAIR order (new nodes are allocated in `tx`):
    /// up from the leaf at the end of `path` until a node has room, or through `path[0]`, the
    /// root, to a new root.
    fn split_in_tx(
        &self,
        tx: &Tx<'_, B>,
        path: &[u64],
        key: u64,
        value: u64,
        staged: &mut Staged,
    ) -> Result<(), FastFairError> {
        let leaf_off = *path.last().expect("a path ends at a leaf");
        let mut node = self.read_node(leaf_off)?;
        let old = node.entries.clone();
        let at = node.entries.partition_point(|&(k, _)| k < key);
        node.entries.insert(at, (key, value));
        let mid = node.entries.len() / 2;
        let right_entries = node.entries.split_off(mid);
        let mut carry = (right_entries[0].0, 0u64);
        carry.1 = self.split_node(
            tx,
            staged,
            leaf_off,
            &mut node,
            &old,
            right_entries,
            0,
            carry.0,
        )?;
        for i in (0..path.len() - 1).rev() {
            let parent_off = path[i];
            let mut parent = self.read_node(parent_off)?;
            let old = parent.entries.clone();
            let at = parent.entries.partition_point(|&(k, _)| k < carry.0);
            parent.entries.insert(at, carry);
            if parent.entries.len() <= self.capacity {
                staged.extend(changed_entries(parent_off, &old, &parent.entries));
                return Ok(());
            }
            let m = parent.entries.len() / 2;
            let mut right = parent.entries.split_off(m);
            let (up_key, mid_child) = right.remove(0);
            let sibling = self.split_node(
                tx,
                staged,
                parent_off,
                &mut parent,
                &old,
                right,
                mid_child,
                up_key,
            )?;
            carry = (up_key, sibling);
        }
        // The root split: a new root above it, swapped in by one 8-byte store.
        let old_root = path[0];
        let level = self.view(old_root)?.level() + 1;
        let new_root = tx.alloc(self.node_size)?.offset();
        let image = NodeImage {
            level,
            sibling: 0,
            leftmost: old_root,
            high: EMPTY_KEY,
            entries: vec![carry],
        };
        staged.push((new_root, image.bytes(self.node_size)));
        staged.push((self.meta.root_node_field(), new_root.to_le_bytes().to_vec()));
        Ok(())
    }

    /// FAIR's split of `node` (at `offset`) whose upper part is `right` (with `leftmost` for an
    /// internal node) and whose new high key is `separator`: the sibling written in full, then
    /// linked, then the old node truncated. Returns the sibling.
    #[allow(clippy::too_many_arguments)]
    fn split_node(
        &self,
        tx: &Tx<'_, B>,
        staged: &mut Staged,
        offset: u64,
        node: &mut NodeImage,
        old: &[(u64, u64)],
        right: Vec<(u64, u64)>,
        leftmost: u64,
        separator: u64,
    ) -> Result<u64, FastFairError> {
        let sibling = tx.alloc(self.node_size)?.offset();
        let image = NodeImage {
            level: node.level,
            sibling: node.sibling,
            leftmost,
            high: node.high,
            entries: right,
        };
        staged.push((sibling, image.bytes(self.node_size)));
        staged.push((high_offset(offset), separator.to_le_bytes().to_vec()));
        staged.push((sibling_offset(offset), sibling.to_le_bytes().to_vec()));
        node.sibling = sibling;
        node.high = separator;
        staged.extend(changed_entries(offset, old, &node.entries));
        Ok(sibling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_slots_that_differ_are_rewritten() {
        let old = [(1, 10), (3, 30), (5, 50)];
        let new = [(1, 10), (2, 20), (3, 30), (5, 50)];
        let (at, bytes) = changed_entries(0x400, &old, &new).expect("a change");
        assert_eq!(at, entry_offset(0x400, 1));
        assert_eq!(bytes, entry_range_bytes(&new, 1..4));
        // A truncation frees the slots past the new end.
        let (at, bytes) = changed_entries(0x400, &new, &new[..2]).expect("a change");
        assert_eq!(at, entry_offset(0x400, 2));
        assert_eq!(bytes, entry_range_bytes(&[], 0..2));
        assert!(changed_entries(0x400, &old, &old).is_none());
    }
}
