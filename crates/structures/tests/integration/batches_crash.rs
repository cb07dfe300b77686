//! Write batches under simulated crashes: at every event of small batches that split CCEH
//! segments and FAST&FAIR nodes, make trie layers, publish and retire records and write the
//! reserved keys, across four maps at once; and crashes of recovery itself. The harness
//! (steps, model, the check of every image) also serves `batches_crash_leaves.rs`, whose
//! batches write a fifth map, of the leaf layout. Every crash image
//! must recover (`Heap::open`, `Store::load`) to a store whose heap walk and `verify` are
//! clean and whose four maps hold, all together, the model after the steps that returned or
//! after the interrupted one too: never part of a batch, never a batch applied over a later
//! single write.

use std::collections::BTreeMap as Model;
use std::sync::Arc;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_ordering::Pool;
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::raw::leafmap::LeafMapConfig;
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::{crash_test_outcome_with_recovery, run_crash_test};

type SimStore = Store<SimBackend>;
type Bytes = Vec<u8>;

/// Four-bucket segments and 128-byte nodes (four entries): a few keys split them.
const TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

fn tree() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

/// The maps, by index: `u64` hash, `u64` ordered, byte hash, byte ordered (trees), byte
/// ordered (leaves of four slots).
pub(super) const MAPS: [&str; 5] = ["hash", "tree", "bytes", "text", "leaves"];

/// The leaf map's shape: four slots of 64 bytes, a few keys fill a leaf.
const LEAVES: LeafMapConfig = pmem_test_kit::fixture::SMALL_LEAVES;

/// One change: a map, a key and its new value (`None` removes it). Keys and values of the
/// `u64` maps are 8 big-endian bytes.
#[derive(Clone, Debug)]
pub(super) struct Change(pub(super) usize, pub(super) Bytes, pub(super) Option<Bytes>);

#[derive(Clone, Debug)]
pub(super) enum Step {
    /// A batch of changes, committed.
    Batch(Vec<Change>),
    /// A batch whose closure fails after its changes: nothing may change.
    Abandoned(Vec<Change>),
    /// A batch whose commit fails for lack of room (its last change's value is too large for
    /// the pool): nothing may change, though the room it made stays.
    TooLarge(Vec<Change>),
    /// One single write.
    Single(Change),
}

pub(super) type State = [Model<Bytes, Bytes>; 5];

fn word(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes.try_into().expect("8 bytes"))
}

pub(super) fn w(v: u64) -> Bytes {
    v.to_be_bytes().to_vec()
}

pub(super) fn states(setup: &[Change], steps: &[Step]) -> Vec<State> {
    let apply = |state: &mut State, changes: &[Change]| {
        for Change(map, key, value) in changes {
            match value {
                Some(v) => state[*map].insert(key.clone(), v.clone()),
                None => state[*map].remove(key),
            };
        }
    };
    let mut state: State = Default::default();
    apply(&mut state, setup);
    let mut all = vec![state.clone()];
    for step in steps {
        match step {
            Step::Batch(changes) => apply(&mut state, changes),
            Step::Single(change) => apply(&mut state, std::slice::from_ref(change)),
            Step::Abandoned(_) | Step::TooLarge(_) => {}
        }
        all.push(state.clone());
    }
    all
}

/// Write `changes` into `batch` through the maps' handles.
fn write_all(
    store: &SimStore,
    batch: &mut pmem_structures::WriteBatch<SimBackend>,
    changes: &[Change],
) -> Result<(), Error> {
    for Change(map, key, value) in changes {
        match map {
            0 | 1 => {
                let (k, v) = (word(key), value.as_deref().map(word));
                if *map == 0 {
                    let m = store.hash_map_with::<u64, u64>(MAPS[0], TABLE)?;
                    match v {
                        Some(v) => drop(m.upsert_in(batch, k, v)?),
                        None => m.delete_in(batch, k)?,
                    }
                } else {
                    let m = store.btree_map_with::<u64, u64>(MAPS[1], tree())?;
                    match v {
                        Some(v) => m.put_in(batch, k, v)?,
                        None => drop(m.remove_in(batch, k)?),
                    }
                }
            }
            2 => {
                let m = store.hash_map_with::<Bytes, Bytes>(MAPS[2], TABLE)?;
                match value {
                    Some(v) => m.put_in(batch, key, v)?,
                    None => drop(m.remove_in(batch, key)?),
                }
            }
            3 => {
                let m = store.btree_map_with::<Bytes, Bytes>(MAPS[3], tree())?;
                match value {
                    Some(v) => drop(m.upsert_in(batch, key, v)?),
                    None => m.delete_in(batch, key)?,
                }
            }
            _ => {
                let m = store.btree_map_with::<Bytes, Bytes>(MAPS[4], LEAVES)?;
                match value {
                    Some(v) => drop(m.upsert_in(batch, key, v)?),
                    None => drop(m.remove_in(batch, key)?),
                }
            }
        }
    }
    Ok(())
}

