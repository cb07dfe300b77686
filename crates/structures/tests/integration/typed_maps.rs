//! Typed keys and values through the `Store`: the types inline and in records, their orders,
//! the limits and refusals (types, sizes, a full pool), values over a mebibyte, and threads.

use std::collections::BTreeMap as Model;
use std::sync::Arc;

use pmem_ordering::Granularity;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::raw::records::{MAX_KEY_BYTES, MAX_VALUE_BYTES};
use pmem_structures::types::{Pod, PodValue};
use pmem_structures::{Error, HeapConfig, Store, StoreOptions};

type Bytes = Vec<u8>;

fn options() -> StoreOptions {
    StoreOptions::new().granularity(Granularity::Emulated)
}

fn store(size: u64) -> Store {
    Store::anonymous(size, &options()).expect("an anonymous store")
}

fn tree() -> FastFairConfig {
    FastFairConfig::default()
}

/// A 12-byte plain-data value: too wide for a slot, so it goes to records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
struct Point3 {
    x: i32,
    y: i32,
    z: i32,
}
// SAFETY: three `i32`s, `repr(C)`, no padding: every bit pattern is a valid `Point3`, and
// all-zero bytes are one.
unsafe impl bytemuck::Zeroable for Point3 {}
// SAFETY: as above; `Copy` and `'static`.
unsafe impl bytemuck::Pod for Point3 {}
impl PodValue for Point3 {
    const NAME: &'static str = "typed_maps::Point3";
}

#[test]
fn signed_keys_walk_in_numeric_order_and_byte_keys_in_lexicographic_order() {
    let store = store(32 << 20);
    let signed = store.btree_map_with::<i64, i32>("signed", tree()).unwrap();
    for k in [5i64, -1, i64::MIN, 0, 42, -300, i64::MAX] {
        assert!(signed.insert(k, k as i32).unwrap());
    }
    let keys: Vec<i64> = signed.iter().map(|p| p.unwrap().0).collect();
    assert_eq!(keys, [i64::MIN, -300, -1, 0, 5, 42, i64::MAX]);
    let window: Vec<i64> = signed.range(-5i64..=5).map(|p| p.unwrap().0).collect();
    assert_eq!(window, [-1, 0, 5]);

    let words = store
        .btree_map_with::<String, u64>("words", tree())
        .unwrap();
    for (i, w) in [
        "pear",
        "",
        "apple",
        "app",
        "apple pie",
        "b",
        "user:2",
        "user:10",
    ]
    .iter()
    .enumerate()
    {
        assert!(words.insert(*w, i as u64).unwrap());
    }
    let keys: Vec<String> = words.iter().map(|p| p.unwrap().0).collect();
    assert_eq!(
        keys,
        [
            "",
            "app",
            "apple",
            "apple pie",
            "b",
            "pear",
            "user:10",
            "user:2"
        ]
    );
    let users: Vec<String> = words
        .range("user:".."user;")
        .map(|p| p.unwrap().0)
        .collect();
    assert_eq!(users, ["user:10", "user:2"]);
}

#[test]
fn wide_fixed_size_types_go_to_records_and_keep_their_order() {
    let store = store(32 << 20);
    let ids = store.hash_map::<[u8; 16], Pod<Point3>>("ids").unwrap();
    let p = Point3 { x: 1, y: -2, z: 3 };
    assert!(ids.insert([7u8; 16], Pod(p)).unwrap());
    assert_eq!(ids.get([7u8; 16]).unwrap(), Some(Pod(p)));
    assert_eq!(ids.get([8u8; 16]).unwrap(), None);

    let big = store.btree_map_with::<u128, u64>("big", tree()).unwrap();
    for k in [u128::MAX, 1, 1 << 64, 0, (1 << 64) - 1] {
        big.insert(k, 9u64).unwrap();
    }
    let keys: Vec<u128> = big.iter().map(|p| p.unwrap().0).collect();
    assert_eq!(keys, [0, 1, (1 << 64) - 1, 1 << 64, u128::MAX]);
    store.check_blocks().unwrap();
}

