//! Handles that own a clone of their heap: each structure is `Send + Sync +
//! 'static`, so an `Arc` of it goes to `std::thread::spawn` threads, and they really work there.

use std::sync::Arc;
use std::thread;

use pmem_ordering::Hardware;
use pmem_structures::raw::cceh::{Cceh, CcehConfig};
use pmem_structures::raw::datalog::{Datalog, DatalogConfig, Policy};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig};
use pmem_test_kit::fixture::anonymous_heap;
use pmem_undo_log::Heap;

type OwnedCceh = Cceh<Hardware>;
type OwnedFastFair = FastFair<Hardware>;
type OwnedDatalog = Datalog<Hardware>;

/// Compiles only for types a spawned thread may own.
fn assert_send_sync_static<T: Send + Sync + 'static>() {}

#[test]
fn owned_handles_are_send_sync_and_static() {
    assert_send_sync_static::<Arc<OwnedCceh>>();
    assert_send_sync_static::<Arc<OwnedFastFair>>();
    assert_send_sync_static::<Arc<OwnedDatalog>>();
}

fn shared_heap(layout: &str) -> Heap {
    anonymous_heap(layout, 16 << 20)
}

/// Keys `1..=2000` split between two spawned threads: odd keys to one, even to the other.
const KEYS: u64 = 2000;

/// Runs `insert(key, value)` for every key from two `std::thread::spawn` threads (odd and
/// even keys), each owning a clone of `handle`.
fn insert_from_two_threads<T: Send + Sync + 'static>(
    handle: &Arc<T>,
    insert: fn(&T, u64, u64) -> bool,
) {
    let threads: Vec<_> = [1u64, 2]
        .into_iter()
        .map(|first| {
            let handle = Arc::clone(handle);
            thread::spawn(move || {
                for key in (first..=KEYS).step_by(2) {
                    assert!(insert(&handle, key, key * 10), "key {key} was new");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("an inserting thread panicked");
    }
}

#[test]
fn a_cceh_table_over_a_shared_heap_takes_inserts_from_spawned_threads() {
    let heap = shared_heap("owned-cceh");
    let root = heap.pool().root_offset();
    let config = CcehConfig {
        buckets_per_segment: 4,
    };
    let table: Arc<OwnedCceh> = Arc::new(Cceh::create(&heap, root, config).unwrap());
    insert_from_two_threads(&table, |t, k, v| t.insert(k, v).unwrap());
    assert_eq!(table.len(), KEYS);
    for key in 1..=KEYS {
        assert_eq!(table.get(key).unwrap(), Some(key * 10), "key {key}");
    }
    assert!(
        table.global_depth().unwrap() > 0,
        "the inserts split segments"
    );
    assert!(std::ptr::eq(table.heap().pool(), heap.pool()));
}

#[test]
fn a_fastfair_tree_over_a_shared_heap_takes_inserts_from_spawned_threads() {
    let heap = shared_heap("owned-fastfair");
    let root = heap.pool().root_offset();
    let config = FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    };
    let tree: Arc<OwnedFastFair> = Arc::new(FastFair::create(&heap, root, config).unwrap());
    insert_from_two_threads(&tree, |t, k, v| t.insert(k, v).unwrap());
    assert_eq!(tree.len(), KEYS);
    let pairs: Vec<(u64, u64)> = tree.range(..).map(Result::unwrap).collect();
    let expected: Vec<(u64, u64)> = (1..=KEYS).map(|k| (k, k * 10)).collect();
    assert_eq!(pairs, expected);
    assert!(tree.height().unwrap() > 1, "the inserts split leaves");
    assert!(std::ptr::eq(tree.heap().pool(), heap.pool()));
}

#[test]
fn a_datalog_store_over_a_shared_heap_takes_writes_from_spawned_threads() {
    let heap = shared_heap("owned-datalog");
    let root = heap.pool().root_offset();
    let store: Arc<OwnedDatalog> = Arc::new(
        Datalog::create(
            &heap,
            root,
            DatalogConfig {
                max_files: 4,
                policy: Policy::default(),
            },
        )
        .unwrap(),
    );
    let threads: Vec<_> = ["odd", "even"]
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                let file = store.create_file(name).unwrap();
                for block in 0..64u64 {
                    let byte = (2 * block + i as u64) as u8;
                    store.write_at(file, block * 64, &[byte; 64]).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a writing thread panicked");
    }
    for (i, name) in ["odd", "even"].into_iter().enumerate() {
        let file = store.open_file(name).unwrap();
        let mut contents = vec![0u8; 64 * 64];
        assert_eq!(
            store.read_at(file, 0, &mut contents).unwrap(),
            contents.len()
        );
        for (block, chunk) in contents.chunks(64).enumerate() {
            let byte = (2 * block + i) as u8;
            assert!(chunk.iter().all(|&b| b == byte), "{name} block {block}");
        }
    }
    assert!(std::ptr::eq(store.heap().pool(), heap.pool()));
}
