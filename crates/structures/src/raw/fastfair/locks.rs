//! Writers' locks and the versions they move: which stripe guards a node, how a writer finds
//! and locks its leaf, how a split or merge locks just the nodes it changes and checks that
//! its path still stands, and how a change marks the stripe and structure versions that
//! lock-free readers validate against.
//!
//! # The locking rule
//!
//! A node is guarded by its stripe ([`FastFair::stripe_index`]). A plain writer holds one
//! stripe (its leaf's). A split or merge holds the stripes of every node it reads or
//! changes, taken in index order by one [`Stripes::lock_set`] after it has let go of any
//! stripe it held: a writer therefore waits for a stripe only while holding none or only
//! lower-indexed ones, so no cycle of waiters can form. A change that frees nodes or moves
//! the root (a merge, a root split or collapse) also makes the structure version odd, which
//! is the lock that serialises such changes ([`SeqVersion::change_begin`]); it is taken after
//! the stripes, and its holder waits for nothing but a heap lane, so it adds no cycle either.
//!
//! # Why a path checked under its locks is still the key's path
//!
//! A split or merge finds its path without a lock ([`FastFair::lock_free_path`]), locks the
//! stripes of its nodes from the highest one it changes (`top`) down to the leaf, and then
//! checks, reading only nodes it holds ([`FastFair::path_holds`]): the structure version is
//! the one the descent began under (no merge or root change ran since: only those free nodes
//! or shrink a node's key range from below), each node is at its level with `key` below its
//! high key (a split moves keys only to the right, and raises no high key), each node routes
//! `key` to the next one, and, when the change reaches the root, the root is still `path[0]`.
//! Every change to a node's key range or its children is made under that node's stripe, so
//! while the locks are held the checked path stays `key`'s path, and no node of it can be
//! freed. New nodes need no lock: nothing links to them until the change's own stores do, and
//! those are made under the stripe (marked as changing) of the node that links them.
//!
//! [`Stripes::lock_set`]: crate::sync::Stripes::lock_set
//! [`SeqVersion::change_begin`]: crate::sync::SeqVersion::change_begin

use pmem_ordering::{Backend, PoolError};

use super::layout::{NodeImage, NodeShape, NodeView, LINE};
use super::{FastFair, FastFairError, LANES};
use crate::sync::{set_bits, SeqVersion, StripeGuard, StripeSet};

/// A leaf locked for a plain write ([`FastFair::lock_leaf`]); dropping it lets the stripe go.
pub(super) struct LockedLeaf<'a> {
    /// The leaf's offset.
    pub(super) leaf: u64,
    /// Its stripe ([`FastFair::stripe_index`]), held.
    pub(super) stripe: usize,
    /// Its words, checked once.
    pub(super) view: NodeView<'a>,
    _guard: StripeGuard<'a>,
}

/// The stripe locks a split or merge holds; dropping them lets the stripes go.
pub(super) struct HeldStripes<'a> {
    set: StripeSet<'a>,
}

impl HeldStripes<'_> {
    /// Whether every stripe of `mask` is held.
    pub(super) fn covers(&self, mask: u64) -> bool {
        mask & !self.set.mask() == 0
    }
}

impl<B: Backend> FastFair<B> {
    /// The stripe (lock, reader version, key count share and redo lane) of the node at `node`.
    #[inline]
    pub(super) fn stripe_index(node: u64) -> usize {
        ((node / LINE).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % LANES
    }

    /// The stripes of `nodes`, as a bit mask (stripe `i` is bit `i`).
    pub(super) fn stripe_mask(nodes: &[u64]) -> u64 {
        nodes
            .iter()
            .fold(0, |mask, &n| mask | 1 << Self::stripe_index(n))
    }

    /// The stripes of `mask`, in index order (see the module docs for why this cannot
    /// deadlock). The caller holds no stripe.
    pub(super) fn lock_stripes(&self, mask: u64) -> HeldStripes<'_> {
        HeldStripes {
            set: self.stripes.lock_set(mask),
        }
    }

