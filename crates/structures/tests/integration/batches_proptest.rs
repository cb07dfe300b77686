//! Sequences of write batches (committed, failed by their closure, panicking, dropped), single
//! writes and reopenings of a file store, against a model of `BTreeMap`s: every result a batch's
//! `*_in` call gives is the model's as the batch would leave it, a batch that fails changes
//! nothing, and after every step the five maps (the fifth an ordered map of the leaf layout, four
//! slots a leaf) hold the model (walked, counted, looked up).

use std::collections::BTreeMap as Model;
use std::path::Path;

use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::raw::leafmap::LeafMapConfig;
use pmem_structures::{Error, Granularity, Store, StoreOptions, WriteBatch};
use proptest::prelude::*;

type Bytes = Vec<u8>;
type State = [Model<Bytes, Bytes>; 5];

const TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

/// Leaves of four slots of 64 bytes: a few keys fill one, a value past 40 bytes or so is a
/// record.
const LEAVES: LeafMapConfig = LeafMapConfig {
    leaf_bytes: 320,
    slot_bytes: 64,
};

fn tree() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

/// The `u64` keys: the two reserved ones among small ones.
const WORD_KEYS: [u64; 8] = [0, u64::MAX, 1, 2, 3, 1000, 1001, 77_777];

/// Byte keys sharing 7- and 14-byte prefixes (layers of the ordered map), and the empty key.
fn byte_key(i: usize) -> Bytes {
    const KEYS: [&str; 8] = [
        "",
        "a",
        "tenant1",
        "tenant1:",
        "tenant1:user:0",
        "tenant1:user:1",
        "tenant1:user:10",
        "zz",
    ];
    KEYS[i % KEYS.len()].as_bytes().to_vec()
}

#[derive(Clone, Debug)]
enum Kind {
    Get,
    Insert(u16),
    Upsert(u16),
    Remove,
    Put(u16),
    Delete,
}

#[derive(Clone, Debug)]
enum Ending {
    Commit,
    ClosureError,
    Panic,
    Drop,
}

#[derive(Clone, Debug)]
enum Step {
    Batch(Vec<(usize, usize, Kind)>, Ending),
    Single(usize, usize, Kind),
    Reopen,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        1 => Just(Kind::Get),
        2 => any::<u16>().prop_map(Kind::Insert),
        3 => any::<u16>().prop_map(Kind::Upsert),
        2 => Just(Kind::Remove),
        3 => any::<u16>().prop_map(Kind::Put),
        1 => Just(Kind::Delete),
    ]
}

fn change() -> impl Strategy<Value = (usize, usize, Kind)> {
    (0..5usize, 0..8usize, kind())
}

fn step() -> impl Strategy<Value = Step> {
    let ending = prop_oneof![
        6 => Just(Ending::Commit),
        1 => Just(Ending::ClosureError),
        1 => Just(Ending::Panic),
        1 => Just(Ending::Drop),
    ];
    prop_oneof![
        6 => (prop::collection::vec(change(), 0..40), ending).prop_map(|(c, e)| Step::Batch(c, e)),
        3 => change().prop_map(|(m, k, kind)| Step::Single(m, k, kind)),
        1 => Just(Step::Reopen),
    ]
}

/// The key and value bytes of a change to map `map` (the `u64` maps' as 8 big-endian bytes).
fn key_of(map: usize, k: usize) -> Bytes {
    if map < 2 {
        WORD_KEYS[k].to_be_bytes().to_vec()
    } else {
        byte_key(k)
    }
}

fn value_of(map: usize, v: u16) -> Bytes {
    if map < 2 {
        u64::from(v)
            .wrapping_mul(0x9E37_79B9)
            .to_be_bytes()
            .to_vec()
    } else {
        vec![v as u8; usize::from(v % 300)]
    }
}

fn word(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().unwrap())
}

