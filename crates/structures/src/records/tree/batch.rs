//! A write batch's changes to the ordered map of records (see `records/batch.rs` for the
//! record side): room made first (a layer where two of the batch's new keys, or a new key
//! and a present one, share a word that goes on), then each layer's changes planned as leaf
//! images ([`crate::fastfair::LeafImage`]), then applied.
//!
//! Making room changes no key: a layer is made and published the way a single write's
//! push-down does it (its own transaction and fences), holding the record it takes over, or
//! nothing where the entry was absent. Once no two new keys share an entry, each change is one
//! entry of one layer: a record's offset stored under its word, or the word removed.

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;
use std::sync::atomic::Ordering;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::{Heap, RecordBlock};

use super::{Attempt, Layer, RecordTreeMap, Result, TOP_AT};
use crate::fastfair::KeyChange;
use crate::records::batch::{published, RecordChange, RecordPlan};
use crate::records::error::RecordMapError;
use crate::records::hash::check_sizes;
use crate::records::layout::MAX_KEY_BYTES;

/// The new keys a batch puts under one entry, as [`RecordTreeMap::make_room`] finds them.
struct Entry {
    depth: usize,
    /// The record the entry holds now, if any.
    record: Option<u64>,
    /// How many of the batch's new values go there.
    puts: usize,
    /// Whether the record is one of those keys'.
    ours: bool,
}

impl<B, P, H> RecordTreeMap<B, P, H>
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>> + Clone,
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
                plan.cancel(&*self.heap);
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
        self.make_room(changes)?;
        let heap = &*self.heap;
        let mut by_layer: BTreeMap<u64, Vec<KeyChange>> = BTreeMap::new();
        for &(key, value) in changes {
            if key.len() > MAX_KEY_BYTES {
                // A remove of a key no map can hold.
                continue;
            }
            let (spot, ours) = self.find(key)?;
            let old = spot.record.filter(|_| ours);
            if spot.record.is_some() && !ours && value.is_some() {
                return Err(RecordMapError::Corrupt {
                    root: self.root,
                    reason: format!(
                        "entry {:#x} of layer {} holds another key's record after the batch \
                         made room",
                        spot.word, spot.depth
                    ),
                });
            }
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
            by_layer
                .entry(spot.layer.root_object())
                .or_default()
                .push((spot.word, change));
        }
        for (root, mut layer_changes) in by_layer {
            layer_changes.sort_unstable_by_key(|&(word, _)| word);
            let images = self.layer_at(root)?.plan_batch(&layer_changes)?;
            plan.leaves.extend(images.into_iter().map(|image| (root, image)));
        }
        Ok(())
    }

    /// Make a layer under every entry where the batch's new keys would meet another key (one
    /// of the batch's, or the record the entry holds), until none do.
    fn make_room(&self, changes: &[RecordChange<'_>]) -> Result<()> {
        'again: loop {
            let mut entries: HashMap<(u64, u64), Entry> = HashMap::new();
            for &(key, value) in changes {
                if value.is_none() {
                    continue;
                }
                let (spot, ours) = self.find(key)?;
                let entry = entries
                    .entry((spot.layer.root_object(), spot.word))
                    .or_insert(Entry {
                        depth: spot.depth,
                        record: spot.record,
                        puts: 0,
                        ours: false,
                    });
                entry.puts += 1;
                entry.ours |= ours;
            }
            for ((root, word), entry) in entries {
                let shared = entry.puts >= 2 || (entry.record.is_some() && !entry.ours);
                if !shared {
                    continue;
                }
                let parent = self.layer_at(root)?;
                match self.make_layer(parent, entry.depth, word, entry.record) {
                    Ok(()) | Err(Attempt::Retry) => continue 'again,
                    Err(Attempt::Fail(e)) => return Err(e),
                }
            }
            return Ok(());
        }
    }

    /// The layer whose root object is at `root`: the top, or one below it.
    fn layer_at(&self, root: u64) -> Result<&Layer<B, P, H>> {
        if root == self.root + TOP_AT {
            return Ok(&self.top);
        }
        self.layer(root)
    }

    /// Apply `plan` (after the batch's commit point): publish, write the leaves, retire;
    /// every store flushed, the batch's fence makes them durable. Returns the retired blocks
    /// for [`RecordTreeMap::defer_batch_retired`].
    pub(crate) fn apply_batch(&self, plan: &RecordPlan) -> Result<Vec<RecordBlock>> {
        let heap = &*self.heap;
        plan.publish_all(heap)?;
        for (root, image) in &plan.leaves {
            self.layer_at(*root)?.apply_leaf_image(image)?;
        }
        self.count.fetch_add(plan.delta as u64, Ordering::Relaxed);
        plan.retire_all(heap)
    }

    /// Hand the blocks a batch retired to the limbo (after its last fence).
    pub(crate) fn defer_batch_retired(&self, blocks: Vec<RecordBlock>) {
        self.records.defer_retired(blocks);
    }
}
