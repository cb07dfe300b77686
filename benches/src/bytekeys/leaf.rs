//! The leaf map ([`pmem_structures::raw::leafmap`]), driven as [`BenchMap`]: a raw map in a
//! fresh heap of its own pool file (the store does not serve it yet), default leaves (8 KiB,
//! 63 slots of 128 bytes: a 16-byte key and a 100-byte value inline; 1 KiB values in records).
//!
//! Writes as the store's maps': `insert` and `upsert`, each durable when it returns. Reads in
//! the map's borrowed forms: `get_into` a buffer reused across calls, and `scan_at_most` (the
//! scan told the number of pairs wanted, as the peers' cursors need not be), which lends each
//! pair to a callback (no allocation per pair). After the workloads, the map is opened
//! once more on the same heap and the open timed: the DRAM index rebuilt from the leaves
//! ([`BenchMap::open_seconds`]).

use std::ops::Bound;
use std::time::Instant;

use pmem_structures::raw::leafmap::{LeafMap, LeafMapConfig};

use super::bench_map::{check_read, BenchMap, MapFiles, ScanCheck, VALUE_FILL};
use super::error::ByteKeyError;
use super::keyset::{fill_value, BYTE_KEY_LEN};
use crate::poolfile::HeapFile;

/// A leaf map of 16-byte keys and byte values.
struct LeafBench {
    map: LeafMap<pmem_ordering::Hardware>,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    /// The value being written, refilled per call.
    value: Vec<u8>,
    /// The buffer reads copy into, reused.
    read: Vec<u8>,
    value_bytes: usize,
}

impl BenchMap for LeafBench {
    fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        fill_value(&mut self.value, record, version);
        Ok(self.map.insert(&self.keys[record], &self.value)?)
    }

    fn read(&mut self, record: usize) -> Result<bool, ByteKeyError> {
        if !self.map.get_into(&self.keys[record], &mut self.read)? {
            return Ok(false);
        }
        check_read(record, &self.read, self.value_bytes).map(|()| true)
    }

    fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        fill_value(&mut self.value, record, version);
        Ok(self.map.upsert(&self.keys[record], &self.value)?.is_some())
    }

    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError> {
        let start = &self.keys[record][..];
        let mut check = ScanCheck::new(record, start, self.keys.len(), self.value_bytes);
        let mut bad = None;
        self.map
            .scan_at_most(Bound::Included(start), Bound::Unbounded, len, |k, v| {
                check.take(k, v, len).map_break(|e| bad = e)
            })?;
        check.result(bad)
    }

    fn open_seconds(&mut self) -> Result<Option<f64>, ByteKeyError> {
        let started = Instant::now();
        let opened = LeafMap::open(self.map.heap(), self.map.root())?;
        let seconds = started.elapsed().as_secs_f64();
        if opened.len() != self.map.len() {
            return Err(ByteKeyError::Reopened {
                found: opened.len(),
                expected: self.map.len(),
            });
        }
        Ok(Some(seconds))
    }
}

/// Make a fresh, empty leaf map over `keys` in a fresh heap file of `files` of `pool_bytes`
/// (removed when `f` returns), and call `f` on it.
pub fn with_map<R>(
    files: MapFiles<'_>,
    pool_bytes: u64,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    value_bytes: usize,
    f: impl FnOnce(&mut dyn BenchMap) -> Result<R, ByteKeyError>,
) -> Result<R, ByteKeyError> {
    let file = HeapFile::create(
        files.dir,
        &format!("{}.pool", files.stem),
        pool_bytes,
        files.granularity,
        pmem_undo_log::FencePolicy::Batched,
    )?;
    let heap = file.heap();
    let map = LeafMap::create(heap, heap.pool().root_offset(), LeafMapConfig::default())?;
    f(&mut LeafBench {
        map,
        keys,
        value: vec![VALUE_FILL; value_bytes],
        read: Vec::with_capacity(value_bytes),
        value_bytes,
    })
}
