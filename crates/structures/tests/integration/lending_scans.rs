//! The ordered map's borrowed scans (`range_with`, `iter_with`, and the `range_encoded`
//! cursor): the same pairs, as their encodings, as the owned `range` and a std `BTreeMap`
//! model, on maps of records (layered keys, values past a refill's bytes) and of words (the
//! reserved key included), over random inserts, removes and ranges of every bound kind, empty
//! and inverted ones included; a visit that breaks, cursors interleaved on one thread, and a
//! borrowed scan beside writers.

use std::collections::BTreeMap as Model;
use std::ops::{Bound, ControlFlow, RangeBounds};
use std::sync::atomic::{AtomicBool, Ordering};

use pmem_structures::types::{Encode, Key, Value};
use pmem_structures::{BTreeMap, FastFairConfig, Store, StoreOptions};
use proptest::prelude::*;

type Bytes = Vec<u8>;
type Pairs = Vec<(Bytes, Bytes)>;

fn store() -> Store {
    Store::anonymous(64 << 20, &StoreOptions::new()).expect("an anonymous store")
}

/// Small nodes, so a few keys split them and a scan crosses many leaves.
fn small_nodes() -> FastFairConfig {
    FastFairConfig {
        node_size: 128,
        ..FastFairConfig::default()
    }
}

/// The encodings of the pairs of `map` in `range`, read three ways (the owned scan encoded
/// again, `range_with`, the cursor), which must agree.
fn three_ways<K, V, A, R>(map: &BTreeMap<K, V>, range: R) -> Pairs
where
    K: Key + Encode<K>,
    V: Value + Encode<V>,
    A: Encode<K>,
    R: RangeBounds<A> + Clone,
{
    let owned: Pairs = map
        .range(range.clone())
        .map(|pair| {
            let (k, v) = pair.unwrap();
            (k.encode().bytes().to_vec(), v.encode().bytes().to_vec())
        })
        .collect();
    let mut visited = Vec::new();
    let broke = map
        .range_with(range.clone(), |k, v| {
            visited.push((k.to_vec(), v.to_vec()));
            ControlFlow::<()>::Continue(())
        })
        .unwrap();
    assert_eq!(broke, None, "a visit that never breaks sees every pair");
    let mut cursor = map.range_encoded(range);
    let mut stepped = Vec::new();
    while let Some(pair) = cursor.next_pair() {
        let (k, v) = pair.unwrap();
        stepped.push((k.to_vec(), v.to_vec()));
    }
    assert!(cursor.next_pair().is_none(), "an ended cursor stays ended");
    assert_eq!(visited, owned, "range_with against the owned range");
    assert_eq!(stepped, owned, "the cursor against the owned range");
    owned
}

/// The model's pairs in `bounds` (any bounds: `Model::range` refuses inverted ones).
fn modelled(model: &Model<Bytes, Bytes>, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> Pairs {
    model
        .iter()
        .filter(|(k, _)| bounds.contains(k.as_slice()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[derive(Clone, Debug)]
enum Op {
    Upsert(Bytes, Bytes),
    Remove(Bytes),
    /// A scan from the first key to the second, each bound of kind 0 (included), 1
    /// (excluded) or 2 (unbounded); in either order, so some ranges are inverted.
    Range(Bytes, u8, Bytes, u8),
}

fn key() -> impl Strategy<Value = Bytes> {
    // Shared prefixes of 0, 7 and 14 bytes (layers), then a short tail.
    (
        prop_oneof![Just(""), Just("tenant1"), Just("tenant1:user:00")],
        proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0u8)], 0..4),
    )
        .prop_map(|(prefix, tail)| [prefix.as_bytes(), &tail].concat())
}

fn value() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..120),
        1 => (1usize..60_000).prop_map(|n| vec![3u8; n]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key(), value()).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => key().prop_map(Op::Remove),
        2 => (key(), 0u8..3, key(), 0u8..3).prop_map(|(a, i, b, j)| Op::Range(a, i, b, j)),
    ]
}

fn bound(key: &[u8], kind: u8) -> Bound<&[u8]> {
    match kind {
        0 => Bound::Included(key),
        1 => Bound::Excluded(key),
        _ => Bound::Unbounded,
    }
}

