//! Write batches across real process deaths: a child process commits batches over four maps
//! of a file store and is killed with SIGKILL at seeded random moments (the test kit's `kill`
//! harness); each time the store reopens (`Store::open`) with no leaked block, `verify` clean,
//! and all four maps together at the model after the last batch the child acknowledged, or
//! after the one it was committing: every acknowledged batch whole, none in part.
//!
//! Each batch writes keys of all four maps (overwrites, inserts and removes, values whose size
//! changes, byte keys sharing 7- and 14-byte prefixes) and is idempotent (its puts and deletes
//! leave the same state if run again), so each round's child starts at the first batch not
//! acknowledged.

use std::collections::BTreeMap as Model;
use std::path::Path;
use std::time::Duration;

use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::kill::{acknowledge, kill_after, spawn, store_dir, ChildVars};
use pmem_test_kit::SplitMix64;

type Bytes = Vec<u8>;
type State = [Model<Bytes, Bytes>; 4];

/// The child's environment variables.
const CHILD_VARS: ChildVars = ChildVars {
    path: "PMEM_STRUCTURES_BATCH_KILL_CHILD",
    start: "PMEM_STRUCTURES_BATCH_KILL_START",
};
const TEST_NAME: &str = "acknowledged_batches_survive_sigkill_whole";
const SEED: u64 = 30;
const ROUNDS: usize = 20;
const MAX_ACKS_BEFORE_KILL: u64 = 60;
const MAX_PAUSE_US: u64 = 3000;
const CHILD_MAX_BATCHES: u64 = 1_000_000;
const STORE_BYTES: u64 = 64 << 20;

const TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

fn tree() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

/// One change: map, key, new value (`None` removes). The `u64` maps' keys and values are 8
/// big-endian bytes.
type Change = (usize, Bytes, Option<Bytes>);

/// Batch `i`: eight changes per map, one of them a remove, keys drawn from a few hundred.
fn batch(i: u64) -> Vec<Change> {
    let mut rng = SplitMix64::new(i);
    let mut changes = Vec::new();
    for map in 0..4usize {
        for j in 0..8 {
            let k = rng.below(300);
            let key = match map {
                0 | 1 => (k * 7919 + 1).to_be_bytes().to_vec(),
                2 => format!("k{k:03}").into_bytes(),
                _ => format!("tenant1:user:{k:04}").into_bytes(),
            };
            let value = (j != 0).then(|| match map {
                0 | 1 => (i * 100 + j).to_be_bytes().to_vec(),
                _ => vec![(i % 251) as u8; ((i * 37 + j) % 700) as usize],
            });
            changes.push((map, key, value));
        }
    }
    changes
}

fn apply(state: &mut State, changes: &[Change]) {
    for (map, key, value) in changes {
        match value {
            Some(v) => state[*map].insert(key.clone(), v.clone()),
            None => state[*map].remove(key),
        };
    }
}

fn word(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().expect("8 bytes"))
}

fn commit(store: &Store, changes: &[Change]) -> Result<(), Error> {
    let hash = store.hash_map_with::<u64, u64>("hash", TABLE)?;
    let ordered = store.btree_map_with::<u64, u64>("ordered", tree())?;
    let bytes = store.hash_map_with::<Bytes, Bytes>("bytes", TABLE)?;
    let text = store.btree_map_with::<Bytes, Bytes>("text", tree())?;
    store.write(|batch| {
        for (map, key, value) in changes {
            match (map, value) {
                (0, Some(v)) => hash.put_in(batch, word(key), word(v))?,
                (0, None) => hash.delete_in(batch, word(key))?,
                (1, Some(v)) => ordered.put_in(batch, word(key), word(v))?,
                (1, None) => ordered.delete_in(batch, word(key))?,
                (2, Some(v)) => bytes.put_in(batch, key, v)?,
                (2, None) => bytes.delete_in(batch, key)?,
                (_, Some(v)) => text.put_in(batch, key, v)?,
                (_, None) => text.delete_in(batch, key)?,
            }
        }
        Ok(())
    })
}