/// The model's effect of `kind` on `map`: the result the call gives (the value before).
fn model_apply(state: &mut State, map: usize, key: &Bytes, kind: &Kind) -> Option<Bytes> {
    let old = state[map].get(key).cloned();
    match kind {
        Kind::Get | Kind::Remove | Kind::Delete => {
            if !matches!(kind, Kind::Get) {
                state[map].remove(key);
            }
        }
        Kind::Insert(v) => {
            if old.is_none() {
                state[map].insert(key.clone(), value_of(map, *v));
            }
        }
        Kind::Upsert(v) | Kind::Put(v) => {
            state[map].insert(key.clone(), value_of(map, *v));
        }
    }
    old
}

struct Maps {
    hash: pmem_structures::HashMap<u64, u64>,
    tree: pmem_structures::BTreeMap<u64, u64>,
    bytes: pmem_structures::HashMap<Bytes, Bytes>,
    text: pmem_structures::BTreeMap<Bytes, Bytes>,
    leaves: pmem_structures::BTreeMap<Bytes, Bytes>,
}

fn maps(store: &Store) -> Maps {
    Maps {
        hash: store.hash_map_with("hash", TABLE).unwrap(),
        tree: store.btree_map_with("tree", tree()).unwrap(),
        bytes: store.hash_map_with("bytes", TABLE).unwrap(),
        text: store.btree_map_with("text", tree()).unwrap(),
        leaves: store.btree_map_with("leaves", LEAVES).unwrap(),
    }
}

/// `kind` on `map` through `batch`; what the call says the value was (for `insert_in`, the
/// value before if it refused, else none).
fn in_batch(
    m: &Maps,
    batch: &mut WriteBatch,
    map: usize,
    key: &Bytes,
    kind: &Kind,
) -> Result<Option<Bytes>, Error> {
    let w = |v: Option<u64>| v.map(|v| v.to_be_bytes().to_vec());
    macro_rules! run {
        ($m:expr, $k:expr, $v:expr, $to:expr) => {
            match kind {
                Kind::Get => Ok($to($m.get_in(batch, $k)?)),
                Kind::Insert(v) => {
                    let before = $m.get_in(batch, $k)?;
                    let inserted = $m.insert_in(batch, $k, $v(*v))?;
                    assert_eq!(inserted, before.is_none(), "insert_in's answer");
                    Ok($to(before))
                }
                Kind::Upsert(v) => Ok($to($m.upsert_in(batch, $k, $v(*v))?)),
                Kind::Remove => Ok($to($m.remove_in(batch, $k)?)),
                Kind::Put(v) => {
                    let before = $m.get_in(batch, $k)?;
                    $m.put_in(batch, $k, $v(*v))?;
                    Ok($to(before))
                }
                Kind::Delete => {
                    let before = $m.get_in(batch, $k)?;
                    $m.delete_in(batch, $k)?;
                    Ok($to(before))
                }
            }
        };
    }
    let wv = |v: u16| word(&value_of(0, v));
    let bv = |v: u16| value_of(2, v);
    let id = |v: Option<Bytes>| v;
    match map {
        0 => run!(m.hash, word(key), wv, w),
        1 => run!(m.tree, word(key), wv, w),
        2 => run!(m.bytes, key, bv, id),
        3 => run!(m.text, key, bv, id),
        _ => run!(m.leaves, key, bv, id),
    }
}

/// `kind` on `map` as a single write (`put` for [`Kind::Put`], its answer checked against
/// `absent`: whether the model lacked `key` before).
fn single(m: &Maps, map: usize, key: &Bytes, kind: &Kind, absent: bool) -> Result<(), Error> {
    macro_rules! run {
        ($m:expr, $k:expr, $v:expr) => {
            match kind {
                Kind::Get => drop($m.get($k)?),
                Kind::Insert(v) => drop($m.insert($k, $v(*v))?),
                Kind::Upsert(v) => drop($m.upsert($k, $v(*v))?),
                Kind::Put(v) => assert_eq!($m.put($k, $v(*v))?, absent, "put's answer"),
                Kind::Remove | Kind::Delete => drop($m.remove($k)?),
            }
        };
    }
    let wv = |v: u16| word(&value_of(0, v));
    let bv = |v: u16| value_of(2, v);
    match map {
        0 => run!(m.hash, word(key), wv),
        1 => run!(m.tree, word(key), wv),
        2 => run!(m.bytes, key, bv),
        3 => run!(m.text, key, bv),
        _ => run!(m.leaves, key, bv),
    }
    Ok(())
}