#[test]
fn a_map_opened_with_other_types_is_refused_by_name() {
    let store = store(32 << 20);
    store.hash_map::<String, Bytes>("users").unwrap();
    let refused = |e: Error| e.to_string();
    let as_words = store
        .hash_map::<u64, u64>("users")
        .map(drop)
        .map_err(refused);
    assert_eq!(
        as_words.unwrap_err(),
        "\"users\" maps String to byte string, not u64 to u64"
    );
    let as_bytes = store
        .hash_map::<Bytes, Bytes>("users")
        .map(drop)
        .map_err(refused);
    assert_eq!(
        as_bytes.unwrap_err(),
        "\"users\" maps String to byte string, not byte string to byte string"
    );
    let as_tree = store
        .btree_map_with::<String, Bytes>("users", tree())
        .map(drop);
    assert!(
        matches!(as_tree, Err(Error::KindMismatch { .. })),
        "{as_tree:?}"
    );
    assert!(store.hash_map::<String, Bytes>("users").is_ok());
}

#[test]
fn keys_and_values_over_the_limits_are_refused_and_change_nothing() {
    let store = store(32 << 20);
    let hash = store.hash_map::<Bytes, Bytes>("hash").unwrap();
    let tree = store
        .btree_map_with::<Bytes, Bytes>("tree", tree())
        .unwrap();
    let long_key = vec![1u8; MAX_KEY_BYTES + 1];
    // Zeroed allocations are lazily mapped: a gibibyte that is never touched costs nothing.
    let long_value = vec![0u8; MAX_VALUE_BYTES + 1];
    for result in [
        hash.insert(&long_key, b"v").map(drop),
        tree.upsert(&long_key, b"v").map(drop),
    ] {
        assert!(
            matches!(result, Err(Error::KeyTooLarge { len, max }) if len == MAX_KEY_BYTES + 1 && max == MAX_KEY_BYTES),
            "{result:?}"
        );
    }
    for result in [
        hash.upsert(b"k", &long_value).map(drop),
        tree.insert(b"k", &long_value).map(drop),
    ] {
        assert!(
            matches!(result, Err(Error::ValueTooLarge { .. })),
            "{result:?}"
        );
    }
    assert!(hash.is_empty() && tree.is_empty());
    assert_eq!(
        hash.get(&long_key).unwrap(),
        None,
        "a lookup of a too-long key finds nothing"
    );
    // The longest key and empty keys and values are fine.
    let longest = vec![2u8; MAX_KEY_BYTES];
    assert!(hash.insert(&longest, b"").unwrap());
    assert!(tree.insert(&longest, b"").unwrap());
    assert!(hash.insert(b"", b"").unwrap());
    assert!(tree.insert(b"", b"x").unwrap());
    assert_eq!(hash.get(b"").unwrap(), Some(Vec::new()));
    assert_eq!(tree.get(b"").unwrap(), Some(b"x".to_vec()));
    assert_eq!(tree.get(&longest).unwrap(), Some(Vec::new()));
    store.check_blocks().unwrap();
}

#[test]
fn values_of_several_mebibytes_round_trip_and_free_their_chunks() {
    let store = store(64 << 20);
    let hash = store.hash_map::<String, Bytes>("hash").unwrap();
    let tree = store
        .btree_map_with::<String, Bytes>("tree", tree())
        .unwrap();
    let before = store.space();
    let big: Bytes = (0..(3 << 20)).map(|i: u32| (i % 251) as u8).collect();
    hash.insert("big", &big).unwrap();
    tree.insert("big", &big).unwrap();
    assert_eq!(hash.get("big").unwrap().as_ref(), Some(&big));
    assert_eq!(tree.get("big").unwrap().as_ref(), Some(&big));
    let bigger = vec![3u8; 5 << 20];
    assert_eq!(hash.upsert("big", &bigger).unwrap().as_ref(), Some(&big));
    assert_eq!(tree.upsert("big", &bigger).unwrap().as_ref(), Some(&big));
    store.check_blocks().unwrap();
    assert_eq!(hash.remove("big").unwrap().map(|v| v.len()), Some(5 << 20));
    assert_eq!(tree.remove("big").unwrap().map(|v| v.len()), Some(5 << 20));
    drop((hash, tree));
    store.check_blocks().unwrap();
    let after = store.space();
    assert_eq!(after.records, 0, "every record freed");
    assert!(
        after.free + (2 << 20) >= before.free,
        "the runs went back: {} free before, {} after",
        before.free,
        after.free
    );
}

