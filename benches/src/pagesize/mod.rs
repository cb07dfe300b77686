//! The page-size section: CCEH and FAST&FAIR lookups on pools mapped with 4 KiB pages against
//! the same on 2 MiB pages, paired in one run (Optane page size, Sec. 3: page size dominates).
//!
//! Three sides ([`Side`]): anonymous memory on 4 KiB pages; anonymous memory mapped
//! 2 MiB-aligned and advised `MADV_HUGEPAGE` (transparent huge pages); and a pool file on a
//! hugetlbfs mount, where the host has mounted one and reserved enough 2 MiB pages (otherwise
//! that side is skipped with the reason: the section never changes the host's settings). For
//! each side and structure, a fresh pool ([`PoolOptions::page_size`](pmem_ordering::PoolOptions::page_size)) at emulated granularity
//! holds a heap and the structure (CCEH: default shape; FAST&FAIR: FAST
//! shifts), loaded with the YCSB records `0..records` ([`crate::ycsb`]'s keys and values). Every
//! page of the pool is written once before the heap is made, so the kernel has backed it (with
//! huge pages where it could) before anything is timed; the pages obtained are then read back
//! from `/proc/self/smaps` ([`pmem_ordering::pool::Pool::pages`]) and printed.
//!
//! Then, for [`PagePlan::rounds`] rounds, each structure is measured on every side back to
//! back (the order alternating by round): single-call `get`s of every loaded key in one
//! random order, and a YCSB C run (reads only, uniform keys, one thread) through the YCSB
//! driver. A row's ratios are the medians over the rounds of the round's 2 MiB / 4 KiB
//! throughputs. Where `perf_event_open` gives a dTLB load-miss counter ([`dtlb`]), each run's
//! misses per lookup are counted too; otherwise the section says why not.

pub mod dtlb;
pub mod maps;
pub mod report;

use pmem_ordering::pool::hugetlbfs;
use pmem_ordering::pool::PageSize;
use pmem_ordering::PoolError;
use pmem_undo_log::TxError;
use serde::Serialize;

use crate::keys::records::{key_of, value_for};
use crate::keys::shuffled;
use crate::ycsb::{
    plan, run_plan, KeyDistribution, KeySpace, PlanError, Target, TargetError, Workload, YcsbError,
};
use dtlb::DtlbCounter;
pub use maps::Side;
use maps::{load, pool_bytes, side_heap, Loaded, PagedMap};

/// Seed of the lookup order and the YCSB operations.
pub(crate) const SEED: u64 = 0x9A6E;

/// How much the section measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PagePlan {
    /// Records loaded into each structure.
    pub records: u64,
    /// YCSB C operations per run.
    pub ycsb_ops: u64,
    /// Paired rounds.
    pub rounds: usize,
    /// Which page sizes are measured (both, or one from `--page-size`).
    pub sizes: &'static [PageSize],
}

impl PagePlan {
    /// The default run: 2M records (256 MiB pools, past this machine's 32 MiB L3 and any
    /// TLB's reach with 4 KiB pages), 3 rounds.
    pub fn full() -> PagePlan {
        PagePlan {
            records: 2_000_000,
            ycsb_ops: 1_000_000,
            rounds: 3,
            sizes: &PageSize::ALL,
        }
    }

    /// `--quick`: 200 000 records (32 MiB pools; the structures then fit this machine's L3, so
    /// the quick numbers show little of the page size), 3 rounds.
    pub fn quick() -> PagePlan {
        PagePlan {
            records: 200_000,
            ycsb_ops: 200_000,
            rounds: 3,
            sizes: &PageSize::ALL,
        }
    }

    /// This plan with only `size` measured (`pmem-bench --page-size`).
    pub fn only(self, size: PageSize) -> PagePlan {
        let sizes: &'static [PageSize] = match size {
            PageSize::Base4K => &[PageSize::Base4K],
            PageSize::Huge2M => &[PageSize::Huge2M],
        };
        PagePlan { sizes, ..self }
    }
}

