//! Merges: a remove that leaves a node underfull merges it with a neighbour under the same
//! parent, or borrows an entry from one, upward, and collapses a root left with one child.
//! Like a split, all of it is one undo-log transaction (crash-safe by rollback at
//! [`pmem_undo_log::Heap::open`]), run with the structure version odd since it frees nodes
//! and moves keys left (which lock-free readers, following only right links, cannot see).
//! A merge is planned first, to learn which nodes it reads and changes, then locks those
//! nodes only and plans again under the locks ([`FastFair::lock_for_merge`]): writers of
//! other leaves go on meanwhile.

use pmem_ordering::{Backend, PPtr};
use pmem_undo_log::{Tx, TxError};

use super::layout::NodeImage;
use super::locks::HeldStripes;
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

/// One write of a planned merge, in the order the transaction makes them.
enum MergeStep {
    /// Rewrite the node at this offset with this image.
    Write(u64, NodeImage),
    /// Free the node at this offset.
    Free(u64),
    /// Make the node at this offset the root.
    Root(u64),
}

/// A merge planned from the nodes it read: its writes, and every node it read (the nodes it
/// changes or frees among them), each read once so every decision sees one image of it.
#[derive(Default)]
struct MergePlan {
    steps: Vec<MergeStep>,
    images: Vec<(u64, NodeImage)>,
}

impl MergePlan {
    fn write(&mut self, node: u64, image: &NodeImage) {
        if let Some(slot) = self.images.iter_mut().find(|(n, _)| *n == node) {
            slot.1 = image.clone();
        }
        self.steps.push(MergeStep::Write(node, image.clone()));
    }

    fn touched(&self) -> Vec<u64> {
        self.images.iter().map(|&(n, _)| n).collect()
    }
}

/// A merge's path and plan, made under the locks of every node the plan reads.
pub(super) struct LockedMerge<'a> {
    path: Vec<u64>,
    plan: MergePlan,
    _held: HeldStripes<'a>,
}

impl LockedMerge<'_> {
    /// The leaf the key is removed from.
    pub(super) fn leaf(&self) -> u64 {
        *self.path.last().expect("a path ends at a leaf")
    }

    /// Whether the leaf is the root (it never merges).
    pub(super) fn leaf_is_root(&self) -> bool {
        self.path.len() == 1
    }
}

