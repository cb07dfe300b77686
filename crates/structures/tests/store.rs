//! The `Store`: files, names, kinds, handles, reserved keys, removal with a heap walk, and the
//! pool lock.

use pmem_undo_log::Heap;
use std::collections::BTreeMap as Model;

use pmem_ordering::{Granularity, PoolError};
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::datalog::DatalogConfig;
use pmem_structures::raw::fastfair::{FastFairConfig, ShiftPolicy};
use pmem_structures::{BTreeMap, Datalog, Error, HashMap, Store, StoreOptions, StructureKind};
use pmem_test_kit::fixture::{file_pool_options, file_store_options, pool_path};

/// Emulated granularity, or the one detected for the file where `PMEM_TEST_POOL_DIR` points
/// the tests at a file system of interest (the test kit's `file_granularity`).
fn options() -> StoreOptions {
    file_store_options()
}

const SIZE: u64 = 32 << 20;

#[test]
fn handles_are_owned_and_shareable() {
    fn owned<T: Clone + Send + Sync + 'static>() {}
    owned::<Store>();
    owned::<HashMap>();
    owned::<BTreeMap>();
    owned::<Datalog>();
}

#[test]
fn named_structures_survive_a_reopen_with_nothing_passed_again() {
    let (_dir, path) = pool_path("pmem-store-test", "reopen.pool");
    let tree_config = FastFairConfig {
        node_size: 256,
        policy: ShiftPolicy::Redo,
    };
    {
        let store = Store::create(&path, SIZE, &options()).unwrap();
        let users = store.hash_map::<u64, u64>("users").unwrap();
        let orders = store
            .btree_map_with::<u64, u64>("orders", tree_config)
            .unwrap();
        let files = store.datalog("files", DatalogConfig::default()).unwrap();
        for k in 0..2_000u64 {
            assert!(users.insert(k, k + 1).unwrap());
            assert!(orders.insert(u64::MAX - k, k).unwrap());
        }
        let id = files.create_file("log").unwrap();
        files.write_at(id, 0, b"hello").unwrap();
        assert_eq!(store.names(), ["files", "orders", "users"]);
    }
    let store = Store::open_with(&path, &options()).unwrap();
    assert_eq!(
        store.structures(),
        [
            ("files".to_string(), StructureKind::Datalog),
            ("orders".to_string(), StructureKind::BTreeMap),
            ("users".to_string(), StructureKind::HashMap),
        ]
    );
    let users = store.hash_map::<u64, u64>("users").unwrap();
    // The default configuration passed here is not applied: the tree keeps its own.
    let orders = store.btree_map::<u64, u64>("orders").unwrap();
    assert_eq!(orders.layout(), tree_config.into());
    assert_eq!(users.len(), 2_000);
    assert_eq!(orders.len(), 2_000);
    for k in 0..2_000u64 {
        assert_eq!(users.get(k).unwrap(), Some(k + 1));
        assert_eq!(orders.get(u64::MAX - k).unwrap(), Some(k));
    }
    assert_eq!(users.check().unwrap(), 2_000);
    assert_eq!(orders.check().unwrap(), 2_000);
    let files = store.datalog("files", DatalogConfig::default()).unwrap();
    let id = files.open_file("log").unwrap();
    let mut buf = [0u8; 5];
    files.read_at(id, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    store.check_blocks().unwrap();
}

#[test]
fn open_or_create_creates_once_then_opens() {
    let (_dir, path) = pool_path("pmem-store-test", "ooc.pool");
    {
        let store = Store::open_or_create(&path, SIZE, &options()).unwrap();
        store
            .hash_map::<u64, u64>("a")
            .unwrap()
            .insert(5, 6)
            .unwrap();
    }
    let store = Store::open_or_create(&path, SIZE, &options()).unwrap();
    assert_eq!(
        store.hash_map::<u64, u64>("a").unwrap().get(5).unwrap(),
        Some(6)
    );
}

#[test]
fn a_second_open_is_refused_until_the_last_handle_drops() {
    let (_dir, path) = pool_path("pmem-store-test", "lock.pool");
    let store = Store::create(&path, SIZE, &options()).unwrap();
    let map = store.hash_map::<u64, u64>("m").unwrap();
    map.insert(1, 2).unwrap();
    let before = std::fs::read(&path).unwrap();
    let refused =
        |r: Result<Store, Error>| matches!(r, Err(Error::Pool(PoolError::AlreadyOpen { .. })));
    assert!(refused(Store::open_with(&path, &options())));
    assert!(refused(Store::open_or_create(&path, SIZE, &options())));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a refused open changed the file"
    );
    drop(store);
    // The handle keeps the store, and the lock, alive.
    assert!(refused(Store::open_with(&path, &options())));
    map.insert(3, 4).unwrap();
    drop(map);
    let store = Store::open_with(&path, &options()).unwrap();
    assert_eq!(
        store.hash_map::<u64, u64>("m").unwrap().get(3).unwrap(),
        Some(4)
    );
}

