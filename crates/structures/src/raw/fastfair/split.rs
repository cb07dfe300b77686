//! FAIR splits: a full leaf, and its ancestors as needed, split in one undo-log transaction
//! whose writes are staged in FAIR order (new sibling in full, link and high key, truncation,
//! parent, new root). The transaction is what makes a split crash-safe: a crash at any point
//! rolls the whole split back at [`pmem_undo_log::Heap::open`]. The order is for lock-free
//! readers, which may run beside it. A split locks only the nodes it changes
//! ([`FastFair::lock_for_split`]), so writers of other leaves run beside it too, and so may
//! other splits' transactions (the heap runs one per lane at once).

use std::cell::Cell;
use std::ops::Range;

use pmem_ordering::Backend;
use pmem_undo_log::Tx;

use super::layout::{
    entry_offset, high_offset, key_word, node_words, push_entry_words, push_node_words,
    sibling_offset, NodeHeader, NodeView, LINE,
};
use super::locks::HeldStripes;
use super::{FastFair, FastFairError, EMPTY_KEY};

/// Writes planned in order, over one buffer of words: a split is planned, then logged, then
/// written. Planning a split allocates only these two buffers (and the entries' one).
#[derive(Default)]
pub(super) struct Staged {
    /// Every planned write's words, little-endian, back to back.
    words: Vec<u64>,
    /// Each write's pool offset and the end of its words in `words` (it starts where the
    /// previous one ends).
    writes: Vec<(u64, usize)>,
    /// The ranges to snapshot, as [`push_range`] joins them: noted as each write to an
    /// existing node is staged, so the writes are walked once, to write them. A new node's
    /// write has none: a fresh block needs no snapshot (it is unreachable if the split rolls
    /// back, and its allocation is undone).
    pub(super) ranges: Vec<(u64, u64)>,
}

impl Staged {
    /// Empty, with no buffers yet.
    const fn new() -> Self {
        Self {
            words: Vec::new(),
            writes: Vec::new(),
            ranges: Vec::new(),
        }
    }

    /// Empty it, keeping its buffers.
    pub(super) fn clear(&mut self) {
        self.words.clear();
        self.writes.clear();
        self.ranges.clear();
    }

    /// Room for a split of `levels` nodes of `node_words` words each, without regrowing.
    pub(super) fn reserve(&mut self, levels: usize, node_words: usize) {
        self.words.reserve(2 * levels * node_words + 2);
        self.writes.reserve(4 * levels + 2);
        self.ranges.reserve(4 * levels + 2);
    }

    fn end_write(&mut self, offset: u64) {
        self.writes.push((offset, self.words.len()));
    }

    /// [`Staged::end_write`] of a write to an existing node, its range noted to snapshot.
    fn end_logged_write(&mut self, offset: u64) {
        let start = self.writes.last().map_or(0, |&(_, end)| end);
        let end = self.words.len();
        self.end_write(offset);
        push_range(&mut self.ranges, offset, 8 * (end - start) as u64);
    }

    /// One 8-byte word at `offset`.
    fn word(&mut self, offset: u64, value: u64) {
        self.words.push(value.to_le());
        self.end_logged_write(offset);
    }

    /// A whole new node at `offset` (a block the split allocated: nothing to snapshot).
    fn node(&mut self, offset: u64, header: NodeHeader, entries: &[(u64, u64)], capacity: usize) {
        push_node_words(&mut self.words, header, entries, capacity);
        self.end_write(offset);
    }

    /// Slots `slots` of the node at `offset`, which holds `entries` (the slots past them free).
    fn entries(&mut self, offset: u64, entries: &[(u64, u64)], slots: Range<usize>) {
        let at = entry_offset(offset, slots.start);
        push_entry_words(&mut self.words, entries, slots);
        self.end_logged_write(at);
    }

