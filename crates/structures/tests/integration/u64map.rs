//! The one contract of the two `u64` maps: the same calls give the same answers on CCEH and
//! FAST&FAIR, through the `U64Map` trait, and both refuse their reserved key the same way.

use std::collections::BTreeMap;

use pmem_ordering::Hardware;
use pmem_structures::raw::cceh::{Cceh, CcehConfig, CcehError};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, FastFairError};
use pmem_structures::raw::{ReservedKey, U64Map};
use pmem_test_kit::fixture::anonymous_heap;
use pmem_test_kit::SplitMix64;
use pmem_undo_log::Heap;

fn heap(layout: &str) -> Heap {
    anonymous_heap(layout, 16 << 20)
}

fn small_cceh(heap: &Heap) -> Cceh<Hardware> {
    let config = CcehConfig {
        buckets_per_segment: 4,
    };
    Cceh::create(heap, heap.pool().root_offset(), config).unwrap()
}

fn small_fastfair(heap: &Heap) -> FastFair<Hardware> {
    let config = FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    };
    FastFair::create(heap, heap.pool().root_offset(), config).unwrap()
}

/// Every pair `map.iter()` yields, sorted by key (CCEH's come in no order).
fn pairs<M: U64Map>(map: &M) -> Vec<(u64, u64)> {
    let mut all: Vec<(u64, u64)> = map.iter().map(|item| item.unwrap()).collect();
    all.sort_unstable();
    all
}

/// Runs the contract on `map`, an empty map: each call's answer and the map's contents are
/// checked against a `BTreeMap`, step by step and at the end.
fn follows_the_contract<M: U64Map>(map: &M) {
    assert!(map.is_empty());
    assert_eq!(map.len(), 0);
    assert_eq!(map.check().unwrap(), 0);
    assert_eq!(map.get(5).unwrap(), None);

    assert!(map.insert(5, 50).unwrap(), "a new key is inserted");
    assert!(!map.insert(5, 51).unwrap(), "a present key is not");
    assert_eq!(map.get(5).unwrap(), Some(50), "and keeps its value");
    assert_eq!(
        map.upsert(5, 52).unwrap(),
        Some(50),
        "upsert returns the old value"
    );
    assert_eq!(map.upsert(6, 60).unwrap(), None, "or None for a new key");
    assert_eq!(
        map.remove(5).unwrap(),
        Some(52),
        "remove returns the old value"
    );
    assert_eq!(map.remove(5).unwrap(), None, "or None for an absent key");
    assert_eq!(map.get(5).unwrap(), None);
    assert_eq!(map.len(), 1);
    assert!(!map.is_empty());

    let mut model = BTreeMap::from([(6, 60)]);
    let mut rng = SplitMix64::new(13);
    for i in 0..5_000u64 {
        let key = rng.below(3_000) + 1;
        match i % 4 {
            0 | 1 => {
                let new = !model.contains_key(&key);
                assert_eq!(map.insert(key, i).unwrap(), new, "insert({key})");
                model.entry(key).or_insert(i);
            }
            2 => assert_eq!(
                map.upsert(key, i).unwrap(),
                model.insert(key, i),
                "upsert({key})"
            ),
            _ => assert_eq!(
                map.remove(key).unwrap(),
                model.remove(&key),
                "remove({key})"
            ),
        }
    }
    assert_eq!(map.len(), model.len() as u64);
    assert_eq!(map.check().unwrap(), model.len() as u64);
    let expected: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
    assert_eq!(pairs(map), expected);
    for (&k, &v) in &model {
        assert_eq!(map.get(k).unwrap(), Some(v), "get({k})");
    }
}

/// Every operation given `M::RESERVED_KEY` fails with `reserved(error)` holding that key, and
/// nothing changes.
fn refuses_its_reserved_key<M: U64Map>(map: &M, reserved: fn(&M::Error) -> Option<ReservedKey>) {
    let key = M::RESERVED_KEY;
    assert!(map.insert(1, 10).unwrap());
    let refusals = [
        map.get(key).map(|_| ()),
        map.insert(key, 1).map(|_| ()),
        map.upsert(key, 1).map(|_| ()),
        map.remove(key).map(|_| ()),
    ];
    for refusal in refusals {
        let error = refusal.expect_err("the reserved key was accepted");
        let refused = reserved(&error).expect("not a ReservedKey error");
        assert_eq!(refused.key, key);
        assert!(error
            .to_string()
            .contains(&format!("key {key:#x} is reserved: ")));
        assert!(error.to_string().contains(refused.reason));
    }
    assert_eq!(pairs(map), vec![(1, 10)]);
}

#[test]
fn cceh_follows_the_u64_map_contract() {
    let heap = heap("u64map-cceh");
    follows_the_contract(&small_cceh(&heap));
}

#[test]
fn fastfair_follows_the_u64_map_contract() {
    let heap = heap("u64map-fastfair");
    follows_the_contract(&small_fastfair(&heap));
}

#[test]
fn fastfair_iterates_in_key_order() {
    let heap = heap("u64map-fastfair-order");
    let tree = small_fastfair(&heap);
    for k in (1..=500u64).rev() {
        assert!(tree.insert(k * 7 % 1009, k).unwrap());
    }
    let keys: Vec<u64> = U64Map::iter(&tree).map(|item| item.unwrap().0).collect();
    assert_eq!(keys.len(), 500);
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "in key order");
}

#[test]
fn cceh_refuses_key_zero_and_says_why() {
    let heap = heap("u64map-cceh-reserved");
    let table = small_cceh(&heap);
    assert_eq!(<Cceh<Hardware> as U64Map>::RESERVED_KEY, 0);
    refuses_its_reserved_key(&table, |e| match e {
        CcehError::ReservedKey(r) => Some(*r),
        _ => None,
    });
    let error = table.insert(0, 1).unwrap_err();
    assert_eq!(
        error.to_string(),
        "key 0x0 is reserved: a CCEH hash table marks its empty slots with key 0; it cannot \
         be stored, looked up or removed"
    );
}

#[test]
fn fastfair_refuses_key_u64_max_and_says_why() {
    let heap = heap("u64map-fastfair-reserved");
    let tree = small_fastfair(&heap);
    assert_eq!(<FastFair<Hardware> as U64Map>::RESERVED_KEY, u64::MAX);
    refuses_its_reserved_key(&tree, |e| match e {
        FastFairError::ReservedKey(r) => Some(*r),
        _ => None,
    });
    let error = tree.insert(u64::MAX, 1).unwrap_err();
    assert_eq!(
        error.to_string(),
        "key 0xffffffffffffffff is reserved: a FAST&FAIR B+-tree marks its free slots with key \
         u64::MAX; it cannot be stored, looked up or removed"
    );
}