#[test]
fn every_u64_is_a_key_in_both_maps() {
    let store = Store::anonymous(SIZE, &options()).unwrap();
    let hash = store.hash_map::<u64, u64>("h").unwrap();
    let tree = store.btree_map::<u64, u64>("t").unwrap();
    let keys = [0, 1, u64::MAX - 1, u64::MAX];
    for (i, &k) in keys.iter().enumerate() {
        let v = i as u64 + 100;
        assert!(hash.insert(k, v).unwrap());
        assert!(tree.insert(k, v).unwrap());
        assert!(!hash.insert(k, 0).unwrap(), "a second insert of {k}");
        assert!(!tree.insert(k, 0).unwrap(), "a second insert of {k}");
        assert_eq!(hash.get(k).unwrap(), Some(v));
        assert_eq!(tree.get(k).unwrap(), Some(v));
    }
    assert_eq!((hash.len(), tree.len()), (4, 4));
    let ordered: Vec<(u64, u64)> = tree.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        ordered,
        [(0, 100), (1, 101), (u64::MAX - 1, 102), (u64::MAX, 103)]
    );
    let mut unordered: Vec<(u64, u64)> = hash.iter().collect::<Result<_, _>>().unwrap();
    unordered.sort_unstable();
    assert_eq!(unordered, ordered);
    assert_eq!(
        tree.range(u64::MAX..)
            .collect::<Result<Vec<_>, _>>()
            .unwrap(),
        [(u64::MAX, 103)]
    );
    assert_eq!(tree.range(..u64::MAX).count(), 3);
    assert_eq!(
        tree.range(..=0).collect::<Result<Vec<_>, _>>().unwrap(),
        [(0, 100)]
    );
    for (i, &k) in keys.iter().enumerate() {
        let old = Some(i as u64 + 100);
        assert_eq!(hash.upsert(k, 7).unwrap(), old);
        assert_eq!(tree.upsert(k, 7).unwrap(), old);
        assert_eq!(hash.remove(k).unwrap(), Some(7));
        assert_eq!(tree.remove(k).unwrap(), Some(7));
        assert_eq!(hash.remove(k).unwrap(), None);
        assert_eq!(tree.get(k).unwrap(), None);
    }
    assert!(hash.is_empty() && tree.is_empty());
    assert_eq!((hash.check().unwrap(), tree.check().unwrap()), (0, 0));
}

#[test]
fn reserved_keys_survive_a_reopen() {
    let (_dir, path) = pool_path("pmem-store-test", "reserved.pool");
    {
        let store = Store::create(&path, SIZE, &options()).unwrap();
        store
            .hash_map::<u64, u64>("h")
            .unwrap()
            .insert(0, 9)
            .unwrap();
        store
            .btree_map::<u64, u64>("t")
            .unwrap()
            .insert(u64::MAX, 8)
            .unwrap();
    }
    let store = Store::open_with(&path, &options()).unwrap();
    assert_eq!(
        store.hash_map::<u64, u64>("h").unwrap().get(0).unwrap(),
        Some(9)
    );
    let tree = store.btree_map::<u64, u64>("t").unwrap();
    assert_eq!(tree.get(u64::MAX).unwrap(), Some(8));
    assert_eq!(tree.len(), 1);
}

#[test]
fn names_are_one_kind_and_checked() {
    let store = Store::anonymous(SIZE, &options().max_structures(3)).unwrap();
    store.hash_map::<u64, u64>("users").unwrap();
    match store.btree_map::<u64, u64>("users") {
        Err(Error::KindMismatch {
            name,
            found: StructureKind::HashMap,
            wanted: StructureKind::BTreeMap,
        }) => assert_eq!(name, "users"),
        Err(other) => panic!("unexpected {other}"),
        Ok(_) => panic!("a hash map opened as a tree"),
    }
    let message = store
        .datalog("users", DatalogConfig::default())
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        message,
        "\"users\" is a CCEH hash table, not a datalog file store"
    );
    for bad in ["", "nul\0", &"n".repeat(65)] {
        assert!(
            matches!(
                store.hash_map::<u64, u64>(bad),
                Err(Error::InvalidName { .. })
            ),
            "{bad:?}"
        );
    }
    store.hash_map::<u64, u64>("b").unwrap();
    store.datalog("c", DatalogConfig::default()).unwrap();
    assert!(matches!(
        store.hash_map::<u64, u64>("d"),
        Err(Error::CatalogFull { capacity: 3 })
    ));
    assert_eq!(store.names(), ["b", "c", "users"]);
    assert!(matches!(
        store.remove_structure("zzz"),
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        StoreOptions::new().max_structures(0).granularity(Granularity::Emulated),
        o if matches!(Store::anonymous(SIZE, &o), Err(Error::InvalidConfig { .. }))
    ));
}

#[test]
fn one_name_gives_one_shared_structure() {
    let store = Store::anonymous(SIZE, &options()).unwrap();
    let a = store.btree_map::<u64, u64>("t").unwrap();
    let b = store.btree_map::<u64, u64>("t").unwrap();
    a.insert(1, 1).unwrap();
    assert_eq!(b.get(1).unwrap(), Some(1));
    assert_eq!(b.len(), 1);
}

