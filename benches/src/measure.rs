//! Side-by-side timing of a group of variants.
//!
//! Each variant is first warmed up and calibrated: the number of operations that take about one
//! batch ([`Plan::batch`]). Then the group runs [`Plan::reps`] rounds; in each round every variant
//! runs one batch, in forward order on even rounds and reverse order on odd ones, so a drift of
//! the machine (frequency, a neighbour's load) falls on all variants alike. A variant's time is
//! the median of its rounds' ns per operation. The pool's per-thread counters (and, for
//! transactions, the heap's [`TxStats`]) are read around every timed batch, so the per-operation
//! statistics cover exactly the timed operations.
//!
//! Anything that runs `n` operations on demand can be timed: see [`Runner`] and
//! [`time_side_by_side`]; [`measure_group`] is that for the primitives.

use std::time::{Duration, Instant};

use pmem_ordering::{thread_stats, PoolError, Stats};
use pmem_undo_log::TxStats;

use crate::primitives::{Primitive, Variant};

/// How long to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Target duration of one timed batch of a variant.
    pub batch: Duration,
    /// Timed batches (rounds) per variant; the reported time is their median.
    pub reps: usize,
    /// Minimum warm-up per variant before calibration ends.
    pub warmup: Duration,
}

impl Plan {
    /// The default run: about 1.3 s per variant.
    pub fn full() -> Plan {
        Plan {
            batch: Duration::from_millis(30),
            reps: 21,
            warmup: Duration::from_millis(60),
        }
    }

    /// A run of a few seconds in all, for CI and smoke tests.
    pub fn quick() -> Plan {
        Plan {
            batch: Duration::from_millis(5),
            reps: 7,
            warmup: Duration::from_millis(10),
        }
    }
}

/// The measurements of one variant.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// What was measured.
    pub variant: Variant,
    /// Operations per timed batch.
    pub ops_per_sample: u64,
    /// Nanoseconds per operation of each timed batch, in round order.
    pub samples_ns_per_op: Vec<f64>,
    /// Counter deltas over all timed batches, or `None` if the variant bypasses the counters.
    pub counted: Option<Stats>,
}

impl Measurement {
    /// Operations timed in all.
    pub fn total_ops(&self) -> u64 {
        self.ops_per_sample * self.samples_ns_per_op.len() as u64
    }

    /// Median nanoseconds per operation.
    pub fn median_ns(&self) -> f64 {
        median(&self.samples_ns_per_op)
    }

    /// A counter per operation, e.g. `m.per_op(|s| s.fences)`; `None` if not counted.
    pub fn per_op(&self, field: impl Fn(&Stats) -> u64) -> Option<f64> {
        let ops = self.total_ops();
        self.counted
            .as_ref()
            .filter(|_| ops > 0)
            .map(|s| field(s) as f64 / ops as f64)
    }
}

/// The median of `xs` (mean of the middle two for an even count); NaN for an empty slice.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Something [`time_side_by_side`] can time: it runs `n` operations on demand.
pub trait Runner {
    /// What a failed operation reports.
    type Error;

    /// Run `n` operations.
    fn run(&mut self, n: u64) -> Result<(), Self::Error>;

    /// The totals of the transactions run so far, for runners whose operations are
    /// transactions on one heap; `None` otherwise.
    fn tx_stats(&self) -> Option<TxStats> {
        None
    }
}

impl Runner for Primitive {
    type Error = PoolError;

    fn run(&mut self, n: u64) -> Result<(), PoolError> {
        Primitive::run(self, n)
    }
}

/// The timing of one runner of a group.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Operations per timed batch.
    pub ops_per_sample: u64,
    /// Nanoseconds per operation of each timed batch, in round order.
    pub samples_ns_per_op: Vec<f64>,
    /// The thread's counter deltas over all timed batches.
    pub counted: Stats,
    /// The heap's transaction totals over all timed batches, if the runner reports them.
    pub tx: Option<TxStats>,
}

/// `after - before`, field by field.
pub fn tx_delta(after: TxStats, before: TxStats) -> TxStats {
    TxStats {
        committed: after.committed.wrapping_sub(before.committed),
        aborted: after.aborted.wrapping_sub(before.aborted),
        fences: after.fences.wrapping_sub(before.fences),
        nt_t_fences: after.nt_t_fences.wrapping_sub(before.nt_t_fences),
    }
}

fn tx_sum(a: Option<TxStats>, b: Option<TxStats>) -> Option<TxStats> {
    match (a, b) {
        (Some(a), Some(b)) => Some(TxStats {
            committed: a.committed + b.committed,
            aborted: a.aborted + b.aborted,
            fences: a.fences + b.fences,
            nt_t_fences: a.nt_t_fences + b.nt_t_fences,
        }),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Warm `p` up and return how many operations make one batch.
fn calibrate<R: Runner>(p: &mut R, plan: &Plan) -> Result<u64, R::Error> {
    let start = Instant::now();
    let min_probe = (plan.batch / 10).max(Duration::from_micros(100));
    let mut n = 1u64;
    loop {
        let t = Instant::now();
        p.run(n)?;
        let elapsed = t.elapsed();
        if elapsed >= min_probe && start.elapsed() >= plan.warmup {
            let per_op = elapsed.as_secs_f64() / n as f64;
            return Ok(((plan.batch.as_secs_f64() / per_op).ceil() as u64).max(1));
        }
        if elapsed < min_probe {
            n = n.saturating_mul(2);
        }
    }
}

/// Time every runner of a group side by side (see the module's documentation).
/// `progress(round, rounds)` is called after each round.
pub fn time_side_by_side<R: Runner>(
    runners: &mut [R],
    plan: &Plan,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<Timing>, R::Error> {
    let mut ops = Vec::with_capacity(runners.len());
    for r in runners.iter_mut() {
        ops.push(calibrate(r, plan)?);
    }
    let mut timings: Vec<Timing> = ops
        .iter()
        .map(|&ops_per_sample| Timing {
            ops_per_sample,
            samples_ns_per_op: Vec::with_capacity(plan.reps),
            counted: Stats::default(),
            tx: None,
        })
        .collect();
    for round in 0..plan.reps {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..runners.len()).collect()
        } else {
            (0..runners.len()).rev().collect()
        };
        for i in order {
            let tx_before = runners[i].tx_stats();
            let before = thread_stats();
            let t = Instant::now();
            runners[i].run(ops[i])?;
            let elapsed = t.elapsed();
            let after = thread_stats();
            let tx = runners[i]
                .tx_stats()
                .zip(tx_before)
                .map(|(a, b)| tx_delta(a, b));
            let timing = &mut timings[i];
            timing.counted = timing.counted + (after - before);
            timing.tx = tx_sum(timing.tx, tx);
            timing
                .samples_ns_per_op
                .push(elapsed.as_nanos() as f64 / ops[i] as f64);
        }
        progress(round + 1, plan.reps);
    }
    Ok(timings)
}

/// Measure every primitive of a group side by side. `progress(round, rounds)` is called after
/// each round.
pub fn measure_group(
    prims: &mut [Primitive],
    plan: &Plan,
    progress: impl FnMut(usize, usize),
) -> Result<Vec<Measurement>, PoolError> {
    let timings = time_side_by_side(prims, plan, progress)?;
    Ok(prims
        .iter()
        .zip(timings)
        .map(|(p, t)| Measurement {
            variant: p.variant(),
            ops_per_sample: t.ops_per_sample,
            samples_ns_per_op: t.samples_ns_per_op,
            counted: p.variant().is_counted().then_some(t.counted),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
