//! Space in the byte-key maps always comes back: an ordered map emptied by removes gives back
//! every block but the ones an empty map has, a key's cost in blocks and bytes grows linearly
//! with its length (long shared runs are one layer, not one per 7 bytes), an idle iterator
//! holds back no other map's retired records (nor, for the ordered map, its own), and a full
//! store removes any key and any structure, even one whose list of blocks fits nowhere.

use pmem_ordering::Granularity;
use pmem_structures::raw::records::MAX_KEY_BYTES;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_undo_log::HeapConfig;

fn store(bytes: u64) -> Store {
    Store::anonymous(
        bytes,
        &StoreOptions::new().granularity(Granularity::Emulated),
    )
    .expect("an anonymous store")
}

/// Bytes of the heap's allocated blocks (transactions' and published records').
fn used(store: &Store) -> u64 {
    store.space().used
}

/// How many blocks the structure `name` owns.
fn owned(store: &Store, name: &str) -> usize {
    store
        .owned_blocks()
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, blocks)| blocks.len())
}

fn is_full(e: &Error) -> bool {
    matches!(e, Error::PoolFull { .. })
}

#[test]
fn an_ordered_map_emptied_by_removes_gives_back_its_layers() {
    // 8 MiB: before layers were freed, 1 KiB keys sharing all but their last byte left about
    // 700 KiB of layers behind per round, and the store filled in a dozen rounds.
    let store = store(8 << 20);
    let map = store.btree_map::<Vec<u8>, Vec<u8>>("t").unwrap();
    let (empty_bytes, empty_blocks) = (used(&store), owned(&store, "t"));
    for round in 0..200u32 {
        let mut prefix = format!("{round:05}").into_bytes();
        prefix.resize(1023, b'p');
        let keys = [[&prefix[..], b"a"].concat(), [&prefix[..], b"b"].concat()];
        for k in &keys {
            assert!(map.insert(k, b"v").unwrap());
        }
        for k in &keys {
            assert_eq!(map.remove(k).unwrap().as_deref(), Some(&b"v"[..]));
        }
        assert_eq!(
            (used(&store), owned(&store, "t")),
            (empty_bytes, empty_blocks),
            "round {round}: the emptied map still holds more than an empty one"
        );
    }
    // Keys in many layers at once (7, 14 and more shared bytes), then all removed.
    let keys: Vec<Vec<u8>> = (0..600u32)
        .map(|i| {
            format!(
                "tenant{}:user:{:07}:{}",
                i % 3,
                i / 3,
                "x".repeat(i as usize % 40)
            )
        })
        .map(String::into_bytes)
        .collect();
    for k in &keys {
        assert!(map.insert(k, k).unwrap());
    }
    assert!(owned(&store, "t") > empty_blocks + keys.len());
    for k in keys.iter().rev() {
        assert_eq!(map.remove(k).unwrap().as_ref(), Some(k));
    }
    assert_eq!(
        (used(&store), owned(&store, "t")),
        (empty_bytes, empty_blocks)
    );
    store.check_blocks().unwrap();
    drop(map);
    store.remove_structure("t").unwrap();
    store.check_blocks().unwrap();
}

/// The bytes and blocks `map` gains by inserting keys of `n` bytes: two sharing all but their
/// last byte, then one leaving their shared run half way.
fn cost_of_long_keys(n: usize) -> (u64, usize) {
    // 64 KiB chunks: a block of more than a chunk takes whole chunks, at most twice its size.
    let store = Store::anonymous(
        16 << 20,
        &StoreOptions::new()
            .granularity(Granularity::Emulated)
            .heap(HeapConfig {
                chunk_size: 64 << 10,
                ..HeapConfig::default()
            }),
    )
    .unwrap();
    let map = store.btree_map::<Vec<u8>, Vec<u8>>("t").unwrap();
    map.insert(b"short", b"").unwrap();
    let (bytes, blocks) = (used(&store), owned(&store, "t"));
    let mut run = vec![b'k'; n - 1];
    run.push(b'a');
    map.insert(&run, b"").unwrap();
    run[n - 1] = b'b';
    map.insert(&run, b"").unwrap();
    run[n / 2] = b'c';
    map.insert(&run, b"").unwrap();
    for (i, k) in [n / 2, n - 1].into_iter().enumerate() {
        let mut probe = vec![b'k'; n];
        probe[k] = [b'a', b'z'][i];
        assert_eq!(map.get(&probe).unwrap(), None);
    }
    assert_eq!(map.len(), 4);
    assert_eq!(map.iter().count(), 4);
    map.check().unwrap();
    store.check_blocks().unwrap();
    (used(&store) - bytes, owned(&store, "t") - blocks)
}