impl<B: Backend> FastFair<B> {
    /// Lock every node a remove of `key` that leaves its leaf underfull reads or changes, and
    /// plan the merge under those locks. The merge is planned first without locks, from node
    /// images each read whole ([`FastFair::read_node_settled`]), only to learn which stripes
    /// to lock (all of them if that plan fails: it may have read a node being changed); then,
    /// holding them, the path is checked ([`FastFair::path_holds`]) and the merge planned
    /// again. If that plan reads a node whose stripe is not held, or a path node above the
    /// checked ones, the locks go and it starts again. The caller holds no stripe.
    pub(super) fn lock_for_merge(&self, key: u64) -> Result<LockedMerge<'_>, FastFairError> {
        loop {
            let (path, structure) = self.lock_free_path(key)?;
            let (mask, floor) = match self.plan_merge(&path, key, 0) {
                Ok(Some(plan)) => {
                    let touched = plan.touched();
                    let floor = path.iter().position(|n| touched.contains(n));
                    (Self::stripe_mask(&touched), floor.unwrap_or(path.len() - 1))
                }
                Ok(None) | Err(_) => (u64::MAX >> (64 - self.stripes.len()), 0),
            };
            #[cfg(test)]
            super::test_interleaving::at(super::test_interleaving::Point::MergePlanned);
            let held = self.lock_stripes(mask);
            if !self.path_holds(&path, floor, key, structure)? {
                continue;
            }
            let Some(plan) = self.plan_merge(&path, key, floor)? else {
                continue;
            };
            if !held.covers(Self::stripe_mask(&plan.touched())) {
                continue;
            }
            return Ok(LockedMerge {
                path,
                plan,
                _held: held,
            });
        }
    }

    /// Run the merge `merge` planned: one transaction, with the stripes of the nodes it read
    /// marked and the structure version odd, since it frees nodes.
    pub(super) fn remove_and_merge(&self, merge: &LockedMerge<'_>) -> Result<(), FastFairError> {
        let touched = merge.plan.touched();
        #[cfg(test)]
        super::test_interleaving::at(super::test_interleaving::Point::MergeLocked);
        self.with_structure_versioned(|| {
            self.with_nodes_versioned(&touched, || {
                self.heap.transaction(|tx| {
                    for step in &merge.plan.steps {
                        match step {
                            MergeStep::Write(node, image) => self.write_node(tx, *node, image)?,
                            MergeStep::Free(node) => tx.free(PPtr::<u8>::new(*node))?,
                            MergeStep::Root(node) => {
                                tx.write_value(self.meta.root_node_field(), node)?
                            }
                        }
                    }
                    Ok::<_, FastFairError>(())
                })
            })
        })
    }

    /// The nodes a remove of `key` that merges would read or change now, for tests that pick
    /// writers whose nodes do not overlap it.
    #[cfg(test)]
    pub(super) fn merge_reads(&self, key: u64) -> Result<Vec<u64>, FastFairError> {
        let (path, _) = self.lock_free_path(key)?;
        let plan = self.plan_merge(&path, key, 0)?;
        Ok(plan.map(|p| p.touched()).unwrap_or_default())
    }

    fn write_node(&self, tx: &Tx<'_, B>, node: u64, image: &NodeImage) -> Result<(), TxError> {
        tx.write(node, &image.bytes(self.node_size))
    }

    /// `node` as the plan has it: as written by an earlier step, else read (once).
    fn plan_read(&self, plan: &mut MergePlan, node: u64) -> Result<NodeImage, FastFairError> {
        if let Some((_, image)) = plan.images.iter().find(|(n, _)| *n == node) {
            return Ok(image.clone());
        }
        let image = self.read_node_settled(node)?;
        plan.images.push((node, image.clone()));
        Ok(image)
    }

    /// Plan the remove of `key` from the leaf at the end of `path`, merging underfull nodes
    /// with a neighbour (or borrowing from one) upward and collapsing a root left with one
    /// child. `None` if the plan needs a node of `path` above index `floor`.
    fn plan_merge(
        &self,
        path: &[u64],
        key: u64,
        floor: usize,
    ) -> Result<Option<MergePlan>, FastFairError> {
        let mut plan = MergePlan::default();
        let mut level = path.len() - 1;
        let mut offset = path[level];
        let mut node = self.plan_read(&mut plan, offset)?;
        node.entries.retain(|&(k, _)| k != key);
        loop {
            if level == 0 {
                // The root: collapse it while it is internal with a single child.
                plan.write(offset, &node);
                let mut root = offset;
                let mut image = node;
                while image.level > 0 && image.entries.is_empty() {
                    let child = image.leftmost;
                    plan.steps.push(MergeStep::Root(child));
                    plan.steps.push(MergeStep::Free(root));
                    let child_image = self.plan_read(&mut plan, child)?;
                    if child_image.level + 1 != image.level {
                        return Err(self.corrupt(format!(
                            "node {child:#x}, a child of {root:#x}, is not one level below it"
                        )));
                    }
                    root = child;
                    image = child_image;
                }
                return Ok(Some(plan));
            }
            if node.entries.len() >= self.min_fill() {
                plan.write(offset, &node);
                return Ok(Some(plan));
            }
            if level - 1 < floor {
                return Ok(None);
            }
            let parent_off = path[level - 1];
            let mut parent = self.plan_read(&mut plan, parent_off)?;
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
                    (node.clone(), self.plan_read(&mut plan, right_off)?)
                } else {
                    (self.plan_read(&mut plan, left_off)?, node.clone())
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
                plan.write(left_off, &left);
                plan.steps.push(MergeStep::Free(right_off));
                parent.entries.remove(right_index - 1);
                merged = true;
                break;
            }
            if !merged {
                // No neighbour has room for both: take one entry from a neighbour through the
                // parent instead, so no node stays underfull (and no internal node childless).
                if children > 1 {
                    self.borrow(&mut plan, offset, node, parent_off, &mut parent, index)?;
                } else {
                    plan.write(offset, &node);
                }
                return Ok(Some(plan));
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
        plan: &mut MergePlan,
        offset: u64,
        mut node: NodeImage,
        parent_off: u64,
        parent: &mut NodeImage,
        index: usize,
    ) -> Result<(), FastFairError> {
        let children = parent.entries.len() + 1;
        if index + 1 < children {
            let right_off = child_at(parent, index + 1);
            let mut right = self.plan_read(plan, right_off)?;
            // A neighbour too full to merge has entries to spare; one read without its lock
            // may not, and must fail here rather than panic.
            if right.entries.len() < 2 {
                return Err(self.corrupt(format!("node {right_off:#x} is too empty to lend")));
            }
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
            plan.write(right_off, &right);
        } else {
            let left_off = child_at(parent, index - 1);
            let mut left = self.plan_read(plan, left_off)?;
            let separator = parent.entries[index - 1].0;
            let Some((k, v)) = left.entries.pop() else {
                return Err(self.corrupt(format!("node {left_off:#x} is too empty to lend")));
            };
            if node.level == 0 {
                node.entries.insert(0, (k, v));
            } else {
                node.entries.insert(0, (separator, node.leftmost));
                node.leftmost = v;
            }
            left.high = k;
            parent.entries[index - 1].0 = k;
            plan.write(left_off, &left);
        }
        plan.write(offset, &node);
        plan.write(parent_off, parent);
        Ok(())
    }
}
