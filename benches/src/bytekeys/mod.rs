//! Byte keys through the `Store`: the typed maps of records beside the `u64` path.
//!
//! The store's maps take typed keys and values; maps whose key or value does not fit
//! 8 bytes keep each pair in a record of its own (an insert: record + intent line, a fence,
//! then the allocation bit + slot, a fence). This section measures them at the byte-key
//! speed targets: 16-byte keys with 100-byte and 1 KiB values, on
//! `store.hash_map_with::<Vec<u8>, Vec<u8>>` (CCEH, default configuration) and
//! `store.btree_map::<Vec<u8>, Vec<u8>>` (FAST&FAIR, default configuration: FAST shifts), each
//! beside the same workloads on `hash_map::<u64, u64>` / `btree_map::<u64, u64>` (the inline
//! path) in the same run; plus one ordered map of `user:%011d` keys, whose shared 8-byte
//! prefix makes the map layered (see [`keyset`]). The maps are listed in [`maps::CONFIGS`].
//!
//! Each map is a fresh store ([`StoreFile`]: `Store::create`, batched fences, every page
//! touched first) in its own pool file in the pool directory, one thread. Its workloads
//! ([`workload::ByteWorkload`]), run in order on the one map: the load (one `insert` per
//! record, keys in a random order), A (50% `get`, 50% `upsert`), B (95/5), C (`get` only),
//! and for ordered maps E (`range(key..)` taking [`workload::SCAN_RECORDS`] pairs, from a
//! uniformly chosen loaded key; the byte-key map's pairs lent by `range_encoded`, as the peers'
//! scans lend theirs). Keys and operations are fixed from a seed before timing;
//! each run is timed whole, every [`workload::LATENCY_EVERY`]th call also on its own (latency
//! percentiles, and its fences: the median is an insert without a split), with the thread's
//! persistence counters read around the run (fences, flushes, bytes to the media per
//! operation). Every result is checked (inserts inserted, reads found their record's value,
//! updates replaced one, scans visited pairs).
//!
//! Beside them, the raw leaf map ([`leaf`]: pairs inline in persistent leaves, its DRAM index
//! rebuilt at open; the Store serves it as an ordered map's leaf layout, measured here raw) in a
//! heap file of its own, with 16 random bytes
//! to 100 B and 1 KiB and with `user:%011d` keys; after its workloads its open is timed
//! ([`OpenTime`]). And the same leaves through the store's handle ([`store_leaf`]:
//! `btree_map_with(name, BTreeLayout::leaves())`, 16 random bytes to 100 B): what a service
//! reaches, beside the raw map, so the two rows show what the front door costs.
//!
//! Beside them, the same workloads on two embedded stores ([`peers`]), LMDB (through heed) and
//! redb, with the same 16-byte keys (the same key set: keys are drawn per kind of key, not per
//! map), 100-byte values, operations and checks, each write durable before its call returns
//! (ours: flushes and fences, emulated granularity on the pool directory; a peer: one write
//! transaction committed per insert or update), each peer read a read transaction of its own
//! (per get, per scan); the report gives ours over each peer's ops/s ([`PeerComparison`])
//! with the conditions of the run ([`Conditions`]: pool directory, granularity, one thread,
//! load averages before and after).
//!
//! Files: `keyset.rs` (keys and values), `maps.rs` (the maps and how they are driven, the
//! checks of their results), `leaf.rs` and `store_leaf.rs` (the leaf map raw and through the
//! store), `peers/` (LMDB and redb), `workload.rs` (operations and the timed
//! run), `results.rs` (rows, comparisons, targets, errors); this file runs them
//! ([`measure`]).
//!
//! [`StoreFile`]: crate::poolfile::StoreFile

pub mod bench_map;
pub mod error;
pub mod keyset;
pub mod leaf;
pub mod maps;
pub mod peers;
pub mod results;
pub mod store_leaf;
pub mod workload;

pub use error::ByteKeyError;
pub use maps::{MapConfig, MapKind, CONFIGS};
pub use peers::REDB_VERSION;
pub use results::{
    check_targets, ByteKeyResults, ByteKeyRow, Conditions, OpenTime, PeerComparison, TargetCheck,
};
pub use workload::{ByteWorkload, LATENCY_EVERY, SCAN_RECORDS};

use std::path::Path;
use std::time::Instant;

use pmem_ordering::Granularity;

