//! Every Themis workload with one and with two threads (Themis, Sec. V-A runs its workloads
//! multi-threaded).
//!
//! Each workload runs, per fence policy, on one heap in its own pool file with two instances of
//! its structure (roots [`ROOT_STRIDE`] bytes apart): thread `t` updates instance `t` only, so
//! the threads share the heap (its allocator and its pool of log lanes) but no structure, and
//! need no lock (the crate's handles are not synchronized). The one-thread and two-thread runs
//! alternate round by round on the same heap; a run times `n` operations per thread, `n`
//! calibrated on one thread to one batch, and its throughput is all threads' operations over the
//! wall time. Fences come from the heap's `TxStats`, which count every thread's transactions.
//!
//! A CPU-only control loop (no pool access) runs the same way before and after the workloads:
//! its two-thread over one-thread ratio says how many cores the run actually had, which on a
//! shared machine bounds every workload's scaling.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pmem_ordering::{Granularity, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, TxError, TxStats};
use serde::Serialize;

use super::{setup, step, Driver, TxVariant, Workload, TX_POOL_SIZE};
use crate::keys::SplitMix64;
use crate::measure::{median, tx_delta, Plan};
use crate::poolfile::{PoolFile, SetupError};

/// The thread counts compared.
pub const THREAD_COUNTS: [usize; 2] = [1, 2];
/// The policies each workload runs under: the x86 baseline and the batched fences.
pub const THREAD_POLICIES: [FencePolicy; 2] = [FencePolicy::Strict, FencePolicy::Batched];
/// Bytes between the roots of two instances (more than any workload's root).
pub const ROOT_STRIDE: u64 = 64;

/// Why the thread runs failed.
#[derive(Debug, thiserror::Error)]
pub enum ThreadBenchError {
    /// A pool or heap could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// A transaction of the run failed.
    #[error("a two-thread workload run ({workload}) failed in {path}: {source}")]
    Tx {
        /// The workload.
        workload: &'static str,
        /// Its pool file.
        path: PathBuf,
        /// What failed.
        source: TxError,
    },
}

/// One workload under one policy with one thread count.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadRun {
    /// The paper's name for the workload.
    pub workload: String,
    /// The heap's fence policy.
    pub policy: String,
    /// Threads, each on its own instance.
    pub threads: usize,
    /// Operations (transactions) per second over all threads, median of the rounds.
    pub ops_per_sec: f64,
    /// Operations per second of each round.
    pub samples_ops_per_sec: Vec<f64>,
    /// Operations per thread per round.
    pub ops_per_thread: u64,
    /// Fences per operation (the heap's `TxStats`, all threads).
    pub fences_per_op: f64,
    /// Log-before-data (nt -> t) orderings per operation that need a fence under x86.
    pub nt_t_fences_per_op: f64,
    /// `nt_t_fences / fences`: under the strict policy, the share of its fences Themis
    /// removes.
    pub nt_t_share: f64,
}

/// The CPU-only control loop with one and two threads.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct ControlRun {
    /// Loop iterations per second with one thread (median of the rounds).
    pub one_thread_per_sec: f64,
    /// Loop iterations per second over both threads with two.
    pub two_threads_per_sec: f64,
}

impl ControlRun {
    /// Two-thread over one-thread throughput: 2 when both threads had a core of their own.
    pub fn scaling(&self) -> f64 {
        self.two_threads_per_sec / self.one_thread_per_sec
    }
}

/// Every run, workload by workload, policy by policy, thread count by thread count.
#[derive(Clone, Debug, Serialize)]
pub struct ThreadResults {
    /// The runs.
    pub runs: Vec<ThreadRun>,
    /// The control loop before the workloads.
    pub control_before: ControlRun,
    /// The control loop after the workloads.
    pub control_after: ControlRun,
}

