//! Insert, upsert and remove: in one leaf under its stripe lock when the leaf has room (or
//! enough entries), else through a split or a merge under the stripes of the nodes it changes. The crate's maps
//! (`put_with`, `remove_with`) pass a hook that runs once the write is decided, before its
//! first store; the public operations pass one that does nothing.

use pmem_ordering::Backend;

use super::layout::{value_offset, NodeShape, NodeView};
use super::shift::Shift;
use super::{FastFair, FastFairError, DEFAULT_NODE_SIZE, EMPTY_KEY, RESERVED};

/// What a put finds in its leaf, under the leaf's lock.
enum LeafPut {
    /// The key is at `slot` with value `old`.
    Present { slot: usize, old: u64 },
    /// The key is absent and belongs at `at` of the leaf's `n` entries, and there is room.
    Room { at: usize, n: usize },
    /// The key is absent and the leaf is full: the put needs a split.
    Full,
}

/// A key a remove found in its leaf, under the leaf's lock.
struct LeafEntry {
    /// Its slot.
    slot: usize,
    /// Its value.
    old: u64,
    /// Entries in the leaf.
    n: usize,
}

/// The hook of the plain operations: nothing to do before the stores. It inlines away.
#[inline(always)]
fn no_hook<T>(_: T) -> Result<(), FastFairError> {
    Ok(())
}

impl<B: Backend> FastFair<B> {
    /// Insert `key -> value` if `key` is absent: `Ok(true)` if inserted, `Ok(false)` if the key
    /// was already there (its value is left alone). Durable when it returns.
    pub fn insert(&self, key: u64, value: u64) -> Result<bool, FastFairError> {
        Ok(self.put_with(key, value, false, no_hook)?.is_none())
    }

    /// Insert or replace: the old value if the key was present. Durable when it returns.
    pub fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, FastFairError> {
        self.put_with(key, value, true, no_hook)
    }