fn single(store: &SimStore, change: &Change) -> Result<(), Error> {
    let Change(map, key, value) = change;
    match map {
        0 => {
            let m = store.hash_map_with::<u64, u64>(MAPS[0], TABLE)?;
            match value {
                Some(v) => drop(m.upsert(word(key), word(v))?),
                None => drop(m.remove(word(key))?),
            }
        }
        1 => {
            let m = store.btree_map_with::<u64, u64>(MAPS[1], tree())?;
            match value {
                Some(v) => drop(m.upsert(word(key), word(v))?),
                None => drop(m.remove(word(key))?),
            }
        }
        2 => {
            let m = store.hash_map_with::<Bytes, Bytes>(MAPS[2], TABLE)?;
            match value {
                Some(v) => drop(m.upsert(key, v)?),
                None => drop(m.remove(key)?),
            }
        }
        3 => {
            let m = store.btree_map_with::<Bytes, Bytes>(MAPS[3], tree())?;
            match value {
                Some(v) => drop(m.upsert(key, v)?),
                None => drop(m.remove(key)?),
            }
        }
        _ => {
            let m = store.btree_map_with::<Bytes, Bytes>(MAPS[4], LEAVES)?;
            match value {
                Some(v) => drop(m.upsert(key, v)?),
                None => drop(m.remove(key)?),
            }
        }
    }
    Ok(())
}

pub(super) fn run_step(store: &SimStore, step: &Step) {
    match step {
        Step::Batch(changes) => store
            .write(|batch| write_all(store, batch, changes))
            .expect("a batch"),
        Step::Abandoned(changes) => {
            let result = store.write(|batch| {
                write_all(store, batch, changes)?;
                Err::<(), Error>(Error::InvalidConfig {
                    reason: "abandoned".into(),
                })
            });
            assert!(matches!(result, Err(Error::InvalidConfig { .. })));
        }
        Step::TooLarge(changes) => {
            let result = store.write(|batch| write_all(store, batch, changes));
            assert!(matches!(result, Err(Error::PoolFull { .. })), "{result:?}");
        }
        Step::Single(change) => single(store, change).expect("a single write"),
    }
}

