//! CCEH against a `HashMap` model, without crashes.

use std::collections::HashMap;

use pmem_ordering::{reset_thread_stats, thread_stats};
use pmem_structures::raw::cceh::{BatchOptions, Cceh, CcehConfig, CcehError};
use pmem_test_kit::cceh::{contents, CcehModel, CcehOp};
use pmem_test_kit::fixture::{anonymous_heap, heap_blocks};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::Heap;
use proptest::prelude::*;

fn heap(size: u64) -> Heap {
    anonymous_heap("cceh", size)
}

fn small() -> CcehConfig {
    CcehConfig {
        buckets_per_segment: 4,
    }
}

#[test]
fn inserts_lookups_and_removes_match_a_hashmap_through_many_splits() {
    let heap = heap(32 << 20);
    let root = heap.pool().root_offset();
    let table = Cceh::create(&heap, root, small()).unwrap();
    let mut model = CcehModel::new();
    let mut rng = SplitMix64::new(1);
    for i in 0..20_000u64 {
        let key = rng.below(50_000) + 1;
        let op = match i % 5 {
            0..=2 => CcehOp::Insert(key, i),
            3 => CcehOp::Upsert(key, i),
            _ => CcehOp::Remove(key),
        };
        op.run_checked(&table, &mut model).unwrap();
    }
    assert!(
        table.global_depth().unwrap() >= 8,
        "tiny segments must have split a lot"
    );
    assert_eq!(table.len(), model.len() as u64);
    for (&k, &v) in &model {
        assert_eq!(table.get(k).unwrap(), Some(v), "key {k}");
    }
    assert_eq!(table.iter().map(Result::unwrap).count(), model.len());
    assert_eq!(contents(&table).unwrap(), model);
    // The table owns exactly the heap's blocks.
    assert_eq!(heap_blocks(&heap).unwrap(), table.blocks().unwrap());
}

#[test]
fn a_reopened_table_holds_the_same_keys() {
    let heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    {
        let table = Cceh::create(&heap, root, small()).unwrap();
        for k in 1..=3000u64 {
            assert!(table.insert(k, k * 3).unwrap());
        }
        for k in (1..=3000u64).step_by(3) {
            assert_eq!(table.remove(k).unwrap(), Some(k * 3));
        }
    }
    let table = Cceh::open(&heap, root).unwrap();
    assert_eq!(table.len(), 2000);
    for k in 1..=3000u64 {
        let expected = if (k - 1) % 3 == 0 { None } else { Some(k * 3) };
        assert_eq!(table.get(k).unwrap(), expected, "key {k}");
    }
}

#[test]
fn key_zero_is_refused() {
    let heap = heap(4 << 20);
    let table = Cceh::create(&heap, heap.pool().root_offset(), CcehConfig::default()).unwrap();
    assert!(matches!(table.insert(0, 1), Err(CcehError::ReservedKey(_))));
    assert!(matches!(table.upsert(0, 1), Err(CcehError::ReservedKey(_))));
    assert!(matches!(table.get(0), Err(CcehError::ReservedKey(_))));
    assert!(matches!(table.remove(0), Err(CcehError::ReservedKey(_))));
    assert!(table.is_empty());
}

#[test]
fn bad_configurations_and_roots_are_refused() {
    let heap = heap(4 << 20);
    let root = heap.pool().root_offset();
    for buckets in [0, 2, 3, 6, 1 << 21] {
        let config = CcehConfig {
            buckets_per_segment: buckets,
        };
        assert!(matches!(
            Cceh::create(&heap, root, config),
            Err(CcehError::InvalidConfig { .. })
        ));
    }
    assert!(matches!(
        Cceh::create(&heap, root + 8, CcehConfig::default()),
        Err(CcehError::InvalidConfig { .. })
    ));
    // Nothing was made at the root: opening it finds no table.
    assert!(matches!(
        Cceh::open(&heap, root),
        Err(CcehError::WrongKind { .. })
    ));
    // A misaligned root is refused at open too, even where the words it names are a table's:
    // the one at `root + 64` is opened at `root + 8`, 56 bytes early.
    assert!(heap.pool().root_size() >= 64 + 32, "room for a second root");
    let table = Cceh::create(&heap, root + 64, CcehConfig::default()).unwrap();
    table.insert(5, 6).unwrap();
    drop(table);
    assert!(matches!(
        Cceh::open(&heap, root + 8),
        Err(CcehError::InvalidConfig { .. })
    ));
    assert_eq!(
        Cceh::open(&heap, root + 64).unwrap().get(5).unwrap(),
        Some(6)
    );
}

