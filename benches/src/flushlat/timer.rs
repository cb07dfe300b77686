//! Cycle timestamps, the TSC rate, fenced single-load timing, spin delays and the order
//! statistics the section reports.
//!
//! A load is timed as `lfence; rdtsc; lfence; load; rdtscp; lfence`: the first pair keeps
//! earlier work out of the window, `rdtscp` waits until the load has completed, and the last
//! `lfence` keeps later work from starting inside it. The window itself costs some cycles
//! ([`timer_overhead`]), reported beside the loads rather than subtracted.

use std::hint::black_box;
use std::sync::atomic::{compiler_fence, Ordering};
use std::time::{Duration, Instant};

/// A timestamp in TSC cycles, fenced so that earlier instructions have completed.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn start_stamp() -> u64 {
    compiler_fence(Ordering::SeqCst);
    // SAFETY: lfence and rdtsc have no memory operands and exist on every x86-64 CPU (SSE2 is
    // part of the x86-64 baseline).
    let t = unsafe {
        std::arch::x86_64::_mm_lfence();
        let t = std::arch::x86_64::_rdtsc();
        std::arch::x86_64::_mm_lfence();
        t
    };
    compiler_fence(Ordering::SeqCst);
    t
}

/// A timestamp in TSC cycles taken after every earlier load has completed (`rdtscp`), fenced so
/// that later instructions do not start before it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub fn end_stamp() -> u64 {
    compiler_fence(Ordering::SeqCst);
    let mut aux = 0u32;
    // SAFETY: rdtscp writes only `aux`, a valid local; the section runs only where the CPU
    // has rdtscp (every x86-64 CPU this workspace supports; `has_rdtscp` is checked first).
    let t = unsafe {
        let t = std::arch::x86_64::__rdtscp(&mut aux);
        std::arch::x86_64::_mm_lfence();
        t
    };
    compiler_fence(Ordering::SeqCst);
    t
}

/// Without a TSC, nanoseconds since the first call stand in for cycles (rate 1 GHz).
#[cfg(not(target_arch = "x86_64"))]
pub fn start_stamp() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// See [`start_stamp`].
#[cfg(not(target_arch = "x86_64"))]
pub fn end_stamp() -> u64 {
    start_stamp()
}

/// Whether this CPU has `rdtscp` (CPUID 0x8000_0001, EDX bit 27); without it the section skips
/// its single-load timings.
pub fn has_rdtscp() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // Leaf 0x8000_0000 gives the highest extended leaf, checked before 0x8000_0001 is read.
        let max = std::arch::x86_64::__cpuid(0x8000_0000).eax;
        max >= 0x8000_0001 && std::arch::x86_64::__cpuid(0x8000_0001).edx & (1 << 27) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Cycles to load `word`, in a fenced window (see the module docs).
#[inline(always)]
pub fn timed_load(word: &u64) -> u64 {
    let t0 = start_stamp();
    // SAFETY: a reference is valid and aligned for a read; volatile keeps the load in the
    // window and stops the compiler from reusing an earlier value.
    let value = unsafe { std::ptr::read_volatile(word) };
    let t1 = end_stamp();
    black_box(value);
    t1.wrapping_sub(t0)
}

/// Cycles of the timing window with nothing in it: the floor under every [`timed_load`].
pub fn timer_overhead(samples: usize) -> Vec<u64> {
    (0..samples)
        .map(|_| {
            let t0 = start_stamp();
            let t1 = end_stamp();
            t1.wrapping_sub(t0)
        })
        .collect()
}

/// Spin until `cycles` TSC cycles have passed.
#[inline(always)]
pub fn spin_cycles(cycles: u64) {
    if cycles == 0 {
        return;
    }
    let start = start_stamp();
    while start_stamp().wrapping_sub(start) < cycles {
        std::hint::spin_loop();
    }
}

/// TSC cycles per nanosecond, measured against the monotonic clock over `window`.
pub fn tsc_per_ns(window: Duration) -> f64 {
    let wall = Instant::now();
    let t0 = start_stamp();
    while wall.elapsed() < window {
        std::hint::spin_loop();
    }
    let t1 = end_stamp();
    let ns = wall.elapsed().as_nanos() as f64;
    t1.wrapping_sub(t0) as f64 / ns
}

/// The `p`-th percentile (0..=100) of `samples` by the nearest-rank rule, or `None` when there
/// are none. Sorts `samples`.
pub fn percentile(samples: &mut [u64], p: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * samples.len() as f64).ceil() as usize;
    Some(samples[rank.clamp(1, samples.len()) - 1])
}

/// The median of `values` (the mean of the middle two for an even count), or `None` when
/// there are none.
pub fn median_f64(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_uses_the_nearest_rank() {
        let mut s: Vec<u64> = (1..=10).rev().collect();
        assert_eq!(percentile(&mut s, 50.0), Some(5));
        assert_eq!(percentile(&mut s, 90.0), Some(9));
        assert_eq!(percentile(&mut s, 100.0), Some(10));
        assert_eq!(percentile(&mut s, 0.0), Some(1));
        assert_eq!(percentile(&mut [7], 90.0), Some(7));
        assert_eq!(percentile(&mut [], 50.0), None);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median_f64(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median_f64(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median_f64(&[]), None);
    }

    #[test]
    fn timestamps_advance_and_the_rate_is_positive() {
        let a = start_stamp();
        let b = end_stamp();
        assert!(b >= a);
        assert!(tsc_per_ns(Duration::from_millis(2)) > 0.0);
    }
}
