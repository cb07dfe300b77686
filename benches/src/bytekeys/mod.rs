//! Byte keys through the `Store`: the typed maps of records beside the `u64` path.
//!
//! Issue 14 gave the store's maps typed keys and values; maps whose key or value does not fit
//! 8 bytes keep each pair in a record of its own (an insert: record + intent line, a fence,
//! then the allocation bit + slot, a fence). This section measures them at the byte-key speed
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
//! uniformly chosen loaded key). Keys and operations are fixed from a seed before timing;
//! each run is timed whole, every [`workload::LATENCY_EVERY`]th call also on its own (latency
//! percentiles, and its fences: the median is an insert without a split), with the thread's
//! persistence counters read around the run (fences, flushes, bytes to the media per
//! operation). Every result is checked (inserts inserted, reads found their record's value,
//! updates replaced one, scans visited pairs).
//!
//! Files: `keyset.rs` (keys and values), `maps.rs` (the maps and how they are driven),
//! `workload.rs` (operations and the timed run), `results.rs` (rows, targets, errors); this
//! file runs them ([`measure`]).
//!
//! [`StoreFile`]: crate::poolfile::StoreFile

pub mod keyset;
pub mod maps;
pub mod results;
pub mod workload;

pub use maps::{MapConfig, MapKind, CONFIGS};
pub use results::{check_targets, ByteKeyError, ByteKeyResults, ByteKeyRow, TargetCheck};
pub use workload::{ByteWorkload, LATENCY_EVERY, SCAN_RECORDS};

use std::path::Path;
use std::time::Instant;

use pmem_ordering::Granularity;

use crate::phase::{percentile, timer_overhead_ns};
use crate::poolfile::StoreFile;
use keyset::Keys;
use workload::{operations, run, Measured};

/// How much the section measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteKeyPlan {
    /// Records loaded into each map.
    pub records: u64,
    /// Operations of workloads A, B and C.
    pub ops: u64,
    /// Scans of workload E.
    pub scans: u64,
    /// Seed of the keys and operations.
    pub seed: u64,
}

impl ByteKeyPlan {
    /// The default run: 1M records (the size the speed targets are stated at), 1M
    /// operations per point workload, 200 000 scans.
    pub fn full() -> ByteKeyPlan {
        ByteKeyPlan {
            records: 1_000_000,
            ops: 1_000_000,
            scans: 200_000,
            seed: 0xB17E,
        }
    }

    /// The `--quick` run: 20 000 records and operations, 4 000 scans.
    pub fn quick() -> ByteKeyPlan {
        ByteKeyPlan {
            records: 20_000,
            ops: 20_000,
            scans: 4_000,
            seed: 0xB17E,
        }
    }

    /// The workloads of a map of `kind`, with their operations.
    fn workloads(&self, kind: MapKind) -> Vec<(ByteWorkload, Vec<workload::Op>)> {
        let list: &[ByteWorkload] = match kind {
            MapKind::Hash => &ByteWorkload::HASH,
            MapKind::Ordered => &ByteWorkload::ORDERED,
        };
        list.iter()
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

/// Measure every map of [`CONFIGS`] under `plan`, each in a fresh store in a pool file named
/// `{prefix}-bytekeys.pool` in `dir` (removed when its map is done) with `granularity` forced
/// (`None`: detected). `progress(done, maps)` is called after each map.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &ByteKeyPlan,
    mut progress: impl FnMut(usize, usize),
) -> Result<ByteKeyResults, ByteKeyError> {
    let start = Instant::now();
    let timer_ns = timer_overhead_ns();
    let mut rows: Vec<ByteKeyRow> = Vec::new();
    for (i, config) in CONFIGS.iter().enumerate() {
        let workloads = plan.workloads(config.map);
        let new_records: u64 = workloads
            .iter()
            .map(|(w, ops)| w.max_updates(ops.len() as u64))
            .sum();
        let keys = Keys::new(config.keys, plan.records, plan.seed ^ i as u64);
        let file = StoreFile::create(
            dir,
            &format!("{prefix}-bytekeys.pool"),
            config.pool_bytes(plan.records, new_records),
            granularity,
        )?;
        let measured = maps::with_map(&file, *config, keys, |map| {
            workloads
                .iter()
                .map(|(w, ops)| {
                    let label =
                        || format!("{} {}, {}", config.map.name(), config.label(), w.name());
                    run(map, ops, label).map(|m| (*w, m))
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        drop(file);
        rows.extend(measured.iter().map(|(w, m)| row(config, *w, m)));
        progress(i + 1, CONFIGS.len());
    }
    add_ratios(&mut rows);
    let targets = check_targets(&rows);
    Ok(ByteKeyResults {
        records: plan.records,
        ops: plan.ops,
        scans: plan.scans,
        latency_every: LATENCY_EVERY,
        timer_ns,
        rows,
        targets,
        total_seconds: start.elapsed().as_secs_f64(),
    })
}

/// The row of `workload` on a map of `config`, from what its run measured.
fn row(config: &MapConfig, workload: ByteWorkload, m: &Measured) -> ByteKeyRow {
    let per_op = |total: u64| total as f64 / m.ops.max(1) as f64;
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
        median_call_fences: (!fences.is_empty()).then(|| percentile(&fences, 0.5)),
        ratio_to_u64: None,
    }
}

/// Set every byte-key row's ratio to the `u64` row of the same map kind and workload.
fn add_ratios(rows: &mut [ByteKeyRow]) {
    let u64_rates: Vec<(String, String, f64)> = rows
        .iter()
        .filter(|r| r.keys == keyset::KeyKind::U64.name())
        .map(|r| (r.map.clone(), r.workload.clone(), r.ops_per_sec))
        .collect();
    for r in rows.iter_mut() {
        if r.keys == keyset::KeyKind::U64.name() {
            continue;
        }
        r.ratio_to_u64 = u64_rates
            .iter()
            .find(|(map, workload, _)| *map == r.map && *workload == r.workload)
            .map(|(_, _, rate)| r.ops_per_sec / rate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_map_runs_its_workloads_with_counters_and_ratios() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let plan = ByteKeyPlan {
            records: 3_000,
            ops: 2_000,
            scans: 300,
            seed: 5,
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
        let hashes = CONFIGS.iter().filter(|c| c.map == MapKind::Hash).count();
        let ordered = CONFIGS.len() - hashes;
        assert_eq!(results.rows.len(), hashes * 4 + ordered * 5);
        for r in &results.rows {
            assert!(r.ops_per_sec > 0.0 && r.p50_ns.is_some(), "{r:?}");
            assert_eq!(r.ratio_to_u64.is_some(), r.keys != "u64", "{r:?}");
            if r.workload == "load" {
                assert_eq!(r.ops, 3_000);
                assert!(r.fences_per_op >= 1.0, "an insert fences: {r:?}");
                assert!(r.media_bytes_per_op > 0.0, "{r:?}");
            }
            if r.workload == "C" {
                assert_eq!(r.fences_per_op, 0.0, "a lookup does not fence: {r:?}");
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
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "pool files left behind"
        );
    }
}