/// The four maps' pairs, each map checked (`check`, `len`) on the way.
fn observe(store: &SimStore) -> Result<State, String> {
    let e = |e: Error| e.to_string();
    let mut state: State = Default::default();
    let m = store.hash_map_with::<u64, u64>(MAPS[0], TABLE).map_err(e)?;
    m.check().map_err(e)?;
    for pair in m.iter() {
        let (k, v) = pair.map_err(e)?;
        state[0].insert(w(k), w(v));
    }
    let m = store
        .btree_map_with::<u64, u64>(MAPS[1], tree())
        .map_err(e)?;
    m.check().map_err(e)?;
    for pair in m.iter() {
        let (k, v) = pair.map_err(e)?;
        state[1].insert(w(k), w(v));
    }
    let m = store
        .hash_map_with::<Bytes, Bytes>(MAPS[2], TABLE)
        .map_err(e)?;
    m.check().map_err(e)?;
    state[2] = m.iter().collect::<Result<_, _>>().map_err(e)?;
    let m = store
        .btree_map_with::<Bytes, Bytes>(MAPS[3], tree())
        .map_err(e)?;
    m.check().map_err(e)?;
    state[3] = m.iter().collect::<Result<_, _>>().map_err(e)?;
    // The map of leaves only where a workload made it.
    let leaves = store.names().iter().any(|n| n == MAPS[4]);
    if leaves {
        let m = store
            .btree_map_with::<Bytes, Bytes>(MAPS[4], LEAVES)
            .map_err(e)?;
        m.check().map_err(e)?;
        state[4] = m.iter().collect::<Result<_, _>>().map_err(e)?;
    }
    for (i, map) in state.iter().enumerate() {
        let len = match i {
            4 if !leaves => 0,
            0 => store
                .hash_map_with::<u64, u64>(MAPS[0], TABLE)
                .map_err(e)?
                .len(),
            1 => store
                .btree_map_with::<u64, u64>(MAPS[1], tree())
                .map_err(e)?
                .len(),
            2 => store
                .hash_map_with::<Bytes, Bytes>(MAPS[2], TABLE)
                .map_err(e)?
                .len(),
            3 => store
                .btree_map_with::<Bytes, Bytes>(MAPS[3], tree())
                .map_err(e)?
                .len(),
            _ => store
                .btree_map_with::<Bytes, Bytes>(MAPS[4], LEAVES)
                .map_err(e)?
                .len(),
        };
        if len != map.len() as u64 {
            return Err(format!(
                "{} counts {len} keys, holds {}",
                MAPS[i],
                map.len()
            ));
        }
    }
    Ok(state)
}

fn options() -> StoreOptions {
    pmem_test_kit::crash_store_options(MAPS.len() as u64)
}

/// The pool's root: the catalog of [`options`].
pub(super) fn root_bytes() -> u64 {
    options().root_size().expect("a root size")
}

/// The check of every crash image: recovery, the heap walk, `verify`, and the maps all at the
/// model's state after `done` steps or `done + 1`.
pub(super) fn check_image(
    pool: &Arc<Pool<SimBackend>>,
    done: usize,
    expected: &[State],
) -> Result<(), String> {
    let store = pmem_test_kit::reload_store(pool)?;
    store
        .check_blocks()
        .map_err(|e| format!("heap walk: {e}"))?;
    let report = store.verify();
    if !report.is_healthy() {
        return Err(format!("verify: {report}"));
    }
    let now = observe(&store)?;
    let admitted = &expected[done..(done + 2).min(expected.len())];
    if !admitted.contains(&now) {
        return Err(format!(
            "after {done} steps the maps hold {now:?}, none of the model's {admitted:?}"
        ));
    }
    Ok(())
}

pub(super) fn setup_store(pool: &Arc<Pool<SimBackend>>, setup: &[Change], warm_area: bool) {
    let store = SimStore::format(pool.clone(), &options()).expect("format the store");
    for change in setup {
        single(&store, change).expect("a setup write");
    }
    if warm_area {
        // An empty-changing batch still makes the area: a removal of an absent key.
        store
            .write(|batch| {
                let m = store.hash_map_with::<u64, u64>(MAPS[0], TABLE)?;
                m.delete_in(batch, 1u64 << 40)
            })
            .expect("the first batch");
    }
}

