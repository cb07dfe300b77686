//! Layers: opening every layer at open, freeing the ones a crash left unpublished, and making
//! a new one when two keys going on share a slice (see the module docs of [`super`]).

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use crossbeam_epoch as epoch;
use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::{
    is_layer, slice_word, Attempt, Layer, Layers, RecordMapError, RecordTreeMap, Result, LAYER_TAG,
};
use crate::fastfair::FastFair;
use crate::records::layout;

impl<B, P, H> RecordTreeMap<B, P, H>
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>> + Clone,
{
    /// Open every layer below the top, depth first; the number of records.
    pub(super) fn walk_layers(&self) -> Result<(Layers<B, P, H>, u64)> {
        let mut layers = HashMap::new();
        let mut count = 0;
        let mut pending = vec![self.top.clone()];
        while let Some(layer) = pending.pop() {
            for entry in layer.range(..) {
                let (_, value) = entry?;
                if is_layer(value) {
                    let root = value & !LAYER_TAG;
                    if layers.contains_key(&root) {
                        return Err(RecordMapError::Corrupt {
                            root: self.root,
                            reason: format!("layer {root:#x} is reached twice"),
                        });
                    }
                    let opened = Arc::new(FastFair::open(self.heap.clone(), root)?);
                    layers.insert(root, opened.clone());
                    pending.push(opened);
                } else {
                    count += 1;
                }
            }
        }
        Ok((layers, count))
    }

    /// Free every layer an intent line's layer word names that no walk reached: made by a
    /// write a crash stopped before it published the layer.
    pub(super) fn free_unpublished_layers(&self) -> Result<()> {
        let pool = self.heap.pool();
        for word in self.records.layer_words(pool)? {
            let reached = self
                .layers
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&word.layer);
            if reached {
                self.records.clear_layer_word(pool, &word)?;
                continue;
            }
            let orphan = FastFair::open(self.heap.clone(), word.layer)?;
            let blocks = orphan.blocks()?;
            drop(orphan);
            self.heap.transaction(|tx| -> Result<()> {
                for &b in blocks.iter().chain([word.layer].iter()) {
                    tx.free(pmem_ordering::PPtr::<u8>::new(b))?;
                }
                self.records.clear_layer_word_in(tx, &word)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Make a layer holding `record` (whose key goes on past `word` in layer `depth`), and
    /// publish it in `parent` in place of the record. `Retry` if the entry changed meanwhile
    /// (the new layer is freed again).
    pub(super) fn push_down(
        &self,
        parent: &Layer<B, P, H>,
        depth: usize,
        word: u64,
        record: u64,
    ) -> std::result::Result<(), Attempt> {
        self.make_layer(parent, depth, word, Some(record))
    }

    /// Make a layer below `word` of layer `depth` (in `parent`): holding `record` (which the
    /// entry holds now, [`RecordTreeMap::push_down`]), or empty where the entry is absent (a
    /// write batch's room for two new keys sharing the word), and publish it in the entry.
    /// `Retry` if the entry changed meanwhile (the new layer is freed again).
    pub(super) fn make_layer(
        &self,
        parent: &Layer<B, P, H>,
        depth: usize,
        word: u64,
        record: Option<u64>,
    ) -> std::result::Result<(), Attempt> {
        let pool = self.heap.pool();
        let key = match record {
            Some(record) => {
                // Pinned: the record may be retired meanwhile, but not reused while this reads
                // it (the publish below then finds another value and retries).
                let _guard = epoch::pin();
                let header = layout::read_header(pool, record, u64::MAX)?.ok_or_else(|| {
                    RecordMapError::Corrupt {
                        root: self.root,
                        reason: format!("the record at {record:#x} does not parse"),
                    }
                })?;
                Some(layout::read_checked_key(pool, record, &header)?)
            }
            None => None,
        };
        let line = self.records.claim_line();
        let (layer, root) = self.heap.transaction(|tx| -> Result<_> {
            let root = tx.alloc(crate::fastfair::ROOT_BYTES)?.offset();
            tx.write(root, &[0u8; crate::fastfair::ROOT_BYTES as usize])?;
            let layer = FastFair::create(self.heap.clone(), root, self.config)?;
            self.records.name_layer_in(tx, &line, root)?;
            Ok((layer, root))
        })?;
        if let (Some(key), Some(record)) = (&key, record) {
            layer.insert(slice_word(key, depth + 1), record)?;
        }
        let layer = Arc::new(layer);
        self.layers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(root, layer.clone());
        let published = parent.put_with(word, root | LAYER_TAG, true, |old| {
            if old == record {
                Ok(())
            } else {
                Err(Attempt::Retry)
            }
        });
        match published {
            Ok(_) => {
                self.records.clear_line_layer(pool, &line)?;
                Ok(())
            }
            Err(e) => {
                self.layers
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&root);
                let blocks = layer.blocks()?;
                drop(layer);
                self.heap.transaction(|tx| -> Result<()> {
                    for &b in blocks.iter().chain([root].iter()) {
                        tx.free(pmem_ordering::PPtr::<u8>::new(b))?;
                    }
                    self.records.clear_line_layer_in(tx, &line)?;
                    Ok(())
                })?;
                Err(e)
            }
        }
    }
}
