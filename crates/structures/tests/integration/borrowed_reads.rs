//! Reads into a caller's buffer (`get_into`) and lent from the thread's buffer (`get_with`):
//! the same bytes as the value's encoding that `get` decodes, for every kind of map, and no
//! allocation per call on maps of records once the buffer has grown; and the ordered map's
//! borrowed scans (`range_with`, `iter_with`, `range_encoded`), which allocate nothing per pair
//! once warm (their agreement with the owned scans is `lending_scans.rs`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ops::ControlFlow;

use pmem_structures::types::{Encode, Value};
use pmem_structures::{Store, StoreOptions};
use pmem_test_kit::SplitMix64;

/// Counts this thread's allocations, so a test can tell that a call made none.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the count is a thread-local
// cell, which allocates nothing itself (a const-initialised `Cell`).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: as `GlobalAlloc::realloc` requires of its caller.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Allocations this thread made while running `f`.
fn allocations_of<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let result = f();
    (result, ALLOCATIONS.with(Cell::get) - before)
}

fn store() -> Store {
    Store::anonymous(64 << 20, &StoreOptions::new()).expect("an anonymous store")
}

/// A key or value of `len` random bytes.
fn bytes(rng: &mut SplitMix64, len: usize) -> Vec<u8> {
    (0..len).map(|_| rng.next_u64() as u8).collect()
}

/// `get_into` and `get_with` agree with `get` (as its encoding) on present and absent keys.
fn agree<K, V>(
    get: impl Fn(&K) -> Option<V>,
    get_into: impl Fn(&K, &mut Vec<u8>) -> bool,
    get_with: impl Fn(&K) -> Option<Vec<u8>>,
    keys: &[K],
) where
    V: Value + Encode<V> + std::fmt::Debug + PartialEq,
{
    let mut out = vec![0xEE; 7];
    for key in keys {
        let owned = get(key);
        let present = get_into(key, &mut out);
        let lent = get_with(key);
        match owned {
            Some(value) => {
                assert!(present);
                assert_eq!(out, value.encode().bytes());
                assert_eq!(V::decode(&out).as_ref(), Some(&value));
                assert_eq!(lent.as_deref(), Some(value.encode().bytes()));
            }
            None => {
                assert!(!present);
                assert!(out.is_empty(), "an absent key leaves the buffer empty");
                assert_eq!(lent, None);
            }
        }
    }
}

macro_rules! maps_of {
    ($store:expr, $k:ty, $v:ty, $name:literal) => {
        (
            $store.hash_map::<$k, $v>(concat!($name, "-hash")).unwrap(),
            $store.btree_map::<$k, $v>(concat!($name, "-tree")).unwrap(),
        )
    };
}