/// The test's steps: a batch over all four maps that splits, makes layers (pushed down,
/// compressed, split, made empty for two new keys), publishes and retires records and writes
/// the reserved keys; single writes after it; a batch of removes and overwrites; a batch
/// emptying every layer of the ordered map of records; an abandoned batch; a batch too large
/// for the pool.
fn workload() -> (Vec<Change>, Vec<Step>) {
    let text = |s: &str| s.as_bytes().to_vec();
    let setup = vec![
        Change(0, w(1), Some(w(10))),
        Change(1, w(1), Some(w(10))),
        Change(1, w(2), Some(w(20))),
        Change(2, text("a"), Some(text("alpha"))),
        Change(3, text("user:0001"), Some(text("ada"))),
        Change(3, text("b"), Some(text("beta"))),
        Change(3, text("session:user:000001"), Some(text("s1"))),
    ];
    let mut first = Vec::new();
    for k in 2..20u64 {
        first.push(Change(0, w(k * 7919), Some(w(k))));
    }
    for k in 2..8u64 {
        first.push(Change(1, w(k * 3), Some(w(k))));
    }
    for k in 0..14u8 {
        first.push(Change(2, vec![b'k', k], Some(vec![k; 3])));
    }
    first.extend([
        Change(0, w(0), Some(w(5))),
        Change(1, w(u64::MAX), Some(w(6))),
        Change(0, w(1), Some(w(11))),
        Change(1, w(1), None),
        Change(2, text("a"), Some(text("ALPHA"))),
        Change(2, text("c"), Some(text("gamma"))),
        Change(2, text("d"), Some(text("delta"))),
        Change(3, text("user:0002"), Some(text("grace"))),
        Change(3, text("user:0003"), Some(text("alan"))),
        Change(3, text("b"), None),
        // A compressed layer (depth 2, skipping ":user:0") pushed down from the record of
        // the setup, then split by a key leaving its skipped bytes; an empty layer made for
        // two new keys reaching one empty entry.
        Change(3, text("session:user:000002"), Some(text("s2"))),
        Change(3, text("session:zz"), Some(text("zz"))),
        Change(3, text("new:aaaaaaa1"), Some(text("n1"))),
        Change(3, text("new:aaaaaaa2"), Some(text("n2"))),
    ]);
    let second = vec![
        Change(0, w(2 * 7919), None),
        Change(0, w(0), None),
        Change(1, w(6), Some(w(66))),
        Change(2, text("a"), None),
        Change(3, text("user:0001"), Some(text("ADA"))),
        Change(3, text("user:0002"), None),
    ];
    // Every key under the text map's layers removed: the layers it empties are retired.
    let emptying = [
        "user:0001",
        "user:0003",
        "session:user:000001",
        "session:user:000002",
    ]
    .iter()
    .chain(&["session:zz", "new:aaaaaaa1", "new:aaaaaaa2"])
    .map(|k| Change(3, text(k), None))
    .collect();
    let steps = vec![
        Step::Batch(first),
        Step::Single(Change(0, w(1), Some(w(12)))),
        Step::Single(Change(3, text("user:0003"), Some(text("turing")))),
        Step::Batch(second),
        Step::Batch(emptying),
        Step::Abandoned(vec![
            Change(1, w(9), Some(w(9))),
            Change(2, text("z"), Some(text("zeta"))),
        ]),
        Step::TooLarge(vec![
            Change(1, w(40), Some(w(40))),
            Change(1, w(41), Some(w(41))),
            Change(3, text("user:0009"), Some(text("x"))),
            Change(2, text("huge"), Some(vec![1u8; 3 << 20])),
        ]),
    ];
    (setup, steps)
}

fn crash_steps(name: &str, points: CrashPoints, images: Images, warm_area: bool) -> u64 {
    crash_workload(name, workload(), points, images, warm_area)
}

/// Every crash image of the steps of `(setup, steps)` (`points`, `images`) recovers to the
/// model before or after the step it interrupted; the number of crash points.
pub(super) fn crash_workload(
    name: &str,
    (setup, steps): (Vec<Change>, Vec<Step>),
    points: CrashPoints,
    images: Images,
    warm_area: bool,
) -> u64 {
    let expected = states(&setup, &steps);
    let test = CrashTest::new(name, SimConfig::x86())
        .pool(STORE_LAYOUT, 2 << 20, root_bytes())
        .points(points)
        .images(images)
        .fail_on_unpersisted(true)
        .seed(30);
    let report = run_crash_test(
        &test,
        |pool| setup_store(pool, &setup, warm_area),
        |pool| {
            let store = pmem_test_kit::reload_store(pool).unwrap_or_else(|e| panic!("{e}"));
            for step in &steps {
                run_step(&store, step);
                pool.operation_completed();
            }
        },
        |pool, crash| check_image(pool, crash.operations_completed as usize, &expected),
    );
    report.points
}

/// Each map's blocks (as `owned_blocks` lists them) in a store.
pub(super) fn blocks(store: &SimStore) -> Vec<usize> {
    let owned = store.owned_blocks().unwrap();
    MAPS.iter()
        .map(|name| {
            owned
                .iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, b)| b.len())
        })
        .collect()
}

