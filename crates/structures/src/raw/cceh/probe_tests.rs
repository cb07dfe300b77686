//! Tests of the probe operations on tables whose key words are hashes ([`KeyWords::Hashed`]):
//! colliding keys through splits, doublings and displacements, where `before_store` runs and
//! what its error leaves, recovery's duplicate removal, and lookups that meet garbage values.

use std::cell::RefCell;
use std::collections::BTreeMap;

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use super::lookup::LookupStep;
use super::test_heap::{heap, id_of, keys_at_home, payload, Colliding};
use super::{BatchOptions, Cceh, CcehConfig, CcehError, KeyWords, EMPTY_KEY};

/// What a test's `before_store` returns to abort a write.
#[derive(Debug, PartialEq)]
enum TestError {
    /// The table failed.
    Table(String),
    /// The callback refused the write.
    Refused,
}

impl From<CcehError> for TestError {
    fn from(e: CcehError) -> Self {
        TestError::Table(e.to_string())
    }
}

fn buckets(buckets_per_segment: u64) -> CcehConfig {
    CcehConfig {
        buckets_per_segment,
    }
}

/// Insert `key` with `payload` unless present: the present entry's payload if it was.
fn insert<B: Backend>(table: &Cceh<B>, key: Colliding, with: u32) -> Option<u32> {
    let old = table.put_probe(&key, key.value(with), false, |_| Ok::<(), CcehError>(()));
    old.unwrap().map(payload)
}

/// Insert or replace `key`'s entry: the old payload if it was present.
fn upsert<B: Backend>(table: &Cceh<B>, key: Colliding, with: u32) -> Option<u32> {
    let old = table.put_probe(&key, key.value(with), true, |_| Ok::<(), CcehError>(()));
    old.unwrap().map(payload)
}

fn get<B: Backend>(table: &Cceh<B>, key: Colliding) -> Option<u32> {
    table.get_probe(&key, payload).unwrap()
}

fn remove<B: Backend>(table: &Cceh<B>, key: Colliding) -> Option<u32> {
    let old = table.remove_probe(&key, |_| Ok::<(), CcehError>(()));
    old.unwrap().map(payload)
}

/// The table's entries as `id -> (key word, payload)`, by iteration; an id listed twice is an
/// error.
pub(super) fn entries<B: Backend>(table: &Cceh<B>) -> Result<BTreeMap<u64, (u64, u32)>, String> {
    let mut out = BTreeMap::new();
    for pair in table.iter() {
        let (word, value) = pair.map_err(|e| format!("iter: {e}"))?;
        if out.insert(id_of(value), (word, payload(value))).is_some() {
            return Err(format!("id {} listed twice", id_of(value)));
        }
    }
    Ok(out)
}

#[test]
fn forty_colliding_keys_are_inserted_found_updated_and_removed_through_splits_and_doublings() {
    let heap = heap();
    let root = heap.pool().root_offset();
    let table = Cceh::create_hashed(&heap, root, buckets(4)).unwrap();
    assert_eq!(table.key_words(), KeyWords::Hashed);
    // Five ids share each of eight key words: every id collides with four others.
    let key = |id: u64| Colliding::grouped(id, 8);
    let mut model = BTreeMap::new();
    for id in 1..=40 {
        assert_eq!(insert(&table, key(id), id as u32), None, "id {id} is new");
        model.insert(id, (key(id).word, id as u32));
    }
    assert!(
        table.global_depth().unwrap() >= 2,
        "splits and doublings ran (depth {})",
        table.global_depth().unwrap()
    );
    for id in 1..=40 {
        assert_eq!(get(&table, key(id)), Some(id as u32), "id {id}");
    }
    assert_eq!(get(&table, key(41)), None, "an absent id of a present word");
    for id in (1..=40).step_by(3) {
        assert_eq!(upsert(&table, key(id), 1000 + id as u32), Some(id as u32));
        model.insert(id, (key(id).word, 1000 + id as u32));
    }
    for id in (2..=40).step_by(4) {
        assert_eq!(remove(&table, key(id)), model.remove(&id).map(|(_, p)| p));
        assert_eq!(remove(&table, key(id)), None, "id {id} is gone");
    }
    for id in 1..=40 {
        assert_eq!(
            get(&table, key(id)),
            model.get(&id).map(|&(_, p)| p),
            "id {id}"
        );
    }
    assert_eq!(entries(&table).unwrap(), model);
    assert_eq!(table.len(), model.len() as u64);
    assert_eq!(table.check().unwrap(), model.len() as u64);
    drop(table);
    let table = Cceh::open_hashed(&heap, root).unwrap();
    assert_eq!(entries(&table).unwrap(), model, "reopened");
    assert_eq!(table.len(), model.len() as u64);
}