    /// Slots `at..=old_len` of the node `view` shows at `offset`, which holds `old_len`
    /// entries, once `entry` goes in at `at`: the new entry, then the node's entries from `at`
    /// on, each one slot to the right. Read from the node itself, not from a copy of all its
    /// entries: the caller holds its stripe, so it holds no transient duplicate (see
    /// [`NodeView::entries_locked_into`]).
    fn inserted(
        &mut self,
        offset: u64,
        view: &NodeView<'_>,
        at: usize,
        old_len: usize,
        entry: (u64, u64),
    ) {
        self.words.push(entry.0.to_le());
        self.words.push(entry.1.to_le());
        // Those entries are the node's words from slot `at`'s key to slot `old_len`'s, in
        // order: copied as one run of known length.
        self.words
            .extend((key_word(at)..key_word(old_len)).map(|word| {
                // SAFETY: `word < key_word(old_len) <= key_word(capacity) == view.words()` (the
                // caller's `old_len` is a count of the node's entries, at most its capacity).
                unsafe { view.word_unchecked(word) }.to_le()
            }));
        self.end_logged_write(entry_offset(offset, at));
    }
}

/// A split's buffers, kept per thread between splits so that planning and logging a split
/// allocate nothing once the thread's first split has sized them.
#[derive(Default)]
pub(super) struct SplitScratch {
    pub(super) staged: Staged,
    /// The entries of the node being split (plus the one going in), level by level.
    pub(super) entries: Vec<(u64, u64)>,
}

thread_local! {
    /// This thread's [`SplitScratch`]: taken out for a split and put back after it, so a
    /// split run from inside another (a test hook's) finds it empty and uses fresh buffers.
    /// Initialised as a constant: no lazy-initialisation check on each use.
    pub(super) static SCRATCH: Cell<SplitScratch> = const {
        Cell::new(SplitScratch {
            staged: Staged::new(),
            entries: Vec::new(),
        })
    };

    /// The buffer of this thread's last split path ([`LockedSplit`]), handed back when the
    /// split drops it, so a split's path allocates nothing after the thread's first.
    pub(super) static PATH: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
}

/// The writes in order, as (offset, bytes).
impl<'a> IntoIterator for &'a Staged {
    type Item = (&'a u64, &'a [u8]);
    type IntoIter = StagedWrites<'a>;

    fn into_iter(self) -> StagedWrites<'a> {
        StagedWrites {
            staged: self,
            start: 0,
            next: 0,
        }
    }
}

/// The iterator over a [`Staged`]'s writes.
pub(super) struct StagedWrites<'a> {
    staged: &'a Staged,
    /// Where the next write's words start.
    start: usize,
    /// The next write's index.
    next: usize,
}

impl<'a> Iterator for StagedWrites<'a> {
    type Item = (&'a u64, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (offset, end) = self.staged.writes.get(self.next)?;
        let words = &self.staged.words[self.start..*end];
        self.start = *end;
        self.next += 1;
        Some((offset, bytemuck::cast_slice(words)))
    }
}

/// The slots of a node to rewrite when an entry goes in at `at` of its `old_len` entries and
/// the node then keeps the first `kept` of the `old_len + 1` (all of them if it does not
/// split): from the first slot whose entry changes (the new one's, or the first that moves
/// out) to the end of the old or new entries, whichever is further. The transaction then
/// logs and flushes only those lines, not the whole node.
fn changed_slots(old_len: usize, at: usize, kept: usize) -> Range<usize> {
    at.min(kept)..old_len.max(kept)
}

/// Add `[offset, offset + len)` to the ranges to snapshot, joined to the previous range if
/// both lie in one cache line (a node's high key and sibling link): one log entry for both,
/// the few bytes between them logged too (the split holds the node's lock, so they are
/// restored to what they are).
fn push_range(ranges: &mut Vec<(u64, u64)>, offset: u64, len: u64) {
    let line = |at: u64| at / LINE;
    if let Some((start, length)) = ranges.last_mut() {
        let end = offset + len;
        let prev_end = *start + *length;
        let one_line = len > 0
            && *length > 0
            && line(*start) == line(prev_end - 1)
            && line(offset) == line(*start)
            && line(end - 1) == line(*start);
        if one_line {
            let union_start = (*start).min(offset);
            *length = prev_end.max(end) - union_start;
            *start = union_start;
            return;
        }
    }
    ranges.push((offset, len));
}

/// One node's split, planned: what it keeps and what moves to its new sibling.
pub(super) struct NodeSplit<'a> {
    /// The node's offset.
    pub(super) offset: u64,
    /// The entries it keeps.
    pub(super) kept: &'a [(u64, u64)],
    /// Its slots that change ([`changed_slots`]).
    pub(super) changed: Range<usize>,
    /// The sibling's entries, and its leftmost child (0 for a leaf).
    pub(super) right: &'a [(u64, u64)],
    pub(super) leftmost: u64,
    /// The node's new high key: every key of the sibling is at or above it.
    pub(super) separator: u64,
}