/// Why the section failed.
#[derive(Debug, thiserror::Error)]
pub enum PageBenchError {
    /// A pool could not be made with the pages asked for.
    #[error("page-size section: cannot make a pool with {page_size} pages: {source}")]
    Pool {
        /// The page size.
        page_size: &'static str,
        /// Why.
        source: PoolError,
    },
    /// The heap in a pool.
    #[error("page-size section: {0}")]
    Heap(#[from] TxError),
    /// A structure's operation.
    #[error("page-size section: {0}")]
    Target(#[from] TargetError),
    /// The YCSB driver.
    #[error("page-size section: {0}")]
    Ycsb(#[from] YcsbError),
    /// A YCSB plan.
    #[error("page-size section: {0}")]
    Plan(#[from] PlanError),
    /// A lookup that missed a loaded key or read a wrong value (a bug, not a measurement).
    #[error("page-size section: {structure} found {hits} of {expected} keys with their values")]
    Lookups {
        /// The structure.
        structure: &'static str,
        /// Keys found with their value.
        hits: u64,
        /// Keys looked up.
        expected: u64,
    },
    /// A hugetlbfs side was asked for with no mount to put its pool file on (a bug).
    #[error("page-size section: a hugetlbfs pool was asked for without a mount")]
    NoHugetlbfs,
    /// The dTLB counter opened but could not be read.
    #[error("page-size section: the dTLB counter failed: {0}")]
    Counter(std::io::Error),
}

/// What the kernel gave one pool.
#[derive(Clone, Debug, Serialize)]
pub struct PoolPages {
    /// The structure.
    pub structure: String,
    /// The side (`4k`, `2m`, `2m hugetlbfs file`).
    pub requested: String,
    /// The pool's size in bytes.
    pub pool_bytes: u64,
    /// Resident bytes on 2 MiB pages, from smaps.
    pub huge_bytes: u64,
    /// Resident bytes, from smaps.
    pub resident_bytes: u64,
    /// One line: the pages obtained.
    pub obtained: String,
    /// Whether the pool's base is 2 MiB-aligned.
    pub aligned_2m: bool,
}

/// One measured operation of one structure at every page size measured.
#[derive(Clone, Debug, Serialize)]
pub struct PageRow {
    /// The structure.
    pub structure: String,
    /// The operation (`get` or `YCSB C`).
    pub operation: String,
    /// Operations per timed run.
    pub ops: u64,
    /// Median ops/s at 4 KiB (`None`: not measured).
    pub base_ops_per_sec: Option<f64>,
    /// Median ops/s at 2 MiB (`None`: not measured).
    pub huge_ops_per_sec: Option<f64>,
    /// Median over the rounds of 2 MiB / 4 KiB ops/s (both measured).
    pub huge_over_base: Option<f64>,
    /// Median ops/s on a hugetlbfs pool file (`None`: not measured).
    pub hugetlbfs_ops_per_sec: Option<f64>,
    /// Median over the rounds of hugetlbfs / 4 KiB ops/s (both measured).
    pub hugetlbfs_over_base: Option<f64>,
    /// dTLB load misses per operation at 4 KiB (`None`: no counter, or not measured).
    pub base_dtlb_per_op: Option<f64>,
    /// The same at 2 MiB.
    pub huge_dtlb_per_op: Option<f64>,
    /// The same on the hugetlbfs pool file.
    pub hugetlbfs_dtlb_per_op: Option<f64>,
}

/// The section's results.
#[derive(Clone, Debug, Serialize)]
pub struct PageResults {
    /// Records per structure.
    pub records: u64,
    /// YCSB C operations per run.
    pub ycsb_ops: u64,
    /// Paired rounds.
    pub rounds: usize,
    /// What each pool got.
    pub pools: Vec<PoolPages>,
    /// One row per structure and operation.
    pub rows: Vec<PageRow>,
    /// Why dTLB misses were not counted (`None`: they were).
    pub dtlb_unavailable: Option<String>,
    /// The sides the host could not give, each with its reason.
    pub skipped: Vec<String>,
}

/// What one timed run gives: ops/s and dTLB misses (if counted).
struct RunSample {
    ops_per_sec: f64,
    dtlb_misses: Option<u64>,
}

/// Time `f`, which makes `ops` operations, with the dTLB counter around it if there is one;
/// the sample and what `f` returned.
fn sample<R>(
    counter: Option<&DtlbCounter>,
    ops: u64,
    f: impl FnOnce() -> Result<R, PageBenchError>,
) -> Result<(RunSample, R), PageBenchError> {
    let start = std::time::Instant::now();
    let (misses, out) = match counter {
        Some(c) => {
            let (m, out) = c.count(f).map_err(PageBenchError::Counter)?;
            (Some(m), out?)
        }
        None => (None, f()?),
    };
    let secs = start.elapsed().as_secs_f64();
    Ok((
        RunSample {
            ops_per_sec: ops as f64 / secs,
            dtlb_misses: misses,
        },
        out,
    ))
}

/// The samples of one (structure, operation) over the rounds, one list per side.
#[derive(Default)]
struct Samples {
    by_side: [Vec<RunSample>; 3],
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

impl Samples {
    fn row(&self, structure: PagedMap, operation: &str, ops: u64) -> PageRow {
        let rate = |side: Side| {
            median(
                self.by_side[side.index()]
                    .iter()
                    .map(|s| s.ops_per_sec)
                    .collect(),
            )
        };
        let dtlb = |side: Side| -> Option<f64> {
            let runs = &self.by_side[side.index()];
            let counted: Option<Vec<u64>> = runs.iter().map(|s| s.dtlb_misses).collect();
            counted
                .filter(|c| !c.is_empty())
                .map(|c| c.iter().sum::<u64>() as f64 / (c.len() as u64 * ops) as f64)
        };
        let over_base = |side: Side| {
            median(
                self.by_side[Side::Base4K.index()]
                    .iter()
                    .zip(&self.by_side[side.index()])
                    .map(|(base, other)| other.ops_per_sec / base.ops_per_sec)
                    .collect(),
            )
        };
        PageRow {
            structure: structure.name().to_string(),
            operation: operation.to_string(),
            ops,
            base_ops_per_sec: rate(Side::Base4K),
            huge_ops_per_sec: rate(Side::Transparent2M),
            huge_over_base: over_base(Side::Transparent2M),
            hugetlbfs_ops_per_sec: rate(Side::Hugetlbfs2M),
            hugetlbfs_over_base: over_base(Side::Hugetlbfs2M),
            base_dtlb_per_op: dtlb(Side::Base4K),
            huge_dtlb_per_op: dtlb(Side::Transparent2M),
            hugetlbfs_dtlb_per_op: dtlb(Side::Hugetlbfs2M),
        }
    }
}

/// Look every key of `order` up; how many held their value.
fn lookups(target: &dyn Target, order: &[u64]) -> Result<u64, PageBenchError> {
    let mut hits = 0;
    for &k in order {
        hits += u64::from(target.read(k)? == Some(value_for(k, 0)));
    }
    Ok(hits)
}

/// Run the section (see the module's documentation); `progress(round, rounds)` after each
/// round.
pub fn measure(
    plan_: &PagePlan,
    mut progress: impl FnMut(usize, usize),
) -> Result<PageResults, PageBenchError> {
    let (counter, dtlb_unavailable) = match DtlbCounter::open() {
        Ok(c) => (Some(c), None),
        Err(reason) => (None, Some(reason)),
    };
    let keys: Vec<u64> = (0..plan_.records).filter_map(key_of).collect();
    let order = shuffled(&keys, SEED);
    let ycsb_c = plan(
        Workload::C,
        KeyDistribution::Uniform,
        KeySpace::loaded(plan_.records),
        plan_.ycsb_ops,
        1,
        SEED,
    )?;
    // Every heap first, then the structures borrowing them. A side the host cannot give is
    // skipped, with the reason in the results.
    let bytes = pool_bytes(plan_.records);
    let mut skipped = Vec::new();
    let mut skip = |side: Side, reason: &dyn std::fmt::Display| {
        let line = format!("{} pools not measured: {reason}", side.name());
        if !skipped.contains(&line) {
            skipped.push(line);
        }
    };
    // Both structures' files at once: they need twice the pool's pages.
    let hugetlbfs = hugetlbfs::mount_for(bytes * PagedMap::ALL.len() as u64);
    let mut heaps = Vec::new();
    for structure in PagedMap::ALL {
        for side in plan_.sizes.iter().flat_map(|&size| Side::of(size)) {
            let mount = match (side, &hugetlbfs) {
                (Side::Hugetlbfs2M, Err(reason)) => {
                    skip(*side, reason);
                    continue;
                }
                (Side::Hugetlbfs2M, Ok(mount)) => Some(mount.as_path()),
                _ => None,
            };
            match side_heap(bytes, *side, mount) {
                Ok(heap) => heaps.push((structure, *side, heap)),
                Err(PageBenchError::Pool {
                    source: PoolError::PageSizeUnavailable { reason, .. },
                    ..
                }) => skip(*side, &reason),
                Err(e) => return Err(e),
            }
        }
    }
    let mut loaded = Vec::new();
    let mut pools = Vec::new();
    for (structure, side, heap) in &heaps {
        let (l, p) = load(&heap.heap, *structure, *side, plan_.records)?;
        loaded.push(l);
        pools.push(p);
    }
    let mut lookup_samples: [Samples; 2] = Default::default();
    let mut ycsb_samples: [Samples; 2] = Default::default();
    for round in 0..plan_.rounds {
        for (si, structure) in PagedMap::ALL.into_iter().enumerate() {
            let mut sides: Vec<&Loaded> =
                loaded.iter().filter(|l| l.structure == structure).collect();
            if round % 2 == 1 {
                sides.reverse();
            }
            for side in sides {
                let slot = side.side.index();
                let target = &*side.target;
                let n = order.len() as u64;
                let (s, hits) = sample(counter.as_ref(), n, || lookups(target, &order))?;
                if hits != n {
                    return Err(PageBenchError::Lookups {
                        structure: structure.name(),
                        hits,
                        expected: n,
                    });
                }
                lookup_samples[si].by_side[slot].push(s);
                let (s, _) = sample(counter.as_ref(), ycsb_c.ops(), || {
                    run_plan(
                        target,
                        structure.variant(),
                        Workload::C,
                        Some(KeyDistribution::Uniform),
                        &ycsb_c,
                        false,
                    )
                    .map_err(PageBenchError::from)
                })?;
                ycsb_samples[si].by_side[slot].push(s);
            }
        }
        progress(round + 1, plan_.rounds);
    }
    let mut rows = Vec::new();
    for (si, structure) in PagedMap::ALL.into_iter().enumerate() {
        rows.push(lookup_samples[si].row(structure, "get (single calls)", keys.len() as u64));
        rows.push(ycsb_samples[si].row(structure, "YCSB C (uniform, 1 thread)", ycsb_c.ops()));
    }
    Ok(PageResults {
        records: plan_.records,
        ycsb_ops: plan_.ycsb_ops,
        rounds: plan_.rounds,
        pools,
        rows,
        dtlb_unavailable,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_paired_run_measures_both_structures_at_both_sizes() {
        let plan = PagePlan {
            records: 2_000,
            ycsb_ops: 2_000,
            rounds: 2,
            sizes: &PageSize::ALL,
        };
        let r = measure(&plan, |_, _| {}).unwrap();
        println!("skipped: {:?}", r.skipped);
        // Every side is measured for both structures, or skipped with its reason.
        let measured = |side: Side| {
            let pools = r
                .pools
                .iter()
                .filter(|p| p.requested == side.name())
                .count();
            let skipped = r
                .skipped
                .iter()
                .any(|l| l.starts_with(&format!("{} pools not measured: ", side.name())));
            assert!(
                (pools == 2 && !skipped) || (pools == 0 && skipped),
                "{side:?}: {pools} pools, skipped {:?}",
                r.skipped
            );
            pools == 2
        };
        assert!(measured(Side::Base4K), "4 KiB pages are always there");
        let (transparent, hugetlbfs) = (measured(Side::Transparent2M), measured(Side::Hugetlbfs2M));
        assert!(r.pools.iter().all(|p| p.aligned_2m || p.requested == "4k"));
        assert_eq!(r.rows.len(), 4);
        for row in &r.rows {
            assert!(row.base_ops_per_sec.is_some_and(|x| x > 0.0));
            assert_eq!(row.huge_ops_per_sec.is_some(), transparent);
            assert_eq!(row.huge_over_base.is_some_and(|x| x > 0.0), transparent);
            assert_eq!(row.hugetlbfs_ops_per_sec.is_some(), hugetlbfs);
            assert_eq!(row.hugetlbfs_over_base.is_some_and(|x| x > 0.0), hugetlbfs);
            assert_eq!(row.base_dtlb_per_op.is_none(), r.dtlb_unavailable.is_some());
        }
    }

    #[test]
    fn one_page_size_alone_has_no_ratio() {
        let plan = PagePlan {
            records: 1_000,
            ycsb_ops: 1_000,
            rounds: 1,
            sizes: &PageSize::ALL,
        }
        .only(PageSize::Base4K);
        let r = measure(&plan, |_, _| {}).unwrap();
        assert_eq!(r.pools.len(), 2);
        assert!(r.rows.iter().all(|row| row.huge_ops_per_sec.is_none()
            && row.huge_over_base.is_none()
            && row.hugetlbfs_ops_per_sec.is_none()));
    }
}
