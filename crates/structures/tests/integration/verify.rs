//! `verify()` of CCEH and FAST&FAIR: healthy structures give no findings and count their
//! blocks and keys; damage written into the pool behind a structure's back is reported as the
//! finding of its kind, at its offset; random bit flips never make `verify()` panic.
//!
//! The damage is written at offsets of the on-media formats (`cceh/layout.rs`,
//! `fastfair/layout.rs`), spelled out here as constants: a change of format must change them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem_structures::raw::cceh::{hash, Cceh, CcehConfig};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, ShiftPolicy, EMPTY_KEY};
use pmem_structures::raw::verify::{Problem, Verification};
use pmem_structures::StructureKind;
use pmem_test_kit::damage::{assert_found, load, scribble};
use pmem_test_kit::fixture::anonymous_heap;
use pmem_test_kit::SplitMix64;
use pmem_undo_log::Heap;

// CCEH: root words, directory words, slots.
const CCEH_DIRECTORY: u64 = 8;
const DEPTH_MASK: u64 = 63;
const BUCKET_BYTES: u64 = 64;
const SLOT_BYTES: u64 = 16;
const BUCKETS: u64 = 16;

// FAST&FAIR: root object and node header words, entries.
const FF_ROOT_NODE: u64 = 32;
const SIBLING: u64 = 8;
const LEFTMOST: u64 = 16;
const HIGH: u64 = 24;
const TAG: u64 = 32;
const ENTRIES: u64 = 64;
const NODE_SIZE: u64 = 256;

type Table = Cceh<pmem_ordering::Hardware>;
type Tree = FastFair<pmem_ordering::Hardware>;

// ---------------------------------------------------------------------------------- CCEH

fn table(heap: &Heap) -> Table {
    let config = CcehConfig {
        buckets_per_segment: BUCKETS,
    };
    Cceh::create(heap, heap.pool().root_offset(), config).unwrap()
}

/// A table through many splits and doublings, a third of its keys removed.
fn grown_table(heap: &Heap) -> Table {
    let table = table(heap);
    grow_table(&table);
    table
}

fn grow_table(table: &Table) {
    for k in 1..=4000 {
        assert!(table.insert(k, k * 2).unwrap());
    }
    for k in (1..=4000).step_by(3) {
        assert_eq!(table.remove(k).unwrap(), Some(k * 2));
    }
}

fn directory(heap: &Heap) -> u64 {
    load(heap, heap.pool().root_offset() + CCEH_DIRECTORY)
}

fn entry_offset(directory: u64, index: u64) -> u64 {
    directory + 8 + 8 * index
}

/// The segment that holds `key`'s hash prefix, and its local depth.
fn segment_of(heap: &Heap, key: u64) -> (u64, u64) {
    let dir = directory(heap);
    let depth = load(heap, dir);
    let index = if depth == 0 {
        0
    } else {
        hash(key) >> (64 - depth)
    };
    let entry = load(heap, entry_offset(dir, index));
    (entry & !DEPTH_MASK, entry & DEPTH_MASK)
}

fn slot(segment: u64, bucket: u64, slot: u64) -> u64 {
    segment + bucket * BUCKET_BYTES + slot * SLOT_BYTES
}

#[test]
fn a_grown_table_verifies_clean_with_its_blocks_and_keys() {
    let heap = anonymous_heap("verify", 16 << 20);
    let table = table(&heap);
    let empty = table.verify();
    assert!(empty.is_healthy(), "{empty}");
    assert_eq!((empty.blocks_walked, empty.keys), (2, 0));
    grow_table(&table);
    assert!(
        table.global_depth().unwrap() >= 5,
        "splits and doublings ran"
    );
    let report = table.verify();
    assert!(report.is_healthy(), "{report}");
    assert_eq!(report.structure, StructureKind::HashMap);
    assert_eq!(report.keys, table.len());
    assert_eq!(report.blocks_walked, table.blocks().unwrap().len() as u64);
    assert_eq!(report.keys, table.check().unwrap());
}