#[test]
fn an_insert_without_a_split_issues_one_fence_and_flushes_one_line() {
    let heap = heap(4 << 20);
    let table = Cceh::create(&heap, heap.pool().root_offset(), CcehConfig::default()).unwrap();
    let depth = table.global_depth().unwrap();
    for key in 1..=200u64 {
        reset_thread_stats();
        assert!(table.insert(key, key).unwrap());
        let s = thread_stats();
        assert_eq!((s.fences, s.flushes), (1, 1), "insert of key {key}");
        // An update is one fence and one line too; so is a remove.
        reset_thread_stats();
        assert_eq!(table.upsert(key, key + 1).unwrap(), Some(key));
        let s = thread_stats();
        assert_eq!((s.fences, s.flushes), (1, 1), "update of key {key}");
    }
    assert_eq!(table.global_depth().unwrap(), depth, "no split happened");
    reset_thread_stats();
    assert_eq!(table.remove(7).unwrap(), Some(8));
    let s = thread_stats();
    assert_eq!((s.fences, s.flushes), (1, 1));
}

#[test]
fn two_threads_insert_disjoint_keys() {
    let heap = heap(16 << 20);
    let table = Cceh::create(&heap, heap.pool().root_offset(), small()).unwrap();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let table = &table;
            s.spawn(move || {
                for k in 0..2000u64 {
                    assert!(table.insert(k * 2 + t + 1, t).unwrap());
                }
            });
        }
    });
    assert_eq!(table.len(), 4000);
    for k in 0..4000u64 {
        assert_eq!(table.get(k + 1).unwrap(), Some(k % 2));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn random_operations_match_a_hashmap(ops in proptest::collection::vec(CcehOp::strategy(1..300), 1..400)) {
        let heap = heap(8 << 20);
        let table = Cceh::create(&heap, heap.pool().root_offset(), small()).unwrap();
        let mut model = CcehModel::new();
        for op in &ops {
            let checked = op.run_checked(&table, &mut model);
            prop_assert!(checked.is_ok(), "{:?}: {}", op, checked.unwrap_err());
        }
        prop_assert_eq!(table.len(), model.len() as u64);
        for k in 1..300u64 {
            prop_assert_eq!(table.get(k).unwrap(), model.get(&k).copied());
        }
    }
}

#[test]
fn batched_inserts_give_the_same_table_with_the_helper_on_or_off() {
    let mut rng = SplitMix64::new(7);
    let items: Vec<(u64, u64)> = (0..20_000u64).map(|i| (rng.below(15_000) + 1, i)).collect();
    let mut model = HashMap::new();
    for &(k, v) in &items {
        model.entry(k).or_insert(v);
    }
    for (helper, inline_prefetch, depth) in [
        (false, false, 8),
        (true, false, 1),
        (true, false, 8),
        (true, false, 64),
        (false, true, 8),
        (true, true, 8),
    ] {
        let heap = heap(16 << 20);
        let table = Cceh::create(&heap, heap.pool().root_offset(), small()).unwrap();
        let options = BatchOptions {
            helper,
            inline_prefetch,
            depth,
        };
        let inserted = table.insert_batch(&items, options).unwrap();
        assert_eq!(inserted, model.len() as u64, "{options:?}");
        assert_eq!(
            table.iter().map(Result::unwrap).count(),
            model.len(),
            "{options:?}"
        );
        assert_eq!(contents(&table).unwrap(), model, "{options:?}");
    }
}

#[test]
fn a_batch_with_key_zero_writes_nothing() {
    let heap = heap(4 << 20);
    let table = Cceh::create(&heap, heap.pool().root_offset(), small()).unwrap();
    let items = [(5, 1), (0, 2), (6, 3)];
    for (helper, inline_prefetch) in [(false, false), (true, false), (false, true)] {
        let options = BatchOptions {
            helper,
            inline_prefetch,
            depth: 8,
        };
        assert!(matches!(
            table.insert_batch(&items, options),
            Err(CcehError::ReservedKey(_))
        ));
        assert!(table.is_empty());
    }
}

#[test]
fn a_corrupted_directory_is_refused_at_open() {
    let heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    let pool = heap.pool();
    {
        let table = Cceh::create(&heap, root, small()).unwrap();
        for k in 1..=500u64 {
            table.insert(k, k).unwrap();
        }
        assert!(table.global_depth().unwrap() >= 3);
    }
    let directory = pool.load_u64(root + 8).unwrap();
    let entry = pool.load_u64(directory + 8).unwrap();
    let depth = pool.load_u64(directory).unwrap();
    let damage = [
        (directory, depth + 40),       // global depth beyond the directory's size
        (directory + 8, entry ^ 0x3f), // a local depth bit flipped
        (directory + 8, entry ^ 0x40), // a segment offset off by a line
        (directory + 8, !63u64),       // a segment outside the pool
        (root + 8, 8 << 20),           // a directory pointer at the pool's end
        (root, 0),                     // the magic
    ];
    for (at, value) in damage {
        let old = pool.load_u64(at).unwrap();
        pool.persist(pool.store_u64(at, value).unwrap());
        match Cceh::open(&heap, root) {
            Err(CcehError::Corrupt { .. })
            | Err(CcehError::WrongKind { .. })
            | Err(CcehError::Tx(_)) => {}
            Err(e) => panic!("{at:#x} = {value:#x}: unexpected {e}"),
            Ok(_) => panic!("{at:#x} = {value:#x}: a damaged table opened"),
        }
        pool.persist(pool.store_u64(at, old).unwrap());
    }
    assert_eq!(Cceh::open(&heap, root).unwrap().len(), 500);
}