    /// Remove `key`: its value, if it was present. Durable when it returns.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        self.remove_with(key, no_hook)
    }

    /// Insert (`replace == false`) or upsert (`replace == true`) `key -> value`, running
    /// `before_store` at the moment the write is decided: the old value if the key was present
    /// (`Ok(Some(old))`, the value replaced only if `replace`), `Ok(None)` if it was inserted.
    /// Durable when it returns.
    ///
    /// `before_store(old)` (`old` the value being replaced, `None` for an insert) runs once,
    /// on the writer's thread, under the leaf's stripe lock (and, for a split, the stripes of
    /// the other nodes it changes), once
    /// the write is certain and before the first store that could make the new entry or value
    /// visible to a reader or durable. An insert of a present key with `replace == false` calls
    /// nothing. Stores the hook makes and flushes without a fence are durable when this call
    /// returns `Ok`: every write path ends with a fence of this thread after the hook (the last
    /// fence of the shift, of the value's persist, or of the split's transaction), so the hook
    /// needs no fence of its own. The hook must not call into this tree's writers (it holds
    /// their locks); lookups are fine.
    ///
    /// If the hook returns `Err`, that error is returned and the tree is unchanged: nothing was
    /// stored. Errors after the hook ran, which the caller must then undo the hook's effect
    /// for:
    /// * the split, one transaction run after the hook, failing: [`FastFairError::Tx`]
    ///   ([`TxError::PoolFull`] when the heap has no room for the new nodes,
    ///   [`TxError::LogFull`], [`TxError::NestedAborted`] when called inside a transaction of
    ///   the same heap, a pool access error) or [`FastFairError::Corrupt`] for a damaged node
    ///   found while planning it. The transaction is rolled back: the tree is unchanged;
    /// * a pool access error ([`FastFairError::Tx`] of [`TxError::Pool`]) on a store into the
    ///   leaf or the redo lane, whose ranges were bounds-checked before the hook ran: it cannot
    ///   happen on a tree that [`FastFair::open`] accepted, and would leave the leaf as a crash
    ///   there does (repaired at the next open).
    ///
    /// A key of `u64::MAX` is refused with [`FastFairError::ReservedKey`] before the hook.
    ///
    /// [`TxError::PoolFull`]: pmem_undo_log::TxError::PoolFull
    /// [`TxError::LogFull`]: pmem_undo_log::TxError::LogFull
    /// [`TxError::NestedAborted`]: pmem_undo_log::TxError::NestedAborted
    /// [`TxError::Pool`]: pmem_undo_log::TxError::Pool
    #[inline]
    pub(crate) fn put_with<E: From<FastFairError>>(
        &self,
        key: u64,
        value: u64,
        replace: bool,
        before_store: impl FnOnce(Option<u64>) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey(RESERVED).into());
        }
        if self.node_size == DEFAULT_NODE_SIZE {
            self.put_in_shape::<true, E>(key, value, replace, before_store)
        } else {
            self.put_in_shape::<false, E>(key, value, replace, before_store)
        }
    }

    /// [`FastFair::put_with`] compiled for the default node size if `DEFAULT` (the shape a
    /// constant there: the leaf's searches and the shift unroll), else for the size as loaded.
    /// Two functions, not one inlined twice, so that the compiler cannot merge the copies
    /// back into one over a shape it no longer knows.
    #[inline(never)]
    fn put_in_shape<const DEFAULT: bool, E: From<FastFairError>>(
        &self,
        key: u64,
        value: u64,
        replace: bool,
        before_store: impl FnOnce(Option<u64>) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        let shape = self.writer_shape::<DEFAULT>();
        let before_store = {
            let locked = self.lock_leaf(shape, key)?;
            let (leaf, stripe, view) = (locked.leaf, locked.stripe, locked.view);
            match self.put_in_leaf(view, leaf, stripe, key, value, replace, before_store)? {
                Ok(done) => return Ok(done),
                Err(unused) => unused,
            }
        };
        let split = self.lock_for_split(key)?;
        let leaf = split.leaf();
        // Another writer may have split this leaf or inserted the key meanwhile.
        let stripe = Self::stripe_index(leaf);
        // Of the same shape as the first view, so that both copies of the put know it.
        let view = NodeView::new(self.pool(), leaf, shape).map_err(FastFairError::from)?;
        let before_store =
            match self.put_in_leaf(view, leaf, stripe, key, value, replace, before_store)? {
                Ok(done) => return Ok(done),
                Err(unused) => unused,
            };
        before_store(None)?;
        self.split_insert(&split, key, value)?;
        self.stripes.count_held(stripe, 1);
        Ok(None)
    }

    /// Remove `key`, running `before_store(old value)` under the leaf's stripe lock (and, for a
    /// merge, the stripes of the other nodes it reads and changes) before the first store of the shift or the merge: its value if
    /// it was present (`None` calls nothing). Durable when it returns.
    ///
    /// The rules of [`FastFair::put_with`] hold: the hook's flushed stores are durable when
    /// this returns `Ok` (no fence of its own needed), its `Err` returns with the tree
    /// unchanged, and the errors that can follow it are the merge's transaction failing (any
    /// error of it, [`FastFairError::Tx`] or [`FastFairError::Corrupt`], but never
    /// [`TxError::PoolFull`]: a merge allocates nothing), rolled back so the tree is
    /// unchanged, and a pool access error in a bounds-checked leaf or redo lane, which a tree
    /// that opened cleanly does not produce.
    ///
    /// [`TxError::PoolFull`]: pmem_undo_log::TxError::PoolFull
    #[inline]
    pub(crate) fn remove_with<E: From<FastFairError>>(
        &self,
        key: u64,
        before_store: impl FnOnce(u64) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey(RESERVED).into());
        }
        if self.node_size == DEFAULT_NODE_SIZE {
            self.remove_in_shape::<true, E>(key, before_store)
        } else {
            self.remove_in_shape::<false, E>(key, before_store)
        }
    }

    /// [`FastFair::remove_with`] compiled for the default node size if `DEFAULT`, else for the
    /// size as loaded (see [`FastFair::put_in_shape`]).
    #[inline(never)]
    fn remove_in_shape<const DEFAULT: bool, E: From<FastFairError>>(
        &self,
        key: u64,
        before_store: impl FnOnce(u64) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        let shape = self.writer_shape::<DEFAULT>();
        {
            let locked = self.lock_leaf(shape, key)?;
            let (leaf, view) = (locked.leaf, locked.view);
            let Some(LeafEntry { slot, old, n }) = Self::leaf_entry(view, key) else {
                return Ok(None);
            };
            if n > self.min_fill() || leaf == self.root_node()? {
                before_store(old)?;
                self.remove_in_leaf(view, leaf, locked.stripe, slot, n)?;
                return Ok(Some(old));
            }
        }
        let merge = self.lock_for_merge(key)?;
        let leaf = merge.leaf();
        let view = NodeView::new(self.pool(), leaf, shape).map_err(FastFairError::from)?;
        let Some(LeafEntry { slot, old, n }) = Self::leaf_entry(view, key) else {
            return Ok(None);
        };
        before_store(old)?;
        let stripe = Self::stripe_index(leaf);
        if n > self.min_fill() || merge.leaf_is_root() {
            self.remove_in_leaf(view, leaf, stripe, slot, n)?;
        } else {
            self.remove_and_merge(&merge)?;
            self.stripes.count_held(stripe, 1u64.wrapping_neg());
        }
        Ok(Some(old))
    }

    /// Run `f` under the lock of the tree's only leaf if the tree is that one leaf and holds
    /// no key, and return what it returned; `false` (and `f` not run) otherwise. While `f`
    /// runs no insert can: every key's leaf is the locked one, and neither a split nor a root
    /// change can move that without its lock. The ordered byte-key map retires an emptied
    /// layer this way: `f` marks the layer dead, and every insert's hook checks the mark
    /// under the same lock.
    pub(crate) fn if_empty_locked(&self, f: impl FnOnce() -> bool) -> Result<bool, FastFairError> {
        let locked = self.lock_leaf(self.shape, 0)?;
        if locked.view.count() != 0 || locked.leaf != self.root_node()? {
            return Ok(false);
        }
        Ok(f())
    }

    /// The tree's node shape in a writer's copy for the default node size (`DEFAULT`: a
    /// constant) or for any other (as loaded).
    #[inline(always)]
    fn writer_shape<const DEFAULT: bool>(&self) -> NodeShape {
        if DEFAULT {
            NodeShape::of(DEFAULT_NODE_SIZE)
        } else {
            self.shape
        }
    }

    /// Where `key` is in the leaf `view` shows, whose lock the caller holds, if it is there.
    #[inline(always)]
    fn leaf_entry(view: NodeView<'_>, key: u64) -> Option<LeafEntry> {
        view.find(key).map(|slot| LeafEntry {
            slot,
            old: view.value(slot),
            n: view.count(),
        })
    }

    /// Where `key` goes in the leaf `view` shows, whose lock the caller holds.
    #[inline(always)]
    fn leaf_put(view: NodeView<'_>, key: u64) -> LeafPut {
        let ub = view.upper_bound(key);
        if ub > 0 && view.key(ub - 1) == key {
            return LeafPut::Present {
                slot: ub - 1,
                old: view.value(ub - 1),
            };
        }
        let n = view.count();
        if n >= view.capacity() {
            return LeafPut::Full;
        }
        LeafPut::Room { at: ub, n }
    }

    /// Put into `leaf`, which `view` shows and whose lock the caller holds (`stripe` its
    /// stripe), calling `before_store` before the first store: `Ok(result)` if done,
    /// `Err(before_store)` (not called) if the key is absent and the leaf is full. One view
    /// serves the search and the shift.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn put_in_leaf<E: From<FastFairError>, F: FnOnce(Option<u64>) -> Result<(), E>>(
        &self,
        view: NodeView<'_>,
        leaf: u64,
        stripe: usize,
        key: u64,
        value: u64,
        replace: bool,
        before_store: F,
    ) -> Result<Result<Option<u64>, F>, E> {
        match Self::leaf_put(view, key) {
            LeafPut::Present { slot, old } => {
                if replace {
                    before_store(Some(old))?;
                    // One failure-atomic store: readers see the old or the new value.
                    let pool = self.pool();
                    let w = pool
                        .store_u64(value_offset(leaf, slot), value)
                        .map_err(FastFairError::from)?;
                    pool.persist(w);
                }
                Ok(Ok(Some(old)))
            }
            LeafPut::Room { at, n } => {
                before_store(None)?;
                let shift = Shift::Insert { at, n, key, value };
                self.shift(view, leaf, stripe, shift)?;
                self.stripes.count_held(stripe, 1);
                Ok(Ok(None))
            }
            LeafPut::Full => Ok(Err(before_store)),
        }
    }

    fn remove_in_leaf(
        &self,
        view: NodeView<'_>,
        leaf: u64,
        stripe: usize,
        slot: usize,
        n: usize,
    ) -> Result<(), FastFairError> {
        let shift = Shift::Remove { at: slot, n };
        self.shift(view, leaf, stripe, shift)?;
        self.stripes.count_held(stripe, 1u64.wrapping_neg());
        Ok(())
    }
}
