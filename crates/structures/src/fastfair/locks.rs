//! Writers' locks and the versions they move: which stripe guards a node, how a writer finds
//! and locks its leaf, how a split or merge excludes every other writer, and how a change
//! marks the stripe and structure versions that lock-free readers validate against.

use std::ops::Deref;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::layout::LINE;
use super::{FastFair, FastFairError, LANES};
use crate::sync::{Exclusive, StripeGuard};

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> FastFair<B, P, H> {
    /// The stripe (lock, reader version, key count share and redo lane) of the node at `node`.
    #[inline]
    pub(super) fn stripe_index(node: u64) -> usize {
        ((node / LINE).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % LANES
    }

    /// Every stripe's lock, taken in index order (writers hold one stripe at a time, so this
    /// cannot deadlock): no other writer runs until the guard drops.
    pub(super) fn exclusive(&self) -> Exclusive<'_> {
        self.structure_gate.enter(&self.stripes)
    }

    /// Find `key`'s leaf without a lock, lock its stripe, and check that it is still `key`'s
    /// leaf: no merge or root change ran since the descent began (they move the structure
    /// version) and no split moved `key` to a right sibling (the leaf's high key is above it).
    /// A structure change takes every stripe, so none runs while the guard is held.
    pub(super) fn lock_leaf(
        &self,
        key: u64,
    ) -> Result<(u64, usize, StripeGuard<'_>), FastFairError> {
        loop {
            self.structure_gate.wait_clear();
            let (leaf, structure) = self.lock_free_leaf(key)?;
            let lane = Self::stripe_index(leaf);
            let guard = self.stripes.lock(lane);
            if self.structure_version.current() != structure {
                continue;
            }
            let view = self.view(leaf)?;
            if view.level() == 0 && key < view.high() {
                return Ok((leaf, lane, guard));
            }
        }
    }

    /// Run `f` with the versions of `nodes`' stripes marked as changing (each stripe once).
    /// The caller holds every stripe.
    pub(super) fn with_nodes_versioned<R>(&self, nodes: &[u64], f: impl FnOnce() -> R) -> R {
        let mut mask = 0u64;
        for &n in nodes {
            mask |= 1 << Self::stripe_index(n);
        }
        for i in 0..self.stripes.len() {
            if mask & (1 << i) != 0 {
                self.stripes.change_begin_held(i);
            }
        }
        let result = f();
        for i in 0..self.stripes.len() {
            if mask & (1 << i) != 0 {
                self.stripes.change_end_held(i);
            }
        }
        result
    }

    /// Run `f` with the structure version odd: lock-free readers restart after it. The
    /// caller holds every stripe.
    pub(super) fn with_structure_versioned<R>(&self, f: impl FnOnce() -> R) -> R {
        self.structure_version.change_begin_held();
        let result = f();
        self.structure_version.change_end_held();
        result
    }
}
