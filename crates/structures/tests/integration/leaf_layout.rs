//! The `Store`'s ordered map in the leaf layout (`BTreeLayout::Leaves`): every handle method
//! answers as the default layout's map and a std `BTreeMap` do; the layout is recorded and kept
//! across opens whatever is asked; write batches take the map, all or nothing; removal
//! frees every block; a full pool and damaged bytes are typed errors, never a panic.

use std::collections::BTreeMap as Model;
use std::ops::{Bound, ControlFlow};
use std::os::unix::fs::FileExt;

use pmem_ordering::Granularity;
use pmem_structures::{
    BTreeLayout, BTreeMap, Error, FastFairConfig, LeafMapConfig, Store, StoreOptions, StructureKind,
};
use pmem_test_kit::fixture::pool_path;
use pmem_test_kit::SplitMix64;

/// Leaves of four slots of 64 bytes: a few keys split them, a pair past 56 bytes is a record.
const SMALL: LeafMapConfig = LeafMapConfig {
    leaf_bytes: 320,
    slot_bytes: 64,
};

fn options() -> StoreOptions {
    StoreOptions::new().granularity(Granularity::Emulated)
}

fn key(rng: &mut SplitMix64) -> String {
    // Shared prefixes of several lengths, and a long key now and then.
    match rng.below(8) {
        0 => format!("user:{:03}:{}", rng.below(40), "x".repeat(60)),
        _ => format!("user:{:03}", rng.below(120)),
    }
}

fn value(rng: &mut SplitMix64, i: u64) -> Vec<u8> {
    let len = [0, 3, 20, 48, 200, 3000][rng.below(6) as usize];
    (0..len).map(|j| (i as usize + j) as u8).collect()
}

/// The same writes to a map of leaves, a map of the default layout and a model, every answer
/// compared; then every read and scan of both maps against the model.
#[test]
fn a_map_of_leaves_answers_as_the_default_layout_and_the_model_do() {
    let store = Store::anonymous(32 << 20, &options()).unwrap();
    let leaves = store
        .btree_map_with::<String, Vec<u8>>("leaves", SMALL)
        .unwrap();
    let trees = store.btree_map::<String, Vec<u8>>("trees").unwrap();
    assert_eq!(leaves.layout(), BTreeLayout::Leaves(SMALL));
    assert_eq!(trees.layout(), BTreeLayout::default());
    let mut model = Model::new();
    let mut rng = SplitMix64::new(31);
    for i in 0..3000u64 {
        let (k, v) = (key(&mut rng), value(&mut rng, i));
        match rng.below(5) {
            0 | 1 => {
                let inserted = leaves.insert(&k, &v).unwrap();
                assert_eq!(inserted, trees.insert(&k, &v).unwrap(), "insert {k}");
                assert_eq!(inserted, !model.contains_key(&k));
                model.entry(k).or_insert(v);
            }
            2 | 3 => {
                let old = leaves.upsert(&k, &v).unwrap();
                assert_eq!(old, trees.upsert(&k, &v).unwrap(), "upsert {k}");
                assert_eq!(old, model.insert(k, v));
            }
            _ => {
                let old = leaves.remove(&k).unwrap();
                assert_eq!(old, trees.remove(&k).unwrap(), "remove {k}");
                assert_eq!(old, model.remove(&k));
            }
        }
        assert_eq!(leaves.len(), model.len() as u64);
    }
    check_against(&leaves, &model);
    check_against(&trees, &model);
    assert_eq!(leaves.check().unwrap(), model.len() as u64);
    assert!(leaves.verify().is_healthy(), "{}", leaves.verify());
    assert!(store.verify().is_healthy());
    store.check_blocks().unwrap();
}

