//! Byte-key maps across real process deaths: a child process writes records to a file store
//! and is killed with SIGKILL at seeded random moments; each time the store reopens
//! (`Store::open`) with no leaked block (`check_blocks`), both maps check, and each holds the
//! model after the last operation the child acknowledged, or after the one it was running.
//!
//! The child is this test binary re-executed with an environment variable naming the store and
//! the first operation (the test kit's `kill` harness). It runs a fixed
//! sequence of operations (inserts, overwrites with values growing to 40 KiB, removes) on keys
//! sharing 7, 14 and 21-byte prefixes (layers of the ordered map), the empty key and 300-byte
//! keys, each first on the hash map, then on the ordered map, and acknowledges each on its
//! stdout (a pipe the parent reads) once both returned. Every operation is idempotent (an
//! insert of a present key, an upsert of the same value and a remove of an absent key change
//! nothing), so each round's child starts again at the first operation not acknowledged.
//!
//! What this tests, and what not: SIGKILL ends the process but not the kernel, so every store
//! the child made reaches the file's page cache, flushed or not. This exercises the software
//! protocol across a real process death (recovery of writes cut short at any instruction, the
//! intents and allocation bits left in doubt, the pool lock of a dead owner), not the loss of
//! unflushed cache lines at a power failure: the crash simulator's tests
//! (`record_maps_crash.rs`) cover that.

use std::collections::BTreeMap as Model;
use std::path::Path;
use std::time::Duration;

use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::{Store, StoreOptions};
use pmem_test_kit::kill::{acknowledge, kill_after, spawn, store_dir, ChildVars};
use pmem_test_kit::SplitMix64;

type Bytes = Vec<u8>;

/// Names the store file, in the child.
/// The child's environment variables.
const CHILD_VARS: ChildVars = ChildVars {
    path: "PMEM_STRUCTURES_RECORD_KILL_CHILD",
    start: "PMEM_STRUCTURES_RECORD_KILL_START",
};
/// The first operation the child runs.
/// This test's name, so the child runs it (and only it) again.
const TEST_NAME: &str = "record_maps_survive_sigkill_at_random_moments";
/// The seed of the kill moments.
const SEED: u64 = 14;
/// Kill rounds.
const ROUNDS: usize = 24;
/// Operations a child acknowledges, at most, before its kill: it is killed after a seeded
/// number of them in `1..=MAX_ACKS_BEFORE_KILL`, then a seeded pause.
const MAX_ACKS_BEFORE_KILL: u64 = 150;
/// The longest pause between the awaited acknowledgement and the kill, in microseconds (a
/// few operations' worth, so the kill lands anywhere in one).
const MAX_PAUSE_US: u64 = 3000;
/// The child stops by itself after this many operations (the parent kills it long before).
const CHILD_MAX_OPS: u64 = 1_000_000;
const STORE_BYTES: u64 = 64 << 20;
const HASH: &str = "hash";
const TREE: &str = "tree";

/// Small segments and nodes: a few keys split them.
const TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

fn tree_config() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

/// The keys the operations use: the empty key, the byte edges, keys sharing 7, 14 and 21
/// bytes, and 300-byte keys sharing 299.
fn keys() -> Vec<Bytes> {
    let mut keys = vec![Vec::new(), vec![0x00], vec![0xff]];
    for prefix in ["tenant1", "tenant1:user:0", "tenant1:user:00000042"] {
        for tail in ["", "a", "b", "\u{0}", "zz"] {
            keys.push(format!("{prefix}{tail}").into_bytes());
        }
    }
    for last in [b'a', b'b', b'c'] {
        let mut key = vec![b'L'; 299];
        key.push(last);
        keys.push(key);
    }
    keys
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Bytes, Bytes),
    Upsert(Bytes, Bytes),
    Remove(Bytes),
}

/// Operation `i` of the sequence: an insert two times in five (up to 200 bytes), an upsert two
/// times in five (values growing by 211 bytes an operation, wrapping at 40 KiB), a remove one
/// time in five.
fn op(keys: &[Bytes], i: u64) -> Op {
    let mut rng = SplitMix64::new(i);
    let key = keys[rng.below(keys.len() as u64) as usize].clone();
    let value = |len: u64| -> Bytes { (0..len).map(|j| (i ^ j.wrapping_mul(31)) as u8).collect() };
    match rng.below(5) {
        0 | 1 => Op::Insert(key, value(rng.below(201))),
        2 | 3 => Op::Upsert(key, value(i * 211 % (40 << 10))),
        _ => Op::Remove(key),
    }
}

fn apply(model: &mut Model<Bytes, Bytes>, op: &Op) {
    match op {
        Op::Insert(k, v) => {
            model.entry(k.clone()).or_insert_with(|| v.clone());
        }
        Op::Upsert(k, v) => {
            model.insert(k.clone(), v.clone());
        }
        Op::Remove(k) => {
            model.remove(k);
        }
    }
}

/// Runs `op` on both maps, the hash map first.
fn run(store: &Store, op: &Op) {
    let hash = store.hash_map_with::<Bytes, Bytes>(HASH, TABLE).unwrap();
    let tree = store
        .btree_map_with::<Bytes, Bytes>(TREE, tree_config())
        .unwrap();
    match op {
        Op::Insert(k, v) => {
            hash.insert(k, v).unwrap();
            tree.insert(k, v).unwrap();
        }
        Op::Upsert(k, v) => {
            hash.upsert(k, v).unwrap();
            tree.upsert(k, v).unwrap();
        }
        Op::Remove(k) => {
            hash.remove(k).unwrap();
            tree.remove(k).unwrap();
        }
    }
}

