//! Deterministic schedules of writers beside a split or merge paused at a chosen point (test
//! builds only), on real threads: a paused operation blocks in the interleaving hook
//! ([`super::test_interleaving`]) until the test resumes it. They show that a split or merge locks
//! only the nodes it changes (a writer elsewhere completes while it is paused), that writers
//! of the same nodes wait and then agree with a `BTreeMap` model, and that a split or merge
//! whose nodes changed between its plan and its locks plans again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use pmem_ordering::{Hardware, Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use super::layout::{sibling_offset, NodeImage};
use super::test_interleaving::{with_hook, Point};
use super::{FastFair, FastFairConfig, ShiftPolicy};

type Tree = FastFair<Hardware>;
type Model = BTreeMap<u64, u64>;

/// Long enough for any writer that is not blocked to finish on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// A tree of 128-byte nodes (four entries, so three levels and more) holding `keys`, in a
/// heap with lanes for several transactions at once, and its model.
fn tree(policy: ShiftPolicy, keys: impl IntoIterator<Item = u64>) -> (&'static Tree, Model) {
    let pool = Pool::anonymous("fastfair-writers", 2 << 20, &PoolOptions::new()).unwrap();
    let config = HeapConfig {
        lanes: 4,
        lane_log_bytes: 16 << 10,
        chunk_size: 4096,
    };
    let heap = Box::leak(Box::new(
        Heap::create(pool, config, FencePolicy::Batched).unwrap(),
    ));
    let config = FastFairConfig {
        node_size: 128,
        policy,
    };
    let heap: &'static Heap<Hardware> = heap;
    let tree = Box::leak(Box::new(
        FastFair::create(heap, heap.pool().root_offset(), config).unwrap(),
    ));
    let mut model = Model::new();
    for k in keys {
        tree.insert(k, k).unwrap();
        model.insert(k, k);
    }
    (tree, model)
}

/// Keys 10, 20, .. 600 in a scrambled order, so nodes are filled unevenly.
fn scrambled() -> impl Iterator<Item = u64> {
    (0..60u64).map(|i| (i * 37 % 60 + 1) * 10)
}

fn leaf_of(tree: &Tree, key: u64) -> u64 {
    *tree.lock_free_path(key).unwrap().0.last().unwrap()
}

fn count(tree: &Tree, node: u64) -> usize {
    tree.view(node).unwrap().count()
}

fn image(tree: &Tree, node: u64) -> NodeImage {
    tree.view(node).unwrap().image()
}

fn insert(tree: &Tree, model: &mut Model, key: u64) {
    assert_eq!(
        tree.insert(key, key).unwrap(),
        model.insert(key, key).is_none()
    );
}

/// Insert absent keys just above `key` (absent itself) into its leaf until the leaf is full:
/// then an insert of `key` splits it. `None` if the leaf has no room for them below its high
/// key.
fn fill_leaf_of(tree: &Tree, model: &mut Model, key: u64) -> Option<u64> {
    let leaf = leaf_of(tree, key);
    while count(tree, leaf) < tree.capacity() {
        let high = tree.view(leaf).unwrap().high();
        let filler = (key + 1..high).find(|k| !model.contains_key(k))?;
        insert(tree, model, filler);
    }
    (leaf_of(tree, key) == leaf).then_some(leaf)
}

/// The tree's contents agree with the model and its shape checks.
fn agrees(tree: &Tree, model: &Model, what: &str) {
    let got: Model = tree.iter().map(|e| e.unwrap()).collect();
    assert_eq!(&got, model, "{what}: the tree differs from the model");
    assert_eq!(tree.check().unwrap(), model.len() as u64, "{what}");
}

/// An operation on its own thread, paused at the first point `pause_at` accepts.
struct Paused<R> {
    resume: mpsc::Sender<()>,
    thread: JoinHandle<R>,
}

impl<R: Send + 'static> Paused<R> {
    /// Start `op` and wait until it reaches its pause; `points` counts the points it passes
    /// that `pause_at` accepts (the pause and later ones).
    fn start(
        pause_at: impl Fn(Point) -> bool + Send + 'static,
        points: Arc<AtomicUsize>,
        op: impl FnOnce() -> R + Send + 'static,
    ) -> Paused<R> {
        let (paused_tx, paused_rx) = mpsc::channel::<()>();
        let (resume_tx, resume_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut pending = Some((paused_tx, resume_rx));
            let hook = Box::new(move |point: Point| {
                if !pause_at(point) {
                    return;
                }
                points.fetch_add(1, Ordering::SeqCst);
                if let Some((paused, resume)) = pending.take() {
                    paused.send(()).unwrap();
                    let _ = resume.recv();
                }
            });
            with_hook(hook, op)
        });
        paused_rx
            .recv_timeout(PATIENCE)
            .expect("the operation never reached its pause");
        Paused {
            resume: resume_tx,
            thread,
        }
    }

    fn finish(self) -> R {
        self.resume.send(()).unwrap();
        self.thread.join().unwrap()
    }
}

