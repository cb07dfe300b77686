//! RB: a red-black tree mapping `u64` keys to `u64` values (Themis, Table II, "insert/delete
//! nodes in a red-black tree"; the textbook algorithm with parent pointers, as in PMDK's
//! `rbtree_map` example).
//!
//! Layout: the root is `[tree, count]`, `tree` the offset of the root node (0: empty). A node
//! is a heap block of [`NODE_BYTES`] holding `[key, value, color, parent, left, right]`
//! (color 0 black, 1 red; a null child is 0 and black).
//!
//! An operation first runs the whole algorithm (descent, rotations, recoloring) on a DRAM copy
//! of the nodes it touches (`Work`), noting each word it changes; then it snapshots every
//! changed word of an existing node (one log entry per word, as the per-store undo logging the
//! paper evaluates does, Themis, Sec. V-A) and only then stores them. So the log entries of an
//! insert or a remove, however many rotations it makes, precede its first store and share one
//! fence under the batched policy. A word set to the value it already holds is not logged.

use std::collections::BTreeMap;

use pmem_ordering::{Backend, Hardware, PPtr, Pool};

use super::{corrupt, step_limit, words};
use pmem_undo_log::{Heap, Tx, TxError};

/// Bytes of a node: `[key, value, color, parent, left, right]`.
pub const NODE_BYTES: u64 = 48;

const KEY: usize = 0;
const VALUE: usize = 1;
const COLOR: usize = 2;
const PARENT: usize = 3;
const LEFT: usize = 4;
const RIGHT: usize = 5;
const BLACK: u64 = 0;
const RED: u64 = 1;

/// The nodes an operation touches, copied to DRAM, with the words it changed.
struct Work<'a, B: Backend> {
    pool: &'a Pool<B>,
    root: u64,
    tree: u64,
    tree_dirty: bool,
    /// node offset -> (its words, a bit per changed word).
    nodes: BTreeMap<u64, ([u64; 6], u8)>,
    /// The node allocated by this operation: written whole, never snapshot.
    fresh: Option<u64>,
}

