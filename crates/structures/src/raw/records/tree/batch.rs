//! A write batch's changes to the ordered map of records (see `records/batch.rs` for the
//! record side): room made first, then each layer's changes planned as leaf images
//! ([`crate::fastfair::LeafImage`]), then applied; layers the batch's removes leave empty are
//! retired after the batch, as a single remove retires the layer it empties.
//!
//! Making room changes no key, and uses the single write's steps (`layers.rs`), each its own
//! transaction and fences: a key meeting another key's record goes down with it to a layer at
//! the first slice where the two differ (`push_down`); a key leaving the bytes a compressed
//! layer skips splits it (`split`); two or more new keys of the batch reaching one empty entry
//! get an empty layer at the first slice where they differ (`make_room_for`). Each step starts
//! the descents again from the top, as does a layer found dead (being retired). Once no two
//! new keys share an entry, each change is one entry of one layer: a record's offset stored
//! under its word, or the word removed.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pmem_ordering::Backend;
use pmem_undo_log::RecordBlock;

use super::write::Target;
use super::{goes_on, Attempt, Layer, RecordTreeMap, Result};
use crate::fastfair::KeyChange;
use crate::records::batch::{published, RecordChange, RecordPlan};
use crate::records::layout::check_sizes;
use crate::records::layout::MAX_KEY_BYTES;

