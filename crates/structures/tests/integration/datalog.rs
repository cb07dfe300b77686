//! The datalog store against `Vec<u8>` models, without crashes: both write paths, the
//! namespace, folding, log cleaning, full pools, and the write-amplification counters
//! (damaged pools are in datalog_damage.rs, random operation sequences through reopening in
//! datalog_model.rs).

use std::collections::BTreeMap;

use pmem_ordering::{reset_thread_stats, thread_stats, Stats};
use pmem_structures::raw::datalog::{
    Datalog, DatalogConfig, DatalogError, FileId, Policy, WriteMode, MAX_NAME, PAGE,
};
use pmem_test_kit::datalog::{file_contents, write_into};
use pmem_test_kit::fixture::{anonymous_heap, heap_holds_exactly, reopen};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::Heap;

fn heap(size: u64) -> Heap {
    anonymous_heap("datalog", size)
}

fn contents(store: &Datalog<pmem_ordering::Hardware>, id: FileId) -> Vec<u8> {
    file_contents(store, id).unwrap()
}

fn heap_matches(heap: &Heap, store: &Datalog<pmem_ordering::Hardware>) {
    heap_holds_exactly(heap, &store.blocks(), "store").unwrap();
}

fn random_ops(mode: WriteMode, seed: u64, ops: usize) {
    let mut heap = heap(64 << 20);
    let root = heap.pool().root_offset();
    let mut model: Vec<u8> = Vec::new();
    {
        let store = Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 8,
                policy: Policy::with_mode(mode),
            },
        )
        .unwrap();
        let id = store.create_file("f").unwrap();
        let mut rng = SplitMix64::new(seed);
        for i in 0..ops {
            if i % 17 == 16 {
                let size = rng.below(6 * PAGE);
                store.truncate(id, size).unwrap();
                model.resize(size as usize, 0);
            } else {
                let len = match rng.below(4) {
                    0 => 1 + rng.below(16),
                    1 => 1 + rng.below(300),
                    2 => 1 + rng.below(PAGE),
                    _ => 1 + rng.below(3 * PAGE),
                };
                let offset = rng.below(5 * PAGE);
                let data: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
                store.write_at(id, offset, &data).unwrap();
                write_into(&mut model, offset, &data);
            }
            assert_eq!(store.len(id).unwrap(), model.len() as u64, "op {i}");
            if i % 10 == 0 {
                assert_eq!(contents(&store, id), model, "op {i}");
            }
        }
        assert_eq!(contents(&store, id), model);
        heap_matches(&heap, &store);
    }
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    let id = store.open_file("f").unwrap();
    assert_eq!(contents(&store, id), model, "after reopening");
    heap_matches(&heap, &store);
}

#[test]
fn random_writes_and_truncates_match_a_vec_under_copy_on_write() {
    random_ops(WriteMode::CopyOnWrite, 1, 600);
}

#[test]
fn random_writes_and_truncates_match_a_vec_under_embedded_writes() {
    random_ops(WriteMode::Embedded, 2, 600);
}

#[test]
fn random_writes_and_truncates_match_a_vec_under_auto() {
    random_ops(WriteMode::Auto, 3, 600);
}

#[test]
fn reads_past_the_end_and_gaps_read_zeros() {
    let heap = heap(8 << 20);
    let store = Datalog::create(
        &heap,
        heap.pool().root_offset(),
        DatalogConfig {
            max_files: 4,
            policy: Policy::default(),
        },
    )
    .unwrap();
    let id = store.create_file("gap").unwrap();
    store.write_at(id, 3 * PAGE + 10, b"tail").unwrap();
    assert_eq!(store.len(id).unwrap(), 3 * PAGE + 14);
    let mut buf = vec![1u8; 20];
    assert_eq!(store.read_at(id, 3 * PAGE, &mut buf).unwrap(), 14);
    assert_eq!(&buf[..14], b"\0\0\0\0\0\0\0\0\0\0tail");
    assert_eq!(store.read_at(id, 3 * PAGE + 14, &mut buf).unwrap(), 0);
    assert_eq!(store.read_at(id, u64::MAX, &mut buf).unwrap(), 0);
    // Shrinking then growing again shows zeros, not the old bytes.
    store.truncate(id, 3 * PAGE + 12).unwrap();
    store.truncate(id, 4 * PAGE).unwrap();
    assert_eq!(store.read_at(id, 3 * PAGE + 10, &mut buf).unwrap(), 20);
    assert_eq!(&buf[..4], b"ta\0\0");
    assert!(matches!(
        store.write_at(id, u64::MAX - 2, b"xyz"),
        Err(DatalogError::OutOfRange { .. })
    ));
    assert!(matches!(
        store.truncate(id, u64::MAX),
        Err(DatalogError::OutOfRange { .. })
    ));
}