#[test]
fn lookups_stay_right_while_two_writers_split_the_table() {
    lookups_stay_right_under_two_writers(small());
}

#[test]
fn lookups_stay_right_while_two_writers_move_keys_along_their_windows() {
    // Windows of 4 buckets in segments of 16: full windows displace keys before splitting.
    let config = CcehConfig {
        buckets_per_segment: 16,
    };
    let displaced = lookups_stay_right_under_two_writers(config);
    assert!(displaced > 100, "{displaced} keys moved");
}

/// Two writers insert and remove while a reader checks keys present throughout; returns how
/// many keys were displaced.
fn lookups_stay_right_under_two_writers(config: CcehConfig) -> u64 {
    let heap = heap(32 << 20);
    let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
    // Keys present before the writers start, and never touched by them.
    let stable: Vec<u64> = (1..=500u64).map(|k| k * 1_000_003).collect();
    for &k in &stable {
        table.insert(k, k ^ 0xABCD).unwrap();
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let table = &table;
                s.spawn(move || {
                    for i in 0..6000u64 {
                        let key = i * 2 + t + 1;
                        assert!(table.insert(key, key + 7).unwrap());
                        if i % 3 == 0 {
                            assert_eq!(table.remove(key).unwrap(), Some(key + 7));
                        }
                    }
                })
            })
            .collect();
        let reader = s.spawn(|| {
            // At least one whole round, even if the writers finish before this thread starts.
            let mut rounds = 0u64;
            loop {
                for &k in &stable {
                    assert_eq!(table.get(k).unwrap(), Some(k ^ 0xABCD), "stable key {k}");
                }
                rounds += 1;
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
            }
            rounds
        });
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
    assert!(table.global_depth().unwrap() >= 6);
    for i in 0..12_000u64 {
        let key = i + 1;
        let expected = if (i / 2) % 3 == 0 {
            None
        } else {
            Some(key + 7)
        };
        assert_eq!(table.get(key).unwrap(), expected, "key {key}");
    }
    assert_eq!(table.len(), 500 + 8000);
    assert_eq!(heap_blocks(&heap).unwrap(), table.blocks().unwrap());
    table.displacements()
}

#[test]
fn a_batch_of_lookups_matches_one_lookup_at_a_time() {
    let heap = heap(16 << 20);
    let table = Cceh::create(&heap, heap.pool().root_offset(), small()).unwrap();
    for k in (1..=3000u64).filter(|k| k % 3 != 0) {
        table.insert(k, k * 11).unwrap();
    }
    let keys: Vec<u64> = (1..=3500u64).rev().collect();
    let one_at_a_time: Vec<Option<u64>> = keys.iter().map(|&k| table.get(k).unwrap()).collect();
    assert!(one_at_a_time.iter().any(Option::is_none));
    for ahead in [1, 8, 5000] {
        assert_eq!(
            table.get_batch(&keys, ahead).unwrap(),
            one_at_a_time,
            "ahead {ahead}"
        );
    }
    assert!(matches!(
        table.get_batch(&[5, 0, 7], 8),
        Err(CcehError::ReservedKey(_))
    ));
    assert_eq!(table.get_batch(&[], 8).unwrap(), Vec::<Option<u64>>::new());
}

#[test]
fn a_writer_holding_an_epoch_guard_doubles_the_directory_again_and_again() {
    // Lookups no longer pin crossbeam-epoch: a guard of the writer's own (a record map's
    // iterator, say) holds back no retired directory, so doublings never wait for it.
    let heap = heap(32 << 20);
    let table = Cceh::create(&heap, heap.pool().root_offset(), small()).unwrap();
    let guard = crossbeam_epoch::pin();
    for k in 1..=10_000u64 {
        assert!(table.insert(k, k + 1).unwrap(), "key {k}");
    }
    assert!(
        table.global_depth().unwrap() >= 3,
        "several doublings ran under the guard"
    );
    drop(guard);
    for k in 1..=10_000u64 {
        assert_eq!(table.get(k).unwrap(), Some(k + 1), "key {k}");
    }
    assert_eq!(heap_blocks(&heap).unwrap(), table.blocks().unwrap());
}
