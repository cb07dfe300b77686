//! The maps of a [`Store`](pmem_structures::Store) as YCSB targets, for the store path's
//! pairing with the raw structures ([`crate::storebench`]).
//!
//! The operations are those of the raw structures' target (read = `get`, update = `upsert`,
//! insert = `insert`, scan = `range` from the start key taking `len` pairs), called on the
//! store's [`HashMap`] and [`BTreeMap`] handles. The handles have no batched insert, so a load
//! runs one `insert` per record (the pairing loads the raw structure the same way).

use pmem_structures::{BTreeMap, CcehConfig, HashMap};

use super::targets::{MakeError, Setup, Structure, Target, TargetError};
use crate::keys::records::value_matches;
use crate::poolfile::StoreFile;

/// The name of the map in a YCSB store.
pub const MAP_NAME: &str = "ycsb";

/// Which map of the store a target runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMapKind {
    /// [`HashMap`]: CCEH, default configuration.
    HashMap,
    /// [`BTreeMap`]: FAST&FAIR, default configuration (FAST shifts, 512-byte nodes).
    BTreeMap,
}

impl StoreMapKind {
    /// The raw structure behind the map.
    pub fn structure(self) -> Structure {
        match self {
            StoreMapKind::HashMap => Structure::Cceh,
            StoreMapKind::BTreeMap => Structure::FastFair,
        }
    }

    /// Size of the store's pool file for `records` records: the raw structure's sizing.
    pub fn pool_bytes(self, records: u64) -> u64 {
        match self {
            StoreMapKind::HashMap => crate::ccehbench::pool_size(records),
            StoreMapKind::BTreeMap => crate::fastfairbench::pool_size(records),
        }
    }
}

/// Make a fresh store with room for `records` records in a pool file of `setup`
/// (`{prefix}-ycsb-store.pool`), holding one empty map of `kind` in its default
/// configuration, and call `f` on the map; the pool file is removed when `f` returns.
pub fn with_store_target<R, E: From<MakeError>>(
    kind: StoreMapKind,
    setup: &Setup,
    records: u64,
    f: impl FnOnce(&dyn Target) -> Result<R, E>,
) -> Result<R, E> {
    let file = StoreFile::create(
        &setup.dir,
        &format!("{}-ycsb-store.pool", setup.prefix),
        kind.pool_bytes(records),
        setup.granularity,
    )
    .map_err(MakeError::from)?;
    let made = |e: pmem_structures::Error| E::from(MakeError::Target(e.into()));
    match kind {
        StoreMapKind::HashMap => {
            let map = file
                .store()
                .hash_map_with::<u64, u64>(MAP_NAME, CcehConfig::default())
                .map_err(made)?;
            f(&StoreMap { map })
        }
        StoreMapKind::BTreeMap => {
            let map = file.store().btree_map::<u64, u64>(MAP_NAME).map_err(made)?;
            f(&StoreMap { map })
        }
    }
}

/// A store's map, driven by the YCSB runner.
struct StoreMap<M> {
    map: M,
}

/// The point operations, the same calls on both handles.
macro_rules! point_operations {
    () => {
        fn insert(&self, key: u64, value: u64) -> Result<bool, TargetError> {
            Ok(self.map.insert(key, value)?)
        }

        fn read(&self, key: u64) -> Result<Option<u64>, TargetError> {
            Ok(self.map.get(key)?)
        }

        fn update(&self, key: u64, value: u64) -> Result<bool, TargetError> {
            Ok(self.map.upsert(key, value)?.is_some())
        }
    };
}

/// The hash map: no ordered scans.
impl Target for StoreMap<HashMap> {
    point_operations!();

    fn scan(&self, _start: u64, _len: usize) -> Result<usize, TargetError> {
        Err(TargetError::ScanUnsupported {
            structure: Structure::Cceh.name(),
        })
    }
}

/// The ordered map: scans from the start key, taking `len` pairs of what `range` returns.
impl Target for StoreMap<BTreeMap> {
    point_operations!();

    fn supports_scan(&self) -> bool {
        true
    }

    fn scan(&self, start: u64, len: usize) -> Result<usize, TargetError> {
        let mut visited = 0;
        for pair in self.map.range(start..).take(len) {
            let (key, value) = pair?;
            if !value_matches(key, value) {
                return Err(TargetError::BadValue { key, value });
            }
            visited += 1;
        }
        Ok(visited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::records::{key_of, value_for};

    fn on<R>(kind: StoreMapKind, f: impl FnOnce(&dyn Target) -> R) -> R {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let mut out = None;
        let r: Result<(), MakeError> = with_store_target(kind, &Setup::new(dir.path()), 64, |t| {
            out = Some(f(t));
            Ok(())
        });
        r.unwrap();
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "the store's pool file was not removed"
        );
        out.unwrap()
    }

    #[test]
    fn the_store_hash_map_reads_updates_and_refuses_scans() {
        on(StoreMapKind::HashMap, |t| {
            let k = key_of(5).unwrap();
            assert!(t.insert(k, value_for(k, 0)).unwrap());
            assert!(!t.insert(k, value_for(k, 0)).unwrap());
            assert_eq!(t.read(k).unwrap(), Some(value_for(k, 0)));
            assert!(t.update(k, value_for(k, 3)).unwrap());
            assert_eq!(t.read(k).unwrap(), Some(value_for(k, 3)));
            assert!(!t.update(key_of(6).unwrap(), 1).unwrap());
            assert!(t.load_batch(&[(k, 1)]).is_none(), "no batched load");
            assert!(!t.supports_scan());
            assert!(matches!(
                t.scan(k, 3),
                Err(TargetError::ScanUnsupported { .. })
            ));
        });
    }

    #[test]
    fn the_store_btree_map_scans_in_order_and_checks_values() {
        on(StoreMapKind::BTreeMap, |t| {
            let mut keys: Vec<u64> = (0..40).map(|r| key_of(r).unwrap()).collect();
            for &k in &keys {
                assert!(t.insert(k, value_for(k, 0)).unwrap());
            }
            keys.sort_unstable();
            assert!(t.supports_scan());
            assert_eq!(t.scan(keys[10], 5).unwrap(), 5);
            assert_eq!(t.scan(keys[37], 100).unwrap(), 3);
            assert!(t.update(keys[38], value_for(keys[0], 1)).unwrap());
            assert!(matches!(
                t.scan(keys[37], 100),
                Err(TargetError::BadValue { key, .. }) if key == keys[38]
            ));
        });
    }
}
