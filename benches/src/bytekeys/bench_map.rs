//! What every measured map is, ours and the peers': its kind ([`MapKind`]), the contract the
//! workloads drive ([`BenchMap`]), the checks its reads and scans pass alike ([`check_read`],
//! [`ScanCheck`]), and where its files go ([`MapFiles`]).

use std::ops::ControlFlow;
use std::path::Path;

use pmem_ordering::Granularity;
use serde::Serialize;

use super::error::ByteKeyError;
use super::keyset::{record_of_tag, tag_matches, tag_of, BYTE_KEY_LEN};

/// The byte that fills a value after its tag.
pub const VALUE_FILL: u8 = 0xA5;

/// Which map: one of the store's, or a peer's database.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum MapKind {
    /// `Store::hash_map_with` (CCEH, default configuration).
    Hash,
    /// `Store::btree_map` (FAST&FAIR, default configuration: FAST shifts).
    Ordered,
    /// The raw leaf map, pairs inline in persistent leaves ([`super::leaf`]).
    Leaf,
    /// The same leaves through the store's ordered-map handle
    /// (`Store::btree_map_with(name, BTreeLayout::leaves())`, [`super::store_leaf`]).
    StoreLeaf,
    /// LMDB, through heed ([`super::peers::lmdb`]).
    Lmdb,
    /// redb ([`super::peers::redb`]).
    Redb,
}

impl MapKind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            MapKind::Hash => "hash map",
            MapKind::Ordered => "ordered map",
            MapKind::Leaf => "leaf map",
            MapKind::StoreLeaf => "Store leaves",
            MapKind::Lmdb => "LMDB",
            MapKind::Redb => "redb",
        }
    }

    /// Whether this is one of our maps (not a peer's database).
    pub fn is_ours(self) -> bool {
        matches!(
            self,
            MapKind::Hash | MapKind::Ordered | MapKind::Leaf | MapKind::StoreLeaf
        )
    }
}

/// A map driven by record number: keys and values are made from the record (see
/// [`super::keyset`]).
pub trait BenchMap {
    /// Insert record `record` at `version`: whether it was absent.
    fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError>;
    /// Read record `record`: whether it was found (its value checked).
    fn read(&mut self, record: usize) -> Result<bool, ByteKeyError>;
    /// Set record `record` to its value at `version`: whether a value was replaced.
    fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError>;
    /// Visit up to `len` pairs in key order from record `record`'s key (checked by
    /// [`ScanCheck`]): how many. Hash maps have no order and refuse.
    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError>;
    /// Open the map once more and time it: the seconds of an open that rebuilds a DRAM index
    /// from the media (`None`: the map has no such open to time).
    fn open_seconds(&mut self) -> Result<Option<f64>, ByteKeyError> {
        Ok(None)
    }
}

/// Check a value read for record `record`: `value_bytes` long, tagged with the record (at any
/// version: the workloads' updates keep the record and change the version).
pub fn check_read(record: usize, value: &[u8], value_bytes: usize) -> Result<(), ByteKeyError> {
    match tag_of(value) {
        Some(tag) if value.len() == value_bytes && tag_matches(tag, record) => Ok(()),
        _ => Err(ByteKeyError::BadValue {
            record,
            len: value.len(),
        }),
    }
}

/// The checks of one scan's pairs, the same on every ordered map: the first key is the start
/// key (a loaded key: the workloads never remove one), keys have its length and strictly
/// ascend, and each value has the value size and a tag naming a loaded record (which record a
/// scanned key is would take a search per pair).
pub struct ScanCheck<'a> {
    record: usize,
    start: &'a [u8],
    records: u64,
    value_bytes: usize,
    /// The last key visited (its first `start.len()` bytes), once one was.
    previous: Option<[u8; BYTE_KEY_LEN]>,
    visited: usize,
}

impl<'a> ScanCheck<'a> {
    /// The checks of a scan from record `record`'s key `start` (at most [`BYTE_KEY_LEN`]
    /// bytes), in a map of `records` records of `value_bytes`-byte values.
    pub fn new(record: usize, start: &'a [u8], records: usize, value_bytes: usize) -> Self {
        assert!(start.len() <= BYTE_KEY_LEN, "keys are at most 16 bytes");
        ScanCheck {
            record,
            start,
            records: records as u64,
            value_bytes,
            previous: None,
            visited: 0,
        }
    }

    /// Check the next pair visited.
    pub fn pair(&mut self, key: &[u8], value: &[u8]) -> Result<(), ByteKeyError> {
        let bad = |what: &'static str| ByteKeyError::BadScan {
            record: self.record,
            pair: self.visited,
            what,
        };
        let len = self.start.len();
        if key.len() != len {
            return Err(bad("a key of another length"));
        }
        match &self.previous {
            None if key != self.start => return Err(bad("the first key is not the start key")),
            Some(previous) if key <= &previous[..len] => return Err(bad("keys out of order")),
            _ => {}
        }
        match tag_of(value) {
            Some(tag) if value.len() == self.value_bytes && record_of_tag(tag) < self.records => {}
            _ => return Err(bad("a value not written for any record")),
        }
        let mut previous = [0u8; BYTE_KEY_LEN];
        previous[..len].copy_from_slice(key);
        self.previous = Some(previous);
        self.visited += 1;
        Ok(())
    }

    /// Pairs visited, all checked.
    pub fn visited(&self) -> usize {
        self.visited
    }

    /// Check a pair lent by a scan that wants `len` pairs: what its callback returns, a break
    /// with the error on a bad pair, a break with `None` once `len` pairs were visited.
    pub fn take(
        &mut self,
        key: &[u8],
        value: &[u8],
        len: usize,
    ) -> ControlFlow<Option<ByteKeyError>> {
        if let Err(e) = self.pair(key, value) {
            return ControlFlow::Break(Some(e));
        }
        if self.visited >= len {
            ControlFlow::Break(None)
        } else {
            ControlFlow::Continue(())
        }
    }

    /// The scan's result: the pairs visited, or the error a bad pair broke it with.
    pub fn result(&self, bad: Option<ByteKeyError>) -> Result<usize, ByteKeyError> {
        match bad {
            Some(e) => Err(e),
            None => Ok(self.visited),
        }
    }
}

/// Where a map's files go and how ours are made.
#[derive(Clone, Copy, Debug)]
pub struct MapFiles<'a> {
    /// The directory (the pool directory).
    pub dir: &'a Path,
    /// The stem of every file name: `{stem}.pool` (ours), `{stem}.lmdb/`, `{stem}.redb`.
    pub stem: &'a str,
    /// Our pools' granularity, forced (`None`: detected).
    pub granularity: Option<Granularity>,
    /// The most records the workloads' updates write beside the loaded ones (our pools are
    /// sized for them).
    pub new_records: u64,
}
