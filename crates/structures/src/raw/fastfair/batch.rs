//! What a write batch of the store (`crate::store::batch`) asks of a tree: its changes to
//! each leaf planned as the leaf's new entry bytes, made to fit first by splits that change
//! no key (so applying them never splits), and written in place under the leaf's lock.
//!
//! A batch holds the tree's writer gate from planning to the end of its apply, so no other
//! writer changes a leaf meanwhile: the bytes planned are what the leaf holds after the apply,
//! whatever it held at a crash in between. The batch logs them before its commit point and
//! copies them in again at recovery (a redo image per leaf), which is why the apply may write
//! a leaf in any order and persist it with the batch's one fence, where FAST persists each
//! line a shift leaves (the `shift.rs` docs): a torn leaf is rewritten whole.
//!
//! Merges are not made: a batch's removes may leave a leaf underfull, or empty, which the
//! tree allows (a later single remove merges it).

use pmem_ordering::Backend;
use pmem_undo_log::Tx;

use super::layout::{entry_offset, entry_range_bytes, node_words};
use super::split::{NodeSplit, SplitScratch, Staged, PATH, SCRATCH};
use super::{FastFair, FastFairError, EMPTY_KEY, RESERVED};

/// A leaf's new bytes, planned by [`FastFair::plan_batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LeafImage {
    /// The leaf's offset.
    pub leaf: u64,
    /// Where the bytes go: the first entry slot that changes.
    pub offset: u64,
    /// The slots from there to the last one that changes, as the leaf will hold them.
    pub bytes: Vec<u8>,
    /// Keys added minus keys removed.
    pub delta: i64,
}

/// One key's change in a batch: its new value, or `None` to remove it.
pub(crate) type KeyChange = (u64, Option<u64>);

/// What planning one leaf found.
enum LeafPlan {
    /// The leaf's image (`None`: the batch changes nothing in it), and how many changes it
    /// took.
    Fits(Option<LeafImage>, usize),
    /// The changes do not fit: split the leaf holding the key at the separator first.
    Split { key: u64, separator: u64 },
}

/// `old` entries with `changes` (sorted by key, one per key) made: the new entries and the
/// change in their number.
fn merged(old: &[(u64, u64)], changes: &[KeyChange]) -> (Vec<(u64, u64)>, i64) {
    let mut out = Vec::with_capacity(old.len() + changes.len());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < changes.len() {
        match (old.get(i), changes.get(j)) {
            (Some(&(k, v)), Some(&(ck, cv))) if k == ck => {
                if let Some(nv) = cv {
                    out.push((k, nv));
                }
                let _ = v;
                i += 1;
                j += 1;
            }
            (Some(&(k, v)), Some(&(ck, _))) if k < ck => {
                out.push((k, v));
                i += 1;
            }
            (Some(&entry), None) => {
                out.push(entry);
                i += 1;
            }
            (_, Some(&(ck, cv))) => {
                if let Some(nv) = cv {
                    out.push((ck, nv));
                }
                j += 1;
            }
            (None, None) => unreachable!("the loop runs while one side has entries"),
        }
    }
    let delta = out.len() as i64 - old.len() as i64;
    (out, delta)
}

impl<B: Backend> FastFair<B> {
    /// Plan `changes` (sorted by key, one per key, no key `u64::MAX`): the new bytes of every
    /// leaf they touch. A leaf they would overfill is split first ([`FastFair::split_leaf_at`],
    /// committed before this returns, changing no key), at the middle of what it would hold, and
    /// its changes are planned again (a split changes no other leaf, so the images planned
    /// before it stand). The caller holds the tree's writer gate: no other writer runs.
    pub(crate) fn plan_batch(
        &self,
        changes: &[KeyChange],
    ) -> Result<Vec<LeafImage>, FastFairError> {
        if changes.iter().any(|&(k, _)| k == EMPTY_KEY) {
            return Err(FastFairError::ReservedKey(RESERVED));
        }
        debug_assert!(
            changes.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, unique"
        );
        let mut images = Vec::new();
        let mut old = Vec::with_capacity(self.capacity);
        let mut at = 0;
        while at < changes.len() {
            match self.plan_leaf(&changes[at..], &mut old)? {
                LeafPlan::Fits(image, taken) => {
                    images.extend(image);
                    at += taken;
                }
                LeafPlan::Split { key, separator } => self.split_leaf_at(key, separator)?,
            }
        }
        Ok(images)
    }

