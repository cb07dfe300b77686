//! Lock-free reads: the in-node binary search, and descents from the root validated by the
//! node's stripe version and the structure version (see the module docs, "Concurrency").

use std::ops::Deref;

use pmem_ordering::{Backend, Pool, PoolError};
use pmem_undo_log::Heap;

use super::layout::NodeView;
use super::{FastFair, FastFairError, EMPTY_KEY, RESERVED};

/// The in-node search. Keys are sorted and free slots ([`EMPTY_KEY`]) sort last, so a search
/// over every slot needs no entry count.
impl NodeView<'_> {
    /// The first slot whose entry fails `below` (which holds for a prefix of the slots), by a
    /// binary search without data-dependent branches: the probes' lines are already being
    /// fetched, so a mispredicted branch per probe would cost more than the compare.
    ///
    /// Each valid node size gets its own copy with the capacity a constant, so the compiler
    /// unrolls the search into its probes (a load, a compare and a select each) instead of
    /// running the loop's arithmetic per probe.
    #[inline]
    fn partition(&self, below: impl Fn(u64) -> bool) -> usize {
        // Each arm passes the capacity it matched: the view's own.
        match self.capacity() {
            // SAFETY: `4` is the capacity just matched.
            4 => unsafe { self.partition_over(4, below) },
            // SAFETY: `12` is the capacity just matched.
            12 => unsafe { self.partition_over(12, below) },
            // SAFETY: `28` is the capacity just matched.
            28 => unsafe { self.partition_over(28, below) },
            // SAFETY: `60` is the capacity just matched.
            60 => unsafe { self.partition_over(60, below) },
            // SAFETY: `124` is the capacity just matched.
            124 => unsafe { self.partition_over(124, below) },
            // SAFETY: `252` is the capacity just matched.
            252 => unsafe { self.partition_over(252, below) },
            // SAFETY: `capacity` is the capacity just matched.
            capacity => unsafe { self.partition_over(capacity, below) },
        }
    }

    /// The binary search over the first `capacity` slots. Inlined into each arm of
    /// [`Self::partition`], where `capacity` is a constant.
    ///
    /// The probes read keys without a range check: the view was checked once, and every probe
    /// is below the capacity (the loop keeps `base + size <= capacity`, and `half < size`).
    ///
    /// # Safety
    ///
    /// `capacity == self.capacity()`.
    #[inline(always)]
    unsafe fn partition_over(&self, capacity: usize, below: impl Fn(u64) -> bool) -> usize {
        let mut base = 0;
        let mut size = capacity;
        if size == 0 {
            return 0;
        }
        while size > 1 {
            let half = size / 2;
            let mid = base + half;
            // SAFETY: `mid = base + half < base + size <= capacity`, the view's capacity (the
            // caller's promise).
            let probe = unsafe { self.key_unchecked(mid) };
            base = std::hint::select_unpredictable(below(probe), mid, base);
            size -= half;
        }
        // SAFETY: the loop ended with `size == 1` (it started at least 1, and `size - size / 2`
        // stays at least 1), so `base < base + size <= capacity`.
        base + usize::from(below(unsafe { self.key_unchecked(base) }))
    }

    /// The first slot whose key is above `key` (free slots count as above every key). Of a
    /// transient duplicate, the slot before the result is the right copy.
    #[inline]
    pub(super) fn upper_bound(&self, key: u64) -> usize {
        self.partition(|k| k <= key)
    }

    /// The first slot whose key is at or above `key` (free slots count as above every key).
    #[inline]
    pub(super) fn lower_bound(&self, key: u64) -> usize {
        self.partition(|k| k < key)
    }

    /// Used slots (the first free slot).
    #[inline]
    pub(super) fn count(&self) -> usize {
        self.partition(|k| k != EMPTY_KEY)
    }

    /// The child of this internal node that covers `key`.
    #[inline]
    pub(super) fn child_for(&self, key: u64) -> u64 {
        match self.upper_bound(key) {
            0 => self.leftmost(),
            ub => self.value(ub - 1),
        }
    }

    /// The slot of `key` in this leaf (the right copy of a transient duplicate), if there.
    #[inline]
    pub(super) fn find(&self, key: u64) -> Option<usize> {
        let ub = self.upper_bound(key);
        (ub > 0 && self.key(ub - 1) == key).then(|| ub - 1)
    }

    /// The value of `key` in this leaf, if there.
    #[inline]
    fn leaf_value(&self, key: u64) -> Option<u64> {
        let ub = self.upper_bound(key);
        (ub > 0 && self.key(ub - 1) == key).then(|| self.value(ub - 1))
    }
}