#[test]
fn the_namespace_creates_renames_lists_and_removes() {
    let mut heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    {
        let store = Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 3,
                policy: Policy::default(),
            },
        )
        .unwrap();
        let a = store.create_file("a").unwrap();
        store.write_at(a, 0, &[7u8; 5000]).unwrap();
        let b = store.create_file("b").unwrap();
        store.write_at(b, 100, b"bee").unwrap();
        assert!(matches!(
            store.create_file("a"),
            Err(DatalogError::Exists { .. })
        ));
        assert!(matches!(
            store.create_file(""),
            Err(DatalogError::InvalidName { .. })
        ));
        assert!(matches!(
            store.create_file(&"x".repeat(MAX_NAME + 1)),
            Err(DatalogError::InvalidName { .. })
        ));
        store.create_file(&"c".repeat(MAX_NAME)).unwrap();
        assert!(matches!(
            store.create_file("d"),
            Err(DatalogError::TooManyFiles { max: 3 })
        ));
        assert_eq!(
            store.list(),
            vec!["a".to_string(), "b".into(), "c".repeat(MAX_NAME)]
        );
        store.rename("b", "bb").unwrap();
        assert!(matches!(
            store.rename("a", "bb"),
            Err(DatalogError::Exists { .. })
        ));
        assert!(matches!(
            store.rename("zz", "y"),
            Err(DatalogError::NotFound { .. })
        ));
        assert_eq!(store.open_file("bb").unwrap(), b);
        store.remove(&"c".repeat(MAX_NAME)).unwrap();
        store.remove("a").unwrap();
        assert!(matches!(store.len(a), Err(DatalogError::StaleHandle)));
        assert!(matches!(
            store.open_file("a"),
            Err(DatalogError::NotFound { .. })
        ));
        // The slot is reused; the old handle stays stale.
        let a2 = store.create_file("a2").unwrap();
        assert!(matches!(store.len(a), Err(DatalogError::StaleHandle)));
        assert_eq!(store.len(a2).unwrap(), 0);
        heap_matches(&heap, &store);
    }
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    assert_eq!(store.list(), vec!["a2".to_string(), "bb".into()]);
    let b = store.open_file("bb").unwrap();
    let mut buf = [0u8; 3];
    store.read_at(b, 100, &mut buf).unwrap();
    assert_eq!(&buf, b"bee");
    heap_matches(&heap, &store);
}