fn observe(m: &Maps) -> State {
    let w = |v: u64| v.to_be_bytes().to_vec();
    let mut state: State = Default::default();
    for pair in m.hash.iter() {
        let (k, v) = pair.unwrap();
        state[0].insert(w(k), w(v));
    }
    for pair in m.tree.iter() {
        let (k, v) = pair.unwrap();
        state[1].insert(w(k), w(v));
    }
    state[2] = m.bytes.iter().collect::<Result<_, _>>().unwrap();
    state[3] = m.text.iter().collect::<Result<_, _>>().unwrap();
    state[4] = m.leaves.iter().collect::<Result<_, _>>().unwrap();
    let lens = [
        m.hash.len(),
        m.tree.len(),
        m.bytes.len(),
        m.text.len(),
        m.leaves.len(),
    ];
    for (i, len) in lens.into_iter().enumerate() {
        assert_eq!(len, state[i].len() as u64, "map {i}'s len");
    }
    for (k, v) in &state[3] {
        assert_eq!(m.text.get(k).unwrap().as_ref(), Some(v));
    }
    for (k, v) in &state[4] {
        assert_eq!(m.leaves.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(m.leaves.check().unwrap(), state[4].len() as u64);
    state
}

fn run(path: &Path, steps: &[Step]) {
    let options = StoreOptions::new().granularity(Granularity::Emulated);
    let mut store = Store::create(path, 16 << 20, &options).unwrap();
    let mut m = maps(&store);
    let mut model: State = Default::default();
    for step in steps {
        match step {
            Step::Batch(changes, ending) => {
                let mut after = model.clone();
                let fill = |batch: &mut WriteBatch, after: &mut State| {
                    for (map, k, kind) in changes {
                        let key = key_of(*map, *k);
                        let expected = model_apply(after, *map, &key, kind);
                        let got = in_batch(&m, batch, *map, &key, kind).unwrap();
                        assert_eq!(got, expected, "{kind:?} of map {map} key {key:?}");
                    }
                };
                match ending {
                    Ending::Commit => {
                        let mut batch = store.batch().unwrap();
                        fill(&mut batch, &mut after);
                        batch.commit().unwrap();
                        model = after;
                    }
                    Ending::ClosureError => {
                        let result = store.write(|batch| {
                            fill(batch, &mut after);
                            Err::<(), Error>(Error::InvalidConfig {
                                reason: "the closure's own".into(),
                            })
                        });
                        assert!(matches!(result, Err(Error::InvalidConfig { .. })));
                    }
                    Ending::Panic => {
                        let outcome =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                store.write(|batch| {
                                    fill(batch, &mut after);
                                    panic!("a batch's closure panics");
                                    #[allow(unreachable_code)]
                                    Ok::<(), Error>(())
                                })
                            }));
                        assert!(outcome.is_err());
                    }
                    Ending::Drop => {
                        let mut batch = store.batch().unwrap();
                        fill(&mut batch, &mut after);
                        drop(batch);
                    }
                }
            }
            Step::Single(map, k, kind) => {
                let key = key_of(*map, *k);
                let before = model_apply(&mut model, *map, &key, kind);
                single(&m, *map, &key, kind, before.is_none()).unwrap();
            }
            Step::Reopen => {
                drop(m);
                drop(store);
                store = Store::open_with(path, &options).unwrap();
                m = maps(&store);
            }
        }
        assert_eq!(observe(&m), model, "after {step:?}");
    }
    store.check_blocks().unwrap();
    let report = store.verify();
    assert!(report.is_healthy(), "{report}");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        ..ProptestConfig::default()
    })]

    #[test]
    fn sequences_of_batches_hold_the_model(steps in prop::collection::vec(step(), 1..24)) {
        let dir = tempfile::tempdir_in(if Path::new("/dev/shm").is_dir() {
            Path::new("/dev/shm")
        } else {
            Path::new(".")
        })
        .unwrap();
        run(&dir.path().join("batches.pool"), &steps);
    }
}