    /// Plan the changes that fall in the leaf of `changes[0]`'s key (a prefix of `changes`),
    /// reading the leaf's entries into `old`.
    fn plan_leaf(
        &self,
        changes: &[KeyChange],
        old: &mut Vec<(u64, u64)>,
    ) -> Result<LeafPlan, FastFairError> {
        let first = changes[0].0;
        let (leaf, _) = self.lock_free_leaf_in(self.shape, first)?;
        let view = self.view(leaf)?;
        if view.level() != 0 || first >= view.high() {
            return Err(self.corrupt(format!(
                "the descent to {first} ended at node {leaf:#x}, not its leaf"
            )));
        }
        let high = view.high();
        let taken = changes.partition_point(|&(k, _)| k < high);
        view.entries_into(old);
        let (new, delta) = merged(old, &changes[..taken]);
        if new.len() > self.capacity {
            return Ok(LeafPlan::Split {
                key: first,
                separator: new[new.len() / 2].0,
            });
        }
        let first_changed = old
            .iter()
            .zip(&new)
            .position(|(a, b)| a != b)
            .unwrap_or(old.len().min(new.len()));
        let end = old.len().max(new.len());
        if first_changed == end {
            return Ok(LeafPlan::Fits(None, taken));
        }
        let image = LeafImage {
            leaf,
            offset: entry_offset(leaf, first_changed),
            bytes: entry_range_bytes(&new, first_changed..end),
            delta,
        };
        Ok(LeafPlan::Fits(Some(image), taken))
    }

    /// Write `image` into its leaf under the leaf's lock, marked as a change for lock-free
    /// readers, and flush it: the caller's fence makes it durable. Counts its keys.
    pub(crate) fn apply_leaf_image(&self, image: &LeafImage) -> Result<(), FastFairError> {
        let pool = self.pool();
        pool.check_range(image.offset, image.bytes.len() as u64)?;
        let stripe = Self::stripe_index(image.leaf);
        let guard = self.stripes.lock(stripe);
        self.stripes.change_begin_held(stripe);
        let written = pool.write(image.offset, &image.bytes);
        self.stripes.change_end_held(stripe);
        guard.count(image.delta as u64);
        drop(guard);
        // Flushed; the batch's fence after every apply makes it durable.
        let _ = pool.flush(written?);
        Ok(())
    }

