//! Unit tests of range scans: bulk reads cut around transient duplicates, bulk, whole-leaf
//! and single reads against a model, for small, default and larger node sizes, whole-leaf
//! reads reading each leaf once, and writers run between a scan's read (in place or a bulk
//! copy) and its validation.

use std::collections::BTreeMap;
use std::ops::Bound;

use pmem_ordering::Hardware;
use pmem_undo_log::Heap;

use super::super::test_heap::heap;
use super::super::{FastFairConfig, ShiftPolicy};
use super::*;

/// A bulk read whose cut falls anywhere around a transient duplicate (an interrupted
/// shift's two equal neighbours) hands out the right copy, never the left one, and
/// resumes after it: the copy of a leaf stops one pair past the cut, which shows the
/// duplicate, and then the whole run is copied.
#[test]
fn a_bulk_read_cut_at_a_duplicate_keeps_its_right_copy() {
    use super::super::layout::{entry_offset, value_offset};

    // The left copy pairs key 20 with a stale value.
    let image = [(10, 10), (20, 1500), (20, 20), (30, 30), (40, 40)];
    let expected = [(10, 10), (20, 20), (30, 30), (40, 40)];
    for first_chunk in 0..=expected.len() {
        let heap = heap();
        let tree =
            FastFair::create(&heap, heap.pool().root_offset(), FastFairConfig::default()).unwrap();
        for k in [10, 20, 30, 40] {
            tree.insert(k, k).unwrap();
        }
        let leaf = tree.root_node().unwrap();
        let pool = heap.pool();
        for (slot, (k, v)) in image.into_iter().enumerate() {
            pool.persist(pool.store_u64(entry_offset(leaf, slot), k).unwrap());
            pool.persist(pool.store_u64(value_offset(leaf, slot), v).unwrap());
        }
        let mut range = tree.range(..);
        let mut got = Vec::new();
        assert_eq!(range.next_into(&mut got, first_chunk).unwrap(), first_chunk);
        assert_eq!(got, expected[..first_chunk], "cut after {first_chunk}");
        let rest = range.next_into(&mut got, 10).unwrap();
        assert_eq!(rest, expected.len() - first_chunk);
        assert_eq!(got, expected, "cut after {first_chunk}");
    }
}

