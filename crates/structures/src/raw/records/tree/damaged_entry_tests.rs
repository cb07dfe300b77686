//! (tests) A damaged entry naming a layer: a reader that follows it holds a reference to the
//! layer, which must outlive the layer's removal from the map (what a failed publication or a
//! retirement does) for as long as the reader stays pinned.

use pmem_ordering::{Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::{is_layer, slice_word, RecordTreeMap, LAYER_TAG};
use crate::fastfair::FastFairConfig;

type Map = RecordTreeMap<pmem_ordering::Hardware>;

fn map() -> Map {
    let pool = Pool::anonymous("damaged-entry", 16 << 20, &PoolOptions::new()).unwrap();
    let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched).unwrap();
    let root = heap.pool().root_offset();
    RecordTreeMap::create(&heap, root, FastFairConfig::default()).unwrap()
}

#[test]
// Under Miri's Stacked Borrows, crossbeam-epoch's pin fails inside crossbeam itself (as CCEH's
// pool-driven tests do), and every map operation pins the map's epoch.
#[cfg_attr(miri, ignore)]
fn a_layer_reached_through_a_damaged_entry_outlives_its_removal_from_the_map() {
    let map = map();
    // Two keys going on with the same first slice: the second pushes both down a layer.
    assert!(map.insert(b"abcdefgh-1", b"one").unwrap());
    assert!(map.insert(b"abcdefgh-2", b"two").unwrap());
    let shared = slice_word(b"abcdefgh", 0);
    let entry = map
        .top
        .tree
        .get(shared)
        .unwrap()
        .expect("the shared word's entry");
    assert!(is_layer(entry), "the shared word names a layer");
    let layer_root = entry & !LAYER_TAG;

    // Damage: another word of the top layer names the same layer.
    let other = slice_word(b"zzzzzzzz", 0);
    assert_eq!(map.top.tree.upsert(other, entry).unwrap(), None);
    let guard = map.records.pin();
    let spot = map.descend(b"zzzzzzzz-1", &guard).unwrap();
    assert_eq!(
        spot.layer.root, layer_root,
        "the descent went down through the damaged entry"
    );

    // What a failed publication or a retirement does: the layer leaves the map's set.
    let removed = map
        .withdraw_layer(layer_root)
        .expect("the layer was in the map's set");
    drop(removed);
    // The layer the reader reached is whole while it stays pinned: its entries read as before.
    let below = slice_word(b"abcdefgh-1", spot.layer.depth());
    assert!(spot.layer.tree.get(below).unwrap().is_some());
    let words: Vec<u64> = spot.layer.tree.range(..).map(|e| e.unwrap().0).collect();
    assert_eq!(
        words,
        [below, slice_word(b"abcdefgh-2", spot.layer.depth())]
    );
    assert_eq!(
        map.withdrawn.lock().unwrap().len(),
        1,
        "the map keeps the withdrawn layer for the pinned reader"
    );

    // The map refuses the entry now that the layer is not one of its own.
    drop(guard);
    let err = map.get(b"zzzzzzzz-1").unwrap_err();
    assert!(err.to_string().contains("not one of the map's"), "{err}");
}