#[test]
fn a_live_key_outside_its_window_and_a_live_key_twice_are_reported() {
    let heap = anonymous_heap("verify", 16 << 20);
    let table = table(&heap);
    assert!(table.insert(7, 70).unwrap());
    let (segment, _) = segment_of(&heap, 7);
    let home = hash(7) & (BUCKETS - 1);
    let first = slot(segment, home, 0);
    assert_eq!(
        load(&heap, first),
        7,
        "an empty table puts a key in its home slot"
    );
    // A copy of key 7 next to it.
    let copy = slot(segment, home, 1);
    scribble(&heap, copy + 8, 70);
    scribble(&heap, copy, 7);
    let report = table.verify();
    assert_found(&report, copy, |p| {
        *p == Problem::DuplicateKey { key: 7, first }
    });
    assert_eq!(report.findings.len(), 1, "{report}");
    assert_eq!(
        report.findings[0].to_string(),
        format!(
            "a CCEH hash table at {:#x}: at {copy:#x}: key 7 is stored twice (first at {first:#x})",
            heap.pool().root_offset()
        )
    );
    scribble(&heap, copy, 0);
    // Another key of the segment eight buckets past its home: outside its four-bucket window.
    let key = (8..).find(|&k| segment_of(&heap, k).0 == segment).unwrap();
    let home = hash(key) & (BUCKETS - 1);
    let far = (home + 8) & (BUCKETS - 1);
    let outside = slot(segment, far, 2);
    scribble(&heap, outside + 8, 1);
    scribble(&heap, outside, key);
    let report = table.verify();
    assert_found(&report, outside, |p| {
        *p == Problem::KeyOutsideWindow {
            key,
            bucket: far,
            home,
        }
    });
    let root = heap.pool().root_offset();
    assert_found(&report, root, |p| {
        *p == Problem::CountMismatch {
            counted: 2,
            recorded: 1,
        }
    });
}

#[test]
fn directory_damage_is_reported_at_its_entry() {
    let heap = anonymous_heap("verify", 16 << 20);
    let table = grown_table(&heap);
    let dir = directory(&heap);
    let depth = load(&heap, dir);
    // A run of two or more entries: damage its last entry.
    let (start, local) = (0..1u64 << depth)
        .map(|i| (i, load(&heap, entry_offset(dir, i)) & DEPTH_MASK))
        .find(|&(i, local)| local < depth && i.is_multiple_of(1 << (depth - local)))
        .expect("some segment spans two entries");
    let last = start + (1 << (depth - local)) - 1;
    let run_word = load(&heap, entry_offset(dir, start));
    let other = load(&heap, entry_offset(dir, (last + 1) % (1 << depth)));
    scribble(&heap, entry_offset(dir, last), other);
    let report = table.verify();
    assert_found(&report, entry_offset(dir, last), |p| {
        *p == Problem::EntryDisagrees {
            index: last,
            found: (other & !DEPTH_MASK, other & DEPTH_MASK),
            expected: (run_word & !DEPTH_MASK, local),
            run_start: start,
        }
    });
    // A local depth above the global one, and a segment outside the pool.
    scribble(&heap, entry_offset(dir, last), run_word);
    scribble(&heap, entry_offset(dir, start), run_word | DEPTH_MASK);
    let report = table.verify();
    assert_found(&report, entry_offset(dir, start), |p| {
        *p == Problem::LocalDepthAboveGlobal {
            index: start,
            local: 63,
            global: depth,
        }
    });
    let nowhere = (heap.pool().size() + (1 << 20)) & !DEPTH_MASK;
    scribble(&heap, entry_offset(dir, start), nowhere | local);
    for i in start + 1..=last {
        scribble(&heap, entry_offset(dir, i), nowhere | local);
    }
    let report = table.verify();
    assert_found(&report, nowhere, |p| matches!(p, Problem::OutOfPool { .. }));
}

#[test]
fn a_bad_depth_or_directory_pointer_is_reported() {
    let heap = anonymous_heap("verify", 16 << 20);
    let table = grown_table(&heap);
    let dir = directory(&heap);
    let depth = load(&heap, dir);
    scribble(&heap, dir, 200);
    let report = table.verify();
    assert_found(&report, dir, |p| {
        *p == Problem::DepthTooLarge {
            depth: 200,
            max: 58,
        }
    });
    // A depth in range whose directory would run past the pool.
    scribble(&heap, dir, 40);
    assert_found(&table.verify(), dir, |p| {
        matches!(p, Problem::OutOfPool { .. })
    });
    scribble(&heap, dir, depth);
    let pointer = heap.pool().root_offset() + CCEH_DIRECTORY;
    scribble(&heap, pointer, dir + 4);
    assert_found(&table.verify(), dir + 4, |p| {
        *p == Problem::Misaligned { alignment: 8 }
    });
    // The highest aligned offset: far outside the pool.
    let nowhere = !7u64;
    scribble(&heap, pointer, nowhere);
    assert_found(&table.verify(), nowhere, |p| {
        matches!(p, Problem::OutOfPool { .. })
    });
    scribble(&heap, pointer, dir);
    assert!(table.verify().is_healthy());
}