#[test]
fn removing_a_structure_frees_every_block_it_owned() {
    let store = Store::anonymous(64 << 20, &options()).unwrap();
    let keep = store.hash_map::<u64, u64>("keep").unwrap();
    keep.insert(1, 1).unwrap();
    let heap_blocks = |store: &Store| -> Vec<u64> {
        engine(store)
            .check_heap()
            .unwrap()
            .into_iter()
            .map(|(o, _)| o)
            .collect()
    };
    let before = heap_blocks(&store);
    for (name, keys) in [("small", 10u64), ("large", 50_000)] {
        {
            let hash = store
                .hash_map_with::<u64, u64>(
                    name,
                    CcehConfig {
                        buckets_per_segment: 16,
                    },
                )
                .unwrap();
            let tree = store
                .btree_map::<u64, u64>(&format!("{name}-tree"))
                .unwrap();
            let files = store
                .datalog(&format!("{name}-files"), DatalogConfig::default())
                .unwrap();
            for k in 0..keys {
                hash.insert(k, k).unwrap();
                tree.insert(k, k).unwrap();
            }
            let id = files.create_file("f").unwrap();
            files
                .write_at(id, 0, &vec![7u8; (keys * 8) as usize])
                .unwrap();
            assert!(matches!(
                store.remove_structure(name),
                Err(Error::InUse { .. })
            ));
            store.check_blocks().unwrap();
            assert!(heap_blocks(&store).len() > before.len() + 2);
        }
        for n in [
            name.to_string(),
            format!("{name}-tree"),
            format!("{name}-files"),
        ] {
            store.remove_structure(&n).unwrap();
        }
        assert_eq!(heap_blocks(&store), before, "after removing {name}");
        store.check_blocks().unwrap();
    }
    assert_eq!(store.names(), ["keep"]);
    assert_eq!(keep.get(1).unwrap(), Some(1));
}

#[test]
fn space_and_granularity_are_read_through_the_store() {
    let options = StoreOptions::new().granularity(Granularity::Emulated);
    let store = Store::anonymous(SIZE, &options).unwrap();
    assert_eq!(store.granularity(), Granularity::Emulated);
    assert_eq!(
        store.granularity_basis(),
        None,
        "an anonymous store has no file"
    );
    let empty = store.space();
    assert_eq!(empty.pool_bytes, SIZE);
    assert_eq!(empty.used + empty.free, empty.capacity);
    assert!(
        empty.capacity < SIZE && empty.capacity > SIZE / 2,
        "{empty:?}"
    );
    assert_eq!(empty.records, 0);

    let sessions = store.hash_map::<String, Vec<u8>>("sessions").unwrap();
    let value = vec![7u8; 10_000];
    for i in 0..50 {
        sessions.insert(format!("session:{i}"), &value).unwrap();
    }
    let full = store.space();
    assert_eq!(full.records, 50, "one record per pair");
    assert!(full.record_bytes >= 50 * 10_000, "{full:?}");
    assert!(
        full.used >= empty.used + full.record_bytes,
        "{full:?} after {empty:?}"
    );
    assert_eq!(full.used + full.free, full.capacity);
    assert!(full.used_percent() > empty.used_percent());

    drop(sessions);
    store.remove_structure("sessions").unwrap();
    assert_eq!(store.space(), empty, "removal gives every byte back");
}

#[test]
fn a_pool_of_another_layout_is_not_a_store() {
    let (_dir, path) = pool_path("pmem-store-test", "other.pool");
    drop(
        pmem_ordering::Pool::create(&path, "something-else", 1 << 20, &file_pool_options())
            .unwrap(),
    );
    let err = Store::open_with(&path, &options()).err().unwrap();
    assert!(matches!(err, Error::NotAStore { .. }), "{err}");
    assert!(format!("{err:?}").contains("not a store"), "{err:?}");
}

#[test]
fn handles_work_from_spawned_threads() {
    let store = Store::anonymous(SIZE, &options()).unwrap();
    let map = store.hash_map::<u64, u64>("m").unwrap();
    let tree = store.btree_map::<u64, u64>("t").unwrap();
    drop(store);
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let (map, tree) = (map.clone(), tree.clone());
            std::thread::spawn(move || {
                for k in (t..10_000).step_by(2) {
                    map.insert(k, k * 2).unwrap();
                    tree.insert(k, k * 2).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let model: Model<u64, u64> = (0..10_000).map(|k| (k, k * 2)).collect();
    assert_eq!(
        tree.iter().collect::<Result<Model<_, _>, _>>().unwrap(),
        model
    );
    assert_eq!(
        map.iter().collect::<Result<Model<_, _>, _>>().unwrap(),
        model
    );
}

/// The store's heap, to read its allocator and to damage its bytes on purpose.
fn engine(store: &Store) -> &Heap {
    // SAFETY: the test runs on one thread, so no handle of the store is in use while the heap
    // or its pool is written.
    unsafe { store.raw_heap() }
}
