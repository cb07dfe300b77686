//! Write batches over a map of leaves (four slots a leaf) beside maps of other kinds, under
//! simulated crashes, with the harness of `batches_crash.rs`: at every event of a batch that
//! overflows a leaf (new leaves), one that overwrites (inline and out of line), rebuilds a
//! leaf and empties the next one, one that empties every leaf, an abandoned batch and one
//! failing for room; and crashes of recovery itself. Every image recovers to the model before
//! or after the interrupted step, the heap walk and `verify` clean.

use pmem_ordering::sim::{CrashPoints, Images};

use super::batches_crash::{
    blocks, crash_workload, recovery_crashes, root_bytes, run_step, setup_store, states, w, Change,
    Step,
};

/// The map of leaves' index in the harness's maps.
const LEAVES: usize = 4;

fn text(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// A value too large for a slot of the leaves: a record of its own.
fn large(tag: u8) -> Vec<u8> {
    vec![tag; 100]
}

fn leaf(key: &str, value: Option<Vec<u8>>) -> Change {
    Change(LEAVES, text(key), value)
}

fn workload() -> (Vec<Change>, Vec<Step>) {
    let setup = vec![
        leaf("b", Some(text("1"))),
        leaf("d", Some(text("2"))),
        Change(0, w(1), Some(w(10))),
    ];
    // Ten new keys between two neighbours of one leaf, one of them out of line, and an
    // overwrite: twelve pairs dealt to four leaves of three.
    let mut overflow: Vec<Change> = (0..10)
        .map(|i| {
            let value = if i == 5 { large(5) } else { vec![b'0' + i] };
            leaf(&format!("c{i}"), Some(value))
        })
        .collect();
    overflow.push(leaf("b", Some(text("B"))));
    overflow.push(Change(0, w(2), Some(w(20))));
    overflow.push(Change(2, text("x"), Some(text("ex"))));
    // The leaves are now [b c0 c1] [c2 c3 c4] [c5 c6 c7] [c8 c9 d]: the first overflows
    // again and is rebuilt while the second is emptied; overwrites in place, a record
    // replaced, a record removed.
    let mixed = vec![
        leaf("b0", Some(text("n0"))),
        leaf("b1", Some(large(1))),
        leaf("c2", None),
        leaf("c3", None),
        leaf("c4", None),
        leaf("c5", None),
        leaf("c6", Some(large(6))),
        leaf("c9", Some(text("nine"))),
        leaf("zz", None),
        Change(0, w(1), None),
        Change(1, w(7), Some(w(70))),
    ];
    let every_key = ["b", "b0", "b1", "c0", "c1", "c6", "c7", "c8", "c9", "d"];
    let mut emptying: Vec<Change> = every_key.iter().map(|k| leaf(k, None)).collect();
    emptying.push(Change(2, text("x"), None));
    let steps = vec![
        Step::Batch(overflow),
        Step::Single(leaf("c3", Some(text("three")))),
        Step::Batch(mixed),
        Step::Batch(emptying),
        Step::Abandoned(vec![
            leaf("q", Some(text("q"))),
            Change(0, w(9), Some(w(9))),
        ]),
        Step::TooLarge(vec![
            leaf("r0", Some(text("r"))),
            leaf("r1", Some(large(2))),
            leaf("r2", Some(text("r"))),
            leaf("r3", Some(text("r"))),
            leaf("r4", Some(text("r"))),
            Change(2, text("huge"), Some(vec![1u8; 3 << 20])),
        ]),
        Step::Batch(vec![leaf("after", Some(text("all")))]),
    ];
    (setup, steps)
}

#[test]
fn the_leaf_workload_adds_leaves_then_frees_them() {
    use pmem_ordering::sim::{SimBackend, SimConfig};
    use pmem_ordering::Pool;
    use pmem_structures::raw::STORE_LAYOUT;
    use std::sync::Arc;

    let (setup, steps) = workload();
    let expected = states(&setup, &steps);
    let pool = Pool::<SimBackend>::simulated(STORE_LAYOUT, 2 << 20, root_bytes(), SimConfig::x86())
        .map(Arc::new)
        .unwrap();
    setup_store(&pool, &setup, true);
    let store = pmem_test_kit::reload_store(&pool).unwrap();
    let one_leaf = blocks(&store)[LEAVES];
    run_step(&store, &steps[0]);
    // Three new leaves and a record.
    assert_eq!(blocks(&store)[LEAVES], one_leaf + 4);
    run_step(&store, &steps[1]);
    run_step(&store, &steps[2]);
    // The first leaf rebuilt into two (5 pairs), the second emptied and freed, a record
    // removed, one replaced, one added.
    assert_eq!(blocks(&store)[LEAVES], one_leaf + 4 + 1 + 1 - 1 - 1 + 1);
    run_step(&store, &steps[3]);
    assert_eq!(
        blocks(&store)[LEAVES],
        one_leaf,
        "every leaf but the first freed"
    );
    for step in &steps[4..] {
        run_step(&store, step);
    }
    store.check_blocks().unwrap();
    let report = store.verify();
    assert!(report.is_healthy(), "{report}");
    let map = store
        .btree_map_with::<Vec<u8>, Vec<u8>>("leaves", pmem_test_kit::fixture::SMALL_LEAVES)
        .unwrap();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = map.iter().map(Result::unwrap).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = expected.last().unwrap()[LEAVES]
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(pairs, want);
}

#[test]
fn every_event_of_batches_over_a_map_of_leaves_recovers_all_or_nothing() {
    let points = crash_workload(
        "leaf-batches-every-event",
        workload(),
        CrashPoints::Every,
        Images::Extremes,
        true,
    );
    assert!(points > 500, "{points} crash points");
}

#[test]
fn random_images_of_batches_over_a_map_of_leaves_recover_all_or_nothing() {
    let points = crash_workload(
        "leaf-batches-random-images",
        workload(),
        CrashPoints::Sample(300),
        Images::Random(6),
        true,
    );
    assert!(points > 100, "{points} crash points");
}

#[test]
fn a_crash_of_recovery_of_a_leaf_batch_recovers_all_or_nothing() {
    recovery_crashes("leaf-batches-recovery-crash", workload(), 80, 16);
}

/// Seventy pairs in records, over two dozen leaves, all removed by one batch: its clear frees
/// more blocks than one transaction takes, in two, the first recording its progress. Crashes
/// at sampled events (the two transactions among them) and crashes of that recovery.
fn many_frees() -> (Vec<Change>, Vec<Step>) {
    let key = |i: u8| format!("k{i:02}");
    let setup = (0..70).map(|i| leaf(&key(i), Some(large(i)))).collect();
    let mut removes: Vec<Change> = (0..70).map(|i| leaf(&key(i), None)).collect();
    removes.push(Change(0, w(3), Some(w(30))));
    (setup, vec![Step::Batch(removes)])
}

#[test]
fn a_clear_freeing_in_two_transactions_recovers_all_or_nothing() {
    let points = crash_workload(
        "leaf-batches-many-frees",
        many_frees(),
        CrashPoints::Sample(250),
        Images::Random(2),
        true,
    );
    assert!(points > 100, "{points} crash points");
    recovery_crashes("leaf-batches-many-frees-recovery", many_frees(), 60, 16);
}
