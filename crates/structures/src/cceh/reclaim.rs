//! Directories retired by a doubling: a lookup may still be reading the old directory when the
//! root's pointer swaps, so it is recorded in the root (a crash cannot leak it) and freed, by a
//! later split or doubling, only once `crossbeam-epoch` shows that every lookup pinned before
//! the swap has unpinned (or at the next [`super::Cceh::open`], when no lookup of the earlier
//! run can be left).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_epoch as epoch;

/// A directory replaced by a doubling, and whether the epoch has since shown that no lookup
/// can still be reading it.
pub(super) struct Retired {
    pub(super) directory: u64,
    reclaimable: Arc<AtomicBool>,
}

impl Retired {
    /// Retire `directory`, already unlinked from the root: the flag is set once every lookup
    /// that might have loaded it has unpinned.
    pub(super) fn new(directory: u64) -> Retired {
        let reclaimable = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&reclaimable);
        let guard = epoch::pin();
        guard.defer(move || flag.store(true, Ordering::Release));
        guard.flush();
        Retired {
            directory,
            reclaimable,
        }
    }

    pub(super) fn is_reclaimable(&self) -> bool {
        self.reclaimable.load(Ordering::Acquire)
    }

    /// Wait until the directory can be freed: lookups are short and never block, so the epoch
    /// moves on as soon as this thread helps it along.
    pub(super) fn wait_until_reclaimable(&self) {
        while !self.is_reclaimable() {
            epoch::pin().flush();
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_heap::heap;
    use super::super::{Cceh, CcehConfig};

    #[test]
    fn a_retired_directory_is_freed_by_a_later_split_or_at_open() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let root = heap.pool().root_offset();
        let table = Cceh::create(&heap, root, config).unwrap();
        let mut key = 1;
        while table.global_depth().unwrap() < 3 {
            table.insert(key, key).unwrap();
            key += 1;
        }
        let blocks = |table: &Cceh<_, _, _>| {
            let owned: Vec<u64> = heap
                .check_heap()
                .unwrap()
                .into_iter()
                .map(|(o, _)| o)
                .collect();
            assert_eq!(
                owned,
                table.blocks().unwrap(),
                "the heap holds exactly the table's blocks"
            );
        };
        blocks(&table);
        let retired_word = table.root.retired();
        let retired = table.word(retired_word).unwrap();
        assert_ne!(retired, 0, "a doubling retires the old directory");
        // No lookup is pinned: the next split frees it.
        while table.word(retired_word).unwrap() == retired {
            table.insert(key, key).unwrap();
            key += 1;
        }
        blocks(&table);
        drop(table);
        let table = Cceh::open(&heap, root).unwrap();
        assert_eq!(table.word(retired_word).unwrap(), 0);
        blocks(&table);
        assert_eq!(table.len(), key - 1);
    }
}
