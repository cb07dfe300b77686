//! The YCSB phases: each structure's load and workloads, the same plans run through the YCSB
//! driver on a fresh raw structure and a fresh store each repetition.

use pmem_structures::raw::fastfair::FastFairConfig;

use super::paired::{Pair, Timed};
use super::{Files, StoreBenchError, StorePlan};
use crate::ycsb::store_targets::{with_store_target, StoreMapKind};
use crate::ycsb::{
    plan, run_plan, with_target, KeyDistribution, KeySpace, Op, Plan, Scale, Structure, Target,
    Variant, Workload, YcsbError,
};

/// A structure's YCSB runs: the raw variant and store map they pair, and one plan per
/// workload, in run order, made once and run on both sides every repetition.
pub(super) struct YcsbInputs {
    variant: Variant,
    kind: StoreMapKind,
    runs: Vec<(Workload, Plan)>,
    capacity: u64,
}

impl YcsbInputs {
    pub(super) fn new(
        structure: Structure,
        plan_of: &StorePlan,
    ) -> Result<YcsbInputs, StoreBenchError> {
        let (variant, kind) = match structure {
            Structure::FastFair => (
                Variant::FastFair(FastFairConfig::default().policy),
                StoreMapKind::BTreeMap,
            ),
            _ => (Variant::CcehHelperOff, StoreMapKind::HashMap),
        };
        let Scale { records, ops } = plan_of.ycsb;
        let mut keys = KeySpace {
            loaded: records,
            next_insert: 0,
        };
        let mut runs = Vec::new();
        let mut capacity = records;
        let workloads = [Workload::Load]
            .into_iter()
            .chain(Workload::RUNS)
            .filter(|w| !w.scans() || structure.no_scan_reason().is_none());
        for workload in workloads {
            let p = plan(
                workload,
                KeyDistribution::Uniform,
                keys,
                ops,
                1,
                plan_of.seed,
            )
            .map_err(YcsbError::from)?;
            keys.next_insert = p.next_insert;
            capacity = capacity.saturating_add(workload.max_inserts(ops) + 1);
            runs.push((workload, p));
        }
        Ok(YcsbInputs {
            variant,
            kind,
            runs,
            capacity,
        })
    }

    /// The row names and sizes, in run order.
    pub(super) fn pairs(&self) -> Vec<Pair> {
        self.runs
            .iter()
            .map(|(w, p)| {
                let operation = match w {
                    Workload::Load => "YCSB load (one insert per record)".to_string(),
                    Workload::InsertOnly => "YCSB insert-only (1 thread)".to_string(),
                    w => format!("YCSB {} (uniform, 1 thread)", w.name()),
                };
                Pair::new(self.variant.structure(), operation, p.ops())
            })
            .collect()
    }
}

/// One repetition of a structure's YCSB runs into `pairs` (one per run): a fresh raw
/// structure and a fresh store, each run on both back to back.
pub(super) fn ycsb_repetition(
    files: &Files<'_>,
    inputs: &YcsbInputs,
    rep: usize,
    pairs: &mut [Pair],
) -> Result<(), StoreBenchError> {
    let setup = crate::ycsb::Setup {
        dir: files.dir.to_path_buf(),
        prefix: files.prefix.to_string(),
        granularity: files.granularity,
    };
    let variant = inputs.variant;
    with_target(variant, &setup, inputs.capacity, |raw| {
        with_store_target(inputs.kind, &setup, inputs.capacity, |store| {
            for ((workload, p), pair) in inputs.runs.iter().zip(pairs.iter_mut()) {
                let distribution = workload.chooses_keys().then_some(KeyDistribution::Uniform);
                let ops: Vec<Op> = p.threads.concat();
                // A chunk of the plan's operations, as a plan of its own. Not batched: the
                // store has no batched insert, so both sides load one call per record.
                let run = |target: &dyn Target, chunk: &[Op]| -> Result<Timed, StoreBenchError> {
                    let part = Plan {
                        threads: vec![chunk.to_vec()],
                        next_insert: p.next_insert,
                    };
                    let row = run_plan(target, variant, *workload, distribution, &part, false)?;
                    Ok(Timed {
                        secs: row.seconds,
                        done: row.ops,
                    })
                };
                let n = ops.len() as u64;
                pair.measure(
                    rep,
                    &ops,
                    n,
                    "operations run",
                    |c| run(raw, c),
                    |c| run(store, c),
                )?;
            }
            Ok(())
        })
    })
}
