//! The maps of the byte-key section: which maps are measured ([`MapConfig`], [`CONFIGS`]),
//! each in fresh files of its own ([`with_map`]: ours a fresh store in its own pool file
//! holding one map, a peer a fresh database of its own, see [`super::peers`]), driven by record
//! number through [`BenchMap`] (`bench_map.rs`: the contract and checks every map shares).

use pmem_structures::{BTreeMap, CcehConfig, HashMap};
use serde::Serialize;

pub use super::bench_map::{check_read, BenchMap, MapFiles, MapKind, ScanCheck, VALUE_FILL};
use super::error::ByteKeyError;
use super::keyset::{fill_value, tag_matches, KeyKind, Keys, BYTE_KEY_LEN};
use super::peers;
use crate::poolfile::StoreFile;

/// The map's name in its store.
const MAP_NAME: &str = "bytekeys";

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

    /// Its name on the command line: `hash-u64`, `ordered-100`, `ordered-user`, `lmdb`.
    pub fn slug(&self) -> String {
        let kind = match self.map {
            MapKind::Hash => "hash",
            MapKind::Ordered => "ordered",
            MapKind::Leaf => "leaf",
            MapKind::StoreLeaf => "store-leaf",
            MapKind::Lmdb => return "lmdb".to_string(),
            MapKind::Redb => return "redb".to_string(),
        };
        match self.keys {
            KeyKind::U64 => format!("{kind}-u64"),
            KeyKind::Random16 => format!("{kind}-{}", self.value_bytes),
            KeyKind::User => format!("{kind}-user"),
        }
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

/// The maps measured, in report order: each kind's `u64` path first, the peers last (with the
/// keys and values of the rows they are compared with).
pub const CONFIGS: [MapConfig; 13] = [
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
    MapConfig {
        map: MapKind::Leaf,
        keys: KeyKind::Random16,
        value_bytes: 100,
    },
    MapConfig {
        map: MapKind::Leaf,
        keys: KeyKind::Random16,
        value_bytes: 1024,
    },
    MapConfig {
        map: MapKind::Leaf,
        keys: KeyKind::User,
        value_bytes: 100,
    },
    MapConfig {
        map: MapKind::StoreLeaf,
        keys: KeyKind::Random16,
        value_bytes: 100,
    },
    MapConfig {
        map: MapKind::Lmdb,
        keys: KeyKind::Random16,
        value_bytes: 100,
    },
    MapConfig {
        map: MapKind::Redb,
        keys: KeyKind::Random16,
        value_bytes: 100,
    },
];

/// A map of 16-byte keys and byte values.
struct BytesMap<M> {
    map: M,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    /// The value being written, refilled per call.
    value: Vec<u8>,
    /// Where a get copies the value, reused across calls (a borrowed read, as the peers'
    /// gets are: nothing allocated per call).
    read: Vec<u8>,
    value_bytes: usize,
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
            if !self.map.get_into(&self.keys[record], &mut self.read)? {
                return Ok(false);
            }
            check_read(record, &self.read, self.value_bytes).map(|()| true)
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
        let start = &self.keys[record][..];
        let mut check = ScanCheck::new(record, start, self.keys.len(), self.value_bytes);
        // Each pair lent, not copied out: the peers' scans read borrowed slices too.
        let mut pairs = self.map.range_encoded(start..);
        while check.visited() < len {
            let Some(pair) = pairs.next_pair() else {
                break;
            };
            let (key, value) = pair?;
            check.pair(key, value)?;
        }
        Ok(check.visited())
    }
}

impl BenchMap for WordsMap<BTreeMap<u64, u64>> {
    words_point_operations!();

    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError> {
        // The byte maps' checks, on the keys' big-endian bytes (their order is the keys').
        let start = self.keys[record].to_be_bytes();
        let mut check = ScanCheck::new(record, &start, self.keys.len(), 8);
        for pair in self.map.range(self.keys[record]..).take(len) {
            let (key, tag) = pair?;
            check.pair(&key.to_be_bytes(), &tag.to_le_bytes())?;
        }
        Ok(check.visited())
    }
}

