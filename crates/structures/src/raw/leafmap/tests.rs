//! (tests) The leaf map against a `BTreeMap`: splits, unlinks, out-of-line pairs, scans and
//! their bounds, reopening, refusals, damage, and threads.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use pmem_ordering::{Hardware, Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::{LeafMap, LeafMapConfig};
use crate::kind::StructureKind;
use crate::records::RecordMapError;
use crate::verify::Problem;

type Map = LeafMap<Hardware>;
/// A scan's two bounds.
type KeyRange<'k> = (Bound<&'k [u8]>, Bound<&'k [u8]>);

/// Leaves of 4 slots of 64 bytes: 56 bytes inline, splits every few keys.
const SMALL: LeafMapConfig = LeafMapConfig {
    leaf_bytes: 320,
    slot_bytes: 64,
};

fn heap() -> Heap {
    let pool = Pool::anonymous("leafmap", 16 << 20, &PoolOptions::new()).unwrap();
    Heap::create(pool, HeapConfig::default(), FencePolicy::Batched).unwrap()
}

fn map(config: LeafMapConfig) -> Map {
    let heap = heap();
    let root = heap.pool().root_offset();
    LeafMap::create(&heap, root, config).unwrap()
}

/// Close `map` and open its pool again, as a restart would.
fn reopen(map: Map) -> Map {
    let (heap, root) = (map.heap().clone(), map.root());
    drop(map);
    let pool: Arc<Pool> = heap.into_pool().unwrap_or_else(|_| panic!("a handle left"));
    let heap = Heap::open(pool).unwrap();
    LeafMap::open(&heap, root).unwrap()
}

fn all(map: &Map) -> Vec<(Vec<u8>, Vec<u8>)> {
    map.range_pairs(Bound::Unbounded, Bound::Unbounded).unwrap()
}