#[test]
fn a_full_pool_refuses_the_write_and_leaves_the_map_as_it_was() {
    let options = options().heap(HeapConfig {
        chunk_size: 16 << 10,
        ..HeapConfig::default()
    });
    for kind in ["hash", "tree"] {
        let store = Store::anonymous(4 << 20, &options).unwrap();
        let hash = store.hash_map::<Bytes, Bytes>("hash").unwrap();
        let tree = store
            .btree_map_with::<Bytes, Bytes>("tree", tree())
            .unwrap();
        let put = |k: &[u8], v: &[u8]| match kind {
            "hash" => hash.upsert(k, v),
            _ => tree.upsert(k, v),
        };
        let mut model = Model::new();
        let mut full = None;
        for i in 0u32..100_000 {
            let key = format!("key:{i:08}").into_bytes();
            let value = vec![i as u8; 300];
            match put(&key, &value) {
                Ok(_) => {
                    model.insert(key, value);
                }
                Err(e) => {
                    full = Some(e);
                    break;
                }
            }
        }
        let full = full.expect("the pool fills up");
        assert!(matches!(full, Error::PoolFull { .. }), "{kind}: {full:?}");
        // An overwrite with a bigger value and a new key both fail whole.
        let (k0, v0) = model
            .iter()
            .next()
            .map(|(k, v)| (k.clone(), v.clone()))
            .unwrap();
        assert!(matches!(
            put(&k0, &vec![1u8; 60_000]),
            Err(Error::PoolFull { .. })
        ));
        assert!(matches!(
            put(b"new", &vec![1u8; 60_000]),
            Err(Error::PoolFull { .. })
        ));
        let contents: Model<Bytes, Bytes> = match kind {
            "hash" => hash.iter().collect::<Result<_, _>>().unwrap(),
            _ => tree.iter().collect::<Result<_, _>>().unwrap(),
        };
        assert_eq!(contents.len(), model.len(), "{kind}");
        assert_eq!(contents, model, "{kind}: the failed writes changed nothing");
        assert_eq!(contents.get(&k0), Some(&v0));
        store.check_blocks().unwrap();
        // Room comes back with removes.
        let removed: Vec<Bytes> = model.keys().take(50).cloned().collect();
        for k in &removed {
            match kind {
                "hash" => hash.remove(k).unwrap(),
                _ => tree.remove(k).unwrap(),
            };
        }
        let stats = store.space();
        put(b"after", b"room again")
            .unwrap_or_else(|e| panic!("{kind}: removes made room: {e}; {stats:?}"));
        store.check_blocks().unwrap();
    }
}

#[test]
fn writers_and_readers_on_threads_agree_with_a_model() {
    let store = store(64 << 20);
    let hash = store.hash_map::<String, Bytes>("hash").unwrap();
    let tree = store
        .btree_map_with::<String, Bytes>("tree", tree())
        .unwrap();
    let threads = 4;
    let per_thread = 1_500;
    let mut handles = Vec::new();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for t in 0..threads {
        let (hash, tree) = (hash.clone(), tree.clone());
        handles.push(std::thread::spawn(move || {
            for i in 0..per_thread {
                // Shared prefixes: the tree's layers grow under concurrent writers.
                let key = format!("tenant:{t}:user:{i:06}");
                let value = format!("{t}-{i}").repeat(1 + i % 7).into_bytes();
                assert!(hash.insert(key.as_str(), &value).unwrap());
                assert!(tree.insert(key.as_str(), &value).unwrap());
                if i % 3 == 0 {
                    hash.upsert(key.as_str(), b"over").unwrap();
                    tree.upsert(key.as_str(), b"over").unwrap();
                }
                if i % 5 == 0 {
                    hash.remove(key.as_str()).unwrap();
                    tree.remove(key.as_str()).unwrap();
                }
            }
        }));
    }
    let reader = {
        let (tree, stop) = (tree.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut scans = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || scans == 0 {
                let keys: Vec<String> = tree
                    .range("tenant:1".."tenant:2")
                    .map(|p| p.unwrap().0)
                    .collect();
                assert!(keys.windows(2).all(|w| w[0] < w[1]), "a scan out of order");
                scans += 1;
            }
        })
    };
    for h in handles {
        h.join().expect("a writer panicked");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.join().expect("the reader panicked");
    let mut model = Model::new();
    for t in 0..threads {
        for i in 0..per_thread {
            if i % 5 == 0 {
                continue;
            }
            let value = if i % 3 == 0 {
                b"over".to_vec()
            } else {
                format!("{t}-{i}").repeat(1 + i % 7).into_bytes()
            };
            model.insert(format!("tenant:{t}:user:{i:06}"), value);
        }
    }
    let from_tree: Model<String, Bytes> = tree.iter().collect::<Result<_, _>>().unwrap();
    let from_hash: Model<String, Bytes> = hash.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(from_tree, model);
    assert_eq!(from_hash, model);
    assert_eq!(tree.check().unwrap(), model.len() as u64);
    assert_eq!(hash.check().unwrap(), model.len() as u64);
    store.check_blocks().unwrap();
}