#[test]
fn colliding_keys_move_along_their_window_before_a_split() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(8)).unwrap();
    let key = |id: u64| Colliding::grouped(id, 9);
    for id in 1..=60 {
        assert_eq!(insert(&table, key(id), id as u32), None);
    }
    assert!(table.displacements() >= 1, "entries were displaced");
    for id in 1..=60 {
        assert_eq!(get(&table, key(id)), Some(id as u32), "id {id}");
    }
    assert_eq!(table.check().unwrap(), 60);
}

#[test]
fn an_insert_of_a_present_key_returns_its_value_and_calls_nothing() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
    let (a, b) = (Colliding { id: 1, word: 7 }, Colliding { id: 2, word: 7 });
    assert_eq!(insert(&table, a, 10), None);
    assert_eq!(
        insert(&table, b, 20),
        None,
        "b shares a's key word, not its key"
    );
    let called = RefCell::new(false);
    let old = table.put_probe(&b, b.value(99), false, |_| {
        *called.borrow_mut() = true;
        Ok::<(), CcehError>(())
    });
    assert_eq!(old.unwrap(), Some(b.value(20)));
    assert!(!*called.borrow(), "before_store was not called");
    assert_eq!((get(&table, a), get(&table, b)), (Some(10), Some(20)));
}

#[test]
fn a_window_full_of_one_key_word_refuses_one_more_with_a_typed_error() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
    let key = |id: u64| Colliding { id, word: 5 };
    for id in 1..=16 {
        assert_eq!(insert(&table, key(id), 0), None);
    }
    let depth = table.global_depth().unwrap();
    let refused = table.put_probe(&key(17), key(17).value(0), false, |_| {
        Ok::<(), CcehError>(())
    });
    match refused {
        Err(CcehError::KeyWordWindowFull { word }) => assert_eq!(word, 5),
        other => panic!("expected KeyWordWindowFull, got {other:?}"),
    }
    assert_eq!(table.global_depth().unwrap(), depth, "no split was tried");
    assert_eq!(table.len(), 16);
    assert_eq!(get(&table, key(17)), None);
    assert_eq!(table.check().unwrap(), 16);
}

#[test]
fn before_store_runs_under_the_lock_before_the_slot_is_visible() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
    let (a, b) = (Colliding { id: 1, word: 3 }, Colliding { id: 2, word: 3 });
    assert_eq!(insert(&table, a, 10), None);
    let seen = RefCell::new(Vec::new());
    // A new entry: absent while its callback runs, present once the insert returns.
    let old = table.put_probe(&b, b.value(20), false, |old| {
        seen.borrow_mut().push((old, get(&table, b), table.len()));
        Ok::<(), CcehError>(())
    });
    assert_eq!(old.unwrap(), None);
    assert_eq!(seen.take(), vec![(None, None, 1)]);
    assert_eq!(get(&table, b), Some(20));
    // An update: the old value is still the one visible while its callback runs.
    let old = table.put_probe(&b, b.value(21), true, |old| {
        seen.borrow_mut().push((old, get(&table, b), table.len()));
        Ok::<(), CcehError>(())
    });
    assert_eq!(old.unwrap(), Some(b.value(20)));
    assert_eq!(seen.take(), vec![(Some(b.value(20)), Some(20), 2)]);
    assert_eq!(get(&table, b), Some(21));
    // A removal: still visible while its callback runs.
    let removed = table.remove_probe(&b, |old| {
        seen.borrow_mut()
            .push((Some(old), get(&table, b), table.len()));
        Ok::<(), CcehError>(())
    });
    assert_eq!(removed.unwrap(), Some(b.value(21)));
    assert_eq!(seen.take(), vec![(Some(b.value(21)), Some(21), 2)]);
    assert_eq!((get(&table, a), get(&table, b)), (Some(10), None));
}

