//! The Store's ordered map of words scanned in batches: ranges over many batches against a
//! std model, the reserved key last, scans interleaved on one thread (they share a spare
//! buffer), and a scan beside writers.

use std::collections::BTreeMap as Model;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};

use pmem_ordering::Granularity;
use pmem_structures::{BTreeMap, Store, StoreOptions};

const SIZE: u64 = 32 << 20;

fn store() -> Store {
    Store::anonymous(
        SIZE,
        &StoreOptions::new().granularity(Granularity::Emulated),
    )
    .unwrap()
}

fn scanned<R: RangeBounds<u64>>(tree: &BTreeMap, range: R) -> Vec<(u64, u64)> {
    tree.range(range).collect::<Result<_, _>>().unwrap()
}

fn modelled<R: RangeBounds<u64>>(model: &Model<u64, u64>, range: R) -> Vec<(u64, u64)> {
    model.range(range).map(|(&k, &v)| (k, v)).collect()
}

#[test]
fn ranges_over_many_batches_match_the_model_with_the_reserved_key_last() {
    let store = store();
    let tree = store.btree_map::<u64, u64>("t").unwrap();
    assert_eq!(tree.iter().count(), 0, "an empty map");
    assert!(tree.insert(u64::MAX, 1).unwrap());
    assert_eq!(
        scanned(&tree, ..),
        [(u64::MAX, 1)],
        "the reserved key alone"
    );
    let mut model = Model::from([(u64::MAX, 1)]);
    // Odd keys only, so bounds fall both on keys and between them.
    for k in (1..3_000u64).step_by(2).chain([u64::MAX - 1]) {
        assert!(tree.insert(k, !k).unwrap());
        model.insert(k, !k);
    }
    let ends = [
        0,
        1,
        2,
        15,
        16,
        17,
        100,
        101,
        999,
        2_999,
        3_000,
        u64::MAX - 1,
        u64::MAX,
    ];
    for &a in &ends {
        for &b in ends.iter().filter(|&&b| a <= b) {
            assert_eq!(scanned(&tree, a..b), modelled(&model, a..b), "{a}..{b}");
            assert_eq!(scanned(&tree, a..=b), modelled(&model, a..=b), "{a}..={b}");
            let excluded = (Bound::Excluded(a), Bound::Included(b));
            if a < b {
                assert_eq!(scanned(&tree, excluded), modelled(&model, excluded));
            }
        }
        assert_eq!(scanned(&tree, a..), modelled(&model, a..), "{a}..");
        assert_eq!(scanned(&tree, ..a), modelled(&model, ..a), "..{a}");
    }
    assert_eq!(scanned(&tree, ..), modelled(&model, ..));
    let past = (Bound::Included(101), Bound::Excluded(11));
    assert_eq!(tree.range(past).count(), 0, "a start past the end");
    // A scan dropped part way, and a peek, see the same pairs.
    let first: Vec<_> = tree.range(500..).take(70).map(Result::unwrap).collect();
    assert_eq!(first, modelled(&model, 500..)[..70]);
    let mut peeking = tree.range(2_990..).peekable();
    assert_eq!(peeking.peek().unwrap().as_ref().unwrap(), &(2_991, !2_991));
    assert_eq!(
        peeking.count(),
        7,
        "the 5 odd keys 2,991 to 2,999, u64::MAX - 1 and u64::MAX"
    );
}

#[test]
fn signed_and_narrow_keys_scan_in_their_order_across_batches() {
    let store = store();
    let signed = store.btree_map::<i64, i32>("s").unwrap();
    let narrow = store.btree_map::<u32, u8>("n").unwrap();
    for k in -400i64..400 {
        assert!(signed.insert(k, k as i32 * 3).unwrap());
        assert!(narrow.insert(k as u32, k as u8).unwrap());
    }
    let got: Vec<(i64, i32)> = signed.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(
        got,
        (-400..400).map(|k| (k, k as i32 * 3)).collect::<Vec<_>>()
    );
    let window: Vec<(i64, i32)> = signed
        .range(-100i64..=100)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        window,
        (-100..=100).map(|k| (k, k as i32 * 3)).collect::<Vec<_>>()
    );
    let mut expected: Vec<(u32, u8)> = (-400i64..400).map(|k| (k as u32, k as u8)).collect();
    expected.sort_unstable();
    let got: Vec<(u32, u8)> = narrow.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(got, expected);
}

#[test]
fn scans_interleaved_on_one_thread_each_see_their_own_pairs() {
    let store = store();
    let tree = store.btree_map::<u64, u64>("t").unwrap();
    let model: Model<u64, u64> = (0..1_000u64).map(|k| (k, k + 7)).collect();
    for (&k, &v) in &model {
        assert!(tree.insert(k, v).unwrap());
    }
    for round in 0..3 {
        let (mut low, mut high) = (tree.range(..500), tree.range(500..));
        let (mut got_low, mut got_high) = (Vec::new(), Vec::new());
        loop {
            let (a, b) = (low.next(), high.next());
            if a.is_none() && b.is_none() {
                break;
            }
            got_low.extend(a.map(Result::unwrap));
            got_high.extend(b.map(Result::unwrap));
        }
        assert_eq!(got_low, modelled(&model, ..500), "round {round}");
        assert_eq!(got_high, modelled(&model, 500..), "round {round}");
        // A scan after both dropped reuses a buffer: it sees only its own pairs.
        assert_eq!(scanned(&tree, 990..), modelled(&model, 990..));
    }
}

#[test]
fn a_scan_beside_writers_sees_each_lasting_key_once_in_order() {
    let store = store();
    let tree = store.btree_map::<u64, u64>("t").unwrap();
    // Even keys stay for the whole test; writers insert and remove the odd ones (splitting
    // and merging leaves under the scans).
    for k in (0..4_000u64).step_by(2) {
        assert!(tree.insert(k, k).unwrap());
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = tree.clone();
        let stop = &stop;
        s.spawn(move || {
            let mut round = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for k in (1..4_000u64).step_by(2) {
                    writer.insert(k, round).unwrap();
                }
                for k in (1..4_000u64).step_by(2) {
                    writer.remove(k).unwrap();
                }
                round += 1;
            }
        });
        for _ in 0..30 {
            let pairs: Vec<(u64, u64)> = tree.iter().collect::<Result<_, _>>().unwrap();
            assert!(
                pairs.windows(2).all(|w| w[0].0 < w[1].0),
                "keys in order, each once"
            );
            let lasting: Vec<u64> = pairs.iter().map(|p| p.0).filter(|k| k % 2 == 0).collect();
            assert_eq!(lasting, (0..4_000).step_by(2).collect::<Vec<_>>());
            assert!(pairs.iter().all(|&(k, v)| k % 2 == 1 || v == k));
        }
        stop.store(true, Ordering::Relaxed);
    });
}