/// The child: open the store, run the operations from `start` on, acknowledging each.
fn child(path: &Path, start: u64) -> ! {
    let store = Store::open(path).expect("child: open the store");
    let keys = keys();
    let mut out = std::io::stdout().lock();
    for i in start..start + CHILD_MAX_OPS {
        run(&store, &op(&keys, i));
        acknowledge(&mut out, i);
    }
    std::process::exit(0);
}

/// Both maps' contents, each checked: `check()` and `len()` count the walk's pairs, the
/// ordered map walks in key order, and every key looks its value up.
fn observe(store: &Store) -> (Model<Bytes, Bytes>, Model<Bytes, Bytes>) {
    let hash = store.hash_map::<Bytes, Bytes>(HASH).unwrap();
    let tree = store
        .btree_map_with::<Bytes, Bytes>(TREE, tree_config())
        .unwrap();
    let hashed: Model<Bytes, Bytes> = hash.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(hash.check().unwrap(), hashed.len() as u64, "hash check");
    assert_eq!(hash.len(), hashed.len() as u64, "hash len");
    let walk: Vec<(Bytes, Bytes)> = tree.iter().collect::<Result<_, _>>().unwrap();
    assert!(
        walk.windows(2).all(|w| w[0].0 < w[1].0),
        "the ordered map walks out of key order"
    );
    let walked: Model<Bytes, Bytes> = walk.into_iter().collect();
    assert_eq!(tree.check().unwrap(), walked.len() as u64, "tree check");
    assert_eq!(tree.len(), walked.len() as u64, "tree len");
    for (k, v) in &hashed {
        assert_eq!(hash.get(k).unwrap().as_ref(), Some(v), "hash get");
    }
    for (k, v) in &walked {
        assert_eq!(tree.get(k).unwrap().as_ref(), Some(v), "tree get");
    }
    (hashed, walked)
}

#[test]
#[cfg_attr(
    miri,
    ignore = "spawns and kills processes on a mapped file, which Miri cannot"
)]
fn record_maps_survive_sigkill_at_random_moments() {
    if let Some((path, start)) = CHILD_VARS.of_child() {
        child(&path, start);
    }
    // The store takes the granularity detected for its file: page on tmpfs (where an msync
    // costs little), cache line or byte on a DAX mount that PMEM_TEST_POOL_DIR names.
    let dir = store_dir("pmem-record-kill");
    let path = dir.path().join("records.pool");
    {
        let store = Store::create(&path, STORE_BYTES, &StoreOptions::new().max_structures(4))
            .expect("create the store");
        store.hash_map_with::<Bytes, Bytes>(HASH, TABLE).unwrap();
        store
            .btree_map_with::<Bytes, Bytes>(TREE, tree_config())
            .unwrap();
    }
    let keys = keys();
    let mut rng = SplitMix64::new(SEED);
    // The model after `done` operations, and the next operation's.
    let mut done = 0u64;
    let mut model = Model::new();
    let mut killed_mid_pair = 0;
    for round in 0..ROUNDS {
        let target = done + rng.below(MAX_ACKS_BEFORE_KILL);
        let pause = Duration::from_micros(rng.below(MAX_PAUSE_US + 1));
        let stderr = dir.path().join(format!("child{round}.stderr"));
        let env = CHILD_VARS.env(&path, done);
        let running = spawn(TEST_NAME, &env, done, stderr);
        let acknowledged = kill_after(running, done, target, pause);
        assert!(
            acknowledged > target,
            "round {round}: acknowledged {acknowledged}"
        );
        while done < acknowledged {
            apply(&mut model, &op(&keys, done));
            done += 1;
        }
        let mut next = model.clone();
        apply(&mut next, &op(&keys, done));

        let store = Store::open(&path)
            .unwrap_or_else(|e| panic!("round {round}: reopen after the kill: {e}"));
        store
            .check_blocks()
            .unwrap_or_else(|e| panic!("round {round}: a block leaked or is lost: {e}"));
        let (hashed, walked) = observe(&store);
        let admitted = |m: &Model<Bytes, Bytes>| *m == model || *m == next;
        assert!(
            admitted(&hashed),
            "round {round}: the hash map holds neither the model after {done} operations nor \
             after {} ({} pairs; the models {} and {})",
            done + 1,
            hashed.len(),
            model.len(),
            next.len()
        );
        assert!(
            admitted(&walked),
            "round {round}: the ordered map holds neither the model after {done} operations \
             nor after {} ({} pairs; the models {} and {})",
            done + 1,
            walked.len(),
            model.len(),
            next.len()
        );
        // The hash map is written first: the ordered map cannot be ahead of it.
        assert!(
            !(walked == next && walked != model && hashed == model),
            "round {round}: the ordered map holds operation {done} and the hash map not"
        );
        if hashed != walked {
            killed_mid_pair += 1;
        }
        println!(
            "round {round}: killed after {done} operations ({pause:?} past acknowledgement \
             {target}); recovered {} pairs",
            walked.len()
        );
    }
    // The store goes on working: the next operation, then a clean reopen.
    {
        let store = Store::open(&path).unwrap();
        run(&store, &op(&keys, done));
        apply(&mut model, &op(&keys, done));
    }
    let store = Store::open(&path).unwrap();
    store.check_blocks().unwrap();
    let (hashed, walked) = observe(&store);
    assert_eq!(hashed, model);
    assert_eq!(walked, model);
    println!(
        "{ROUNDS} kills (seed {SEED}), {done} operations, {killed_mid_pair} between the two \
         maps' writes"
    );
}
