//! Random sequences of writes to the byte-key maps against `std` models: the hash map against
//! `HashMap<Vec<u8>, Vec<u8>>`, the ordered map against `BTreeMap<Vec<u8>, Vec<u8>>` (whose
//! order its walks and ranges must keep). Keys come from a small alphabet with long shared
//! prefixes, so the ordered map grows layers; values are empty to tens of KiB. Every result
//! is predicted; at the end the maps check, the heap holds exactly their blocks, and a file
//! store reopened holds the same contents.

use std::collections::{BTreeMap as Ordered, HashMap as Unordered};
use std::ops::Bound;

use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::fastfair::FastFairConfig;
use pmem_structures::{Store, StoreOptions};
use proptest::prelude::*;

type Bytes = Vec<u8>;

#[derive(Clone, Debug)]
enum Op {
    Insert(Bytes, Bytes),
    Upsert(Bytes, Bytes),
    Remove(Bytes),
    Get(Bytes),
    /// A range scan from the first key to the second (sorted), bounds included or not.
    Range(Bytes, Bytes, bool, bool),
}

fn key() -> impl Strategy<Value = Bytes> {
    // Prefixes of 0, 7 and 14 shared bytes, then a short tail: layers in the ordered map.
    (
        prop_oneof![Just(""), Just("tenant1"), Just("tenant1:user:00")],
        proptest::collection::vec(
            prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(0xff)],
            0..4,
        ),
    )
        .prop_map(|(prefix, tail)| [prefix.as_bytes(), &tail].concat())
}

fn value() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..200),
        1 => (1usize..40_000).prop_map(|n| vec![7u8; n]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (key(), value()).prop_map(|(k, v)| Op::Insert(k, v)),
        3 => (key(), value()).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => key().prop_map(Op::Remove),
        1 => key().prop_map(Op::Get),
        1 => (key(), key(), any::<bool>(), any::<bool>()).prop_map(|(a, b, i, j)| Op::Range(a, b, i, j)),
    ]
}

fn options() -> StoreOptions {
    StoreOptions::new().max_structures(4)
}

const TABLE: CcehConfig = CcehConfig {
    buckets_per_segment: 4,
};

fn tree_config() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

fn bound(b: &[u8], included: bool) -> Bound<&[u8]> {
    if included {
        Bound::Included(b)
    } else {
        Bound::Excluded(b)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn both_maps_agree_with_std_maps(ops in proptest::collection::vec(op(), 1..120)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("records.pool");
        let store = Store::create(&path, 16 << 20, &options()).unwrap();
        let hash = store.hash_map_with::<Bytes, Bytes>("hash", TABLE).unwrap();
        let tree = store.btree_map_with::<Bytes, Bytes>("tree", tree_config()).unwrap();
        let mut unordered: Unordered<Bytes, Bytes> = Unordered::new();
        let mut ordered: Ordered<Bytes, Bytes> = Ordered::new();
        for op in &ops {
            match op {
                Op::Insert(k, v) => {
                    let fresh = !ordered.contains_key(k);
                    prop_assert_eq!(hash.insert(k, v).unwrap(), fresh);
                    prop_assert_eq!(tree.insert(k, v).unwrap(), fresh);
                    unordered.entry(k.clone()).or_insert_with(|| v.clone());
                    ordered.entry(k.clone()).or_insert_with(|| v.clone());
                }
                Op::Upsert(k, v) => {
                    prop_assert_eq!(hash.upsert(k, v).unwrap(), unordered.insert(k.clone(), v.clone()));
                    prop_assert_eq!(tree.upsert(k, v).unwrap(), ordered.insert(k.clone(), v.clone()));
                }
                Op::Remove(k) => {
                    prop_assert_eq!(hash.remove(k).unwrap(), unordered.remove(k));
                    prop_assert_eq!(tree.remove(k).unwrap(), ordered.remove(k));
                }
                Op::Get(k) => {
                    prop_assert_eq!(hash.get(k).unwrap(), unordered.get(k).cloned());
                    prop_assert_eq!(tree.get(k).unwrap(), ordered.get(k).cloned());
                }
                Op::Range(a, b, ia, ib) => {
                    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                    let (lo_b, hi_b) = (bound(lo, *ia), bound(hi, *ib));
                    if lo == hi && !(*ia && *ib) {
                        continue; // an empty or inverted std range panics
                    }
                    let want: Vec<(Bytes, Bytes)> = ordered
                        .range::<[u8], _>((lo_b, hi_b))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    let got: Vec<(Bytes, Bytes)> = tree
                        .range::<&[u8], _>((lo_b, hi_b))
                        .collect::<Result<_, _>>()
                        .unwrap();
                    prop_assert_eq!(got, want);
                }
            }
            prop_assert_eq!(hash.len(), unordered.len() as u64);
            prop_assert_eq!(tree.len(), ordered.len() as u64);
        }
        prop_assert_eq!(hash.check().unwrap(), unordered.len() as u64);
        prop_assert_eq!(tree.check().unwrap(), ordered.len() as u64);
        let walked: Vec<(Bytes, Bytes)> = tree.iter().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&walked, &ordered.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>());
        let hashed: Unordered<Bytes, Bytes> = hash.iter().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&hashed, &unordered);
        store.check_blocks().unwrap();

        drop((hash, tree, store));
        let store = Store::open(&path).unwrap();
        store.check_blocks().unwrap();
        let hash = store.hash_map::<Bytes, Bytes>("hash").unwrap();
        let tree = store.btree_map_with::<Bytes, Bytes>("tree", tree_config()).unwrap();
        let hashed: Unordered<Bytes, Bytes> = hash.iter().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&hashed, &unordered);
        let walked: Ordered<Bytes, Bytes> = tree.iter().collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(&walked, &ordered);
    }
}