    /// Find `key`'s leaf without a lock, lock its stripe, and check that it is still `key`'s
    /// leaf: no merge or root change ran since the descent began (they move the structure
    /// version, and one that would free or shrink this leaf needs its stripe, so none can
    /// start while the guard is held) and no split moved `key` to a right sibling (the leaf's
    /// high key is above it).
    ///
    /// `shape` is the tree's node shape, passed so that a writer compiled for a constant
    /// shape gets this inlined with it. The leaf's view is checked once, here: the checks and
    /// the writer's search and shift read the leaf through it.
    #[inline(always)]
    pub(super) fn lock_leaf(
        &self,
        shape: NodeShape,
        key: u64,
    ) -> Result<LockedLeaf<'_>, FastFairError> {
        loop {
            let (leaf, structure) = self.lock_free_leaf_in(shape, key)?;
            let view = NodeView::new(self.pool(), leaf, shape)?;
            let stripe = Self::stripe_index(leaf);
            let guard = self.stripes.lock(stripe);
            if self.structure_version.current() != structure {
                continue;
            }
            if view.level() == 0 && key < view.high() {
                return Ok(LockedLeaf {
                    leaf,
                    stripe,
                    view,
                    _guard: guard,
                });
            }
        }
    }

    /// The root-to-leaf path of `key`, found without a lock (each node's read validated by
    /// its stripe version and the structure version, a node passed to the right replaced by
    /// its sibling), and the structure version it was found under.
    pub(super) fn lock_free_path(&self, key: u64) -> Result<(Vec<u64>, u64), FastFairError> {
        let mut path = Vec::with_capacity(8);
        let structure = self.lock_free_path_into(key, &mut path)?;
        Ok((path, structure))
    }

    /// [`FastFair::lock_free_path`] into `path` (emptied first), whose buffer a split reuses:
    /// returns the structure version.
    pub(super) fn lock_free_path_into(
        &self,
        key: u64,
        path: &mut Vec<u64>,
    ) -> Result<u64, FastFairError> {
        'restart: loop {
            path.clear();
            let structure = self.structure_version.read_begin();
            let mut node = self.root_node()?;
            let mut on_level = false;
            for _ in 0..self.step_limit() {
                let stripe = self.stripes.reader(Self::stripe_index(node));
                let seen = stripe.read_begin();
                let outcome = (|| -> Result<(u64, bool), PoolError> {
                    let view = self.view(node)?;
                    if key >= view.high() {
                        return Ok((view.sibling(), true));
                    }
                    if view.level() == 0 {
                        return Ok((0, false));
                    }
                    Ok((view.child_for(key), false))
                })();
                if !stripe.read_valid(seen) || !self.structure_version.read_valid(structure) {
                    continue 'restart;
                }
                let (next, right) = outcome?;
                // A node passed to the right is not on the path: its sibling takes its place.
                if on_level {
                    path.pop();
                }
                path.push(node);
                match (next, right) {
                    (0, false) => return Ok(structure),
                    (0, true) => {
                        return Err(
                            self.corrupt(format!("node {node:#x} has a null link for {key}"))
                        )
                    }
                    (next, right) => {
                        on_level = right;
                        node = next;
                    }
                }
            }
            return Err(self.corrupt(format!("a descent to {key} does not end")));
        }
    }

    /// Whether `path[top..]` is still `key`'s path (see the module docs): the structure version
    /// is `structure`, each node is at its level with `key` below its high key and routes `key`
    /// to the next, and if `top` is 0, `path[0]` is the root. The caller holds the stripes of
    /// `path[top..]`, so what this reads is stable.
    pub(super) fn path_holds(
        &self,
        path: &[u64],
        top: usize,
        key: u64,
        structure: u64,
    ) -> Result<bool, FastFairError> {
        if self.structure_version.current() != structure {
            return Ok(false);
        }
        if top == 0 && self.root_node()? != path[0] {
            return Ok(false);
        }
        let leaf_index = path.len() - 1;
        for (i, &node) in path.iter().enumerate().skip(top) {
            let view = self.view(node)?;
            if view.level() != (leaf_index - i) as u64 || key >= view.high() {
                return Ok(false);
            }
            if i < leaf_index && view.child_for(key) != path[i + 1] {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// A node as stored, read whole between two reads of its stripe version (so not torn by
    /// a writer of it), for planning a merge: a plan made from nodes read without their
    /// locks only says which stripes to lock; the plan that runs is made again under them.
    pub(super) fn read_node_settled(&self, node: u64) -> Result<NodeImage, FastFairError> {
        let stripe = self.stripes.reader(Self::stripe_index(node));
        loop {
            let seen = stripe.read_begin();
            let image = self.view(node).map(|v| v.image());
            if stripe.read_valid(seen) {
                return Ok(image?);
            }
        }
    }

    /// Run `f` with the versions of `nodes`' stripes marked as changing (each stripe once).
    /// The caller holds those stripes.
    pub(super) fn with_nodes_versioned<R>(&self, nodes: &[u64], f: impl FnOnce() -> R) -> R {
        let mask = Self::stripe_mask(nodes);
        for i in set_bits(mask) {
            self.stripes.change_begin_held(i);
        }
        let result = f();
        for i in set_bits(mask) {
            self.stripes.change_end_held(i);
        }
        result
    }

    /// Run `f` with the structure version odd: lock-free readers restart after it, and no
    /// other merge or root change runs meanwhile. The caller holds the stripes of every node
    /// `f` changes (taken before this, per the locking rule).
    pub(super) fn with_structure_versioned<R>(&self, f: impl FnOnce() -> R) -> R {
        self.structure_version.change_begin();
        // Ended on unwind too: an odd version left behind would stop every reader.
        let _change = StructureChange(&self.structure_version);
        f()
    }
}

/// A running change of the structure version; dropping it ends the change.
struct StructureChange<'a>(&'a SeqVersion);

impl Drop for StructureChange<'_> {
    fn drop(&mut self) {
        self.0.change_end();
    }
}