// ---------------------------------------------------------------------------- FAST&FAIR

fn tree(heap: &Heap) -> Tree {
    let config = FastFairConfig {
        node_size: NODE_SIZE,
        policy: ShiftPolicy::Fast,
    };
    FastFair::create(heap, heap.pool().root_offset(), config).unwrap()
}

/// A tree of three levels or more, grown by splits, then shrunk by merges.
fn grown_tree(heap: &Heap) -> Tree {
    let tree = tree(heap);
    grow_tree(&tree);
    tree
}

fn grow_tree(tree: &Tree) {
    let mut rng = SplitMix64::new(17);
    for _ in 0..6000 {
        let key = rng.below(1 << 40);
        tree.insert(key, key ^ 1).unwrap();
    }
    let keys: Vec<u64> = tree.iter().map(|r| r.unwrap().0).collect();
    for key in keys.iter().step_by(2) {
        assert!(tree.remove(*key).unwrap().is_some());
    }
}

fn root_node(heap: &Heap) -> u64 {
    load(heap, heap.pool().root_offset() + FF_ROOT_NODE)
}

/// The nodes of the leaf level, in sibling order.
fn leaves(heap: &Heap) -> Vec<u64> {
    let mut node = root_node(heap);
    while load(heap, node) > 0 {
        node = load(heap, node + LEFTMOST);
    }
    let mut out = Vec::new();
    while node != 0 {
        out.push(node);
        node = load(heap, node + SIBLING);
    }
    out
}

fn key_offset(node: u64, slot: u64) -> u64 {
    node + ENTRIES + SLOT_BYTES * slot
}

#[test]
fn a_grown_and_shrunk_tree_verifies_clean_with_its_blocks_and_keys() {
    let heap = anonymous_heap("verify", 16 << 20);
    let tree = tree(&heap);
    let empty = tree.verify();
    assert!(empty.is_healthy(), "{empty}");
    assert_eq!((empty.blocks_walked, empty.keys), (2, 0));
    grow_tree(&tree);
    assert!(tree.height().unwrap() >= 3, "splits reached a third level");
    let report = tree.verify();
    assert!(report.is_healthy(), "{report}");
    assert_eq!(report.structure, StructureKind::BTreeMap);
    assert_eq!(report.keys, tree.len());
    assert_eq!(report.blocks_walked, tree.blocks().unwrap().len() as u64);
    assert_eq!(report.keys, tree.check().unwrap());
}

#[test]
fn node_damage_is_reported_at_its_slot() {
    let heap = anonymous_heap("verify", 16 << 20);
    let tree = grown_tree(&heap);
    let leaves = leaves(&heap);
    let leaf = leaves[leaves.len() / 2];
    // Unsorted: slot 1 gets a key below slot 0's.
    let (k0, k1) = (
        load(&heap, key_offset(leaf, 0)),
        load(&heap, key_offset(leaf, 1)),
    );
    scribble(&heap, key_offset(leaf, 1), k0 - 1);
    let report = tree.verify();
    assert_found(&report, key_offset(leaf, 1), |p| {
        *p == Problem::UnsortedKeys {
            slot: 1,
            previous: k0,
            key: k0 - 1,
        }
    });
    // Out of bounds: a key at the leaf's high key.
    let high = load(&heap, leaf + HIGH);
    scribble(&heap, key_offset(leaf, 1), high);
    let report = tree.verify();
    assert_found(
        &report,
        key_offset(leaf, 1),
        |p| matches!(p, Problem::KeyOutOfBounds { key, .. } if *key == high),
    );
    assert_found(
        &report,
        key_offset(leaf, 1),
        |p| matches!(p, Problem::KeyOutsideParent { key, .. } if *key == high),
    );
    scribble(&heap, key_offset(leaf, 1), k1);
    // A gap: a used slot after the free ones.
    let capacity = (NODE_SIZE - ENTRIES) / SLOT_BYTES;
    let last = key_offset(leaf, capacity - 1);
    assert_eq!(load(&heap, last), EMPTY_KEY, "the leaf is not full");
    scribble(&heap, last, k1 + 1);
    assert_found(&tree.verify(), last, |p| {
        *p == Problem::GapInNode {
            slot: capacity as usize - 1,
            key: k1 + 1,
        }
    });
    scribble(&heap, last, EMPTY_KEY);
    // A lost tag.
    scribble(&heap, leaf + TAG, 0);
    assert_found(&tree.verify(), leaf, |p| *p == Problem::NotANode { tag: 0 });
}