/// `next`, handing pairs out in place, skips a transient duplicate's left copy wherever the
/// duplicate lies (the last two slots of a full node included, where the look past a pair
/// stops at the node's end), from any start key.
#[test]
fn a_scan_in_place_keeps_a_duplicates_right_copy() {
    use super::super::layout::{entry_offset, value_offset};

    // The left copy pairs its key with a stale value; 128-byte nodes hold four entries.
    let images: [&[(u64, u64)]; 3] = [
        &[(10, 10), (20, 1500), (20, 20), (30, 30)],
        &[(10, 10), (20, 20), (30, 1500), (30, 30)],
        &[(10, 1500), (10, 10), (20, 20)],
    ];
    for image in images {
        let heap = heap();
        let config = FastFairConfig {
            node_size: 128,
            policy: ShiftPolicy::Fast,
        };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        let mut expected: Vec<(u64, u64)> = image.iter().copied().filter(|p| p.1 < 1000).collect();
        expected.dedup_by_key(|p| p.0);
        for &(k, v) in &expected {
            tree.insert(k, v).unwrap();
        }
        let leaf = tree.root_node().unwrap();
        let pool = heap.pool();
        for (slot, &(k, v)) in image.iter().enumerate() {
            pool.persist(pool.store_u64(entry_offset(leaf, slot), k).unwrap());
            pool.persist(pool.store_u64(value_offset(leaf, slot), v).unwrap());
        }
        for start in 0..=35 {
            let got: Vec<(u64, u64)> = tree.range(start..).map(Result::unwrap).collect();
            let want: Vec<(u64, u64)> = expected.iter().copied().filter(|p| p.0 >= start).collect();
            assert_eq!(got, want, "{image:?} from {start}");
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// A range read in bulk chunks of any size (0 standing for one `next`), which stop in
    /// the middle of leaves and resume there, returns exactly the model's pairs of the
    /// range, then nothing more: with small nodes, whose leaves `next` reads into the
    /// range's own chunk, and with large ones, whose leaves it hands out in pieces.
    #[test]
    fn bulk_and_single_reads_return_the_range(
        node_size in proptest::sample::select(vec![128u64, 1024]),
        keys in proptest::collection::vec(0u64..300, 0..150),
        start in 0u64..320,
        end in 0u64..320,
        chunks in proptest::collection::vec(0usize..40, 1..12),
    ) {
        let heap = heap();
        let config = FastFairConfig { node_size, policy: ShiftPolicy::Fast };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        let mut model = BTreeMap::new();
        for k in keys {
            tree.upsert(k, k * 3).unwrap();
            model.insert(k, k * 3);
        }
        let expected: Vec<(u64, u64)> =
            model.range(start..end.max(start)).map(|(&k, &v)| (k, v)).collect();
        let mut range = tree.range(start..end.max(start));
        let mut got = Vec::new();
        for &n in chunks.iter().cycle() {
            if n == 0 {
                match range.next() {
                    Some(pair) => got.push(pair.unwrap()),
                    None => break,
                }
            } else {
                let before = got.len();
                let added = range.next_into(&mut got, n).unwrap();
                proptest::prop_assert_eq!(got.len() - before, added);
                if added < n {
                    break;
                }
            }
        }
        proptest::prop_assert!(range.next().is_none());
        proptest::prop_assert_eq!(range.next_into(&mut got, 5).unwrap(), 0);
        proptest::prop_assert_eq!(got, expected);
    }

    /// Whole-leaf reads (`next_leaves`) of any minimum (0 included), mixed with `next_into`
    /// chunks (which stop inside a leaf and resume there) and single `next`s, over a tree with
    /// removed keys and a range of any bounds (empty ones, and ones starting and ending
    /// inside leaves), return exactly the model's pairs of the range, then nothing more. Each
    /// whole-leaf read appends at least its minimum unless the range ends, less than the
    /// minimum plus a leaf's capacity, and stops at a leaf's end: the next pair of the range
    /// lies in another leaf.
    #[test]
    fn whole_leaf_reads_return_the_range(
        node_size in proptest::sample::select(vec![128u64, 512, 1024]),
        keys in proptest::collection::vec(0u64..300, 0..150),
        removed in proptest::collection::vec(0u64..300, 0..60),
        start in 0u64..320,
        end in 0u64..320,
        (start_kind, end_kind) in (0u8..3, 0u8..3),
        steps in proptest::collection::vec((0u8..4, 0usize..40), 1..12),
    ) {
        let heap = heap();
        let config = FastFairConfig { node_size, policy: ShiftPolicy::Fast };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        let mut model = BTreeMap::new();
        for k in keys {
            tree.upsert(k, k * 3).unwrap();
            model.insert(k, k * 3);
        }
        for k in removed {
            proptest::prop_assert_eq!(tree.remove(k).unwrap(), model.remove(&k));
        }
        let bound = |kind: u8, k: u64| match kind {
            0 => Bound::Included(k),
            1 => Bound::Excluded(k),
            _ => Bound::Unbounded,
        };
        let bounds = (bound(start_kind, start), bound(end_kind, end));
        let expected: Vec<(u64, u64)> =
            model.iter().filter(|(k, _)| bounds.contains(*k)).map(|(&k, &v)| (k, v)).collect();
        let mut range = tree.range(bounds);
        let mut got = Vec::new();
        for &(kind, n) in steps.iter().cycle() {
            let before = got.len();
            match kind {
                // Whole leaves, twice as often as the others.
                0 | 1 => {
                    let added = range.next_leaves(&mut got, n).unwrap();
                    proptest::prop_assert_eq!(got.len() - before, added);
                    proptest::prop_assert!(added < n.max(1) + tree.capacity());
                    if added < n.max(1) {
                        break;
                    }
                    if let Some(&(next, _)) = expected.get(got.len()) {
                        let (last, _) = got[got.len() - 1];
                        proptest::prop_assert_ne!(
                            tree.lock_free_leaf(last).unwrap().0,
                            tree.lock_free_leaf(next).unwrap().0,
                            "a read stopped between {} and {}, in one leaf", last, next
                        );
                    }
                }
                // At least one pair: a step of 0 repeated forever would read nothing forever.
                2 => {
                    if range.next_into(&mut got, n.max(1)).unwrap() < n.max(1) {
                        break;
                    }
                }
                _ => match range.next() {
                    Some(pair) => got.push(pair.unwrap()),
                    None => break,
                },
            }
        }
        proptest::prop_assert!(range.next().is_none());
        proptest::prop_assert_eq!(range.next_leaves(&mut got, 5).unwrap(), 0);
        proptest::prop_assert_eq!(range.next_into(&mut got, 5).unwrap(), 0);
        proptest::prop_assert_eq!(got, expected);
    }

    /// Dropping left copies keeps, of each run of equal neighbouring keys after `start`,
    /// the rightmost pair, and leaves the pairs before `start` alone.
    #[test]
    fn keep_right_copies_keeps_the_rightmost_of_each_run(
        mut keys in proptest::collection::vec(0u64..12, 0..40),
        start in 0usize..5,
    ) {
        keys.sort_unstable();
        let pairs: Vec<(u64, u64)> =
            keys.iter().enumerate().map(|(i, &k)| (k, i as u64)).collect();
        let start = start.min(pairs.len());
        let mut expected = pairs[..start].to_vec();
        for (i, &pair) in pairs.iter().enumerate().skip(start) {
            if pairs.get(i + 1).is_none_or(|next| next.0 != pair.0) {
                expected.push(pair);
            }
        }
        let mut out = pairs.clone();
        keep_right_copies(&mut out, start);
        proptest::prop_assert_eq!(out, expected);
    }
}

/// How a scan under a writer takes its pairs.
#[derive(Clone, Copy, Debug)]
enum Scan {
    /// One `next` per pair, read in place.
    InPlace,
    /// `next_into` chunks of this many pairs (cut inside leaves).
    Chunks(usize),
    /// `next_leaves` with this minimum (whole leaves).
    Leaves(usize),
}

/// All pairs of `tree`, taken as `scan` says.
fn scan_all(tree: &Tree, scan: Scan) -> Vec<(u64, u64)> {
    let mut range = tree.range(..);
    let mut got = Vec::new();
    match scan {
        Scan::InPlace => got.extend(range.map(Result::unwrap)),
        Scan::Chunks(n) => while range.next_into(&mut got, n).unwrap() == n {},
        Scan::Leaves(n) => while range.next_leaves(&mut got, n).unwrap() >= n.max(1) {},
    }
    got
}

/// A scan taking its pairs as `scan` says, over a tree of 128-byte nodes (four entries: many
/// leaves), with a writer operation run at its `inject_at`th read (a run's bounds, a pair read
/// in place, or a leaf's run copied, before the read's validation): every pair handed out is
/// one the model had before or after the writer, in ascending key order, and every key
/// present both before and after is handed out. Returns whether the writer ran and whether it
/// changed the node being read.
fn scan_with_writer_at(
    policy: ShiftPolicy,
    scan: Scan,
    writer: &Writer,
    inject_at: usize,
) -> (bool, bool) {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::super::test_interleaving::{with_hook, Point};

    let heap: &'static Heap<Hardware> = Box::leak(Box::new(heap()));
    let config = FastFairConfig {
        node_size: 128,
        policy,
    };
    let tree: &'static Tree = Box::leak(Box::new(
        FastFair::create(heap, heap.pool().root_offset(), config).unwrap(),
    ));
    for k in (10..=300).step_by(10) {
        tree.insert(k, k).unwrap();
    }
    let before: BTreeMap<u64, u64> = tree.iter().map(Result::unwrap).collect();
    let reads = Rc::new(Cell::new(0usize));
    let outcome = Rc::new(Cell::new((false, false)));
    let hook = {
        let (reads, outcome, writer) = (Rc::clone(&reads), Rc::clone(&outcome), Rc::clone(writer));
        Box::new(move |point: Point| {
            let Point::ScanRead(node) = point else { return };
            let index = reads.get();
            reads.set(index + 1);
            if index != inject_at {
                return;
            }
            let mut old = vec![0u8; 128];
            tree.pool().read_bytes(node, &mut old).unwrap();
            writer(tree);
            let mut new = vec![0u8; 128];
            tree.pool().read_bytes(node, &mut new).unwrap();
            outcome.set((true, old != new));
        })
    };
    let got = with_hook(hook, || scan_all(tree, scan));
    let after: BTreeMap<u64, u64> = tree.iter().map(Result::unwrap).collect();
    let what = format!("{policy:?}, {scan:?}, writer at read {inject_at}");
    assert!(
        got.windows(2).all(|w| w[0].0 < w[1].0),
        "{what}: not ascending: {got:?}"
    );
    for &(k, v) in &got {
        assert!(
            before.get(&k) == Some(&v) || after.get(&k) == Some(&v),
            "{what}: ({k}, {v}) was in neither model"
        );
    }
    let got: BTreeMap<u64, u64> = got.into_iter().collect();
    for k in before.keys().filter(|k| after.contains_key(k)) {
        assert!(
            got.contains_key(k),
            "{what}: {k}, present throughout, was missed"
        );
    }
    tree.check().unwrap();
    outcome.get()
}

