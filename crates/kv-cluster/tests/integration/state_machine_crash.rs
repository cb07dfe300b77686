//! The state machine under simulated crashes, at every event of a small history: blank and
//! membership entries, SET, INCRBY (one refused as not an integer), APPEND, MSET, DEL, a
//! SET NX that writes nothing, a FLUSHALL, writes after it, a snapshot installed over it
//! all, a write, and a second snapshot (the keyspace switched to its other name and back).
//! Snapshots are staged one pair per batch, so a crash falls between every step of an
//! install. Every crash image must open (the heap's, the store's, the state machine's own
//! recovery, which finishes an interrupted flush and removes a half-staged snapshot) to a
//! whole store (heap walk, `verify`) holding one keyspace, whose last applied index,
//! membership and keys are the model's after the same number of steps: the step a crash
//! interrupted is all there or not at all. After recovery the state machine applies its
//! next entry.

use super::common;

use common::kv_model::KvState;
use common::{
    blank, del, incr, load, membership, normal, observe_sm, options, set, store_is_whole, SimStore,
};
use pmem_kv_cluster::state_machine::core::{SmCore, KEYSPACE, KEYSPACE_STAGED};
use pmem_kv_cluster::types::{Entry, SnapshotMeta};
use pmem_kv_cluster::{Condition, Write};
use pmem_structures::raw::pmem_ordering::sim::{CrashPoints, Images, SimBackend};
use pmem_structures::{Store, StoreOptions};
use pmem_test_kit::run_crash_test;

#[derive(Clone, Debug)]
enum Step {
    Apply(Entry),
    Install(SnapshotMeta, Vec<u8>),
}

fn entries() -> Vec<Entry> {
    let b = |s: &str| s.as_bytes().to_vec();
    vec![
        blank(1, 1),
        membership(1, 2, &[1, 2, 3]),
        set(1, 3, "a", "1"),
        set(1, 4, "b", "x"),
        incr(1, 5, "a", 5),
        incr(1, 6, "b", 1),
        normal(
            1,
            7,
            Write::Append {
                key: b("b"),
                value: b("yz"),
            },
        ),
        normal(
            1,
            8,
            Write::MSet {
                pairs: vec![(b("c"), b("3")), (b("d"), b("4")), (b("e"), b("5"))],
            },
        ),
        del(1, 9, &["a", "c", "zz"]),
        normal(
            1,
            10,
            Write::Set {
                key: b("d"),
                value: b("no"),
                when: Condition::IfAbsent,
                get: false,
                integer_reply: true,
            },
        ),
        normal(2, 11, Write::Flush),
        set(2, 12, "f", "after"),
        membership(2, 13, &[1, 2]),
    ]
}

/// A snapshot built by another node's state machine after `entries`, and its model.
fn leader_snapshot(entries: &[Entry]) -> (SnapshotMeta, Vec<u8>, KvState) {
    let store = Store::anonymous(8 << 20, &StoreOptions::new()).unwrap();
    let mut sm = SmCore::open(&store).unwrap();
    let mut model = KvState::default();
    for entry in entries {
        sm.apply(entry).unwrap();
        model.apply(entry);
    }
    let (meta, bytes) = sm.maps().build_snapshot().unwrap();
    (meta, bytes, model)
}

/// The history's two snapshots: up to index 20, then up to 30.
fn snapshots() -> [(SnapshotMeta, Vec<u8>, KvState); 2] {
    [
        leader_snapshot(&[
            membership(3, 17, &[1, 2, 3]),
            set(3, 18, "f", "leader"),
            set(3, 19, "s", "snap"),
            blank(3, 20),
        ]),
        leader_snapshot(&[
            membership(4, 27, &[1, 2, 3]),
            set(4, 28, "t", "1"),
            set(4, 29, "u", "2"),
            set(4, 30, "s", "second"),
        ]),
    ]
}

fn history() -> (Vec<Step>, Vec<KvState>) {
    let [first, second] = snapshots();
    let mut steps: Vec<Step> = entries().into_iter().map(Step::Apply).collect();
    steps.push(Step::Install(first.0, first.1));
    steps.push(Step::Apply(set(4, 21, "g", "between")));
    steps.push(Step::Install(second.0, second.1));
    let mut states = vec![KvState::default()];
    for step in &steps {
        let next = match step {
            Step::Apply(entry) => {
                let mut next = states.last().unwrap().clone();
                next.apply(entry);
                next
            }
            Step::Install(meta, _) if meta.last_log_id.as_ref().map(|l| l.index) == Some(20) => {
                first.2.clone()
            }
            Step::Install(..) => second.2.clone(),
        };
        states.push(next);
    }
    (steps, states)
}

