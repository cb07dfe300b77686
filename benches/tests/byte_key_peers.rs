//! The byte-key section's maps, ours and the peers (LMDB, redb), driven the same way on a tiny
//! key set: every operation's result against a model of the keys, not speed.

use std::collections::BTreeSet;

use pmem_bench::bytekeys::keyset::{KeyKind, Keys};
use pmem_bench::bytekeys::maps::{with_map, MapFiles};
use pmem_bench::bytekeys::{MapConfig, MapKind, CONFIGS};
use pmem_bench::poolfile::default_pool_dir;
use pmem_ordering::Granularity;

const RECORDS: usize = 500;
const SCAN: usize = 100;

fn config(map: MapKind) -> MapConfig {
    *CONFIGS
        .iter()
        .find(|c| c.map == map && c.keys == KeyKind::Random16 && c.value_bytes == 100)
        .expect("every kind has a 16 random bytes -> 100 B map")
}

/// Insert, read, update and scan every record of a tiny map of `kind`, checking each result
/// against the sorted keys.
fn drive(map: MapKind) {
    let dir = tempfile::Builder::new()
        .prefix("pmem-bench-peers")
        .tempdir_in(default_pool_dir())
        .expect("make a directory");
    let files = MapFiles {
        dir: dir.path(),
        stem: "t",
        granularity: Some(Granularity::Emulated),
        new_records: RECORDS as u64,
    };
    let keys = Keys::new(KeyKind::Random16, RECORDS as u64, 11);
    let Keys::Bytes(bytes) = &keys else {
        panic!("random keys are bytes")
    };
    let sorted: BTreeSet<[u8; 16]> = bytes.iter().copied().collect();
    let bytes = bytes.clone();
    with_map(files, config(map), keys, |m| {
        for r in 0..RECORDS {
            assert!(!m.read(r)?, "{map:?}: record {r} found before its insert");
            assert!(
                m.insert(r, 0)?,
                "{map:?}: insert {r} reports the key present"
            );
        }
        assert!(
            !m.insert(7, 3)?,
            "{map:?}: a second insert reports the key present"
        );
        for r in 0..RECORDS {
            assert!(m.read(r)?, "{map:?}: record {r} not found");
            assert!(
                m.update(r, 1 + r as u32)?,
                "{map:?}: update {r} replaced nothing"
            );
            assert!(m.read(r)?, "{map:?}: record {r} not found after its update");
        }
        if map == MapKind::Hash {
            assert!(m.scan(0, SCAN).is_err(), "a hash map has no scan");
            return Ok(());
        }
        for (r, key) in bytes.iter().enumerate() {
            let after = sorted.range(*key..).count();
            assert_eq!(m.scan(r, SCAN)?, after.min(SCAN), "{map:?}: scan from {r}");
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{map:?}: {e}"));
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "{map:?} left files behind: {left:?}");
}

#[test]
fn lmdb_inserts_reads_updates_and_scans_like_our_maps() {
    drive(MapKind::Lmdb);
}

#[test]
fn redb_inserts_reads_updates_and_scans_like_our_maps() {
    drive(MapKind::Redb);
}

#[test]
fn our_maps_pass_the_same_checks() {
    drive(MapKind::Hash);
    drive(MapKind::Ordered);
}