type Tree = FastFair<Hardware>;
/// A writer operation to run under a scan.
type Writer = std::rc::Rc<dyn Fn(&Tree)>;

/// The writer operations run under a scan: inserts that shift a leaf's entries or split it
/// (up to a new root), removes that shift or merge leaves (down to a root collapse), and an
/// upsert of a present key.
fn writers() -> Vec<Writer> {
    vec![
        std::rc::Rc::new(|t: &Tree| assert!(t.insert(15, 1).unwrap())),
        std::rc::Rc::new(|t: &Tree| assert!(t.insert(155, 1).unwrap())),
        std::rc::Rc::new(|t: &Tree| {
            for k in 151..=159 {
                assert!(t.insert(k, 1).unwrap());
            }
        }),
        std::rc::Rc::new(|t: &Tree| assert_eq!(t.remove(20).unwrap(), Some(20))),
        std::rc::Rc::new(|t: &Tree| assert_eq!(t.remove(150).unwrap(), Some(150))),
        std::rc::Rc::new(|t: &Tree| {
            for k in (100..=250).step_by(10) {
                assert_eq!(t.remove(k).unwrap(), Some(k));
            }
        }),
        std::rc::Rc::new(|t: &Tree| {
            for k in (10..=290).step_by(10) {
                assert_eq!(t.remove(k).unwrap(), Some(k));
            }
        }),
        std::rc::Rc::new(|t: &Tree| assert_eq!(t.upsert(160, 7).unwrap(), Some(160))),
    ]
}

