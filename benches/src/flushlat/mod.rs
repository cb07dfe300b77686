//! Two sections on single flushes and loads, on this CPU's real instructions over DRAM:
//!
//! * `read-after-persist` ([`rap`]): one load of a line right after `clwb` + `sfence`,
//!   `clflushopt` + `sfence`, `clflush` or a non-temporal store + `sfence`, and after 1 and
//!   10 us, against a cache hit, a line written without a flush and a cold line (Optane
//!   buffering (EuroSys'22), Sec. 3.5): does a flush evict the line here?
//! * `perc` ([`perc`]): PERC's flush and fence micro-benchmarks (PERC, Sec. 4.3-4.6): a fence
//!   every N flushes, lines of one cache set against different sets, pointer chasing with and
//!   without flushes, and the empty loop.
//!
//! Both use `pmem-ordering`'s detected instructions ([`pmem_ordering::Isa`]): a row whose
//! instruction the CPU lacks is skipped with the reason. Cycles come from the TSC, converted
//! with a rate measured against the monotonic clock at the start of the run. The memory is an
//! ordinary anonymous buffer: DRAM, not persistent memory; the instructions are real.

pub mod geometry;
pub mod lines;
pub mod perc;
pub mod rap;
pub mod report;
pub mod timer;

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::machine::Machine;
use geometry::{read_levels, CacheLevel, SYSFS_CACHE};
use perc::{PercPlan, PercResults};
use rap::{RapPlan, RapResults};

/// A variant not measured, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The variant.
    pub variant: String,
    /// Why it was not measured.
    pub reason: String,
}

impl Skipped {
    /// A skipped `variant` with its `reason`.
    pub fn new(variant: impl Into<String>, reason: &str) -> Skipped {
        Skipped {
            variant: variant.into(),
            reason: reason.to_string(),
        }
    }
}

/// Which of the two sections run, and how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushPlan {
    /// The read-after-persist section, if it runs.
    pub rap: Option<RapPlan>,
    /// The PERC section, if it runs.
    pub perc: Option<PercPlan>,
    /// How long the TSC rate is measured.
    pub tsc_window: Duration,
}

impl FlushPlan {
    /// The plan for a run: `quick` for `--quick` (about 0.1-0.2 s per section here; the full
    /// sections take about 3 s each), with the sections asked for.
    pub fn new(quick: bool, rap: bool, perc: bool) -> FlushPlan {
        let (rap_plan, perc_plan, window) = if quick {
            (
                RapPlan {
                    lines: 512,
                    rounds: 3,
                },
                PercPlan {
                    passes: 1,
                    rounds: 3,
                },
                Duration::from_millis(20),
            )
        } else {
            (
                RapPlan {
                    lines: 4096,
                    rounds: 15,
                },
                PercPlan {
                    passes: 4,
                    rounds: 15,
                },
                Duration::from_millis(200),
            )
        };
        FlushPlan {
            rap: rap.then_some(rap_plan),
            perc: perc.then_some(perc_plan),
            tsc_window: window,
        }
    }

    /// Whether any section runs.
    pub fn runs(&self) -> bool {
        self.rap.is_some() || self.perc.is_some()
    }
}

/// Both sections' results, with what they were measured on.
#[derive(Clone, Debug, Serialize)]
pub struct FlushResults {
    /// The CPU model.
    pub cpu_model: String,
    /// Logical cores.
    pub cores: usize,
    /// The flush instructions this CPU has, weakest first.
    pub flushes: Vec<String>,
    /// Measured TSC cycles per nanosecond.
    pub tsc_ghz: f64,
    /// What the memory is.
    pub memory: String,
    /// The data cache levels of CPU 0 from sysfs.
    pub caches: Vec<CacheLevel>,
    /// Why the cache geometry is missing, if it is.
    pub caches_unavailable: Option<String>,
    /// The read-after-persist section.
    pub read_after_persist: Option<RapResults>,
    /// The PERC section.
    pub perc: Option<PercResults>,
}