#[test]
fn open_refuses_a_root_without_a_store() {
    let heap = heap(8 << 20);
    match Datalog::open(&heap, heap.pool().root_offset()) {
        Err(DatalogError::WrongKind { found, .. }) => {
            assert_eq!(found, "nothing (an all-zero root)")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a store at an all-zero root"),
    }
    let bad = Policy {
        fold_after_entries: 0,
        ..Policy::default()
    };
    assert!(matches!(
        Datalog::create(
            &heap,
            heap.pool().root_offset(),
            DatalogConfig {
                max_files: 4,
                policy: bad
            }
        ),
        Err(DatalogError::InvalidConfig { .. })
    ));
}

/// Overwrite 64-byte pieces of a 16-page file forever: pages fold, logs are cleaned, and
/// neither the log nor the heap grows.
fn overwrite_forever(mode: WriteMode) {
    let heap = heap(16 << 20);
    let store = Datalog::create(
        &heap,
        heap.pool().root_offset(),
        DatalogConfig {
            max_files: 4,
            policy: Policy::with_mode(mode),
        },
    )
    .unwrap();
    let id = store.create_file("hot").unwrap();
    let mut model = vec![0u8; 16 * PAGE as usize];
    store.write_at(id, 0, &model).unwrap();
    let mut rng = SplitMix64::new(99);
    let mut most_pages = 0;
    for i in 0..20_000u64 {
        let offset = rng.below(16 * PAGE / 64) * 64;
        let data = [(i % 251) as u8; 64];
        store.write_at(id, offset, &data).unwrap();
        write_into(&mut model, offset, &data);
        let stats = store.file_stats(id).unwrap();
        most_pages = most_pages.max(stats.log_pages);
        assert!(stats.data_blocks <= 17, "{stats:?}");
        if mode == WriteMode::Embedded {
            assert!(stats.embedded_entries <= 16 * 64, "{stats:?}");
        }
    }
    // Live entries: at most 64 embeds of 96 bytes on each of 16 pages, about 25 log pages;
    // compaction starts below a third live, so about 75. Unbounded, 20,000 writes would take
    // about 480.
    assert!(most_pages <= 80, "the log reached {most_pages} pages");
    assert_eq!(contents(&store, id), model);
    heap_matches(&heap, &store);
}

#[test]
fn embedded_overwrites_forever_fold_pages_and_keep_the_log_bounded() {
    overwrite_forever(WriteMode::Embedded);
}

#[test]
fn copy_on_write_overwrites_forever_keep_the_log_bounded() {
    overwrite_forever(WriteMode::CopyOnWrite);
}

#[test]
fn a_page_with_many_embedded_writes_is_folded_into_a_new_page() {
    let heap = heap(8 << 20);
    let policy = Policy {
        mode: WriteMode::Embedded,
        fold_after_entries: 8,
        ..Policy::default()
    };
    let store = Datalog::create(
        &heap,
        heap.pool().root_offset(),
        DatalogConfig {
            max_files: 2,
            policy,
        },
    )
    .unwrap();
    let id = store.create_file("f").unwrap();
    for i in 0..8u64 {
        store.write_at(id, i * 8 + 1, &[i as u8 + 1; 5]).unwrap();
    }
    let s = store.file_stats(id).unwrap();
    assert_eq!((s.embedded_entries, s.base_pages), (8, 0), "{s:?}");
    store.write_at(id, 100, b"ninth").unwrap();
    let s = store.file_stats(id).unwrap();
    assert_eq!((s.embedded_entries, s.base_pages), (0, 1), "{s:?}");
    let mut buf = [0u8; 105];
    store.read_at(id, 0, &mut buf).unwrap();
    for i in 0..8usize {
        assert_eq!(&buf[i * 8 + 1..i * 8 + 6], &[i as u8 + 1; 5]);
    }
    assert_eq!(&buf[100..105], b"ninth");
    // An embed that covers an older one entirely replaces it.
    store.write_at(id, 200, b"abc").unwrap();
    store.write_at(id, 199, b"wxyzw").unwrap();
    assert_eq!(store.file_stats(id).unwrap().embedded_entries, 1);
}

#[test]
fn auto_embeds_small_pieces_and_copies_large_ones() {
    let heap = heap(8 << 20);
    let store = Datalog::create(
        &heap,
        heap.pool().root_offset(),
        DatalogConfig {
            max_files: 2,
            policy: Policy::default(),
        },
    )
    .unwrap();
    let id = store.create_file("f").unwrap();
    store.write_at(id, 10, &[1u8; 2048]).unwrap();
    assert_eq!(store.file_stats(id).unwrap().embedded_entries, 1);
    store.write_at(id, PAGE + 10, &[1u8; 2049]).unwrap();
    let s = store.file_stats(id).unwrap();
    assert_eq!((s.embedded_entries, s.base_pages), (1, 1), "{s:?}");
    // A write across a page boundary: two embedded pieces, one commit.
    store.write_at(id, 3 * PAGE - 32, &[2u8; 64]).unwrap();
    assert_eq!(store.file_stats(id).unwrap().embedded_entries, 3);
}

#[test]
fn a_multi_page_write_spanning_blocks_reads_back() {
    let heap = heap(32 << 20);
    let store = Datalog::create(
        &heap,
        heap.pool().root_offset(),
        DatalogConfig {
            max_files: 2,
            policy: Policy::default(),
        },
    )
    .unwrap();
    let id = store.create_file("big").unwrap();
    let data: Vec<u8> = (0..200 * PAGE + 123).map(|i| (i * 7 % 256) as u8).collect();
    store.write_at(id, 77, &data).unwrap();
    let mut buf = vec![0u8; data.len()];
    store.read_at(id, 77, &mut buf).unwrap();
    assert_eq!(buf, data);
    assert!(store.file_stats(id).unwrap().data_blocks >= 4);
    heap_matches(&heap, &store);
}

#[test]
fn a_full_pool_refuses_the_write_and_loses_nothing() {
    let mut heap = heap(4 << 20);
    let root = heap.pool().root_offset();
    let mut model = Vec::new();
    let mut refused = None;
    {
        let store = Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 2,
                policy: Policy::with_mode(WriteMode::CopyOnWrite),
            },
        )
        .unwrap();
        let id = store.create_file("f").unwrap();
        for i in 0..200u64 {
            let data = vec![i as u8 + 1; 64 << 10];
            match store.write_at(id, i * (64 << 10), &data) {
                Ok(()) => write_into(&mut model, i * (64 << 10), &data),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        assert!(
            matches!(
                refused,
                Some(DatalogError::Tx(pmem_undo_log::TxError::PoolFull { .. }))
            ),
            "{refused:?}"
        );
        assert_eq!(
            contents(&store, id),
            model,
            "the refused write changed nothing"
        );
        // Smaller writes still fit, and a truncate gives space back.
        store.truncate(id, model.len() as u64 / 2).unwrap();
        model.truncate(model.len() / 2);
        store.write_at(id, 10, b"still works").unwrap();
        write_into(&mut model, 10, b"still works");
        heap_matches(&heap, &store);
    }
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    let id = store.open_file("f").unwrap();
    assert_eq!(contents(&store, id), model);
}

#[test]
fn a_compaction_without_room_fails_quietly_and_the_write_stands() {
    let mut heap = heap(4 << 20);
    let root = heap.pool().root_offset();
    let policy = Policy {
        mode: WriteMode::Embedded,
        compact_live_percent: 100,
        compact_min_pages: 2,
        ..Policy::default()
    };
    let mut model = Vec::new();
    {
        let store = Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 2,
                policy,
            },
        )
        .unwrap();
        let b = store.create_file("b").unwrap();
        for i in 0..13u64 {
            store.write_at(b, i * 300, &[i as u8 + 1; 300]).unwrap();
            write_into(&mut model, i * 300, &[i as u8 + 1; 300]);
        }
        assert!(store.cleaning_stats().compactions >= 1);
        assert_eq!(store.cleaning_stats().failures, 0);
        // Fill the pool with another file, page by page.
        let a = store.create_file("a").unwrap();
        let mut i = 0;
        while store
            .write_at_with(a, i * PAGE, &[7u8; PAGE as usize], WriteMode::CopyOnWrite)
            .is_ok()
        {
            i += 1;
        }
        // This write fits the tail page; the compaction after it finds no room.
        store.write_at(b, 5, b"fits").unwrap();
        write_into(&mut model, 5, b"fits");
        assert!(
            store.cleaning_stats().failures >= 1,
            "{:?}",
            store.cleaning_stats()
        );
        assert_eq!(contents(&store, b), model);
        // Making room lets cleaning work again.
        store.remove("a").unwrap();
        store.write_at(b, 9, b"!").unwrap();
        write_into(&mut model, 9, b"!");
        store.compact_file(b).unwrap();
        assert_eq!(contents(&store, b), model);
        heap_matches(&heap, &store);
    }
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    let b = store.open_file("b").unwrap();
    assert_eq!(contents(&store, b), model);
}