/// Run `op` on a thread of its own: whether it finished within [`PATIENCE`], and the thread.
fn beside<R: Send + 'static>(op: impl FnOnce() -> R + Send + 'static) -> (bool, JoinHandle<R>) {
    let (done_tx, done_rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let result = op();
        let _ = done_tx.send(());
        result
    });
    (done_rx.recv_timeout(PATIENCE).is_ok(), thread)
}

/// A split of a full leaf paused just after it linked the new sibling (holding the locks of
/// the leaf and its parent), and a key elsewhere whose writer's nodes share no stripe with it.
struct PausedSplitSetup {
    tree: &'static Tree,
    model: Model,
    split_key: u64,
    leaf: u64,
    busy: u64,
}

/// Find a leaf to split whose parent has room, its split key, and the stripes it locks.
fn split_setups(policy: ShiftPolicy) -> impl Iterator<Item = PausedSplitSetup> {
    (1..60u64).filter_map(move |i| {
        let (tree, mut model) = tree(policy, scrambled());
        let split_key = i * 10 + 5;
        let leaf = fill_leaf_of(tree, &mut model, split_key)?;
        let changes = tree.split_changes(split_key).unwrap();
        // The leaf and a parent with room: a split that is not a root split.
        (changes.len() == 2).then(|| PausedSplitSetup {
            tree,
            model,
            split_key,
            leaf,
            busy: Tree::stripe_mask(&changes),
        })
    })
}

fn pause_split(setup: &PausedSplitSetup) -> Paused<bool> {
    let (tree, key, link) = (setup.tree, setup.split_key, sibling_offset(setup.leaf));
    Paused::start(
        move |p| matches!(p, Point::SplitWrote(at) if at == link),
        Arc::default(),
        move || tree.insert(key, key).unwrap(),
    )
}

#[test]
fn an_insert_into_another_leaf_completes_while_a_split_is_paused() {
    for policy in ShiftPolicy::ALL {
        let (setup, other) = split_setups(policy)
            .find_map(|setup| {
                let other = (1..600u64).map(|k| k * 10 + 3).find(|&k| {
                    let (path, _) = setup.tree.lock_free_path(k).unwrap();
                    let leaf = *path.last().unwrap();
                    Tree::stripe_mask(&path) & setup.busy == 0
                        && count(setup.tree, leaf) < setup.tree.capacity()
                })?;
                Some((setup, other))
            })
            .expect("a split and an insert elsewhere with disjoint stripes");
        let (tree, mut model) = (setup.tree, setup.model.clone());
        let split = pause_split(&setup);
        let (completed, writer) = beside(move || tree.insert(other, other).unwrap());
        assert!(split.finish(), "{policy:?}: the split's key was absent");
        assert!(
            completed,
            "{policy:?}: an insert of {other} into another leaf waited for a paused split"
        );
        assert!(writer.join().unwrap());
        model.insert(setup.split_key, setup.split_key);
        model.insert(other, other);
        agrees(tree, &model, "an insert beside a split");
    }
}

#[test]
fn a_merge_elsewhere_completes_while_a_split_is_paused() {
    for policy in ShiftPolicy::ALL {
        let (setup, victim) = split_setups(policy)
            .find_map(|setup| {
                let tree = setup.tree;
                let victim = setup.model.keys().copied().find(|&k| {
                    let (path, _) = tree.lock_free_path(k).unwrap();
                    let leaf = *path.last().unwrap();
                    let reads = tree.merge_reads(k).unwrap();
                    path.len() > 1
                        && count(tree, leaf) <= tree.min_fill()
                        && reads.len() >= 3
                        && (Tree::stripe_mask(&path) | Tree::stripe_mask(&reads)) & setup.busy == 0
                })?;
                Some((setup, victim))
            })
            .expect("a split and a merge elsewhere with disjoint stripes");
        let (tree, mut model) = (setup.tree, setup.model.clone());
        let blocks = tree.blocks().unwrap().len();
        let split = pause_split(&setup);
        let (completed, writer) = beside(move || tree.remove(victim).unwrap());
        assert!(split.finish());
        assert!(
            completed,
            "{policy:?}: a merge removing {victim} elsewhere waited for a paused split"
        );
        assert_eq!(writer.join().unwrap(), model.remove(&victim));
        model.insert(setup.split_key, setup.split_key);
        agrees(tree, &model, "a merge beside a split");
        // One node split off, at least one merged away.
        assert!(
            tree.blocks().unwrap().len() <= blocks,
            "{policy:?}: no merge ran"
        );
    }
}

