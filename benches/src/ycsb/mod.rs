//! YCSB-style workloads over every structure of `pmem-structures` and each of its variants.
//!
//! The workloads follow the YCSB core workloads (Cooper et al., "Benchmarking Cloud Serving
//! Systems with YCSB", SoCC'10, and YCSB's `workloads/workload{a,b,c,e}` files):
//!
//! | workload | operations |
//! |---|---|
//! | [`Workload::Load`] | insert every record once (the YCSB load phase) |
//! | [`Workload::A`] | 50% reads, 50% updates ("update heavy") |
//! | [`Workload::B`] | 95% reads, 5% updates ("read mostly") |
//! | [`Workload::C`] | 100% reads ("read only") |
//! | [`Workload::E`] | 95% scans of 1..=100 records (uniform length, YCSB's default `maxscanlength`), 5% inserts of new records ("short ranges") |
//! | [`Workload::InsertOnly`] | 100% inserts of new records |
//!
//! Reads, updates and scan starts pick loaded records by a [`KeyDistribution`]: uniform, or
//! YCSB's scrambled Zipfian with theta 0.99 ([`Chooser`]). Inserts take fresh record
//! numbers after every record loaded or inserted so far, each thread its own interleaved share
//! ([`plan`]). All keys, values and operations of a run are generated, from a seed, before its
//! timing starts.
//!
//! [`targets`] adapts each structure to the one interface the driver runs ([`targets::Target`]),
//! and [`store_targets`] the maps of a [`pmem_structures::Store`], for the store path's pairing
//! with the raw structures ([`crate::storebench`]);
//! [`run`] loads a structure, runs the workloads of a [`matrix`] on it with 1..T threads and
//! reports throughput, latency percentiles and persistence counters per operation
//! ([`results`]), with its [`progress`] on stderr.

pub mod matrix;
pub mod progress;
pub mod results;
pub mod run;
pub mod store_targets;
pub mod targets;

use serde::Serialize;

use crate::keys::records::{key_of, value_for, MAX_RECORDS};
use crate::keys::zipfian::{Chooser, Zipfian, ZipfianError, ZIPF_THETA};
use crate::keys::{below, SplitMix64};

pub use matrix::{Matrix, Scale, Skipped};
pub use progress::{bar_callback, progress_bar, ProgressEvent};
pub use results::{YcsbError, YcsbResults, YcsbRow};
pub use run::{run_matrix, run_plan, run_variant};
pub use targets::{with_target, Setup, Structure, Target, TargetError, Variant};

/// The longest scan of workload E (YCSB's default `maxscanlength`).
pub const MAX_SCAN: usize = 100;

/// A YCSB workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
pub enum Workload {
    /// The load phase: every record inserted once.
    Load,
    /// 50% reads, 50% updates.
    A,
    /// 95% reads, 5% updates.
    B,
    /// Reads only.
    C,
    /// 95% scans of 1 to 100 records, 5% inserts.
    E,
    /// Inserts of new records only.
    InsertOnly,
}

impl Workload {
    /// The workloads run after the load, in the order they run.
    pub const RUNS: [Workload; 5] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::E,
        Workload::InsertOnly,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Load => "load",
            Workload::A => "A",
            Workload::B => "B",
            Workload::C => "C",
            Workload::E => "E",
            Workload::InsertOnly => "insert-only",
        }
    }

    /// Whether the workload picks existing records (and so runs once per key distribution);
    /// the load and insert-only runs only write fresh records.
    pub fn chooses_keys(self) -> bool {
        matches!(self, Workload::A | Workload::B | Workload::C | Workload::E)
    }

    /// Whether the workload scans.
    pub fn scans(self) -> bool {
        self == Workload::E
    }

    /// The most fresh records `ops` operations of this workload insert (the load's are its
    /// records, counted apart).
    pub fn max_inserts(self, ops: u64) -> u64 {
        match self {
            Workload::E | Workload::InsertOnly => ops,
            _ => 0,
        }
    }
}

/// How reads, updates and scans choose their record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
pub enum KeyDistribution {
    /// Every loaded record equally likely.
    Uniform,
    /// YCSB's scrambled Zipfian, theta 0.99.
    Zipfian,
}

