//! The datalog store on damaged pools: a corrupted entry, log or inode table is reported as a
//! typed error naming the file and offset, the other files stay readable, and bytes past a
//! log's committed tail are ignored.

use pmem_ordering::Pool;
use pmem_structures::datalog::{Datalog, DatalogConfig, DatalogError, Policy, WriteMode};
use pmem_test_kit::datalog::file_contents;
use pmem_test_kit::fixture::{anonymous_heap, reopen};
use pmem_undo_log::Heap;

fn heap(size: u64) -> Heap {
    anonymous_heap("datalog", size)
}

/// The offset of file slot 0's log head, read from the root and inode table.
fn first_log_page(pool: &Pool) -> (u64, u64) {
    let table = pool.read::<u64>(pool.root_offset() + 8).unwrap();
    (
        pool.read::<u64>(table + 8).unwrap(),
        pool.read::<u64>(table).unwrap(),
    )
}

#[test]
fn a_corrupted_committed_entry_is_reported_with_file_and_offset() {
    let mut heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    {
        let store = Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 2,
                policy: Policy::with_mode(WriteMode::Embedded),
            },
        )
        .unwrap();
        let id = store.create_file("victim").unwrap();
        store.write_at(id, 0, b"precious bytes").unwrap();
        let other = store.create_file("other").unwrap();
        store.write_at(other, 0, b"fine").unwrap();
    }
    let (head, _) = first_log_page(heap.pool());
    let entry = head + 64;
    // Flip one bit of the inline payload.
    let mut byte = [0u8; 1];
    heap.pool().read_bytes(entry + 35, &mut byte).unwrap();
    let w = heap.pool().write(entry + 35, &[byte[0] ^ 0x10]).unwrap();
    let _ = heap.pool().persist(w);
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    assert_eq!(store.list(), vec!["other".to_string(), "victim".into()]);
    let id = store.open_file("victim").unwrap();
    let mut buf = [0u8; 14];
    match store.read_at(id, 0, &mut buf) {
        Err(DatalogError::CorruptEntry {
            file, entry: at, ..
        }) => {
            assert_eq!((file.as_str(), at), ("victim", entry));
        }
        other => panic!("expected a corrupt-entry error, got {other:?}"),
    }
    assert_eq!(buf, [0u8; 14], "no corrupted data is returned");
    assert!(matches!(
        store.write_at(id, 0, b"x"),
        Err(DatalogError::CorruptEntry { .. })
    ));
    let message = store.len(id).unwrap_err().to_string();
    assert!(
        message.contains("victim") && message.contains(&format!("{entry:#x}")),
        "{message}"
    );
    // The other file is untouched.
    let other = store.open_file("other").unwrap();
    let mut four = [0u8; 4];
    store.read_at(other, 0, &mut four).unwrap();
    assert_eq!(&four, b"fine");
}

/// A store with files "a" (slot 0, several log pages) and "b"; then `damage` is applied to
/// the pool (given the inode table's offset) and the heap reopened. Returns the heap and the
/// contents of "b".
fn reopen_damaged(damage: impl FnOnce(&Pool, u64)) -> (Heap, Vec<u8>) {
    let heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    let b_model;
    {
        let store = Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 2,
                policy: Policy::with_mode(WriteMode::Embedded),
            },
        )
        .unwrap();
        let a = store.create_file("a").unwrap();
        for i in 0..40u64 {
            store.write_at(a, i * 200, &[i as u8; 200]).unwrap();
        }
        let b = store.create_file("b").unwrap();
        store.write_at(b, 0, b"intact").unwrap();
        b_model = file_contents(&store, b).unwrap();
    }
    let table = heap.pool().read::<u64>(root + 8).unwrap();
    damage(heap.pool(), table);
    (reopen(heap), b_model)
}

fn store_word(pool: &Pool, at: u64, value: u64) {
    let w = pool.store_u64(at, value).unwrap();
    let _ = pool.persist(w);
}

