//! The datalog store on damaged pools: a corrupted entry, log, inode table or copy-on-write
//! data page is reported as a typed error naming the file and offset, never served; the other
//! files (and the other pages of a file with a damaged data page) stay readable, and bytes past
//! a log's committed tail are ignored.

use pmem_ordering::{Granularity, Pool};
use pmem_structures::raw::datalog::{
    Datalog, DatalogConfig, DatalogError, Policy, WriteMode, PAGE,
};
use pmem_structures::{Error, Store, StoreOptions};
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
    heap.pool().persist(w);
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
    pool.persist(w);
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
    heap.pool().persist(w);
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
        heap.pool().persist(w);
    }
    heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    let id = store.open_file("f").unwrap();
    assert_eq!(file_contents(&store, id).unwrap(), model);
    store.write_at(id, 4, b"after").unwrap();
    assert_eq!(file_contents(&store, id).unwrap(), b"commafter");
}

/// A page of `marker` bytes with its page number in its first 8 bytes, so that a scan of the
/// pool finds each copy-on-write page where it landed.
fn marked_page(marker: u8, page: u64) -> Vec<u8> {
    let mut bytes = vec![marker; PAGE as usize];
    bytes[..8].copy_from_slice(&page.to_le_bytes());
    bytes
}

/// The pool offsets (8-byte aligned, as the allocator's blocks are) where `page` lies whole.
fn find_page(pool: &Pool, page: &[u8]) -> Vec<u64> {
    let mut image = vec![0u8; pool.size() as usize];
    pool.read_bytes(0, &mut image).unwrap();
    find_in(&image, page)
}

/// The 8-byte aligned offsets in `image` where `page` lies whole.
fn find_in(image: &[u8], page: &[u8]) -> Vec<u64> {
    (0..image.len().saturating_sub(page.len()) + 1)
        .step_by(8)
        .filter(|&at| image[at..at + 8] == page[..8] && &image[at..at + page.len()] == page)
        .map(|at| at as u64)
        .collect()
}

/// Flip bit `bit` of the byte at `at`, durably.
fn flip_bit(pool: &Pool, at: u64, bit: u8) {
    let mut byte = [0u8; 1];
    pool.read_bytes(at, &mut byte).unwrap();
    let w = pool.write(at, &[byte[0] ^ (1 << bit)]).unwrap();
    pool.persist(w);
}

/// A store of copy-on-write files: "victim" of three marked pages, "other" of one. Returns the
/// heap (reopened after the damage) and the pool offset of the victim's page 1.
fn reopen_with_damaged_cow_page(flips: &[(u64, u8)]) -> (Heap, u64) {
    let heap = heap(8 << 20);
    let root = heap.pool().root_offset();
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
        let victim = store.create_file("victim").unwrap();
        for p in 0..3 {
            store
                .write_at(victim, p * PAGE, &marked_page(0xA5, p))
                .unwrap();
        }
        let other = store.create_file("other").unwrap();
        store.write_at(other, 0, &marked_page(0x3C, 0)).unwrap();
    }
    let found = find_page(heap.pool(), &marked_page(0xA5, 1));
    assert_eq!(found.len(), 1, "the victim's page 1 is in one place");
    for &(byte, bit) in flips {
        flip_bit(heap.pool(), found[0] + byte, bit);
    }
    (reopen(heap), found[0])
}

#[test]
fn a_flipped_bit_in_a_cow_page_is_reported_with_file_and_offset_never_served() {
    for flips in [
        vec![(0u64, 0u8)],
        vec![(100, 3)],
        vec![(PAGE - 1, 7)],
        vec![(7, 1), (2048, 5), (4000, 6)],
    ] {
        let (heap, damaged) = reopen_with_damaged_cow_page(&flips);
        let store = Datalog::open(&heap, heap.pool().root_offset()).unwrap();
        let victim = store.open_file("victim").unwrap();
        let is_the_damage = |result: Result<usize, DatalogError>| match result {
            Err(DatalogError::CorruptData { file, offset, page }) => {
                file == "victim" && offset == PAGE && page == damaged
            }
            _ => false,
        };
        // A whole-page read, a read of a few bytes and a read across the damaged page.
        let mut page = vec![0x77u8; PAGE as usize];
        assert!(
            is_the_damage(store.read_at(victim, PAGE, &mut page)),
            "{flips:?}"
        );
        assert!(page.iter().all(|&b| b == 0), "no damaged byte is served");
        let mut few = [0x77u8; 10];
        assert!(is_the_damage(store.read_at(victim, PAGE + 100, &mut few)));
        assert_eq!(few, [0x77u8; 10], "the caller's buffer is left as it was");
        let mut all = vec![0x77u8; 3 * PAGE as usize];
        assert!(is_the_damage(store.read_at(victim, 0, &mut all)));
        assert!(all[PAGE as usize..].iter().all(|&b| b == 0 || b == 0x77));
        let message = store
            .read_at(victim, PAGE, &mut page)
            .unwrap_err()
            .to_string();
        assert!(
            message.contains("\"victim\"")
                && message.contains(&format!("file offset {PAGE}"))
                && message.contains(&format!("{damaged:#x}")),
            "{message}"
        );
        // The file's other pages, and the other file, read fine.
        for p in [0, 2] {
            store.read_at(victim, p * PAGE, &mut page).unwrap();
            assert_eq!(page, marked_page(0xA5, p));
        }
        let other = store.open_file("other").unwrap();
        assert_eq!(file_contents(&store, other).unwrap(), marked_page(0x3C, 0));
        // A partial write would merge the damaged bytes: refused. A whole page replaces them.
        assert!(matches!(
            store.write_at(victim, PAGE + 5, b"x"),
            Err(DatalogError::CorruptData { .. })
        ));
        store.write_at(victim, PAGE, &marked_page(0x11, 1)).unwrap();
        store.read_at(victim, PAGE, &mut page).unwrap();
        assert_eq!(page, marked_page(0x11, 1));
    }
}

