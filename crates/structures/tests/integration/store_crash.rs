//! The store's catalog under simulated crashes: creating, filling and removing named
//! structures. After recovery (`Heap::open`, then `Store::load`, which finishes interrupted
//! removals) the store holds the names and contents of the model after the operations that
//! returned, or after the interrupted one too, and the heap holds exactly the blocks the
//! listed structures own.

use std::collections::BTreeMap as Model;

use pmem_ordering::sim::{CrashPoints, CrashTest, Images, SimBackend, SimConfig};
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::datalog::DatalogConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::raw::leafmap::LeafMapConfig;
use pmem_structures::{Store, StructureKind};
use pmem_test_kit::run_crash_test;
use pmem_undo_log::Heap;

type SimStore = Store<SimBackend>;

/// Tiny segments and nodes: a few hundred keys make enough blocks for a batched removal.
const TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

fn tree_config() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

/// Leaves of four slots: a few keys split them, a remove unlinks one.
const LEAVES: LeafMapConfig = LeafMapConfig {
    leaf_bytes: 320,
    slot_bytes: 64,
};

#[derive(Clone, Debug)]
enum Op {
    /// Open or create the named structure.
    Open(&'static str, StructureKind),
    /// Upsert one key of a map.
    Put(&'static str, u64, u64),
    /// Remove a key from a map.
    Delete(&'static str, u64),
    /// Remove the structure.
    Remove(&'static str),
}

/// Names -> (kind, contents for maps).
type State = Model<String, (StructureKind, Model<u64, u64>)>;

fn reserved_of(kind: StructureKind) -> u64 {
    match kind {
        StructureKind::HashMap => 0,
        _ => u64::MAX,
    }
}

/// The model's state after each prefix of `ops`.
fn states(ops: &[Op]) -> Vec<State> {
    let mut state = State::new();
    let mut all = vec![state.clone()];
    for op in ops {
        match op {
            Op::Open(name, kind) => {
                state
                    .entry(name.to_string())
                    .or_insert((*kind, Model::new()));
            }
            Op::Put(name, key, value) => {
                state
                    .get_mut(*name)
                    .expect("put into a listed map")
                    .1
                    .insert(*key, *value);
            }
            Op::Delete(name, key) => {
                state
                    .get_mut(*name)
                    .expect("delete from a listed map")
                    .1
                    .remove(key);
            }
            Op::Remove(name) => {
                state.remove(*name);
            }
        }
        all.push(state.clone());
    }
    all
}

fn apply(store: &SimStore, op: &Op) {
    match op {
        Op::Open(name, StructureKind::HashMap) => {
            store
                .hash_map_with::<u64, u64>(name, TABLE)
                .expect("open a hash map");
        }
        Op::Open(name, StructureKind::BTreeMap) => {
            store
                .btree_map_with::<u64, u64>(name, tree_config())
                .expect("open a tree");
        }
        Op::Open(name, StructureKind::LeafMap) => {
            store
                .btree_map_with::<u64, u64>(name, LEAVES)
                .expect("open a map of leaves");
        }
        Op::Open(name, _) => {
            store
                .datalog(name, DatalogConfig::default())
                .expect("open a datalog");
        }
        Op::Put(name, key, value) => {
            if is_hash(store, name) {
                store
                    .hash_map::<u64, u64>(name)
                    .unwrap()
                    .upsert(*key, *value)
                    .unwrap();
            } else {
                store
                    .btree_map_with::<u64, u64>(name, tree_config())
                    .unwrap()
                    .upsert(*key, *value)
                    .unwrap();
            }
        }
        Op::Delete(name, key) => {
            if store
                .structures()
                .iter()
                .any(|(n, k)| n == name && *k == StructureKind::HashMap)
            {
                store
                    .hash_map::<u64, u64>(name)
                    .unwrap()
                    .remove(*key)
                    .unwrap();
            } else {
                store
                    .btree_map_with::<u64, u64>(name, tree_config())
                    .unwrap()
                    .remove(*key)
                    .unwrap();
            }
        }
        Op::Remove(name) => store.remove_structure(name).expect("remove a structure"),
    }
}

fn is_hash(store: &SimStore, name: &str) -> bool {
    store
        .structures()
        .iter()
        .any(|(n, k)| n == name && *k == StructureKind::HashMap)
}

/// Upserts of keys `from..to` (`k -> k * 3`) into the map `name` of `kind`, then of its
/// reserved key.
fn fill(name: &'static str, kind: StructureKind, from: u64, to: u64) -> Vec<Op> {
    let mut ops: Vec<Op> = (from..to).map(|k| Op::Put(name, k, k * 3)).collect();
    ops.push(Op::Put(name, reserved_of(kind), 11));
    ops
}

/// What the recovered store holds.
fn observe(store: &SimStore) -> Result<State, String> {
    let mut state = State::new();
    for (name, kind) in store.structures() {
        let contents: Model<u64, u64> = match kind {
            StructureKind::HashMap => {
                let map = store
                    .hash_map::<u64, u64>(&name)
                    .map_err(|e| e.to_string())?;
                let n = map.check().map_err(|e| e.to_string())?;
                let c: Model<u64, u64> = map
                    .iter()
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?;
                if n != c.len() as u64 || map.len() != n {
                    return Err(format!("{name}: check counts {n}, iter {}", c.len()));
                }
                c
            }
            StructureKind::BTreeMap | StructureKind::LeafMap => {
                // Either layout opens as its entry records.
                let map = store
                    .btree_map_with::<u64, u64>(&name, tree_config())
                    .map_err(|e| e.to_string())?;
                let n = map.check().map_err(|e| e.to_string())?;
                let c: Model<u64, u64> = map
                    .iter()
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?;
                if n != c.len() as u64 || map.len() != n {
                    return Err(format!("{name}: check counts {n}, iter {}", c.len()));
                }
                c
            }
            _ => {
                store
                    .datalog(&name, DatalogConfig::default())
                    .map_err(|e| e.to_string())?;
                Model::new()
            }
        };
        state.insert(name, (kind, contents));
    }
    Ok(state)
}

/// Crash-test `ops`, run after the untraced `setup` operations.
fn crash_run(
    name: &str,
    setup: Vec<Op>,
    min_blocks: usize,
    ops: Vec<Op>,
    points: CrashPoints,
    images: Images,
) -> u64 {
    let expected = states(&[setup.clone(), ops.clone()].concat());
    let test = CrashTest::new(name, SimConfig::x86())
        .pool("pmem-store", 1 << 20, 64 + 8 * 128)
        .points(points)
        .images(images)
        .seed(13);
    let options = pmem_test_kit::crash_store_options(8);
    let report = run_crash_test(
        &test,
        |pool| {
            let store = SimStore::format(pool.clone(), &options).expect("format the store");
            for op in &setup {
                apply(&store, op);
            }
            for (name, blocks) in store.owned_blocks().expect("the structures' blocks") {
                assert!(
                    blocks.len() >= min_blocks,
                    "{name} owns {} blocks, fewer than the {min_blocks} the test needs",
                    blocks.len()
                );
            }
        },
        |pool| {
            let store = SimStore::load(Heap::open(pool.clone()).unwrap()).expect("load the store");
            for op in &ops {
                apply(&store, op);
                pool.operation_completed();
            }
        },
        |pool, crash| {
            let store = pmem_test_kit::reload_store(pool)?;
            pmem_test_kit::store_is_whole(&store)?;
            let now = observe(&store)?;
            let done = setup.len() + crash.operations_completed as usize;
            let admitted = &expected[done..(done + 2).min(expected.len())];
            if !admitted.contains(&now) {
                return Err(format!(
                    "after {done} operations the store holds {now:?}, neither {:?}",
                    admitted
                ));
            }
            Ok(())
        },
    );
    report.points
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn every_crash_of_catalog_changes_recovers() {
    let ops = [
        vec![Op::Open("users", StructureKind::HashMap)],
        fill("users", StructureKind::HashMap, 1, 6),
        vec![Op::Open("orders", StructureKind::BTreeMap)],
        fill("orders", StructureKind::BTreeMap, 10, 14),
        vec![
            Op::Open("files", StructureKind::Datalog),
            Op::Delete("users", 0),
            Op::Remove("users"),
            Op::Delete("orders", u64::MAX),
            Op::Remove("files"),
            Op::Open("users", StructureKind::BTreeMap),
        ],
    ]
    .concat();
    let points = crash_run(
        "store-catalog",
        Vec::new(),
        0,
        ops,
        CrashPoints::Every,
        Images::Random(2),
    );
    assert!(points > 1000, "{points} crash points");
}

#[test]
#[ignore = "a long crash exploration: CI runs it in its crash step (docs/crash-testing.md)"]
fn crashes_in_a_batched_removal_are_finished_by_open() {
    // Thousands of keys in 256-byte segments and 128-byte nodes: over the 64 blocks one removal
    // transaction frees.
    let setup = [
        vec![Op::Open("big", StructureKind::HashMap)],
        fill("big", StructureKind::HashMap, 1, 2_500),
        vec![Op::Open("tree", StructureKind::BTreeMap)],
        fill("tree", StructureKind::BTreeMap, 1, 1_000),
    ]
    .concat();
    let ops = vec![Op::Remove("big"), Op::Remove("tree")];
    let points = crash_run(
        "store-removal",
        setup,
        // More than one removal transaction frees (64): the batched path with its list.
        150,
        ops,
        CrashPoints::Every,
        Images::Random(1),
    );
    assert!(points > 1000, "{points} crash points");
}

#[test]
fn crashes_in_a_removal_listed_in_fresh_links_are_finished_by_open() {
    // 3,000 keys in 128-byte nodes: about a thousand nodes, more than the tree's largest block
    // (its 4 KiB redo area) can list, so the list takes a chain of fresh 4 KiB links, each
    // freed once its blocks are.
    let setup = [
        vec![Op::Open("tree", StructureKind::BTreeMap)],
        fill("tree", StructureKind::BTreeMap, 1, 3_000),
    ]
    .concat();
    let points = crash_run(
        "store-removal-links",
        setup,
        // More blocks than the redo area's 511 words list.
        600,
        vec![Op::Remove("tree")],
        CrashPoints::Sample(400),
        Images::Random(1),
    );
    // 400 seeded draws over the removal's events, a few of them repeated.
    assert!(points >= 350, "{points} crash points");
}

#[test]
fn every_crash_of_a_map_of_leaves_in_the_catalog_recovers() {
    // Made, filled past a few splits, a key overwritten, leaves emptied (unlinked), removed,
    // and made again under the name as a tree.
    let ops = [
        vec![Op::Open("events", StructureKind::LeafMap)],
        fill("events", StructureKind::LeafMap, 1, 12),
        vec![
            Op::Put("events", 3, 33),
            Op::Delete("events", 1),
            Op::Delete("events", 2),
            Op::Delete("events", 4),
            Op::Delete("events", 5),
            Op::Remove("events"),
            Op::Open("events", StructureKind::BTreeMap),
            Op::Put("events", 7, 8),
        ],
    ]
    .concat();
    let points = crash_run(
        "store-leaves",
        Vec::new(),
        0,
        ops,
        CrashPoints::Every,
        Images::Random(2),
    );
    assert!(points > 300, "{points} crash points");
}

#[test]
fn crashes_in_a_batched_removal_of_a_map_of_leaves_are_finished_by_open() {
    // 600 keys in leaves of four slots: a few hundred leaves, more than one removal
    // transaction frees (64).
    let setup = [
        vec![Op::Open("events", StructureKind::LeafMap)],
        fill("events", StructureKind::LeafMap, 1, 600),
    ]
    .concat();
    let points = crash_run(
        "store-leaves-removal",
        setup,
        150,
        vec![Op::Remove("events")],
        CrashPoints::Sample(400),
        Images::Random(1),
    );
    assert!(points >= 350, "{points} crash points");
}
