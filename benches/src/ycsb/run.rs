//! The YCSB runner: load a structure, run the workloads on it, measure.
//!
//! For each variant and thread count of a [`Matrix`], [`run_matrix`] makes one fresh structure
//! ([`with_target`]) sized for every record the runs can insert, and on it, in order:
//!
//! 1. the load: records `0..records`, each thread a contiguous share (CCEH: one
//!    `insert_batch` call per thread; the others: one insert per record);
//! 2. workloads A, B, C and E (E only where the structure scans), each once per key
//!    distribution, uniform first: `ops` operations picking among the loaded records;
//! 3. insert-only: `ops` inserts of fresh records (no distribution: fresh keys are not chosen).
//!
//! So a run sees the records earlier runs inserted (E adds 5% of `ops`), as in a YCSB session
//! that runs its workloads one after the other on one loaded store; reads still pick only
//! loaded records, which every run finds.
//!
//! Every run's operations are generated before it is timed ([`super::plan`]). Its threads
//! (always spawned, even one) start together on a [`Barrier`]; each times every operation on
//! its own with two [`Instant`] reads (their cost, [`YcsbResults::timer_ns`], is included in
//! the latencies and in the run's time, not subtracted) into its own HDR histogram, merged
//! after the run. A run's time is the slowest thread's, from the barrier to its last operation.
//! Per-operation persistence counters are the sum of every thread's [`thread_stats`] deltas
//! over the run, divided by the run's operations.
//!
//! Every result is checked as the run goes: a read must find its key with a value written with
//! it, an update must find its key, an insert must find its key new, a scan from a loaded key
//! must visit at least that key. Any miss fails the run with [`YcsbError::Mismatch`].

use std::sync::Barrier;
use std::time::Instant;

use hdrhistogram::Histogram;
use pmem_ordering::{thread_stats, Stats};

use super::targets::{with_target, Setup, Target, TargetError, Variant};
use super::{
    plan, KeyDistribution, KeySpace, Matrix, Op, Plan, ProgressEvent, Scale, Workload, YcsbError,
    YcsbResults, YcsbRow,
};
use crate::keys::records::value_matches;

/// The largest latency the histograms hold: one minute, in nanoseconds (longer ones are
/// clamped to it).
const MAX_LATENCY_NS: u64 = 60_000_000_000;
/// Significant decimal digits of the histograms (0.1% resolution).
const SIGFIGS: u8 = 3;

/// What one thread measured.
struct ThreadRun {
    latencies: Histogram<u64>,
    secs: f64,
    stats: Stats,
    mismatches: u64,
    first_mismatch: Option<String>,
}

/// Run `op`; `Err(description)` if it returned what it should not have.
fn execute(target: &dyn Target, op: Op) -> Result<Result<(), String>, TargetError> {
    Ok(match op {
        Op::Read(k) => match target.read(k)? {
            Some(v) if value_matches(k, v) => Ok(()),
            got => Err(format!("read of loaded key {k:#x} returned {got:x?}")),
        },
        Op::Update(k, v) => match target.update(k, v)? {
            true => Ok(()),
            false => Err(format!("update of loaded key {k:#x} did not find it")),
        },
        Op::Insert(k, v) => match target.insert(k, v)? {
            true => Ok(()),
            false => Err(format!("insert of fresh key {k:#x} found it present")),
        },
        Op::Scan(k, len) => match target.scan(k, len)? {
            n if (1..=len).contains(&n) => Ok(()),
            n => Err(format!(
                "scan of {len} from loaded key {k:#x} visited {n} pairs"
            )),
        },
    })
}