fn model_pairs(model: &BTreeMap<Vec<u8>, Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    model.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

/// The map holds the model: scan, gets, len, verify, and the heap holds exactly its blocks.
fn agrees(map: &Map, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    assert_eq!(all(map), model_pairs(model));
    for (k, v) in model {
        assert_eq!(map.get(k).unwrap().as_ref(), Some(v), "get({k:?})");
    }
    assert_eq!(map.len(), model.len() as u64);
    let report = map.verify();
    assert!(report.is_healthy(), "{report}");
    let mut committed: Vec<u64> = map
        .heap()
        .check_heap()
        .unwrap()
        .into_iter()
        .map(|(o, _)| o)
        .collect();
    committed.sort_unstable();
    assert_eq!(
        committed,
        map.blocks().unwrap(),
        "the heap holds the map's blocks"
    );
    assert_eq!(report.blocks_walked, committed.len() as u64);
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{:06}", i.wrapping_mul(7919) % 1_000_003).into_bytes()
}

#[test]
fn random_writes_split_unlink_and_reopen_as_the_model_says() {
    let mut map = map(SMALL);
    let mut model = BTreeMap::new();
    let mut rng = pmem_ordering::sim::SplitMix64::new(9);
    for round in 0..3 {
        for i in 0..600u64 {
            let k = key(rng.below(200));
            let v = vec![(i % 251) as u8; (rng.below(40)) as usize];
            match rng.below(5) {
                0 => {
                    let inserted = map.insert(&k, &v).unwrap();
                    assert_eq!(inserted, !model.contains_key(&k));
                    model.entry(k.clone()).or_insert(v);
                }
                1 => assert_eq!(map.upsert(&k, &v).unwrap(), model.insert(k.clone(), v)),
                2 => {
                    let absent = map.put(&k, &v).unwrap();
                    assert_eq!(absent, model.insert(k.clone(), v).is_none(), "put({k:?})");
                }
                _ => assert_eq!(map.remove(&k).unwrap(), model.remove(&k)),
            }
            // The point read goes through the DRAM hash index, which the write kept.
            assert_eq!(map.get(&k).unwrap().as_ref(), model.get(&k), "get({k:?})");
            assert_eq!(map.contains_key(&k).unwrap(), model.contains_key(&k));
        }
        assert!(map.leaves() > 10, "round {round}: {} leaves", map.leaves());
        agrees(&map, &model);
        map = reopen(map);
        agrees(&map, &model);
    }
    for k in model.keys() {
        assert!(map.remove(k).unwrap().is_some());
    }
    assert_eq!(map.leaves(), 1, "emptied leaves are unlinked");
    agrees(&map, &BTreeMap::new());
}

#[test]
fn large_pairs_live_in_records_and_are_freed_with_their_slot() {
    let map = map(SMALL);
    let mut model = BTreeMap::new();
    for i in 0..40u64 {
        let v = vec![i as u8; if i % 2 == 0 { 10 } else { 300 + i as usize }];
        map.insert(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    // Inline to out of line and back.
    let long = vec![7u8; 1000];
    assert_eq!(
        map.upsert(&key(0), &long).unwrap(),
        model.insert(key(0), long)
    );
    assert_eq!(
        map.upsert(&key(1), b"short").unwrap(),
        model.insert(key(1), b"short".to_vec())
    );
    // The same through `put`, which drops the old value unread: the record it leaves is
    // freed all the same (`agrees` counts the heap's blocks).
    let longer = vec![8u8; 900];
    assert!(!map.put(&key(2), &longer).unwrap());
    model.insert(key(2), longer);
    assert!(!map.put(&key(3), b"tiny").unwrap());
    model.insert(key(3), b"tiny".to_vec());
    assert!(!map.put(&key(3), &[9u8; 500]).unwrap());
    model.insert(key(3), vec![9u8; 500]);
    assert!(map.put(&key(1000), &[1u8; 400]).unwrap());
    model.insert(key(1000), vec![1u8; 400]);
    let long_key = vec![b'k'; 700];
    map.insert(&long_key, b"v").unwrap();
    model.insert(long_key.clone(), b"v".to_vec());
    agrees(&map, &model);
    for i in (0..40u64).step_by(3) {
        assert_eq!(map.remove(&key(i)).unwrap(), model.remove(&key(i)));
    }
    agrees(&map, &model);
    let map = reopen(map);
    agrees(&map, &model);
    assert_eq!(map.get(&long_key).unwrap(), Some(b"v".to_vec()));
}

#[test]
fn scans_honour_their_bounds_and_lend_pairs_to_a_callback_that_may_write() {
    let map = map(SMALL);
    let mut model = BTreeMap::new();
    for i in 0..100u64 {
        let k = format!("{:03}", i * 2).into_bytes();
        map.insert(&k, &i.to_le_bytes()).unwrap();
        model.insert(k, i.to_le_bytes().to_vec());
    }
    let bounds = |s: &'static str| s.as_bytes();
    let cases: Vec<KeyRange<'_>> = vec![
        (
            Bound::Included(bounds("010")),
            Bound::Excluded(bounds("050")),
        ),
        (
            Bound::Excluded(bounds("010")),
            Bound::Included(bounds("050")),
        ),
        (Bound::Included(bounds("011")), Bound::Unbounded),
        (Bound::Unbounded, Bound::Excluded(bounds("001"))),
        (Bound::Included(bounds("500")), Bound::Unbounded),
        (Bound::Included(bounds("")), Bound::Included(bounds("000"))),
    ];
    for (lo, hi) in cases {
        let want: Vec<_> = model
            .range::<[u8], _>((lo, hi))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(map.range_pairs(lo, hi).unwrap(), want, "{lo:?}..{hi:?}");
    }
    // A callback that stops, and one that writes the map as it goes.
    let mut seen = 0;
    let visited = map
        .scan(Bound::Unbounded, Bound::Unbounded, |_, _| {
            seen += 1;
            if seen == 7 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
    assert_eq!(visited, 7);
    let mut keys = Vec::new();
    map.scan(Bound::Unbounded, Bound::Unbounded, |k, _| {
        keys.push(k.to_vec());
        // Splits leaves ahead of the scan and removes behind it.
        let mut ahead = k.to_vec();
        ahead.push(b'x');
        map.insert(&ahead, b"new").unwrap();
        map.remove(k).unwrap();
        ControlFlow::Continue(())
    })
    .unwrap();
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "increasing, once each"
    );
    assert!(
        keys.len() >= 100,
        "every key there before the scan: {}",
        keys.len()
    );
    let report = map.verify();
    assert!(report.is_healthy(), "{report}");
}

#[test]
fn a_foreign_root_a_used_root_and_bad_shapes_are_refused() {
    let heap = heap();
    let root = heap.pool().root_offset();
    let foreign = crate::fastfair::FastFair::create(&heap, root, Default::default()).unwrap();
    drop(foreign);
    let e = LeafMap::open(&heap, root).err().expect("a FAST&FAIR root");
    assert!(
        matches!(
            e,
            RecordMapError::WrongKind {
                wanted: StructureKind::LeafMap,
                ..
            }
        ),
        "{e}"
    );
    let e = LeafMap::create(&heap, root, SMALL).err().expect("in use");
    assert!(matches!(e, RecordMapError::AlreadyExists { .. }), "{e}");
    for bad in [(320, 12), (128, 64), (4096, 8192)] {
        let config = LeafMapConfig {
            leaf_bytes: bad.0,
            slot_bytes: bad.1,
        };
        let e = LeafMap::create(&heap, root + 1024, config)
            .err()
            .expect("bad shape");
        assert!(matches!(e, RecordMapError::InvalidConfig { .. }), "{e}");
    }
    assert!(LeafMap::open(&heap, root + 8).is_err(), "misaligned");
    let e = LeafMap::open(&heap, heap.pool().size())
        .err()
        .expect("outside");
    assert!(matches!(e, RecordMapError::Heap(_)), "{e}");
}

#[test]
fn a_damaged_root_or_chain_is_refused_at_open() {
    let map = map(SMALL);
    for i in 0..30 {
        map.insert(&key(i), b"value").unwrap();
    }
    let (heap, root) = (map.heap().clone(), map.root());
    drop(map);
    let pool = heap.pool();
    // The root's checksum covers its shape.
    let shape = pool.load_u64(root + 32).unwrap();
    let _ = pool.store_u64(root + 32, 128).unwrap();
    let e = LeafMap::open(&heap, root).err().expect("a damaged root");
    assert!(matches!(e, RecordMapError::Corrupt { .. }), "{e}");
    let _ = pool.store_u64(root + 32, shape).unwrap();
    // The first leaf's next pointer into the middle of nowhere, then into a loop.
    let head = pool.load_u64(root + 16).unwrap();
    let next = pool.load_u64(head + 8).unwrap();
    for bad in [head + 64, head, 1 << 40] {
        let _ = pool.store_u64(head + 8, bad).unwrap();
        let e = LeafMap::open(&heap, root).err().expect("a damaged chain");
        assert!(matches!(e, RecordMapError::Corrupt { .. }), "{bad:#x}: {e}");
    }
    let _ = pool.store_u64(head + 8, next).unwrap();
    let map = LeafMap::open(&heap, root).unwrap();
    assert_eq!(map.len(), 30);
}

#[test]
fn a_damaged_slot_is_reported_by_reads_writes_scans_and_verify_never_served() {
    let map = map(SMALL);
    for i in 0..30 {
        map.insert(&key(i), b"value").unwrap();
    }
    let pool = map.heap().pool();
    let victim = key(5);
    // Find the victim's slot and flip a bit of its value.
    let locate = |k: &[u8]| {
        let index = map.read();
        let (_, leaf) = index.leaf_of(k).unwrap();
        let hash = index.keys.hash(k);
        let mut buf = super::leaf::SlotBuf::new();
        let slot = map.find(leaf, k, hash, &mut buf).unwrap().unwrap();
        (leaf.offset, slot)
    };
    let (leaf, slot) = locate(&victim);
    let flip = |at: u64| {
        let (word, shift) = (at & !7, (at & 7) * 8);
        let _ = pool.store_u64(word, pool.load_u64(word).unwrap() ^ (1 << shift));
    };
    // A key byte: the fingerprint matches, the key does not, the checksum tells damage.
    let key_byte = map.config.slot_at(leaf, slot) + 8 + 3;
    flip(key_byte);
    let e = map.get(&victim).unwrap_err();
    assert!(matches!(e, RecordMapError::CorruptRecord { .. }), "{e}");
    flip(key_byte);
    assert_eq!(map.get(&victim).unwrap(), Some(b"value".to_vec()));
    // A value byte.
    flip(map.config.slot_at(leaf, slot) + 8 + victim.len() as u64 + 2);
    let e = map.get(&victim).unwrap_err();
    assert!(matches!(e, RecordMapError::CorruptRecord { .. }), "{e}");
    let report = map.verify();
    assert!(
        report
            .findings
            .iter()
            .any(|f| matches!(f.problem, Problem::DamagedSlot { .. })),
        "{report}"
    );
    // Another key's value byte: an upsert, which returns the old value, refuses it; a put
    // writes over it (it never reads the old value), and the key serves again.
    let (other_leaf, other_slot) = locate(&key(20));
    flip(map.config.slot_at(other_leaf, other_slot) + 8 + 10 + 2);
    assert!(map.upsert(&key(20), b"fresh").is_err());
    assert!(!map.put(&key(20), b"fresh").unwrap());
    assert_eq!(map.get(&key(20)).unwrap(), Some(b"fresh".to_vec()));
    assert!(!map.put(&key(20), b"value").unwrap());
    // After a reopen, the slot is known damaged: reads of its leaf that miss, its writes and
    // scans through it say so; other leaves serve.
    let map = reopen(map);
    assert!(map.get(&victim).is_err());
    assert!(
        map.upsert(&victim, b"again").is_err(),
        "no write over damage"
    );
    assert!(map.insert(&victim, b"again").is_err());
    assert!(map.put(&victim, b"again").is_err(), "no put over damage");
    assert!(map.range_pairs(Bound::Unbounded, Bound::Unbounded).is_err());
    let healthy = (0..30).map(key).filter(|k| {
        let index = map.read();
        index.leaf_of(k).unwrap().1.offset != leaf
    });
    for k in healthy {
        assert_eq!(map.get(&k).unwrap(), Some(b"value".to_vec()));
    }
    assert!(!map.verify().is_healthy());
}

#[test]
fn readers_and_writers_share_the_map_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Map>();
    let map = Arc::new(map(SMALL));
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let map = &map;
            s.spawn(move || {
                for i in 0..300u64 {
                    let k = key(t * 1000 + i);
                    map.insert(&k, &i.to_le_bytes()).unwrap();
                    if i % 3 == 0 {
                        map.remove(&k).unwrap();
                    }
                }
            });
        }
        let map = &map;
        s.spawn(move || {
            for _ in 0..50 {
                let pairs = map.range_pairs(Bound::Unbounded, Bound::Unbounded).unwrap();
                assert!(pairs.windows(2).all(|w| w[0].0 < w[1].0));
            }
        });
    });
    assert_eq!(map.len(), 400);
    assert!(map.verify().is_healthy());
}

