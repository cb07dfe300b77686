//! (tests) A damaged entry naming a layer: the walk that follows it holds the layer itself,
//! so the layer outlives its removal from the map (what a failed publication does).

use std::sync::Arc;

use pmem_ordering::{Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::{is_layer, slice_word, LayerRef, RecordTreeMap, LAYER_TAG};
use crate::fastfair::FastFairConfig;

type Map = RecordTreeMap<pmem_ordering::Hardware, Arc<Pool>, Arc<Heap>>;

fn map() -> Map {
    let pool = Pool::anonymous("damaged-entry", 16 << 20, &PoolOptions::new()).unwrap();
    let heap: Heap =
        Heap::create(Arc::new(pool), HeapConfig::default(), FencePolicy::Batched).unwrap();
    let heap = Arc::new(heap);
    let root = heap.pool().root_offset();
    RecordTreeMap::create(heap, root, FastFairConfig::default()).unwrap()
}

#[test]
fn a_layer_reached_through_a_damaged_entry_outlives_its_removal_from_the_map() {
    let map = map();
    // Two keys going on with the same 7 bytes: the second pushes both down into a new layer.
    assert!(map.insert(b"abcdefgh-1", b"one").unwrap());
    assert!(map.insert(b"abcdefgh-2", b"two").unwrap());
    let shared = slice_word(b"abcdefgh", 0);
    let entry = map
        .top
        .get(shared)
        .unwrap()
        .expect("the shared word's entry");
    assert!(is_layer(entry), "the shared word names a layer");
    let layer_root = entry & !LAYER_TAG;

    // Damage: another word of the top layer names the same layer.
    let other = slice_word(b"zzzzzzzz", 0);
    assert_eq!(map.top.upsert(other, entry).unwrap(), None);
    let (spot, _) = map.find(b"zzzzzzzz-1").unwrap();
    assert_eq!(
        spot.depth, 1,
        "the descent went down through the damaged entry"
    );
    let LayerRef::Below(held) = &spot.layer else {
        panic!("the descent stopped in the top layer");
    };

    // What `push_down` does when a publication fails: the layer leaves the map's set.
    let removed = map
        .layers
        .write()
        .unwrap()
        .remove(&layer_root)
        .expect("the layer was in the map's set");
    drop(removed);
    assert_eq!(
        Arc::strong_count(held),
        1,
        "the walk holds the only handle left"
    );
    // The layer the walk holds is whole: its entries read as before.
    let below = slice_word(b"abcdefgh-1", 1);
    assert!(spot.layer.get(below).unwrap().is_some());
    let words: Vec<u64> = spot.layer.range(..).map(|e| e.unwrap().0).collect();
    assert_eq!(words, [below, slice_word(b"abcdefgh-2", 1)]);

    // The map refuses the entry now that the layer is not one of its own.
    drop(spot);
    let err = map.get(b"zzzzzzzz-1").unwrap_err();
    assert!(err.to_string().contains("not one of the map's"), "{err}");
}
