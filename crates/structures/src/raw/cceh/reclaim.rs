//! Directories retired by a doubling: a lookup may still be reading the old directory when the
//! root's pointer swaps, so it is recorded in the root (a crash cannot leak it) and freed, by a
//! later split or doubling, only once a grace period ([`GracePeriod`]) shows that every lookup
//! inside its read section at the swap has left it (or at the next [`super::Cceh::open`], when
//! no lookup of the earlier run can be left).

use crate::sync::readers::GracePeriod;

/// A directory replaced by a doubling, and the lookups it waits for.
pub(super) struct Retired {
    pub(super) directory: u64,
    grace: GracePeriod,
}

impl Retired {
    /// Retire `directory`, already unlinked from the root: the grace period starts now, with
    /// the one heavy barrier that spares lookups a barrier of their own.
    pub(super) fn new(directory: u64) -> Retired {
        Retired {
            directory,
            grace: GracePeriod::start(),
        }
    }

    /// Whether no lookup can still be reading the directory.
    pub(super) fn is_reclaimable(&self) -> bool {
        self.grace.has_passed()
    }

    /// Whether waiting for the directory would wait for the calling thread itself (it is
    /// inside a lookup's read section).
    pub(super) fn waits_for_this_thread(&self) -> bool {
        self.grace.waits_for_this_thread()
    }

    /// Wait until the directory can be freed: lookups are short and never block.
    pub(super) fn wait_until_reclaimable(&self) {
        while !self.is_reclaimable() {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_heap::heap;
    use super::super::{Cceh, CcehConfig, CcehError};
    use crate::sync::readers::{HeldSection, ReadSection};

    #[test]
    fn a_doubling_that_would_wait_for_its_own_read_section_fails_cleanly_and_works_after() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
        let section = ReadSection::enter();
        // The first doubling retires a directory this thread's section may read; the second
        // must wait for it, which is waiting for itself.
        let mut refused = None;
        for k in 1..=10_000u64 {
            match table.insert(k, k + 1) {
                Ok(true) => {}
                Err(CcehError::WriterPinned) => {
                    refused = Some(k);
                    break;
                }
                other => panic!("key {k}: {other:?}"),
            }
        }
        let refused = refused.expect("a doubling had to wait for this thread's section");
        assert_eq!(table.global_depth().unwrap(), 1, "one doubling ran");
        assert_eq!(table.get(refused).unwrap(), None, "nothing was written");
        drop(section);
        for k in refused..refused + 2000 {
            assert!(table.insert(k, k + 1).unwrap());
        }
        assert!(table.global_depth().unwrap() >= 2);
        for k in 1..refused + 2000 {
            assert_eq!(table.get(k).unwrap(), Some(k + 1), "key {k}");
        }
    }

    #[test]
    fn a_retired_directory_is_freed_by_a_later_split_or_at_open() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let root = heap.pool().root_offset();
        let table = Cceh::create(&heap, root, config).unwrap();
        let mut key = 1;
        while table.global_depth().unwrap() < 2 {
            table.insert(key, key).unwrap();
            key += 1;
        }
        // A lookup of another thread in progress across the next doubling: the directory it
        // retires must wait for it.
        let reader = HeldSection::enter();
        while table.global_depth().unwrap() < 3 {
            table.insert(key, key).unwrap();
            key += 1;
        }
        let blocks = |table: &Cceh<_>| {
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
        // The doubling's insert went on to split, which would have freed a directory no lookup
        // could read.
        assert_ne!(
            retired, 0,
            "a doubling retires the old directory, kept for the lookup"
        );
        reader.leave();
        // No lookup is left: the next split frees it.
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
