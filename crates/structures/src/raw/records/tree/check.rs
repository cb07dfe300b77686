//! Walks of the whole map: its blocks, and the check of every layer and record.

use crossbeam_epoch::Guard;
use pmem_ordering::Backend;

use super::retire::extend_prefix;
use super::{
    goes_on, is_layer, slice_word, RecordMapError, RecordTreeMap, Result, LAYER_TAG, SLICE,
};
use crate::records::layout;

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// The offsets of every record and every layer below the top reached from it.
    fn walk(&self, guard: &Guard) -> Result<(Vec<u64>, Vec<u64>)> {
        let mut records = Vec::new();
        let mut layers = Vec::new();
        let mut pending = vec![&*self.top];
        while let Some(layer) = pending.pop() {
            for entry in layer.tree.range(..) {
                let (_, value) = entry?;
                if is_layer(value) {
                    let root = value & !LAYER_TAG;
                    layers.push(root);
                    pending.push(self.layer(root, guard)?);
                } else {
                    records.push(value);
                }
            }
        }
        Ok((records, layers))
    }

    /// Every heap block the map owns: each layer's (its block and its tree's, retired layers
    /// not freed yet included), the intent area and every record.
    pub fn blocks(&self) -> Result<Vec<u64>> {
        let guard = self.records.pin();
        let (records, layers) = self.walk(&guard)?;
        let mut blocks = self.top.tree.blocks()?;
        for root in layers {
            blocks.push(root);
            blocks.extend(self.layer(root, &guard)?.tree.blocks()?);
        }
        blocks.extend(self.retiring_blocks()?);
        blocks.push(self.records.intent_area());
        blocks.extend(records);
        Ok(blocks)
    }

    /// Check every layer ([`FastFair::check`](crate::fastfair::FastFair::check)) and every record: allocated, of this map, big
    /// enough, its key's slice the entry's word, in key order. The number of keys.
    pub fn check(&self) -> Result<u64> {
        let corrupt = |reason: String| RecordMapError::Corrupt {
            root: self.root,
            reason,
        };
        let guard = self.records.pin();
        let pool = self.heap.pool();
        let mut pending = vec![(&*self.top, Vec::<u8>::new())];
        let mut count = 0;
        while let Some((layer, prefix)) = pending.pop() {
            let depth = layer.depth();
            layer.tree.check()?;
            for entry in layer.tree.range(..) {
                let (word, value) = entry?;
                if is_layer(value) {
                    if !goes_on(word) {
                        return Err(corrupt(format!(
                            "word {word:#x} of layer {depth} names a layer but ends its keys"
                        )));
                    }
                    let child = self.layer(value & !LAYER_TAG, &guard)?;
                    let parent_end = layer.start() + SLICE;
                    if child.depth() <= depth || child.header.skip_from > parent_end {
                        return Err(corrupt(format!(
                            "layer {:#x} of depth {} skipping from byte {} sits under a layer \
                             of depth {depth}",
                            child.root,
                            child.depth(),
                            child.header.skip_from
                        )));
                    }
                    pending.push((child, extend_prefix(&prefix, word, parent_end, child)));
                    continue;
                }
                let block = self.heap.record_block(value).ok_or_else(|| {
                    corrupt(format!(
                        "word {word:#x} points at {value:#x}, not a published record"
                    ))
                })?;
                let header = layout::read_header(pool, value, block.size)?.ok_or_else(|| {
                    corrupt(format!("the record at {value:#x} does not fit its block"))
                })?;
                if header.owner != self.records.owner() {
                    return Err(corrupt(format!(
                        "the record at {value:#x} belongs to another structure"
                    )));
                }
                let key = layout::read_checked_key(pool, value, &header)?;
                if !key.starts_with(&prefix) || slice_word(&key, depth) != word {
                    return Err(corrupt(format!(
                        "the record at {value:#x} holds a key that does not belong at word \
                         {word:#x} of layer {depth}"
                    )));
                }
                count += 1;
            }
        }
        if count != self.len() {
            return Err(corrupt(format!(
                "{count} records reached, the count says {}",
                self.len()
            )));
        }
        Ok(count)
    }
}
