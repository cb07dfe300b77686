//! (tests) Scans that start through the hash index: at keys present, absent and removed,
//! included and excluded, after splits, unlinks and a reopen, against a `BTreeMap`.

use std::collections::BTreeMap;
use std::ops::{Bound, ControlFlow};

use pmem_ordering::{Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::{LeafMap, LeafMapConfig};

/// Pairs, owned.
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn key(i: u64) -> Vec<u8> {
    // Keys sharing their first 16 bytes in runs, so prefixes tie as well as differ.
    format!("k{:03}-{:014}", i % 7, i * 7919 % 100_003).into_bytes()
}

/// `n` pairs from `lower`, lent by the map's scan and taken from the model.
fn both(
    map: &LeafMap<pmem_ordering::Hardware>,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    lower: Bound<&[u8]>,
    n: usize,
) -> (Pairs, Pairs) {
    let want = model
        .range::<[u8], _>((lower, Bound::Unbounded))
        .take(n)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut got = Vec::new();
    map.scan_at_most(lower, Bound::Unbounded, n, |k, v| {
        got.push((k.to_vec(), v.to_vec()));
        ControlFlow::Continue(())
    })
    .unwrap();
    (got, want)
}

/// Every key present starts through the hash index, at the leaf and position the tree's
/// descent gives; absent and removed keys do not (the descent serves them); and scans from
/// each, included and excluded, lend the model's pairs, before and after a reopen.
#[test]
fn scans_starting_through_the_hash_index_agree_with_the_descent_and_the_model() {
    let pool = Pool::anonymous("leafmap-scan-hash", 16 << 20, &PoolOptions::new()).unwrap();
    let heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched).unwrap();
    let root = heap.pool().root_offset();
    // Leaves of 8 slots of 64 bytes: hundreds of splits; some leaves emptied and unlinked.
    let config = LeafMapConfig {
        leaf_bytes: 64 + 8 * 64,
        slot_bytes: 64,
    };
    let mut map = LeafMap::create(&heap, root, config).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000u64 {
        let v = i.to_le_bytes().repeat(1 + (i % 4) as usize);
        map.insert(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    let mut removed = Vec::new();
    for i in (0..3000u64).filter(|i| i % 5 == 0 || (1000..1400).contains(i)) {
        assert!(map.remove(&key(i)).unwrap().is_some());
        model.remove(&key(i));
        removed.push(key(i));
    }
    for round in 0..2 {
        assert!(map.verify().is_healthy(), "round {round}");
        let index = map.read();
        for (k, _) in model.iter().step_by(3) {
            for (lower, past) in [(Bound::Included(&k[..]), 0), (Bound::Excluded(&k[..]), 1)] {
                let (id, leaf, position) = map
                    .start_by_hash(&index, lower)
                    .unwrap_or_else(|| panic!("{k:?} present, found by hash"));
                let (want_id, want_leaf) = index.locate(k).unwrap();
                assert_eq!((id, leaf.offset), (want_id, want_leaf.offset), "{k:?}");
                assert_eq!(position, map.lower_position(leaf, lower).unwrap(), "{k:?}");
                assert!(position >= past);
            }
        }
        for k in removed
            .iter()
            .chain([&b"k000-"[..].to_vec(), &b"zzz".to_vec()])
        {
            assert!(
                map.start_by_hash(&index, Bound::Included(k)).is_none(),
                "{k:?}"
            );
        }
        drop(index);
        let starts = model
            .keys()
            .step_by(7)
            .cloned()
            .chain(removed.iter().step_by(3).cloned());
        for (j, k) in starts.enumerate() {
            let n = [1, 5, 37, 100, 300][j % 5];
            for lower in [Bound::Included(&k[..]), Bound::Excluded(&k[..])] {
                let (got, want) = both(&map, &model, lower, n);
                assert_eq!(got, want, "{n} pairs from {lower:?}");
            }
        }
        map = {
            let root = map.root();
            drop(map);
            LeafMap::open(&heap, root).unwrap()
        };
    }
}
