//! [`FastFair::verify`]: a read-only walk of every level along the sibling links that lists
//! every violation it finds ([`Verification`]) instead of stopping at the first, for damaged
//! pools as much as healthy ones.
//!
//! Every node pointer read from the pool is checked (aligned, inside the pool, tagged) before
//! the node is read, a node is walked at most once (a set of visited offsets cuts cycles and
//! cross-links), and levels are bounded by the root's (at most 64), so no bytes make the walk
//! panic or loop.

use std::collections::{HashMap, HashSet};

use pmem_ordering::Backend;

use super::layout::{entry_offset, NodeView, NODE_TAG, ROOT_MAGIC};
use super::{FastFair, EMPTY_KEY, LANES, LANE_BYTES};
use crate::kind::StructureKind;
use crate::verify::{readable_block, Problem, Verification};

/// The highest level a root may have: no pool holds a tree of 2^64 leaves.
const MAX_LEVEL: u64 = 64;

/// Every node starts on a cache line: the allocator's blocks do (it does not align them to
/// their size).
const NODE_ALIGNMENT: u64 = 64;

/// The key range `[low, high)` a parent gives each of its children, by child offset.
type ParentBounds = HashMap<u64, (u64, u64)>;

/// One level's walk: its nodes in sibling order, and what its nodes say about the next level
/// down.
#[derive(Default)]
struct LevelWalk {
    chain: Vec<u64>,
    children: Vec<u64>,
    child_bounds: ParentBounds,
}

impl<B: Backend> FastFair<B> {
    /// Walk the whole tree and report every violation found, with the blocks and keys walked.
    /// Reads only: it changes nothing and takes no lock, so call it with no writers (a checker
    /// on a tree just opened, or between batches); a writer running meanwhile can make it
    /// report damage that is only a shift or a split in progress.
    ///
    /// Checked: the root object's magic; the redo area (an allocated block); on every level
    /// from the root down, along the sibling links (FAST'18 FAST&FAIR, Sec. 4): each node
    /// pointer (on a cache line, inside the pool, an allocated block, tagged), the
    /// node's level, its slots (sorted, no transient duplicate, no used slot after a free one),
    /// its keys within `[previous node's high key, own high key)` and within the range its
    /// parent's separators give it, high keys increasing along the level up to the top key,
    /// the leftmost child of internal nodes, and that the children the parents name are the
    /// next level's sibling chain, in order; so the leaf level reaches every key once. The
    /// keys found are compared with [`FastFair::len`].
    pub fn verify(&self) -> Verification {
        self.verify_visiting(&mut |_, _, _| {})
    }

    /// [`FastFair::verify`], handing each leaf entry found to `leaf` as `(node offset, key,
    /// value)`, in key order along the leaf level: the maps built on the tree check what the
    /// values point at.
    pub(crate) fn verify_visiting(&self, leaf: &mut dyn FnMut(u64, u64, u64)) -> Verification {
        let meta = self.meta.0;
        let mut report = Verification::new(StructureKind::BTreeMap, meta);
        let pool = self.pool();
        match pool.load_u64(meta) {
            Ok(ROOT_MAGIC) => {}
            Ok(found) => report.report(meta, Problem::WrongMagic { found }),
            Err(_) => {
                report.report(meta, Problem::OutOfPool { len: 8 });
                return report;
            }
        }
        let redo_bytes = LANES as u64 * LANE_BYTES;
        if readable_block(&self.heap, &mut report, self.redo.0, redo_bytes, 64) {
            report.blocks_walked += 1;
        }
        match self.meta.root_node(pool) {
            Ok(root) => self.verify_levels(&mut report, root, leaf),
            Err(_) => report.report(self.meta.root_node_field(), Problem::OutOfPool { len: 8 }),
        }
        if report.keys != self.len() {
            report.report(
                meta,
                Problem::CountMismatch {
                    counted: report.keys,
                    recorded: self.len(),
                },
            );
        }
        report
    }

    /// Every level, from the root's down to the leaves.
    fn verify_levels(
        &self,
        report: &mut Verification,
        root: u64,
        leaf: &mut dyn FnMut(u64, u64, u64),
    ) {
        let Some(view) = self.readable_node(report, root) else {
            return;
        };
        let mut level = view.level();
        if level > MAX_LEVEL {
            report.report(root, Problem::LevelTooHigh { level });
            return;
        }
        let mut visited = HashSet::new();
        let mut first = root;
        let mut parents: Option<LevelWalk> = None;
        loop {
            let bounds = parents.as_ref().map(|p| &p.child_bounds);
            let walk = self.verify_level(report, &mut visited, (first, level), bounds, leaf);
            if let Some(parents) = &parents {
                Self::verify_children(report, level, &parents.children, &walk.chain);
            }
            if level == 0 {
                return;
            }
            // The first node's leftmost child, or (if it has none, reported) its first child.
            let Some(&next) = walk.children.first() else {
                return;
            };
            first = next;
            level -= 1;
            parents = Some(walk);
        }
    }

