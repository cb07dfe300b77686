//! Layers: opening every layer at open, freeing the ones a crash left unpublished or
//! unlinked, and making a new one, published in place of a record (`push_down`: two keys going
//! on with the same bytes) or of a layer (`split`: a key leaving the bytes a layer skips), or,
//! empty, in an empty entry (`make_room_for`: new keys of a write batch that share it). See
//! the module docs of [`super`] and the format in `layout.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use pmem_ordering::{Backend, PPtr};

use super::layout::LayerHeader;
use super::retire::{extend_prefix, path_key};
use super::{
    is_layer, slice_word, Attempt, EmptyLayer, Layer, Layers, RecordMapError, RecordTreeMap,
    Result, LAYER_TAG, SLICE,
};
use crate::fastfair::FastFair;
use crate::records::intent::IntentLine;
use crate::records::layout as record_layout;

/// A layer made and not yet published, with the intent line whose layer word names it.
type MadeLayer<'a, B> = (Arc<Layer<B>>, IntentLine<'a>);

/// What the walk at open found.
pub(super) struct Walked<B: Backend> {
    /// Every layer below the top, opened.
    pub layers: Layers<B>,
    /// Records reached.
    pub records: u64,
    /// Layers below the top holding no entry, each with a key of its path, in walk order
    /// (a layer before those below it).
    pub empty: Vec<EmptyLayer<B>>,
}

