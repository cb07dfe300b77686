//! Read-after-persist: the latency of one load of a line right after it was made durable, and
//! after a delay, against a cache hit, a line written without a flush and a cold line (Optane
//! buffering (EuroSys'22), Sec. 3.5, Algorithm 1 and Fig. 7).
//!
//! The lines measured are [`RapPlan::lines`] lines [`SPACING_LINES`] lines apart in one
//! buffer, so consecutive lines fall in different pages and sets. Each round visits them in a
//! fresh random order once per variant, the variants interleaved round by round: a variant
//! stores to word 0 of the line, persists it ([`Persist`]), waits its delay (a spin on the
//! TSC), then times one load of word 7 of the same line. Loading another word of the line keeps
//! store-to-load forwarding out of the number; the line is what the cache holds or not.

use std::hint::black_box;

use pmem_ordering::isa::{mfence, FlushKind, Isa};
use serde::Serialize;

use super::lines::{flush, line_buffer, store_and_persist, Line, Persist};
use super::timer::{percentile, spin_cycles, timed_load, timer_overhead};
use super::Skipped;
use crate::keys::shuffled;

/// Lines between two measured lines (65 x 64 B = 4160 B: a new page and a new L1 set each).
pub const SPACING_LINES: usize = 65;
/// The persists measured, in table order.
pub const PERSISTS: [Persist; 5] = [
    Persist::None,
    Persist::Flush(FlushKind::Clwb),
    Persist::Flush(FlushKind::ClflushOpt),
    Persist::Flush(FlushKind::Clflush),
    Persist::NonTemporal,
];
/// The delays between the persist and the load, in nanoseconds.
pub const DELAYS_NS: [u64; 3] = [0, 1_000, 10_000];
/// Seed of the visiting orders.
const SEED: u64 = 0x2A9;
/// The load's word: not the stored word 0, so no store forwarding.
const LOADED_WORD: usize = 7;

/// How much the read-after-persist part measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RapPlan {
    /// Lines measured per round and variant.
    pub lines: usize,
    /// Rounds.
    pub rounds: usize,
}

/// One variant's loads.
#[derive(Clone, Debug, Serialize)]
pub struct RapRow {
    /// What preceded the load.
    pub variant: String,
    /// Nanoseconds between the persist and the load (0 for the baselines).
    pub delay_ns: u64,
    /// Loads timed.
    pub samples: usize,
    /// Median cycles of one load (timing window included).
    pub median_cycles: u64,
    /// 90th percentile cycles.
    pub p90_cycles: u64,
    /// The median in nanoseconds.
    pub median_ns: f64,
    /// The 90th percentile in nanoseconds.
    pub p90_ns: f64,
}

/// The read-after-persist results.
#[derive(Clone, Debug, Serialize)]
pub struct RapResults {
    /// Lines measured per round and variant.
    pub lines: usize,
    /// Bytes between measured lines.
    pub spacing_bytes: usize,
    /// Rounds.
    pub rounds: usize,
    /// Median cycles of an empty timing window (included in every row).
    pub timer_overhead_cycles: u64,
    /// One row per variant measured.
    pub rows: Vec<RapRow>,
    /// Variants not measured, with the reason.
    pub skipped: Vec<Skipped>,
}

/// What precedes a timed load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Before {
    /// An untimed load of the same line: the timed load hits the L1.
    Hit,
    /// The line was flushed with `clflush` before the round's other variants ran.
    Cold,
    /// A store, a persist, a delay in cycles.
    Persisted(Persist, u64, u64),
}

impl Before {
    fn name(self) -> String {
        match self {
            Before::Hit => "cache hit (line just loaded)".to_string(),
            Before::Cold => "cold (clflushed long before)".to_string(),
            Before::Persisted(Persist::None, ..) => "store, no flush".to_string(),
            Before::Persisted(p, ..) => p.name(),
        }
    }
}