    /// One level along the sibling links from `first`; `bounds` holds the ranges the parents
    /// give their children (none for the root's level); on the leaf level, each entry goes to
    /// `leaf`.
    fn verify_level(
        &self,
        report: &mut Verification,
        visited: &mut HashSet<u64>,
        (first, level): (u64, u64),
        bounds: Option<&ParentBounds>,
        leaf: &mut dyn FnMut(u64, u64, u64),
    ) -> LevelWalk {
        let mut walk = LevelWalk::default();
        let mut low = 0u64;
        let mut last_high = None;
        let mut node = first;
        while node != 0 {
            if !visited.insert(node) {
                let from = walk.chain.last().copied().unwrap_or(node);
                report.report(from, Problem::SiblingCycle { next: node });
                break;
            }
            let Some(view) = self.readable_node(report, node) else {
                break;
            };
            report.blocks_walked += 1;
            walk.chain.push(node);
            if view.level() != level {
                let found = view.level();
                report.report(
                    node,
                    Problem::WrongLevel {
                        found,
                        expected: level,
                    },
                );
            }
            let high = view.high();
            if last_high.is_some() && high <= low {
                report.report(node, Problem::HighKeyNotIncreasing { high, low });
            }
            let parent = bounds.and_then(|b| b.get(&node)).copied();
            let entries = self.verify_slots(report, node, &view, (low, high), parent);
            if level == 0 {
                report.keys += entries.len() as u64;
                for &(key, value) in &entries {
                    leaf(node, key, value);
                }
            } else {
                Self::note_children(report, &mut walk, node, &view, level, (low, high), &entries);
            }
            low = high;
            last_high = Some(high);
            node = view.sibling();
        }
        if let (Some(high), Some(&last)) = (last_high, walk.chain.last()) {
            if high != EMPTY_KEY {
                report.report(last, Problem::LevelEndsEarly { level, high });
            }
        }
        walk
    }

    /// The children an internal node names, in order, each with the key range it gives it.
    fn note_children(
        report: &mut Verification,
        walk: &mut LevelWalk,
        node: u64,
        view: &NodeView<'_>,
        level: u64,
        (low, high): (u64, u64),
        entries: &[(u64, u64)],
    ) {
        let leftmost = view.leftmost();
        if leftmost == 0 {
            report.report(node, Problem::MissingLeftmost { level });
        } else {
            let below_first = entries.first().map_or(high, |&(k, _)| k);
            walk.children.push(leftmost);
            walk.child_bounds.insert(leftmost, (low, below_first));
        }
        for (i, &(separator, child)) in entries.iter().enumerate() {
            let next = entries.get(i + 1).map_or(high, |&(k, _)| k);
            walk.children.push(child);
            walk.child_bounds.insert(child, (separator, next));
        }
    }

    /// The slots of one node against its own bounds and its parent's; returns its entries
    /// (the right copy of a transient duplicate kept, as readers do).
    fn verify_slots(
        &self,
        report: &mut Verification,
        node: u64,
        view: &NodeView<'_>,
        (low, high): (u64, u64),
        parent: Option<(u64, u64)>,
    ) -> Vec<(u64, u64)> {
        let mut entries: Vec<(u64, u64)> = Vec::new();
        let mut after_free = false;
        for slot in 0..self.capacity {
            let key = view.key(slot);
            if key == EMPTY_KEY {
                after_free = true;
                continue;
            }
            let at = entry_offset(node, slot);
            if after_free {
                // One finding per node: past a gap, every slot would repeat it.
                report.report(at, Problem::GapInNode { slot, key });
                break;
            }
            match entries.last() {
                Some(&(previous, _)) if previous == key => {
                    report.report(at, Problem::TransientDuplicate { slot, key });
                    entries.pop();
                }
                Some(&(previous, _)) if previous > key => {
                    report.report(
                        at,
                        Problem::UnsortedKeys {
                            slot,
                            previous,
                            key,
                        },
                    );
                }
                _ => {}
            }
            if key < low || key >= high {
                report.report(at, Problem::KeyOutOfBounds { key, low, high });
            }
            if let Some((low, high)) = parent {
                if key < low || key >= high {
                    report.report(at, Problem::KeyOutsideParent { key, low, high });
                }
            }
            entries.push((key, view.value(slot)));
        }
        entries
    }

    /// The children the parents named against the sibling chain of their level: the first
    /// position where the two differ, if any.
    fn verify_children(report: &mut Verification, level: u64, children: &[u64], chain: &[u64]) {
        let positions = children.len().max(chain.len());
        let differ = (0..positions).find(|&i| children.get(i) != chain.get(i));
        if let Some(position) = differ {
            let child = children.get(position).copied();
            let chain = chain.get(position).copied();
            report.report(
                chain.or(child).unwrap_or(0),
                Problem::ChildNotInChain {
                    level,
                    position,
                    child,
                    chain,
                },
            );
        }
    }

    /// The view of the node at `node`, if the pointer names a readable, tagged node; what is
    /// wrong with it is reported.
    fn readable_node(&self, report: &mut Verification, node: u64) -> Option<NodeView<'_>> {
        if !readable_block(&self.heap, report, node, self.node_size, NODE_ALIGNMENT) {
            return None;
        }
        let view = self.view(node).ok()?;
        if view.tag() != NODE_TAG {
            report.report(node, Problem::NotANode { tag: view.tag() });
            return None;
        }
        Some(view)
    }
}