#[test]
fn borrowed_reads_give_the_encoding_get_decodes_on_every_kind_of_map() {
    let store = store();
    let mut rng = SplitMix64::new(31);

    let (hash, tree) = maps_of!(store, Vec<u8>, Vec<u8>, "bytes");
    let keys: Vec<Vec<u8>> = (0..200).map(|i| bytes(&mut rng, 1 + i % 40)).collect();
    for (i, key) in keys.iter().enumerate().step_by(2) {
        let value = bytes(&mut rng, i * 7 % 300);
        hash.upsert(key, &value).unwrap();
        tree.upsert(key, &value).unwrap();
    }
    agree(
        |k| hash.get(k).unwrap(),
        |k, out| hash.get_into(k, out).unwrap(),
        |k| hash.get_with(k, <[u8]>::to_vec).unwrap(),
        &keys,
    );
    agree(
        |k| tree.get(k).unwrap(),
        |k, out| tree.get_into(k, out).unwrap(),
        |k| tree.get_with(k, <[u8]>::to_vec).unwrap(),
        &keys,
    );

    let (hash, tree) = maps_of!(store, String, String, "text");
    let keys: Vec<String> = (0..100).map(|i| format!("user:{i:05}")).collect();
    for key in keys.iter().step_by(3) {
        hash.upsert(key, format!("{key} ✓")).unwrap();
        tree.upsert(key, format!("{key} ✓")).unwrap();
    }
    agree(
        |k| hash.get(k).unwrap(),
        |k, out| hash.get_into(k, out).unwrap(),
        |k| hash.get_with(k, <[u8]>::to_vec).unwrap(),
        &keys,
    );
    agree(
        |k| tree.get(k).unwrap(),
        |k, out| tree.get_into(k, out).unwrap(),
        |k| tree.get_with(k, <[u8]>::to_vec).unwrap(),
        &keys,
    );

    // Maps of words: integers, signed ones encoded with the sign bit flipped.
    let (hash, tree) = maps_of!(store, u64, i32, "words");
    let keys: Vec<u64> = (1..300).collect();
    for &key in keys.iter().step_by(2) {
        let value = (key as i32 - 150) * 1_000_003;
        hash.upsert(key, value).unwrap();
        tree.upsert(key, value).unwrap();
    }
    agree(
        |k| hash.get(k).unwrap(),
        |k, out| hash.get_into(k, out).unwrap(),
        |k| hash.get_with(k, <[u8]>::to_vec).unwrap(),
        &keys,
    );
    agree(
        |k| tree.get(k).unwrap(),
        |k, out| tree.get_into(k, out).unwrap(),
        |k| tree.get_with(k, <[u8]>::to_vec).unwrap(),
        &keys,
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "pins a crossbeam epoch, which Miri's stacked borrows refuses"
)]
fn a_read_into_a_grown_buffer_allocates_nothing_on_maps_of_records() {
    let store = store();
    let hash = store.hash_map::<Vec<u8>, Vec<u8>>("hash").unwrap();
    let tree = store.btree_map::<Vec<u8>, Vec<u8>>("tree").unwrap();
    let mut rng = SplitMix64::new(32);
    let keys: Vec<Vec<u8>> = (0..2_000).map(|_| bytes(&mut rng, 16)).collect();
    for (i, key) in keys.iter().enumerate() {
        let value = bytes(&mut rng, 100 + i % 900);
        hash.insert(key, &value).unwrap();
        tree.insert(key, &value).unwrap();
    }
    let mut out = Vec::with_capacity(1024);
    // Warm: the epoch's thread registration, and the thread's read buffer grown to the largest
    // value (record 899's, 999 bytes).
    for key in keys[..10].iter().chain([&keys[899]]) {
        assert!(hash.get_into(key, &mut out).unwrap());
        assert!(tree.get_into(key, &mut out).unwrap());
        let _ = hash.get_with(key, |v| v.len()).unwrap();
    }
    let (found, allocations) = allocations_of(|| {
        let mut found = 0;
        for key in &keys {
            found += usize::from(hash.get_into(key, &mut out).unwrap());
            found += usize::from(tree.get_into(key, &mut out).unwrap());
            found += hash
                .get_with(key, |v| usize::from(v.len() >= 100))
                .unwrap()
                .unwrap();
            found += tree
                .get_with(key, |v| usize::from(v.len() >= 100))
                .unwrap()
                .unwrap();
        }
        found
    });
    assert_eq!(found, 4 * keys.len());
    assert_eq!(
        allocations,
        0,
        "{allocations} allocations in {} reads",
        4 * keys.len()
    );
    // The owned read allocates its value, which the count sees (the counter counts).
    let (_, owned) = allocations_of(|| hash.get(&keys[0]).unwrap());
    assert!(owned >= 1);
}

#[test]
fn get_with_may_read_again_inside_its_closure() {
    let store = store();
    let map = store.hash_map::<String, String>("nested").unwrap();
    map.insert("a", "b").unwrap();
    map.insert("b", "the end").unwrap();
    let chained = map
        .get_with("a", |next| {
            let next = std::str::from_utf8(next).unwrap().to_string();
            map.get_with(next.as_str(), |v| String::from_utf8(v.to_vec()).unwrap())
                .unwrap()
        })
        .unwrap();
    assert_eq!(chained, Some(Some("the end".to_string())));
    assert_eq!(map.get_with("missing", |_| unreachable!()).unwrap(), None);
}