#[test]
fn a_before_store_error_aborts_the_write_and_leaves_the_table_unchanged() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
    // Buckets 0-2 full of entries at home in bucket 0, then one at home in bucket 3, then
    // three more home-0 entries: the window of bucket 0 is full, and a newcomer of home 0
    // needs the home-3 entry displaced to bucket 4 to make room.
    let mut zeros = keys_at_home(0, 1)
        .zip(1..)
        .map(|(word, id)| Colliding { id, word });
    for key in zeros.by_ref().take(12) {
        assert_eq!(insert(&table, key, 0), None);
    }
    let third = Colliding {
        id: 100,
        word: keys_at_home(3, 1).next().unwrap(),
    };
    assert_eq!(insert(&table, third, 3), None);
    for key in zeros.by_ref().take(3) {
        assert_eq!(insert(&table, key, 0), None);
    }
    let newcomer = zeros.next().unwrap();
    let before = entries(&table).unwrap();
    let refuse = |_| Err::<(), TestError>(TestError::Refused);

    let refused = table.put_probe(&newcomer, newcomer.value(9), false, refuse);
    assert_eq!(refused, Err(TestError::Refused));
    assert!(
        table.displacements() >= 1,
        "the insert displaced an entry first"
    );
    assert_eq!(
        entries(&table).unwrap(),
        before,
        "no entry added, none twice"
    );
    assert_eq!(table.check().unwrap(), before.len() as u64);
    assert_eq!((get(&table, newcomer), get(&table, third)), (None, Some(3)));

    let refused = table.put_probe(&third, third.value(4), true, |_| {
        Err::<(), TestError>(TestError::Refused)
    });
    assert_eq!(refused, Err(TestError::Refused));
    let refused = table.remove_probe(&third, |_| Err::<(), TestError>(TestError::Refused));
    assert_eq!(refused, Err(TestError::Refused));
    assert_eq!(get(&table, third), Some(3), "neither updated nor removed");
    assert_eq!(entries(&table).unwrap(), before);
    assert_eq!(table.len(), before.len() as u64);

    // Accepted, the same insert goes in.
    assert_eq!(insert(&table, newcomer, 9), None);
    assert_eq!(get(&table, newcomer), Some(9));
    assert_eq!(table.check().unwrap(), before.len() as u64 + 1);
}

/// Store `word` at `offset` behind the table's back, persisted (as a crash would leave it).
fn scribble(heap: &Heap, offset: u64, word: u64) {
    let written = heap.pool().store_u64(offset, word).unwrap();
    heap.pool().persist(written);
}

#[test]
fn recovery_keeps_colliding_entries_and_clears_a_true_duplicate() {
    let heap = heap();
    let root = heap.pool().root_offset();
    let table = Cceh::create_hashed(&heap, root, buckets(16)).unwrap();
    let word = keys_at_home(5, 1).next().unwrap();
    let (a, b) = (Colliding { id: 1, word }, Colliding { id: 2, word });
    assert_eq!(insert(&table, a, 10), None);
    assert_eq!(insert(&table, b, 20), None);
    // A crash between a displacement's copy and the reuse of its old slot leaves the entry
    // twice, the copy later in its window: here a's.
    let place = table.locate(super::hash(word)).unwrap();
    let copy = table
        .shape
        .window(place.segment, super::hash(word))
        .filter(|&slot| table.word(slot).unwrap() == EMPTY_KEY)
        .nth(2)
        .unwrap();
    scribble(&heap, copy + 8, a.value(10));
    scribble(&heap, copy, word);
    let reason = match table.check() {
        Err(CcehError::Corrupt { reason, .. }) => reason,
        other => panic!("expected a Corrupt error, got {other:?}"),
    };
    assert!(
        reason.contains(&format!(
            "key word {word} with value {} is stored twice",
            a.value(10)
        )),
        "{reason}"
    );
    drop(table);
    let table = Cceh::open_hashed(&heap, root).unwrap();
    assert_eq!(table.len(), 2, "a and b, once each");
    assert_eq!(
        table.word(copy).unwrap(),
        EMPTY_KEY,
        "the later copy was cleared"
    );
    assert_eq!((get(&table, a), get(&table, b)), (Some(10), Some(20)));
    assert_eq!(table.check().unwrap(), 2);
}

