//! What the structure benchmarks ([`crate::ccehbench`], [`crate::fastfairbench`],
//! [`crate::datalogbench`]) accumulate for one measured operation over their rounds, and the
//! small timing helpers they share (the criterion benches' timed loops too).

use std::time::{Duration, Instant};

use pmem_ordering::{thread_stats, Stats};

/// One measured operation over the rounds: a rate per timed run, the operations and the
/// calling thread's persistence counters summed over the runs, and the latency samples the runs
/// took.
#[derive(Clone, Debug, Default)]
pub struct Phase {
    /// Operations per second of each timed run.
    pub rates: Vec<f64>,
    /// Operations over all runs.
    pub ops: u64,
    /// The thread's persistence counters over all runs.
    pub stats: Stats,
    /// Latencies of single calls, in nanoseconds, that the runs sampled.
    pub latencies: Vec<f64>,
}

impl Phase {
    /// Run `f`, which makes `n` operations (sampling latencies into the vector it is given),
    /// as one timed run with the thread's counters read around it; returns what `f` returns.
    pub fn time<T, E>(
        &mut self,
        n: u64,
        f: impl FnOnce(&mut Vec<f64>) -> Result<T, E>,
    ) -> Result<T, E> {
        let before = thread_stats();
        let start = Instant::now();
        let out = f(&mut self.latencies)?;
        let elapsed = start.elapsed();
        self.stats = self.stats + (thread_stats() - before);
        self.rates.push(n as f64 / elapsed.as_secs_f64());
        self.ops += n;
        Ok(out)
    }

    /// [`Phase::time`] of a run whose `f` returns how many of its `n` operations did `what`:
    /// a [`CountError`] naming `operation` unless that is `expected`.
    pub fn time_counted<E, B>(
        &mut self,
        n: u64,
        expected: u64,
        operation: impl FnOnce() -> String,
        what: &'static str,
        f: impl FnOnce(&mut Vec<f64>) -> Result<u64, E>,
    ) -> Result<(), B>
    where
        B: From<E> + From<CountError>,
    {
        let got = self.time(n, f)?;
        check_count(operation, expected, got, what)?;
        Ok(())
    }

    /// `total` divided by the operations (a per-operation figure of the counters).
    pub fn per_op(&self, total: u64) -> f64 {
        total as f64 / self.ops.max(1) as f64
    }

    /// The `q` quantile of the latency samples (`None` if none were taken).
    pub fn latency(&self, q: f64) -> Option<f64> {
        (!self.latencies.is_empty()).then(|| percentile(&self.latencies, q))
    }
}

/// A run whose operations did not all do what they should have: a bug, not a measurement.
#[derive(Debug, thiserror::Error)]
#[error("{operation}: {got} of {expected} {what}")]
pub struct CountError {
    /// The structure and operation.
    pub operation: String,
    /// How many should have.
    pub expected: u64,
    /// How many did.
    pub got: u64,
    /// What was counted.
    pub what: &'static str,
}

/// `Ok` if `got` is `expected`, else the [`CountError`] naming `operation` and `what`.
pub fn check_count(
    operation: impl FnOnce() -> String,
    expected: u64,
    got: u64,
    what: &'static str,
) -> Result<(), CountError> {
    if got == expected {
        return Ok(());
    }
    Err(CountError {
        operation: operation(),
        expected,
        got,
        what,
    })
}

/// `op()` as call `i` of a run that times every `every`th call on its own: such a call is timed
/// into `latencies` (when given), the others run untimed.
pub fn sampled_call<T, E>(
    i: usize,
    every: usize,
    latencies: Option<&mut Vec<f64>>,
    op: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    match latencies {
        Some(lat) if i.is_multiple_of(every) => {
            let t = Instant::now();
            let out = op()?;
            lat.push(ns(t.elapsed()));
            Ok(out)
        }
        _ => op(),
    }
}

