//! In-node shifts (FAST): the entry writes a shift makes, in the order that leaves at most one
//! transient duplicate whose right copy is right, and how the per-shift and FAST policies make
//! them durable. The redo-logged policy is in [`super::redo`].

use std::ops::Deref;

use pmem_ordering::{Backend, Pool, PoolError, Written};
use pmem_undo_log::Heap;

use super::layout::{entry_offset, line_of, value_offset, NodeView};
use super::{FastFair, FastFairError, ShiftPolicy, EMPTY_KEY};

/// One entry write of a shift: `slot := (key, value)` (`None` leaves the value), as two
/// 8-byte stores in the order `key_first` says.
#[derive(Clone, Copy, Default)]
pub(super) struct SlotWrite {
    pub(super) slot: usize,
    pub(super) key: u64,
    pub(super) value: Option<u64>,
    key_first: bool,
}

/// A shift inside one node, as the sequence of entry writes it makes (see the module docs);
/// the writes are made one by one, each reading the entry it moves just before, so no plan is
/// built in memory.
#[derive(Clone, Copy)]
pub(super) enum Shift {
    /// Put `(key, value)` at slot `at` of a node with `n` entries: entries `n-1 .. at` move one
    /// slot right (highest first, value before key), then the new entry is written.
    Insert {
        at: usize,
        n: usize,
        key: u64,
        value: u64,
    },
    /// Drop slot `at` of a node with `n` entries: entries `at+1 .. n-1` move one slot left
    /// (lowest first, key before value), then slot `n-1` is freed.
    Remove { at: usize, n: usize },
}

impl Shift {
    /// Number of entry writes.
    pub(super) fn len(self) -> usize {
        match self {
            Shift::Insert { at, n, .. } => n - at + 1,
            Shift::Remove { at, n } => n - at,
        }
    }

    /// The `i`th entry write of this shift on the node `view` shows, reading the entry it
    /// moves (not yet overwritten: a right shift runs downward, a left shift upward).
    #[inline]
    pub(super) fn write(self, view: NodeView<'_>, i: usize) -> SlotWrite {
        match self {
            Shift::Insert { at, n, key, value } => {
                if i < n - at {
                    let slot = n - i;
                    SlotWrite {
                        slot,
                        key: view.key(slot - 1),
                        value: Some(view.value(slot - 1)),
                        key_first: false,
                    }
                } else {
                    SlotWrite {
                        slot: at,
                        key,
                        value: Some(value),
                        key_first: false,
                    }
                }
            }
            Shift::Remove { at, n } => {
                let slot = at + i;
                if slot + 1 < n {
                    SlotWrite {
                        slot,
                        key: view.key(slot + 1),
                        value: Some(view.value(slot + 1)),
                        key_first: true,
                    }
                } else {
                    SlotWrite {
                        slot,
                        key: EMPTY_KEY,
                        value: None,
                        key_first: true,
                    }
                }
            }
        }
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> FastFair<B, P, H> {
    /// Carry out `shift` on `node` under the tree's policy, with the node's stripe marked as
    /// changing meanwhile. The caller holds the node's stripe lock (or every stripe), so
    /// `lane` is this writer's alone.
    pub(super) fn shift(&self, node: u64, lane: usize, shift: Shift) -> Result<(), FastFairError> {
        let stripe = Self::stripe_index(node);
        self.stripes.change_begin_held(stripe);
        let result = match self.policy {
            ShiftPolicy::PerShift => self.shift_per_entry(node, shift),
            ShiftPolicy::Fast => self.shift_fast(node, shift),
            ShiftPolicy::Redo => self.shift_redo(node, lane, shift),
        };
        self.stripes.change_end_held(stripe);
        result
    }

    /// Make the stores of one entry write, in its order.
    #[inline]
    fn store_slot(&self, node: u64, w: &SlotWrite) -> Result<Written, PoolError> {
        let pool = self.pool();
        let at = entry_offset(node, w.slot);
        match (w.value, w.key_first) {
            (None, _) => pool.store_u64(at, w.key),
            (Some(v), true) => {
                let k = pool.store_u64(at, w.key)?;
                Ok(k.merge(pool.store_u64(value_offset(node, w.slot), v)?))
            }
            (Some(v), false) => {
                let vw = pool.store_u64(value_offset(node, w.slot), v)?;
                Ok(vw.merge(pool.store_u64(at, w.key)?))
            }
        }
    }

    /// The baseline: every moved entry flushed and fenced before the next.
    fn shift_per_entry(&self, node: u64, shift: Shift) -> Result<(), FastFairError> {
        let view = self.view(node)?;
        for i in 0..shift.len() {
            let w = shift.write(view, i);
            let written = self.store_slot(node, &w)?;
            let _ = self.pool().persist(written);
        }
        Ok(())
    }

    /// FAST: stores in place; one flush and fence each time the shift leaves a line.
    fn shift_fast(&self, node: u64, shift: Shift) -> Result<(), FastFairError> {
        let pool = self.pool();
        let view = self.view(node)?;
        let mut pending: Option<(u64, Written)> = None;
        for i in 0..shift.len() {
            let w = shift.write(view, i);
            let line = line_of(w.slot);
            if let Some((open, written)) = pending.take() {
                if open == line {
                    pending = Some((line, written.merge(self.store_slot(node, &w)?)));
                    continue;
                }
                let _ = pool.persist(written);
            }
            pending = Some((line, self.store_slot(node, &w)?));
        }
        if let Some((_, written)) = pending {
            let _ = pool.persist(written);
        }
        Ok(())
    }
}