/// Make a fresh, empty map of `config` over `keys` in fresh files of `files` (removed when
/// `f` returns), and call `f` on it.
pub fn with_map<R>(
    files: MapFiles<'_>,
    config: MapConfig,
    keys: Keys,
    f: impl FnOnce(&mut dyn BenchMap) -> Result<R, ByteKeyError>,
) -> Result<R, ByteKeyError> {
    if !matches!(config.map, MapKind::Hash | MapKind::Ordered) {
        let Keys::Bytes(keys) = keys else {
            return Err(ByteKeyError::PeerKeys(config.map.name()));
        };
        return match config.map {
            MapKind::Leaf => {
                let bytes = config.pool_bytes(keys.len() as u64, files.new_records);
                super::leaf::with_map(files, bytes, keys, config.value_bytes, f)
            }
            MapKind::StoreLeaf => {
                let bytes = config.pool_bytes(keys.len() as u64, files.new_records);
                super::store_leaf::with_map(files, bytes, keys, config.value_bytes, f)
            }
            MapKind::Lmdb => peers::lmdb::with_map(files, keys, config.value_bytes, f),
            _ => peers::redb::with_map(files, keys, config.value_bytes, f),
        };
    }
    let file = StoreFile::create(
        files.dir,
        &format!("{}.pool", files.stem),
        config.pool_bytes(keys.len() as u64, files.new_records),
        files.granularity,
    )?;
    with_store_map(&file, config, keys, f)
}

/// Make one empty map of `config` over `keys` in the fresh store of `file`, and call `f` on
/// it.
fn with_store_map<R>(
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
            read: Vec::new(),
            value_bytes: config.value_bytes,
        }),
        // The ordered map ([`with_map`] hands the peers' kinds to their own modules).
        (_, Keys::Words(keys)) => f(&mut WordsMap {
            map: store.btree_map::<u64, u64>(MAP_NAME)?,
            keys,
        }),
        (_, Keys::Bytes(keys)) => f(&mut BytesMap {
            map: store.btree_map::<Vec<u8>, Vec<u8>>(MAP_NAME)?,
            keys,
            value,
            read: Vec::new(),
            value_bytes: config.value_bytes,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bytekeys::keyset::value_tag;

    fn value(record: usize, len: usize) -> Vec<u8> {
        let mut v = vec![VALUE_FILL; len];
        fill_value(&mut v, record, 3);
        v
    }

    #[test]
    fn a_read_must_be_its_records_value_of_the_right_size() {
        assert!(check_read(5, &value(5, 100), 100).is_ok());
        assert!(check_read(5, &value(6, 100), 100).is_err());
        assert!(check_read(5, &value(5, 99), 100).is_err());
        assert!(check_read(5, &[1, 2, 3], 100).is_err());
    }

    #[test]
    fn a_scan_must_start_at_its_key_ascend_and_carry_loaded_records() {
        let (a, b, c) = ([1u8; 16], [2u8; 16], [3u8; 16]);
        let good = value(9, 100);
        let mut check = ScanCheck::new(0, &a, 10, 100);
        check.pair(&a, &good).unwrap();
        check.pair(&b, &good).unwrap();
        check.pair(&c, &good).unwrap();
        assert_eq!(check.visited(), 3);
        let fails = |pairs: &[(&[u8], Vec<u8>)]| {
            let mut check = ScanCheck::new(0, &a, 10, 100);
            pairs.iter().any(|(k, v)| check.pair(k, v).is_err())
        };
        assert!(fails(&[(&b, good.clone())]), "not the start key");
        assert!(fails(&[(&a, good.clone()), (&a, good.clone())]), "a repeat");
        assert!(fails(&[
            (&a, good.clone()),
            (&c, good.clone()),
            (&b, good.clone())
        ]));
        assert!(fails(&[(&a[..8], good.clone())]), "a short key");
        assert!(fails(&[(&a, value(10, 100))]), "no loaded record 10");
        assert!(fails(&[(&a, value(1, 64))]), "a short value");
        let words = ScanCheck::new(0, &[0u8; 8], 10, 8)
            .pair(&[0u8; 8], &value_tag(3, 1).to_le_bytes())
            .is_ok();
        assert!(words, "u64 maps: 8-byte keys and tags");
    }

    #[test]
    fn slugs_name_every_map_once() {
        let slugs: std::collections::BTreeSet<String> =
            CONFIGS.iter().map(MapConfig::slug).collect();
        assert_eq!(slugs.len(), CONFIGS.len());
        assert!(
            slugs.contains("ordered-100") && slugs.contains("lmdb") && slugs.contains("hash-1024")
        );
    }
}
