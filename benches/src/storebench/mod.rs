//! The store path against the raw structures, paired in one run.
//!
//! The speed requirement: the `Store` path costs nothing measurable; CCEH and
//! FAST&FAIR through a [`Store`](pmem_structures::Store)'s handles run within 3% of the raw
//! structures ([`TARGET_RATIO`]). [`measure`] runs every operation both ways in the same run,
//! interleaved, and reports store ops/s over raw ops/s per operation.
//!
//! Each of [`StorePlan::repetitions`] repetitions makes, per structure measured, a fresh raw
//! structure exactly as its own section does (its own heap, batched fences, in its own pool
//! file: [`CcehHeap`], [`FastFairHeap`], default configuration) and a fresh store in its own
//! pool file of the same size ([`StoreFile`]: `Store::create`, batched fences too), holding one
//! map of the same configuration (`Store::hash_map_with` with [`CcehConfig::default`],
//! `Store::btree_map` with [`FastFairConfig::default`]). Both live through the repetition, and
//! each phase is cut into [`CHUNKS`] chunks of its operations, each chunk run on both sides
//! back to back, the order alternating from chunk to chunk (and each repetition starting with
//! the side the previous one did not), so that a burst of noise on a shared machine, and the
//! cache warmth one side leaves the other, land on both alike. A side's rate is the phase's
//! operations over the sum of its chunks' times. The phases:
//!
//! * CCEH: every key inserted (one call each), looked up (hits, random order) and removed
//!   (another random order): the single-call rows of [`crate::ccehbench`]. Its batched loads
//!   (`insert_batch`, helper thread off or on) have no store equivalent and stay raw-only.
//! * FAST&FAIR: every key inserted, looked up, then [`StorePlan::scans`] scans of
//!   [`SCAN_KEYS`] pairs from random keys (`range(start..)` taking [`SCAN_KEYS`]): the rows of
//!   [`crate::fastfairbench`] for the default (FAST) policy.
//! * YCSB, per structure, through the YCSB driver ([`run_plan`]) with the same plans on both
//!   sides: the load (one insert per record on both sides), then workloads A, B, C, E
//!   (FAST&FAIR only) and insert-only, uniform keys, one thread.
//!
//! No latency is sampled: each timed chunk is its calls back to back (a YCSB chunk is a plan
//! of its own for [`run_plan`], which times it). A repetition's store/raw ratio is the median
//! of its chunks' ratios (a burst of noise hitting one side of one chunk moves a sum, not a
//! median); a row's ratio is the median over the repetitions; its raw and store ops/s are the
//! medians of each side's rates (the operations over the sum of the chunks' times).
//!
//! Its files: `plan.rs` (what is measured, the results, the error), `paired.rs` (one operation
//! run both ways, chunk by chunk), `single_calls.rs` (the CCEH and FAST&FAIR single-call
//! phases), `ycsb_phases.rs` (the YCSB phases); this file runs them all ([`measure`]).
//!
//! [`CcehHeap`]: crate::ccehbench::CcehHeap
//! [`FastFairHeap`]: crate::fastfairbench::FastFairHeap
//! [`StoreFile`]: crate::poolfile::StoreFile
//! [`CcehConfig::default`]: pmem_structures::raw::cceh::CcehConfig::default
//! [`FastFairConfig::default`]: pmem_structures::raw::fastfair::FastFairConfig::default
//! [`SCAN_KEYS`]: crate::fastfairbench::SCAN_KEYS
//! [`run_plan`]: crate::ycsb::run_plan

mod paired;
mod plan;
mod single_calls;
mod ycsb_phases;

pub use plan::{StoreBenchError, StorePathResults, StorePathRow, StorePlan, CHUNKS, TARGET_RATIO};

use std::path::Path;

use pmem_ordering::Granularity;

use crate::ccehbench::CcehOp;
use crate::fastfairbench::FastFairOp;
use crate::keys::{random_keys, shuffled};
use crate::ycsb::Structure;
use paired::Pair;
use single_calls::{cceh_repetition, fastfair_repetition, CcehInputs, FastFairInputs};
use ycsb_phases::{ycsb_repetition, YcsbInputs};

/// Where the pool files go.
struct Files<'a> {
    dir: &'a Path,
    prefix: &'a str,
    granularity: Option<Granularity>,
}

impl Files<'_> {
    fn name(&self, what: &str) -> String {
        format!("{}-{what}.pool", self.prefix)
    }
}

