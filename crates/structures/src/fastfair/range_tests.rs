//! Unit tests of range scans: bulk reads cut around transient duplicates, and bulk and
//! single reads against a model, for the default and a larger node size.

use std::collections::BTreeMap;

use super::super::test_heap::heap;
use super::super::{FastFairConfig, ShiftPolicy};
use super::*;

/// A bulk read whose cut falls anywhere around a transient duplicate (an interrupted
/// shift's two equal neighbours) hands out the right copy, never the left one, and
/// resumes after it: the copy of a leaf stops one pair past the cut, which shows the
/// duplicate, and then the whole run is copied.
#[test]
fn a_bulk_read_cut_at_a_duplicate_keeps_its_right_copy() {
    use super::super::layout::{entry_offset, value_offset};

    // The left copy pairs key 20 with a stale value.
    let image = [(10, 10), (20, 1500), (20, 20), (30, 30), (40, 40)];
    let expected = [(10, 10), (20, 20), (30, 30), (40, 40)];
    for first_chunk in 0..=expected.len() {
        let heap = heap();
        let tree =
            FastFair::create(&heap, heap.pool().root_offset(), FastFairConfig::default()).unwrap();
        for k in [10, 20, 30, 40] {
            tree.insert(k, k).unwrap();
        }
        let leaf = tree.root_node().unwrap();
        let pool = heap.pool();
        for (slot, (k, v)) in image.into_iter().enumerate() {
            let _ = pool.persist(pool.store_u64(entry_offset(leaf, slot), k).unwrap());
            let _ = pool.persist(pool.store_u64(value_offset(leaf, slot), v).unwrap());
        }
        let mut range = tree.range(..);
        let mut got = Vec::new();
        assert_eq!(range.next_into(&mut got, first_chunk).unwrap(), first_chunk);
        assert_eq!(got, expected[..first_chunk], "cut after {first_chunk}");
        let rest = range.next_into(&mut got, 10).unwrap();
        assert_eq!(rest, expected.len() - first_chunk);
        assert_eq!(got, expected, "cut after {first_chunk}");
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A range read in bulk chunks of any size (0 standing for one `next`), which stop in
    /// the middle of leaves and resume there, returns exactly the model's pairs of the
    /// range, then nothing more: with small nodes, whose leaves `next` reads into the
    /// range's own chunk, and with large ones, whose leaves it hands out in pieces.
    #[test]
    fn bulk_and_single_reads_return_the_range(
        node_size in proptest::sample::select(vec![128u64, 1024]),
        keys in proptest::collection::vec(0u64..300, 0..150),
        start in 0u64..320,
        end in 0u64..320,
        chunks in proptest::collection::vec(0usize..40, 1..12),
    ) {
        let heap = heap();
        let config = FastFairConfig { node_size, policy: ShiftPolicy::Fast };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        let mut model = BTreeMap::new();
        for k in keys {
            tree.upsert(k, k * 3).unwrap();
            model.insert(k, k * 3);
        }
        let expected: Vec<(u64, u64)> =
            model.range(start..end.max(start)).map(|(&k, &v)| (k, v)).collect();
        let mut range = tree.range(start..end.max(start));
        let mut got = Vec::new();
        for &n in chunks.iter().cycle() {
            if n == 0 {
                match range.next() {
                    Some(pair) => got.push(pair.unwrap()),
                    None => break,
                }
            } else {
                let before = got.len();
                let added = range.next_into(&mut got, n).unwrap();
                proptest::prop_assert_eq!(got.len() - before, added);
                if added < n {
                    break;
                }
            }
        }
        proptest::prop_assert!(range.next().is_none());
        proptest::prop_assert_eq!(range.next_into(&mut got, 5).unwrap(), 0);
        proptest::prop_assert_eq!(got, expected);
    }

    /// Dropping left copies keeps, of each run of equal neighbouring keys after `start`,
    /// the rightmost pair, and leaves the pairs before `start` alone.
    #[test]
    fn keep_right_copies_keeps_the_rightmost_of_each_run(
        mut keys in proptest::collection::vec(0u64..12, 0..40),
        start in 0usize..5,
    ) {
        keys.sort_unstable();
        let pairs: Vec<(u64, u64)> =
            keys.iter().enumerate().map(|(i, &k)| (k, i as u64)).collect();
        let start = start.min(pairs.len());
        let mut expected = pairs[..start].to_vec();
        for (i, &pair) in pairs.iter().enumerate().skip(start) {
            if pairs.get(i + 1).is_none_or(|next| next.0 != pair.0) {
                expected.push(pair);
            }
        }
        let mut out = pairs.clone();
        keep_right_copies(&mut out, start);
        proptest::prop_assert_eq!(out, expected);
    }
}
