//! The Raft log store under simulated crashes, at every event of a small history: appends
//! of one and several entries, a truncation, purges (part of the log, then all of it),
//! votes and committed marks. Every crash image must open (the heap's, the store's and the
//! log's own recovery) to a whole store (heap walk, `verify`) whose log is one the model
//! allows at that point: the state before the interrupted call, after it, or, for an append
//! or a truncation, a prefix in between (Raft accepts those: an append not yet acknowledged
//! may be partly there, a truncation may stop part way). After recovery the log must take
//! its next entry.

use super::common;

use std::collections::BTreeMap;

use common::{blank, id, load, membership, options, set, store_is_whole, SimStore};
use pmem_kv_cluster::log_store::core::LogCore;
use pmem_kv_cluster::types::{Entry, LogId, Vote};
use pmem_structures::raw::pmem_ordering::sim::{CrashPoints, Images, SimBackend};
use pmem_test_kit::run_crash_test;

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Entry>),
    TruncateAfter(Option<LogId>),
    Purge(LogId),
    Vote(Vote),
    Committed(Option<LogId>),
}

/// What the log holds: what the model and the recovered store are compared on.
#[derive(Clone, Debug, Default, PartialEq)]
struct LogState {
    purged: Option<LogId>,
    entries: BTreeMap<u64, Entry>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

impl LogState {
    fn last(&self) -> Option<LogId> {
        self.entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(self.purged)
    }