/// One thread's share of a run, after the barrier.
fn thread_run(
    target: &dyn Target,
    ops: &[Op],
    batch: bool,
    barrier: &Barrier,
    mut latencies: Histogram<u64>,
) -> Result<ThreadRun, TargetError> {
    // Built before the barrier, so the timed part only loads.
    let items: Vec<(u64, u64)> = match batch {
        true => ops
            .iter()
            .filter_map(|op| match *op {
                Op::Insert(k, v) => Some((k, v)),
                _ => None,
            })
            .collect(),
        false => Vec::new(),
    };
    let mut mismatches = 0;
    let mut first_mismatch = None;
    barrier.wait();
    let before = thread_stats();
    let start = Instant::now();
    let batched = if batch {
        target.load_batch(&items)
    } else {
        None
    };
    match batched {
        Some(inserted) => {
            let inserted = inserted?;
            if inserted != items.len() as u64 {
                mismatches = items.len() as u64 - inserted.min(items.len() as u64);
                first_mismatch = Some(format!(
                    "a batched load of {} fresh keys inserted {inserted}",
                    items.len()
                ));
            }
        }
        None => {
            for &op in ops {
                let t = Instant::now();
                let checked = execute(target, op)?;
                latencies.saturating_record(t.elapsed().as_nanos() as u64);
                if let Err(what) = checked {
                    mismatches += 1;
                    first_mismatch.get_or_insert(what);
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = thread_stats() - before;
    Ok(ThreadRun {
        latencies,
        secs,
        stats,
        mismatches,
        first_mismatch,
    })
}

/// Run `plan` of `workload` on `target`, its threads together, and measure it. With `batch`,
/// a structure that loads in batches ([`Target::load_batch`]) takes each thread's inserts in
/// one call (not timed one by one).
pub fn run_plan(
    target: &dyn Target,
    variant: Variant,
    workload: Workload,
    distribution: Option<KeyDistribution>,
    plan: &Plan,
    batch: bool,
) -> Result<YcsbRow, YcsbError> {
    let threads = plan.threads.len();
    if threads == 0 {
        return Err(YcsbError::NoThreads);
    }
    let histograms = (0..threads)
        .map(|_| Histogram::<u64>::new_with_bounds(1, MAX_LATENCY_NS, SIGFIGS))
        .collect::<Result<Vec<_>, _>>()?;
    let barrier = Barrier::new(threads);
    let outcomes: Vec<Result<ThreadRun, TargetError>> = std::thread::scope(|s| {
        let handles: Vec<_> = plan
            .threads
            .iter()
            .zip(histograms)
            .map(|(ops, h)| {
                let barrier = &barrier;
                s.spawn(move || thread_run(target, ops, batch, barrier, h))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    let structure = variant.structure().name();
    let mut merged = Histogram::<u64>::new_with_bounds(1, MAX_LATENCY_NS, SIGFIGS)?;
    let mut secs = 0f64;
    let mut stats = Stats::default();
    let mut mismatches = 0;
    let mut first = None;
    for outcome in outcomes {
        let run = outcome.map_err(|source| YcsbError::Target {
            structure,
            variant: variant.name(),
            workload: workload.name(),
            source: Box::new(source),
        })?;
        // Re-recorded rather than `add`ed: same bounds, so nothing is clamped, and no error
        // path for a case that cannot happen.
        for v in run.latencies.iter_recorded() {
            merged.saturating_record_n(v.value_iterated_to(), v.count_at_value());
        }
        secs = secs.max(run.secs);
        stats = stats + run.stats;
        mismatches += run.mismatches;
        if first.is_none() {
            first = run.first_mismatch;
        }
    }
    if mismatches > 0 {
        return Err(YcsbError::Mismatch {
            structure,
            variant: variant.name(),
            workload: workload.name(),
            count: mismatches,
            first: first.unwrap_or_default(),
        });
    }
    let ops = plan.ops();
    let per_op = |x: u64| x as f64 / ops.max(1) as f64;
    let quantile = |q: f64| (!merged.is_empty()).then(|| merged.value_at_quantile(q) as f64);
    Ok(YcsbRow {
        structure: structure.to_string(),
        variant: variant.name().to_string(),
        workload: workload.name().to_string(),
        distribution: distribution.map(|d| d.name().to_string()),
        threads,
        ops,
        seconds: secs,
        ops_per_sec: ops as f64 / secs,
        p50_ns: quantile(0.50),
        p99_ns: quantile(0.99),
        p999_ns: quantile(0.999),
        fences_per_op: per_op(stats.fences),
        flushes_per_op: per_op(stats.flushes),
        nt_bytes_per_op: per_op(stats.nt_bytes),
        media_bytes_per_op: per_op(stats.bytes_to_media()),
        xpline_bytes_per_op: per_op(stats.xpline_bytes),
        write_amplification: (stats.bytes_to_media() > 0)
            .then(|| stats.xpline_bytes as f64 / stats.bytes_to_media() as f64),
        ewr: stats.effective_write_ratio(),
    })
}

/// Load one fresh `variant` with `threads` threads and run `matrix`'s workloads on it (see
/// the module's documentation); one row per run. `done` is called after each run with its
/// label.
pub fn run_variant(
    matrix: &Matrix,
    variant: Variant,
    threads: usize,
    setup: &Setup,
    done: &mut dyn FnMut(String),
) -> Result<Vec<YcsbRow>, YcsbError> {
    if threads == 0 {
        return Err(YcsbError::NoThreads);
    }
    let Scale { records, ops } = matrix.scale;
    let (runs, _) = matrix.runs(variant);
    // Room for every record the runs can insert, so no run fills the pool.
    let capacity = runs.iter().fold(records, |acc, &(w, _)| {
        acc.saturating_add(w.max_inserts(ops))
            .saturating_add(threads as u64)
    });
    with_target(variant, setup, capacity, |target| {
        let mut rows = Vec::with_capacity(runs.len());
        let mut keys = KeySpace {
            loaded: records,
            next_insert: 0,
        };
        for &(workload, distribution) in &runs {
            let d = distribution.unwrap_or(KeyDistribution::Uniform);
            let p = plan(workload, d, keys, ops, threads, matrix.seed)?;
            let row = run_plan(
                target,
                variant,
                workload,
                distribution,
                &p,
                workload == Workload::Load,
            )?;
            keys.next_insert = p.next_insert;
            done(format!(
                "{} {} {}{} {}T",
                row.structure,
                row.variant,
                row.workload,
                distribution.map_or(String::new(), |d| format!(" {}", d.name())),
                threads
            ));
            rows.push(row);
        }
        Ok(rows)
    })
}

/// Run the whole `matrix`, each variant with each thread count on a fresh structure; `progress`
/// is told after every run.
pub fn run_matrix(
    matrix: &Matrix,
    setup: &Setup,
    progress: &dyn Fn(&ProgressEvent),
) -> Result<YcsbResults, YcsbError> {
    let start = Instant::now();
    let timer_ns = crate::ccehbench::timer_overhead_ns();
    let total = matrix.total_runs();
    let mut finished = 0;
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for &variant in &matrix.variants {
        skipped.extend(matrix.runs(variant).1);
        for &threads in &matrix.threads {
            let mut done = |label: String| {
                finished += 1;
                progress(&ProgressEvent {
                    done: finished,
                    total,
                    label,
                });
            };
            rows.extend(run_variant(matrix, variant, threads, setup, &mut done)?);
        }
    }
    Ok(YcsbResults {
        scale: matrix.scale,
        timer_ns,
        rows,
        skipped,
        total_seconds: start.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ycsb::targets::Structure;

    fn small(threads: Vec<usize>, variants: Vec<Variant>) -> Matrix {
        Matrix {
            scale: Scale {
                records: 3_000,
                ops: 2_000,
            },
            variants,
            threads,
            ..Matrix::new(Scale::quick())
        }
    }

    fn setup(dir: &tempfile::TempDir) -> Setup {
        Setup::new(dir.path())
    }

    /// Every variant runs every workload it supports with 1 and 2 threads, every result
    /// checked; the counters show the persistence work.
    #[test]
    fn every_variant_runs_every_workload_correctly() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        let matrix = small(vec![1, 2], Variant::ALL.to_vec());
        let events = std::cell::RefCell::new(Vec::new());
        let results = run_matrix(&matrix, &setup(&dir), &|e| {
            events.borrow_mut().push(e.clone())
        })
        .unwrap();
        assert_eq!(results.rows.len(), matrix.total_runs());
        let events = events.into_inner();
        assert_eq!(events.len(), matrix.total_runs());
        assert_eq!(events.last().unwrap().done, matrix.total_runs());
        for v in Variant::ALL {
            for t in [1, 2] {
                let rows: Vec<&YcsbRow> = results
                    .rows
                    .iter()
                    .filter(|r| r.variant == v.name() && r.threads == t)
                    .collect();
                let names: Vec<(&str, Option<&str>)> = rows
                    .iter()
                    .map(|r| (r.workload.as_str(), r.distribution.as_deref()))
                    .collect();
                let mut want = vec![("load", None)];
                for w in ["A", "B", "C", "E"] {
                    if w == "E" && v.structure() != Structure::FastFair {
                        continue;
                    }
                    want.push((w, Some("uniform")));
                    want.push((w, Some("zipfian")));
                }
                want.push(("insert-only", None));
                assert_eq!(names, want, "{v:?} {t}");
                for r in rows {
                    let expected = if r.workload == "load" { 3_000 } else { 2_000 };
                    assert_eq!(r.ops, expected, "{r:?}");
                    assert!(r.ops_per_sec > 0.0 && r.seconds > 0.0, "{r:?}");
                    let writes = matches!(r.workload.as_str(), "load" | "A" | "B" | "insert-only");
                    if writes {
                        assert!(r.fences_per_op > 0.0, "{r:?}");
                        assert!(r.media_bytes_per_op > 0.0, "{r:?}");
                    }
                    if r.workload == "C" {
                        // Reads persist nothing.
                        assert_eq!(r.fences_per_op, 0.0, "{r:?}");
                    }
                    let batched = r.workload == "load" && v.structure() == Structure::Cceh;
                    assert_eq!(r.p50_ns.is_none(), batched, "{r:?}");
                    if let (Some(p50), Some(p99), Some(p999)) = (r.p50_ns, r.p99_ns, r.p999_ns) {
                        assert!(0.0 < p50 && p50 <= p99 && p99 <= p999, "{r:?}");
                    }
                }
            }
        }
        let mut skipped: Vec<(String, String)> = results
            .skipped
            .iter()
            .map(|s| (s.variant.clone(), s.workload.clone()))
            .collect();
        skipped.sort();
        let mut want: Vec<(String, String)> = Variant::ALL
            .iter()
            .filter(|v| v.structure() != Structure::FastFair)
            .map(|v| (v.name().to_string(), "E".to_string()))
            .collect();
        want.sort();
        assert_eq!(skipped, want);
        assert!(results.skipped.iter().all(|s| s.reason.contains("order")));
    }

    /// A structure that loses writes is caught: its reads count as mismatches.
    #[test]
    fn wrong_results_fail_the_run() {
        struct Forgetful;
        impl Target for Forgetful {
            fn insert(&self, _: u64, _: u64) -> Result<bool, TargetError> {
                Ok(true)
            }
            fn read(&self, _: u64) -> Result<Option<u64>, TargetError> {
                Ok(None)
            }
            fn update(&self, _: u64, _: u64) -> Result<bool, TargetError> {
                Ok(true)
            }
            fn scan(&self, _: u64, _: usize) -> Result<usize, TargetError> {
                Ok(0)
            }
        }
        let keys = KeySpace::loaded(100);
        let p = plan(Workload::C, KeyDistribution::Uniform, keys, 50, 2, 1).unwrap();
        let err = run_plan(
            &Forgetful,
            Variant::CcehHelperOff,
            Workload::C,
            None,
            &p,
            false,
        )
        .unwrap_err();
        match err {
            YcsbError::Mismatch { count, first, .. } => {
                assert_eq!(count, 50);
                assert!(first.contains("read of loaded key"), "{first}");
            }
            other => panic!("{other}"),
        }
        let p = plan(Workload::A, KeyDistribution::Uniform, keys, 50, 1, 1).unwrap();
        let row = run_plan(
            &Forgetful,
            Variant::CcehHelperOff,
            Workload::A,
            None,
            &p,
            false,
        );
        assert!(matches!(row, Err(YcsbError::Mismatch { .. })));
    }

    #[test]
    fn scans_on_structures_without_order_are_refused() {
        let dir = tempfile::tempdir_in(crate::poolfile::default_pool_dir()).unwrap();
        for v in [
            Variant::CcehHelperOn,
            Variant::Datalog(pmem_structures::raw::datalog::WriteMode::Auto),
        ] {
            let r: Result<(), YcsbError> = with_target(v, &setup(&dir), 100, |t| {
                assert!(!t.supports_scan());
                assert!(matches!(
                    t.scan(1, 10),
                    Err(TargetError::ScanUnsupported { .. })
                ));
                Ok(())
            });
            r.unwrap();
        }
    }

    #[test]
    fn zero_threads_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let matrix = small(vec![0], vec![Variant::CcehHelperOff]);
        assert!(matches!(
            run_variant(
                &matrix,
                Variant::CcehHelperOff,
                0,
                &setup(&dir),
                &mut |_| {}
            ),
            Err(YcsbError::NoThreads)
        ));
    }
}