/// The state machine of `store`, staging snapshots one pair per batch.
fn open_sm(store: &SimStore) -> Result<SmCore<SimBackend>, String> {
    let mut sm = SmCore::open(store).map_err(|e| format!("SmCore::open: {e}"))?;
    sm.set_install_chunk(1);
    Ok(sm)
}

/// The store holds one keyspace, under one of its two names.
fn one_keyspace(store: &SimStore) -> Result<(), String> {
    let keyspaces: Vec<String> = store
        .names()
        .into_iter()
        .filter(|n| n == KEYSPACE || n == KEYSPACE_STAGED)
        .collect();
    if keyspaces.len() == 1 {
        Ok(())
    } else {
        Err(format!("the store holds the keyspaces {keyspaces:?}"))
    }
}

fn run(sm: &mut SmCore<SimBackend>, step: &Step) {
    match step {
        Step::Apply(entry) => sm.apply(entry).map(drop),
        Step::Install(meta, bytes) => sm.install_snapshot(meta, bytes),
    }
    .unwrap_or_else(|e| panic!("{step:?}: {e}"));
}

#[test]
fn the_history_reaches_the_models_states_without_a_crash() {
    let (steps, states) = history();
    let pool = common::simulated_pool();
    let store = SimStore::format(pool.clone(), &options()).unwrap();
    let mut sm = open_sm(&store).unwrap();
    let mut names = Vec::new();
    for (done, step) in steps.iter().enumerate() {
        run(&mut sm, step);
        assert_eq!(observe_sm(&sm).unwrap(), states[done + 1], "after {step:?}");
        one_keyspace(&store).unwrap();
        names.push(store.names());
    }
    // The history is not trivial: keys come and go, the flush empties, the snapshots replace,
    // the first moving the keyspace to its other name and the second moving it back.
    assert!(states.iter().any(|s| s.keys.len() >= 3));
    assert!(states[11].keys.is_empty() && states[10].keys.len() >= 2);
    assert_ne!(states[13].keys, states[14].keys);
    assert_ne!(states[15].keys, states[16].keys);
    assert!(names[13].iter().any(|n| n == KEYSPACE_STAGED));
    assert!(names[15].iter().any(|n| n == KEYSPACE));
}

fn crash_history(name: &str, points: CrashPoints, images: Images, seed: u64) -> u64 {
    let (steps, states) = history();
    let test = common::crash_test(name, points, images, seed);
    let report = run_crash_test(
        &test,
        |pool| {
            let store = SimStore::format(pool.clone(), &options()).expect("format the store");
            SmCore::open(&store).expect("make the state machine's maps");
        },
        |pool| {
            let store = load(pool).unwrap_or_else(|e| panic!("{e}"));
            let mut sm = open_sm(&store).unwrap_or_else(|e| panic!("{e}"));
            for step in &steps {
                run(&mut sm, step);
                pool.operation_completed();
            }
        },
        |pool, crash| {
            let done = crash.operations_completed as usize;
            let store = load(pool)?;
            let mut sm = open_sm(&store)?;
            store_is_whole(&store)?;
            one_keyspace(&store)?;
            let now = observe_sm(&sm)?;
            let admitted = &states[done..(done + 2).min(states.len())];
            if !admitted.contains(&now) {
                return Err(format!(
                    "after {done} steps the state machine holds {now:?}, none of {admitted:?}"
                ));
            }
            // It goes on: the next entry applies.
            let next = now.applied.map_or(1, |i| i + 1);
            sm.apply(&set(9, next, "later", "yes"))
                .map_err(|e| format!("apply after recovery: {e}"))?;
            let then = observe_sm(&sm)?;
            if then.applied != Some(next) || then.keys.get(&b"later"[..]) != Some(&b"yes".to_vec())
            {
                return Err(format!(
                    "after recovery, applying index {next} left {then:?}"
                ));
            }
            Ok(())
        },
    );
    report.points
}

#[test]
fn every_event_of_the_state_machine_recovers_to_the_models_state() {
    let points = crash_history(
        "raft-sm-every-event",
        CrashPoints::Every,
        Images::Extremes,
        50,
    );
    assert!(points > 300, "{points} crash points");
}

#[test]
fn random_images_at_sampled_events_recover_to_the_models_state() {
    let points = crash_history(
        "raft-sm-random-images",
        CrashPoints::Sample(200),
        Images::Random(4),
        51,
    );
    assert!(points > 100, "{points} crash points");
}