impl ThreadResults {
    /// The run of `workload` under `policy` with `threads` threads.
    pub fn run(
        &self,
        workload: Workload,
        policy: FencePolicy,
        threads: usize,
    ) -> Option<&ThreadRun> {
        self.runs.iter().find(|r| {
            r.workload == workload.name() && r.policy == policy.name() && r.threads == threads
        })
    }
}

/// One instance of a workload's structure and what its thread keeps between operations.
struct Instance {
    root: u64,
    rng: SplitMix64,
    driver: Driver,
}

impl Instance {
    fn run(&mut self, heap: &Heap, n: u64) -> Result<(), TxError> {
        for _ in 0..n {
            step(heap, self.root, &mut self.rng, &mut self.driver)?;
        }
        Ok(())
    }
}

/// Run every workload of [`Workload::ALL`] under [`THREAD_POLICIES`] with [`THREAD_COUNTS`]
/// threads. `progress(done, total)` is called after each workload and policy.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &Plan,
    mut progress: impl FnMut(usize, usize),
) -> Result<ThreadResults, ThreadBenchError> {
    let total = Workload::ALL.len() * THREAD_POLICIES.len();
    let control_before = control(plan);
    let mut runs = Vec::new();
    for (i, (workload, policy)) in Workload::ALL
        .into_iter()
        .flat_map(|w| THREAD_POLICIES.map(|p| (w, p)))
        .enumerate()
    {
        runs.extend(measure_one(
            dir,
            prefix,
            granularity,
            plan,
            workload,
            policy,
        )?);
        progress(i + 1, total);
    }
    Ok(ThreadResults {
        runs,
        control_before,
        control_after: control(plan),
    })
}

/// Iterations of the control loop: a SplitMix64 step, kept live through `black_box`.
fn spin(iterations: u64, seed: u64) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut acc = 0u64;
    for _ in 0..iterations {
        acc ^= std::hint::black_box(rng.next_u64());
    }
    acc
}

