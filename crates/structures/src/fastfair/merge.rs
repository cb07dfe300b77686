//! Merges: a remove that leaves a node underfull merges it with a neighbour under the same
//! parent, or borrows an entry from one, upward, and collapses a root left with one child.
//! Like a split, all of it is one undo-log transaction (crash-safe by rollback at
//! [`pmem_undo_log::Heap::open`]), run with the structure version odd since it frees nodes.

use std::ops::Deref;

use pmem_ordering::{Backend, PPtr, Pool};
use pmem_undo_log::{Heap, Tx, TxError};

use super::layout::NodeImage;
use super::{FastFair, FastFairError};

/// Index of `child` among `parent`'s children: 0 for the leftmost, `i + 1` for entry `i`.
fn child_index(parent: &NodeImage, child: u64) -> Option<usize> {
    if parent.leftmost == child {
        return Some(0);
    }
    parent
        .entries
        .iter()
        .position(|&(_, c)| c == child)
        .map(|i| i + 1)
}

/// Child `index` of `parent` (0 for the leftmost).
fn child_at(parent: &NodeImage, index: usize) -> u64 {
    if index == 0 {
        parent.leftmost
    } else {
        parent.entries[index - 1].1
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> FastFair<B, P, H> {
    /// Remove `key` from the leaf at the end of `path`, merging underfull nodes with a
    /// neighbour (or borrowing from one) upward and collapsing a root left with one child: one
    /// transaction. The caller holds every stripe.
    pub(super) fn remove_and_merge(&self, path: &[u64], key: u64) -> Result<(), FastFairError> {
        self.with_structure_versioned(|| {
            self.with_nodes_versioned(path, || {
                self.heap.transaction(|tx| self.merge_in_tx(tx, path, key))
            })
        })
    }

    fn write_node(&self, tx: &Tx<'_, B>, node: u64, image: &NodeImage) -> Result<(), TxError> {
        tx.write(node, &image.bytes(self.node_size))
    }

    fn merge_in_tx(&self, tx: &Tx<'_, B>, path: &[u64], key: u64) -> Result<(), FastFairError> {
        let mut level = path.len() - 1;
        let mut offset = path[level];
        let mut node = self.read_node(offset)?;
        node.entries.retain(|&(k, _)| k != key);
        loop {
            if level == 0 {
                // The root: collapse it while it is internal with a single child.
                self.write_node(tx, offset, &node)?;
                let mut root = offset;
                let mut image = node;
                while image.level > 0 && image.entries.is_empty() {
                    let child = image.leftmost;
                    tx.write_value(self.meta.root_node_field(), &child)?;
                    tx.free(PPtr::<u8>::new(root))?;
                    root = child;
                    image = self.read_node(child)?;
                }
                return Ok(());
            }
            if node.entries.len() >= self.min_fill() {
                self.write_node(tx, offset, &node)?;
                return Ok(());
            }
            let parent_off = path[level - 1];
            let mut parent = self.read_node(parent_off)?;
            let Some(index) = child_index(&parent, offset) else {
                return Err(self.corrupt(format!("node {offset:#x} is not a child of its parent")));
            };
            let children = parent.entries.len() + 1;
            // Try the right neighbour, then the left one.
            let mut merged = false;
            for (left_index, right_index) in [(index, index + 1), (index.wrapping_sub(1), index)] {
                if right_index >= children || left_index >= children {
                    continue;
                }
                let left_off = child_at(&parent, left_index);
                let right_off = child_at(&parent, right_index);
                let (mut left, right) = if left_off == offset {
                    (node.clone(), self.read_node(right_off)?)
                } else {
                    (self.read_node(left_off)?, node.clone())
                };
                let separator = parent.entries[right_index - 1].0;
                let mut combined = left.entries.clone();
                if left.level > 0 {
                    combined.push((separator, right.leftmost));
                }
                combined.extend_from_slice(&right.entries);
                if combined.len() > self.capacity {
                    continue;
                }
                left.entries = combined;
                left.sibling = right.sibling;
                left.high = right.high;
                self.write_node(tx, left_off, &left)?;
                tx.free(PPtr::<u8>::new(right_off))?;
                parent.entries.remove(right_index - 1);
                merged = true;
                break;
            }
            if !merged {
                // No neighbour has room for both: take one entry from a neighbour through the
                // parent instead, so no node stays underfull (and no internal node childless).
                if children > 1 {
                    self.borrow(tx, offset, node, parent_off, &mut parent, index)?;
                } else {
                    self.write_node(tx, offset, &node)?;
                }
                return Ok(());
            }
            level -= 1;
            offset = parent_off;
            node = parent;
        }
    }

    /// Move one entry into the underfull `node` (child `index` of `parent`) from its right
    /// neighbour, or its left one if it is the last child, rotating the separator.
    fn borrow(
        &self,
        tx: &Tx<'_, B>,
        offset: u64,
        mut node: NodeImage,
        parent_off: u64,
        parent: &mut NodeImage,
        index: usize,
    ) -> Result<(), FastFairError> {
        let children = parent.entries.len() + 1;
        if index + 1 < children {
            let right_off = child_at(parent, index + 1);
            let mut right = self.read_node(right_off)?;
            let separator = parent.entries[index].0;
            let new_separator = if node.level == 0 {
                node.entries.push(right.entries.remove(0));
                right.entries[0].0
            } else {
                node.entries.push((separator, right.leftmost));
                let (k, child) = right.entries.remove(0);
                right.leftmost = child;
                k
            };
            node.high = new_separator;
            parent.entries[index].0 = new_separator;
            self.write_node(tx, right_off, &right)?;
        } else {
            let left_off = child_at(parent, index - 1);
            let mut left = self.read_node(left_off)?;
            let separator = parent.entries[index - 1].0;
            let (k, v) = left
                .entries
                .pop()
                .expect("a neighbour too full to merge is not empty");
            if node.level == 0 {
                node.entries.insert(0, (k, v));
            } else {
                node.entries.insert(0, (separator, node.leftmost));
                node.leftmost = v;
            }
            left.high = k;
            parent.entries[index - 1].0 = k;
            self.write_node(tx, left_off, &left)?;
        }
        self.write_node(tx, offset, &node)?;
        self.write_node(tx, parent_off, parent)?;
        Ok(())
    }
}