#[test]
fn a_key_costs_blocks_and_bytes_linear_in_its_length() {
    for n in [15, 64, 1 << 10, 8 << 10, 32 << 10, MAX_KEY_BYTES] {
        let (bytes, blocks) = cost_of_long_keys(n);
        // Three records of n bytes and at most two layers, each a few fixed blocks (its root,
        // redo area and a node) plus the run its keys share: five runs of at most n bytes,
        // each in a block at most twice its size (size classes, whole chunks), and the fixed
        // blocks.
        assert!(blocks <= 3 + 2 * 4, "keys of {n} bytes: {blocks} blocks");
        let bound = 12 * n as u64 + (128 << 10);
        assert!(
            bytes <= bound,
            "keys of {n} bytes: {bytes} bytes allocated, more than {bound}"
        );
    }
}

/// Overwrite a 1 MiB value 100 times in a byte-key map of `store` (of 32 MiB), the ordered
/// map or the hash map, through one handle (dropping the last handle of a map hands its
/// retired records back at once).
fn overwrite_big_values(store: &Store, ordered: bool) {
    let value = |i: u8| vec![i; 1 << 20];
    let upsert: Box<dyn Fn(u8) -> Result<(), Error>> = if ordered {
        let m = store.btree_map::<Vec<u8>, Vec<u8>>("big").unwrap();
        Box::new(move |i| m.upsert(b"k", value(i)).map(drop))
    } else {
        let m = store.hash_map::<Vec<u8>, Vec<u8>>("big").unwrap();
        Box::new(move |i| m.upsert(b"k", value(i)).map(drop))
    };
    for i in 0..100u8 {
        upsert(i).unwrap_or_else(|e| panic!("overwrite {i} (ordered {ordered}): {e}"));
    }
}

#[test]
fn an_idle_iterator_holds_back_no_other_map() {
    let elsewhere = store(4 << 20);
    let tree = elsewhere.btree_map::<Vec<u8>, Vec<u8>>("t").unwrap();
    let hash = elsewhere.hash_map::<Vec<u8>, Vec<u8>>("h").unwrap();
    for i in 0..10u8 {
        tree.insert([i], [i]).unwrap();
        hash.insert([i], [i]).unwrap();
    }
    // Idle iterators of both kinds, on another thread, while the maps below are overwritten.
    let (started, start) = std::sync::mpsc::channel();
    let (finish, finished) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let mut tree_scan = tree.iter();
        let mut hash_scan = hash.iter();
        assert!(tree_scan.next().is_some() && hash_scan.next().is_some());
        started.send(()).unwrap();
        finished.recv().unwrap();
        assert_eq!(tree_scan.count() + hash_scan.count(), 18);
    });
    start.recv().unwrap();
    for ordered in [true, false] {
        // In another store, and in another map of the same store as an idle hash iterator.
        overwrite_big_values(&store(32 << 20), ordered);
        let same = store(32 << 20);
        let neighbour = same.hash_map::<Vec<u8>, Vec<u8>>("n").unwrap();
        neighbour.insert(b"n", b"n").unwrap();
        let mut near = neighbour.iter();
        assert!(near.next().is_some());
        overwrite_big_values(&same, ordered);
        drop(near);
    }
    finish.send(()).unwrap();
    reader.join().unwrap();
}

#[test]
fn an_idle_ordered_map_iterator_holds_back_nothing_of_its_own_map() {
    let store = store(32 << 20);
    let map = store.btree_map::<Vec<u8>, Vec<u8>>("big").unwrap();
    for i in 0..200u32 {
        map.insert(i.to_be_bytes(), [1u8; 8]).unwrap();
    }
    let mut scan = map.iter();
    assert!(scan.next().is_some());
    overwrite_big_values(&store, true);
    // The scan goes on, and sees every key present for its whole duration.
    assert_eq!(scan.filter(|p| p.is_ok()).count(), 200);
}

