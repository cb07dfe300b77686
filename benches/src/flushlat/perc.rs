//! The PERC flush and fence micro-benchmarks (PERC, Sec. 4.3-4.6): a fence every N flushes,
//! flushes of lines in one cache set against lines in different sets, pointer chasing with and
//! without flushes, and the empty loop under them all.
//!
//! Every case is a loop over lines whose whole run is timed with the TSC and divided by the
//! lines it touched; the cases are interleaved round by round, and a row is the median over
//! [`PercPlan::rounds`] rounds. The memory is an ordinary buffer (DRAM).

use std::hint::black_box;

use pmem_ordering::isa::{sfence, FlushKind, Isa, CACHE_LINE};
use serde::Serialize;

use super::geometry::CacheLevel;
use super::lines::{flush, line_buffer, store_and_persist, Line, Persist};
use super::timer::{end_stamp, median_f64, start_stamp};
use super::Skipped;
use crate::keys::shuffled;

/// The fence periods (one `sfence` every N flushes).
pub const FENCE_EVERY: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];
/// Distinct lines written and flushed per pass of the fence-period loop (256 KiB).
pub const FENCE_LINES: usize = 4096;
/// The list lengths of the cache-set part (PERC's lists ran from a few to 64 entries).
pub const SET_LIST_LINES: [usize; 2] = [8, 64];
/// Nodes of the pointer-chasing list, one per line (1 MiB: past the L1, within the L2).
pub const CHASE_NODES: usize = 16_384;
/// Seed of the list's random order.
const SEED: u64 = 0x9E4C;

/// How much the PERC part measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PercPlan {
    /// Passes over the lines in one timed sample.
    pub passes: usize,
    /// Rounds over every case.
    pub rounds: usize,
}

/// A fence-period row.
#[derive(Clone, Debug, Serialize)]
pub struct FenceRow {
    /// What each line gets: `clwb`, `clflushopt`, `clflush` or `none` (store only).
    pub flush: String,
    /// One `sfence` every this many lines (`None`: no fence, for `clflush`).
    pub fence_every: Option<usize>,
    /// Median nanoseconds per line.
    pub ns_per_line: f64,
}

/// A cache-set row.
#[derive(Clone, Debug, Serialize)]
pub struct SetRow {
    /// The cache level whose sets are chosen (`L1d`, `L2`).
    pub level: String,
    /// Bytes between lines of one set at that level.
    pub set_stride_bytes: u64,
    /// `same set` or `different sets`.
    pub layout: String,
    /// Lines in the list.
    pub lines: usize,
    /// What each visit does to its line.
    pub persist: String,
    /// Median nanoseconds per line.
    pub ns_per_line: f64,
}

/// A pointer-chasing row.
#[derive(Clone, Debug, Serialize)]
pub struct ChaseRow {
    /// What each visit does.
    pub variant: String,
    /// Median nanoseconds per node.
    pub ns_per_node: f64,
}

/// The PERC results.
#[derive(Clone, Debug, Serialize)]
pub struct PercResults {
    /// Rounds.
    pub rounds: usize,
    /// Lines per pass of the fence-period loop.
    pub fence_lines: usize,
    /// Nodes of the chased list.
    pub chase_nodes: usize,
    /// The empty loop: nanoseconds per iteration with no memory work.
    pub empty_loop_ns: f64,
    /// A fence every N flushes.
    pub fence_rows: Vec<FenceRow>,
    /// Same set against different sets.
    pub set_rows: Vec<SetRow>,
    /// Pointer chasing.
    pub chase_rows: Vec<ChaseRow>,
    /// Cases not measured, with the reason.
    pub skipped: Vec<Skipped>,
}

/// One measured loop.
#[derive(Clone, Copy, Debug)]
enum Case {
    Empty,
    /// `flush: None` stores only.
    Fence {
        flush: Option<FlushKind>,
        every: Option<usize>,
    },
    Set {
        level: usize,
        same: bool,
        lines: usize,
        persist: Persist,
    },
    Chase {
        write: bool,
        flush: Option<FlushKind>,
    },
}

/// The buffers the cases run over.
struct Buffers {
    fence: Vec<Line>,
    sets: Vec<Line>,
    chase: Vec<Line>,
}