use crate::machine::{load_average, Machine};
use crate::phase::{percentile, timer_overhead_ns};
use crate::poolfile::is_tmpfs;
use keyset::{KeyKind, Keys};
use maps::MapFiles;
use workload::{operations, run, Measured};

/// How much the section measures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByteKeyPlan {
    /// Records loaded into each map.
    pub records: u64,
    /// Operations of workloads A, B and C.
    pub ops: u64,
    /// Scans of workload E.
    pub scans: u64,
    /// Seed of the keys and operations.
    pub seed: u64,
    /// The maps measured, in run order (a subset of [`CONFIGS`]).
    pub maps: Vec<MapConfig>,
}

impl ByteKeyPlan {
    /// The default run: every map of [`CONFIGS`], 1M records (the size the speed targets are
    /// stated at), 1M operations per point workload, 200 000 scans.
    pub fn full() -> ByteKeyPlan {
        ByteKeyPlan {
            records: 1_000_000,
            ops: 1_000_000,
            scans: 200_000,
            seed: 0xB17E,
            maps: CONFIGS.to_vec(),
        }
    }

    /// The `--quick` run: 20 000 records and operations, 4 000 scans.
    pub fn quick() -> ByteKeyPlan {
        ByteKeyPlan {
            records: 20_000,
            ops: 20_000,
            scans: 4_000,
            seed: 0xB17E,
            maps: CONFIGS.to_vec(),
        }
    }

    /// This plan with `records` records per map.
    pub fn with_records(mut self, records: u64) -> ByteKeyPlan {
        self.records = records;
        self
    }

    /// This plan with `ops` operations per point workload and a fifth as many scans (the
    /// default runs' proportion), at least one.
    pub fn with_ops(mut self, ops: u64) -> ByteKeyPlan {
        self.ops = ops;
        self.scans = (ops / 5).max(1);
        self
    }

    /// The workloads of a map of `kind`, with their operations (the same for every map: they
    /// depend on the workload, the records and the seed only).
    fn workloads(&self, kind: MapKind) -> Vec<(ByteWorkload, Vec<workload::Op>)> {
        kind.workloads()
            .iter()
            .map(|&w| {
                let ops = if w == ByteWorkload::E {
                    self.scans
                } else {
                    self.ops
                };
                (w, operations(w, self.records, ops, self.seed))
            })
            .collect()
    }
}

