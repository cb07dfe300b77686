//! The state machine under simulated crashes, at every event of a small history: blank and
//! membership entries, SET, INCRBY (one refused as not an integer), APPEND, MSET, DEL, a
//! SET NX that writes nothing, a FLUSHALL, writes after it, and a snapshot installed over
//! it all. Every crash image must open (the heap's, the store's, the state machine's own
//! recovery, which finishes an interrupted flush) to a whole store (heap walk, `verify`)
//! whose last applied index, membership and keyspace are the model's after the same number
//! of entries: the entry a crash interrupted is all there or not at all, its index with it.
//! After recovery the state machine applies its next entry.

use super::common;

use common::kv_model::KvState;
use common::{
    blank, del, incr, load, membership, normal, observe_sm, options, set, store_is_whole, SimStore,
};
use pmem_kv_cluster::state_machine::core::SmCore;
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

/// A snapshot up to index 20 built by another node's state machine, and its model.
fn leader_snapshot() -> (SnapshotMeta, Vec<u8>, KvState) {
    let store = Store::anonymous(8 << 20, &StoreOptions::new()).unwrap();
    let mut sm = SmCore::open(&store).unwrap();
    let mut model = KvState::default();
    for entry in [
        membership(3, 17, &[1, 2, 3]),
        set(3, 18, "f", "leader"),
        set(3, 19, "s", "snap"),
        blank(3, 20),
    ] {
        sm.apply(&entry).unwrap();
        model.apply(&entry);
    }
    let (meta, bytes) = sm.maps().build_snapshot().unwrap();
    (meta, bytes, model)
}

fn history() -> (Vec<Step>, Vec<KvState>) {
    let mut steps: Vec<Step> = entries().into_iter().map(Step::Apply).collect();
    let mut states = vec![KvState::default()];
    for step in &steps {
        let Step::Apply(entry) = step else {
            unreachable!()
        };
        let mut next = states.last().unwrap().clone();
        next.apply(entry);
        states.push(next);
    }
    let (meta, bytes, model) = leader_snapshot();
    steps.push(Step::Install(meta, bytes));
    states.push(model);
    (steps, states)
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
    let mut sm = SmCore::open(&store).unwrap();
    for (done, step) in steps.iter().enumerate() {
        run(&mut sm, step);
        assert_eq!(observe_sm(&sm).unwrap(), states[done + 1], "after {step:?}");
    }
    // The history is not trivial: keys come and go, the flush empties, the snapshot replaces.
    assert!(states.iter().any(|s| s.keys.len() >= 3));
    assert!(states[11].keys.is_empty() && states[10].keys.len() >= 2);
    assert_ne!(states[13].keys, states[14].keys);
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
            let mut sm = SmCore::open(&store).unwrap_or_else(|e| panic!("{e}"));
            for step in &steps {
                run(&mut sm, step);
                pool.operation_completed();
            }
        },
        |pool, crash| {
            let done = crash.operations_completed as usize;
            let store = load(pool)?;
            let mut sm = SmCore::open(&store).map_err(|e| format!("SmCore::open: {e}"))?;
            store_is_whole(&store)?;
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