/// `op`, timed; `check` then gets its result, outside the time. With [`total_time`], the body of
/// a criterion `iter_custom` loop.
pub fn time_then_check<T>(op: impl FnOnce() -> T, check: impl FnOnce(T)) -> Duration {
    let start = Instant::now();
    let out = op();
    let elapsed = start.elapsed();
    check(out);
    elapsed
}

/// The sum of `iters` runs, each returning its own time, so that what a run sets up and tears
/// down around its timed part stays out of the total (criterion's `iter_custom`).
pub fn total_time(iters: u64, mut run: impl FnMut() -> Duration) -> Duration {
    (0..iters).map(|_| run()).sum()
}

/// Nanoseconds of a duration, as a float.
pub fn ns(d: Duration) -> f64 {
    d.as_nanos() as f64
}

/// The `q` quantile (0..=1) of `xs` by nearest rank; NaN if empty.
pub fn percentile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The median time, in nanoseconds, of an empty timed section (`Instant::now`, `elapsed`).
pub fn timer_overhead_ns() -> f64 {
    let samples: Vec<f64> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            ns(std::hint::black_box(t).elapsed())
        })
        .collect();
    percentile(&samples, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let xs = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&xs, 0.5), 3.0);
        assert_eq!(percentile(&xs, 0.99), 5.0);
        assert_eq!(percentile(&xs, 0.0), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_phase_sums_runs_and_a_count_check_names_the_mismatch() {
        let mut phase = Phase::default();
        let got: Result<u64, CountError> = phase.time(10, |lat| {
            lat.push(5.0);
            Ok(10)
        });
        assert_eq!(got.unwrap(), 10);
        phase.time::<(), CountError>(30, |_| Ok(())).unwrap();
        assert_eq!((phase.ops, phase.rates.len()), (40, 2));
        assert!(phase.rates.iter().all(|r| *r > 0.0));
        assert_eq!(phase.per_op(80), 2.0);
        assert_eq!(phase.latency(0.5), Some(5.0));
        assert_eq!(Phase::default().latency(0.5), None);
        assert!(check_count(|| "x".into(), 3, 3, "keys").is_ok());
        let e = check_count(|| "CCEH remove".into(), 3, 2, "keys removed").unwrap_err();
        assert_eq!(e.to_string(), "CCEH remove: 2 of 3 keys removed");
        let counted: Result<(), CountError> =
            phase.time_counted(4, 4, || "x".into(), "keys", |_| Ok::<u64, CountError>(3));
        assert_eq!(counted.unwrap_err().to_string(), "x: 3 of 4 keys");
        assert_eq!(phase.ops, 44, "a run that miscounts is still timed");
    }

    #[test]
    fn runs_are_timed_then_checked_and_summed() {
        let mut checked = Vec::new();
        let mut run = 0;
        let total = total_time(3, || {
            run += 1;
            time_then_check(
                || {
                    std::thread::sleep(Duration::from_millis(1));
                    run
                },
                |out| checked.push(out),
            )
        });
        assert_eq!(checked, [1, 2, 3]);
        assert!(total >= Duration::from_millis(3), "{total:?}");
    }

    #[test]
    fn every_nth_call_is_timed_on_its_own() {
        let mut lat = Vec::new();
        let mut calls = 0;
        for i in 0..10 {
            let got: Result<usize, ()> = sampled_call(i, 4, Some(&mut lat), || {
                calls += 1;
                Ok(i)
            });
            assert_eq!(got, Ok(i));
        }
        assert_eq!((calls, lat.len()), (10, 3), "calls 0, 4 and 8 timed");
        let untimed: Result<(), ()> = sampled_call(0, 4, None, || Ok(()));
        assert_eq!(untimed, Ok(()));
        let failed: Result<(), &str> = sampled_call(4, 4, Some(&mut lat), || Err("no"));
        assert_eq!(
            (failed, lat.len()),
            (Err("no"), 3),
            "a failed call is not a sample"
        );
    }
}