/// Every read and scan of `map` against `model`.
fn check_against(map: &BTreeMap<String, Vec<u8>>, model: &Model<String, Vec<u8>>) {
    assert_eq!(map.len(), model.len() as u64);
    assert_eq!(map.is_empty(), model.is_empty());
    let mut out = Vec::new();
    for (k, v) in model {
        assert_eq!(map.get(k.as_str()).unwrap().as_ref(), Some(v), "get {k}");
        assert!(map.contains_key(k.as_str()).unwrap());
        assert!(map.get_into(k.as_str(), &mut out).unwrap());
        assert_eq!(&out, v);
        assert_eq!(
            map.get_with(k.as_str(), |b| b.to_vec()).unwrap().as_ref(),
            Some(v)
        );
    }
    assert_eq!(map.get("absent").unwrap(), None);
    assert!(!map.get_into("absent", &mut out).unwrap() && out.is_empty());
    assert_eq!(map.get_with("absent", |_| ()).unwrap(), None);
    assert!(!map.contains_key("k".repeat(2000)).unwrap());
    let all: Vec<(String, Vec<u8>)> = map.iter().collect::<Result<_, _>>().unwrap();
    let want: Vec<(String, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(all, want);
    let bounds = [
        (Bound::Included("user:010"), Bound::Excluded("user:050")),
        (Bound::Excluded("user:010"), Bound::Included("user:050")),
        (Bound::Unbounded, Bound::Included("user:005")),
        (Bound::Included("user:100"), Bound::Unbounded),
        (Bound::Included("user:2"), Bound::Unbounded),
        (Bound::Included("user:050"), Bound::Excluded("user:050")),
    ];
    for (start, end) in bounds {
        let got: Vec<(String, Vec<u8>)> = map
            .range::<&str, _>((start, end))
            .collect::<Result<_, _>>()
            .unwrap();
        let owned = (start.map(str::to_string), end.map(str::to_string));
        let want: Vec<(String, Vec<u8>)> = model
            .range(owned)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(got, want, "range {start:?}..{end:?}");
        // The lent scan and the cursor give the same pairs as their encodings.
        let mut lent = Vec::new();
        let broke = map
            .range_with::<&str, _, _>((start, end), |k, v| {
                lent.push((String::from_utf8(k.to_vec()).unwrap(), v.to_vec()));
                ControlFlow::<()>::Continue(())
            })
            .unwrap();
        assert_eq!((broke, &lent), (None, &want));
        let mut cursor = map.range_encoded::<&str, _>((start, end));
        let mut stepped = Vec::new();
        while let Some(pair) = cursor.next_pair() {
            let (k, v) = pair.unwrap();
            stepped.push((String::from_utf8(k.to_vec()).unwrap(), v.to_vec()));
        }
        assert_eq!(stepped, want);
    }
    // A lent scan stopped at the 70th pair returns what it broke with.
    let mut seen = 0;
    let broke = map
        .iter_with(|k, _| {
            seen += 1;
            match seen == 70 {
                true => ControlFlow::Break(k.to_vec()),
                false => ControlFlow::Continue(()),
            }
        })
        .unwrap();
    let seventieth = model.keys().nth(69).map(|k| k.as_bytes().to_vec());
    assert_eq!(broke, seventieth);
    let mut all_encoded = 0;
    let mut cursor = map.iter_encoded();
    while let Some(pair) = cursor.next_pair() {
        pair.unwrap();
        all_encoded += 1;
    }
    assert_eq!(all_encoded, model.len());
}

/// A map keeps the layout it was made with, whatever a later open asks; a map of leaves holds
/// integer keys in their order too; the catalog lists it as a leaf map; other kinds and types
/// are refused.
#[test]
fn the_layout_is_recorded_and_kept_across_opens() {
    let (_dir, path) = pool_path("leaf-layout", "store.pool");
    {
        let store = Store::create(&path, 16 << 20, &options()).unwrap();
        let ticks = store
            .btree_map_with::<i64, u64>("ticks", BTreeLayout::leaves())
            .unwrap();
        for k in -500i64..500 {
            ticks.insert(k * 7, k as u64).unwrap();
        }
        let names = store.btree_map::<String, String>("names").unwrap();
        names.insert("ada", "lovelace").unwrap();
    }
    let store = Store::open_with(&path, &options()).unwrap();
    assert_eq!(
        store.structures(),
        vec![
            ("names".to_string(), StructureKind::RecordBTreeMap),
            ("ticks".to_string(), StructureKind::LeafMap),
        ]
    );
    let tree = FastFairConfig {
        node_size: 256,
        ..FastFairConfig::default()
    };
    let ticks = store.btree_map_with::<i64, u64>("ticks", tree).unwrap();
    assert_eq!(ticks.layout(), BTreeLayout::leaves());
    let got: Vec<(i64, u64)> = ticks.range(-14i64..=14).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        got,
        vec![
            (-14, -2i64 as u64),
            (-7, -1i64 as u64),
            (0, 0),
            (7, 1),
            (14, 2)
        ]
    );
    assert_eq!(ticks.iter().count(), 1000);
    let names = store
        .btree_map_with::<String, String>("names", BTreeLayout::leaves())
        .unwrap();
    assert_eq!(names.layout(), BTreeLayout::default());
    assert_eq!(names.get("ada").unwrap().as_deref(), Some("lovelace"));
    assert!(matches!(
        store.hash_map::<i64, u64>("ticks"),
        Err(Error::KindMismatch {
            found: StructureKind::LeafMap,
            wanted: StructureKind::HashMap,
            ..
        })
    ));
    assert!(matches!(
        store.btree_map::<String, u64>("ticks"),
        Err(Error::TypeMismatch { .. })
    ));
    assert!(matches!(
        store.datalog("ticks", Default::default()),
        Err(Error::KindMismatch { .. })
    ));
    let bad = LeafMapConfig {
        leaf_bytes: 100,
        slot_bytes: 64,
    };
    assert!(matches!(
        store.btree_map_with::<u64, u64>("bad", bad),
        Err(Error::RecordMap(_) | Error::InvalidConfig { .. })
    ));
    assert!(!store.names().contains(&"bad".to_string()));
}