#[test]
fn the_workload_splits_segments_and_nodes_makes_layers_and_frees_records() {
    let (setup, steps) = workload();
    let pool = Pool::<SimBackend>::simulated(STORE_LAYOUT, 2 << 20, root_bytes(), SimConfig::x86())
        .map(Arc::new)
        .unwrap();
    setup_store(&pool, &setup, true);
    let store = pmem_test_kit::reload_store(&pool).unwrap();
    let before = blocks(&store);
    run_step(&store, &steps[0]);
    let after = blocks(&store);
    // The u64 hash map splits its segment, the u64 tree its leaf, the byte hash map its
    // segment and gains records, the byte tree a layer (and records).
    for (i, name) in MAPS[..4].iter().enumerate() {
        assert!(
            after[i] > before[i],
            "{name}: {} -> {} blocks",
            before[i],
            after[i]
        );
    }
    let expected = states(&setup, &steps);
    assert_eq!(observe(&store).unwrap(), expected[1]);
    // The second batch removes records: their blocks are freed.
    run_step(&store, &steps[1]);
    run_step(&store, &steps[2]);
    let before = blocks(&store);
    run_step(&store, &steps[3]);
    let after = blocks(&store);
    assert!(
        after[2] < before[2] && after[3] < before[3],
        "{before:?} -> {after:?}"
    );
    // The batch emptying the text map's layers: each is retired, and the map holds its top
    // layer's blocks alone, as a map whose keys were all written in its top layer.
    let with_layers = blocks(&store)[3];
    run_step(&store, &steps[4]);
    let emptied = blocks(&store)[3];
    assert!(emptied < with_layers, "{with_layers} -> {emptied}");
    assert_eq!(
        store
            .btree_map_with::<Vec<u8>, Vec<u8>>("text", tree())
            .unwrap()
            .len(),
        0
    );
    for step in &steps[5..] {
        run_step(&store, step);
    }
    assert_eq!(&observe(&store).unwrap(), expected.last().unwrap());
    store.check_blocks().unwrap();
}

#[test]
fn every_event_of_batches_over_four_maps_recovers_all_or_nothing() {
    let points = crash_steps(
        "batches-every-event",
        CrashPoints::Every,
        Images::Extremes,
        true,
    );
    assert!(points > 1000, "{points} crash points");
}

#[test]
fn the_first_batch_making_the_area_recovers_at_sampled_events() {
    let points = crash_steps(
        "batches-first-area",
        CrashPoints::Sample(400),
        Images::Random(2),
        false,
    );
    assert!(points > 100, "{points} crash points");
}

#[test]
fn random_images_at_sampled_events_recover_all_or_nothing() {
    let points = crash_steps(
        "batches-random-images",
        CrashPoints::Sample(300),
        Images::Random(6),
        true,
    );
    assert!(points > 100, "{points} crash points");
}

#[test]
fn a_crash_of_recovery_itself_recovers_all_or_nothing() {
    recovery_crashes("batches-recovery-crash", workload(), 60, 12);
}

/// Crashes of recovery itself (`recovery` sampled points of each of `points` sampled crash
/// images of `(setup, steps)`) recover to the model.
pub(super) fn recovery_crashes(
    name: &str,
    (setup, steps): (Vec<Change>, Vec<Step>),
    points: usize,
    recovery: usize,
) {
    let expected = states(&setup, &steps);
    let test = CrashTest::new(name, SimConfig::x86())
        .pool(STORE_LAYOUT, 2 << 20, root_bytes())
        .points(CrashPoints::Sample(points))
        .images(Images::Random(1))
        .recovery_crashes(CrashPoints::Sample(recovery), Images::Random(1))
        .seed(31);
    let report = crash_test_outcome_with_recovery(
        &test,
        |pool| setup_store(pool, &setup, true),
        |pool| {
            let store = pmem_test_kit::reload_store(pool).unwrap_or_else(|e| panic!("{e}"));
            for step in &steps {
                run_step(&store, step);
                pool.operation_completed();
            }
        },
        |pool| pmem_test_kit::reload_store(pool).map(drop),
        |pool, crash| check_image(pool, crash.operations_completed as usize, &expected),
    )
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert!(report.recovery_images > 0);
}