/// Why loads cannot be timed here, if they cannot.
fn timing_unavailable() -> Option<&'static str> {
    if !cfg!(target_arch = "x86_64") {
        Some("not an x86-64 CPU: no TSC and none of the flush instructions measured")
    } else if !timer::has_rdtscp() {
        Some("the CPU has no rdtscp to time single loads")
    } else {
        None
    }
}

/// Run the sections `plan` asks for; `line` gets one line per section, `round` each round.
pub fn measure(
    plan: &FlushPlan,
    mut line: impl FnMut(&str),
    mut round: impl FnMut(usize, usize),
) -> FlushResults {
    let machine = Machine::detect();
    let (caches, caches_unavailable) = match read_levels(Path::new(SYSFS_CACHE)) {
        Ok(levels) if !levels.is_empty() => (levels, None),
        Ok(_) => (
            Vec::new(),
            Some(format!("{SYSFS_CACHE} lists no data cache")),
        ),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let unavailable = timing_unavailable();
    let tsc_ghz = if unavailable.is_none() {
        timer::tsc_per_ns(plan.tsc_window)
    } else {
        0.0
    };
    let mut results = FlushResults {
        cpu_model: machine.cpu_model,
        cores: machine.cores,
        flushes: pmem_ordering::Isa::supported_flushes()
            .into_iter()
            .filter(|&k| k != pmem_ordering::FlushKind::Portable)
            .map(|k| k.name().to_string())
            .collect(),
        tsc_ghz,
        memory: "an anonymous heap buffer in DRAM: the flush and store instructions are real, \
                 but this is NOT persistent memory"
            .to_string(),
        caches,
        caches_unavailable,
        read_after_persist: None,
        perc: None,
    };
    if let Some(rap_plan) = plan.rap {
        line(&format!(
            "read-after-persist: {} lines x {} variants x {} rounds",
            rap_plan.lines,
            2 + rap::PERSISTS.len() * rap::DELAYS_NS.len(),
            rap_plan.rounds
        ));
        results.read_after_persist = Some(match unavailable {
            None => rap::measure(&rap_plan, tsc_ghz, &mut round),
            Some(reason) => rap::RapResults::unavailable(&rap_plan, reason),
        });
    }
    if let Some(perc_plan) = plan.perc {
        line(&format!(
            "perc: fence periods, cache sets, pointer chasing x {} rounds",
            perc_plan.rounds
        ));
        results.perc = Some(match unavailable {
            None => perc::measure(&perc_plan, &results.caches, tsc_ghz, &mut round),
            Some(reason) => perc::PercResults::unavailable(&perc_plan, reason),
        });
    }
    results
}

/// Add `results`, if the sections ran, to the run's JSON under `read_after_persist` and `perc`,
/// each with the machine it was measured on.
pub fn add_to_json(
    results: Option<&FlushResults>,
    json: &mut serde_json::Value,
) -> Result<(), serde_json::Error> {
    match results {
        Some(r) => r.add_to_json(json),
        None => Ok(()),
    }
}

impl FlushResults {
    /// Add the results to the run's JSON under `read_after_persist` and `perc`.
    pub fn add_to_json(&self, json: &mut serde_json::Value) -> Result<(), serde_json::Error> {
        let mut context = serde_json::to_value(self)?;
        for key in ["read_after_persist", "perc"] {
            let section = context[key].take();
            if !section.is_null() {
                let mut section = section;
                section["machine"] = serde_json::json!({
                    "cpu_model": self.cpu_model,
                    "cores": self.cores,
                    "flushes": self.flushes,
                    "tsc_ghz": self.tsc_ghz,
                    "memory": self.memory,
                    "caches": self.caches,
                    "caches_unavailable": self.caches_unavailable,
                });
                json[key] = section;
            }
        }
        Ok(())
    }
}