/// Measure every variant; `tsc_per_ns` converts cycles, `round` reports progress.
pub fn measure(plan: &RapPlan, tsc_per_ns: f64, mut round: impl FnMut(usize, usize)) -> RapResults {
    let mut skipped = Vec::new();
    let mut variants = vec![(Before::Hit, 0, Isa::detected())];
    if let Ok(isa) = Persist::Flush(FlushKind::Clflush).isa() {
        variants.push((Before::Cold, 0, isa));
    } else {
        skipped.push(Skipped::new(
            Before::Cold.name(),
            "the CPU has no clflush to make lines cold",
        ));
    }
    for persist in PERSISTS {
        let isa = match persist.isa() {
            Ok(isa) => isa,
            Err(reason) => {
                skipped.push(Skipped::new(persist.name(), &reason));
                continue;
            }
        };
        for delay_ns in DELAYS_NS {
            let cycles = (delay_ns as f64 * tsc_per_ns).round() as u64;
            variants.push((Before::Persisted(persist, delay_ns, cycles), delay_ns, isa));
        }
    }
    let mut buffer = line_buffer(plan.lines * SPACING_LINES);
    let indices: Vec<u64> = (0..plan.lines as u64)
        .map(|i| i * SPACING_LINES as u64)
        .collect();
    let mut samples: Vec<Vec<u64>> =
        vec![Vec::with_capacity(plan.lines * plan.rounds); variants.len()];
    for r in 0..plan.rounds {
        round(r, plan.rounds);
        for (v, &(before, _, isa)) in variants.iter().enumerate() {
            let order = shuffled(&indices, SEED ^ ((r * variants.len() + v) as u64));
            if before == Before::Cold {
                make_cold(isa, &buffer, &order);
            }
            for &i in &order {
                let line = &mut buffer[i as usize];
                samples[v].push(load_after(isa, before, line, r as u64));
            }
        }
    }
    let rows = variants
        .iter()
        .zip(samples.iter_mut())
        .map(|(&(before, delay_ns, _), s)| {
            let median = percentile(s, 50.0).unwrap_or(0);
            let p90 = percentile(s, 90.0).unwrap_or(0);
            RapRow {
                variant: before.name(),
                delay_ns,
                samples: s.len(),
                median_cycles: median,
                p90_cycles: p90,
                median_ns: median as f64 / tsc_per_ns,
                p90_ns: p90 as f64 / tsc_per_ns,
            }
        })
        .collect();
    let mut overhead = timer_overhead(10_000);
    RapResults {
        lines: plan.lines,
        spacing_bytes: SPACING_LINES * std::mem::size_of::<Line>(),
        rounds: plan.rounds,
        timer_overhead_cycles: percentile(&mut overhead, 50.0).unwrap_or(0),
        rows,
        skipped,
    }
}

/// Flush every line of `order` with `clflush` (`isa`), then wait a millisecond, so the loads
/// that follow find none of them cached: they come from DRAM.
fn make_cold(isa: Isa, buffer: &[Line], order: &[u64]) {
    for &i in order {
        flush(isa, &buffer[i as usize]);
    }
    mfence();
    std::thread::sleep(std::time::Duration::from_millis(1));
}

/// Do what `before` says to `line`, then time one load of it.
#[inline(always)]
fn load_after(isa: Isa, before: Before, line: &mut Line, value: u64) -> u64 {
    match before {
        Before::Hit => {
            black_box(line.0[LOADED_WORD]);
        }
        Before::Cold => {}
        Before::Persisted(persist, _, delay_cycles) => {
            store_and_persist(isa, persist, line, value);
            spin_cycles(delay_cycles);
        }
    }
    timed_load(&line.0[LOADED_WORD])
}

impl RapResults {
    /// No rows: every variant skipped for `reason`.
    pub fn unavailable(plan: &RapPlan, reason: &str) -> RapResults {
        RapResults {
            lines: plan.lines,
            spacing_bytes: SPACING_LINES * std::mem::size_of::<Line>(),
            rounds: plan.rounds,
            timer_overhead_cycles: 0,
            rows: Vec::new(),
            skipped: vec![Skipped::new("every variant", reason)],
        }
    }
}