/// The words of a word map's scan, from their encodings.
fn words(pairs: &Pairs) -> Vec<(u64, u64)> {
    pairs
        .iter()
        .map(|(k, v)| (u64::decode(k).unwrap(), u64::decode(v).unwrap()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn borrowed_scans_of_records_agree_with_the_owned_scan_and_the_model(
        ops in proptest::collection::vec(op(), 1..100),
    ) {
        let store = store();
        let tree = store.btree_map_with::<Bytes, Bytes>("tree", small_nodes()).unwrap();
        let mut model = Model::new();
        for op in &ops {
            match op {
                Op::Upsert(k, v) => {
                    prop_assert_eq!(tree.upsert(k, v).unwrap(), model.insert(k.clone(), v.clone()));
                }
                Op::Remove(k) => prop_assert_eq!(tree.remove(k).unwrap(), model.remove(k)),
                Op::Range(a, i, b, j) => {
                    let bounds = (bound(a, *i), bound(b, *j));
                    let got = three_ways::<_, _, &[u8], _>(&tree, bounds);
                    prop_assert_eq!(got, modelled(&model, bounds));
                }
            }
        }
        let all = three_ways::<_, _, &[u8], _>(&tree, ..);
        prop_assert_eq!(&all, &modelled(&model, (Bound::Unbounded, Bound::Unbounded)));
        let mut walked = Vec::new();
        tree.iter_with(|k, v| {
            walked.push((k.to_vec(), v.to_vec()));
            ControlFlow::<()>::Continue(())
        })
        .unwrap();
        prop_assert_eq!(walked, all);
    }

    #[test]
    fn borrowed_scans_of_words_agree_with_the_owned_scan_and_the_model(
        keys in proptest::collection::vec(word(), 0..400),
        ranges in proptest::collection::vec((word(), 0u8..3, word(), 0u8..3), 1..20),
    ) {
        let store = store();
        let tree = store.btree_map_with::<u64, u64>("words", small_nodes()).unwrap();
        let mut model = Model::new();
        for (i, &k) in keys.iter().enumerate() {
            if i % 5 == 4 {
                prop_assert_eq!(tree.remove(k).unwrap(), model.remove(&k));
            } else {
                prop_assert_eq!(tree.upsert(k, !k).unwrap(), model.insert(k, !k));
            }
        }
        for &(a, i, b, j) in &ranges {
            let bounds = (bound_word(a, i), bound_word(b, j));
            let want: Vec<(u64, u64)> =
                model.iter().filter(|(k, _)| bounds.contains(k)).map(|(&k, &v)| (k, v)).collect();
            prop_assert_eq!(words(&three_ways(&tree, bounds)), want);
        }
        let all: Vec<(u64, u64)> = model.iter().map(|(&k, &v)| (k, v)).collect();
        prop_assert_eq!(words(&three_ways::<_, _, u64, _>(&tree, ..)), all);
    }
}

/// A key or bound of a map of words: small ones, and the largest two (the tree's reserved
/// key, whose value the store keeps aside, and the one below it).
fn word() -> impl Strategy<Value = u64> {
    prop_oneof![8 => 0u64..640, 1 => Just(u64::MAX), 1 => Just(u64::MAX - 1)]
}

fn bound_word(word: u64, kind: u8) -> Bound<u64> {
    match kind {
        0 => Bound::Included(word),
        1 => Bound::Excluded(word),
        _ => Bound::Unbounded,
    }
}

#[test]
fn narrow_and_signed_words_are_lent_as_their_encodings() {
    let store = store();
    let tree = store.btree_map::<i32, u16>("narrow").unwrap();
    for k in -300i32..300 {
        assert!(tree.insert(k, (k * 7) as u16).unwrap());
    }
    let mut lent = Vec::new();
    tree.range_with(-150i32..=150, |k, v| {
        assert_eq!((k.len(), v.len()), (4, 2), "the types' widths");
        lent.push((i32::decode(k).unwrap(), u16::decode(v).unwrap()));
        ControlFlow::<()>::Continue(())
    })
    .unwrap();
    let want: Vec<(i32, u16)> = (-150..=150).map(|k| (k, (k * 7) as u16)).collect();
    assert_eq!(lent, want);
}

#[test]
fn values_past_a_refills_bytes_are_lent_whole_across_refills() {
    // 40 KiB values: a refill stops past 1 MiB, inside a batch, and the next goes on there.
    let store = store();
    let tree = store.btree_map::<Bytes, Bytes>("large").unwrap();
    let mut model = Model::new();
    for i in 0..300u32 {
        let key = format!("key:{i:05}").into_bytes();
        let value = vec![(i % 251) as u8; 40 << 10];
        tree.insert(&key, &value).unwrap();
        model.insert(key, value);
    }
    let all = three_ways::<_, _, &[u8], _>(&tree, ..);
    assert_eq!(all, modelled(&model, (Bound::Unbounded, Bound::Unbounded)));
    let from: &[u8] = b"key:00100";
    let to: &[u8] = b"key:00250";
    assert_eq!(
        three_ways(&tree, from..to),
        modelled(&model, (Bound::Included(from), Bound::Excluded(to)))
    );
}

#[test]
fn a_visit_that_breaks_returns_what_it_broke_with_and_reads_no_further() {
    let store = store();
    let tree = store.btree_map::<String, String>("users").unwrap();
    for i in 0..500 {
        tree.insert(format!("user:{i:04}"), format!("name {i}"))
            .unwrap();
    }
    let mut seen = 0;
    let found = tree
        .range_with("user:0100".., |k, v| {
            seen += 1;
            match v.ends_with(b" 142") {
                true => ControlFlow::Break(String::from_utf8(k.to_vec()).unwrap()),
                false => ControlFlow::Continue(()),
            }
        })
        .unwrap();
    assert_eq!(found.as_deref(), Some("user:0142"));
    assert_eq!(seen, 43, "user:0100 to user:0142, then no more");
    let absent = tree
        .range_with("user:0490".., |_, v| match v.ends_with(b" 7") {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        })
        .unwrap();
    assert_eq!(absent, None);
    // An empty range lends nothing.
    let empty = tree
        .range_with("user:0300".."user:0300", |_, _| ControlFlow::Break(()))
        .unwrap();
    assert_eq!(empty, None);
}

#[test]
fn cursors_interleaved_on_one_thread_each_lend_their_own_pairs() {
    let store = store();
    let tree = store.btree_map::<Bytes, Bytes>("t").unwrap();
    let mut model = Model::new();
    for i in 0..2_000u32 {
        let (key, value) = (i.to_be_bytes().to_vec(), vec![i as u8; 1 + i as usize % 90]);
        tree.insert(&key, &value).unwrap();
        model.insert(key, value);
    }
    let middle = 1_000u32.to_be_bytes();
    for round in 0..3 {
        // Two cursors live at once (the second cannot take the thread's spare arena), stepped
        // in turn; then one dropped part way.
        let (mut low, mut high) = (
            tree.range_encoded(..&middle[..]),
            tree.range_encoded(&middle[..]..),
        );
        let (mut got_low, mut got_high) = (Vec::new(), Vec::new());
        loop {
            let a = low
                .next_pair()
                .map(|p| p.map(|(k, v)| (k.to_vec(), v.to_vec())));
            let b = high
                .next_pair()
                .map(|p| p.map(|(k, v)| (k.to_vec(), v.to_vec())));
            if a.is_none() && b.is_none() {
                break;
            }
            got_low.extend(a.map(Result::unwrap));
            got_high.extend(b.map(Result::unwrap));
        }
        let unbounded = Bound::Unbounded;
        assert_eq!(
            got_low,
            modelled(&model, (unbounded, Bound::Excluded(&middle[..]))),
            "round {round}"
        );
        assert_eq!(
            got_high,
            modelled(&model, (Bound::Included(&middle[..]), unbounded)),
            "round {round}"
        );
        let mut part = tree.iter_encoded();
        for _ in 0..77 {
            part.next_pair().unwrap().unwrap();
        }
        drop(part);
        let tail = 1_990u32.to_be_bytes();
        assert_eq!(
            three_ways::<_, _, &[u8], _>(&tree, &tail[..]..),
            modelled(&model, (Bound::Included(&tail[..]), unbounded))
        );
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "pins a crossbeam epoch, which Miri's stacked borrows refuses"
)]
fn a_borrowed_scan_beside_writers_lends_each_lasting_key_once_in_order() {
    let store = store();
    let tree = store.btree_map::<Bytes, Bytes>("t").unwrap();
    let key = |k: u32| format!("k{k:06}").into_bytes();
    // Even keys stay for the whole test; a writer upserts and removes the odd ones (new
    // records, retired ones, leaves split and merged under the scans).
    for k in (0..3_000u32).step_by(2) {
        assert!(tree.insert(key(k), key(k)).unwrap());
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = tree.clone();
        let stop = &stop;
        s.spawn(move || {
            let mut round = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for k in (1..3_000u32).step_by(2) {
                    writer.upsert(key(k), round.to_be_bytes()).unwrap();
                }
                for k in (1..3_000u32).step_by(2) {
                    writer.remove(key(k)).unwrap();
                }
                round += 1;
            }
        });
        for _ in 0..30 {
            let mut last: Option<Bytes> = None;
            let mut lasting = Vec::new();
            tree.iter_with(|k, v| {
                assert!(
                    last.as_deref().is_none_or(|l| l < k),
                    "keys in order, each once"
                );
                last = Some(k.to_vec());
                let n: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
                if n.is_multiple_of(2) {
                    assert_eq!(k, v, "a lasting key's value");
                    lasting.push(n);
                }
                ControlFlow::<()>::Continue(())
            })
            .unwrap();
            assert_eq!(lasting, (0..3_000).step_by(2).collect::<Vec<_>>());
        }
        stop.store(true, Ordering::Relaxed);
    });
}