fn key_bytes(i: u64) -> Vec<u8> {
    format!("key:{i:08}").into_bytes()
}

/// A store of `pool` bytes holding an ordered byte-key map "big" and a byte-key hash map
/// "filler" whose records, as small as the map's, fill the pool in turns: both maps' records
/// share the heap's record chunks.
fn full_store_of_small_records(pool: u64) -> (Store, u64) {
    let store = store(pool);
    let big = store.btree_map::<Vec<u8>, Vec<u8>>("big").unwrap();
    let filler = store.hash_map::<Vec<u8>, Vec<u8>>("filler").unwrap();
    let mut full = [false; 2];
    let mut i = 0;
    while !full.iter().all(|&f| f) {
        let k = key_bytes(i);
        let results = [big.insert(&k, b"value!!!"), filler.insert(&k, b"value!!!")];
        for (slot, r) in results.into_iter().enumerate() {
            match r {
                Ok(_) => {}
                Err(e) if is_full(&e) => full[slot] = true,
                Err(e) => panic!("{e}"),
            }
        }
        i += 1;
    }
    (store, i)
}

#[test]
fn a_large_ordered_map_in_a_full_store_is_removed() {
    let (store, keys) = full_store_of_small_records(16 << 20);
    assert!(keys > 20_000, "{keys} keys");
    store.remove_structure("filler").unwrap();
    store
        .remove_structure("big")
        .unwrap_or_else(|e| panic!("remove the ordered map of {keys} keys: {e}"));
    assert!(store.names().is_empty());
    store.check_blocks().unwrap();
}

#[test]
fn every_kind_of_large_structure_in_a_full_store_is_removed() {
    // Each kind alone fills the pool with many small blocks (u64 maps: nodes and segments;
    // byte-key maps: records), then is removed with nothing else freed first.
    for victim in ["h", "b", "rh", "rb"] {
        let store = store(8 << 20);
        let insert: Box<dyn Fn(u64) -> Result<(), Error>> = match victim {
            "h" => {
                let m = store.hash_map::<u64, u64>("h").unwrap();
                Box::new(move |i| m.insert(i, i).map(drop))
            }
            "b" => {
                let m = store.btree_map::<u64, u64>("b").unwrap();
                Box::new(move |i| m.insert(i, i).map(drop))
            }
            "rh" => {
                let m = store.hash_map::<Vec<u8>, Vec<u8>>("rh").unwrap();
                Box::new(move |i| m.insert(key_bytes(i), b"v").map(drop))
            }
            _ => {
                let m = store.btree_map::<Vec<u8>, Vec<u8>>("rb").unwrap();
                Box::new(move |i| m.insert(key_bytes(i), b"v").map(drop))
            }
        };
        let mut i = 0;
        loop {
            match insert(i) {
                Ok(()) => i += 1,
                Err(e) if is_full(&e) => break,
                Err(e) => panic!("{victim}: {e}"),
            }
        }
        drop(insert);
        store
            .remove_structure(victim)
            .unwrap_or_else(|e| panic!("remove {victim} of {i} keys from a full store: {e}"));
        store.check_blocks().unwrap();
    }
}

#[test]
fn every_key_of_a_full_ordered_map_is_removed() {
    let (store, keys) = full_store_of_small_records(8 << 20);
    let big = store.btree_map::<Vec<u8>, Vec<u8>>("big").unwrap();
    let filler = store.hash_map::<Vec<u8>, Vec<u8>>("filler").unwrap();
    for i in 0..keys {
        big.remove(key_bytes(i))
            .unwrap_or_else(|e| panic!("remove key {i} of the ordered map: {e}"));
        filler
            .remove(key_bytes(i))
            .unwrap_or_else(|e| panic!("remove key {i} of the hash map: {e}"));
    }
    assert!(big.is_empty() && filler.is_empty());
    store.check_blocks().unwrap();
}