    /// Every state a crash in `op` may leave, the state after it last.
    fn during(&self, op: &Op) -> Vec<LogState> {
        let mut states = vec![self.clone()];
        match op {
            Op::Append(entries) => {
                let mut s = self.clone();
                for e in entries {
                    s.entries.insert(e.log_id.index, e.clone());
                    states.push(s.clone());
                }
            }
            Op::TruncateAfter(keep) => {
                let mut s = self.clone();
                let from = keep.as_ref().map_or(0, |k| k.index + 1);
                while let Some((&last, _)) = s.entries.iter().next_back() {
                    if last < from {
                        break;
                    }
                    s.entries.remove(&last);
                    states.push(s.clone());
                }
            }
            Op::Purge(upto) => {
                let mut s = self.clone();
                s.entries.retain(|&i, _| i > upto.index);
                s.purged = Some(*upto);
                states.push(s);
            }
            Op::Vote(v) => {
                let mut s = self.clone();
                s.vote = Some(*v);
                states.push(s);
            }
            Op::Committed(c) => {
                let mut s = self.clone();
                s.committed = *c;
                states.push(s);
            }
        }
        states
    }
}

fn run(log: &mut SimLog, op: &Op) {
    match op {
        Op::Append(entries) => log.append(entries.iter().cloned()),
        Op::TruncateAfter(keep) => log.truncate_after(keep.as_ref()),
        Op::Purge(upto) => log.purge(upto),
        Op::Vote(v) => log.save_vote(v),
        Op::Committed(c) => log.save_committed(c.as_ref()),
    }
    .unwrap_or_else(|e| panic!("{op:?}: {e}"));
}

/// The log a recovered store holds, its cached ends checked against its entries.
type SimLog = LogCore<SimBackend>;

fn observe(store: &SimStore) -> Result<(SimLog, LogState), String> {
    let log = LogCore::open(store).map_err(|e| format!("LogCore::open: {e}"))?;
    let e = |e: pmem_kv_cluster::ClusterError| e.to_string();
    let entries: BTreeMap<u64, Entry> = log
        .maps()
        .entries(..)
        .map_err(e)?
        .into_iter()
        .map(|entry| (entry.log_id.index, entry))
        .collect();
    let state = LogState {
        purged: log.purged().cloned(),
        entries,
        vote: log.maps().vote().map_err(e)?,
        committed: log.maps().committed().map_err(e)?,
    };
    if log.last().cloned() != state.last() {
        return Err(format!(
            "the log says its last id is {:?}, its entries end at {:?}",
            log.last(),
            state.last()
        ));
    }
    Ok((log, state))
}

fn history() -> Vec<Op> {
    vec![
        Op::Vote(Vote::new(1, 1)),
        Op::Append(vec![blank(1, 1)]),
        Op::Append(vec![
            membership(1, 2, &[1, 2, 3]),
            set(1, 3, "a", "1"),
            set(1, 4, "b", "2"),
            set(1, 5, "c", "3"),
        ]),
        Op::Committed(Some(id(1, 3))),
        Op::TruncateAfter(Some(id(1, 3))),
        Op::Vote(Vote::new(2, 2)),
        Op::Append(vec![blank(2, 4), set(2, 5, "d", "4")]),
        Op::Purge(id(1, 2)),
        Op::Committed(Some(id(2, 5))),
        Op::Purge(id(2, 5)),
        Op::Append(vec![set(2, 6, "e", "5")]),
    ]
}

/// Every state the history passes through, complete after each op.
fn states(ops: &[Op]) -> Vec<LogState> {
    let mut all = vec![LogState::default()];
    for op in ops {
        let after = all.last().unwrap().during(op).pop().unwrap();
        all.push(after);
    }
    all
}

#[test]
fn the_history_reaches_the_models_state_without_a_crash() {
    let ops = history();
    let expected = states(&ops);
    let pool = common::simulated_pool();
    let store = SimStore::format(pool.clone(), &options()).unwrap();
    let mut log = LogCore::open(&store).unwrap();
    for (done, op) in ops.iter().enumerate() {
        run(&mut log, op);
        let (_, now) = observe(&store).unwrap();
        assert_eq!(now, expected[done + 1], "after {op:?}");
    }
    // A gap and an overwrite are refused, nothing changed.
    let before = observe(&store).unwrap().1;
    assert!(log.append([set(2, 9, "x", "y")]).is_err());
    assert!(log.append([set(2, 6, "x", "y")]).is_err());
    assert_eq!(observe(&store).unwrap().1, before);
}

fn crash_history(name: &str, points: CrashPoints, images: Images, seed: u64) -> u64 {
    let ops = history();
    let expected = states(&ops);
    let test = common::crash_test(name, points, images, seed);
    let report = run_crash_test(
        &test,
        |pool| {
            let store = SimStore::format(pool.clone(), &options()).expect("format the store");
            LogCore::open(&store).expect("make the log's maps");
        },
        |pool| {
            let store = load(pool).unwrap_or_else(|e| panic!("{e}"));
            let mut log = LogCore::open(&store).unwrap_or_else(|e| panic!("{e}"));
            for op in &ops {
                run(&mut log, op);
                pool.operation_completed();
            }
        },
        |pool, crash| {
            let done = crash.operations_completed as usize;
            let store = load(pool)?;
            let (mut log, now) = observe(&store)?;
            store_is_whole(&store)?;
            let admitted = match ops.get(done) {
                Some(op) => expected[done].during(op),
                None => vec![expected[done].clone()],
            };
            if !admitted.contains(&now) {
                return Err(format!(
                    "after {done} ops the log is {now:?}, none of {admitted:?}"
                ));
            }
            // The recovered log goes on: its next entry is taken and read back.
            let next = now.last().map_or(1, |l| l.index + 1);
            let entry = set(9, next, "after", "crash");
            log.append([entry.clone()])
                .map_err(|e| format!("append after recovery: {e}"))?;
            let (_, then) = observe(&store)?;
            if then.entries.get(&next) != Some(&entry) {
                return Err(format!(
                    "the entry appended after recovery reads back as {:?}",
                    then.entries.get(&next)
                ));
            }
            Ok(())
        },
    );
    report.points
}

#[test]
fn every_event_of_the_log_recovers_to_a_state_the_model_allows() {
    let points = crash_history(
        "raft-log-every-event",
        CrashPoints::Every,
        Images::Extremes,
        40,
    );
    assert!(points > 200, "{points} crash points");
}

#[test]
fn random_images_at_sampled_events_recover_to_a_state_the_model_allows() {
    let points = crash_history(
        "raft-log-random-images",
        CrashPoints::Sample(200),
        Images::Random(4),
        41,
    );
    assert!(points > 100, "{points} crash points");
}
