//! Open: check the root object, replay committed redo slots, walk the tree checking every
//! node, repair the transient duplicate an interrupted shift may have left, count the keys.
//! Interrupted splits and merges need nothing here: the heap rolled them back before.

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use crate::kind::describe_magic;

use super::layout::{
    entries_offset, entry_bytes, RedoArea, RootObject, FORMAT_VERSION, ROOT_MAGIC,
};
use super::{
    misaligned_root, valid_node_size, FastFair, FastFairError, ShiftPolicy, LANES, ROOT_BYTES,
};

impl<B: Backend> FastFair<B> {
    /// Open the tree whose root object is at `root`, with the node size and shift policy it
    /// records. A root that holds anything else is refused with [`FastFairError::WrongKind`].
    /// The heap has already rolled back any
    /// split or merge a crash interrupted; this replays committed redo slots, checks every
    /// node, removes the transient duplicate an interrupted shift may have left, and counts the
    /// keys.
    pub fn open(heap: &Heap<B>, root: u64) -> Result<Self, FastFairError> {
        let pool = heap.pool();
        let corrupt = |reason: String| FastFairError::Corrupt { root, reason };
        if !root.is_multiple_of(super::layout::LINE) {
            return Err(misaligned_root(root));
        }
        pool.check_range(root, ROOT_BYTES)?;
        let fields = RootObject(root).read(pool)?;
        if fields.magic != ROOT_MAGIC {
            return Err(FastFairError::WrongKind {
                root,
                found: describe_magic(fields.magic),
            });
        }
        if fields.version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {}, this build reads {FORMAT_VERSION}",
                fields.version
            )));
        }
        let node_size = fields.node_size;
        if !valid_node_size(node_size) {
            return Err(corrupt(format!("node size {node_size}")));
        }
        let code = fields.policy;
        let policy =
            ShiftPolicy::from_code(code).ok_or_else(|| corrupt(format!("shift policy {code}")))?;
        let (redo, lanes) = (fields.redo, fields.lanes);
        if lanes != LANES as u64 {
            return Err(corrupt(format!("{lanes} redo lanes, {LANES} expected")));
        }
        if heap
            .block_size(redo)
            .is_none_or(|size| size < RedoArea::BYTES)
        {
            return Err(corrupt(format!(
                "redo area {redo:#x} is not an allocated block of its size"
            )));
        }
        let tree = FastFair::handle(heap, root, node_size, policy, RedoArea(redo));
        tree.replay_redo()?;
        let len = tree.check_and_repair()?;
        tree.stripes.set_total(len);
        Ok(tree)
    }

    /// Walk every level; check each node; rewrite a node holding a transient duplicate.
    /// Returns the number of keys.
    fn check_and_repair(&self) -> Result<u64, FastFairError> {
        let root = self.root_node()?;
        let mut keys = 0;
        self.walk(root, |offset, raw_len, image| {
            if image.entries.len() != raw_len {
                // An interrupted shift left a duplicate: keep the right copy, durably.
                self.heap.transaction(|tx| {
                    tx.write(
                        entries_offset(offset),
                        &entry_bytes(self.node_size, &image.entries),
                    )
                })?;
            }
            if image.level == 0 {
                keys += image.entries.len() as u64;
            }
            Ok(())
        })?;
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::{entry_offset, tag_offset, value_offset};
    use super::super::test_heap::heap;
    use super::super::FastFairConfig;
    use super::*;

    /// Two equal neighbouring keys (an interrupted shift): readers take the right copy, and
    /// open rewrites the node without the duplicate.
    #[test]
    fn a_transient_duplicate_is_read_right_and_repaired_at_open() {
        let heap = heap();
        let root = heap.pool().root_offset();
        let tree = FastFair::create(&heap, root, FastFairConfig::default()).unwrap();
        for k in [10, 20, 30] {
            tree.insert(k, k).unwrap();
        }
        let leaf = tree.root_node().unwrap();
        // The state an insert of 15 leaves after moving 20 and 30 right and storing the new
        // value at slot 1 but not yet its key: slot 1 pairs key 20 with the new value.
        let pool = heap.pool();
        let image = [(10, 10), (20, 1500), (20, 20), (30, 30)];
        for (slot, (k, v)) in image.into_iter().enumerate() {
            pool.persist(pool.store_u64(entry_offset(leaf, slot), k).unwrap());
            pool.persist(pool.store_u64(value_offset(leaf, slot), v).unwrap());
        }
        // A lock-free reader resolves the duplicate without any repair.
        assert_eq!(tree.get(20).unwrap(), Some(20));
        assert_eq!(tree.get(15).unwrap(), None);
        let pairs: Vec<(u64, u64)> = tree.range(..).collect::<Result<_, _>>().unwrap();
        assert_eq!(pairs, vec![(10, 10), (20, 20), (30, 30)]);
        // So does the node's image (the entries a split plans from).
        let image = tree.view(leaf).unwrap().image();
        assert_eq!(image.entries, vec![(10, 10), (20, 20), (30, 30)]);
        drop(tree);
        let reopened = FastFair::open(&heap, root).unwrap();
        assert_eq!(reopened.len(), 3);
        assert_eq!(reopened.get(20).unwrap(), Some(20));
        assert_eq!(reopened.check().unwrap(), 3);
        assert_eq!(
            reopened.view(leaf).unwrap().count(),
            3,
            "open removed the duplicate"
        );
    }

    #[test]
    fn damaged_nodes_and_redo_slots_are_refused() {
        let heap = heap();
        let root = heap.pool().root_offset();
        let tree = FastFair::create(&heap, root, FastFairConfig::default()).unwrap();
        for k in [10, 20, 30] {
            tree.insert(k, k).unwrap();
        }
        let leaf = tree.root_node().unwrap();
        let redo = tree.redo;
        drop(tree);
        let pool = heap.pool();
        let poke = |offset: u64, value: u64| {
            let old = pool.load_u64(offset).unwrap();
            pool.persist(pool.store_u64(offset, value).unwrap());
            old
        };
        let expect_corrupt = |what: &str| match FastFair::open(&heap, root) {
            Err(FastFairError::Corrupt { reason, .. }) => reason,
            other => panic!("{what}: expected Corrupt, got {:?}", other.map(|t| t.len())),
        };
        let tag = poke(tag_offset(leaf), 0);
        assert!(expect_corrupt("tag").contains("tag"));
        poke(tag_offset(leaf), tag);
        let key = poke(entry_offset(leaf, 0), 25);
        assert!(expect_corrupt("order").contains("unsorted"));
        poke(entry_offset(leaf, 0), key);
        // A committed redo slot whose target lies outside the pool.
        let (_, commit) = redo.slot(0, 0);
        poke(commit, (pool.size() << 7) | 16);
        assert!(expect_corrupt("redo").contains("redo lane 0"));
        poke(commit, 0);
        assert_eq!(FastFair::open(&heap, root).unwrap().len(), 3);
    }
}
