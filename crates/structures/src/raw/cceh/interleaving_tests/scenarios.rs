//! The interleavings checked: each scenario's writer script and lookup, explored over every
//! schedule up to its bound of hand-overs (the harness is in [`super`]).

use super::*;

#[test]
fn a_lookup_sees_an_insert_whole_or_not_at_all() {
    let key = 42;
    let explored = Scenario {
        buckets: 16,
        setup: vec![],
        script: vec![Op::Insert(key, 7)],
        key,
        max_hand_overs: usize::MAX,
        shared_word: None,
    }
    .explore();
    assert!(explored.schedules >= 4, "{explored:?}");
    assert_eq!(
        explored.results.keys().copied().collect::<Vec<_>>(),
        [None, Some(7)],
        "both before and after were seen: {explored:?}"
    );
}

#[test]
fn a_lookup_never_pairs_its_key_with_the_value_of_a_key_that_reused_its_slot() {
    // Two keys with the same home bucket: once the first is removed, the second takes its slot.
    let mut homes = keys_at_home(5, 1);
    let (key, other) = (homes.next().unwrap(), homes.next().unwrap());
    let explored = Scenario {
        buckets: 16,
        setup: vec![(key, 7)],
        script: vec![Op::Remove(key), Op::Insert(other, 9), Op::Insert(key, 8)],
        key,
        max_hand_overs: 3,
        shared_word: None,
    }
    .explore();
    assert!(explored.schedules >= 20, "{explored:?}");
    assert_eq!(
        explored.results.keys().copied().collect::<Vec<_>>(),
        [None, Some(7), Some(8)],
        "{explored:?}"
    );
}

#[test]
fn a_lookup_never_takes_the_entry_of_a_colliding_key_that_reused_its_slot() {
    // Hashed key words: keys 1 and 2 share one key word, so once 1 is removed, 2 takes its
    // slot, and the lookup of 1 may load 2's value under 1's (equal) key word.
    let explored = Scenario {
        buckets: 16,
        setup: vec![(1, 7)],
        script: vec![Op::Remove(1), Op::Insert(2, 9), Op::Insert(1, 8)],
        key: 1,
        max_hand_overs: 3,
        shared_word: keys_at_home(5, 1).next(),
    }
    .explore();
    assert!(explored.schedules >= 20, "{explored:?}");
    assert_eq!(
        explored.results.keys().copied().collect::<Vec<_>>(),
        [None, Some(7), Some(8)],
        "{explored:?}"
    );
}

#[test]
fn a_lookup_finds_a_key_that_a_displacement_moves_at_any_point() {
    // As in lookup.rs: the window of bucket 0 is full, and making room for one more home-0 key
    // moves the key under test (home 3) from bucket 3 to bucket 4.
    let mut zeros = keys_at_home(0, 1);
    let key = keys_at_home(3, 1).next().unwrap();
    let mut setup: Vec<(u64, u64)> = zeros.by_ref().take(12).map(|k| (k, 0)).collect();
    setup.push((key, 33));
    setup.extend(zeros.by_ref().take(3).map(|k| (k, 0)));
    let explored = Scenario {
        buckets: 16,
        setup,
        script: vec![Op::Insert(zeros.next().unwrap(), 99)],
        key,
        max_hand_overs: usize::MAX,
        shared_word: None,
    }
    .explore();
    assert!(explored.displacements >= 1, "{explored:?}");
    assert_eq!(explored.global_depth, 0, "nothing split: {explored:?}");
    assert!(explored.schedules >= 10, "{explored:?}");
    assert_eq!(
        explored.results.keys().copied().collect::<Vec<_>>(),
        [Some(33)],
        "{explored:?}"
    );
}

#[test]
fn a_lookup_survives_a_doubling_and_a_split_that_reuse_its_slot_at_any_point() {
    // One segment of four buckets holding the key under test (hash top bit 1) and keys with
    // top bit 0: the insert that finds it full doubles the directory, splits the segment (the
    // key moves to the new one) and takes the key's stale slot in the old one.
    let key = keys_with_top_bit(1, 1).next().unwrap();
    let fillers: Vec<u64> = keys_with_top_bit(0, 1_000).take(64).collect();
    let setup_fillers = fillers_before_the_split(key, &fillers);
    let mut setup = vec![(key, 77)];
    setup.extend(fillers[..setup_fillers].iter().map(|&k| (k, 1)));
    let explored = Scenario {
        buckets: 4,
        setup,
        script: vec![Op::Insert(fillers[setup_fillers], 2)],
        key,
        max_hand_overs: 3,
        shared_word: None,
    }
    .explore();
    assert_eq!(explored.global_depth, 1, "{explored:?}");
    assert!(explored.schedules >= 50, "{explored:?}");
    assert_eq!(
        explored.results.keys().copied().collect::<Vec<_>>(),
        [Some(77)],
        "{explored:?}"
    );
}

