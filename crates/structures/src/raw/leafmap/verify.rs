//! [`LeafMap::verify`]: a read-only walk of the root, the chain of leaves, every live slot and
//! every record, listing what is wrong; and [`LeafMap::blocks`], the blocks the map owns.

use std::collections::HashSet;

use pmem_ordering::Backend;

use super::layout::{leaf_tag, low_bits, read_root};
use super::leaf::{key_prefix, Leaf};
use super::{LeafMap, Result};
use crate::kind::StructureKind;
use crate::records::layout::{self as record_layout, owner_of, root_of};
use crate::records::RecordMapError;
use crate::verify::{readable_block, Problem, Verification};

impl<B: Backend> LeafMap<B> {
    /// Walk the whole map read-only: the number of keys, or the first violation
    /// [`LeafMap::verify`] finds as [`RecordMapError::Corrupt`].
    pub fn check(&self) -> Result<u64> {
        let verification = self.verify();
        match verification.findings.first() {
            None => Ok(verification.keys),
            Some(finding) => Err(RecordMapError::Corrupt {
                root: self.root,
                reason: format!("at {:#x}: {}", finding.offset, finding.problem),
            }),
        }
    }

    /// Walk the whole map and report every violation found, with the blocks and keys walked.
    /// Holds the map's lock shared while it walks (writers wait), and reads only.
    ///
    /// Checked: the root (kind, version, checksum, shape); each leaf of the chain (an aligned,
    /// allocated block of the map's leaf size, reached once, its tag, a bitmap within its
    /// slots, not empty unless it is the first); each live slot (its pair read whole against
    /// its checksum; an out-of-line pair's record an allocated block of this map, reached
    /// once); every key after the one before it across the chain; and the keys counted
    /// against [`LeafMap::len`]; the DRAM hash index, which must name each key's slot and
    /// hold as many keys as the length says; and each leaf's DRAM state (offset, bitmap, key
    /// order, key prefixes), which must describe the leaf at its place in the chain, and the
    /// states' successor links (what scans walk), which must follow the bounds' order. For a healthy map, `blocks_walked` is the length of
    /// [`LeafMap::blocks`].
    pub fn verify(&self) -> Verification {
        let index = self.read();
        let heap = &self.heap;
        let pool = heap.pool();
        let mut report = Verification::new(StructureKind::LeafMap, self.root);
        let head = match read_root(pool, self.root) {
            Ok(root) => root.head,
            Err(e) => {
                let found = pool.read::<u64>(self.root).unwrap_or(0);
                let problem = match e {
                    RecordMapError::WrongKind { .. } => Problem::WrongMagic { found },
                    other => Problem::BadRoot {
                        reason: other.to_string(),
                    },
                };
                report.report(self.root, problem);
                return report;
            }
        };
        let slots = self.slots();
        let mut leaves = HashSet::new();
        let mut records = HashSet::new();
        let mut previous: Option<(Vec<u8>, u64)> = None;
        let mut states = index.leaves();
        let mut at = head;
        while at != 0 {
            if !leaves.insert(at) {
                report.report(at, Problem::ReachedTwice { first: at });
                break;
            }
            if !readable_block(heap, &mut report, at, self.config.leaf_bytes, 64) {
                break;
            }
            report.blocks_walked += 1;
            let Ok(words) = pool.words(at, 3) else { break };
            let (bitmap, next, tag) = (words.load(0), words.load(1), words.load(2));
            if tag != leaf_tag(self.root) {
                report.report(at, Problem::NotALeaf { tag });
                break;
            }
            let slots_of_leaf = self.config.slots();
            if bitmap & !low_bits(slots_of_leaf) != 0 {
                report.report(
                    at,
                    Problem::BitmapPastSlots {
                        bitmap,
                        slots: slots_of_leaf,
                    },
                );
            }
            if bitmap & low_bits(slots_of_leaf) == 0 && at != head {
                report.report(at, Problem::EmptyLeaf);
            }
            let mut keys = Vec::new();
            let mut live = bitmap & low_bits(slots_of_leaf);
            while live != 0 {
                let slot = self.config.slot_at(at, live.trailing_zeros() as usize);
                live &= live - 1;
                match slots.pair(slot) {
                    Ok((key, _)) => keys.push((key, slot)),
                    Err(e) => {
                        report.report(
                            slot,
                            Problem::DamagedSlot {
                                reason: e.to_string(),
                            },
                        );
                        continue;
                    }
                }
                if let Ok(Some(record)) = slots.record_of(slot) {
                    self.check_record(&mut report, &mut records, record, slot);
                }
            }
            keys.sort_unstable();
            self.check_leaf_state(&mut report, states.next(), at, bitmap, &keys);
            for (key, slot) in keys {
                if !index.keys.holds(index.keys.hash(&key), slot) {
                    report.report(
                        slot,
                        Problem::KeyIndexDisagrees {
                            detail: format!("it does not name this slot for its key {key:?}"),
                        },
                    );
                }
                if let Some((before, before_slot)) = &previous {
                    if key <= *before {
                        report.report(
                            slot,
                            Problem::KeysUnsorted {
                                previous: *before_slot,
                            },
                        );
                    }
                }
                report.keys += 1;
                previous = Some((key, slot));
            }
            at = next;
        }
        if let Some(extra) = states.next() {
            report.report(
                extra.offset,
                Problem::LeafStateDisagrees {
                    detail: "the DRAM index has a leaf past the chain's end".into(),
                },
            );
        }
        if let Some(detail) = index.links_disagree().or_else(|| index.blocks_disagree()) {
            report.report(self.root, Problem::LeafStateDisagrees { detail });
        }
        if index.keys.len() as u64 != index.len {
            report.report(
                self.root,
                Problem::KeyIndexDisagrees {
                    detail: format!(
                        "it holds {} keys, the length says {}",
                        index.keys.len(),
                        index.len
                    ),
                },
            );
        }
        if report.keys != index.len {
            report.report(
                self.root,
                Problem::CountMismatch {
                    counted: report.keys,
                    recorded: index.len,
                },
            );
        }
        report
    }