/// Every writer of [`writers`] at each of the first `injects` reads of each scan of `scans`,
/// under both shift policies (each schedule checked by [`scan_with_writer_at`]): how many
/// schedules ran their writer, and in how many it changed the node being read.
fn schedules(scans: &[Scan], injects: usize) -> (usize, usize) {
    let (mut injected, mut changed) = (0, 0);
    for policy in [ShiftPolicy::Fast, ShiftPolicy::PerShift] {
        for &scan in scans {
            for writer in &writers() {
                for inject_at in 0..injects {
                    let (ran, under) = scan_with_writer_at(policy, scan, writer, inject_at);
                    injected += usize::from(ran);
                    changed += usize::from(under);
                }
            }
        }
    }
    (injected, changed)
}

/// Writers run between a scan's read in place and its validation, at every read of the
/// scan ([`writers`]). The scan hands out each pair at most once, in order, only pairs the
/// tree held, and every key held throughout.
#[test]
fn a_writer_under_a_scan_in_place_is_caught_or_harmless() {
    // A scan of the 30 keys reads in place about 40 times; past its last read the writer
    // never runs.
    let (injected, changed) = schedules(&[Scan::InPlace], 45);
    assert!(
        injected > 500,
        "the writers ran in {injected} schedules only"
    );
    assert!(
        changed > 50,
        "a writer changed the node being read in {changed} only"
    );
}