/// How many of `fillers` go into a four-bucket table holding `key` before the one whose insert
/// doubles the directory, splits, and reuses the slot `key` leaves behind.
fn fillers_before_the_split(key: u64, fillers: &[u64]) -> usize {
    let heap = heap();
    let config = CcehConfig {
        buckets_per_segment: 4,
    };
    let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
    table.insert(key, 77).unwrap();
    let place = table.locate(hash(key)).unwrap();
    let slot = table.find(&place, &key, hash(key)).unwrap().unwrap().0;
    for (i, &filler) in fillers.iter().enumerate() {
        table.insert(filler, 1).unwrap();
        if table.global_depth().unwrap() > 0 {
            assert_ne!(
                table.word(slot).unwrap(),
                key,
                "the splitting insert reuses the key's stale slot"
            );
            return i;
        }
    }
    panic!(
        "{} fillers never split a four-bucket segment",
        fillers.len()
    );
}

#[test]
fn a_lookup_survives_a_split_without_doubling_at_any_point() {
    let split = SplitWithoutDoubling::find();
    let explored = Scenario {
        buckets: 4,
        setup: split.setup.clone(),
        script: vec![Op::Insert(split.splitting_filler, 2)],
        key: split.key,
        max_hand_overs: 3,
        shared_word: None,
    }
    .explore();
    assert_eq!(
        explored.global_depth, split.global_depth,
        "no doubling: {explored:?}"
    );
    assert_eq!(
        explored.segments,
        split.segments + 1,
        "one split: {explored:?}"
    );
    assert!(explored.schedules >= 50, "{explored:?}");
    assert_eq!(
        explored.results.keys().copied().collect::<Vec<_>>(),
        [Some(split.value)],
        "{explored:?}"
    );
}

/// A four-bucket table whose next insert splits a segment spanning four directory entries
/// (so that every step of a split writes an entry) without doubling the directory, and a key
/// of that segment that moves to the new one.
struct SplitWithoutDoubling {
    setup: Vec<(u64, u64)>,
    key: u64,
    value: u64,
    splitting_filler: u64,
    global_depth: u64,
    segments: usize,
}

impl SplitWithoutDoubling {
    fn find() -> SplitWithoutDoubling {
        use crate::cceh::hashing::{moves_at_split, prefix};
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
        let mut setup = Vec::new();
        let mut next = 1..;
        // Grow the table until some segment spans four entries or more.
        let (local, pattern) = loop {
            let k = next.next().unwrap();
            assert!(table.insert(k, k + 100).unwrap());
            setup.push((k, k + 100));
            let depth = table.global_depth().unwrap();
            let wide = table
                .segments()
                .unwrap()
                .into_iter()
                .find(|&(_, _, local)| local + 2 <= depth);
            if let Some((start, _, local)) = wide {
                break (local, start >> (depth - local));
            }
        };
        let in_segment = |k: u64| prefix(hash(k), local) == pattern;
        let &(key, value) = setup
            .iter()
            .find(|&&(k, _)| in_segment(k) && moves_at_split(hash(k), local))
            .expect("a key of the wide segment that a split moves");
        let global_depth = table.global_depth().unwrap();
        let segments = table.segments().unwrap().len();
        // Fill the segment with keys that stay until the insert that splits it.
        for filler in next.filter(|&k| in_segment(k) && !moves_at_split(hash(k), local)) {
            table.insert(filler, 1).unwrap();
            if table.segments().unwrap().len() > segments {
                assert_eq!(table.global_depth().unwrap(), global_depth);
                return SplitWithoutDoubling {
                    setup,
                    key,
                    value,
                    splitting_filler: filler,
                    global_depth,
                    segments,
                };
            }
            setup.push((filler, 1));
        }
        unreachable!("the key range is endless")
    }
}