fn bytes_written(s: Stats) -> u64 {
    s.store_bytes + s.nt_bytes
}

/// Optane guide (FAST'20), Sec. 5.1.2: embedding sub-page writes in the log avoids copying whole pages.
#[test]
fn embedded_64_byte_overwrites_write_at_most_a_tenth_of_the_bytes_of_copy_on_write() {
    let mut written = BTreeMap::new();
    for mode in [WriteMode::CopyOnWrite, WriteMode::Embedded] {
        let heap = heap(32 << 20);
        let store = Datalog::create(
            &heap,
            heap.pool().root_offset(),
            DatalogConfig {
                max_files: 2,
                policy: Policy::with_mode(mode),
            },
        )
        .unwrap();
        let id = store.create_file("f").unwrap();
        let pages = 16;
        store
            .write_at(id, 0, &vec![1u8; (pages * PAGE) as usize])
            .unwrap();
        let mut rng = SplitMix64::new(5);
        reset_thread_stats();
        for i in 0..10_000u64 {
            let offset = rng.below(pages * PAGE / 64) * 64;
            store.write_at(id, offset, &[i as u8; 64]).unwrap();
        }
        let stats = thread_stats();
        written.insert(mode.name(), (bytes_written(stats), stats.bytes_to_media()));
    }
    let (cow, cow_media) = written["cow"];
    let (embedded, embedded_media) = written["embedded"];
    println!(
        "bytes stored per write: cow {} embedded {}",
        cow / 10_000,
        embedded / 10_000
    );
    println!(
        "bytes flushed or streamed per write: cow {} embedded {}",
        cow_media / 10_000,
        embedded_media / 10_000
    );
    assert!(
        embedded * 10 <= cow,
        "embedded wrote {embedded} bytes, copy-on-write {cow}"
    );
    assert!(
        embedded_media * 10 <= cow_media,
        "embedded sent {embedded_media} bytes to media, copy-on-write {cow_media}"
    );
}
