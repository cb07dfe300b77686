//! The maps of the byte-key section: which maps are measured ([`MapConfig`], [`CONFIGS`]),
//! each a fresh store in its own pool file ([`with_map`]) holding one map, driven by record
//! number through [`BenchMap`].

use pmem_structures::{BTreeMap, CcehConfig, FastFairConfig, HashMap};
use serde::Serialize;

use super::keyset::{fill_value, record_of_tag, tag_matches, tag_of, KeyKind, Keys, BYTE_KEY_LEN};
use super::results::ByteKeyError;
use crate::poolfile::StoreFile;

/// The map's name in its store.
const MAP_NAME: &str = "bytekeys";

/// The byte that fills a value after its tag.
const VALUE_FILL: u8 = 0xA5;

/// Which of the store's maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MapKind {
    /// `Store::hash_map_with` (CCEH, default configuration).
    Hash,
    /// `Store::btree_map` (FAST&FAIR, default configuration: FAST shifts).
    Ordered,
}

impl MapKind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Hash => "hash map",
            MapKind::Ordered => "ordered map",
        }
    }
}

/// One map measured: its kind, its keys and its value size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MapConfig {
    /// Hash or ordered.
    pub map: MapKind,
    /// The keys.
    pub keys: KeyKind,
    /// Bytes of a value (8 for the `u64` path).
    pub value_bytes: usize,
}

impl MapConfig {
    /// Whether this is the `u64 -> u64` path the others are compared with.
    pub fn is_u64(&self) -> bool {
        self.keys == KeyKind::U64
    }

    /// `u64 -> u64`, `16 random bytes -> 100 B`.
    pub fn label(&self) -> String {
        if self.is_u64() {
            "u64 -> u64".to_string()
        } else {
            format!("{} -> {} B", self.keys.name(), self.value_bytes)
        }
    }

    /// Bytes of the store's pool for `records` records and at most `new_records` more written
    /// by updates: each record's block (its size class, a power of two) counted as if no
    /// retired record were ever reused, plus the index and a margin.
    pub fn pool_bytes(&self, records: u64, new_records: u64) -> u64 {
        const INDEX_BYTES_PER_KEY: u64 = 256;
        const MARGIN: u64 = 64 << 20;
        let block = if self.is_u64() {
            0
        } else {
            (12 + self.keys.key_bytes() as u64 + self.value_bytes as u64)
                .next_power_of_two()
                .max(64)
        };
        let bytes = (records + new_records) * block + records * INDEX_BYTES_PER_KEY + MARGIN;
        bytes.next_multiple_of(1 << 20)
    }
}

/// The maps measured, in report order: each kind's `u64` path first.
pub const CONFIGS: [MapConfig; 7] = [
    MapConfig {
        map: MapKind::Hash,
        keys: KeyKind::U64,
        value_bytes: 8,
    },
    MapConfig {
        map: MapKind::Hash,
        keys: KeyKind::Random16,
        value_bytes: 100,
    },
    MapConfig {
        map: MapKind::Hash,
        keys: KeyKind::Random16,
        value_bytes: 1024,
    },
    MapConfig {
        map: MapKind::Ordered,
        keys: KeyKind::U64,
        value_bytes: 8,
    },
    MapConfig {
        map: MapKind::Ordered,
        keys: KeyKind::Random16,
        value_bytes: 100,
    },
    MapConfig {
        map: MapKind::Ordered,
        keys: KeyKind::Random16,
        value_bytes: 1024,
    },
    MapConfig {
        map: MapKind::Ordered,
        keys: KeyKind::User,
        value_bytes: 100,
    },
];

/// A map driven by record number: keys and values are made from the record (see
/// [`super::keyset`]).
pub trait BenchMap {
    /// Insert record `record` at `version`: whether it was absent.
    fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError>;
    /// Read record `record`: whether it was found (its value checked).
    fn read(&mut self, record: usize) -> Result<bool, ByteKeyError>;
    /// Set record `record` to its value at `version`: whether a value was replaced.
    fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError>;
    /// Visit up to `len` pairs in key order from record `record`'s key (values checked): how
    /// many. Hash maps have no order and refuse.
    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError>;
}

/// A map of 16-byte keys and byte values.
struct BytesMap<M> {
    map: M,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    /// The value being written, refilled per call.
    value: Vec<u8>,
    value_bytes: usize,
}

impl<M> BytesMap<M> {
    fn check(&self, record: usize, value: &[u8]) -> Result<(), ByteKeyError> {
        match tag_of(value) {
            Some(tag) if value.len() == self.value_bytes && tag_matches(tag, record) => Ok(()),
            _ => Err(ByteKeyError::BadValue {
                record,
                len: value.len(),
            }),
        }
    }
}