/// What a borrowed scan calls on each pair.
type Visitor<'v> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'v;

/// This thread's allocations so far.
fn allocations_now() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Walk `walk` (a borrowed scan, which calls its visitor on each pair), counting allocations:
/// the pairs visited, the allocations of the whole walk, and those made from the visit of
/// pair `from` to the visit of the last pair.
fn counted_walk(from: usize, walk: impl FnOnce(&mut Visitor)) -> (usize, u64, u64) {
    let (mut pairs, mut at_from, mut at_last) = (0, 0, 0);
    let ((), whole) = allocations_of(|| {
        walk(&mut |key: &[u8], value: &[u8]| {
            assert!(!key.is_empty() && !value.is_empty());
            pairs += 1;
            let now = allocations_now();
            if pairs == from {
                at_from = now;
            }
            at_last = now;
            ControlFlow::Continue(())
        })
    });
    (pairs, whole, at_last - at_from)
}

#[test]
#[cfg_attr(
    miri,
    ignore = "pins a crossbeam epoch, which Miri's stacked borrows refuses"
)]
fn a_warm_borrowed_scan_allocates_nothing_per_pair() {
    let store = store();
    let tree = store.btree_map::<Vec<u8>, Vec<u8>>("scanned").unwrap();
    let words = store.btree_map::<u64, u64>("words").unwrap();
    let mut rng = SplitMix64::new(33);
    const PAIRS: usize = 5_000;
    for i in 0..PAIRS {
        let (key, value) = (bytes(&mut rng, 16), bytes(&mut rng, 100 + i % 300));
        assert!(tree.insert(&key, &value).unwrap());
        assert!(words.insert(i as u64 * 7_919, i as u64).unwrap());
    }
    let walk_tree = |visit: &mut Visitor| {
        assert_eq!(tree.iter_with(visit).unwrap(), None);
    };
    let walk_words = |visit: &mut Visitor| {
        assert_eq!(words.iter_with(visit).unwrap(), None);
    };
    // Warm: the epoch's thread registration, and the buffers a scan leaves the thread's next
    // one (the arena of records, the batch of words) grown to the largest batch.
    counted_walk(1, walk_tree);
    counted_walk(1, walk_words);

    for (what, walk) in [
        ("records", &walk_tree as &dyn Fn(&mut Visitor)),
        ("words", &walk_words),
    ] {
        let (pairs, whole, per_pair) = counted_walk(100, walk);
        assert_eq!(pairs, PAIRS, "{what}");
        assert_eq!(
            per_pair,
            0,
            "{what}: {per_pair} allocations in {} pairs",
            PAIRS - 100
        );
        // A scan's own set-up (its stack of layers) is per scan, not per pair.
        assert!(
            whole <= 2,
            "{what}: {whole} allocations in a scan of {pairs}"
        );
    }

    // The benchmark's pattern: many short scans through the cursor, from a key each.
    let starts: Vec<Vec<u8>> = (0..200).map(|_| bytes(&mut rng, 16)).collect();
    let (visited, allocations) = allocations_of(|| {
        let mut visited = 0;
        for start in &starts {
            let mut cursor = tree.range_encoded(start.as_slice()..);
            for _ in 0..100 {
                let Some(pair) = cursor.next_pair() else {
                    break;
                };
                let (key, _) = pair.unwrap();
                assert!(key >= start.as_slice());
                visited += 1;
            }
        }
        visited
    });
    assert!(visited > 100 * starts.len() / 2, "{visited} pairs");
    // Each scan copies its start key and makes its stack of layers: three allocations at
    // most, whatever the pairs.
    assert!(
        allocations <= 3 * starts.len() as u64,
        "{allocations} allocations in {} scans of {visited} pairs",
        starts.len()
    );
    // The owned scan allocates each key and value, which the count sees.
    let (_, owned) = allocations_of(|| tree.iter().take(100).count());
    assert!(owned >= 200, "{owned}");
}