    /// Check the DRAM state of the leaf at `at` (bitmap `bitmap`, its readable pairs' keys and
    /// slots `keys`, sorted), `state`, the index's leaf at the same place in key order: its
    /// offset, its bitmap's mirror, its key order (every live, undamaged slot, in key order:
    /// what scans walk) and its slots' key prefixes (what scans and inserts search).
    fn check_leaf_state(
        &self,
        report: &mut Verification,
        state: Option<&Leaf>,
        at: u64,
        bitmap: u64,
        keys: &[(Vec<u8>, u64)],
    ) {
        let mut disagree = |detail: String| {
            report.report(at, Problem::LeafStateDisagrees { detail });
        };
        let Some(state) = state else {
            return disagree("the DRAM index has no leaf for it".into());
        };
        if state.offset != at {
            return disagree(format!(
                "the DRAM index's leaf at its place in key order is at {:#x}",
                state.offset
            ));
        }
        if state.bitmap != bitmap {
            disagree(format!(
                "bitmap mirror {:#x}, the leaf's {bitmap:#x}",
                state.bitmap
            ));
        }
        let first = self.config.slot_at(at, 0);
        let order: Vec<u8> = keys
            .iter()
            .map(|(_, slot)| ((slot - first) / self.config.slot_bytes) as u8)
            .filter(|&slot| state.damaged & (1 << slot) == 0)
            .collect();
        if state.ordered() != order {
            disagree(format!(
                "key order {:?}, the slots' keys give {order:?}",
                state.ordered()
            ));
        }
        for (key, slot) in keys {
            let slot = ((slot - first) / self.config.slot_bytes) as usize;
            if state.damaged & (1 << slot) == 0 && state.prefixes[slot] != key_prefix(key) {
                disagree(format!("slot {slot}'s key prefix is not its key's"));
            }
        }
    }

    /// Check the record at `record`, named by the slot at `slot`: an allocated block of this
    /// map's, reached once.
    fn check_record(
        &self,
        report: &mut Verification,
        records: &mut HashSet<u64>,
        record: u64,
        slot: u64,
    ) {
        let pool = self.heap.pool();
        let Ok(line) = record_layout::first_line(pool, record) else {
            return;
        };
        let bytes = line.header.record_bytes();
        if !readable_block(&self.heap, report, record, bytes, 64) {
            return;
        }
        report.blocks_walked += 1;
        if !records.insert(record) {
            report.report(record, Problem::RecordReachedTwice { first: slot });
        }
        if line.header.owner != owner_of(self.root) {
            report.report(
                record,
                Problem::WrongOwner {
                    found: root_of(line.header.owner),
                    expected: self.root,
                },
            );
        }
    }

    /// Every block the map owns (its root object aside): its leaves and its records.
    pub fn blocks(&self) -> Result<Vec<u64>> {
        let index = self.read();
        let slots = self.slots();
        let mut blocks = Vec::new();
        for leaf in index.leaves() {
            blocks.push(leaf.offset);
            let mut live = leaf.bitmap;
            while live != 0 {
                let slot = live.trailing_zeros() as usize;
                live &= live - 1;
                if let Some(record) = slots.record_of(self.config.slot_at(leaf.offset, slot))? {
                    blocks.push(record);
                }
            }
        }
        blocks.sort_unstable();
        Ok(blocks)
    }
}