/// Write batches take a map of leaves beside a map of the other layout: random mixes of
/// inserts, overwrites and removes (values inline and in records), a hundred new keys between
/// two neighbours of a one-key leaf (new leaves), removes emptying leaves, every key removed;
/// after each batch both maps hold the model, `verify` is clean and the heap holds exactly the
/// maps' blocks; a dropped batch and a failed closure change nothing; a single write from the
/// batch's thread is refused while the batch holds the map; and it all reads back after a
/// reopen of the file.
#[test]
fn write_batches_take_a_map_of_leaves_all_or_nothing() {
    let (_dir, path) = pool_path("leaf-batches", "store.pool");
    let store = Store::create(&path, 16 << 20, &options()).unwrap();
    let leaves = store
        .btree_map_with::<String, Vec<u8>>("leaves", SMALL)
        .unwrap();
    let trees = store.btree_map::<String, Vec<u8>>("trees").unwrap();
    let mut model: Model<String, Vec<u8>> = Model::new();
    let mut rng = SplitMix64::new(41);
    let agree = |model: &Model<String, Vec<u8>>| {
        for map in [&leaves, &trees] {
            let pairs: Vec<(String, Vec<u8>)> = map.iter().map(Result::unwrap).collect();
            let want: Vec<(String, Vec<u8>)> =
                model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(pairs, want, "{}", map.name());
            assert_eq!(map.len(), model.len() as u64);
            assert_eq!(map.check().unwrap(), model.len() as u64);
        }
        assert!(store.verify().is_healthy(), "{}", store.verify());
        store.check_blocks().unwrap();
    };
    // One key, then a hundred between it and its neighbour, in one batch.
    leaves.insert("m", b"one".to_vec()).unwrap();
    trees.insert("m", b"one".to_vec()).unwrap();
    model.insert("m".into(), b"one".to_vec());
    store
        .write(|batch| {
            for i in 0..100 {
                let (k, v) = (format!("m{i:03}"), value(&mut rng, i));
                leaves.put_in(batch, k.as_str(), v.clone())?;
                trees.put_in(batch, k.as_str(), v.clone())?;
                model.insert(k, v);
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    agree(&model);
    for round in 0..60u64 {
        let changes = 1 + rng.below(if round % 10 == 0 { 200 } else { 12 });
        let mut planned = model.clone();
        store
            .write(|batch| {
                for i in 0..changes {
                    let k = key(&mut rng);
                    match rng.below(3) {
                        0 => {
                            let old = leaves.remove_in(batch, k.as_str())?;
                            assert_eq!(old, planned.remove(&k), "remove_in {k}");
                            trees.delete_in(batch, k.as_str())?;
                        }
                        _ => {
                            let v = value(&mut rng, round * 1000 + i);
                            let old = leaves.upsert_in(batch, k.as_str(), v.clone())?;
                            assert_eq!(old, planned.insert(k.clone(), v.clone()), "upsert_in {k}");
                            trees.put_in(batch, k.as_str(), v)?;
                        }
                    }
                }
                Ok::<_, Error>(())
            })
            .unwrap();
        model = planned;
        agree(&model);
    }
    // A batch the closure abandons and one dropped change nothing.
    let abandoned = store.write(|batch| {
        leaves.put_in(batch, "zzz", b"z".to_vec())?;
        leaves.delete_in(batch, "m")?;
        Err::<(), Error>(Error::InvalidConfig {
            reason: "abandoned".into(),
        })
    });
    assert!(matches!(abandoned, Err(Error::InvalidConfig { .. })));
    let mut batch = store.batch().unwrap();
    assert_eq!(
        leaves.get_in(&mut batch, "m").unwrap(),
        model.get("m").cloned()
    );
    // The batch holds the map: a single write from its own thread is refused.
    assert!(matches!(
        leaves.insert("x", b"x".to_vec()),
        Err(Error::InBatch { name }) if name == "leaves"
    ));
    leaves.put_in(&mut batch, "zzz", b"z".to_vec()).unwrap();
    drop(batch);
    agree(&model);
    // Every key removed in one batch: the emptied leaves are unlinked and freed.
    store
        .write(|batch| {
            for k in model.keys() {
                leaves.delete_in(batch, k.as_str())?;
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    assert_eq!(leaves.len(), 0);
    assert!(leaves.check().is_ok());
    for k in model.keys() {
        trees.remove(k.as_str()).unwrap();
    }
    model.clear();
    agree(&model);
    leaves.insert("after", b"all".to_vec()).unwrap();
    trees.insert("after", b"all".to_vec()).unwrap();
    model.insert("after".into(), b"all".to_vec());
    drop((leaves, trees));
    drop(store);
    let store = Store::open_with(&path, &options()).unwrap();
    let leaves = store
        .btree_map_with::<String, Vec<u8>>("leaves", BTreeLayout::default())
        .unwrap();
    assert_eq!(leaves.layout(), BTreeLayout::Leaves(SMALL));
    let pairs: Vec<(String, Vec<u8>)> = leaves.iter().map(Result::unwrap).collect();
    assert_eq!(pairs, vec![("after".to_string(), b"all".to_vec())]);
    store.check_blocks().unwrap();
}

/// Removing a map of leaves frees its leaves and records (the heap holds what it held before
/// it was made), refused while a handle is open; a full pool is `PoolFull` and the map stays
/// whole.
#[test]
fn removal_frees_every_block_and_a_full_pool_is_a_typed_error() {
    let store = Store::anonymous(4 << 20, &options()).unwrap();
    let before = store.check_blocks().unwrap();
    let map = store
        .btree_map_with::<u64, Vec<u8>>("full", BTreeLayout::leaves())
        .unwrap();
    let mut written = 0u64;
    let full = loop {
        let value = vec![written as u8; if written.is_multiple_of(3) { 500 } else { 60 }];
        match map.insert(written, value) {
            Ok(true) => written += 1,
            Ok(false) => panic!("key {written} was present"),
            Err(e) => break e,
        }
    };
    assert!(matches!(full, Error::PoolFull { .. }), "{full}");
    assert!(written > 1000, "only {written} pairs fit");
    assert_eq!(map.len(), written);
    assert_eq!(map.check().unwrap(), written);
    assert_eq!(
        map.get(written - 1).unwrap().map(|v| v.len()),
        Some(if (written - 1).is_multiple_of(3) {
            500
        } else {
            60
        })
    );
    assert!(store.verify().is_healthy());
    assert!(matches!(
        store.remove_structure("full"),
        Err(Error::InUse { .. })
    ));
    drop(map);
    store.remove_structure("full").unwrap();
    assert_eq!(store.check_blocks().unwrap(), before);
    assert!(store.names().is_empty());
}

/// The first live slot's payload of the map `name`'s head leaf, found from the file's bytes:
/// the map's block that is not its root (a leaf's tag is not the root's magic).
fn first_slot(store: &Store, path: &std::path::Path, name: &str) -> u64 {
    let owned = store.owned_blocks().unwrap();
    let blocks = &owned.iter().find(|(n, _)| n == name).unwrap().1;
    let bytes = std::fs::read(path).unwrap();
    let leaf = blocks
        .iter()
        .copied()
        .find(|&b| &bytes[b as usize..b as usize + 8] != b"LEAFMAP1")
        .unwrap();
    let bitmap = u64::from_le_bytes(bytes[leaf as usize..leaf as usize + 8].try_into().unwrap());
    assert_eq!(bitmap, 1, "one pair, in slot 0");
    leaf + 64
}

/// A flipped byte in a slot's pair is `CorruptRecord` for the reads that need it (lookups of
/// its key, scans over it), never another value; the map's other operations go on; `verify`
/// names the slot. A damaged root is a typed error at the handle's open, and a finding of
/// `Store::verify`.
#[test]
fn damaged_bytes_are_typed_errors_and_findings() {
    let (_dir, path) = pool_path("leaf-damage", "store.pool");
    let slot;
    {
        let store = Store::create(&path, 8 << 20, &options()).unwrap();
        let map = store
            .btree_map_with::<String, String>("events", BTreeLayout::leaves())
            .unwrap();
        map.insert("first", "value").unwrap();
        slot = first_slot(&store, &path, "events");
        let other = store
            .btree_map_with::<String, String>("other", BTreeLayout::leaves())
            .unwrap();
        other.insert("x", "y").unwrap();
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, slot + 10).unwrap();
    file.write_all_at(&[byte[0] ^ 0x20], slot + 10).unwrap();
    drop(file);
    let store = Store::open_with(&path, &options()).unwrap();
    let map = store.btree_map::<String, String>("events").unwrap();
    assert!(matches!(map.get("first"), Err(Error::CorruptRecord { .. })));
    assert!(matches!(
        map.contains_key("first"),
        Err(Error::CorruptRecord { .. })
    ));
    let scanned: Vec<Result<(String, String), Error>> = map.iter().collect();
    assert!(matches!(
        scanned.as_slice(),
        [Err(Error::CorruptRecord { .. })]
    ));
    assert!(map
        .iter_with(|_, _| ControlFlow::<()>::Continue(()))
        .is_err());
    assert!(map.check().is_err());
    assert!(!map.verify().is_healthy());
    let report = store.verify();
    assert!(!report.is_healthy(), "{report:?}");
    drop(map);
    drop(store);

    // The root's checksummed fields: its head pointer.
    let store = Store::open_with(&path, &options()).unwrap();
    let root = store
        .owned_blocks()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == "other")
        .unwrap()
        .1
        .into_iter()
        .find(|&b| {
            let bytes = std::fs::read(&path).unwrap();
            &bytes[b as usize..b as usize + 8] == b"LEAFMAP1"
        })
        .unwrap();
    drop(store);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.write_all_at(&[0x40], root + 17).unwrap();
    drop(file);
    let store = Store::open_with(&path, &options()).unwrap();
    assert!(store.btree_map::<String, String>("other").is_err());
    let report = store.verify();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.to_string().contains("other")),
        "{report:?}"
    );
}

/// `range_with` on a map of many small leaves: runs of scans that take the same number of
/// pairs (each after the first copied in one batch as long as the last), then other numbers,
/// every one the model's pairs; and scans beside a writer that splits and empties leaves
/// between their batches lend every key present throughout, once each, in order.
#[test]
fn range_with_across_many_leaves_agrees_with_the_model_beside_a_writer() {
    let store = Store::anonymous(32 << 20, &options()).unwrap();
    let map = store
        .btree_map_with::<u64, u64>("scans", BTreeLayout::Leaves(SMALL))
        .unwrap();
    let mut model = Model::new();
    for k in (0..4_000u64).step_by(2) {
        map.insert(k, k * 3).unwrap();
        model.insert(k, k * 3);
    }
    let mut rng = SplitMix64::new(11);
    for n in [100, 100, 100, 7, 7, 250, 250, 1, 130, 100] {
        let from = rng.below(4_000);
        let want: Vec<(u64, u64)> = model.range(from..).take(n).map(|(&k, &v)| (k, v)).collect();
        let mut got = Vec::new();
        let broke = map
            .range_with(from.., |k, v| {
                let pair = (
                    u64::from_be_bytes(k.try_into().unwrap()),
                    u64::from_be_bytes(v.try_into().unwrap()),
                );
                got.push(pair);
                match got.len() == n {
                    true => ControlFlow::Break(pair),
                    false => ControlFlow::Continue(()),
                }
            })
            .unwrap();
        assert_eq!(got, want, "{n} pairs from {from}");
        assert_eq!(broke, want.last().copied().filter(|_| want.len() == n));
    }
    std::thread::scope(|s| {
        let writer = map.clone();
        s.spawn(move || {
            for round in 0..4u64 {
                for k in (1..4_000u64).step_by(2) {
                    writer.insert(k, round).unwrap();
                }
                for k in (1..4_000u64).step_by(2) {
                    writer.remove(k).unwrap();
                }
            }
        });
        for _ in 0..40 {
            let from = 2 * rng.below(1_500);
            let mut lasting = Vec::new();
            let mut last = None;
            map.range_with(from.., |k, v| {
                let k = u64::from_be_bytes(k.try_into().unwrap());
                assert!(last.is_none_or(|l| l < k), "keys in order, each once");
                last = Some(k);
                if k.is_multiple_of(2) {
                    assert_eq!(u64::from_be_bytes(v.try_into().unwrap()), k * 3);
                    lasting.push(k);
                }
                match lasting.len() == 100 {
                    true => ControlFlow::Break(()),
                    false => ControlFlow::Continue(()),
                }
            })
            .unwrap();
            let want: Vec<u64> = (from..4_000).step_by(2).take(100).collect();
            assert_eq!(lasting, want, "from {from}");
        }
    });
}
