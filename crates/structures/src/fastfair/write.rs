//! Insert, upsert and remove: in one leaf under its stripe lock when the leaf has room (or
//! enough entries), else under every stripe through a split or a merge.

use std::ops::Deref;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::layout::value_offset;
use super::shift::Shift;
use super::{FastFair, FastFairError, EMPTY_KEY, RESERVED};

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> FastFair<B, P, H> {
    /// Insert `key -> value` if `key` is absent: `Ok(true)` if inserted, `Ok(false)` if the key
    /// was already there (its value is left alone). Durable when it returns.
    pub fn insert(&self, key: u64, value: u64) -> Result<bool, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey(RESERVED));
        }
        Ok(self.put(key, value, false)?.is_none())
    }

    /// Insert or replace: the old value if the key was present. Durable when it returns.
    pub fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey(RESERVED));
        }
        self.put(key, value, true)
    }

    /// Remove `key`: its value, if it was present. Durable when it returns.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey(RESERVED));
        }
        {
            let (leaf, lane, _node) = self.lock_leaf(key)?;
            let view = self.view(leaf)?;
            let Some(slot) = view.find(key) else {
                return Ok(None);
            };
            let n = view.count();
            if n > self.min_fill() || leaf == self.root_node()? {
                let old = view.value(slot);
                self.remove_in_leaf(leaf, lane, slot, n)?;
                return Ok(Some(old));
            }
        }
        let _all = self.exclusive();
        let path = self.writer_path(key)?;
        let leaf = *path.last().expect("a path ends at a leaf");
        let view = self.view(leaf)?;
        let Some(slot) = view.find(key) else {
            return Ok(None);
        };
        let old = view.value(slot);
        let n = view.count();
        if n > self.min_fill() || path.len() == 1 {
            self.remove_in_leaf(leaf, Self::stripe_index(leaf), slot, n)?;
        } else {
            self.remove_and_merge(&path, key)?;
            self.stripes.count_held(0, 1u64.wrapping_neg());
        }
        Ok(Some(old))
    }

    /// Root-to-leaf path of `key`, for a writer holding every stripe.
    fn writer_path(&self, key: u64) -> Result<Vec<u64>, FastFairError> {
        let mut path = Vec::with_capacity(8);
        let mut node = self.root_node()?;
        for _ in 0..self.step_limit() {
            path.push(node);
            let view = self.view(node)?;
            if key >= view.high() {
                return Err(self.corrupt(format!("key {key} above the high key of {node:#x}")));
            }
            if view.level() == 0 {
                return Ok(path);
            }
            node = view.child_for(key);
        }
        Err(self.corrupt(format!("a descent to {key} does not end")))
    }

    fn put(&self, key: u64, value: u64, replace: bool) -> Result<Option<u64>, FastFairError> {
        {
            let (leaf, lane, _node) = self.lock_leaf(key)?;
            if let Some(old) = self.put_in_leaf(leaf, lane, key, value, replace)? {
                return Ok(old);
            }
        }
        let _all = self.exclusive();
        let path = self.writer_path(key)?;
        let leaf = *path.last().expect("a path ends at a leaf");
        // Another writer may have split this leaf or inserted the key meanwhile.
        if let Some(old) = self.put_in_leaf(leaf, Self::stripe_index(leaf), key, value, replace)? {
            return Ok(old);
        }
        self.split_insert(&path, key, value)?;
        self.stripes.count_held(0, 1);
        Ok(None)
    }

    /// Put into a leaf whose lock the caller holds: `Some(result)` if done, `None` if the key
    /// is absent and the leaf is full.
    fn put_in_leaf(
        &self,
        leaf: u64,
        lane: usize,
        key: u64,
        value: u64,
        replace: bool,
    ) -> Result<Option<Option<u64>>, FastFairError> {
        let pool = self.pool();
        let view = self.view(leaf)?;
        let ub = view.upper_bound(key);
        if ub > 0 && view.key(ub - 1) == key {
            let at = value_offset(leaf, ub - 1);
            let old = view.value(ub - 1);
            if replace {
                // One failure-atomic store: readers see the old or the new value.
                let w = pool.store_u64(at, value)?;
                let _ = pool.persist(w);
            }
            return Ok(Some(Some(old)));
        }
        let n = view.count();
        if n >= self.capacity {
            return Ok(None);
        }
        let shift = Shift::Insert {
            at: ub,
            n,
            key,
            value,
        };
        self.shift(leaf, lane, shift)?;
        self.stripes.count_held(lane, 1);
        Ok(Some(None))
    }

    fn remove_in_leaf(
        &self,
        leaf: u64,
        lane: usize,
        slot: usize,
        n: usize,
    ) -> Result<(), FastFairError> {
        let shift = Shift::Remove { at: slot, n };
        self.shift(leaf, lane, shift)?;
        self.stripes.count_held(lane, 1u64.wrapping_neg());
        Ok(())
    }
}
