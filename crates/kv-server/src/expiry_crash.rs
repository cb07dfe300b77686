//! The expiry's maps under simulated crashes: at every event of `SET EX`, a plain `SET`,
//! `EXPIRE`, `PERSIST`, `SET` over a key with a deadline, a lazy delete and a step of active
//! expiry (the same `Maps` functions the server runs, on a store of the simulator), every
//! crash image must recover to a store whose keys and deadlines are the model's after the
//! steps that returned, or after the interrupted one too, and whose deadline maps agree with
//! each other and the keys (`Maps::check`). The crash driver here serves the hashes' crash
//! test too.

use std::collections::BTreeMap as Model;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use pmem_structures::raw::pmem_ordering::sim::{
    CrashPoints, CrashTest, Images, Report, SimBackend, SimConfig,
};
use pmem_structures::raw::pmem_ordering::Pool;
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::run_crash_test;
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use crate::db::{open_maps, Maps};

type SimStore = Store<SimBackend>;
type SimMaps = Maps<SimBackend>;
/// Key -> (value, deadline).
type State = Model<Vec<u8>, (Vec<u8>, Option<u64>)>;

/// One command's writes, as the server makes them.
#[derive(Clone, Debug)]
enum Step {
    /// SET key value [EX]: the value and the deadline (`None`: SET without one, which drops
    /// any the key had).
    Set(&'static str, &'static str, Option<u64>),
    /// EXPIRE (Some) or PERSIST (None) of an existing key.
    Deadline(&'static str, Option<u64>),
    /// A lazy delete of a key past its deadline.
    Expire(&'static str),
    /// One step of active expiry at this time.
    Active(u64),
}

fn apply(state: &mut State, step: &Step) {
    match step {
        Step::Set(key, value, deadline) => {
            state.insert(
                key.as_bytes().to_vec(),
                (value.as_bytes().to_vec(), *deadline),
            );
        }
        Step::Deadline(key, deadline) => {
            state.get_mut(key.as_bytes()).expect("an existing key").1 = *deadline;
        }
        Step::Expire(key) => drop(state.remove(key.as_bytes())),
        Step::Active(now) => state.retain(|_, (_, deadline)| deadline.is_none_or(|d| d > *now)),
    }
}

fn run(store: &SimStore, maps: &SimMaps, step: &Step) -> Result<(), Error> {
    match *step {
        Step::Set(key, value, deadline) => {
            let (key, value) = (key.as_bytes(), value.as_bytes());
            let old = maps.deadline(key)?;
            if old == deadline {
                // What `Db::write_key` does for an unchanged deadline: a single write.
                maps.keys.upsert(key, value).map(drop)
            } else {
                store.write(|batch| maps.write_in(batch, key, value, old, deadline))
            }
        }
        Step::Deadline(key, deadline) => {
            let old = maps.deadline(key.as_bytes())?;
            store.write(|batch| maps.change_deadline_in(batch, key.as_bytes(), old, deadline))
        }
        Step::Expire(key) => {
            let deadline = maps.deadline(key.as_bytes())?.expect("a deadline");
            store.write(|batch| maps.delete_in(batch, key.as_bytes(), deadline))
        }
        Step::Active(now) => {
            let sample = maps.due_sample(now)?;
            assert!(!sample.is_empty(), "the active step finds nothing due");
            store.write(|batch| maps.expire_sample_in(batch, &sample).map(drop))
        }
    }
}

/// The simulator store's options for the server maps' crash tests.
fn options() -> StoreOptions {
    StoreOptions::new()
        .max_structures(8)
        .fence_policy(FencePolicy::Batched)
        .heap(HeapConfig {
            lanes: 2,
            lane_log_bytes: 16 << 10,
            chunk_size: 16 << 10,
        })
}

pub(crate) fn load(pool: &Arc<Pool<SimBackend>>) -> Result<SimStore, String> {
    let heap = Heap::open(pool.clone()).map_err(|e| format!("Heap::open: {e}"))?;
    SimStore::load(heap).map_err(|e| format!("Store::load: {e}"))
}

fn observe(maps: &SimMaps) -> Result<State, String> {
    let e = |e: Error| e.to_string();
    maps.check().map_err(e)??;
    let mut state = State::new();
    for entry in maps.keys.iter() {
        let (key, value) = entry.map_err(e)?;
        let deadline = maps.deadline(&key).map_err(e)?;
        state.insert(key, (value, deadline));
    }
    Ok(state)
}

fn check_image(
    pool: &Arc<Pool<SimBackend>>,
    done: usize,
    expected: &[State],
) -> Result<(), String> {
    let (_store, maps) = recovered(pool)?;
    let now = observe(&maps)?;
    let admitted = &expected[done..(done + 2).min(expected.len())];
    if !admitted.contains(&now) {
        return Err(format!(
            "after {done} steps the keyspace holds {now:?}, none of the model's {admitted:?}"
        ));
    }
    Ok(())
}

/// The store and maps an image recovers to, after the store's own verification.
pub(crate) fn recovered(pool: &Arc<Pool<SimBackend>>) -> Result<(SimStore, SimMaps), String> {
    let store = load(pool)?;
    let report = store.verify();
    if !report.is_healthy() {
        return Err(format!("verify: {report}"));
    }
    let maps = open_maps(&store, &Arc::new(AtomicBool::new(true))).map_err(|e| e.to_string())?;
    Ok((store, maps))
}

/// The server maps' crash driver: `setup` then `steps`, each run by `run` on the maps of a
/// simulator's store (a completed operation after each step), with a crash at every event;
/// each image checked by `check` with the number of steps that returned.
pub(crate) fn crash_at_every_event<S>(
    name: &str,
    seed: u64,
    setup: &[S],
    steps: &[S],
    run: fn(&SimStore, &SimMaps, &S) -> Result<(), Error>,
    check: impl Fn(&Arc<Pool<SimBackend>>, usize) -> Result<(), String>,
) -> Report {
    let test = CrashTest::new(name, SimConfig::x86())
        .pool(
            STORE_LAYOUT,
            2 << 20,
            options().root_size().expect("a root size"),
        )
        .points(CrashPoints::Every)
        .images(Images::Random(2))
        .fail_on_unpersisted(true)
        .seed(seed);
    run_crash_test(
        &test,
        |pool| {
            let store = SimStore::format(pool.clone(), &options()).expect("format the store");
            let maps = open_maps(&store, &Arc::new(AtomicBool::new(false))).expect("the maps");
            for step in setup {
                run(&store, &maps, step).expect("a setup step");
            }
        },
        |pool| {
            let store = load(pool).unwrap_or_else(|e| panic!("{e}"));
            let maps = open_maps(&store, &Arc::new(AtomicBool::new(true))).expect("the maps");
            for step in steps {
                run(&store, &maps, step).expect("a step");
                pool.operation_completed();
            }
        },
        |pool, crash| check(pool, crash.operations_completed as usize),
    )
}

#[test]
fn deadline_changes_are_whole_at_every_crash_point() {
    let setup = [
        Step::Set("plain", "p", None),
        Step::Set("old", "o", Some(100)),
    ];
    let steps = vec![
        Step::Set("a", "1", Some(5_000)),
        Step::Set("b", "2", None),
        Step::Deadline("b", Some(3_000)),
        Step::Deadline("a", None),
        Step::Set("b", "3", None),
        Step::Set("c", "4", Some(200)),
        Step::Expire("old"),
        Step::Set("d", "5", Some(300)),
        Step::Active(1_000),
    ];
    let mut state = State::new();
    setup.iter().for_each(|step| apply(&mut state, step));
    let mut expected = vec![state.clone()];
    for step in &steps {
        apply(&mut state, step);
        expected.push(state.clone());
    }
    let report = crash_at_every_event("expiry maps", 33, &setup, &steps, run, |pool, done| {
        check_image(pool, done, &expected)
    });
    println!("{} crash points, {} images", report.points, report.images);
}