#[test]
fn a_lookup_whose_slot_is_reused_mid_read_hands_matches_garbage_and_finds_nothing() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
    let mut home_zero = keys_at_home(0, 1);
    let a = Colliding {
        id: 1,
        word: home_zero.next().unwrap(),
    };
    // Another key word of the same home: reinserted, it takes a's slot.
    let other = home_zero.next().unwrap();
    assert_eq!(insert(&table, a, 10), None);
    // A value that is no entry of a's (a byte-key map's record offset of another key, or a
    // stale word): a probe must survive it.
    const GARBAGE: u64 = u64::MAX;
    struct Recording<'s> {
        key: Colliding,
        seen: &'s RefCell<Vec<u64>>,
    }
    impl super::SlotProbe for Recording<'_> {
        fn word(&self) -> u64 {
            self.key.word
        }
        fn matches(&self, value: u64) -> bool {
            self.seen.borrow_mut().push(value);
            self.key.matches(value)
        }
    }
    let seen = RefCell::new(Vec::new());
    let probe = Recording {
        key: a,
        seen: &seen,
    };
    let mut interfered = false;
    let found = table
        .get_probe_observed(&probe, payload, |step| {
            if step == LookupStep::BucketRead && !interfered {
                interfered = true;
                // The lookup has read a's key word in slot 0 of bucket 0, not yet its value.
                assert_eq!(remove(&table, a), Some(10));
                let put = table.put_probe(&other, GARBAGE, false, |_| Ok::<(), CcehError>(()));
                assert_eq!(put.unwrap(), None);
            }
        })
        .unwrap();
    assert!(interfered);
    assert_eq!(found, None, "a was removed during the lookup");
    assert!(
        seen.borrow().contains(&GARBAGE),
        "matches saw the reused slot's value: {:?}",
        seen.borrow()
    );
}

#[test]
fn lookups_racing_writers_of_colliding_keys_find_the_entries_no_writer_touches() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(4)).unwrap();
    // Ids 1..=24 stay; ids 25.. come and go, sharing the stayers' key words (6 of them).
    let key = |id: u64| Colliding::grouped(id, 6);
    for id in 1..=24 {
        assert_eq!(insert(&table, key(id), id as u32), None);
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 0..300u64 {
                for id in 25..=36 {
                    let with = (round * 100 + id) as u32;
                    assert_eq!(insert(&table, key(id), with), None);
                }
                for id in 25..=36 {
                    assert!(remove(&table, key(id)).is_some());
                }
            }
        });
        for _ in 0..300 {
            for id in 1..=24 {
                assert_eq!(get(&table, key(id)), Some(id as u32), "id {id}");
            }
        }
    });
    assert_eq!(table.len(), 24);
    assert_eq!(table.check().unwrap(), 24);
}

#[test]
fn insert_batch_is_refused_on_hashed_key_words() {
    let heap = heap();
    let table = Cceh::create_hashed(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
    match table.insert_batch(&[(1, 2)], BatchOptions::default()) {
        Err(CcehError::InvalidConfig { reason }) => {
            assert!(reason.contains("hashes of byte keys"), "{reason}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(table.is_empty());
}
