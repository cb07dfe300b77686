//! A flipped bit in the key-length or value-length field of a record's header, in both
//! byte-key maps: whatever the flip makes of the lengths (possible or not), every read of the
//! key's value (a scan, owned or borrowed, included) reports the damage instead of serving
//! "absent" or other bytes, no call takes the key for absent, no write adds a second entry for
//! it, the other keys still read, and `verify()` finds the record.

use std::ops::ControlFlow;
use std::os::unix::fs::FileExt;
use std::path::Path;

use pmem_ordering::Granularity;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::fixture::pool_path;

const SIZE: u64 = 8 << 20;
const NAME: &str = "subject";

fn options() -> StoreOptions {
    StoreOptions::new().granularity(Granularity::Emulated)
}

type Pair = (Vec<u8>, Vec<u8>);

#[derive(Clone, Copy, Debug)]
enum Kind {
    Hash,
    Tree,
}

/// A handle on either map, with the calls the test makes.
enum Map {
    Hash(pmem_structures::HashMap<Vec<u8>, Vec<u8>>),
    Tree(pmem_structures::BTreeMap<Vec<u8>, Vec<u8>>),
}

impl Map {
    fn of(store: &Store, kind: Kind) -> Map {
        match kind {
            Kind::Hash => Map::Hash(store.hash_map(NAME).unwrap()),
            Kind::Tree => Map::Tree(store.btree_map(NAME).unwrap()),
        }
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match self {
            Map::Hash(m) => m.get(key),
            Map::Tree(m) => m.get(key),
        }
    }
    fn contains_key(&self, key: &[u8]) -> Result<bool, Error> {
        match self {
            Map::Hash(m) => m.contains_key(key),
            Map::Tree(m) => m.contains_key(key),
        }
    }
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        match self {
            Map::Hash(m) => m.insert(key, value),
            Map::Tree(m) => m.insert(key, value),
        }
    }
    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match self {
            Map::Hash(m) => m.upsert(key, value),
            Map::Tree(m) => m.upsert(key, value),
        }
    }
    fn remove(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match self {
            Map::Hash(m) => m.remove(key),
            Map::Tree(m) => m.remove(key),
        }
    }
    fn len(&self) -> u64 {
        match self {
            Map::Hash(m) => m.len(),
            Map::Tree(m) => m.len(),
        }
    }
    fn all(&self) -> Vec<Result<Pair, Error>> {
        match self {
            Map::Hash(m) => m.iter().collect(),
            Map::Tree(m) => m.iter().collect(),
        }
    }
}

fn keys() -> Vec<Vec<u8>> {
    // Short keys end in layer 0's slice; long ones go on past it (the ordered map then tells
    // keys apart by their records).
    let mut keys: Vec<Vec<u8>> = (0..20).map(|i| format!("k{i}").into_bytes()).collect();
    keys.extend((0..20).map(|i| format!("customer:{i:04}").into_bytes()));
    keys
}

fn value(key: &[u8]) -> Vec<u8> {
    key.iter().rev().copied().chain(*b"-value").collect()
}

/// A store file at `path` with the map of `kind` holding [`keys`]; the record offset of
/// `damaged` (the block of the map whose key bytes, after the 16-byte header, are it).
fn make(path: &Path, kind: Kind, damaged: &[u8]) -> u64 {
    let store = Store::create(path, SIZE, &options()).unwrap();
    let map = Map::of(&store, kind);
    for key in keys() {
        assert!(map.insert(&key, &value(&key)).unwrap());
    }
    let blocks = store.owned_blocks().unwrap();
    drop(map);
    drop(store);
    let file = std::fs::File::open(path).unwrap();
    let is_record = |block: u64| {
        let mut bytes = vec![0u8; 16 + damaged.len()];
        file.read_exact_at(&mut bytes, block).unwrap();
        let word = u64::from_le_bytes(bytes[0..8].try_into().unwrap());
        word >> 40 == damaged.len() as u64 && bytes[16..] == *damaged
    };
    let found: Vec<u64> = blocks[0]
        .1
        .iter()
        .copied()
        .filter(|&b| is_record(b))
        .collect();
    assert_eq!(found.len(), 1, "the record of {damaged:?}: {found:?}");
    found[0]
}

