//! Retiring layers emptied by removes: mark the layer dead under its only leaf's lock (no key
//! can enter it from then on), name it in a retire word, remove its parent's entry, and free its
//! blocks (clearing the word in the same transaction) once every reader pinned before the
//! entry was removed has left. A parent left empty is retired next.
//!
//! A crash after the word is durable and before the entry's remove leaves the layer linked:
//! the next open keeps it (a walk reaches it), clears the word and retires it again, since it
//! is empty. A crash after the remove leaves it unreachable and named: the open frees it.
//!
//! Writers that reach a dead layer go back to the top and find the entry gone (or wait, a
//! yield at a time, for the retirer to remove it). A layer whose unlink fails (a merge of the
//! parent that cannot run) is made alive again and its word cleared: it stays, empty.

use std::sync::Arc;

use crossbeam_epoch::Guard;
use pmem_ordering::{Backend, PPtr};

use super::{
    is_layer, slice_word, Attempt, EmptyLayer, Layer, RecordMapError, RecordTreeMap, Result,
    Retired, LAYER_TAG, SLICE,
};

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// Retire `layer` if it is empty, then each parent that leaves empty; `key` is a key whose
    /// path leads to it. Nothing happens if another writer filled it meanwhile or retires it
    /// already, or if every retire word is in use (then it stays until the next open).
    ///
    /// `exclusive`: no other writer of the map runs (the open, or a write batch holding the
    /// map's gate), so an empty layer is marked dead whatever its shape. Otherwise only a
    /// layer whose one leaf is empty is, under that leaf's lock (no insert can enter it
    /// then); a layer emptied by a batch's leaf images may keep several empty leaves, which
    /// no remove merged.
    pub(super) fn retire_if_empty(
        &self,
        mut layer: Arc<Layer<B>>,
        key: &[u8],
        exclusive: bool,
    ) -> Result<()> {
        let pool = self.heap.pool();
        while !Arc::ptr_eq(&layer, &self.top) && layer.tree.is_empty() {
            let slot = match self.records.claim_retire_word() {
                Some(slot) => slot,
                None => {
                    self.release_retired();
                    match self.records.claim_retire_word() {
                        Some(slot) => slot,
                        None => return Ok(()),
                    }
                }
            };
            let mark = || {
                let alive = !layer.is_dead();
                if alive {
                    layer.set_dead(true);
                }
                alive
            };
            let marked = if exclusive {
                Ok(layer.tree.is_empty() && mark())
            } else {
                layer.tree.if_empty_locked(mark)
            };
            match marked {
                Ok(true) => {}
                Ok(false) => {
                    self.records.release_retire_word(slot);
                    return Ok(());
                }
                Err(e) => {
                    self.records.release_retire_word(slot);
                    return Err(e.into());
                }
            }
            let parent = match self.unlink(&layer, key, slot) {
                Ok(parent) => parent,
                Err(e) => {
                    layer.set_dead(false);
                    // Still in its parent: the word must not name it (the next open would
                    // keep it anyway, since a walk reaches it).
                    let _ = self.records.clear_retired(pool, slot);
                    return Err(e);
                }
            };
            let guard = self.records.pin();
            let retired = Retired {
                root: layer.root,
                slot,
            };
            self.retiring.defer(layer.root, retired, &guard);
            layer = parent;
        }
        Ok(())
    }

    /// Name `layer` in retire word `slot` and remove the entry naming it from its parent (found
    /// along `key`'s path); the parent.
    fn unlink(&self, layer: &Layer<B>, key: &[u8], slot: usize) -> Result<Arc<Layer<B>>> {
        self.records
            .name_retired(self.heap.pool(), slot, layer.root)?;
        let named = layer.root | LAYER_TAG;
        loop {
            let guard = self.records.pin();
            let (parent, word) = self.entry_naming(layer.root, key, &guard)?;
            // The parent holds this entry, so it is not empty, not dead: its blocks stay.
            let removed = parent.tree.remove_with(word, |old| {
                if old == named {
                    Ok(())
                } else {
                    Err(Attempt::Retry)
                }
            });
            match removed {
                Ok(Some(_)) => return self.owned(parent),
                // A layer made meanwhile between the parent and this one: look again.
                Ok(None) | Err(Attempt::Retry) => continue,
                Err(Attempt::Fail(e)) => return Err(e),
            }
        }
    }

    /// The layer and word whose entry names the layer at `root`, along `key`'s path.
    fn entry_naming<'g>(
        &'g self,
        root: u64,
        key: &[u8],
        guard: &'g Guard,
    ) -> Result<(&'g Layer<B>, u64)> {
        let mut layer: &Layer<B> = &self.top;
        loop {
            let word = slice_word(key, layer.depth());
            match layer.tree.get(word)? {
                Some(v) if v == root | LAYER_TAG => return Ok((layer, word)),
                Some(v) if is_layer(v) => {
                    let child = self.layer(v & !LAYER_TAG, guard)?;
                    if !child.admits(key, layer.start() + SLICE) {
                        break;
                    }
                    layer = child;
                }
                _ => break,
            }
        }
        Err(RecordMapError::Corrupt {
            root: self.root,
            reason: format!("layer {root:#x}, being retired, is not on the path of its keys"),
        })
    }

    /// Free every retired layer whose readers are gone. One whose free fails waits for the
    /// next try (and, if the map is dropped first, for the next open).
    pub(super) fn release_retired(&self) {
        for retired in self.retiring.drain() {
            if self.free_retired(retired).is_err() {
                self.retiring.requeue(retired);
            }
        }
    }

    /// Move the map's epoch on (as far as its readers let it) and free the retired layers
    /// whose readers are gone: with no reader pinned, a layer a remove retired is freed before
    /// the remove returns.
    pub(super) fn settle_retired(&self) {
        if self.retiring.waiting() == 0 {
            return;
        }
        // Two moves of the epoch pass a retirement; a third collects.
        for _ in 0..3 {
            self.records.pin().flush();
        }
        self.release_retired();
    }

    /// Free the blocks of a retired layer no reader can reach, clearing its retire word in the
    /// same transaction.
    pub(super) fn free_retired(&self, retired: Retired) -> Result<()> {
        let layer = self
            .withdraw_layer(retired.root)
            .ok_or_else(|| RecordMapError::Corrupt {
                root: self.root,
                reason: format!("retired layer {:#x} is not one of the map's", retired.root),
            })?;
        let freed = layer
            .tree
            .blocks()
            .map_err(RecordMapError::from)
            .and_then(|blocks| {
                self.heap.transaction(|tx| -> Result<()> {
                    for &b in blocks.iter().chain([retired.root].iter()) {
                        tx.free(PPtr::<u8>::new(b))?;
                    }
                    self.records.clear_retired_in(tx, retired.slot)?;
                    Ok(())
                })
            });
        match freed {
            Ok(()) => {
                self.records.release_retire_word(retired.slot);
                Ok(())
            }
            Err(e) => {
                // Not freed: nothing can have taken its blocks, nor its place in the index.
                self.layers
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(retired.root, layer);
                Err(e)
            }
        }
    }

    /// At open, with no reader or writer yet: retire the layers a crash left empty (each with
    /// a key of its path, deepest first), and free them at once.
    pub(super) fn retire_at_open(&self, empty: Vec<EmptyLayer<B>>) -> Result<()> {
        for (layer, key) in empty.into_iter().rev() {
            if !layer.is_dead() {
                self.retire_if_empty(layer, &key, true)?;
            }
        }
        for retired in self.retiring.take_all() {
            self.free_retired(retired)?;
        }
        Ok(())
    }

    /// The blocks of layers retired and not freed yet (each layer's and its tree's).
    pub(super) fn retiring_blocks(&self) -> Result<Vec<u64>> {
        let layers = self.layers.read().unwrap_or_else(|p| p.into_inner());
        let mut blocks = Vec::new();
        for retired in self.retiring.snapshot() {
            if let Some(layer) = layers.get(&retired.root) {
                blocks.push(retired.root);
                blocks.extend(layer.tree.blocks()?);
            }
        }
        Ok(blocks)
    }

    /// The roots of layers retired and not freed yet (their retire words are set).
    pub(super) fn retiring_roots(&self) -> Vec<u64> {
        self.retiring.snapshot().iter().map(|r| r.root).collect()
    }
}

/// A key whose path leads to a layer: the key bytes before its slice, and one more.
pub(super) fn path_key(prefix: &[u8]) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.push(0);
    key
}

/// The key bytes a layer's path adds under a parent's `word` (ending at `parent_end`): the
/// word's bytes, then the ones the layer skips.
pub(super) fn extend_prefix<B>(
    prefix: &[u8],
    word: u64,
    parent_end: usize,
    child: &Layer<B>,
) -> Vec<u8>
where
    B: Backend,
{
    let mut deeper = prefix.to_vec();
    deeper.extend_from_slice(&word.to_be_bytes()[..SLICE]);
    deeper.extend_from_slice(&child.header.skipped[parent_end - child.header.skip_from..]);
    deeper
}
