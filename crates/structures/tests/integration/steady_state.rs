//! A long-running mix of inserts, overwrites and removes over a fixed set of keys reaches a
//! steady size: 100,000 operations on each map kind of a `Store` (the ordered and hash byte-key
//! maps, with keys sharing runs of 0 to 600 bytes and values of 0 to 2 KiB; the `u64` hash and
//! B+-tree maps), with the pool's use sampled every 500 operations. Past the first half, the
//! bytes in allocated blocks and the chunks in use never exceed the first half's maximum by
//! more than a small bound: nothing (layers, records, nodes, retired blocks) accumulates.

use pmem_ordering::Granularity;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::Heap;

const OPERATIONS: usize = 100_000;
const SAMPLE_EVERY: usize = 500;

/// The pool's use: bytes in allocated blocks, and chunks not free.
fn used(store: &Store) -> (u64, u64) {
    let stats = engine(store).alloc_stats();
    (
        stats.bytes_allocated,
        stats.total_chunks - stats.free_chunks,
    )
}

/// One operation on the map under test: insert, upsert or remove of key `key` with a value
/// of `len` bytes.
type Operate<'a> = Box<dyn FnMut(u8, usize, usize) -> Result<(), Error> + 'a>;

/// Run the mix through `operate` and assert the steady size; `what` names the map.
fn assert_steady(store: &Store, what: &str, keys: usize, mut operate: Operate<'_>) {
    let mut rng = SplitMix64::new(0x5eed ^ keys as u64);
    let mut samples = Vec::new();
    for i in 0..OPERATIONS {
        let kind = (rng.below(10)) as u8;
        let key = rng.below(keys as u64) as usize;
        let len = rng.below(2048) as usize;
        operate(kind, key, len).unwrap_or_else(|e| panic!("{what}: operation {i}: {e}"));
        if (i + 1) % SAMPLE_EVERY == 0 {
            samples.push(used(store));
        }
    }
    let (first, second) = samples.split_at(samples.len() / 2);
    let max = |s: &[(u64, u64)], f: fn(&(u64, u64)) -> u64| s.iter().map(f).max().unwrap();
    let (bytes_first, bytes_second) = (max(first, |s| s.0), max(second, |s| s.0));
    let (chunks_first, chunks_second) = (max(first, |s| s.1), max(second, |s| s.1));
    // Bytes: the keys' values vary, so the sum of live blocks wanders; 5% of it, or a chunk.
    let byte_slack = (bytes_first / 20).max(256 << 10);
    assert!(
        bytes_second <= bytes_first + byte_slack,
        "{what}: {bytes_second} bytes allocated in the second half, {bytes_first} at most in \
         the first"
    );
    assert!(
        chunks_second <= chunks_first + 2,
        "{what}: {chunks_second} chunks in use in the second half, {chunks_first} at most in \
         the first"
    );
    store.check_blocks().unwrap();
}

/// Key `i` of a byte-key map: groups sharing runs of 0, 7, 20, 100 and 600 bytes, with a
/// distinct tail (some keys end where others of their group go on).
fn byte_key(i: usize) -> Vec<u8> {
    let shared = [0, 7, 20, 100, 600][i % 5];
    let mut key = vec![b'k'; shared];
    key.extend_from_slice(format!("{}", i / 5).as_bytes());
    key
}

fn byte_value(key: usize, len: usize) -> Vec<u8> {
    vec![key as u8; len]
}

fn store() -> Store {
    Store::anonymous(
        64 << 20,
        &StoreOptions::new().granularity(Granularity::Emulated),
    )
    .unwrap()
}

#[test]
fn the_ordered_byte_key_map_reaches_a_steady_size() {
    let store = store();
    let map = store.btree_map::<Vec<u8>, Vec<u8>>("t").unwrap();
    assert_steady(
        &store,
        "ordered byte-key map",
        2_000,
        Box::new(|kind, key, len| match kind {
            0..=3 => map.insert(byte_key(key), byte_value(key, len)).map(drop),
            4..=6 => map.upsert(byte_key(key), byte_value(key, len)).map(drop),
            _ => map.remove(byte_key(key)).map(drop),
        }),
    );
}

#[test]
fn the_byte_key_hash_map_reaches_a_steady_size() {
    let store = store();
    let map = store.hash_map::<Vec<u8>, Vec<u8>>("h").unwrap();
    assert_steady(
        &store,
        "byte-key hash map",
        2_000,
        Box::new(|kind, key, len| match kind {
            0..=3 => map.insert(byte_key(key), byte_value(key, len)).map(drop),
            4..=6 => map.upsert(byte_key(key), byte_value(key, len)).map(drop),
            _ => map.remove(byte_key(key)).map(drop),
        }),
    );
}

#[test]
fn the_u64_maps_reach_a_steady_size() {
    let store = store();
    let hash = store.hash_map::<u64, u64>("h").unwrap();
    let tree = store.btree_map::<u64, u64>("b").unwrap();
    let key = |k: usize| (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    assert_steady(
        &store,
        "u64 hash map",
        20_000,
        Box::new(|kind, k, len| match kind {
            0..=3 => hash.insert(key(k), len as u64).map(drop),
            4..=6 => hash.upsert(key(k), len as u64).map(drop),
            _ => hash.remove(key(k)).map(drop),
        }),
    );
    assert_steady(
        &store,
        "u64 B+-tree map",
        20_000,
        Box::new(|kind, k, len| match kind {
            0..=3 => tree.insert(key(k), len as u64).map(drop),
            4..=6 => tree.upsert(key(k), len as u64).map(drop),
            _ => tree.remove(key(k)).map(drop),
        }),
    );
}

/// The store's heap, to read its allocator and to damage its bytes on purpose.
fn engine(store: &Store) -> &Heap {
    // SAFETY: the test runs on one thread, so no handle of the store is in use while the heap
    // or its pool is written.
    unsafe { store.raw_heap() }
}
