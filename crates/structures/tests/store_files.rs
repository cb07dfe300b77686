//! What `Store::create`, `open` and `open_or_create` do with the file at a path: a damaged
//! catalog or heap is refused with a typed error and the file is left byte for byte as it was
//! (an open never formats over what it cannot read); a refused create leaves no file behind; a
//! file that provably never finished creation (every byte past its header zero) is made into a
//! store by `open_or_create` only.

use std::os::unix::fs::FileExt;
use std::path::Path;

use pmem_ordering::{Granularity, Pool, PoolError};
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::fixture::pool_path;

const SIZE: u64 = 8 << 20;

fn options() -> StoreOptions {
    StoreOptions::new().granularity(Granularity::Emulated)
}

/// A store at `path` holding a byte-key map and a `u64` map with a few pairs each.
fn make_store(path: &Path) {
    let store = Store::create(path, SIZE, &options()).expect("create the store");
    let users = store.hash_map::<String, Vec<u8>>("users").unwrap();
    let counts = store.hash_map::<u64, u64>("counts").unwrap();
    for i in 0..50u64 {
        users
            .insert(format!("user-{i}"), vec![i as u8; 40])
            .unwrap();
        counts.insert(i, i * 3).unwrap();
    }
}

/// Zero `len` bytes of the file at `path` from `offset` on.
fn zero(path: &Path, offset: u64, len: usize) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(&vec![0u8; len], offset).unwrap();
}

/// A heap whose superblock reads all zero while the file holds data past the header: damage
/// (or an earlier build's interrupted creation), not a file to format.
fn damaged_heap(e: &Error) -> bool {
    matches!(e, Error::Heap(_)) && e.to_string().contains("damaged")
}

/// Every open of the damaged file at `path` fails with an error `expected` accepts, and
/// leaves the file byte for byte as it was.
fn refused_without_a_write(path: &Path, expected: impl Fn(&Error) -> bool) {
    let before = std::fs::read(path).unwrap();
    let opened = Store::open_with(path, &options());
    let err = opened.err().expect("the damaged store was opened");
    assert!(expected(&err), "open: {err}");
    assert!(
        std::fs::read(path).unwrap() == before,
        "the refused open wrote into the file"
    );
    let err = Store::open_or_create(path, SIZE, &options())
        .err()
        .expect("open_or_create took the damaged store");
    assert!(expected(&err), "open_or_create: {err}");
    assert!(
        std::fs::read(path).unwrap() == before,
        "the refused open_or_create wrote into the file"
    );
}

#[test]
fn a_zeroed_catalog_page_is_refused_and_the_file_left_as_it_was() {
    let (_dir, path) = pool_path("pmem-store-files", "catalog.pool");
    make_store(&path);
    let header = Pool::inspect(&path, Some(STORE_LAYOUT)).unwrap();
    zero(&path, header.root_offset, 4096);
    refused_without_a_write(
        &path,
        |e| matches!(e, Error::CorruptCatalog { reason } if reason.contains("all zero")),
    );
}

#[test]
fn a_zeroed_heap_superblock_is_refused_as_damage_and_the_file_left_as_it_was() {
    let (_dir, path) = pool_path("pmem-store-files", "superblock.pool");
    make_store(&path);
    let header = Pool::inspect(&path, Some(STORE_LAYOUT)).unwrap();
    zero(&path, header.heap_offset, 128);
    refused_without_a_write(&path, damaged_heap);
}

#[test]
fn a_catalog_with_a_damaged_header_is_refused_and_the_file_left_as_it_was() {
    let (_dir, path) = pool_path("pmem-store-files", "magic.pool");
    make_store(&path);
    let header = Pool::inspect(&path, Some(STORE_LAYOUT)).unwrap();
    // Only the catalog's magic word zeroed: the rest of its page still names the maps.
    zero(&path, header.root_offset, 8);
    refused_without_a_write(&path, |e| matches!(e, Error::CorruptCatalog { .. }));
}

#[test]
fn a_refused_create_leaves_no_file_and_open_or_create_then_makes_the_store() {
    let (dir, path) = pool_path("pmem-store-files", "small.pool");
    // Room for the header and the catalog, not for the heap's lanes and one chunk.
    let refused = Store::create(&path, 256 << 10, &options());
    assert!(refused.is_err(), "a 256 KiB store was made");
    assert!(!path.exists(), "the refused create left {}", path.display());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the refused create left {left:?}");
    let refused = Store::open_or_create(&path, 256 << 10, &options());
    assert!(refused.is_err());
    assert!(!path.exists(), "the refused open_or_create left a file");
    let store = Store::open_or_create(&path, SIZE, &options()).expect("open_or_create");
    store
        .hash_map::<u64, u64>("m")
        .unwrap()
        .insert(1, 2)
        .unwrap();
    drop(store);
    let store = Store::open_with(&path, &options()).unwrap();
    assert_eq!(
        store.hash_map::<u64, u64>("m").unwrap().get(1).unwrap(),
        Some(2)
    );
}

/// What an earlier build's refused create left: a pool header of a store, all zero after it.
fn unfinished_file(path: &Path) {
    let pool = Pool::create(
        path,
        STORE_LAYOUT,
        SIZE,
        &pmem_ordering::PoolOptions::new()
            .granularity(Granularity::Emulated)
            .root_size(64 + 64 * 128),
    )
    .unwrap();
    drop(pool);
}

#[test]
fn a_file_that_never_finished_creation_is_refused_by_open_and_remade_by_open_or_create() {
    let (_dir, path) = pool_path("pmem-store-files", "unfinished.pool");
    unfinished_file(&path);
    let before = std::fs::read(&path).unwrap();
    let err = Store::open_with(&path, &options()).err().expect("opened");
    assert!(matches!(err, Error::Incomplete { .. }), "{err}");
    assert!(std::fs::read(&path).unwrap() == before, "open wrote");
    let store = Store::open_or_create(&path, SIZE, &options()).expect("remade");
    store
        .hash_map::<u64, u64>("m")
        .unwrap()
        .insert(7, 8)
        .unwrap();
    drop(store);
    let store = Store::open_with(&path, &options()).unwrap();
    assert_eq!(store.names(), ["m"]);
}

#[test]
fn an_empty_file_is_remade_by_open_or_create_and_refused_by_open() {
    let (_dir, path) = pool_path("pmem-store-files", "empty.pool");
    std::fs::File::create(&path).unwrap();
    let err = Store::open_with(&path, &options()).err().expect("opened");
    assert!(
        matches!(err, Error::Pool(PoolError::TooShort { len: 0, .. })),
        "{err}"
    );
    let store = Store::open_or_create(&path, SIZE, &options()).expect("remade");
    assert!(store.names().is_empty());
    drop(store);
    Store::open_with(&path, &options()).expect("the remade store opens");
}

#[test]
fn a_file_with_one_byte_past_its_header_is_not_taken_for_unfinished() {
    let (_dir, path) = pool_path("pmem-store-files", "one-byte.pool");
    unfinished_file(&path);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&[1], SIZE - 1).unwrap();
    drop(file);
    // Not provably unfinished: refused as damage by both, and left as it was.
    refused_without_a_write(&path, damaged_heap);
}
