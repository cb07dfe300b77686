//! The workloads of the byte-key section ([`ByteWorkload`]), their operations fixed before
//! timing ([`operations`]), and the timed run of a list of them on a map ([`run`]).

use std::time::Instant;

use pmem_ordering::{thread_stats, Stats};
use serde::Serialize;

use super::bench_map::{BenchMap, MapKind};
use super::error::ByteKeyError;
use crate::keys::{below, SplitMix64};
use crate::phase::{check_count, ns};

/// Records each scan of workload E visits (the scan target is stated for 100-record scans).
pub const SCAN_RECORDS: usize = 100;

/// Every this many calls, one is timed on its own (and its fences counted) for the latency
/// percentiles and the median fences per call.
pub const LATENCY_EVERY: usize = 8;

/// A workload of the section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum ByteWorkload {
    /// Every record inserted once, one `insert` each.
    Load,
    /// 50% reads, 50% updates (`upsert` of a new value of the same size).
    A,
    /// 95% reads, 5% updates.
    B,
    /// Reads only.
    C,
    /// Range scans of [`SCAN_RECORDS`] records from a loaded key (ordered maps only).
    E,
}

impl ByteWorkload {
    /// The hash maps' workloads, in run order.
    pub const HASH: [ByteWorkload; 4] = [
        ByteWorkload::Load,
        ByteWorkload::A,
        ByteWorkload::B,
        ByteWorkload::C,
    ];

    /// The ordered maps' workloads, in run order.
    pub const ORDERED: [ByteWorkload; 5] = [
        ByteWorkload::Load,
        ByteWorkload::A,
        ByteWorkload::B,
        ByteWorkload::C,
        ByteWorkload::E,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            ByteWorkload::Load => "load",
            ByteWorkload::A => "A",
            ByteWorkload::B => "B",
            ByteWorkload::C => "C",
            ByteWorkload::E => "E",
        }
    }

    /// What one operation is.
    pub fn operation(self) -> &'static str {
        match self {
            ByteWorkload::Load => "insert",
            ByteWorkload::A => "50% get, 50% upsert",
            ByteWorkload::B => "95% get, 5% upsert",
            ByteWorkload::C => "get",
            ByteWorkload::E => "range scan of 100",
        }
    }

    /// The share of updates among its operations, in percent.
    fn update_percent(self) -> u64 {
        match self {
            ByteWorkload::A => 50,
            ByteWorkload::B => 5,
            _ => 0,
        }
    }

    /// The most updates `ops` operations make (each writes a new record).
    pub fn max_updates(self, ops: u64) -> u64 {
        (ops * self.update_percent()).div_ceil(100)
    }
}

/// One operation on a loaded record, fixed before timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Insert the record (at version 0).
    Insert(u32),
    /// Read the record and check its value.
    Read(u32),
    /// Replace the record's value with its value at this version.
    Update(u32, u32),
    /// Visit [`SCAN_RECORDS`] records in key order from the record's key.
    Scan(u32),
}

/// The operations of `workload` on a map of `records` records: the load inserts records
/// `0..records` in order (their keys are in a random order); the others make `ops` operations
/// on uniformly chosen records, from `seed`.
pub fn operations(workload: ByteWorkload, records: u64, ops: u64, seed: u64) -> Vec<Op> {
    if workload == ByteWorkload::Load {
        return (0..records as u32).map(Op::Insert).collect();
    }
    let mut rng = SplitMix64::new(seed ^ ((workload as u64) << 56));
    let mut version = 0u32;
    (0..ops)
        .map(|_| {
            let record = below(&mut rng, records.max(1)) as u32;
            if workload == ByteWorkload::E {
                Op::Scan(record)
            } else if below(&mut rng, 100) < workload.update_percent() {
                // Never version 0, the load's: an update is told apart from the loaded value.
                version = version.wrapping_add(1).max(1);
                Op::Update(record, version)
            } else {
                Op::Read(record)
            }
        })
        .collect()
}

/// What one timed run measured.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Operations run.
    pub ops: u64,
    /// Seconds, the whole list back to back.
    pub seconds: f64,
    /// The thread's persistence counters over the run.
    pub stats: Stats,
    /// Nanoseconds of every [`LATENCY_EVERY`]th call.
    pub latencies: Vec<f64>,
    /// Fences of every [`LATENCY_EVERY`]th call.
    pub call_fences: Vec<u64>,
}

/// What a run's operations returned, counted to check them after the timing.
#[derive(Default)]
struct Outcomes {
    inserted: u64,
    found: u64,
    replaced: u64,
    scanned_short: u64,
}

