//! The structures the YCSB driver runs, behind one interface ([`Target`]).
//!
//! Each variant gets a fresh structure on its own heap in its own pool file
//! ([`HeapFile`], removed when the run ends), made by [`with_target`]:
//!
//! * **CCEH** ([`Cceh`], the default 16 KiB segments): `helper-off` and `helper-on` load their
//!   records with [`Cceh::insert_batch`], the speculative helper thread off or on
//!   ([`HELPER_DEPTH`] keys ahead); after the load both run one call per operation: read =
//!   [`Cceh::get`], update = [`Cceh::upsert`], insert = [`Cceh::insert`]. No ordered scans.
//! * **FAST&FAIR** ([`FastFair`], 512-byte nodes) under each [`ShiftPolicy`]: read =
//!   [`FastFair::get`], update = [`FastFair::upsert`], insert = [`FastFair::insert`], scan =
//!   [`FastFair::range`] from the start key, taking `len` pairs.
//!
//! CCEH and FAST&FAIR are one target type, `MapTarget`: their point operations are the same
//! [`U64Map`] calls, so both are measured through exactly the same code.
//! * **datalog** ([`Datalog`]) under each [`WriteMode`]: one file of fixed
//!   [`RECORD_BYTES`]-byte records, record `i` at offset `i * 256` ([`record_of`] turns a key
//!   into its record number). Read = [`Datalog::read_at`] of the whole record, every byte
//!   checked; update = [`Datalog::write_at`] of one [`FIELD_BYTES`]-byte field, the field
//!   chosen by the value's version; insert = the whole record written at its offset, at or
//!   just past the file's end (inserts take fresh record numbers in order). No scans: the
//!   file is in record order, not key order.
//!
//! The datalog target and its record layout are in `targets/datalog.rs`; the rest is here.
//!
//! [`record_of`]: crate::keys::records::record_of

mod datalog;

pub use datalog::{FIELDS, FIELD_BYTES, RECORD_BYTES};

use datalog::DatalogTarget;

use std::path::PathBuf;

use pmem_ordering::{Granularity, Hardware};
use pmem_structures::raw::cceh::{BatchOptions, Cceh, CcehConfig, CcehError};
use pmem_structures::raw::datalog::{Datalog, DatalogConfig, DatalogError, Policy, WriteMode};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, FastFairError, ShiftPolicy};
use pmem_structures::raw::U64Map;
use serde::Serialize;

use crate::ccehbench::{CCEH_POLICY, HELPER_DEPTH};
use crate::datalogbench::DATALOG_POLICY;
use crate::fastfairbench::FASTFAIR_HEAP_POLICY;
use crate::keys::records::value_matches;
use crate::poolfile::{HeapFile, SetupError};

