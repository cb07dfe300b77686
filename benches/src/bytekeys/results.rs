//! What the byte-key section reports ([`ByteKeyResults`]: one [`ByteKeyRow`] per map and
//! workload, ours over the peers' figures ([`PeerComparison`]) with the run's conditions
//! ([`Conditions`]), and the speed targets checked, [`TargetCheck`]) and why it fails
//! ([`super::ByteKeyError`]).

use std::path::PathBuf;

use serde::Serialize;

use super::bench_map::MapKind;
use super::keyset::KeyKind;
use super::maps::MapConfig;
use super::peers::PeerInfo;
use super::workload::ByteWorkload;

/// One workload on one map.
#[derive(Clone, Debug, Serialize)]
pub struct ByteKeyRow {
    /// `hash map`, `ordered map`, or a peer: `LMDB`, `redb`.
    pub map: String,
    /// The keys (`u64`, `16 random bytes`, `user:%011d`).
    pub keys: String,
    /// Bytes of a key.
    pub key_bytes: usize,
    /// Bytes of a value.
    pub value_bytes: usize,
    /// The workload's name (`load`, `A`, `B`, `C`, `E`).
    pub workload: String,
    /// What one operation is.
    pub operation: String,
    /// Operations run.
    pub ops: u64,
    /// Seconds of the run.
    pub seconds: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Median latency of the sampled calls, in nanoseconds.
    pub p50_ns: Option<f64>,
    /// 99th percentile latency.
    pub p99_ns: Option<f64>,
    /// 99.9th percentile latency.
    pub p999_ns: Option<f64>,
    /// Fences per operation, over the whole run (`None` for a peer: its syncs are not ours
    /// to count).
    pub fences_per_op: Option<f64>,
    /// Cache lines flushed per operation (`None` for a peer).
    pub flushes_per_op: Option<f64>,
    /// Bytes sent to persistent memory per operation: flushed lines plus non-temporal bytes
    /// (`None` for a peer).
    pub media_bytes_per_op: Option<f64>,
    /// Median fences of the sampled calls: an insert without a split, for the load (`None`
    /// for a peer).
    pub median_call_fences: Option<f64>,
    /// This map's ops/s over the `u64` path's for the same map kind and workload, measured in
    /// the same run (`None` for the `u64` rows themselves).
    pub ratio_to_u64: Option<f64>,
}

impl ByteKeyRow {
    /// Whether this row is `workload` on a map of `config`.
    pub fn is(&self, config: &MapConfig, workload: ByteWorkload) -> bool {
        self.map == config.map.name()
            && self.keys == config.keys.name()
            && self.value_bytes == config.value_bytes
            && self.workload == workload.name()
    }
}

/// One of the byte-key speed targets, checked against a row of this run.
#[derive(Clone, Debug, Serialize)]
pub struct TargetCheck {
    /// What is measured, as the target states it.
    pub target: String,
    /// The row it reads: map, keys and workload.
    pub row: String,
    /// The measured figure.
    pub measured: f64,
    /// The bound.
    pub bound: f64,
    /// Whether the bound is an upper one (fences) rather than a lower one (ops/s).
    pub at_most: bool,
    /// Whether the measured figure meets the bound.
    pub met: bool,
}

/// The byte-key speed targets (16-byte keys, 100-byte values, stated at 1M keys): what, on which map
/// and workload, the figure read (`true`: median fences per call, else ops/s), the bound.
pub const TARGETS: [(&str, MapKind, ByteWorkload, bool, f64); 6] = [
    (
        "hash map inserts >= 1 M/s",
        MapKind::Hash,
        ByteWorkload::Load,
        false,
        1e6,
    ),
    (
        "hash map lookups >= 3 M/s",
        MapKind::Hash,
        ByteWorkload::C,
        false,
        3e6,
    ),
    (
        "hash map <= 2 fences per insert without a split",
        MapKind::Hash,
        ByteWorkload::Load,
        true,
        2.0,
    ),
    (
        "B+-tree (FAST) inserts >= 500 k/s",
        MapKind::Ordered,
        ByteWorkload::Load,
        false,
        5e5,
    ),
    (
        "B+-tree (FAST) lookups >= 1.5 M/s",
        MapKind::Ordered,
        ByteWorkload::C,
        false,
        1.5e6,
    ),
    (
        "B+-tree (FAST) 100-record range scans >= 200 k/s",
        MapKind::Ordered,
        ByteWorkload::E,
        false,
        2e5,
    ),
];

/// The targets checked against `rows` (16 random bytes -> 100 B rows; a target whose row was
/// not measured is left out).
pub fn check_targets(rows: &[ByteKeyRow]) -> Vec<TargetCheck> {
    TARGETS
        .iter()
        .filter_map(|&(target, map, workload, fences, bound)| {
            let config = MapConfig {
                map,
                keys: KeyKind::Random16,
                value_bytes: 100,
            };
            let row = rows.iter().find(|r| r.is(&config, workload))?;
            let measured = if fences {
                row.median_call_fences?
            } else {
                row.ops_per_sec
            };
            Some(TargetCheck {
                target: target.to_string(),
                row: format!("{} {}, {}", map.name(), config.label(), workload.name()),
                measured,
                bound,
                at_most: fences,
                met: if fences {
                    measured <= bound
                } else {
                    measured >= bound
                },
            })
        })
        .collect()
}

