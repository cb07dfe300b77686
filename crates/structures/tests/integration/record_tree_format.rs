//! The ordered byte-key map's on-media formats: a store written by the build before path
//! compression (format 2, the golden file `data/record_tree_v2.pool`) opens with every pair,
//! is upgraded to format 3 and takes compressed layers from then on; a format this build does
//! not know is refused with a typed error naming both versions, and nothing is written.

use pmem_undo_log::Heap;
use std::collections::BTreeMap as Model;
use std::path::{Path, PathBuf};

use pmem_ordering::Granularity;
use pmem_structures::{Error, Store, StoreOptions};

/// The golden file: a 512 KiB store holding one ordered byte-key map, "tree", made by the
/// format 2 build with 128-byte nodes.
const GOLDEN: &str = "tests/data/record_tree_v2.pool";

/// What the golden file's map holds: 40 keys sharing 13 bytes (one layer) with every fifth
/// removed, a short key, the empty key, and two keys sharing 40 bytes (six plain layers).
fn golden_model() -> Model<Vec<u8>, Vec<u8>> {
    let mut model = Model::new();
    for i in (0..40u32).filter(|i| i % 5 != 0) {
        let key = format!("tenant1:user:{i:04}").into_bytes();
        model.insert(key, format!("value {i}").into_bytes());
    }
    model.insert(b"a".to_vec(), b"short".to_vec());
    model.insert(Vec::new(), b"empty".to_vec());
    model.insert([vec![b'x'; 40], b"a".to_vec()].concat(), b"la".to_vec());
    model.insert([vec![b'x'; 40], b"b".to_vec()].concat(), b"lb".to_vec());
    model
}

/// A copy of the golden file under a fresh temporary path.
fn golden_copy(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pmem-record-format-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    std::fs::copy(source, &path).expect("copy the golden file");
    path
}

fn open(path: &Path) -> Result<Store, Error> {
    Store::open_with(
        path,
        &StoreOptions::new().granularity(Granularity::Emulated),
    )
}

fn contents(store: &Store) -> Model<Vec<u8>, Vec<u8>> {
    let tree = store.btree_map::<Vec<u8>, Vec<u8>>("tree").unwrap();
    tree.iter().collect::<Result<_, _>>().unwrap()
}

/// The format version word of the map "tree" (its root block's second word).
fn version_word(store: &Store) -> u64 {
    let root = tree_root(store).expect("the tree's root");
    engine(store).pool().load_u64(root + 8).unwrap()
}

/// The root block of "tree": the block of the store's whose first word is the map's magic.
fn tree_root(store: &Store) -> Option<u64> {
    let (_, blocks) = store
        .owned_blocks()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == "tree")?;
    let magic = pmem_structures::StructureKind::RecordBTreeMap.magic();
    let pool = engine(store).pool();
    blocks
        .into_iter()
        .find(|&b| pool.load_u64(b).ok() == Some(magic))
}

#[test]
fn a_format_2_map_opens_with_every_pair_and_is_upgraded() {
    let path = golden_copy("v2.pool");
    let store = open(&path).expect("a format 2 store opens");
    assert_eq!(contents(&store), golden_model());
    assert_eq!(version_word(&store), 3, "upgraded at open");
    assert!(store.verify().is_healthy(), "{:?}", store.verify());
    store.check_blocks().unwrap();
    // Compressed layers from now on: keys sharing 300 bytes, one leaving the run half way.
    let tree = store.btree_map::<Vec<u8>, Vec<u8>>("tree").unwrap();
    let mut model = golden_model();
    for tail in [&b"1"[..], b"2"] {
        let key = [vec![b'y'; 300], tail.to_vec()].concat();
        tree.insert(&key, tail).unwrap();
        model.insert(key, tail.to_vec());
    }
    let left = [vec![b'y'; 150], b"left".to_vec()].concat();
    tree.insert(&left, b"left").unwrap();
    model.insert(left, b"left".to_vec());
    for i in (0..40u32).filter(|i| i % 5 != 0) {
        let key = format!("tenant1:user:{i:04}").into_bytes();
        assert_eq!(tree.remove(&key).unwrap(), model.remove(&key));
    }
    drop(tree);
    drop(store);
    let store = open(&path).unwrap();
    assert_eq!(contents(&store), model);
    assert!(store.verify().is_healthy(), "{:?}", store.verify());
    store.check_blocks().unwrap();
    drop(store);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn an_unknown_format_is_refused_and_left_as_it_was() {
    let path = golden_copy("v9.pool");
    {
        let store = open(&path).unwrap();
        let root = tree_root(&store).unwrap();
        let pool = engine(&store).pool();
        let w = pool.store_u64(root + 8, 9).unwrap();
        pool.persist(w);
    }
    let before = std::fs::read(&path).unwrap();
    let refused = open(&path).and_then(|s| s.btree_map::<Vec<u8>, Vec<u8>>("tree").map(drop));
    let message = refused.expect_err("format 9 refused").to_string();
    assert!(
        message.contains("format version 9") && message.contains("reads 3"),
        "{message}"
    );
    let after = std::fs::read(&path).unwrap();
    assert!(before == after, "the refused open wrote to the file");
    let _ = std::fs::remove_file(&path);
}

/// The store's heap, to read its allocator and to damage its bytes on purpose.
fn engine(store: &Store) -> &Heap {
    // SAFETY: the test runs on one thread, so no handle of the store is in use while the heap
    // or its pool is written.
    unsafe { store.raw_heap() }
}