#[test]
fn damaged_logs_make_damaged_files_and_spare_the_others() {
    type Damage = Box<dyn Fn(&Pool, u64)>;
    let damages: [(&str, Damage); 4] = [
        (
            "tail outside the pool",
            Box::new(|p, t| store_word(p, t, u64::MAX - 7)),
        ),
        (
            "tail inside an entry",
            Box::new(|p, t| {
                let head = p.read::<u64>(t + 8).unwrap();
                store_word(p, t, head + 64 + 8);
            }),
        ),
        (
            "head not a page of the heap",
            Box::new(|p, t| store_word(p, t + 8, p.root_offset())),
        ),
        (
            "a log page linked to itself",
            Box::new(|p, t| {
                let head = p.read::<u64>(t + 8).unwrap();
                store_word(p, head, head);
            }),
        ),
    ];
    for (what, damage) in damages {
        let (heap, b_model) = reopen_damaged(|p, t| damage(p, t));
        let store = Datalog::open(&heap, heap.pool().root_offset())
            .unwrap_or_else(|e| panic!("{what}: the store must open: {e}"));
        assert_eq!(store.list(), vec!["a".to_string(), "b".into()], "{what}");
        let a = store.open_file("a").unwrap();
        let mut buf = [0u8; 8];
        for result in [
            store.read_at(a, 0, &mut buf).map(|_| ()),
            store.len(a).map(|_| ()),
            store.write_at(a, 0, b"x"),
            store.truncate(a, 0),
            store.remove("a"),
        ] {
            match result {
                Err(DatalogError::CorruptEntry { file, .. }) => assert_eq!(file, "a", "{what}"),
                other => panic!("{what}: expected a corrupt-entry error, got {other:?}"),
            }
        }
        let b = store.open_file("b").unwrap();
        assert_eq!(file_contents(&store, b).unwrap(), b_model, "{what}");
        store.write_at(b, 6, b", still").unwrap();
    }
}

#[test]
fn a_damaged_inode_table_is_a_typed_error() {
    for (what, at, value) in [
        ("a name longer than an inode holds", 24, 500u64),
        ("a generation from the future", 16, 1 << 40),
    ] {
        let (heap, _) = reopen_damaged(|p, t| store_word(p, t + at, value));
        match Datalog::open(&heap, heap.pool().root_offset()) {
            Err(DatalogError::Corrupt { .. }) => {}
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: the store opened"),
        }
    }
}

#[test]
fn an_embedded_entry_corrupted_after_open_is_caught_by_the_read() {
    let heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    let store = Datalog::create(
        &heap,
        root,
        DatalogConfig {
            max_files: 2,
            policy: Policy::with_mode(WriteMode::Embedded),
        },
    )
    .unwrap();
    let id = store.create_file("f").unwrap();
    store.write_at(id, 8, b"abcdefgh").unwrap();
    let (head, _) = first_log_page(heap.pool());
    let w = heap.pool().write(head + 64 + 33, b"Z").unwrap();
    let _ = heap.pool().persist(w);
    let mut buf = [0u8; 8];
    assert!(matches!(
        store.read_at(id, 8, &mut buf),
        Err(DatalogError::CorruptEntry { entry, .. }) if entry == head + 64
    ));
    // Bytes outside the entry still read.
    let mut before = [9u8; 8];
    store.read_at(id, 0, &mut before).unwrap();
    assert_eq!(before, [0u8; 8]);
}

#[test]
fn bytes_past_the_committed_tail_are_ignored() {
    let mut heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    let model;
    {
        let store = Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 2,
                policy: Policy::with_mode(WriteMode::Embedded),
            },
        )
        .unwrap();
        let id = store.create_file("f").unwrap();
        store.write_at(id, 0, b"committed").unwrap();
        model = file_contents(&store, id).unwrap();
        // A torn entry: a valid-looking header with garbage after it, past the tail.
        let (_, tail) = first_log_page(heap.pool());
        let mut junk = vec![0x5Au8; 200];
        junk[4] = 2;
        let w = heap.pool().write(tail, &junk).unwrap();
        let _ = heap.pool().persist(w);
    }
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    let id = store.open_file("f").unwrap();
    assert_eq!(file_contents(&store, id).unwrap(), model);
    store.write_at(id, 4, b"after").unwrap();
    assert_eq!(file_contents(&store, id).unwrap(), b"commafter");
}