impl KeyDistribution {
    /// Both, in report order.
    pub const ALL: [KeyDistribution; 2] = [KeyDistribution::Uniform, KeyDistribution::Zipfian];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            KeyDistribution::Uniform => "uniform",
            KeyDistribution::Zipfian => "zipfian",
        }
    }
}

/// One operation of a plan: keys, values and lengths are fixed before timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Read the value of a loaded key.
    Read(u64),
    /// Replace the value of a loaded key.
    Update(u64, u64),
    /// Insert a fresh key.
    Insert(u64, u64),
    /// Visit up to `len` records in key order from a loaded key.
    Scan(u64, usize),
}

/// The records of a structure when a plan is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeySpace {
    /// Records `0..loaded` were loaded: reads, updates and scans pick among them.
    pub loaded: u64,
    /// The first record number no insert has used yet.
    pub next_insert: u64,
}

impl KeySpace {
    /// A structure holding exactly its `loaded` records.
    pub fn loaded(loaded: u64) -> KeySpace {
        KeySpace {
            loaded,
            next_insert: loaded,
        }
    }
}

/// The operations of one run, one list per thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Thread `t` runs `threads[t]`, in order.
    pub threads: Vec<Vec<Op>>,
    /// The first record number the plan's inserts leave unused.
    pub next_insert: u64,
}

impl Plan {
    /// Operations in all.
    pub fn ops(&self) -> u64 {
        self.threads.iter().map(|t| t.len() as u64).sum()
    }
}

/// Why a plan cannot be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// No thread to run it.
    #[error("a plan needs at least one thread")]
    NoThreads,
    /// Reads, updates or scans with nothing loaded to pick from.
    #[error("workload {workload} picks loaded records, but none is loaded")]
    NothingLoaded {
        /// The workload's name.
        workload: &'static str,
    },
    /// More records than the key space holds.
    #[error("{records} records do not fit the key space of {MAX_RECORDS}")]
    TooManyRecords {
        /// Records the plan would need.
        records: u64,
    },
    /// The Zipfian chooser could not be made.
    #[error(transparent)]
    Zipfian(#[from] ZipfianError),
}