/// One layer's share of a plan: the layer, its changes, and a key the batch removes from it.
struct LayerChanges<B: Backend> {
    layer: Arc<Layer<B>>,
    changes: Vec<KeyChange>,
    removed: Option<Vec<u8>>,
}

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// Plan `changes` (one per key): room made, each new value's record staged, each layer's
    /// leaf images planned (leaf splits made first). The caller holds the map's writer gate.
    /// On an error the staged records are given back and the map holds the keys it held (a
    /// layer or split made meanwhile changed none).
    pub(crate) fn plan_batch(&self, changes: &[RecordChange<'_>]) -> Result<RecordPlan> {
        let mut plan = RecordPlan::default();
        match self.plan_into(changes, &mut plan) {
            Ok(()) => Ok(plan),
            Err(e) => {
                plan.cancel(&self.heap);
                Err(e)
            }
        }
    }

    fn plan_into(&self, changes: &[RecordChange<'_>], plan: &mut RecordPlan) -> Result<()> {
        for &(key, value) in changes {
            if let Some(value) = value {
                check_sizes(key, value)?;
            }
        }
        let targets = self.make_room(changes)?;
        let heap = &self.heap;
        let mut by_layer: BTreeMap<u64, LayerChanges<B>> = BTreeMap::new();
        for (&(key, value), target) in changes.iter().zip(targets) {
            // `None`: a remove of a key no map can hold.
            let Some(target) = target else { continue };
            let old = target.record.filter(|_| target.ours);
            let change = match value {
                Some(value) => {
                    let block = self.records.stage_for_batch(heap, key, value)?;
                    plan.publish.push(block);
                    plan.delta += i64::from(old.is_none());
                    Some(block.offset)
                }
                None if old.is_some() => {
                    plan.delta -= 1;
                    None
                }
                None => continue,
            };
            if let Some(old) = old {
                plan.retire.push(published(heap, old)?);
            }
            let share = by_layer
                .entry(target.layer.root)
                .or_insert_with(|| LayerChanges {
                    layer: target.layer.clone(),
                    changes: Vec::new(),
                    removed: None,
                });
            share.changes.push((target.word, change));
            if change.is_none() && share.removed.is_none() {
                share.removed = Some(key.to_vec());
            }
        }
        for (root, mut share) in by_layer {
            share.changes.sort_unstable_by_key(|&(word, _)| word);
            let images = share.layer.tree.plan_batch(&share.changes)?;
            plan.leaves
                .extend(images.into_iter().map(|image| (root, image)));
            if let Some(key) = share.removed {
                if !Arc::ptr_eq(&share.layer, &self.top) {
                    plan.removed_from.push((root, key));
                }
            }
        }
        Ok(())
    }

    /// Make room until no new key of the batch meets another key in an entry, and return each
    /// change's descent (`None` for a remove of a key longer than any map holds): every
    /// descent ends in a live layer, a new key's at an empty entry of its own or at its own
    /// record.
    fn make_room(&self, changes: &[RecordChange<'_>]) -> Result<Vec<Option<Target<B>>>> {
        'again: loop {
            let mut targets = Vec::with_capacity(changes.len());
            // The new keys reaching each empty entry of a word that goes on, by layer and word.
            let mut empty_entries: HashMap<(u64, u64), Vec<usize>> = HashMap::new();
            for (i, &(key, value)) in changes.iter().enumerate() {
                if key.len() > MAX_KEY_BYTES {
                    targets.push(None);
                    continue;
                }
                let target = self.target(key)?;
                if target.layer.is_dead() {
                    // Being retired: its retirer unlinks it, then the descent finds the entry
                    // gone.
                    std::thread::yield_now();
                    continue 'again;
                }
                if value.is_some() {
                    let attempt = if let Some(below) = &target.diverged {
                        Some(self.split(&target.layer, target.word, below, key))
                    } else {
                        match target.record {
                            Some(r) if !target.ours => {
                                Some(self.push_down(&target.layer, target.word, r, key))
                            }
                            None if goes_on(target.word) => {
                                empty_entries
                                    .entry((target.layer.root, target.word))
                                    .or_default()
                                    .push(i);
                                None
                            }
                            _ => None,
                        }
                    };
                    if let Some(attempt) = attempt {
                        settle(attempt)?;
                        continue 'again;
                    }
                }
                targets.push(Some(target));
            }
            if let Some(indices) = empty_entries.values().find(|indices| indices.len() > 1) {
                let target = targets[indices[0]].as_ref().expect("a new key's descent");
                let keys: Vec<&[u8]> = indices.iter().map(|&i| changes[i].0).collect();
                settle(self.make_room_for(&target.layer, target.word, &keys))?;
                continue 'again;
            }
            return Ok(targets);
        }
    }

    /// The layer whose block is at `root`: the top, or one below it.
    fn layer_by_root(&self, root: u64) -> Result<Arc<Layer<B>>> {
        if root == self.top.root {
            return Ok(self.top.clone());
        }
        self.owned_at(root, &self.records.pin())
    }

    /// Apply `plan` (after the batch's commit point): publish, write the leaves, retire;
    /// every store flushed, the batch's fence makes them durable. Returns the retired blocks
    /// for [`RecordTreeMap::finish_batch`].
    pub(crate) fn apply_batch(&self, plan: &RecordPlan) -> Result<Vec<RecordBlock>> {
        let heap = &self.heap;
        plan.publish_all(heap)?;
        for (root, image) in &plan.leaves {
            self.layer_by_root(*root)?.tree.apply_leaf_image(image)?;
        }
        self.count.fetch_add(plan.delta as u64, Ordering::Relaxed);
        plan.retire_all(heap)
    }

    /// After the batch's last fence, with the map's gate still held: hand the blocks it
    /// retired to the limbo, and retire the layers its removes left empty, each as a single
    /// remove retires the layer it empties (its own transactions; a layer that cannot be
    /// retired now, every retire word in use or an error, stays, empty, until the next open
    /// retires it).
    pub(crate) fn finish_batch(&self, blocks: Vec<RecordBlock>, plan: &RecordPlan) {
        self.records.defer_retired(blocks);
        let mut retired_any = false;
        for (root, key) in &plan.removed_from {
            // Gone already if a deeper layer's retirement emptied and retired it.
            let Ok(layer) = self.layer_by_root(*root) else {
                continue;
            };
            if layer.tree.is_empty() {
                // Exclusive: the batch holds the map's gate, so no single writer runs.
                let _ = self.retire_if_empty(layer, key, true);
                retired_any = true;
            }
        }
        if retired_any {
            self.settle_retired();
        }
    }
}

/// A step of making room done (`Ok`, or `Retry`: another writer changed the entry, so the
/// descents start again), or its error.
fn settle(attempt: std::result::Result<(), Attempt>) -> Result<()> {
    match attempt {
        Ok(()) => Ok(()),
        Err(Attempt::Retry) => {
            std::thread::yield_now();
            Ok(())
        }
        Err(Attempt::Fail(e)) => Err(e),
    }
}