/// One workload on our maps and on the peers, 16 random bytes -> 100 B each, from one run:
/// ops/s and ours over each peer's.
#[derive(Clone, Debug, Serialize)]
pub struct PeerComparison {
    /// The workload's name (`load`, `A`, `B`, `C`, `E`).
    pub workload: String,
    /// What one operation is.
    pub operation: String,
    /// Our hash map's ops/s (`None`: not measured, or E, which it has not).
    pub hash: Option<f64>,
    /// Our ordered map's ops/s.
    pub ordered: Option<f64>,
    /// Our leaf map's ops/s (raw).
    pub leaf: Option<f64>,
    /// The same leaves' ops/s through the store's handle.
    pub store_leaf: Option<f64>,
    /// LMDB's ops/s.
    pub lmdb: Option<f64>,
    /// redb's ops/s.
    pub redb: Option<f64>,
    /// Hash map / LMDB.
    pub hash_over_lmdb: Option<f64>,
    /// Ordered map / LMDB.
    pub ordered_over_lmdb: Option<f64>,
    /// Hash map / redb.
    pub hash_over_redb: Option<f64>,
    /// Ordered map / redb.
    pub ordered_over_redb: Option<f64>,
    /// Leaf map / LMDB.
    pub leaf_over_lmdb: Option<f64>,
    /// Leaf map / redb.
    pub leaf_over_redb: Option<f64>,
    /// Store leaves / LMDB.
    pub store_leaf_over_lmdb: Option<f64>,
    /// Store leaves / redb.
    pub store_leaf_over_redb: Option<f64>,
}

/// One open of a map that rebuilds its DRAM index from the media (the leaf map), timed after
/// its workloads.
#[derive(Clone, Debug, Serialize)]
pub struct OpenTime {
    /// The map's name.
    pub map: String,
    /// Its keys and values.
    pub label: String,
    /// Records it held (loaded; the workloads insert none).
    pub records: u64,
    /// Seconds of the open.
    pub seconds: f64,
}

/// Under what conditions the section measured, printed with its numbers.
#[derive(Clone, Debug, Serialize)]
pub struct Conditions {
    /// Threads running the operations (the section runs one).
    pub threads: usize,
    /// Where every map's files were: the pool directory.
    pub dir: PathBuf,
    /// Whether that directory is on tmpfs (DRAM); `None`: unknown.
    pub tmpfs: Option<bool>,
    /// Our pools' granularity, by name (`emulated`: flushes and fences issued on DRAM).
    pub granularity: String,
    /// Logical cores of the machine.
    pub cores: usize,
    /// The 1, 5 and 15-minute load averages when the section started (`None`: unreadable).
    pub load_before: Option<[f64; 3]>,
    /// The same when it ended.
    pub load_after: Option<[f64; 3]>,
}

impl Conditions {
    /// The one-minute load average above which the machine counts as loaded: the section's
    /// own thread accounts for about 1.
    pub const LOADED_ABOVE: f64 = 1.5;

    /// Whether other work ran beside the section: either one-minute load average above
    /// [`Conditions::LOADED_ABOVE`] (`None`: unknown).
    pub fn loaded(&self) -> Option<bool> {
        let before = self.load_before?[0];
        let after = self.load_after?[0];
        Some(before.max(after) > Self::LOADED_ABOVE)
    }
}

/// The byte-key section of a run.
#[derive(Clone, Debug, Serialize)]
pub struct ByteKeyResults {
    /// Records loaded into each map.
    pub records: u64,
    /// Operations of workloads A, B and C.
    pub ops: u64,
    /// Scans of workload E.
    pub scans: u64,
    /// Every this many calls one was timed on its own.
    pub latency_every: usize,
    /// The median cost of one latency sample's two `Instant` reads, in nanoseconds (included
    /// in every latency).
    pub timer_ns: f64,
    /// Under what conditions.
    pub conditions: Conditions,
    /// How each peer measured was built and driven.
    pub peers: Vec<PeerInfo>,
    /// One row per map and workload, in run order.
    pub rows: Vec<ByteKeyRow>,
    /// The opens timed (the leaf maps').
    pub opens: Vec<OpenTime>,
    /// Ours against the peers, per workload (empty when no peer, or none of ours of their
    /// keys and values, was measured).
    pub comparison: Vec<PeerComparison>,
    /// The byte-key speed targets against this run.
    pub targets: Vec<TargetCheck>,
    /// Wall time of the section, set-up included.
    pub total_seconds: f64,
}