#[test]
fn an_embed_over_a_damaged_page_does_not_hide_the_damage() {
    let (heap, damaged) = reopen_with_damaged_cow_page(&[(9, 2)]);
    let store = Datalog::open(&heap, heap.pool().root_offset()).unwrap();
    let victim = store.open_file("victim").unwrap();
    // An embedded write over the damaged bytes needs no read of the base page...
    store
        .write_at_with(victim, PAGE + 8, b"new", WriteMode::Embedded)
        .unwrap();
    // ...but a read of the page merges over it, so it is checked.
    let mut buf = [0u8; 3];
    match store.read_at(victim, PAGE + 8, &mut buf) {
        Err(DatalogError::CorruptData { offset, page, .. }) => {
            assert_eq!((offset, page), (PAGE, damaged))
        }
        other => panic!("expected a corrupt-data error, got {other:?}"),
    }
    assert_eq!(buf, [0u8; 3]);
}

#[test]
fn compaction_and_reopening_carry_the_recorded_crc_rather_than_bless_the_damage() {
    let (heap, damaged) = reopen_with_damaged_cow_page(&[(50, 4)]);
    let root = heap.pool().root_offset();
    {
        let store = Datalog::open(&heap, root).unwrap();
        let victim = store.open_file("victim").unwrap();
        store.compact_file(victim).unwrap();
        let mut page = vec![0u8; PAGE as usize];
        assert!(matches!(
            store.read_at(victim, PAGE, &mut page),
            Err(DatalogError::CorruptData { page, .. }) if page == damaged
        ));
    }
    let heap = reopen(heap);
    let store = Datalog::open(&heap, root).unwrap();
    let victim = store.open_file("victim").unwrap();
    let mut page = vec![0u8; PAGE as usize];
    assert!(matches!(
        store.read_at(victim, PAGE, &mut page),
        Err(DatalogError::CorruptData { page, .. }) if page == damaged
    ));
    store.read_at(victim, 2 * PAGE, &mut page).unwrap();
    assert_eq!(page, marked_page(0xA5, 2));
    // Truncating the damaged page away leaves a file that reads whole.
    store.truncate(victim, PAGE).unwrap();
    assert_eq!(file_contents(&store, victim).unwrap(), marked_page(0xA5, 0));
}

#[test]
fn a_format_1_store_is_refused_with_its_version() {
    let heap = heap(8 << 20);
    let root = heap.pool().root_offset();
    drop(Datalog::create(&heap, root, DatalogConfig::default()).unwrap());
    store_word(heap.pool(), root, u64::from_le_bytes(*b"DATALOG1"));
    match Datalog::open(&heap, root) {
        Err(e @ DatalogError::Corrupt { .. }) => {
            let message = e.to_string();
            assert!(
                message.contains("format version 1") && message.contains("reads 2"),
                "{message}"
            );
        }
        Err(e) => panic!("expected a format refusal, got {e}"),
        Ok(_) => panic!("a format 1 store opened"),
    }
}

#[test]
fn a_store_file_with_a_damaged_cow_page_reports_it_through_the_store_error() {
    let dir = pmem_test_kit::fixture::scratch_dir("pmem-datalog-damage");
    let path = dir.path().join("damaged.pool");
    let options = StoreOptions::new().granularity(Granularity::Emulated);
    {
        let store = Store::create(&path, 8 << 20, &options).unwrap();
        let files = store
            .datalog(
                "files",
                DatalogConfig {
                    max_files: 4,
                    policy: Policy::with_mode(WriteMode::CopyOnWrite),
                },
            )
            .unwrap();
        let id = files.create_file("report").unwrap();
        files.write_at(id, 0, &marked_page(0x5A, 0)).unwrap();
        files.write_at(id, PAGE, &marked_page(0x5A, 1)).unwrap();
    }
    // Damage the file on disk, as a failing medium would.
    let mut bytes = std::fs::read(&path).unwrap();
    let target = marked_page(0x5A, 1);
    let found = find_in(&bytes, &target);
    assert_eq!(found.len(), 1, "the page is in the file once");
    // The pool maps the file from its start: file offsets are pool offsets.
    let at = found[0];
    bytes[at as usize + 1234] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();

    let store = Store::open_with(&path, &options).unwrap();
    let files = store.datalog("files", DatalogConfig::default()).unwrap();
    let id = files.open_file("report").unwrap();
    let mut buf = vec![0u8; PAGE as usize];
    let err: Error = files.read_at(id, PAGE, &mut buf).unwrap_err().into();
    match &err {
        Error::Datalog(DatalogError::CorruptData { file, offset, page }) => {
            assert_eq!((file.as_str(), *offset, *page), ("report", PAGE, at));
        }
        other => panic!("expected a corrupt-data error, got {other}"),
    }
    assert!(err.to_string().contains("\"report\""), "{err}");
    assert!(buf.iter().all(|&b| b == 0));
    files.read_at(id, 0, &mut buf).unwrap();
    assert_eq!(buf, marked_page(0x5A, 0));
    store.check_blocks().unwrap();
}