impl<'a, B: Backend> Work<'a, B> {
    fn new(pool: &'a Pool<B>, root: u64) -> Result<Work<'a, B>, TxError> {
        Ok(Work {
            pool,
            root,
            tree: pool.read(root)?,
            tree_dirty: false,
            nodes: BTreeMap::new(),
            fresh: None,
        })
    }

    fn damaged(&self, detail: impl std::fmt::Display) -> TxError {
        corrupt("red-black tree", self.root, detail)
    }

    fn load(&mut self, node: u64) -> Result<&mut ([u64; 6], u8), TxError> {
        if !self.nodes.contains_key(&node) {
            let n = words::<B, 6>(self.pool, node)?;
            self.nodes.insert(node, (n, 0));
        }
        Ok(self.nodes.get_mut(&node).expect("just loaded"))
    }

    /// Field `f` of `node`; the null node is black and has nothing else.
    fn get(&mut self, node: u64, f: usize) -> Result<u64, TxError> {
        match (node, f) {
            (0, COLOR) => Ok(BLACK),
            (0, _) => Err(self.damaged("the algorithm reached a null node's link (unbalanced)")),
            _ => Ok(self.load(node)?.0[f]),
        }
    }

    fn set(&mut self, node: u64, f: usize, value: u64) -> Result<(), TxError> {
        if node == 0 {
            return Err(self.damaged("the algorithm wrote to a null node (unbalanced)"));
        }
        let (words, dirty) = self.load(node)?;
        if words[f] != value {
            words[f] = value;
            *dirty |= 1 << f;
        }
        Ok(())
    }

    fn set_tree(&mut self, node: u64) {
        if self.tree != node {
            self.tree = node;
            self.tree_dirty = true;
        }
    }

    /// Make `new` the child of `parent` that `old` was (the tree's root if `parent` is null).
    fn replace_child(&mut self, parent: u64, old: u64, new: u64) -> Result<(), TxError> {
        if parent == 0 {
            self.set_tree(new);
            Ok(())
        } else if self.get(parent, LEFT)? == old {
            self.set(parent, LEFT, new)
        } else {
            self.set(parent, RIGHT, new)
        }
    }

    /// Rotate `x` down to the `side` (LEFT: a left rotation), its other child up.
    fn rotate(&mut self, x: u64, side: usize) -> Result<(), TxError> {
        let other = LEFT + RIGHT - side;
        let y = self.get(x, other)?;
        let inner = self.get(y, side)?;
        self.set(x, other, inner)?;
        if inner != 0 {
            self.set(inner, PARENT, x)?;
        }
        let parent = self.get(x, PARENT)?;
        self.set(y, PARENT, parent)?;
        self.replace_child(parent, x, y)?;
        self.set(y, side, x)?;
        self.set(x, PARENT, y)
    }

    /// Restore the red-black properties after `z` was linked in red.
    fn insert_fixup(&mut self, mut z: u64) -> Result<(), TxError> {
        let limit = step_limit(self.pool);
        for _ in 0..limit {
            let p = self.get(z, PARENT)?;
            if self.get(p, COLOR)? != RED {
                let tree = self.tree;
                return self.set(tree, COLOR, BLACK);
            }
            let g = self.get(p, PARENT)?;
            let (side, other) = if self.get(g, LEFT)? == p {
                (LEFT, RIGHT)
            } else {
                (RIGHT, LEFT)
            };
            let uncle = self.get(g, other)?;
            if self.get(uncle, COLOR)? == RED {
                self.set(p, COLOR, BLACK)?;
                self.set(uncle, COLOR, BLACK)?;
                self.set(g, COLOR, RED)?;
                z = g;
                continue;
            }
            let mut p = p;
            if self.get(p, other)? == z {
                z = p;
                self.rotate(z, side)?;
                p = self.get(z, PARENT)?;
            }
            self.set(p, COLOR, BLACK)?;
            self.set(g, COLOR, RED)?;
            self.rotate(g, other)?;
        }
        Err(self.damaged("the insert fix-up does not end"))
    }

    /// Put `v` where `u` hangs.
    fn transplant(&mut self, u: u64, v: u64) -> Result<(), TxError> {
        let parent = self.get(u, PARENT)?;
        self.replace_child(parent, u, v)?;
        if v != 0 {
            self.set(v, PARENT, parent)?;
        }
        Ok(())
    }

    /// Unlink node `z` (CLRS, ch. 13, with a null child instead of a sentinel, so `x`'s parent
    /// is carried along).
    fn remove(&mut self, z: u64) -> Result<(), TxError> {
        let (x, x_parent, removed_color);
        let (z_left, z_right) = (self.get(z, LEFT)?, self.get(z, RIGHT)?);
        if z_left == 0 || z_right == 0 {
            removed_color = self.get(z, COLOR)?;
            x = if z_left == 0 { z_right } else { z_left };
            x_parent = self.get(z, PARENT)?;
            self.transplant(z, x)?;
        } else {
            let mut y = z_right;
            for _ in 0..step_limit(self.pool) {
                let left = self.get(y, LEFT)?;
                if left == 0 {
                    break;
                }
                y = left;
            }
            removed_color = self.get(y, COLOR)?;
            x = self.get(y, RIGHT)?;
            if self.get(y, PARENT)? == z {
                x_parent = y;
            } else {
                x_parent = self.get(y, PARENT)?;
                self.transplant(y, x)?;
                self.set(y, RIGHT, z_right)?;
                self.set(z_right, PARENT, y)?;
            }
            self.transplant(z, y)?;
            self.set(y, LEFT, z_left)?;
            self.set(z_left, PARENT, y)?;
            let color = self.get(z, COLOR)?;
            self.set(y, COLOR, color)?;
        }
        if removed_color == BLACK {
            self.remove_fixup(x, x_parent)?;
        }
        self.nodes.remove(&z);
        Ok(())
    }

    /// Restore the red-black properties after a black node left from above `x`.
    fn remove_fixup(&mut self, mut x: u64, mut parent: u64) -> Result<(), TxError> {
        for _ in 0..step_limit(self.pool) {
            if x == self.tree || self.get(x, COLOR)? == RED {
                if x != 0 {
                    self.set(x, COLOR, BLACK)?;
                }
                return Ok(());
            }
            let (side, other) = if self.get(parent, LEFT)? == x {
                (LEFT, RIGHT)
            } else {
                (RIGHT, LEFT)
            };
            let mut w = self.get(parent, other)?;
            if self.get(w, COLOR)? == RED {
                self.set(w, COLOR, BLACK)?;
                self.set(parent, COLOR, RED)?;
                self.rotate(parent, side)?;
                w = self.get(parent, other)?;
            }
            let (w_side, w_other) = (self.get(w, side)?, self.get(w, other)?);
            if self.get(w_side, COLOR)? == BLACK && self.get(w_other, COLOR)? == BLACK {
                self.set(w, COLOR, RED)?;
                x = parent;
                parent = self.get(x, PARENT)?;
                continue;
            }
            if self.get(w_other, COLOR)? == BLACK {
                self.set(w_side, COLOR, BLACK)?;
                self.set(w, COLOR, RED)?;
                self.rotate(w, other)?;
                w = self.get(parent, other)?;
            }
            let parent_color = self.get(parent, COLOR)?;
            self.set(w, COLOR, parent_color)?;
            self.set(parent, COLOR, BLACK)?;
            let w_other = self.get(w, other)?;
            if w_other != 0 {
                self.set(w_other, COLOR, BLACK)?;
            }
            self.rotate(parent, side)?;
            x = self.tree;
        }
        Err(self.damaged("the remove fix-up does not end"))
    }

    /// Log every changed word of an existing node, then store every change.
    fn commit(self, tx: &Tx<'_, B>) -> Result<(), TxError> {
        let changed = |dirty: u8| (0..6).filter(move |f| dirty & (1 << f) != 0);
        if self.tree_dirty {
            tx.snapshot(self.root, 8)?;
        }
        for (&node, &(_, dirty)) in &self.nodes {
            if Some(node) != self.fresh {
                for f in changed(dirty) {
                    tx.snapshot(node + 8 * f as u64, 8)?;
                }
            }
        }
        if self.tree_dirty {
            tx.write_value(self.root, &self.tree)?;
        }
        for (&node, &(words, dirty)) in &self.nodes {
            if Some(node) == self.fresh {
                tx.write_value(node, &words)?;
            } else {
                for f in changed(dirty) {
                    tx.write_value(node + 8 * f as u64, &words[f])?;
                }
            }
        }
        Ok(())
    }
}

/// A red-black tree from `u64` to `u64` in a heap.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::RedBlackTree;
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("rb", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let tree = RedBlackTree::create(&heap, heap.pool().root_offset())?;
/// for k in 0..10 {
///     assert_eq!(tree.insert(k, k * 10)?, None);
/// }
/// assert_eq!(tree.remove(4)?, Some(40));
/// assert_eq!(tree.get(5)?, Some(50));
/// assert_eq!(tree.len()?, 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RedBlackTree<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
}

impl<B: Backend> Clone for RedBlackTree<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for RedBlackTree<'_, B> {}

impl<B: Backend> std::fmt::Debug for RedBlackTree<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedBlackTree")
            .field("root", &self.root)
            .finish()
    }
}