#[test]
fn a_merge_of_the_split_leafs_neighbour_waits_for_the_split_then_both_hold() {
    for policy in ShiftPolicy::ALL {
        let (setup, victim) = split_setups(policy)
            .find_map(|setup| {
                let tree = setup.tree;
                // A key of a neighbour leaf under the same parent, few enough to merge, whose
                // merge reads the split's leaf or parent.
                let victim = setup.model.keys().copied().find(|&k| {
                    let leaf = leaf_of(tree, k);
                    let reads = tree.merge_reads(k).unwrap();
                    leaf != setup.leaf
                        && count(tree, leaf) <= tree.min_fill()
                        && reads.contains(&setup.leaf)
                })?;
                Some((setup, victim))
            })
            .expect("a split and a merge of its leaf's neighbour");
        let (tree, mut model) = (setup.tree, setup.model.clone());
        let split = pause_split(&setup);
        let merge = std::thread::spawn(move || tree.remove(victim).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !merge.is_finished(),
            "{policy:?}: a merge reading a leaf being split ran beside the split"
        );
        assert!(split.finish());
        assert_eq!(merge.join().unwrap(), model.remove(&victim));
        model.insert(setup.split_key, setup.split_key);
        agrees(tree, &model, "a merge after a split of its neighbour");
    }
}

/// Two adjacent leaves under one parent with one free slot, each filled, with a split key
/// each: the first split fills the parent, so the second must split it too.
fn sibling_split_setup(policy: ShiftPolicy) -> (&'static Tree, Model, u64, u64) {
    let (tree, mut model) = tree(policy, scrambled());
    let height = tree.height().unwrap();
    // The nodes of level 1, left to right.
    let mut node = tree.root_node().unwrap();
    for _ in 1..height - 1 {
        node = image(tree, node).leftmost;
    }
    let mut parents = Vec::new();
    while node != 0 {
        parents.push(node);
        node = image(tree, node).sibling;
    }
    for parent in parents {
        let p = image(tree, parent);
        if p.entries.len() != tree.capacity() - 1 {
            continue;
        }
        let (left, right) = (p.leftmost, p.entries[0].1);
        let first_key = |leaf: u64| image(tree, leaf).entries[0].0;
        let (k1, k2) = (first_key(left) + 1, first_key(right) + 1);
        let mut trial = model.clone();
        if fill_leaf_of(tree, &mut trial, k1) == Some(left)
            && fill_leaf_of(tree, &mut trial, k2) == Some(right)
            && count(tree, parent) == tree.capacity() - 1
        {
            model = trial;
            return (tree, model, k1, k2);
        }
        // The fillers went in: keep the model in step and try the next parent.
        model = trial;
    }
    panic!("{policy:?}: no parent with one free slot over two leaves that fill");
}

#[test]
fn racing_splits_of_sibling_leaves_plan_again_when_the_parent_fills() {
    for policy in ShiftPolicy::ALL {
        let (tree, mut model, k1, k2) = sibling_split_setup(policy);
        let height = tree.height().unwrap();
        // The second split plans (its parent has room), then the first runs in full.
        let plans = Arc::new(AtomicUsize::new(0));
        let second = Paused::start(
            |p| matches!(p, Point::SplitPlanned),
            Arc::clone(&plans),
            move || tree.insert(k2, k2).unwrap(),
        );
        insert(tree, &mut model, k1);
        assert!(second.finish());
        model.insert(k2, k2);
        assert!(
            plans.load(Ordering::SeqCst) >= 2,
            "{policy:?}: the second split ran the plan made before its parent filled"
        );
        agrees(tree, &model, "two sibling splits");
        assert!(tree.height().unwrap() >= height);
    }
}

#[test]
fn a_merge_planned_before_its_neighbour_split_runs_the_plan_made_under_its_locks() {
    for policy in ShiftPolicy::ALL {
        let (tree, mut model) = tree(policy, scrambled());
        // A leaf of min_fill entries with a right neighbour under the same parent.
        let victim = model
            .keys()
            .copied()
            .find(|&k| {
                let (path, _) = tree.lock_free_path(k).unwrap();
                let leaf = *path.last().unwrap();
                let parent = image(tree, path[path.len() - 2]);
                path.len() > 2
                    && count(tree, leaf) <= tree.min_fill()
                    && parent.entries.last().is_some_and(|e| e.1 != leaf)
            })
            .expect("a leaf that merges with a right neighbour");
        let right = image(tree, leaf_of(tree, victim)).sibling;
        let plans = Arc::new(AtomicUsize::new(0));
        let merge = Paused::start(
            |p| matches!(p, Point::MergePlanned),
            Arc::clone(&plans),
            move || tree.remove(victim).unwrap(),
        );
        // Split the right neighbour meanwhile.
        let split_key = image(tree, right).entries[0].0 + 1;
        assert_eq!(fill_leaf_of(tree, &mut model, split_key), Some(right));
        insert(tree, &mut model, split_key);
        assert_eq!(merge.finish(), model.remove(&victim));
        assert!(plans.load(Ordering::SeqCst) >= 1);
        agrees(tree, &model, "a merge after its neighbour split");
    }
}