#[test]
fn a_record_write_without_a_split_costs_two_fences() {
    use pmem_ordering::{reset_thread_stats, thread_stats};
    let store = store(32 << 20);
    let hash = store.hash_map::<Bytes, Bytes>("hash").unwrap();
    let tree = store
        .btree_map_with::<Bytes, Bytes>("tree", tree())
        .unwrap();
    // The first records of a size class format their chunk (two fences, once per chunk):
    // warm both up with a record of the size measured (a 16-byte key, a 100-byte value).
    const WARM: &[u8; 16] = b"warm-up-key-0000";
    hash.insert(WARM, [0u8; 100]).unwrap();
    tree.insert(WARM, [0u8; 100]).unwrap();
    for i in 0..100u32 {
        let key = format!("{i:016}");
        reset_thread_stats();
        assert!(hash.insert(key.as_bytes(), [1u8; 100]).unwrap());
        let s = thread_stats();
        // Record and intent line under one fence; allocation bit and slot under another.
        assert_eq!(s.fences, 2, "hash insert {i}");
        reset_thread_stats();
        assert!(hash.upsert(key.as_bytes(), [2u8; 100]).unwrap().is_some());
        assert_eq!(thread_stats().fences, 2, "hash overwrite {i}");
    }
    reset_thread_stats();
    assert!(hash.remove(WARM).unwrap().is_some());
    assert_eq!(thread_stats().fences, 2, "hash remove");
    // The tree: one fence for the record, then FAST's own (one per cache line its shift
    // touches): an append at the end of a leaf touches one.
    let mut appends = 0;
    for i in 0..20u32 {
        let key = format!("z{i:015}");
        reset_thread_stats();
        assert!(tree.insert(key.as_bytes(), [1u8; 100]).unwrap());
        let fences = thread_stats().fences;
        assert!(fences >= 2, "tree insert {i}: {fences} fences");
        appends += u32::from(fences == 2);
    }
    assert!(appends > 0, "some appends cost exactly two fences");
}

#[test]
fn removing_a_map_of_records_frees_every_record() {
    let store = store(32 << 20);
    let before = store.space();
    {
        let hash = store.hash_map::<String, Bytes>("hash").unwrap();
        let tree = store
            .btree_map_with::<String, Bytes>("tree", tree())
            .unwrap();
        // Hundreds of records: more blocks than one removal transaction frees.
        for i in 0..600u32 {
            let key = format!("user:{i:08}");
            hash.insert(key.as_str(), [3u8; 200]).unwrap();
            tree.insert(key.as_str(), [3u8; 200]).unwrap();
        }
        assert!(
            store.remove_structure("hash").is_err(),
            "in use while a handle lives"
        );
    }
    store.remove_structure("hash").unwrap();
    store.remove_structure("tree").unwrap();
    store.check_blocks().unwrap();
    let after = store.space();
    assert_eq!(after.records, 0);
    assert_eq!(after.blocks, before.blocks, "nothing left of either map");
    assert!(store.names().is_empty());
}

#[test]
fn more_writers_than_intent_lines_on_one_ordered_map_all_finish() {
    // 24 threads, more than the 16 intent lines, racing to push keys of one 7-byte slice down
    // into new layers: none may wait for a line another waiting writer holds.
    let store = store(64 << 20);
    let tree = store.btree_map_with::<String, u64>("tree", tree()).unwrap();
    let threads: Vec<_> = (0..24u64)
        .map(|t| {
            let tree = tree.clone();
            std::thread::spawn(move || {
                for i in 0..200u64 {
                    let key = format!("shared:{}:{t}", i % 17);
                    tree.upsert(key.as_str(), t * 1000 + i).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a writer panicked");
    }
    assert_eq!(tree.len(), 24 * 17);
    assert_eq!(tree.check().unwrap(), 24 * 17);
    store.check_blocks().unwrap();
}