#[test]
fn the_default_shape_keeps_sixteen_byte_keys_and_hundred_byte_values_inline() {
    let map = map(LeafMapConfig::default());
    for i in 0..2000u64 {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
        map.insert(&k, &[i as u8; 100]).unwrap();
    }
    assert!(map.blocks().unwrap().len() == map.leaves(), "no record");
    let mut out = Vec::new();
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&7u64.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    assert!(map.get_into(&k, &mut out).unwrap());
    assert_eq!(out, vec![7u8; 100]);
    assert!(!map.get_into(&[1u8; 16], &mut out).unwrap());
    assert!(out.is_empty());
}

#[test]
fn verify_finds_a_hash_index_out_of_step_with_the_leaves() {
    let map = map(SMALL);
    for i in 0..40 {
        map.insert(&key(i), b"value").unwrap();
    }
    assert!(map.verify().is_healthy());
    let victim = key(7);
    let slot = {
        let index = map.read();
        let (_, leaf) = index.leaf_of(&victim).unwrap();
        let hash = index.keys.hash(&victim);
        let slot = map
            .find(leaf, &victim, hash, &mut super::leaf::SlotBuf::new())
            .unwrap()
            .unwrap();
        map.config.slot_at(leaf.offset, slot)
    };
    {
        let mut index = map.write();
        let hash = index.keys.hash(&victim);
        index.keys.remove(hash, slot);
    }
    // The key is still in its leaf, but the point read's index lost it: verify says so.
    assert_eq!(map.get(&victim).unwrap(), None);
    let report = map.verify();
    let disagreements = report
        .findings
        .iter()
        .filter(|f| matches!(f.problem, Problem::KeyIndexDisagrees { .. }))
        .count();
    assert_eq!(disagreements, 2, "its slot, and the count: {report}");
    // A reopen rebuilds the index from the leaves.
    let map = reopen(map);
    assert_eq!(map.get(&victim).unwrap(), Some(b"value".to_vec()));
    assert!(map.verify().is_healthy());
}

