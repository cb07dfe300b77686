//! Reads into a caller's buffer (`get_into`) and lent from the thread's buffer (`get_with`):
//! the same bytes as the value's encoding that `get` decodes, for every kind of map, and no
//! allocation per call on maps of records once the buffer has grown.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

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