fn child(path: &Path, start: u64) -> ! {
    let store = Store::open(path).expect("child: open the store");
    let mut out = std::io::stdout().lock();
    for i in start..start + CHILD_MAX_BATCHES {
        commit(&store, &batch(i)).expect("child: a batch");
        acknowledge(&mut out, i);
    }
    std::process::exit(0);
}

fn observe(store: &Store) -> State {
    let w = |v: u64| v.to_be_bytes().to_vec();
    let mut state: State = Default::default();
    let hash = store.hash_map_with::<u64, u64>("hash", TABLE).unwrap();
    let ordered = store.btree_map_with::<u64, u64>("ordered", tree()).unwrap();
    let bytes = store.hash_map_with::<Bytes, Bytes>("bytes", TABLE).unwrap();
    let text = store
        .btree_map_with::<Bytes, Bytes>("text", tree())
        .unwrap();
    for pair in hash.iter() {
        let (k, v) = pair.unwrap();
        state[0].insert(w(k), w(v));
    }
    for pair in ordered.iter() {
        let (k, v) = pair.unwrap();
        state[1].insert(w(k), w(v));
    }
    state[2] = bytes.iter().collect::<Result<_, _>>().unwrap();
    state[3] = text.iter().collect::<Result<_, _>>().unwrap();
    let counts = [hash.check(), ordered.check(), bytes.check(), text.check()];
    for (i, count) in counts.into_iter().enumerate() {
        assert_eq!(count.unwrap(), state[i].len() as u64, "map {i}'s check");
    }
    state
}

#[test]
#[cfg_attr(
    miri,
    ignore = "spawns and kills processes on a mapped file, which Miri cannot"
)]
fn acknowledged_batches_survive_sigkill_whole() {
    if let Some((path, start)) = CHILD_VARS.of_child() {
        child(&path, start);
    }
    let dir = store_dir("pmem-batch-kill");
    let path = dir.path().join("batches.pool");
    drop(Store::create(&path, STORE_BYTES, &StoreOptions::new().max_structures(4)).unwrap());
    let mut rng = SplitMix64::new(SEED);
    let mut done = 0u64;
    let mut model: State = Default::default();
    let mut killed_inside = 0;
    for round in 0..ROUNDS {
        let target = done + rng.below(MAX_ACKS_BEFORE_KILL);
        let pause = Duration::from_micros(rng.below(MAX_PAUSE_US + 1));
        let stderr = dir.path().join(format!("child{round}.stderr"));
        let env = CHILD_VARS.env(&path, done);
        let acknowledged = kill_after(spawn(TEST_NAME, &env, done, stderr), done, target, pause);
        assert!(
            acknowledged > target,
            "round {round}: acknowledged {acknowledged}"
        );
        while done < acknowledged {
            apply(&mut model, &batch(done));
            done += 1;
        }
        let mut next = model.clone();
        apply(&mut next, &batch(done));
        let store = Store::open(&path)
            .unwrap_or_else(|e| panic!("round {round}: reopen after the kill: {e}"));
        store
            .check_blocks()
            .unwrap_or_else(|e| panic!("round {round}: a block leaked or is lost: {e}"));
        let report = store.verify();
        assert!(report.is_healthy(), "round {round}: {report}");
        let now = observe(&store);
        assert!(
            now == model || now == next,
            "round {round}: after {done} acknowledged batches the maps hold neither it nor \
             the next one whole (sizes {:?}; the models {:?} and {:?})",
            now.each_ref().map(Model::len),
            model.each_ref().map(Model::len),
            next.each_ref().map(Model::len),
        );
        if now == next && next != model {
            killed_inside += 1;
        }
        println!("round {round}: killed after {done} batches ({pause:?} past {target})");
    }
    println!("{killed_inside} kills landed after a commit point and before its acknowledgement");
    let store = Store::open(&path).unwrap();
    commit(&store, &batch(done)).unwrap();
    apply(&mut model, &batch(done));
    assert_eq!(observe(&store), model);
}