impl Outcomes {
    fn add(&mut self, op: Op, got: u64) {
        match op {
            Op::Insert(_) => self.inserted += got,
            Op::Read(_) => self.found += got,
            Op::Update(..) => self.replaced += got,
            Op::Scan(_) => self.scanned_short += u64::from(got == 0),
        }
    }
}

fn call(map: &mut dyn BenchMap, op: Op) -> Result<u64, ByteKeyError> {
    Ok(match op {
        Op::Insert(r) => u64::from(map.insert(r as usize, 0)?),
        Op::Read(r) => u64::from(map.read(r as usize)?),
        Op::Update(r, v) => u64::from(map.update(r as usize, v)?),
        Op::Scan(r) => {
            // A scan from one of the last keys visits fewer records; none at all is a bug.
            u64::from(map.scan(r as usize, SCAN_RECORDS)? > 0)
        }
    })
}

/// Run `ops` on `map`, timed as one run, every [`LATENCY_EVERY`]th call also timed and its
/// fences counted on its own; then check that every insert inserted, every read found its
/// record, every update replaced a value and every scan visited a record (`label` names the
/// run in the error otherwise).
pub fn run(
    map: &mut dyn BenchMap,
    ops: &[Op],
    label: impl Fn() -> String,
) -> Result<Measured, ByteKeyError> {
    let mut latencies = Vec::with_capacity(ops.len() / LATENCY_EVERY + 1);
    let mut call_fences = Vec::with_capacity(ops.len() / LATENCY_EVERY + 1);
    let mut outcomes = Outcomes::default();
    let before = thread_stats();
    let start = Instant::now();
    for (i, &op) in ops.iter().enumerate() {
        let got = if i.is_multiple_of(LATENCY_EVERY) {
            let fences = thread_stats().fences;
            let t = Instant::now();
            let got = call(map, op)?;
            latencies.push(ns(t.elapsed()));
            call_fences.push(thread_stats().fences - fences);
            got
        } else {
            call(map, op)?
        };
        outcomes.add(op, got);
    }
    let seconds = start.elapsed().as_secs_f64();
    let stats = thread_stats() - before;
    let count = |pred: fn(&Op) -> bool| ops.iter().filter(|op| pred(op)).count() as u64;
    check_count(
        &label,
        count(|op| matches!(op, Op::Insert(_))),
        outcomes.inserted,
        "inserts inserted",
    )?;
    check_count(
        &label,
        count(|op| matches!(op, Op::Read(_))),
        outcomes.found,
        "reads found their record",
    )?;
    check_count(
        &label,
        count(|op| matches!(op, Op::Update(..))),
        outcomes.replaced,
        "updates replaced a value",
    )?;
    check_count(&label, 0, outcomes.scanned_short, "scans found nothing")?;
    Ok(Measured {
        ops: ops.len() as u64,
        seconds,
        stats,
        latencies,
        call_fences,
    })
}

impl MapKind {
    /// Its workloads, in run order: every map but the hash map has an order, so E.
    pub fn workloads(self) -> &'static [ByteWorkload] {
        match self {
            MapKind::Hash => &ByteWorkload::HASH,
            MapKind::Ordered
            | MapKind::Leaf
            | MapKind::StoreLeaf
            | MapKind::Lmdb
            | MapKind::Redb => &ByteWorkload::ORDERED,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_mixes_follow_the_workloads() {
        let load = operations(ByteWorkload::Load, 1_000, 5, 1);
        assert_eq!(load.len(), 1_000);
        assert_eq!(load[999], Op::Insert(999));
        let share = |w| {
            let ops = operations(w, 1_000, 20_000, 1);
            assert_eq!(ops.len(), 20_000);
            let updates = ops.iter().filter(|o| matches!(o, Op::Update(..))).count();
            assert!(ops.iter().all(|o| match o {
                Op::Read(r) | Op::Update(r, _) | Op::Scan(r) => *r < 1_000,
                Op::Insert(_) => false,
            }));
            updates as f64 / 20_000.0
        };
        assert!((share(ByteWorkload::A) - 0.5).abs() < 0.02);
        assert!((share(ByteWorkload::B) - 0.05).abs() < 0.01);
        assert_eq!(share(ByteWorkload::C), 0.0);
        let scans = operations(ByteWorkload::E, 1_000, 100, 1);
        assert!(scans.iter().all(|o| matches!(o, Op::Scan(_))));
        assert!(operations(ByteWorkload::A, 1_000, 100, 1)
            .iter()
            .all(|o| !matches!(o, Op::Update(_, 0))));
        assert_eq!(
            operations(ByteWorkload::B, 1_000, 100, 9),
            operations(ByteWorkload::B, 1_000, 100, 9)
        );
        assert_eq!(ByteWorkload::A.max_updates(3), 2);
        assert_eq!(ByteWorkload::C.max_updates(3), 0);
    }
}