/// The first `max` pairs of `model` in `range`.
fn model_range(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    range: KeyRange<'_>,
    max: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .range::<[u8], _>(range)
        .take(max)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[test]
fn bounded_scans_and_resumed_batches_agree_with_the_model() {
    // Leaves of 4 and of 16 slots; keys sharing their first 16 bytes (the prefixes the
    // leaves keep), so the rank of a scan's start and the prefix cut at its end compare whole
    // keys where prefixes tie.
    let key = |i: u64| [b"shared-16-bytes:".as_slice(), &key(i)].concat();
    let medium = LeafMapConfig {
        leaf_bytes: 64 + 16 * 64,
        slot_bytes: 64,
    };
    for config in [SMALL, medium] {
        let map = map(config);
        let mut model = BTreeMap::new();
        let mut rng = pmem_ordering::sim::SplitMix64::new(31);
        for i in 0..3000u64 {
            let k = key(rng.below(1500));
            if rng.below(5) == 0 {
                assert_eq!(map.remove(&k).unwrap(), model.remove(&k));
            } else {
                let v = vec![(i % 251) as u8; rng.below(30) as usize];
                assert_eq!(map.upsert(&k, &v).unwrap(), model.insert(k.clone(), v));
            }
        }
        assert!(map.leaves() > 40, "{} leaves", map.leaves());
        let bounds: Vec<Vec<u8>> = (0..40)
            .map(|_| {
                let mut b = key(rng.below(1500));
                // A bound between keys, one equal to a key, one that only its prefix ties.
                match rng.below(3) {
                    0 => b.push(b'!'),
                    1 => {}
                    _ => b.truncate(16),
                }
                b
            })
            .collect();
        for (i, lo) in bounds.iter().enumerate() {
            let hi = &bounds[(i * 7 + 3) % bounds.len()];
            let ranges: [KeyRange<'_>; 4] = [
                (Bound::Included(lo), Bound::Unbounded),
                (Bound::Excluded(lo), Bound::Unbounded),
                (Bound::Included(lo), Bound::Excluded(hi)),
                (Bound::Excluded(lo), Bound::Included(hi)),
            ];
            for range in ranges {
                if let (
                    Bound::Included(a) | Bound::Excluded(a),
                    Bound::Included(b) | Bound::Excluded(b),
                ) = range
                {
                    if a > b {
                        continue;
                    }
                }
                for max in [1, 7, 100, 300, usize::MAX] {
                    let mut got = Vec::new();
                    let lent = map
                        .scan_at_most(range.0, range.1, max, |k, v| {
                            got.push((k.to_vec(), v.to_vec()));
                            ControlFlow::Continue(())
                        })
                        .unwrap();
                    let want = model_range(&model, range, max);
                    assert_eq!(got, want, "{range:?} at most {max}");
                    assert_eq!(lent, want.len() as u64);
                }
                // An open-ended scan stopped by its callback after `n` pairs: a first batch
                // as long as the last such scan lent (another `n`), then twice as many each
                // time, resumed where the last stopped.
                let n = 1 + rng.below(200) as usize;
                let mut got = Vec::new();
                map.scan(range.0, range.1, |k, v| {
                    got.push((k.to_vec(), v.to_vec()));
                    match got.len() < n {
                        true => ControlFlow::Continue(()),
                        false => ControlFlow::Break(()),
                    }
                })
                .unwrap();
                assert_eq!(got, model_range(&model, range, n), "{range:?}, {n} pairs");
            }
        }
        assert_eq!(
            map.scan_at_most(Bound::Unbounded, Bound::Unbounded, 0, |_, _| {
                ControlFlow::Continue(())
            })
            .unwrap(),
            0
        );
        agrees(&map, &model);
    }
}

#[test]
fn verify_finds_a_leaf_state_out_of_step_with_its_leaf() {
    let map = map(SMALL);
    for i in 0..40 {
        map.insert(&key(i), b"value").unwrap();
    }
    assert!(map.verify().is_healthy());
    let state_problems = |map: &Map| {
        let report = map.verify();
        report
            .findings
            .iter()
            .filter(|f| matches!(f.problem, Problem::LeafStateDisagrees { .. }))
            .count()
    };
    // A leaf's key order with two slots swapped: scans would lend its pairs out of order.
    {
        let mut index = map.write();
        let bound = index.from(&[]).nth(2).unwrap().0.clone();
        let leaf = index.get_mut(bound.as_slice()).unwrap();
        assert!(leaf.count >= 2);
        leaf.order.swap(0, 1);
    }
    assert_eq!(state_problems(&map), 1);
    // And a slot's key prefix changed: a scan's start would be placed wrong.
    {
        let mut index = map.write();
        let bound = index.from(&[]).nth(4).unwrap().0.clone();
        let leaf = index.get_mut(bound.as_slice()).unwrap();
        let slot = leaf.ordered()[0] as usize;
        leaf.prefixes[slot] ^= 1;
    }
    assert_eq!(state_problems(&map), 2);
    // A reopen rebuilds the leaves' states from the leaves.
    let map = reopen(map);
    assert!(map.verify().is_healthy());
    assert_eq!(all(&map).len(), 40);
}