/// A map of `u64` keys and values (the tags themselves).
struct WordsMap<M> {
    map: M,
    keys: Vec<u64>,
}

/// The point operations, the same calls on both kinds of handle.
macro_rules! bytes_point_operations {
    () => {
        fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
            fill_value(&mut self.value, record, version);
            Ok(self.map.insert(&self.keys[record], &self.value[..])?)
        }

        fn read(&mut self, record: usize) -> Result<bool, ByteKeyError> {
            match self.map.get(&self.keys[record])? {
                Some(value) => self.check(record, &value).map(|()| true),
                None => Ok(false),
            }
        }

        fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
            fill_value(&mut self.value, record, version);
            Ok(self
                .map
                .upsert(&self.keys[record], &self.value[..])?
                .is_some())
        }
    };
}

macro_rules! words_point_operations {
    () => {
        fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
            let value = super::keyset::value_tag(record, version);
            Ok(self.map.insert(self.keys[record], value)?)
        }

        fn read(&mut self, record: usize) -> Result<bool, ByteKeyError> {
            match self.map.get(self.keys[record])? {
                Some(tag) if tag_matches(tag, record) => Ok(true),
                Some(_) => Err(ByteKeyError::BadValue { record, len: 8 }),
                None => Ok(false),
            }
        }

        fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
            let value = super::keyset::value_tag(record, version);
            Ok(self.map.upsert(self.keys[record], value)?.is_some())
        }
    };
}

impl BenchMap for BytesMap<HashMap<Vec<u8>, Vec<u8>>> {
    bytes_point_operations!();

    fn scan(&mut self, _record: usize, _len: usize) -> Result<usize, ByteKeyError> {
        Err(ByteKeyError::NoScan)
    }
}

impl BenchMap for WordsMap<HashMap<u64, u64>> {
    words_point_operations!();

    fn scan(&mut self, _record: usize, _len: usize) -> Result<usize, ByteKeyError> {
        Err(ByteKeyError::NoScan)
    }
}

impl BenchMap for BytesMap<BTreeMap<Vec<u8>, Vec<u8>>> {
    bytes_point_operations!();

    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError> {
        let mut visited = 0;
        for pair in self.map.range(&self.keys[record][..]..).take(len) {
            let (_key, value) = pair?;
            // Which record a scanned key is would take a search per pair: the check is the
            // value's size and that its tag names some record.
            match tag_of(&value) {
                Some(tag)
                    if value.len() == self.value_bytes
                        && record_of_tag(tag) < self.keys.len() as u64 => {}
                _ => {
                    return Err(ByteKeyError::BadValue {
                        record,
                        len: value.len(),
                    })
                }
            }
            visited += 1;
        }
        Ok(visited)
    }
}

impl BenchMap for WordsMap<BTreeMap<u64, u64>> {
    words_point_operations!();

    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError> {
        let mut visited = 0;
        for pair in self.map.range(self.keys[record]..).take(len) {
            let (_key, tag) = pair?;
            if record_of_tag(tag) >= self.keys.len() as u64 {
                return Err(ByteKeyError::BadValue { record, len: 8 });
            }
            visited += 1;
        }
        Ok(visited)
    }
}

/// Make a fresh store in `file` holding one empty map of `config` over `keys`, and call `f`
/// on it.
pub fn with_map<R>(
    file: &StoreFile,
    config: MapConfig,
    keys: Keys,
    f: impl FnOnce(&mut dyn BenchMap) -> Result<R, ByteKeyError>,
) -> Result<R, ByteKeyError> {
    let store = file.store();
    let value = vec![VALUE_FILL; config.value_bytes];
    match (config.map, keys) {
        (MapKind::Hash, Keys::Words(keys)) => f(&mut WordsMap {
            map: store.hash_map_with::<u64, u64>(MAP_NAME, CcehConfig::default())?,
            keys,
        }),
        (MapKind::Hash, Keys::Bytes(keys)) => f(&mut BytesMap {
            map: store.hash_map_with::<Vec<u8>, Vec<u8>>(MAP_NAME, CcehConfig::default())?,
            keys,
            value,
            value_bytes: config.value_bytes,
        }),
        (MapKind::Ordered, Keys::Words(keys)) => f(&mut WordsMap {
            map: store.btree_map::<u64, u64>(MAP_NAME, FastFairConfig::default())?,
            keys,
        }),
        (MapKind::Ordered, Keys::Bytes(keys)) => f(&mut BytesMap {
            map: store.btree_map::<Vec<u8>, Vec<u8>>(MAP_NAME, FastFairConfig::default())?,
            keys,
            value,
            value_bytes: config.value_bytes,
        }),
    }
}