/// The control loop with one and two threads, alternating, [`Plan::reps`] rounds each.
fn control(plan: &Plan) -> ControlRun {
    // Calibrate one batch on one thread.
    let mut n = 1024u64;
    let per_iteration = loop {
        let start = Instant::now();
        std::hint::black_box(spin(n, 1));
        let elapsed = start.elapsed();
        if elapsed >= plan.batch / 10 {
            break elapsed.as_secs_f64() / n as f64;
        }
        n *= 2;
    };
    let n = ((plan.batch.as_secs_f64() / per_iteration).ceil() as u64).max(1);
    let mut one = Vec::with_capacity(plan.reps);
    let mut two = Vec::with_capacity(plan.reps);
    for round in 0..plan.reps {
        for threads in if round % 2 == 0 { [1, 2] } else { [2, 1] } {
            let start = Instant::now();
            std::thread::scope(|s| {
                let others: Vec<_> = (1..threads)
                    .map(|t| s.spawn(move || std::hint::black_box(spin(n, t))))
                    .collect();
                std::hint::black_box(spin(n, 0));
                for h in others {
                    std::hint::black_box(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                }
            });
            let per_sec = (threads * n) as f64 / start.elapsed().as_secs_f64();
            if threads == 1 { &mut one } else { &mut two }.push(per_sec);
        }
    }
    ControlRun {
        one_thread_per_sec: median(&one),
        two_threads_per_sec: median(&two),
    }
}

/// One workload under one policy: its runs with each thread count.
fn measure_one(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &Plan,
    workload: Workload,
    policy: FencePolicy,
) -> Result<Vec<ThreadRun>, ThreadBenchError> {
    let variant = TxVariant::Workload { workload, policy };
    let file = PoolFile::create(
        dir,
        &format!("{prefix}-threads-{}.pool", variant.slug()),
        TX_POOL_SIZE,
        granularity,
    )?;
    let failed = |source: TxError| ThreadBenchError::Tx {
        workload: workload.name(),
        path: file.path().to_path_buf(),
        source,
    };
    let pool = file.open(PoolOptions::new())?;
    let heap: Heap =
        Heap::create(pool, HeapConfig::default(), policy).map_err(|source| SetupError::Heap {
            path: file.path().to_path_buf(),
            source,
        })?;
    let max_threads = THREAD_COUNTS.into_iter().max().unwrap_or(1);
    let mut instances = (0..max_threads as u64)
        .map(|t| {
            let root = heap.pool().root_offset() + t * ROOT_STRIDE;
            // The first instance makes the same operations as the one-thread sections.
            let mut rng = SplitMix64::new(0x5EED + t);
            let driver = setup(&heap, root, variant, &mut rng)?;
            Ok(Instance { root, rng, driver })
        })
        .collect::<Result<Vec<_>, TxError>>()
        .map_err(failed)?;
    let n = calibrate(&heap, &mut instances[0], plan).map_err(failed)?;

    let mut samples = vec![Vec::with_capacity(plan.reps); THREAD_COUNTS.len()];
    let mut tx = vec![TxStats::default(); THREAD_COUNTS.len()];
    for round in 0..plan.reps {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..THREAD_COUNTS.len()).collect()
        } else {
            (0..THREAD_COUNTS.len()).rev().collect()
        };
        for c in order {
            let threads = THREAD_COUNTS[c];
            let before = heap.tx_stats();
            let start = Instant::now();
            run_threads(&heap, &mut instances[..threads], n).map_err(failed)?;
            let seconds = start.elapsed().as_secs_f64();
            let d = tx_delta(heap.tx_stats(), before);
            tx[c] = TxStats {
                committed: tx[c].committed + d.committed,
                aborted: tx[c].aborted + d.aborted,
                fences: tx[c].fences + d.fences,
                nt_t_fences: tx[c].nt_t_fences + d.nt_t_fences,
            };
            samples[c].push((threads as u64 * n) as f64 / seconds);
        }
    }
    Ok(THREAD_COUNTS
        .iter()
        .zip(samples)
        .zip(tx)
        .map(|((&threads, samples), tx)| {
            let ops = (threads as u64 * n * plan.reps as u64).max(1) as f64;
            ThreadRun {
                workload: workload.name().to_string(),
                policy: policy.name().to_string(),
                threads,
                ops_per_sec: median(&samples),
                samples_ops_per_sec: samples,
                ops_per_thread: n,
                fences_per_op: tx.fences as f64 / ops,
                nt_t_fences_per_op: tx.nt_t_fences as f64 / ops,
                nt_t_share: tx.nt_t_fences as f64 / tx.fences.max(1) as f64,
            }
        })
        .collect())
}

/// Run `n` operations on each instance, each on its own thread (the first on this one).
fn run_threads(heap: &Heap, instances: &mut [Instance], n: u64) -> Result<(), TxError> {
    let Some((first, others)) = instances.split_first_mut() else {
        return Ok(());
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = others
            .iter_mut()
            .map(|inst| s.spawn(move || inst.run(heap, n)))
            .collect();
        let mine = first.run(heap, n);
        // Join every thread before reporting the first error.
        let results: Vec<Result<(), TxError>> = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        let theirs = results.into_iter().find(Result::is_err).unwrap_or(Ok(()));
        mine.and(theirs)
    })
}

/// Warm `instance` up for the plan's warm-up, then return how many operations take one batch.
fn calibrate(heap: &Heap, instance: &mut Instance, plan: &Plan) -> Result<u64, TxError> {
    let start = Instant::now();
    let mut ops = 0u64;
    let mut chunk = 1u64;
    while start.elapsed() < plan.warmup || ops < 16 {
        instance.run(heap, chunk)?;
        ops += chunk;
        chunk = (chunk * 2).min(1024);
    }
    let per_op = start.elapsed().as_secs_f64() / ops as f64;
    Ok(((plan.batch.as_secs_f64() / per_op).ceil() as u64).max(1))
}
