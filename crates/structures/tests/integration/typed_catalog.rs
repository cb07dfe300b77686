//! The types the catalog records for a map: plain-data types of one size told apart by their
//! `PodValue::NAME` (a fingerprint of the types in the entry, catalog format 2), and catalogs
//! of format 1, made before fingerprints: opened, each map's types taken from its first open
//! and recorded then, the catalog made version 2 in the same transaction.

use std::os::unix::fs::FileExt;
use std::path::Path;

use pmem_ordering::{Granularity, Pool};
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::types::{Pod, PodValue};
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::fixture::pool_path;

fn options() -> StoreOptions {
    StoreOptions::new().granularity(Granularity::Emulated)
}

const SIZE: u64 = 8 << 20;

/// Two plain-data types of one size (8 bytes: inline in the `u64` maps) and two of another
/// (16 bytes: in records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct Celsius(u64);
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct Fahrenheit(u64);
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct Span {
    start: u64,
    end: u64,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct Pair {
    left: u64,
    right: u64,
}

macro_rules! plain_data {
    ($($t:ty => $name:expr),*) => {$(
        // SAFETY: `u64` fields only, `repr(C)`, no padding: every bit pattern is a value, and
        // all-zero bytes are one.
        unsafe impl bytemuck::Zeroable for $t {}
        // SAFETY: as above; `Copy` and `'static`.
        unsafe impl bytemuck::Pod for $t {}
        impl PodValue for $t {
            const NAME: &'static str = $name;
        }
    )*};
}

plain_data!(
    Celsius => "weather::Celsius",
    Fahrenheit => "weather::Fahrenheit",
    Span => "calendar::Span",
    Pair => "calendar::Pair"
);

fn is_type_mismatch(e: &Error) -> bool {
    matches!(e, Error::TypeMismatch { .. }) && e.to_string().contains("PodValue::NAME")
}

#[test]
fn a_map_of_one_plain_data_type_refuses_another_of_the_same_size() {
    let (_dir, path) = pool_path("pmem-typed-catalog", "pod.pool");
    {
        let store = Store::create(&path, SIZE, &options()).unwrap();
        let inline = store.hash_map::<u64, Pod<Celsius>>("inline").unwrap();
        inline.insert(1u64, Pod(Celsius(21))).unwrap();
        let records = store.btree_map::<Pod<Span>, u64>("records").unwrap();
        records
            .insert(Pod(Span { start: 1, end: 2 }), 3u64)
            .unwrap();
        // Refused in the session that made them...
        let e = store.hash_map::<u64, Pod<Fahrenheit>>("inline").map(drop);
        assert!(e.as_ref().is_err_and(is_type_mismatch), "{e:?}");
    }
    // ... and after a reopen, for keys and values, inline and in records.
    let store = Store::open_with(&path, &options()).unwrap();
    let e = store.hash_map::<u64, Pod<Fahrenheit>>("inline").map(drop);
    assert!(e.as_ref().is_err_and(is_type_mismatch), "{e:?}");
    let e = store.btree_map::<Pod<Pair>, u64>("records").map(drop);
    assert!(e.as_ref().is_err_and(is_type_mismatch), "{e:?}");
    // The types they were made with still open them.
    let inline = store.hash_map::<u64, Pod<Celsius>>("inline").unwrap();
    assert_eq!(inline.get(1u64).unwrap(), Some(Pod(Celsius(21))));
    let records = store.btree_map::<Pod<Span>, u64>("records").unwrap();
    assert_eq!(
        records.get(Pod(Span { start: 1, end: 2 })).unwrap(),
        Some(3)
    );
    assert!(store.verify().is_healthy());
}

/// Where the catalog is in the file, and its format: the pool's root object holds it; header
/// words magic, version, capacity; 128-byte entries from byte 64, each starting with its kind
/// word (version 2: the types' fingerprint in bits 32..64).
struct CatalogBytes {
    file: std::fs::File,
    base: u64,
}

impl CatalogBytes {
    fn of(path: &Path) -> CatalogBytes {
        let header = Pool::inspect(path, Some(STORE_LAYOUT)).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        CatalogBytes {
            file,
            base: header.root_offset,
        }
    }
    fn word(&self, at: u64) -> u64 {
        let mut b = [0u8; 8];
        self.file.read_exact_at(&mut b, self.base + at).unwrap();
        u64::from_le_bytes(b)
    }
    fn set(&self, at: u64, value: u64) {
        self.file
            .write_all_at(&value.to_le_bytes(), self.base + at)
            .unwrap();
    }
    fn version(&self) -> u64 {
        self.word(8)
    }
    fn kind_word(&self, slot: u64) -> u64 {
        self.word(64 + slot * 128)
    }
    /// Make the catalog what a build before fingerprints wrote: version 1, and no
    /// fingerprint in any entry.
    fn make_version_1(&self) {
        self.set(8, 1);
        for slot in 0..self.word(16) {
            let kind = self.kind_word(slot);
            self.set(64 + slot * 128, kind & 0xffff_ffff);
        }
    }
}

#[test]
fn a_catalog_of_format_1_opens_and_records_each_maps_types_at_its_first_open() {
    let (_dir, path) = pool_path("pmem-typed-catalog", "v1.pool");
    {
        let store = Store::create(&path, SIZE, &options()).unwrap();
        let temps = store.hash_map::<u64, Pod<Celsius>>("temps").unwrap();
        temps.insert(1u64, Pod(Celsius(21))).unwrap();
        store.hash_map::<String, u64>("names").unwrap();
    }
    let catalog = CatalogBytes::of(&path);
    assert_eq!(catalog.version(), 2, "a new store's catalog");
    assert_ne!(catalog.kind_word(0) >> 32, 0, "a new entry's fingerprint");
    catalog.make_version_1();
    drop(catalog);
    let before = std::fs::read(&path).unwrap();
    {
        // Opening the store writes nothing: the fingerprints are unknown until a map opens.
        let store = Store::open_with(&path, &options()).unwrap();
        assert_eq!(store.names(), ["names", "temps"]);
        assert!(store.verify().is_healthy(), "{}", store.verify());
        drop(store);
        assert!(std::fs::read(&path).unwrap() == before, "the open wrote");
        let store = Store::open_with(&path, &options()).unwrap();
        // The first open of an entry without a fingerprint is taken at its codes' word
        // (another plain-data type of the size would have been taken too) and recorded.
        let temps = store.hash_map::<u64, Pod<Celsius>>("temps").unwrap();
        assert_eq!(temps.get(1u64).unwrap(), Some(Pod(Celsius(21))));
        let e = store.hash_map::<u64, Pod<Fahrenheit>>("temps").map(drop);
        assert!(e.as_ref().is_err_and(is_type_mismatch), "{e:?}");
        assert!(store.verify().is_healthy(), "{}", store.verify());
    }
    let catalog = CatalogBytes::of(&path);
    assert_eq!(
        catalog.version(),
        2,
        "recording a fingerprint upgrades the catalog"
    );
    assert_ne!(catalog.kind_word(0) >> 32, 0, "the recorded fingerprint");
    assert_eq!(catalog.kind_word(1) >> 32, 0, "a map not opened yet");
    drop(catalog);
    let store = Store::open_with(&path, &options()).unwrap();
    let e = store.hash_map::<u64, Pod<Fahrenheit>>("temps").map(drop);
    assert!(e.as_ref().is_err_and(is_type_mismatch), "{e:?}");
    // The map not opened before: its codes still refuse other types, and its first open
    // records its fingerprint.
    let e = store.hash_map::<u64, u64>("names").map(drop);
    assert!(matches!(e, Err(Error::TypeMismatch { .. })), "{e:?}");
    store.hash_map::<String, u64>("names").unwrap();
    assert!(store.verify().is_healthy(), "{}", store.verify());
}

#[test]
fn a_catalog_of_format_1_takes_a_new_map_and_becomes_format_2() {
    let (_dir, path) = pool_path("pmem-typed-catalog", "v1-add.pool");
    drop(Store::create(&path, SIZE, &options()).unwrap());
    CatalogBytes::of(&path).make_version_1();
    {
        let store = Store::open_with(&path, &options()).unwrap();
        store.hash_map::<u64, Pod<Celsius>>("temps").unwrap();
    }
    let catalog = CatalogBytes::of(&path);
    assert_eq!(catalog.version(), 2);
    assert_ne!(catalog.kind_word(0) >> 32, 0);
}

#[test]
fn a_catalog_of_an_unknown_format_is_refused_by_name() {
    let (_dir, path) = pool_path("pmem-typed-catalog", "v3.pool");
    drop(Store::create(&path, SIZE, &options()).unwrap());
    CatalogBytes::of(&path).set(8, 3);
    let before = std::fs::read(&path).unwrap();
    let e = Store::open_with(&path, &options()).err().expect("opened");
    assert!(
        matches!(&e, Error::CorruptCatalog { reason } if reason.contains("version 3")),
        "{e}"
    );
    assert!(std::fs::read(&path).unwrap() == before);
}

#[test]
fn a_fingerprint_in_a_format_1_entry_is_refused_as_damage() {
    let (_dir, path) = pool_path("pmem-typed-catalog", "v1-damaged.pool");
    {
        let store = Store::create(&path, SIZE, &options()).unwrap();
        store.hash_map::<u64, u64>("m").unwrap();
    }
    // Version 1 with the version 2 entry left as it is.
    CatalogBytes::of(&path).set(8, 1);
    let e = Store::open_with(&path, &options()).err().expect("opened");
    assert!(
        matches!(&e, Error::CorruptCatalog { reason } if reason.contains("fingerprint")),
        "{e}"
    );
}