/// Every call on `key` in the map of `kind`, opened from `path`, reports damage; nothing
/// adds a second entry; the other keys read back.
fn check_damaged(path: &Path, kind: Kind, key: &[u8], bit: u64) {
    let store = Store::open_with(path, &options())
        .unwrap_or_else(|e| panic!("{kind:?}, bit {bit}: the store does not open: {e}"));
    let map = Map::of(&store, kind);
    let what = format!(
        "{kind:?}, length bit {bit}, key {:?}",
        String::from_utf8_lossy(key)
    );
    let len = map.len();
    match map.get(key) {
        Err(_) => {}
        Ok(found) => panic!("{what}: get served {found:?}"),
    }
    // A call that reads the key's bytes and not the value (`contains_key`, the insert of a
    // present key) checks the whole record when the key read differs, so a key-length flip
    // is an error; a value-length flip leaves the key matching, and the value unread.
    let key_length = bit < 64;
    match map.contains_key(key) {
        Err(_) => {}
        Ok(true) if !key_length => {}
        other => panic!("{what}: contains_key gave {other:?}"),
    }
    match map.insert(key, b"again") {
        Err(_) => {}
        Ok(false) if !key_length => {}
        other => panic!("{what}: insert gave {other:?}"),
    }
    assert_eq!(map.len(), len, "{what}: the refused insert counted");
    assert!(map.upsert(key, b"again").is_err(), "{what}: upsert");
    assert!(map.remove(key).is_err(), "{what}: remove");
    assert_eq!(map.len(), len, "{what}: a refused write changed the count");
    assert!(
        map.all().iter().any(Result::is_err),
        "{what}: a full iteration reported nothing"
    );
    if let Map::Tree(tree) = &map {
        let walk = tree.iter_with(|_, _| ControlFlow::<()>::Continue(()));
        assert!(walk.is_err(), "{what}: the borrowed walk reported nothing");
    }
    for other in keys().into_iter().filter(|k| k != key) {
        assert_eq!(
            map.get(&other).unwrap(),
            Some(value(&other)),
            "{what}: another key"
        );
    }
    assert!(
        !store.verify().is_healthy(),
        "{what}: verify() found nothing"
    );
}

fn every_length_bit(kind: Kind, key: &[u8]) {
    let (_dir, path) = pool_path("pmem-record-header", "healthy.pool");
    let record = make(&path, kind, key);
    let healthy = std::fs::read(&path).unwrap();
    let copy = path.with_file_name("damaged.pool");
    // The key length is bits 40..64 of the first word; the value length the next 4 bytes.
    for bit in (40..64).chain(64..96) {
        let mut bytes = healthy.clone();
        let at = (record + bit / 8) as usize;
        bytes[at] ^= 1 << (bit % 8);
        std::fs::write(&copy, &bytes).unwrap();
        check_damaged(&copy, kind, key, bit);
    }
}

#[test]
fn a_flipped_length_bit_in_a_hash_record_is_never_served_as_absent() {
    every_length_bit(Kind::Hash, b"k7");
    every_length_bit(Kind::Hash, b"customer:0007");
}

#[test]
fn a_flipped_length_bit_in_an_ordered_record_is_never_served_as_absent() {
    every_length_bit(Kind::Tree, b"k7");
    every_length_bit(Kind::Tree, b"customer:0007");
}

/// The offsets of the 8-byte-aligned pairs of words `(first, second)` in `bytes`.
fn find_pair(bytes: &[u8], first: u64, second: u64) -> Vec<usize> {
    let mut pattern = first.to_le_bytes().to_vec();
    pattern.extend_from_slice(&second.to_le_bytes());
    (0..bytes.len() - 16)
        .step_by(8)
        .filter(|&at| bytes[at..at + 16] == pattern[..])
        .collect()
}

#[test]
fn a_hash_slot_naming_another_keys_record_is_reported_not_served_as_absent() {
    use pmem_structures::raw::records::hash::key_word;
    let (_dir, path) = pool_path("pmem-record-header", "slot.pool");
    let (key, other) = (b"customer:0007".as_slice(), b"customer:0008".as_slice());
    let record = make(&path, Kind::Hash, key);
    // The same store made again (same writes, same allocations): the other key's record.
    let other_record = make(&path.with_file_name("probe.pool"), Kind::Hash, other);
    let mut bytes = std::fs::read(&path).unwrap();
    let slots = find_pair(&bytes, key_word(key), record);
    assert_eq!(slots.len(), 1, "the key's slot: {slots:?}");
    // The slot's value word now names another key's (whole) record.
    bytes[slots[0] + 8..slots[0] + 16].copy_from_slice(&other_record.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let store = Store::open_with(&path, &options()).unwrap();
    let map = Map::of(&store, Kind::Hash);
    let what = "a slot naming another key's record";
    match map.get(key) {
        Err(e) => assert!(e.to_string().contains("slot is damaged"), "{what}: {e}"),
        Ok(found) => panic!("{what}: get served {found:?}"),
    }
    assert!(map.contains_key(key).is_err(), "{what}: contains_key");
    let len = map.len();
    assert!(map.insert(key, b"again").is_err(), "{what}: insert");
    assert!(map.remove(key).is_err(), "{what}: remove");
    assert_eq!(map.len(), len);
    assert!(map.all().iter().any(Result::is_err), "{what}: iteration");
    assert!(!store.verify().is_healthy(), "{what}: verify");
}