/// Why an operation on a structure failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A CCEH operation failed.
    #[error("CCEH: {0}")]
    Cceh(#[from] CcehError),
    /// A FAST&FAIR operation failed.
    #[error("FAST&FAIR: {0}")]
    FastFair(#[from] FastFairError),
    /// A datalog operation failed.
    #[error("datalog: {0}")]
    Datalog(#[from] DatalogError),
    /// An operation through a store's handle failed.
    #[error("store: {0}")]
    Store(#[from] pmem_structures::Error),
    /// A scan asked of a structure without ordered scans.
    #[error("{structure} has no ordered scans")]
    ScanUnsupported {
        /// The structure's name.
        structure: &'static str,
    },
    /// A scan met a key holding a value never written with it.
    #[error("key {key:#x} holds {value:#x}, a value never written with it")]
    BadValue {
        /// The key.
        key: u64,
        /// What it held.
        value: u64,
    },
    /// A key that no record has (0 or `u64::MAX`), or whose record lies past the largest
    /// datalog file.
    #[error("key {key:#x} has no record the structure can hold")]
    BadKey {
        /// The key.
        key: u64,
    },
    /// A datalog record whose bytes were not written as one record of its key.
    #[error("datalog record {record} (key {key:#x}) is torn or corrupt: {reason}")]
    BadRecord {
        /// The record number.
        record: u64,
        /// Its key.
        key: u64,
        /// What is wrong.
        reason: String,
    },
}

/// A structure the driver can run: one call per operation, safe to share between threads.
///
/// Values are those of [`crate::keys::records::value_for`]; a structure returns what it holds and the
/// driver checks it.
pub trait Target: Sync {
    /// Insert `key -> value`; whether the key was new.
    fn insert(&self, key: u64, value: u64) -> Result<bool, TargetError>;
    /// The value of `key`, if present.
    fn read(&self, key: u64) -> Result<Option<u64>, TargetError>;
    /// Replace the value of `key`; whether the key was there.
    fn update(&self, key: u64, value: u64) -> Result<bool, TargetError>;
    /// Whether [`Target::scan`] is supported.
    fn supports_scan(&self) -> bool {
        false
    }
    /// Visit up to `len` pairs in key order from `start` (inclusive); how many were visited.
    /// A pair holding a value never written with its key fails with
    /// [`TargetError::BadValue`].
    fn scan(&self, start: u64, len: usize) -> Result<usize, TargetError>;
    /// Load `items` in one call, if this structure loads in batches (`None`: the driver
    /// inserts them one call each); how many keys were new.
    fn load_batch(&self, items: &[(u64, u64)]) -> Option<Result<u64, TargetError>> {
        let _ = items;
        None
    }
}

/// The structures measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Structure {
    /// The CCEH hash table.
    Cceh,
    /// The FAST&FAIR B+-tree.
    FastFair,
    /// The datalog object store.
    Datalog,
}

impl Structure {
    /// Every structure, in report order.
    pub const ALL: [Structure; 3] = [Structure::Cceh, Structure::FastFair, Structure::Datalog];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Structure::Cceh => "CCEH",
            Structure::FastFair => "FAST&FAIR",
            Structure::Datalog => "datalog",
        }
    }

    /// Why the structure cannot run scans (`None`: it can).
    pub fn no_scan_reason(self) -> Option<&'static str> {
        match self {
            Structure::Cceh => Some("CCEH is a hash table: its keys have no order to scan in"),
            Structure::FastFair => None,
            Structure::Datalog => Some(
                "the datalog keeps records at offsets in record-number order, not key order: \
                 a key range is no byte range",
            ),
        }
    }

    /// Its variants, in report order.
    pub fn variants(self) -> Vec<Variant> {
        Variant::ALL
            .into_iter()
            .filter(|v| v.structure() == self)
            .collect()
    }
}

/// A structure in one of its configurations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// CCEH loaded by `insert_batch` with the helper thread off.
    CcehHelperOff,
    /// CCEH loaded by `insert_batch` with the helper thread on.
    CcehHelperOn,
    /// FAST&FAIR under a shift policy.
    FastFair(ShiftPolicy),
    /// The datalog under a write mode.
    Datalog(WriteMode),
}

impl Variant {
    /// Every variant, in report order.
    pub const ALL: [Variant; 8] = [
        Variant::CcehHelperOff,
        Variant::CcehHelperOn,
        Variant::FastFair(ShiftPolicy::PerShift),
        Variant::FastFair(ShiftPolicy::Fast),
        Variant::FastFair(ShiftPolicy::Redo),
        Variant::Datalog(WriteMode::CopyOnWrite),
        Variant::Datalog(WriteMode::Embedded),
        Variant::Datalog(WriteMode::Auto),
    ];

    /// The structure.
    pub fn structure(self) -> Structure {
        match self {
            Variant::CcehHelperOff | Variant::CcehHelperOn => Structure::Cceh,
            Variant::FastFair(_) => Structure::FastFair,
            Variant::Datalog(_) => Structure::Datalog,
        }
    }

    /// The variant's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Variant::CcehHelperOff => "helper-off",
            Variant::CcehHelperOn => "helper-on",
            Variant::FastFair(p) => p.name(),
            Variant::Datalog(WriteMode::CopyOnWrite) => "copy-on-write",
            Variant::Datalog(WriteMode::Embedded) => "embedded",
            Variant::Datalog(WriteMode::Auto) => "auto",
        }
    }
}

/// Where the pool files go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The pool directory.
    pub dir: PathBuf,
    /// Pool files are named `{prefix}-ycsb.pool`.
    pub prefix: String,
    /// The granularity forced on the pools (`None`: detected).
    pub granularity: Option<Granularity>,
}

impl Setup {
    /// Pool files in `dir`, prefixed `pmem-bench`, granularity detected.
    pub fn new(dir: impl Into<PathBuf>) -> Setup {
        Setup {
            dir: dir.into(),
            prefix: "pmem-bench".to_string(),
            granularity: None,
        }
    }

    fn file_name(&self) -> String {
        format!("{}-ycsb.pool", self.prefix)
    }
}