#[test]
fn broken_sibling_links_are_reported_without_looping() {
    let heap = anonymous_heap("verify", 16 << 20);
    let tree = grown_tree(&heap);
    let leaves = leaves(&heap);
    let (first, middle) = (leaves[0], leaves[leaves.len() / 2]);
    let next = load(&heap, middle + SIBLING);
    // A cycle back to the first leaf.
    scribble(&heap, middle + SIBLING, first);
    let report = tree.verify();
    assert_found(&report, middle, |p| {
        *p == Problem::SiblingCycle { next: first }
    });
    assert!(report
        .findings
        .iter()
        .any(|f| matches!(f.problem, Problem::ChildNotInChain { level: 0, .. })));
    // A link out of the pool, and a misaligned one.
    let nowhere = heap.pool().size() + 2 * NODE_SIZE;
    scribble(&heap, middle + SIBLING, nowhere);
    let report = tree.verify();
    assert_found(&report, nowhere, |p| matches!(p, Problem::OutOfPool { .. }));
    assert_found(&report, middle, |p| {
        matches!(p, Problem::LevelEndsEarly { level: 0, .. })
    });
    scribble(&heap, middle + SIBLING, next + 8);
    assert_found(&tree.verify(), next + 8, |p| {
        *p == Problem::Misaligned { alignment: 64 }
    });
    scribble(&heap, middle + SIBLING, next);
    // An impossible root level.
    let root = root_node(&heap);
    let level = load(&heap, root);
    scribble(&heap, root, 200);
    assert_found(&tree.verify(), root, |p| {
        *p == Problem::LevelTooHigh { level: 200 }
    });
    scribble(&heap, root, level);
    assert!(tree.verify().is_healthy());
}

// ------------------------------------------------------------------------------ bit flips

/// Flip `flips` random bits, each in a random line of a random block of `blocks`, run
/// `verify` with only that flip in place (the word is restored after), and fail if it ever
/// panics. Returns how many flips were reported as damage.
fn flip_bits(
    heap: &Heap,
    blocks: &[u64],
    seed: u64,
    flips: u64,
    verify: impl Fn() -> Verification,
) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut reported = 0;
    for flip in 0..flips {
        let block = blocks[rng.below(blocks.len() as u64) as usize];
        let size = heap.block_size(block).expect("a live block");
        let line = rng.below(size / 64);
        let word = block + 64 * line + 8 * rng.below(8);
        let bit = rng.below(64);
        let original = load(heap, word);
        scribble(heap, word, original ^ (1 << bit));
        let outcome = catch_unwind(AssertUnwindSafe(&verify));
        scribble(heap, word, original);
        match outcome {
            Ok(report) => reported += u64::from(!report.is_healthy()),
            Err(_) => {
                panic!("verify panicked on flip {flip} (seed {seed}): bit {bit} of {word:#x}")
            }
        }
    }
    reported
}

#[test]
fn random_bit_flips_in_a_table_never_make_verify_panic() {
    let heap = anonymous_heap("verify", 16 << 20);
    let table = grown_table(&heap);
    let blocks = table.blocks().unwrap();
    let reported = flip_bits(&heap, &blocks, 23, 200, || table.verify());
    assert!(reported > 0, "some flips must be seen");
    assert!(table.verify().is_healthy(), "every flip was undone");
}

#[test]
fn random_bit_flips_in_a_tree_never_make_verify_panic() {
    let heap = anonymous_heap("verify", 16 << 20);
    let tree = grown_tree(&heap);
    let blocks = tree.blocks().unwrap();
    let reported = flip_bits(&heap, &blocks, 29, 200, || tree.verify());
    assert!(reported > 0, "some flips must be seen");
    assert!(tree.verify().is_healthy(), "every flip was undone");
}