/// What one validated step of a lock-free descent found.
pub(super) enum Step {
    /// Go right: the key is at or above this node's high key.
    Right(u64),
    /// Go down to this child.
    Down(u64),
    /// A leaf: the value, if the key is there.
    Leaf(Option<u64>),
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> FastFair<B, P, H> {
    /// The value of `key`, if present. Takes no lock.
    pub fn get(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey(RESERVED));
        }
        self.lock_free_get(key)
    }

    /// One step of a lock-free descent at `node`.
    pub(super) fn step(&self, node: u64, key: u64) -> Result<Step, PoolError> {
        // One range check for the whole node, then every line asked for at once.
        let view = self.view(node)?;
        view.prefetch();
        if key >= view.high() {
            return Ok(Step::Right(view.sibling()));
        }
        if view.level() == 0 {
            Ok(Step::Leaf(view.leaf_value(key)))
        } else {
            Ok(Step::Down(view.child_for(key)))
        }
    }

    /// Walk from the root to `key`'s leaf, validating each node, restarting after a change.
    fn lock_free_get(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        'restart: loop {
            let structure = self.structure_version.read_begin();
            let mut node = self.root_node()?;
            let mut steps = 0;
            loop {
                steps += 1;
                if steps > self.step_limit() {
                    return Err(self.corrupt(format!("a lookup of {key} does not end")));
                }
                let stripe = Self::stripe_index(node);
                let seen = self.stripes.read_begin(stripe);
                let outcome = self.step(node, key);
                #[cfg(test)]
                super::interleave::at(super::interleave::Point::Read(node));
                let valid = self.stripes.read_valid(stripe, seen)
                    && self.structure_version.read_valid(structure);
                #[cfg(test)]
                super::interleave::at(super::interleave::Point::Validated(valid));
                if !valid {
                    continue 'restart;
                }
                match outcome? {
                    Step::Leaf(value) => return Ok(value),
                    Step::Down(child) | Step::Right(child) if child != 0 => node = child,
                    _ => {
                        return Err(
                            self.corrupt(format!("node {node:#x} has a null link for {key}"))
                        )
                    }
                }
            }
        }
    }

    /// The leaf that covers `key`, found without a lock, and the structure version it was
    /// found under.
    pub(super) fn lock_free_leaf(&self, key: u64) -> Result<(u64, u64), FastFairError> {
        'restart: loop {
            let structure = self.structure_version.read_begin();
            let mut node = self.root_node()?;
            let mut steps = 0;
            loop {
                steps += 1;
                if steps > self.step_limit() {
                    return Err(self.corrupt(format!("a descent to {key} does not end")));
                }
                let stripe = Self::stripe_index(node);
                let seen = self.stripes.read_begin(stripe);
                let outcome = (|| -> Result<Option<u64>, PoolError> {
                    let view = self.view(node)?;
                    view.prefetch();
                    if key >= view.high() {
                        return Ok(Some(view.sibling()));
                    }
                    if view.level() == 0 {
                        return Ok(None);
                    }
                    Ok(Some(view.child_for(key)))
                })();
                if !self.stripes.read_valid(stripe, seen)
                    || !self.structure_version.read_valid(structure)
                {
                    continue 'restart;
                }
                match outcome? {
                    None => return Ok((node, structure)),
                    Some(0) => {
                        return Err(
                            self.corrupt(format!("node {node:#x} has a null link for {key}"))
                        )
                    }
                    Some(next) => node = next,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::sibling_offset;
    use super::super::test_heap::heap;
    use super::super::{FastFairConfig, ShiftPolicy};
    use super::*;

    /// A reader that reached a leaf before it split (through a parent read earlier) finds the
    /// keys that moved right by following the sibling link on the high key.
    #[test]
    fn a_stale_leaf_sends_a_reader_to_its_sibling() {
        let heap = heap();
        let config = FastFairConfig {
            node_size: 128,
            policy: ShiftPolicy::Fast,
        };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        for k in 0..4 {
            tree.insert(k * 10, k).unwrap();
        }
        // The single leaf a reader would have found before the split.
        let leaf = tree.root_node().unwrap();
        tree.insert(35, 99).unwrap();
        assert_eq!(tree.height().unwrap(), 2, "the leaf split");
        let sibling = heap.pool().load_u64(sibling_offset(leaf)).unwrap();
        assert_ne!(sibling, 0);
        match tree.step(leaf, 35).unwrap() {
            Step::Right(next) => assert_eq!(next, sibling),
            _ => panic!("a key above the high key must go right"),
        }
        assert!(matches!(
            tree.step(sibling, 35).unwrap(),
            Step::Leaf(Some(99))
        ));
        assert!(matches!(tree.step(leaf, 0).unwrap(), Step::Leaf(Some(0))));
    }

    /// A key below every key of its leaf has no slot: the search must not compute one (the
    /// fuzz target found `find` subtracting 1 from an upper bound of 0 under overflow checks).
    #[test]
    fn a_key_below_every_key_of_its_leaf_is_absent() {
        for policy in [ShiftPolicy::PerShift, ShiftPolicy::Fast, ShiftPolicy::Redo] {
            // A fresh heap each: create refuses a root in use.
            let heap = heap();
            let config = FastFairConfig {
                node_size: 128,
                policy,
            };
            let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
            for k in 10..14 {
                tree.insert(k, k + 100).unwrap();
            }
            assert_eq!(tree.get(5).unwrap(), None);
            assert_eq!(tree.remove(5).unwrap(), None);
            assert_eq!(tree.upsert(5, 1).unwrap(), None);
            assert_eq!(tree.remove(5).unwrap(), Some(1));
            assert_eq!(tree.len(), 4);
        }
    }
}
