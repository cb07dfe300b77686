//! The leaf map as a service reaches it: through the `Store`'s ordered-map handle
//! (`store.btree_map_with::<Vec<u8>, Vec<u8>>(name, BTreeLayout::leaves())`), driven as
//! [`BenchMap`] beside the raw leaf map ([`super::leaf`]), so the two rows show what the front
//! door costs: the catalog's handle, the typed keys' encoding, the map-wide lock.
//!
//! Writes `insert` and `upsert`, each durable when it returns. Reads in the handle's borrowed
//! forms: `get_into` a buffer reused across calls, and `range_with` lending each pair to a
//! callback that stops after the pairs wanted (the handle is not told the count ahead, as the
//! raw map's `scan_at_most` is: its first batch is as long as the thread's last such scan
//! lent, so from the second scan on it copies the 100 pairs in one batch too).

use pmem_structures::{BTreeLayout, BTreeMap};

use super::bench_map::{check_read, BenchMap, MapFiles, ScanCheck, VALUE_FILL};
use super::error::ByteKeyError;
use super::keyset::{fill_value, BYTE_KEY_LEN};
use crate::poolfile::StoreFile;

/// The map's name in its store.
const MAP_NAME: &str = "bytekeys-leaves";

/// A store's ordered map of leaves, 16-byte keys and byte values.
struct StoreLeafBench {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    /// The value being written, refilled per call.
    value: Vec<u8>,
    /// The buffer reads copy into, reused.
    read: Vec<u8>,
    value_bytes: usize,
}

impl BenchMap for StoreLeafBench {
    fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        fill_value(&mut self.value, record, version);
        Ok(self.map.insert(&self.keys[record][..], &self.value[..])?)
    }

    fn read(&mut self, record: usize) -> Result<bool, ByteKeyError> {
        if !self.map.get_into(&self.keys[record][..], &mut self.read)? {
            return Ok(false);
        }
        check_read(record, &self.read, self.value_bytes).map(|()| true)
    }

    fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        fill_value(&mut self.value, record, version);
        Ok(self
            .map
            .upsert(&self.keys[record][..], &self.value[..])?
            .is_some())
    }

    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError> {
        let start = &self.keys[record][..];
        let mut check = ScanCheck::new(record, start, self.keys.len(), self.value_bytes);
        let broke = self.map.range_with(start.., |k, v| check.take(k, v, len))?;
        check.result(broke.flatten())
    }
}

/// Make a fresh store in a pool file of `files` of `pool_bytes` (removed when `f` returns)
/// holding one empty ordered map of leaves over `keys`, and call `f` on it.
pub fn with_map<R>(
    files: MapFiles<'_>,
    pool_bytes: u64,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    value_bytes: usize,
    f: impl FnOnce(&mut dyn BenchMap) -> Result<R, ByteKeyError>,
) -> Result<R, ByteKeyError> {
    let file = StoreFile::create(
        files.dir,
        &format!("{}.pool", files.stem),
        pool_bytes,
        files.granularity,
    )?;
    let map = file
        .store()
        .btree_map_with::<Vec<u8>, Vec<u8>>(MAP_NAME, BTreeLayout::leaves())?;
    f(&mut StoreLeafBench {
        map,
        keys,
        value: vec![VALUE_FILL; value_bytes],
        read: Vec::with_capacity(value_bytes),
        value_bytes,
    })
}