/// A split's path, checked and locked: the stripes of `path[top..]` are held, which are the
/// nodes the split changes (the leaf, the full ancestors it splits, and the one above them
/// that takes the last separator, or the root and the root pointer when the root splits).
pub(super) struct LockedSplit<'a> {
    path: Vec<u64>,
    top: usize,
    root_splits: bool,
    _held: HeldStripes<'a>,
}

impl LockedSplit<'_> {
    /// The leaf to split.
    pub(super) fn leaf(&self) -> u64 {
        *self.path.last().expect("a path ends at a leaf")
    }
}

impl Drop for LockedSplit<'_> {
    fn drop(&mut self) {
        // The path's buffer goes back to the thread for its next split.
        PATH.set(std::mem::take(&mut self.path));
    }
}

impl<B: Backend> FastFair<B> {
    /// Lock the nodes a split of `key`'s (full) leaf would change, and nothing else: find the
    /// path without a lock, lock the stripes of the path from the highest node the split
    /// changes down to the leaf, in index order, then check under the locks that the path
    /// still stands ([`FastFair::path_holds`]) and the split still stops within it (else
    /// let go and start again). The caller holds no stripe. The leaf may have gained room
    /// meanwhile: the caller checks it under the lock before it splits.
    pub(super) fn lock_for_split(&self, key: u64) -> Result<LockedSplit<'_>, FastFairError> {
        let mut path = PATH.take();
        loop {
            let structure = self.lock_free_path_into(key, &mut path)?;
            let guess = self.split_top(&path, 0)?;
            #[cfg(test)]
            super::test_interleaving::at(super::test_interleaving::Point::SplitPlanned);
            let held = self.lock_stripes(Self::stripe_mask(&path[guess..]));
            if !self.path_holds(&path, guess, key, structure)? {
                continue;
            }
            // Only the held nodes are read: the walk stops at `guess` at the latest.
            let top = self.split_top(&path, guess)?;
            let top_full = self.view(path[top])?.is_full();
            if top_full && top > 0 {
                // The split would now go above what is held: an ancestor filled meanwhile.
                continue;
            }
            return Ok(LockedSplit {
                root_splits: top == 0 && top_full,
                path,
                top,
                _held: held,
            });
        }
    }

    /// The nodes a split of `key`'s leaf would change now (the leaf full), for tests that
    /// pick writers whose nodes do not overlap it.
    #[cfg(test)]
    pub(super) fn split_changes(&self, key: u64) -> Result<Vec<u64>, FastFairError> {
        let (path, _) = self.lock_free_path(key)?;
        let top = self.split_top(&path, 0)?;
        Ok(path[top..].to_vec())
    }

    /// The highest index of `path` a split of its leaf changes, looking no higher than
    /// `floor`: going up from the leaf while the node is full (a full node splits and so
    /// changes its parent).
    pub(super) fn split_top(&self, path: &[u64], floor: usize) -> Result<usize, FastFairError> {
        let mut top = path.len() - 1;
        while top > floor && self.view(path[top])?.is_full() {
            top -= 1;
        }
        Ok(top)
    }

    /// Split the full leaf of `split` to insert `key`, and its ancestors as needed: one
    /// transaction, written in FAIR order (see the module docs), with the stripes of the
    /// nodes it changes marked, and the structure version too if the root splits.
    pub(super) fn split_insert(
        &self,
        split: &LockedSplit<'_>,
        key: u64,
        value: u64,
    ) -> Result<(), FastFairError> {
        let path = &split.path[split.top..];
        let run = || {
            self.with_nodes_versioned(path, || {
                self.heap.transaction(|tx| {
                    let mut scratch = SCRATCH.take();
                    let result = self.split_with(tx, path, key, value, &mut scratch);
                    SCRATCH.set(scratch);
                    result
                })
            })
        };
        if split.root_splits {
            self.with_structure_versioned(run)
        } else {
            run()
        }
    }

    /// The split's transaction body, on the thread's buffers: plan, log, write.
    fn split_with(
        &self,
        tx: &Tx<'_, B>,
        path: &[u64],
        key: u64,
        value: u64,
        scratch: &mut SplitScratch,
    ) -> Result<(), FastFairError> {
        let SplitScratch { staged, entries } = scratch;
        staged.clear();
        self.split_in_tx(tx, path, key, value, staged, entries)?;
        // Log every range before writing any, as one batch: one copy into the log, one
        // checksum and one fence for all of them (the new nodes have no range: see
        // `Staged::ranges`). The writes still follow in FAIR order, for lock-free readers.
        tx.snapshot_many(&staged.ranges)?;
        for (offset, bytes) in &*staged {
            tx.write(*offset, bytes)?;
            #[cfg(test)]
            super::test_interleaving::at(super::test_interleaving::Point::SplitWrote(*offset));
        }
        Ok(())
    }

    /// Plan the split in `staged`, the writes in FAIR order (new nodes are allocated in `tx`):
    /// up from the leaf at the end of `path` until a node has room, or through `path[0]`, the
    /// root, to a new root.
    fn split_in_tx(
        &self,
        tx: &Tx<'_, B>,
        path: &[u64],
        key: u64,
        value: u64,
        staged: &mut Staged,
        entries: &mut Vec<(u64, u64)>,
    ) -> Result<(), FastFairError> {
        staged.reserve(path.len() + 1, node_words(self.node_size));
        let leaf_off = *path.last().expect("a path ends at a leaf");
        // One buffer of entries, reused level by level up the path.
        entries.reserve(self.capacity + 1);
        let leaf = self.view(leaf_off)?;
        leaf.entries_locked_into(entries);
        let old_len = entries.len();
        let at = entries.partition_point(|&(k, _)| k < key);
        entries.insert(at, (key, value));
        let mid = entries.len() / 2;
        let separator = entries[mid].0;
        let sibling = self.split_node(
            tx,
            staged,
            leaf,
            NodeSplit {
                offset: leaf_off,
                kept: &entries[..mid],
                changed: changed_slots(old_len, at, mid),
                right: &entries[mid..],
                leftmost: 0,
                separator,
            },
        )?;
        self.carry_up(tx, path, (separator, sibling), staged, entries)
    }

    /// The rest of a split whose leaf (the end of `path`) is planned and whose sibling and
    /// separator are `carry`: the separator goes into the parent, which splits in turn if it is
    /// full, up to a node with room or through `path[0]`, the root, to a new root.
    pub(super) fn carry_up(
        &self,
        tx: &Tx<'_, B>,
        path: &[u64],
        mut carry: (u64, u64),
        staged: &mut Staged,
        entries: &mut Vec<(u64, u64)>,
    ) -> Result<(), FastFairError> {
        for &parent_off in path[..path.len() - 1].iter().rev() {
            let parent = self.view(parent_off)?;
            let old_len = parent.count();
            if old_len < self.capacity {
                // Room: the separator goes in, the entries after it move one slot right
                // (the slots `changed_slots` names), staged from the node itself.
                let at = parent.lower_bound(carry.0);
                staged.inserted(parent_off, &parent, at, old_len, carry);
                return Ok(());
            }
            parent.entries_locked_into(entries);
            let old_len = entries.len();
            let at = entries.partition_point(|&(k, _)| k < carry.0);
            entries.insert(at, carry);
            let m = entries.len() / 2;
            let (up_key, mid_child) = entries[m];
            let sibling = self.split_node(
                tx,
                staged,
                parent,
                NodeSplit {
                    offset: parent_off,
                    kept: &entries[..m],
                    changed: changed_slots(old_len, at, m),
                    right: &entries[m + 1..],
                    leftmost: mid_child,
                    separator: up_key,
                },
            )?;
            carry = (up_key, sibling);
        }
        // The root split: a new root above it, swapped in by one 8-byte store.
        let old_root = path[0];
        let level = self.view(old_root)?.level() + 1;
        let new_root = tx.alloc(self.node_size)?.offset();
        let header = NodeHeader {
            level,
            sibling: 0,
            leftmost: old_root,
            high: EMPTY_KEY,
        };
        staged.node(new_root, header, &[carry], self.capacity);
        staged.word(self.meta.root_node_field(), new_root);
        Ok(())
    }

    /// FAIR's split of the node `view` shows, as `split` plans it: the sibling written in
    /// full, then linked with the node's new high key, then the node truncated. Returns the
    /// sibling.
    pub(super) fn split_node(
        &self,
        tx: &Tx<'_, B>,
        staged: &mut Staged,
        view: NodeView<'_>,
        split: NodeSplit<'_>,
    ) -> Result<u64, FastFairError> {
        let sibling = tx.alloc(self.node_size)?.offset();
        let header = NodeHeader {
            level: view.level(),
            sibling: view.sibling(),
            leftmost: split.leftmost,
            high: view.high(),
        };
        staged.node(sibling, header, split.right, self.capacity);
        staged.word(high_offset(split.offset), split.separator);
        staged.word(sibling_offset(split.offset), sibling);
        // A split at a separator above every entry (a batch's, `split_leaf_at`) moves none.
        if !split.changed.is_empty() {
            staged.entries(split.offset, split.kept, split.changed);
        }
        Ok(sibling)
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::{entry_range_bytes, NodeImage};
    use super::*;

    /// The slots whose entry differs between `old` and `new`, by comparing them.
    fn differing_slots(old: &[(u64, u64)], new: &[(u64, u64)]) -> Range<usize> {
        let first = old
            .iter()
            .zip(new)
            .position(|(a, b)| a != b)
            .unwrap_or(old.len().min(new.len()));
        first..old.len().max(new.len())
    }

    #[test]
    fn the_changed_slots_are_exactly_those_that_differ() {
        for old_len in 1..12u64 {
            let old: Vec<(u64, u64)> = (0..old_len).map(|i| (2 * i + 1, i)).collect();
            for at in 0..=old.len() {
                let mut new = old.clone();
                new.insert(at, (2 * at as u64, 99));
                // No split, and every split point a leaf or an internal node uses.
                for kept in (1..=old.len()).chain([new.len()]) {
                    assert_eq!(
                        changed_slots(old.len(), at, kept),
                        differing_slots(&old, &new[..kept]),
                        "{old_len} entries, insert at {at}, {kept} kept"
                    );
                }
            }
        }
    }

    #[test]
    fn ranges_in_one_line_are_snapshotted_as_one() {
        let mut ranges = Vec::new();
        push_range(&mut ranges, 0x200, 512); // a new node: many lines
        push_range(&mut ranges, 0x400 + 24, 8); // a high key
        push_range(&mut ranges, 0x400 + 8, 8); // the sibling link: same line, joins
        push_range(&mut ranges, 0x400 + 64, 32); // entries: the next line, apart
        push_range(&mut ranges, 0x400 + 96, 8); // in that line too: joins
        push_range(&mut ranges, 0x400 + 120, 16); // crosses into the next line: apart
        assert_eq!(
            ranges,
            [
                (0x200, 512),
                (0x400 + 8, 24),
                (0x400 + 64, 40),
                (0x400 + 120, 16)
            ]
        );
    }

    #[test]
    fn staged_writes_come_back_in_order_as_bytes() {
        let mut staged = Staged::default();
        staged.reserve(1, node_words(128));
        staged.word(0x48, 7);
        let entries = [(1, 10), (3, 30)];
        staged.entries(0x400, &entries, 1..3);
        let header = NodeHeader {
            level: 1,
            sibling: 0x800,
            leftmost: 0x600,
            high: 99,
        };
        staged.node(0x200, header, &entries, 4);
        // The word and the entries are snapshotted, the new node is not.
        assert_eq!(staged.ranges, [(0x48, 8), (entry_offset(0x400, 1), 32)]);
        let writes: Vec<(u64, Vec<u8>)> = staged
            .into_iter()
            .map(|(offset, bytes)| (*offset, bytes.to_vec()))
            .collect();
        let image = NodeImage {
            level: 1,
            sibling: 0x800,
            leftmost: 0x600,
            high: 99,
            entries: entries.to_vec(),
        };
        assert_eq!(
            writes,
            [
                (0x48, 7u64.to_le_bytes().to_vec()),
                (entry_offset(0x400, 1), entry_range_bytes(&entries, 1..3)),
                (0x200, image.bytes(128)),
            ]
        );
    }
}