/// The seed of the keys of `kind`: one key set per kind, so every map of 16 random bytes (ours
/// and the peers') holds the same keys.
fn key_seed(seed: u64, kind: KeyKind) -> u64 {
    seed ^ (kind as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Measure every map of `plan` under it, each in fresh files named `{prefix}-bytekeys.*` in
/// `dir` (removed when its map is done), ours with `granularity` forced (`None`: detected).
/// `progress(done, maps)` is called after each map.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &ByteKeyPlan,
    mut progress: impl FnMut(usize, usize),
) -> Result<ByteKeyResults, ByteKeyError> {
    let start = Instant::now();
    let load_before = load_average();
    let timer_ns = timer_overhead_ns();
    let stem = format!("{prefix}-bytekeys");
    let mut rows: Vec<ByteKeyRow> = Vec::new();
    let mut opens: Vec<OpenTime> = Vec::new();
    for (i, config) in plan.maps.iter().enumerate() {
        let workloads = plan.workloads(config.map);
        let files = MapFiles {
            dir,
            stem: &stem,
            granularity,
            new_records: workloads
                .iter()
                .map(|(w, ops)| w.max_updates(ops.len() as u64))
                .sum(),
        };
        let keys = Keys::new(config.keys, plan.records, key_seed(plan.seed, config.keys));
        let (measured, open) = maps::with_map(files, *config, keys, |map| {
            let measured = workloads
                .iter()
                .map(|(w, ops)| {
                    let label =
                        || format!("{} {}, {}", config.map.name(), config.label(), w.name());
                    run(map, ops, label).map(|m| (*w, m))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((measured, map.open_seconds()?))
        })?;
        rows.extend(measured.iter().map(|(w, m)| row(config, *w, m)));
        opens.extend(open.map(|seconds| OpenTime {
            map: config.map.name().to_string(),
            label: config.label(),
            records: plan.records,
            seconds,
        }));
        progress(i + 1, plan.maps.len());
    }
    add_ratios(&mut rows);
    let targets = check_targets(&rows);
    let comparison = compare_with_peers(&rows);
    let conditions = Conditions {
        threads: 1,
        dir: dir.to_path_buf(),
        tmpfs: is_tmpfs(dir),
        granularity: granularity.map_or_else(
            || "detected (the report's header names it)".to_string(),
            |g| g.name().to_string(),
        ),
        cores: Machine::detect().cores,
        load_before,
        load_after: load_average(),
    };
    Ok(ByteKeyResults {
        records: plan.records,
        ops: plan.ops,
        scans: plan.scans,
        latency_every: LATENCY_EVERY,
        timer_ns,
        conditions,
        peers: plan
            .maps
            .iter()
            .filter_map(|c| peers::describe(c.map))
            .collect(),
        rows,
        opens,
        comparison,
        targets,
        total_seconds: start.elapsed().as_secs_f64(),
    })
}

/// The row of `workload` on a map of `config`, from what its run measured (a peer's has no
/// persistence counters: they count our flushes and fences).
fn row(config: &MapConfig, workload: ByteWorkload, m: &Measured) -> ByteKeyRow {
    let ours = config.map.is_ours();
    let per_op = |total: u64| ours.then(|| total as f64 / m.ops.max(1) as f64);
    let latency = |q| (!m.latencies.is_empty()).then(|| percentile(&m.latencies, q));
    let fences: Vec<f64> = m.call_fences.iter().map(|&f| f as f64).collect();
    ByteKeyRow {
        map: config.map.name().to_string(),
        keys: config.keys.name().to_string(),
        key_bytes: config.keys.key_bytes(),
        value_bytes: config.value_bytes,
        workload: workload.name().to_string(),
        operation: workload.operation().to_string(),
        ops: m.ops,
        seconds: m.seconds,
        ops_per_sec: m.ops as f64 / m.seconds.max(f64::MIN_POSITIVE),
        p50_ns: latency(0.5),
        p99_ns: latency(0.99),
        p999_ns: latency(0.999),
        fences_per_op: per_op(m.stats.fences),
        flushes_per_op: per_op(m.stats.flushes),
        media_bytes_per_op: per_op(m.stats.bytes_to_media()),
        median_call_fences: (ours && !fences.is_empty()).then(|| percentile(&fences, 0.5)),
        ratio_to_u64: None,
    }
}

/// Set every byte-key row of our maps' to its ratio to the `u64` row of the same map kind and
/// workload.
fn add_ratios(rows: &mut [ByteKeyRow]) {
    let u64_rates: Vec<(String, String, f64)> = rows
        .iter()
        .filter(|r| r.keys == KeyKind::U64.name())
        .map(|r| (r.map.clone(), r.workload.clone(), r.ops_per_sec))
        .collect();
    for r in rows.iter_mut() {
        if r.keys == KeyKind::U64.name() {
            continue;
        }
        r.ratio_to_u64 = u64_rates
            .iter()
            .find(|(map, workload, _)| *map == r.map && *workload == r.workload)
            .map(|(_, _, rate)| r.ops_per_sec / rate);
    }
}

/// Ours against the peers, per workload, on the rows of the peers' keys and values (16 random
/// bytes -> 100 B); empty when no peer was measured.
fn compare_with_peers(rows: &[ByteKeyRow]) -> Vec<PeerComparison> {
    let rate = |map: MapKind, workload: ByteWorkload| {
        let config = MapConfig {
            map,
            keys: KeyKind::Random16,
            value_bytes: 100,
        };
        rows.iter()
            .find(|r| r.is(&config, workload))
            .map(|r| r.ops_per_sec)
    };
    let over = |ours: Option<f64>, peer: Option<f64>| Some(ours? / peer?);
    if rate(MapKind::Lmdb, ByteWorkload::Load).is_none()
        && rate(MapKind::Redb, ByteWorkload::Load).is_none()
    {
        return Vec::new();
    }
    ByteWorkload::ORDERED
        .iter()
        .map(|&w| {
            let (hash, ordered) = (rate(MapKind::Hash, w), rate(MapKind::Ordered, w));
            let (leaf, store_leaf) = (rate(MapKind::Leaf, w), rate(MapKind::StoreLeaf, w));
            let (lmdb, redb) = (rate(MapKind::Lmdb, w), rate(MapKind::Redb, w));
            PeerComparison {
                workload: w.name().to_string(),
                operation: w.operation().to_string(),
                hash,
                ordered,
                leaf,
                store_leaf,
                lmdb,
                redb,
                hash_over_lmdb: over(hash, lmdb),
                ordered_over_lmdb: over(ordered, lmdb),
                hash_over_redb: over(hash, redb),
                ordered_over_redb: over(ordered, redb),
                leaf_over_lmdb: over(leaf, lmdb),
                leaf_over_redb: over(leaf, redb),
                store_leaf_over_lmdb: over(store_leaf, lmdb),
                store_leaf_over_redb: over(store_leaf, redb),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_map_runs_its_workloads_with_counters_ratios_and_peers() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let plan = ByteKeyPlan {
            records: 3_000,
            ops: 2_000,
            scans: 300,
            seed: 5,
            maps: CONFIGS.to_vec(),
        };
        let mut calls = 0;
        let results = measure(
            dir.path(),
            "t",
            Some(Granularity::Emulated),
            &plan,
            |_, _| calls += 1,
        )
        .unwrap();
        assert_eq!(calls, CONFIGS.len());
        let expected: usize = CONFIGS.iter().map(|c| c.map.workloads().len()).sum();
        assert_eq!(results.rows.len(), expected);
        for r in &results.rows {
            let ours = r.map != "LMDB" && r.map != "redb";
            assert!(r.ops_per_sec > 0.0 && r.p50_ns.is_some(), "{r:?}");
            let has_u64_row = r.map != "leaf map" && r.map != "Store leaves";
            assert_eq!(
                r.ratio_to_u64.is_some(),
                ours && has_u64_row && r.keys != "u64",
                "{r:?}"
            );
            assert_eq!(r.fences_per_op.is_some(), ours, "{r:?}");
            if r.workload == "load" {
                assert_eq!(r.ops, 3_000);
                if ours {
                    assert!(r.fences_per_op >= Some(1.0), "an insert fences: {r:?}");
                    assert!(r.media_bytes_per_op > Some(0.0), "{r:?}");
                }
            }
            if r.workload == "C" && ours {
                assert_eq!(r.fences_per_op, Some(0.0), "a lookup does not fence: {r:?}");
            }
        }
        assert!(results
            .rows
            .iter()
            .any(|r| r.keys == "user:%011d" && r.workload == "E"));
        assert!(!results
            .rows
            .iter()
            .any(|r| r.map == "hash map" && r.workload == "E"));
        assert_eq!(results.targets.len(), results::TARGETS.len());
        assert!(results.targets.iter().all(|t| t.measured.is_finite()));
        assert_eq!(results.peers.len(), 2);
        assert_eq!(results.comparison.len(), ByteWorkload::ORDERED.len());
        for c in &results.comparison {
            let scan = c.workload == "E";
            assert!(c.lmdb.is_some() && c.redb.is_some(), "{c:?}");
            assert!(c.ordered_over_lmdb.is_some() && c.ordered_over_redb.is_some());
            assert!(c.leaf_over_lmdb.is_some() && c.leaf_over_redb.is_some());
            assert!(c.store_leaf_over_lmdb.is_some() && c.store_leaf_over_redb.is_some());
            assert_eq!(c.hash_over_lmdb.is_none(), scan, "{c:?}");
            assert_eq!(c.hash_over_redb.is_none(), scan, "{c:?}");
        }
        assert_eq!(results.opens.len(), 3, "each leaf map's open timed");
        assert!(results
            .opens
            .iter()
            .all(|o| o.seconds > 0.0 && o.records == 3_000));
        assert_eq!(results.conditions.threads, 1);
        assert!(results.conditions.granularity.starts_with("emulated"));
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "pool files or peer databases left behind"
        );
    }

    #[test]
    fn every_map_of_sixteen_random_bytes_gets_the_same_keys() {
        let a = Keys::new(KeyKind::Random16, 100, key_seed(7, KeyKind::Random16));
        let b = Keys::new(KeyKind::Random16, 100, key_seed(7, KeyKind::Random16));
        let (Keys::Bytes(a), Keys::Bytes(b)) = (a, b) else {
            panic!("random keys are bytes")
        };
        assert_eq!(a, b);
        assert_ne!(key_seed(7, KeyKind::Random16), key_seed(7, KeyKind::User));
        let plan = ByteKeyPlan::quick().with_records(50).with_ops(40);
        assert_eq!((plan.records, plan.ops, plan.scans), (50, 40, 8));
        assert_eq!(
            plan.workloads(MapKind::Lmdb),
            plan.workloads(MapKind::Ordered),
            "a peer runs the ordered map's operations"
        );
    }
}