/// Measure every case; `levels` are the data cache levels (sets are chosen at the first two),
/// `tsc_per_ns` converts cycles, `round` reports progress.
pub fn measure(
    plan: &PercPlan,
    levels: &[CacheLevel],
    tsc_per_ns: f64,
    mut round: impl FnMut(usize, usize),
) -> PercResults {
    let mut skipped = Vec::new();
    let usable = |kind: FlushKind, skipped: &mut Vec<Skipped>| match Persist::Flush(kind).isa() {
        Ok(_) => true,
        Err(reason) => {
            skipped.push(Skipped::new(kind.name().to_string(), &reason));
            false
        }
    };
    let flushes: Vec<FlushKind> = [FlushKind::Clwb, FlushKind::ClflushOpt, FlushKind::Clflush]
        .into_iter()
        .filter(|&k| usable(k, &mut skipped))
        .collect();
    let set_levels: Vec<&CacheLevel> = levels.iter().take(2).collect();
    let cases = cases(&flushes, set_levels.len());
    let max_stride = set_levels.iter().map(|l| l.set_stride()).max().unwrap_or(0) as usize;
    let set_span = SET_LIST_LINES.iter().max().copied().unwrap_or(0) * (max_stride + CACHE_LINE);
    let mut buffers = Buffers {
        fence: line_buffer(FENCE_LINES),
        sets: line_buffer(set_span / CACHE_LINE + 1),
        chase: chase_list(CHASE_NODES),
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for r in 0..plan.rounds {
        round(r, plan.rounds);
        for (case, s) in cases.iter().zip(samples.iter_mut()) {
            // One untimed pass first, so the sample starts from the case's own steady state
            // rather than from whatever the previous case left in the caches.
            run(*case, &mut buffers, &set_levels, 1, r as u64);
            let t0 = start_stamp();
            let ops = run(*case, &mut buffers, &set_levels, plan.passes, r as u64);
            let cycles = end_stamp().wrapping_sub(t0);
            s.push(cycles as f64 / tsc_per_ns / ops as f64);
        }
    }
    let mut results = PercResults {
        rounds: plan.rounds,
        fence_lines: FENCE_LINES,
        chase_nodes: CHASE_NODES,
        empty_loop_ns: 0.0,
        fence_rows: Vec::new(),
        set_rows: Vec::new(),
        chase_rows: Vec::new(),
        skipped,
    };
    for (case, s) in cases.iter().zip(&samples) {
        let ns = median_f64(s).unwrap_or(0.0);
        match *case {
            Case::Empty => results.empty_loop_ns = ns,
            Case::Fence { flush, every } => results.fence_rows.push(FenceRow {
                flush: flush
                    .map_or("none (store only)", FlushKind::name)
                    .to_string(),
                fence_every: every,
                ns_per_line: ns,
            }),
            Case::Set {
                level,
                same,
                lines,
                persist,
            } => results.set_rows.push(SetRow {
                level: set_levels[level].label(),
                set_stride_bytes: set_levels[level].set_stride(),
                layout: if same { "same set" } else { "different sets" }.to_string(),
                lines,
                persist: persist.name(),
                ns_per_line: ns,
            }),
            Case::Chase { write, flush } => results.chase_rows.push(ChaseRow {
                variant: chase_name(write, flush),
                ns_per_node: ns,
            }),
        }
    }
    results
}

impl PercResults {
    /// No rows: every case skipped for `reason`.
    pub fn unavailable(plan: &PercPlan, reason: &str) -> PercResults {
        PercResults {
            rounds: plan.rounds,
            fence_lines: FENCE_LINES,
            chase_nodes: CHASE_NODES,
            empty_loop_ns: 0.0,
            fence_rows: Vec::new(),
            set_rows: Vec::new(),
            chase_rows: Vec::new(),
            skipped: vec![Skipped::new("every case", reason)],
        }
    }
}

fn chase_name(write: bool, flush: Option<FlushKind>) -> String {
    let visit = if write {
        "load next, write node"
    } else {
        "load next"
    };
    match flush {
        None => visit.to_string(),
        Some(FlushKind::Clflush) => format!("{visit}, clflush"),
        Some(kind) => format!("{visit}, {} + sfence", kind.name()),
    }
}

/// Every case, in table order.
fn cases(flushes: &[FlushKind], set_levels: usize) -> Vec<Case> {
    let mut cases = vec![Case::Empty];
    let fenced: Vec<Option<FlushKind>> = flushes
        .iter()
        .filter(|&&k| k != FlushKind::Clflush)
        .map(|&k| Some(k))
        .chain([None])
        .collect();
    for flush in fenced {
        for every in FENCE_EVERY {
            cases.push(Case::Fence {
                flush,
                every: Some(every),
            });
        }
    }
    if flushes.contains(&FlushKind::Clflush) {
        cases.push(Case::Fence {
            flush: Some(FlushKind::Clflush),
            every: None,
        });
    }
    let persists: Vec<Persist> = [Persist::None]
        .into_iter()
        .chain(flushes.iter().map(|&k| Persist::Flush(k)))
        .collect();
    for level in 0..set_levels {
        for lines in SET_LIST_LINES {
            for same in [true, false] {
                for &persist in &persists {
                    cases.push(Case::Set {
                        level,
                        same,
                        lines,
                        persist,
                    });
                }
            }
        }
    }
    for write in [false, true] {
        for flush in [None].into_iter().chain(flushes.iter().map(|&k| Some(k))) {
            cases.push(Case::Chase { write, flush });
        }
    }
    cases
}

/// Run `case` once (`passes` passes) and return the lines or nodes it touched.
fn run(case: Case, b: &mut Buffers, levels: &[&CacheLevel], passes: usize, value: u64) -> usize {
    let isa = Isa::detected();
    match case {
        Case::Empty => {
            let n = FENCE_LINES * passes;
            for i in 0..n {
                black_box(i);
            }
            n
        }
        Case::Fence { flush: kind, every } => {
            let isa = kind.map_or(isa, |k| isa.with_flush(k).unwrap_or(isa));
            for _ in 0..passes {
                for (i, line) in b.fence.iter_mut().enumerate() {
                    line.0[0] = value;
                    if kind.is_some() {
                        flush(isa, line);
                    }
                    if every.is_some_and(|n| (i + 1) % n == 0) {
                        sfence();
                    }
                }
                sfence();
            }
            FENCE_LINES * passes
        }
        Case::Set {
            level,
            same,
            lines,
            persist,
        } => {
            let isa = persist.isa().unwrap_or(isa);
            let stride = levels[level].set_stride() as usize / CACHE_LINE + usize::from(!same);
            // Enough passes for about as many lines as a fence-period sample.
            let repeat = (FENCE_LINES / lines).max(1) * passes;
            for _ in 0..repeat {
                for k in 0..lines {
                    let line = &mut b.sets[k * stride];
                    let next = line.0[0].wrapping_add(1);
                    store_and_persist(isa, persist, line, next);
                }
            }
            lines * repeat
        }
        Case::Chase { write, flush: kind } => {
            let isa = kind.map_or(isa, |k| isa.with_flush(k).unwrap_or(isa));
            let steps = CHASE_NODES * passes;
            let mut node = 0usize;
            for _ in 0..steps {
                let line = &mut b.chase[node];
                node = line.0[1] as usize;
                if write {
                    line.0[0] = line.0[0].wrapping_add(1);
                }
                if let Some(k) = kind {
                    flush(isa, line);
                    if k != FlushKind::Clflush {
                        sfence();
                    }
                }
            }
            black_box(node);
            steps
        }
    }
}

/// A list of `nodes` lines linked in one random cycle: word 1 of each line is the index of the
/// next.
pub fn chase_list(nodes: usize) -> Vec<Line> {
    let mut lines = line_buffer(nodes);
    let order = shuffled(&(0..nodes as u64).collect::<Vec<_>>(), SEED);
    for (k, &i) in order.iter().enumerate() {
        lines[i as usize].0[1] = order[(k + 1) % order.len()];
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_list_is_one_cycle_through_every_node() {
        let lines = chase_list(1000);
        let mut seen = vec![false; 1000];
        let mut node = 0usize;
        for _ in 0..1000 {
            assert!(!seen[node], "node {node} visited twice");
            seen[node] = true;
            node = lines[node].0[1] as usize;
        }
        assert_eq!(node, 0);
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn every_case_is_listed_once_per_flush_and_level() {
        let flushes = [FlushKind::Clwb, FlushKind::ClflushOpt, FlushKind::Clflush];
        let all = cases(&flushes, 2);
        let fence = all
            .iter()
            .filter(|c| matches!(c, Case::Fence { .. }))
            .count();
        assert_eq!(fence, 3 * FENCE_EVERY.len() + 1);
        let sets = all.iter().filter(|c| matches!(c, Case::Set { .. })).count();
        assert_eq!(sets, 2 * SET_LIST_LINES.len() * 2 * 4);
        let chase = all
            .iter()
            .filter(|c| matches!(c, Case::Chase { .. }))
            .count();
        assert_eq!(chase, 2 * 4);
    }
}