/// Run the paired measurements of the module's documentation for `structures` (CCEH and
/// FAST&FAIR; others are ignored) on pool files named `{prefix}-*.pool` in `dir`, with
/// `granularity` forced (`None`: detected). `progress(repetition, repetitions)` is called after
/// each repetition.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan_of: &StorePlan,
    structures: &[Structure],
    mut progress: impl FnMut(usize, usize),
) -> Result<StorePathResults, StoreBenchError> {
    let files = Files {
        dir,
        prefix,
        granularity,
    };
    let cceh = structures.contains(&Structure::Cceh).then(|| {
        let keys = random_keys(plan_of.cceh_keys, 0xCCE4);
        CcehInputs {
            get_order: shuffled(&keys, 0x6E7),
            remove_order: shuffled(&keys, 0x4E3),
            keys,
        }
    });
    let fastfair = structures
        .contains(&Structure::FastFair)
        .then(|| FastFairInputs::new(plan_of.fastfair_keys, plan_of.scans));
    let ycsb: Vec<YcsbInputs> = [Structure::Cceh, Structure::FastFair]
        .into_iter()
        .filter(|s| structures.contains(s))
        .map(|s| YcsbInputs::new(s, plan_of))
        .collect::<Result<_, _>>()?;

    let mut cceh_pairs = [CcehOp::Insert, CcehOp::Get, CcehOp::Remove]
        .map(|op| Pair::new(Structure::Cceh, op.name(), plan_of.cceh_keys));
    let mut fastfair_pairs = FastFairOp::ALL.map(|op| {
        let ops = match op {
            FastFairOp::Scan => plan_of.scans as u64,
            _ => plan_of.fastfair_keys,
        };
        Pair::new(Structure::FastFair, op.name(), ops)
    });
    let mut ycsb_pairs: Vec<Vec<Pair>> = ycsb.iter().map(YcsbInputs::pairs).collect();

    for rep in 0..plan_of.repetitions {
        if let Some(inputs) = &cceh {
            cceh_repetition(&files, inputs, rep, &mut cceh_pairs)?;
        }
        if let Some(inputs) = &fastfair {
            fastfair_repetition(&files, inputs, rep, &mut fastfair_pairs)?;
        }
        for (inputs, pairs) in ycsb.iter().zip(&mut ycsb_pairs) {
            ycsb_repetition(&files, inputs, rep, pairs)?;
        }
        progress(rep + 1, plan_of.repetitions);
    }

    let mut pairs: Vec<&Pair> = Vec::new();
    if cceh.is_some() {
        pairs.extend(&cceh_pairs);
    }
    if fastfair.is_some() {
        pairs.extend(&fastfair_pairs);
    }
    pairs.extend(ycsb_pairs.iter().flatten());
    Ok(StorePathResults {
        repetitions: plan_of.repetitions,
        cceh_keys: cceh.is_some().then_some(plan_of.cceh_keys),
        fastfair_keys: fastfair.is_some().then_some(plan_of.fastfair_keys),
        scans: plan_of.scans,
        ycsb: plan_of.ycsb,
        target_ratio: TARGET_RATIO,
        rows: pairs.into_iter().map(Pair::row).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ycsb::Scale;

    fn tiny() -> StorePlan {
        StorePlan {
            cceh_keys: 2_000,
            fastfair_keys: 2_000,
            scans: 20,
            ycsb: Scale {
                records: 500,
                ops: 500,
            },
            repetitions: 2,
            seed: 1,
        }
    }

    #[test]
    fn every_operation_is_measured_both_ways_with_a_ratio() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let all = [Structure::Cceh, Structure::FastFair, Structure::Datalog];
        let results = measure(
            dir.path(),
            "t",
            Some(Granularity::Emulated),
            &tiny(),
            &all,
            |_, _| {},
        )
        .unwrap();
        let names: Vec<(&str, &str)> = results
            .rows
            .iter()
            .map(|r| (r.structure.as_str(), r.operation.as_str()))
            .collect();
        // CCEH: 3 single calls + load, A, B, C, insert-only; FAST&FAIR: 3 + load, A, B, C, E,
        // insert-only.
        assert_eq!(names.len(), 3 + 5 + 3 + 6, "{names:?}");
        assert!(names.contains(&("CCEH", "remove (random order)")));
        assert!(names.contains(&("FAST&FAIR", "scan of 100 keys")));
        assert!(names.contains(&("FAST&FAIR", "YCSB E (uniform, 1 thread)")));
        assert!(!names.contains(&("CCEH", "YCSB E (uniform, 1 thread)")));
        for row in &results.rows {
            assert_eq!(row.ratio_samples.len(), 2, "{row:?}");
            assert!(row.raw_ops_per_sec > 0.0 && row.store_ops_per_sec > 0.0);
            assert!(row.ratio.is_finite() && row.ratio > 0.0, "{row:?}");
            assert_eq!(row.within_target, row.ratio >= TARGET_RATIO);
        }
        assert!(
            std::fs::read_dir(dir.path()).unwrap().next().is_none(),
            "pool files left behind"
        );
    }

    #[test]
    fn only_the_structures_asked_for_are_measured() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let results = measure(
            dir.path(),
            "t",
            Some(Granularity::Emulated),
            &tiny(),
            &[Structure::FastFair],
            |_, _| {},
        )
        .unwrap();
        assert!(results.rows.iter().all(|r| r.structure == "FAST&FAIR"));
        assert_eq!(results.rows.len(), 3 + 6);
        assert_eq!(results.cceh_keys, None);
    }
}