    /// Split the leaf that holds `key` at `separator` (above the leaf's first key or its low
    /// bound, below its high key), whether or not the leaf is full, with its ancestors as
    /// needed: the leaf keeps its entries below `separator`, a new right sibling takes the
    /// rest (possibly none). One transaction, as [`FastFair::split_insert`]'s, changing no
    /// key's value: a write batch makes room with it before its commit point, so that its
    /// own changes to the leaf never split (`batch.rs`). Locks the nodes it changes like
    /// [`FastFair::lock_for_split`]; the caller holds no stripe.
    pub(super) fn split_leaf_at(&self, key: u64, separator: u64) -> Result<(), FastFairError> {
        let mut path = PATH.take();
        let (top, root_splits, held) = loop {
            let structure = self.lock_free_path_into(key, &mut path)?;
            // The leaf splits whether full or not: the highest node changed is its parent,
            // or above it while the nodes are full.
            let guess = self.leaf_split_top(&path, 0)?;
            let held = self.lock_stripes(Self::stripe_mask(&path[guess..]));
            if !self.path_holds(&path, guess, key, structure)? {
                continue;
            }
            let top = self.leaf_split_top(&path, guess)?;
            let top_full = path.len() == 1 || self.view(path[top])?.is_full();
            if top_full && top > 0 {
                // The split would now go above what is held: an ancestor filled meanwhile.
                continue;
            }
            break (top, top == 0 && top_full, held);
        };
        let leaf = *path.last().expect("a path ends at a leaf");
        let view = self.view(leaf)?;
        if separator >= view.high() || view.level() != 0 {
            PATH.set(path);
            return Err(self.corrupt(format!(
                "a split of leaf {leaf:#x} at {separator} outside its keys (high key {})",
                view.high()
            )));
        }
        let nodes = &path[top..];
        let run = || {
            self.with_nodes_versioned(nodes, || {
                self.heap.transaction(|tx| {
                    let mut scratch = SCRATCH.take();
                    let SplitScratch { staged, entries } = &mut scratch;
                    staged.clear();
                    let result = self
                        .split_leaf_in_tx(tx, &path, separator, staged, entries)
                        .and_then(|()| {
                            tx.snapshot_many(&staged.ranges)?;
                            for (offset, bytes) in &*staged {
                                tx.write(*offset, bytes)?;
                            }
                            Ok(())
                        });
                    SCRATCH.set(scratch);
                    result
                })
            })
        };
        let result = if root_splits {
            self.with_structure_versioned(run)
        } else {
            run()
        };
        drop(held);
        PATH.set(path);
        result
    }

    /// The highest index of `path` a split of its leaf at a separator changes (the leaf
    /// splits whether full or not), looking no higher than `floor`: the parent, then up while
    /// the node is full; 0 when the leaf is the root.
    fn leaf_split_top(&self, path: &[u64], floor: usize) -> Result<usize, FastFairError> {
        if path.len() == 1 {
            return Ok(0);
        }
        self.split_top(&path[..path.len() - 1], floor)
    }

    /// [`FastFair::split_leaf_at`]'s plan, in `staged`: the leaf cut at `separator`, then
    /// [`FastFair::carry_up`].
    fn split_leaf_in_tx(
        &self,
        tx: &Tx<'_, B>,
        path: &[u64],
        separator: u64,
        staged: &mut Staged,
        entries: &mut Vec<(u64, u64)>,
    ) -> Result<(), FastFairError> {
        staged.reserve(path.len() + 1, node_words(self.node_size));
        let leaf_off = *path.last().expect("a path ends at a leaf");
        entries.reserve(self.capacity + 1);
        let leaf = self.view(leaf_off)?;
        leaf.entries_locked_into(entries);
        let old_len = entries.len();
        let mid = entries.partition_point(|&(k, _)| k < separator);
        let sibling = self.split_node(
            tx,
            staged,
            leaf,
            NodeSplit {
                offset: leaf_off,
                kept: &entries[..mid],
                changed: mid..old_len,
                right: &entries[mid..],
                leftmost: 0,
                separator,
            },
        )?;
        self.carry_up(tx, path, (separator, sibling), staged, entries)
    }
}

#[cfg(test)]
mod tests {
    use super::merged;

    #[test]
    fn merging_applies_puts_and_removes_in_key_order() {
        let old = [(1, 10), (3, 30), (5, 50)];
        let changes = [
            (0, Some(1)),
            (3, None),
            (4, Some(40)),
            (5, Some(55)),
            (9, None),
        ];
        let (new, delta) = merged(&old, &changes);
        assert_eq!(new, [(0, 1), (1, 10), (4, 40), (5, 55)]);
        assert_eq!(delta, 1);
        assert_eq!(merged(&[], &[]), (vec![], 0));
        assert_eq!(
            merged(&old, &[(1, None), (3, None), (5, None)]),
            (vec![], -3)
        );
    }
}