/// Writers ([`writers`]) run between a bulk scan's copy of a leaf's run and its validation, at
/// every copy of the scan: whole-leaf reads (`next_leaves`, of one leaf and of several a
/// call) and chunks cut inside leaves (`next_into`). The scan hands out each pair at most
/// once, in order, only pairs the tree held, and every key held throughout.
#[test]
fn a_writer_under_a_bulk_scan_is_caught_or_harmless() {
    // A scan of the 30 keys copies fewer than 25 runs (chunks of 3 read a leaf again where
    // one stopped); past its last copy the writer never runs.
    let scans = [Scan::Leaves(1), Scan::Leaves(6), Scan::Chunks(3)];
    let (injected, changed) = schedules(&scans, 25);
    assert!(
        injected > 400,
        "the writers ran in {injected} schedules only"
    );
    assert!(
        changed > 50,
        "a writer changed the node being read in {changed} only"
    );
}

/// A scan taken in whole leaves (`next_leaves`, any minimum) copies each leaf of its range
/// once, where chunks cut inside leaves (`next_into`) copy some twice: the tree of 128-byte
/// nodes has many leaves.
#[test]
fn whole_leaf_reads_copy_each_leaf_once() {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::super::test_interleaving::{with_hook, Point};

    let heap = heap();
    let config = FastFairConfig {
        node_size: 128,
        policy: ShiftPolicy::Fast,
    };
    let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
    for k in (10..=600).step_by(10) {
        tree.insert(k, k).unwrap();
    }
    let expected: Vec<(u64, u64)> = tree.range(95..).map(Result::unwrap).collect();
    // The leaves copied by a scan from 95 taking its pairs `take` at a time, `whole` or cut,
    // in order of their copies.
    let copies = |whole: bool, take: usize| {
        let copied = Rc::new(RefCell::new(Vec::new()));
        let hook = {
            let copied = Rc::clone(&copied);
            Box::new(move |point: Point| {
                if let Point::ScanRead(node) = point {
                    copied.borrow_mut().push(node);
                }
            })
        };
        let got = with_hook(hook, || {
            let mut range = tree.range(95..);
            let mut got = Vec::new();
            if whole {
                while range.next_leaves(&mut got, take).unwrap() >= take.max(1) {}
            } else {
                while range.next_into(&mut got, take).unwrap() == take {}
            }
            got
        });
        assert_eq!(got, expected, "whole {whole}, {take} at a time");
        copied.take()
    };
    let once = copies(true, 1);
    assert!(once.len() > 10, "only {} leaves copied", once.len());
    let mut distinct = once.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), once.len(), "a leaf copied twice: {once:?}");
    for take in [0, 3, 7, 16] {
        assert_eq!(copies(true, take), once, "whole leaves, {take} at a time");
    }
    assert!(
        copies(false, 3).len() > once.len(),
        "chunks cut inside leaves copied no leaf twice"
    );
}
