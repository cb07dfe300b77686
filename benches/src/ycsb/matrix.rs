//! What the YCSB runner runs: the scale of a run, and the matrix of variants, workloads, key
//! distributions and thread counts [`super::run_matrix`] goes through.

use serde::Serialize;

use super::targets::Variant;
use super::{KeyDistribution, Workload};

/// How much one run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Scale {
    /// Records loaded into each structure.
    pub records: u64,
    /// Operations of each workload run.
    pub ops: u64,
}

impl Default for Scale {
    /// The default run: 200 000 records, 200 000 operations per workload run (the whole
    /// matrix of [`Matrix::new`] takes about 25 s on the 2-core VM of docs/results).
    fn default() -> Scale {
        Scale {
            records: 200_000,
            ops: 200_000,
        }
    }
}

impl Scale {
    /// The `--quick` run: 20 000 records, 20 000 operations.
    pub fn quick() -> Scale {
        Scale {
            records: 20_000,
            ops: 20_000,
        }
    }
}

/// What [`run_matrix`](super::run_matrix) runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    /// Records and operations.
    pub scale: Scale,
    /// The variants, each on its own structures.
    pub variants: Vec<Variant>,
    /// The workloads run after the load, in the order given ([`Workload::Load`] here is
    /// ignored: every structure is loaded first).
    pub workloads: Vec<Workload>,
    /// The key distributions of the workloads that choose keys.
    pub distributions: Vec<KeyDistribution>,
    /// Thread counts; each loads its own structure.
    pub threads: Vec<usize>,
    /// The seed of every plan.
    pub seed: u64,
}

impl Matrix {
    /// Every variant, workloads A, B, C, E and insert-only, both distributions, 1 and 2
    /// threads.
    pub fn new(scale: Scale) -> Matrix {
        Matrix {
            scale,
            variants: Variant::ALL.to_vec(),
            workloads: Workload::RUNS.to_vec(),
            distributions: KeyDistribution::ALL.to_vec(),
            threads: vec![1, 2],
            seed: 0x5C5B,
        }
    }

    /// The workloads of `variant` that run, in order, each with its distribution (`None` for
    /// the load and insert-only), and those skipped with the reason.
    pub(super) fn runs(
        &self,
        variant: Variant,
    ) -> (Vec<(Workload, Option<KeyDistribution>)>, Vec<Skipped>) {
        let mut runs = vec![(Workload::Load, None)];
        let mut skipped = Vec::new();
        for &w in self.workloads.iter().filter(|&&w| w != Workload::Load) {
            if w.scans() {
                if let Some(reason) = variant.structure().no_scan_reason() {
                    skipped.push(Skipped {
                        structure: variant.structure().name().to_string(),
                        variant: variant.name().to_string(),
                        workload: w.name().to_string(),
                        reason: reason.to_string(),
                    });
                    continue;
                }
            }
            if w.chooses_keys() {
                runs.extend(self.distributions.iter().map(|&d| (w, Some(d))));
            } else {
                runs.push((w, None));
            }
        }
        (runs, skipped)
    }

    /// Runs in the whole matrix (loads included), for progress reports.
    pub fn total_runs(&self) -> usize {
        self.variants
            .iter()
            .map(|&v| self.runs(v).0.len() * self.threads.len())
            .sum()
    }
}

/// A workload a variant cannot run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The structure's name.
    pub structure: String,
    /// The variant's name.
    pub variant: String,
    /// The workload's name.
    pub workload: String,
    /// Why it is skipped.
    pub reason: String,
}