/// Size of the pool file for `records` records of `variant` (every record loaded or inserted
/// over the runs): the sizing of the structure's own benchmark section.
pub fn pool_bytes(variant: Variant, records: u64) -> u64 {
    match variant.structure() {
        Structure::Cceh => crate::ccehbench::pool_size(records),
        Structure::FastFair => crate::fastfairbench::pool_size(records),
        Structure::Datalog => crate::datalogbench::pool_size(records.saturating_mul(RECORD_BYTES)),
    }
}

/// Why a structure could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    /// The pool file or heap.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The structure itself.
    #[error(transparent)]
    Target(#[from] TargetError),
}

/// Make a fresh, empty `variant` with room for `records` records in a pool file of `setup`,
/// and call `f` on it; the pool file is removed when `f` returns.
pub fn with_target<R, E: From<MakeError>>(
    variant: Variant,
    setup: &Setup,
    records: u64,
    f: impl FnOnce(&dyn Target) -> Result<R, E>,
) -> Result<R, E> {
    let policy = match variant.structure() {
        Structure::Cceh => CCEH_POLICY,
        Structure::FastFair => FASTFAIR_HEAP_POLICY,
        Structure::Datalog => DATALOG_POLICY,
    };
    let file = HeapFile::create(
        &setup.dir,
        &setup.file_name(),
        pool_bytes(variant, records),
        setup.granularity,
        policy,
    )
    .map_err(MakeError::from)?;
    let heap = file.heap();
    let root = heap.pool().root_offset();
    let made = |e: TargetError| E::from(MakeError::Target(e));
    match variant {
        Variant::CcehHelperOff | Variant::CcehHelperOn => {
            let table =
                Cceh::create(heap, root, CcehConfig::default()).map_err(|e| made(e.into()))?;
            f(&MapTarget {
                map: table,
                load: BatchOptions {
                    helper: variant == Variant::CcehHelperOn,
                    inline_prefetch: false,
                    depth: HELPER_DEPTH,
                },
            })
        }
        Variant::FastFair(policy) => {
            let config = FastFairConfig {
                policy,
                ..FastFairConfig::default()
            };
            let tree = FastFair::create(heap, root, config).map_err(|e| made(e.into()))?;
            f(&MapTarget {
                map: tree,
                load: BatchOptions::default(),
            })
        }
        Variant::Datalog(mode) => {
            let store = Datalog::create(
                heap,
                root,
                DatalogConfig {
                    max_files: 1,
                    policy: Policy::with_mode(mode),
                },
            )
            .map_err(|e| made(e.into()))?;
            let file = store.create_file("ycsb").map_err(|e| made(e.into()))?;
            f(&DatalogTarget { store, file })
        }
    }
}

/// CCEH or FAST&FAIR: read, update and insert are the same [`U64Map`] calls on both (read =
/// `get`, update = `upsert`, insert = `insert`); what differs is in [`MapExtras`].
struct MapTarget<M> {
    map: M,
    /// How CCEH loads its records (FAST&FAIR inserts them one call each).
    load: BatchOptions,
}

/// What the driver asks of a map beyond [`U64Map`]: its batched load and ordered scans.
trait MapExtras: U64Map {
    /// Which structure it is.
    const STRUCTURE: Structure;
    /// [`Target::scan`].
    fn scan(&self, start: u64, len: usize) -> Result<usize, TargetError>;
    /// [`Target::load_batch`], loading with `options` where the structure loads in batches.
    fn load_batch(
        &self,
        items: &[(u64, u64)],
        options: BatchOptions,
    ) -> Option<Result<u64, TargetError>>;
}

/// CCEH: batched load, no ordered scans.
impl MapExtras for Cceh<Hardware> {
    const STRUCTURE: Structure = Structure::Cceh;

    fn scan(&self, _start: u64, _len: usize) -> Result<usize, TargetError> {
        Err(TargetError::ScanUnsupported {
            structure: Structure::Cceh.name(),
        })
    }

    fn load_batch(
        &self,
        items: &[(u64, u64)],
        options: BatchOptions,
    ) -> Option<Result<u64, TargetError>> {
        Some(self.insert_batch(items, options).map_err(Into::into))
    }
}

/// FAST&FAIR: single calls, scans from the start key taking `len` pairs.
impl MapExtras for FastFair<Hardware> {
    const STRUCTURE: Structure = Structure::FastFair;

    fn scan(&self, start: u64, len: usize) -> Result<usize, TargetError> {
        let mut visited = 0;
        for pair in self.range(start..).take(len) {
            let (key, value) = pair?;
            if !value_matches(key, value) {
                return Err(TargetError::BadValue { key, value });
            }
            visited += 1;
        }
        Ok(visited)
    }