impl<'h, B: Backend> RedBlackTree<'h, B> {
    /// Bytes of the root: `[tree, count]`.
    pub const ROOT_BYTES: u64 = 16;

    /// Make an empty tree rooted at `root` (overwriting, in one transaction, whatever was
    /// there).
    pub fn create(heap: &'h Heap<B>, root: u64) -> Result<RedBlackTree<'h, B>, TxError> {
        heap.transaction(|tx| tx.write_value(root, &[0u64, 0]))?;
        Ok(RedBlackTree { heap, root })
    }

    /// The tree rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<RedBlackTree<'h, B>, TxError> {
        heap.pool().check_range(root, Self::ROOT_BYTES)?;
        Ok(RedBlackTree { heap, root })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The node holding `key`, or the last node of its search path (0 for an empty tree), and
    /// whether it holds `key`.
    fn find(&self, pool: &Pool<B>, key: u64) -> Result<(u64, bool), TxError> {
        let mut last = 0;
        let mut node: u64 = pool.read(self.root)?;
        for _ in 0..step_limit(pool) {
            if node == 0 {
                return Ok((last, false));
            }
            let [k, _, _, _, left, right] = words::<B, 6>(pool, node)?;
            if k == key {
                return Ok((node, true));
            }
            last = node;
            node = if key < k { left } else { right };
        }
        Err(corrupt(
            "red-black tree",
            self.root,
            "the walk does not end (a cycle?)",
        ))
    }

    /// Map `key` to `value`; returns the value it replaced.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>, TxError> {
        self.heap.transaction(|tx| {
            let pool = tx.pool();
            let (node, found) = self.find(pool, key)?;
            if found {
                let old: u64 = pool.read(node + 8)?;
                tx.write_value(node + 8, &value)?;
                return Ok(Some(old));
            }
            let mut work = Work::new(pool, self.root)?;
            let z = tx.alloc(NODE_BYTES)?.offset();
            work.fresh = Some(z);
            work.nodes.insert(z, ([key, value, RED, node, 0, 0], 0));
            if node == 0 {
                work.set_tree(z);
            } else if key < work.get(node, KEY)? {
                work.set(node, LEFT, z)?;
            } else {
                work.set(node, RIGHT, z)?;
            }
            work.insert_fixup(z)?;
            let count: u64 = pool.read(self.root + 8)?;
            tx.snapshot(self.root + 8, 8)?;
            work.commit(tx)?;
            tx.write_value(self.root + 8, &(count + 1))?;
            Ok(None)
        })
    }