/// The number of leading bytes `a` and `b` share.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The first depth from `from` on (below `limit`, if it gets there: `None`) where `key`'s slice
/// word differs from `other(depth)`, given that the two agree on their first `common` bytes:
/// every depth whose slice ends before `common` bytes agrees, but for one where a key ends.
fn first_difference(
    key: &[u8],
    other: impl Fn(usize) -> u64,
    common: usize,
    from: usize,
    limit: usize,
) -> Option<usize> {
    let mut depth = from.max((common / SLICE).saturating_sub(1));
    while depth < limit {
        if slice_word(key, depth) != other(depth) {
            return Some(depth);
        }
        depth += 1;
    }
    None
}

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// Open every layer below the top, depth first (each layer's header read against its
    /// parent's depth); count the records and list the empty layers.
    pub(super) fn walk_layers(&self) -> Result<Walked<B>> {
        let corrupt = |reason: String| RecordMapError::Corrupt {
            root: self.root,
            reason,
        };
        let mut walked = Walked {
            layers: HashMap::new(),
            records: 0,
            empty: Vec::new(),
        };
        let mut pending = vec![(self.top.clone(), Vec::new())];
        while let Some((layer, prefix)) = pending.pop() {
            let parent_end = layer.start() + SLICE;
            for entry in layer.tree.range(..) {
                let (word, value) = entry?;
                if !is_layer(value) {
                    walked.records += 1;
                    continue;
                }
                let root = value & !LAYER_TAG;
                if walked.layers.contains_key(&root) {
                    return Err(corrupt(format!("layer {root:#x} is reached twice")));
                }
                let header = LayerHeader::read(&self.heap, root, layer.depth()).map_err(corrupt)?;
                let tree = FastFair::open(&self.heap, root)?;
                let child = Arc::new(Layer::new(tree, root, header));
                let deeper = extend_prefix(&prefix, word, parent_end, &child);
                if child.tree.is_empty() {
                    walked.empty.push((child.clone(), path_key(&deeper)));
                }
                walked.layers.insert(root, child.clone());
                pending.push((child, deeper));
            }
        }
        Ok(walked)
    }

    /// Free every layer a layer word or retire word names that no walk reached: made by a
    /// write a crash stopped before it published the layer, or unlinked by a retire a crash
    /// stopped before its free. A word naming a layer the walk reached is cleared.
    pub(super) fn free_unlinked_layers(&self) -> Result<()> {
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
            let orphan = FastFair::open(&self.heap, word.layer)?;
            let blocks = orphan.blocks()?;
            drop(orphan);
            self.heap.transaction(|tx| -> Result<()> {
                for &b in blocks.iter().chain([word.layer].iter()) {
                    tx.free(PPtr::<u8>::new(b))?;
                }
                self.records.clear_layer_word_in(tx, &word)?;
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Make a layer holding `record` (whose key goes on past `word` in `parent`, as `key`
    /// does), at the first slice where the two keys differ, and publish it in `parent` in
    /// place of the record. `Retry` if the entry changed meanwhile (the new layer is freed
    /// again).
    pub(super) fn push_down(
        &self,
        parent: &Layer<B>,
        word: u64,
        record: u64,
        key: &[u8],
    ) -> std::result::Result<(), Attempt> {
        let pool = self.heap.pool();
        let other = {
            // Pinned: the record may be retired meanwhile, but not reused while this reads it
            // (the publish below then finds another value and retries).
            let _guard = self.records.pin();
            let header = record_layout::read_header(pool, record, u64::MAX)?.ok_or_else(|| {
                RecordMapError::Corrupt {
                    root: self.root,
                    reason: format!("the record at {record:#x} does not parse"),
                }
            })?;
            record_layout::read_checked_key(pool, record, &header)?
        };
        let parent_end = parent.start() + SLICE;
        let common = common_prefix(key, &other);
        let limit = key.len().max(other.len()) / SLICE + 1;
        let depth = first_difference(
            key,
            |d| slice_word(&other, d),
            common,
            parent.depth() + 1,
            limit,
        )
        .ok_or(Attempt::Retry)?;
        let header = LayerHeader::new(depth, parent_end, &other);
        let (layer, line) = self.make_layer(header, Some((slice_word(&other, depth), record)))?;
        self.publish(parent, word, Some(record), layer, line)
    }

    /// Make an empty layer for `keys` (two or more new keys of a write batch, which all reach
    /// the empty entry under `word` in `parent`), at the first slice where two of them differ,
    /// skipping the bytes they share before it as [`Self::push_down`] does, and publish it in
    /// the entry. `Retry` if the entry changed meanwhile.
    pub(super) fn make_room_for(
        &self,
        parent: &Layer<B>,
        word: u64,
        keys: &[&[u8]],
    ) -> std::result::Result<(), Attempt> {
        let parent_end = parent.start() + SLICE;
        let first: &[u8] = keys.first().copied().unwrap_or_default();
        let depth = keys
            .get(1..)
            .unwrap_or_default()
            .iter()
            .filter_map(|other| {
                let limit = first.len().max(other.len()) / SLICE + 1;
                first_difference(
                    first,
                    |d| slice_word(other, d),
                    common_prefix(first, other),
                    parent.depth() + 1,
                    limit,
                )
            })
            .min()
            .ok_or_else(|| RecordMapError::Corrupt {
                root: self.root,
                reason: "the new keys a write batch makes room for do not differ".into(),
            })?;
        let header = LayerHeader::new(depth, parent_end, first);
        let (layer, line) = self.make_layer(header, None)?;
        self.publish(parent, word, None, layer, line)
    }

    /// Make a layer at the first slice where `key` leaves the bytes `below` skips, holding
    /// `below`, and publish it in `parent` (whose entry under `word` names `below`) in its
    /// place. `Retry` if the entry changed meanwhile.
    pub(super) fn split(
        &self,
        parent: &Layer<B>,
        word: u64,
        below: &Layer<B>,
        key: &[u8],
    ) -> std::result::Result<(), Attempt> {
        let parent_end = parent.start() + SLICE;
        let skipped = &below.header.skipped[parent_end - below.header.skip_from..];
        let common = parent_end + common_prefix(&key[parent_end.min(key.len())..], skipped);
        let depth = first_difference(
            key,
            |d| below.path_word(d),
            common,
            parent.depth() + 1,
            below.depth(),
        )
        .ok_or_else(|| RecordMapError::Corrupt {
            root: self.root,
            reason: format!(
                "a key was found to leave the bytes layer {:#x} skips, and does not",
                below.root
            ),
        })?;
        let header = LayerHeader::new(depth, parent_end, key);
        let named = below.root | LAYER_TAG;
        let (layer, line) = self.make_layer(header, Some((below.path_word(depth), named)))?;
        self.publish(parent, word, Some(named), layer, line)
    }

    /// Make a layer with `header` holding the one entry `word -> value` (or nothing: room a
    /// write batch makes), named in an intent line's layer word by the transaction that makes
    /// it, and enter it in the map's index (no entry names it yet).
    fn make_layer(
        &self,
        header: LayerHeader,
        entry: Option<(u64, u64)>,
    ) -> std::result::Result<MadeLayer<'_, B>, Attempt> {
        let line = self.records.claim_line();
        let (tree, root) = self.heap.transaction(|tx| -> Result<_> {
            let root = tx.alloc(header.block_bytes())?.offset();
            header.write(tx, root)?;
            let tree = FastFair::create(&self.heap, root, self.config)?;
            self.records.name_layer_in(tx, &line, root)?;
            Ok((tree, root))
        })?;
        let layer = Arc::new(Layer::new(tree, root, header));
        if let Some((word, value)) = entry {
            if let Err(e) = layer.tree.insert(word, value) {
                self.free_unpublished(layer, &line)?;
                return Err(e.into());
            }
        }
        self.layers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(root, layer.clone());
        Ok((layer, line))
    }

    /// Publish `layer` in `parent`'s entry under `word`, in place of `expected` (`None`: no
    /// entry); then clear its layer word. If the entry holds something else (`Retry`) or the
    /// store fails, the layer is taken out of the index and freed.
    fn publish(
        &self,
        parent: &Layer<B>,
        word: u64,
        expected: Option<u64>,
        layer: Arc<Layer<B>>,
        line: IntentLine<'_>,
    ) -> std::result::Result<(), Attempt> {
        let pool = self.heap.pool();
        let published = {
            let _guard = self.records.pin();
            if parent.is_dead() {
                // Emptied meanwhile, so the entry is gone; and its blocks may be freed.
                Err(Attempt::Retry)
            } else {
                parent
                    .tree
                    .put_with(word, layer.root | LAYER_TAG, true, |old| {
                        if old == expected {
                            Ok(())
                        } else {
                            Err(Attempt::Retry)
                        }
                    })
            }
        };
        match published {
            Ok(_) => {
                self.records.clear_line_layer(pool, &line)?;
                Ok(())
            }
            Err(e) => {
                self.withdraw_layer(layer.root);
                self.free_unpublished(layer, &line)?;
                Err(e)
            }
        }
    }

    /// Free a layer no entry ever named, clearing the layer word that names it.
    fn free_unpublished(&self, layer: Arc<Layer<B>>, line: &IntentLine<'_>) -> Result<()> {
        let blocks = layer.tree.blocks()?;
        let root = layer.root;
        drop(layer);
        self.heap.transaction(|tx| -> Result<()> {
            for &b in blocks.iter().chain([root].iter()) {
                tx.free(PPtr::<u8>::new(b))?;
            }
            self.records.clear_line_layer_in(tx, line)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_difference_is_the_first_slice_whose_words_differ() {
        let a = b"abcdefghijklmnopqrstu".to_vec();
        let mut b = a.clone();
        b[16] = b'X';
        let c = common_prefix(&a, &b);
        assert_eq!(c, 16);
        assert_eq!(
            first_difference(&a, |d| slice_word(&b, d), c, 1, 9),
            Some(2)
        );
        // A key ending at a slice's end differs from its extension at that slice.
        let short = a[..14].to_vec();
        let c = common_prefix(&a, &short);
        assert_eq!(
            first_difference(&a, |d| slice_word(&short, d), c, 1, 9),
            Some(1)
        );
        assert_eq!(first_difference(&a, |d| slice_word(&a, d), 21, 1, 4), None);
    }
}