/// A generator for thread `thread` of a run, distinct for every input.
fn thread_rng(
    seed: u64,
    workload: Workload,
    distribution: KeyDistribution,
    thread: usize,
) -> SplitMix64 {
    let mut mix = SplitMix64::new(seed ^ ((workload as u64) << 56) ^ ((distribution as u64) << 48));
    let base = mix.next_u64();
    SplitMix64::new(base ^ (thread as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The operations of `workload` for `threads` threads: `ops` in all (split as evenly as can
/// be), on a structure holding `keys`, from `seed`.
///
/// [`Workload::Load`] ignores `ops` and `distribution`: it inserts records
/// `keys.next_insert..keys.loaded`, each thread a contiguous share (as YCSB's load threads
/// do). Other workloads pick records of `0..keys.loaded` by `distribution`; their inserts take
/// fresh records from `keys.next_insert` on, the `j`th insert of thread `t` taking
/// `next_insert + j * threads + t`, so threads never insert the same key.
pub fn plan(
    workload: Workload,
    distribution: KeyDistribution,
    keys: KeySpace,
    ops: u64,
    threads: usize,
    seed: u64,
) -> Result<Plan, PlanError> {
    if threads == 0 {
        return Err(PlanError::NoThreads);
    }
    let t = threads as u64;
    if workload == Workload::Load {
        if keys.loaded > MAX_RECORDS {
            return Err(PlanError::TooManyRecords {
                records: keys.loaded,
            });
        }
        let first = keys.next_insert.min(keys.loaded);
        let n = keys.loaded - first;
        let lists = (0..t)
            .map(|i| {
                (first + n * i / t..first + n * (i + 1) / t)
                    .filter_map(key_of)
                    .map(|k| Op::Insert(k, value_for(k, 0)))
                    .collect()
            })
            .collect();
        return Ok(Plan {
            threads: lists,
            next_insert: keys.loaded.max(keys.next_insert),
        });
    }
    let fits = keys
        .next_insert
        .checked_add(workload.max_inserts(ops))
        .and_then(|e| e.checked_add(t))
        .is_some_and(|e| e <= MAX_RECORDS);
    if !fits {
        return Err(PlanError::TooManyRecords {
            records: keys.next_insert.saturating_add(ops),
        });
    }
    if keys.loaded == 0 && workload.chooses_keys() {
        return Err(PlanError::NothingLoaded {
            workload: workload.name(),
        });
    }
    let chooser = match distribution {
        _ if !workload.chooses_keys() => Chooser::Uniform(1),
        KeyDistribution::Uniform => Chooser::Uniform(keys.loaded),
        KeyDistribution::Zipfian => Chooser::Zipfian(Zipfian::new(keys.loaded, ZIPF_THETA)?),
    };
    let mut lists = Vec::with_capacity(threads);
    let mut most_inserts = 0u64;
    for thread in 0..threads {
        let mut rng = thread_rng(seed, workload, distribution, thread);
        let n = ops / t + u64::from((thread as u64) < ops % t);
        let mut list = Vec::with_capacity(n as usize);
        let mut inserts = 0u64;
        // Every record number the inserts can reach has a key (checked above).
        let mut fresh = || {
            let record = keys.next_insert + inserts * t + thread as u64;
            inserts += 1;
            key_of(record)
        };
        for _ in 0..n {
            let roll = below(&mut rng, 100);
            let op = match workload {
                Workload::A | Workload::B | Workload::C => {
                    let read_share = match workload {
                        Workload::A => 50,
                        Workload::B => 95,
                        _ => 100,
                    };
                    let key = key_of(chooser.next(&mut rng));
                    if roll < read_share {
                        key.map(Op::Read)
                    } else {
                        // Never version 0, so an update is told apart from the load's value.
                        let version = (rng.next_u64() as u32) | 1;
                        key.map(|k| Op::Update(k, value_for(k, version)))
                    }
                }
                Workload::E if roll < 95 => {
                    let len = 1 + below(&mut rng, MAX_SCAN as u64) as usize;
                    key_of(chooser.next(&mut rng)).map(|k| Op::Scan(k, len))
                }
                _ => fresh().map(|k| Op::Insert(k, value_for(k, 0))),
            };
            list.extend(op);
        }
        most_inserts = most_inserts.max(inserts);
        lists.push(list);
    }
    Ok(Plan {
        threads: lists,
        next_insert: keys.next_insert + most_inserts * t,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(p: &Plan) -> [u64; 4] {
        let mut c = [0u64; 4];
        for op in p.threads.iter().flatten() {
            c[match op {
                Op::Read(_) => 0,
                Op::Update(..) => 1,
                Op::Insert(..) => 2,
                Op::Scan(..) => 3,
            }] += 1;
        }
        c
    }

    #[test]
    fn op_mixes_match_the_ycsb_proportions() {
        let ops = 100_000;
        let keys = KeySpace::loaded(10_000);
        let share = |w, d| {
            let p = plan(w, d, keys, ops, 2, 7).unwrap();
            assert_eq!(p.ops(), ops);
            counts(&p).map(|c| c as f64 / ops as f64)
        };
        for d in KeyDistribution::ALL {
            let a = share(Workload::A, d);
            assert!(
                (a[0] - 0.50).abs() < 0.01 && (a[1] - 0.50).abs() < 0.01,
                "{a:?}"
            );
            let b = share(Workload::B, d);
            assert!(
                (b[0] - 0.95).abs() < 0.005 && (b[1] - 0.05).abs() < 0.005,
                "{b:?}"
            );
            assert_eq!(share(Workload::C, d), [1.0, 0.0, 0.0, 0.0]);
            let e = share(Workload::E, d);
            assert!(
                (e[3] - 0.95).abs() < 0.005 && (e[2] - 0.05).abs() < 0.005,
                "{e:?}"
            );
            assert_eq!(share(Workload::InsertOnly, d), [0.0, 0.0, 1.0, 0.0]);
        }
        let p = plan(Workload::E, KeyDistribution::Uniform, keys, ops, 1, 7).unwrap();
        let lens: Vec<usize> = p.threads[0]
            .iter()
            .filter_map(|op| match op {
                Op::Scan(_, len) => Some(*len),
                _ => None,
            })
            .collect();
        assert_eq!(lens.iter().min(), Some(&1));
        assert_eq!(lens.iter().max(), Some(&MAX_SCAN));
        let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        assert!((mean - 50.5).abs() < 1.5, "{mean}");
    }

    #[test]
    fn plans_are_deterministic_per_seed() {
        let keys = KeySpace::loaded(1000);
        for w in Workload::RUNS {
            for d in KeyDistribution::ALL {
                let p = plan(w, d, keys, 5000, 2, 11).unwrap();
                assert_eq!(p, plan(w, d, keys, 5000, 2, 11).unwrap());
                if w != Workload::InsertOnly {
                    assert_ne!(p, plan(w, d, keys, 5000, 2, 12).unwrap());
                }
            }
        }
    }

    #[test]
    fn reads_pick_loaded_keys_and_inserts_fresh_disjoint_ones() {
        let keys = KeySpace {
            loaded: 1000,
            next_insert: 1500,
        };
        let loaded: std::collections::HashSet<u64> =
            (0..1000).map(|r| key_of(r).unwrap()).collect();
        for d in KeyDistribution::ALL {
            let p = plan(Workload::A, d, keys, 4000, 2, 3).unwrap();
            for op in p.threads.iter().flatten() {
                match op {
                    Op::Read(k) | Op::Update(k, _) => assert!(loaded.contains(k)),
                    other => panic!("{other:?} in workload A"),
                }
            }
            assert_eq!(p.next_insert, 1500);
        }
        let p = plan(
            Workload::InsertOnly,
            KeyDistribution::Uniform,
            keys,
            1001,
            3,
            3,
        )
        .unwrap();
        let mut seen = std::collections::HashSet::new();
        for (t, list) in p.threads.iter().enumerate() {
            for op in list {
                let Op::Insert(k, v) = *op else {
                    panic!("{op:?} in insert-only")
                };
                let r = crate::keys::records::record_of(k).unwrap();
                assert!(r >= 1500 && r < p.next_insert, "record {r}");
                assert_eq!(r % 3, (1500 + t as u64) % 3, "thread {t} took record {r}");
                assert!(seen.insert(k), "key of record {r} inserted twice");
                assert!(crate::keys::records::value_matches(k, v));
            }
        }
        assert_eq!(seen.len(), 1001);
        let next = KeySpace {
            loaded: 1000,
            next_insert: p.next_insert,
        };
        let q = plan(Workload::E, KeyDistribution::Zipfian, next, 2000, 2, 4).unwrap();
        for op in q.threads.iter().flatten() {
            if let Op::Insert(k, _) = op {
                assert!(!seen.contains(k), "a later run reused an inserted key");
            }
        }
    }

    #[test]
    fn load_splits_the_records_among_threads() {
        let p = plan(
            Workload::Load,
            KeyDistribution::Zipfian,
            KeySpace {
                loaded: 1001,
                next_insert: 0,
            },
            0,
            2,
            1,
        )
        .unwrap();
        assert_eq!(p.ops(), 1001);
        assert_eq!(p.next_insert, 1001);
        let first = |l: &Vec<Op>| match l[0] {
            Op::Insert(k, _) => crate::keys::records::record_of(k).unwrap(),
            _ => u64::MAX,
        };
        assert_eq!(first(&p.threads[0]), 0);
        assert_eq!(first(&p.threads[1]), 500);
    }

    #[test]
    fn bad_plans_are_refused() {
        let keys = KeySpace::loaded(0);
        assert_eq!(
            plan(Workload::A, KeyDistribution::Uniform, keys, 10, 0, 1),
            Err(PlanError::NoThreads)
        );
        assert!(matches!(
            plan(Workload::C, KeyDistribution::Zipfian, keys, 10, 1, 1),
            Err(PlanError::NothingLoaded { .. })
        ));
        let full = KeySpace {
            loaded: 5,
            next_insert: MAX_RECORDS - 3,
        };
        assert!(matches!(
            plan(
                Workload::InsertOnly,
                KeyDistribution::Uniform,
                full,
                10,
                1,
                1
            ),
            Err(PlanError::TooManyRecords { .. })
        ));
        // Inserts-only from an empty structure need nothing loaded.
        assert!(plan(
            Workload::InsertOnly,
            KeyDistribution::Zipfian,
            keys,
            10,
            1,
            1
        )
        .is_ok());
    }
}