    /// Remove `key`; returns its value if it was there.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, TxError> {
        self.heap.transaction(|tx| {
            let pool = tx.pool();
            let (node, found) = self.find(pool, key)?;
            if !found {
                return Ok(None);
            }
            let value: u64 = pool.read(node + 8)?;
            let mut work = Work::new(pool, self.root)?;
            work.remove(node)?;
            let count: u64 = pool.read(self.root + 8)?;
            tx.snapshot(self.root + 8, 8)?;
            work.commit(tx)?;
            tx.write_value(self.root + 8, &count.wrapping_sub(1))?;
            tx.free(PPtr::<u8>::new(node))?;
            Ok(Some(value))
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>, TxError> {
        let pool = self.heap.pool();
        match self.find(pool, key)? {
            (node, true) => Ok(Some(pool.read(node + 8)?)),
            _ => Ok(None),
        }
    }

    /// Number of keys (the persistent count).
    pub fn len(&self) -> Result<u64, TxError> {
        Ok(self.heap.pool().read(self.root + 8)?)
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> Result<bool, TxError> {
        Ok(self.heap.pool().read::<u64>(self.root)? == 0)
    }

    /// Every `(key, value, node)` in key order, after checking the whole tree: keys ascending,
    /// parent links matching, the root black, no red node with a red child, and one black
    /// height on every path.
    fn checked_nodes(&self) -> Result<Vec<(u64, u64, u64)>, TxError> {
        let pool = self.heap.pool();
        let damaged = |detail: String| corrupt("red-black tree", self.root, detail);
        let tree: u64 = pool.read(self.root)?;
        let mut out = Vec::new();
        if tree == 0 {
            return Ok(out);
        }
        let mut steps = step_limit(pool);
        // Iterative in-order walk: (node, its parent, black nodes above it); the black height of
        // the first null link reached is the one every other must match.
        let mut black_height: Option<u64> = None;
        let mut stack: Vec<(u64, [u64; 6], u64)> = Vec::new();
        let mut next = Some((tree, 0u64, 0u64));
        loop {
            while let Some((node, parent, blacks)) = next.take() {
                if node == 0 {
                    match black_height {
                        None => black_height = Some(blacks),
                        Some(h) if h != blacks => {
                            return Err(damaged(format!(
                                "black heights {h} and {blacks} under node {parent:#x}"
                            )))
                        }
                        Some(_) => {}
                    }
                    break;
                }
                steps = steps
                    .checked_sub(1)
                    .ok_or_else(|| damaged("the walk does not end (a cycle?)".into()))?;
                let n = words::<B, 6>(pool, node)?;
                if n[PARENT] != parent {
                    return Err(damaged(format!(
                        "node {node:#x} names parent {:#x}, not {parent:#x}",
                        n[PARENT]
                    )));
                }
                if n[COLOR] > RED || (node == tree && n[COLOR] == RED) {
                    return Err(damaged(format!("node {node:#x} has color {}", n[COLOR])));
                }
                if n[COLOR] == RED && parent != 0 && pool.read::<u64>(parent + 16)? == RED {
                    return Err(damaged(format!("red node {node:#x} has a red parent")));
                }
                let blacks = blacks + u64::from(n[COLOR] == BLACK);
                stack.push((node, n, blacks));
                next = Some((n[LEFT], node, blacks));
            }
            let Some((node, n, blacks)) = stack.pop() else {
                return Ok(out);
            };
            if out.last().is_some_and(|&(k, _, _)| k >= n[KEY]) {
                return Err(damaged(format!("key {} out of order", n[KEY])));
            }
            out.push((n[KEY], n[VALUE], node));
            next = Some((n[RIGHT], node, blacks));
        }
    }

    /// Every `(key, value)` in ascending key order (an error if the tree is not a valid
    /// red-black tree).
    pub fn to_vec(&self) -> Result<Vec<(u64, u64)>, TxError> {
        Ok(self
            .checked_nodes()?
            .into_iter()
            .map(|(k, v, _)| (k, v))
            .collect())
    }

    /// Every heap block the tree owns: its nodes, in key order.
    pub fn blocks(&self) -> Result<Vec<u64>, TxError> {
        Ok(self
            .checked_nodes()?
            .into_iter()
            .map(|(_, _, n)| n)
            .collect())
    }
}
