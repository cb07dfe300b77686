//! [`RecordTreeMap::verify`]: a read-only walk of the trie, every layer's FAST&FAIR tree and
//! every record, in key order, listing what is wrong ([`Verification`]).
//!
//! Each layer is walked by FAST&FAIR's own verification (bounded, on any bytes) and reached
//! once (a set of layers walked cuts cycles and cross-links); a layer is found among those the
//! map opened, never opened from the pool's bytes.

use std::collections::HashSet;
use std::sync::Arc;

use pmem_ordering::Backend;

use super::retire::extend_prefix;
use super::{goes_on, is_layer, slice_word, Layer, RecordTreeMap, LAYER_TAG, SLICE};
use crate::kind::StructureKind;
use crate::records::verify::{self, RecordWalk};
use crate::verify::{readable_block, Problem, Verification};

/// A layer's leaf entries as its verification found them, `(node, word, value)`, in order.
type Entries = Vec<(u64, u64, u64)>;

/// A layer of the walk: its entries, the next one to take, its depth and the key bytes before
/// its slice.
struct Frame {
    entries: Entries,
    next: usize,
    depth: usize,
    prefix: Vec<u8>,
}

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// Walk the whole map and report every violation found, with the blocks and keys walked.
    /// Reads only: it changes nothing and takes no lock, so call it with no writers running.
    ///
    /// Checked: the head (magic, format version, the intent area an allocated block, each
    /// intent line well-formed, no layer word set, no retire word set but those of layers
    /// retired and waiting for readers); every layer's FAST&FAIR tree
    /// ([`FastFair::verify`](crate::fastfair::FastFair::verify), whose findings name the
    /// layer) and block (an allocated block of its header's size); each layer entry under a
    /// slice word whose keys go on, naming a layer of the map reached from no other entry,
    /// deeper than the entry's layer and skipping no byte of that layer's slice; each record (on a
    /// cache line, inside the pool, reached once, a published record block, its lengths within
    /// it, of this map, its checksum right), its key under the entry that points at it (the
    /// bytes of the layers above, its slice word at this one) and above the key before it
    /// across the whole trie; and the records counted against [`RecordTreeMap::len`]. For a
    /// healthy map, `blocks_walked` is the length of [`RecordTreeMap::blocks`].
    pub fn verify(&self) -> Verification {
        let _guard = self.records.pin();
        let heap = &self.heap;
        let mut report = Verification::new(StructureKind::RecordBTreeMap, self.root);
        let retiring = self.retiring_roots();
        verify::verify_head(
            heap,
            &mut report,
            self.root,
            StructureKind::RecordBTreeMap,
            &retiring,
        );
        for root in &retiring {
            // Unlinked, not freed yet: its blocks are still the map's.
            if let Some(layer) = self
                .layers
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(root)
            {
                report.blocks_walked += 1;
                verify::absorb(&mut report, layer.tree.verify());
            }
        }
        let mut records = RecordWalk::new(heap, self.records.owner());
        let mut layers_walked = HashSet::new();
        let mut previous: Option<(u64, Vec<u8>)> = None;
        let mut stack = vec![Frame {
            entries: Self::verify_layer(&mut report, &self.top.tree),
            next: 0,
            depth: 0,
            prefix: Vec::new(),
        }];
        while let Some(frame) = stack.last_mut() {
            let Some(&(node, word, value)) = frame.entries.get(frame.next) else {
                stack.pop();
                continue;
            };
            frame.next += 1;
            let depth = frame.depth;
            if is_layer(value) {
                let layer = value & !LAYER_TAG;
                let Some(found) = self.walkable_layer(
                    &mut report,
                    &mut layers_walked,
                    node,
                    (word, depth),
                    layer,
                ) else {
                    continue;
                };
                let parent_end = SLICE * (depth + 1);
                if found.depth() <= depth || found.header.skip_from > parent_end {
                    report.report(
                        node,
                        Problem::LayerOutOfPlace {
                            layer,
                            depth: found.depth() as u64,
                            skip_from: found.header.skip_from as u64,
                            parent_depth: depth as u64,
                        },
                    );
                    continue;
                }
                let prefix = extend_prefix(&frame.prefix, word, parent_end, &found);
                stack.push(Frame {
                    entries: Self::verify_layer(&mut report, &found.tree),
                    next: 0,
                    depth: found.depth(),
                    prefix,
                });
                continue;
            }
            report.keys += 1;
            let Some(key) = records.verify(&mut report, node, value) else {
                continue;
            };
            if !key.starts_with(&frame.prefix) || slice_word(&key, depth) != word {
                report.report(
                    node,
                    Problem::KeyOutsideEntry {
                        record: value,
                        depth: depth as u64,
                        word,
                    },
                );
            }
            if let Some((before, before_key)) = &previous {
                if key <= *before_key {
                    report.report(value, Problem::KeysUnsorted { previous: *before });
                }
            }
            previous = Some((value, key));
        }
        if report.keys != self.len() {
            report.report(
                self.root,
                Problem::CountMismatch {
                    counted: report.keys,
                    recorded: self.len(),
                },
            );
        }
        report
    }

    /// The layer an entry (in node `node`, under `word` of layer `depth`) names, if the walk
    /// goes down to it: under a word whose keys go on, one of the map's layers, not walked
    /// before, its root object an allocated block (counted as walked).
    fn walkable_layer(
        &self,
        report: &mut Verification,
        walked: &mut HashSet<u64>,
        node: u64,
        (word, depth): (u64, usize),
        layer: u64,
    ) -> Option<Arc<Layer<B>>> {
        if !goes_on(word) {
            let depth = depth as u64;
            report.report(node, Problem::LayerUnderEndingWord { word, depth });
            return None;
        }
        if !walked.insert(layer) {
            let reached_twice = true;
            report.report(
                node,
                Problem::UnknownLayer {
                    layer,
                    reached_twice,
                },
            );
            return None;
        }
        let layers = self.layers.read().unwrap_or_else(|p| p.into_inner());
        let Some(found) = layers.get(&layer).cloned() else {
            let reached_twice = false;
            report.report(
                node,
                Problem::UnknownLayer {
                    layer,
                    reached_twice,
                },
            );
            return None;
        };
        let root_bytes = found.header.block_bytes();
        if readable_block(&self.heap, report, layer, root_bytes, 64) {
            report.blocks_walked += 1;
        }
        Some(found)
    }

    /// Verify one layer's tree into `report`; its leaf entries.
    fn verify_layer(report: &mut Verification, layer: &crate::fastfair::FastFair<B>) -> Entries {
        let mut entries = Vec::new();
        let walk =
            layer.verify_visiting(&mut |node, word, value| entries.push((node, word, value)));
        verify::absorb(report, walk);
        entries
    }
}