    fn load_batch(
        &self,
        _items: &[(u64, u64)],
        _options: BatchOptions,
    ) -> Option<Result<u64, TargetError>> {
        None
    }
}

impl<M> Target for MapTarget<M>
where
    M: MapExtras + Sync,
    TargetError: From<M::Error>,
{
    fn insert(&self, key: u64, value: u64) -> Result<bool, TargetError> {
        Ok(self.map.insert(key, value)?)
    }

    fn read(&self, key: u64) -> Result<Option<u64>, TargetError> {
        Ok(self.map.get(key)?)
    }

    fn update(&self, key: u64, value: u64) -> Result<bool, TargetError> {
        Ok(self.map.upsert(key, value)?.is_some())
    }

    fn supports_scan(&self) -> bool {
        M::STRUCTURE.no_scan_reason().is_none()
    }

    fn scan(&self, start: u64, len: usize) -> Result<usize, TargetError> {
        self.map.scan(start, len)
    }

    fn load_batch(&self, items: &[(u64, u64)]) -> Option<Result<u64, TargetError>> {
        self.map.load_batch(items, self.load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::records::{key_of, value_for};

    fn on<R>(variant: Variant, f: impl FnOnce(&dyn Target) -> R) -> R {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let mut out = None;
        let r: Result<(), MakeError> = with_target(variant, &Setup::new(dir.path()), 64, |t| {
            out = Some(f(t));
            Ok(())
        });
        r.unwrap();
        out.unwrap()
    }

    #[test]
    fn datalog_updates_rewrite_one_field_and_reads_check_every_field() {
        on(Variant::Datalog(WriteMode::Embedded), |t| {
            let (a, b) = (key_of(3).unwrap(), key_of(4).unwrap());
            // Record 4 is not written yet: past the end, so no update and no value.
            assert!(!t.update(b, value_for(b, 1)).unwrap());
            assert_eq!(t.read(b).unwrap(), None);
            assert!(t.insert(a, value_for(a, 0)).unwrap());
            assert_eq!(t.read(a).unwrap(), Some(value_for(a, 0)));
            // Records 0..3 are a gap of zeros the insert left: no record there.
            assert_eq!(t.read(key_of(1).unwrap()).unwrap(), None);
            // Version 5 goes to field 1: field 0, the one read returns, keeps version 0.
            assert!(t.update(a, value_for(a, 5)).unwrap());
            assert_eq!(t.read(a).unwrap(), Some(value_for(a, 0)));
            assert!(t.update(a, value_for(a, 8)).unwrap());
            assert_eq!(t.read(a).unwrap(), Some(value_for(a, 8)));
            // A value of another key in a field is caught.
            assert!(t.update(a, value_for(b, 9)).unwrap());
            assert!(matches!(t.read(a), Err(TargetError::BadRecord { .. })));
        });
    }

    #[test]
    fn fastfair_scans_visit_keys_in_order_and_check_values() {
        on(Variant::FastFair(ShiftPolicy::Fast), |t| {
            let mut keys: Vec<u64> = (0..50).map(|r| key_of(r).unwrap()).collect();
            for &k in &keys {
                assert!(t.insert(k, value_for(k, 0)).unwrap());
            }
            keys.sort_unstable();
            assert!(t.supports_scan());
            assert_eq!(t.scan(keys[10], 5).unwrap(), 5);
            assert_eq!(t.scan(keys[45], 100).unwrap(), 5);
            assert!(t.update(keys[47], value_for(keys[0], 1)).unwrap());
            assert!(matches!(
                t.scan(keys[45], 100),
                Err(TargetError::BadValue { key, .. }) if key == keys[47]
            ));
        });
    }

    #[test]
    fn cceh_loads_in_batches_and_finds_what_it_loaded() {
        for v in Structure::Cceh.variants() {
            on(v, |t| {
                let items: Vec<(u64, u64)> = (0..500)
                    .map(|r| key_of(r).unwrap())
                    .map(|k| (k, value_for(k, 0)))
                    .collect();
                assert_eq!(t.load_batch(&items).unwrap().unwrap(), 500);
                for &(k, v) in &items {
                    assert_eq!(t.read(k).unwrap(), Some(v));
                }
                assert!(!t.insert(items[0].0, 1).unwrap());
                assert!(!t.update(key_of(900).unwrap(), 1).unwrap());
            });
        }
    }
}
