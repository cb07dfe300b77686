//! A deterministic interleaving harness for the lock-free lookup: test builds only.
//!
//! [`FastFair::get`]'s descent calls [`at`] after it reads a node and after it validates the
//! read (the calls compile to nothing outside `cfg(test)`). The test below drives the real
//! tree code: for every writer operation of a small set (shifts, splits, merges, a root
//! change), every lookup key and every step of the descent, it runs the writer operation to
//! completion between the reader's read of a node and its validation, then checks that
//!
//! * a validation that passes saw the node unchanged (else a writer changed a node without
//!   marking its stripe: a torn or stale read would be used);
//! * the lookup returns the key's value before or after the writer's operation, per a
//!   `BTreeMap` model.
//!
//! Interleavings inside one writer operation (a reader between two stores of a shift) are the
//! loom models' part (`sync::model`), on the same protocol code.

use std::cell::RefCell;

/// Where the reader is.
#[derive(Clone, Copy, Debug)]
pub(super) enum Point {
    /// It has read the node at this offset and not yet validated the read.
    Read(u64),
    /// A scan has read, in the leaf at this offset, a run's bounds or a pair to hand out in
    /// place, or a run copied for a bulk read, and not yet validated the read.
    ScanRead(u64),
    /// It validated its last read: whether the read stands.
    Validated(bool),
    /// A split, holding the locks of the nodes it changes, has just written (in its
    /// transaction) the range at this offset.
    SplitWrote(u64),
    /// A merge holds the locks of the nodes it reads and changes, and is about to change them.
    MergeLocked,
    /// A split has found its path and the nodes to lock, and holds no lock yet.
    SplitPlanned,
    /// A merge has planned which nodes to lock, and holds no lock yet.
    MergePlanned,
}

type Hook = Box<dyn FnMut(Point)>;

thread_local! {
    static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

/// Report `point` to this thread's hook, if one is set. The hook is taken out while it runs,
/// so a writer operation it runs reaches no hook.
pub(super) fn at(point: Point) {
    let hook = HOOK.with(|h| h.borrow_mut().take());
    if let Some(mut hook) = hook {
        hook(point);
        HOOK.with(|h| *h.borrow_mut() = Some(hook));
    }
}

/// Run `f` with `hook` set on this thread.
pub(super) fn with_hook<R>(hook: Hook, f: impl FnOnce() -> R) -> R {
    HOOK.with(|h| *h.borrow_mut() = Some(hook));
    let result = f();
    HOOK.with(|h| *h.borrow_mut() = None);
    result
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::collections::BTreeMap;
    use std::rc::Rc;

    use pmem_ordering::Hardware;
    use pmem_undo_log::Heap;

    use super::super::test_heap::heap;
    use super::super::{FastFair, FastFairConfig, ShiftPolicy};
    use super::*;

    type Tree = FastFair<Hardware>;
    /// A node's offset and its bytes.
    type NodeBytes = (u64, Vec<u8>);

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Upsert(u64, u64),
        /// Remove every key in the range (a writer's run of merges, down to a root collapse).
        RemoveRun(std::ops::RangeInclusive<u64>),
        /// Insert every key in the range (a run of splits, up to a new root).
        InsertRun(std::ops::RangeInclusive<u64>),
    }

    impl Op {
        fn run(&self, tree: &Tree, model: &mut BTreeMap<u64, u64>) {
            match *self {
                Op::Insert(k) => {
                    let inserted = tree.insert(k, k * 7).unwrap();
                    assert_eq!(inserted, model.insert(k, k * 7).is_none());
                }
                Op::Remove(k) => assert_eq!(tree.remove(k).unwrap(), model.remove(&k)),
                Op::Upsert(k, v) => assert_eq!(tree.upsert(k, v).unwrap(), model.insert(k, v)),
                Op::RemoveRun(ref keys) => {
                    for k in keys.clone() {
                        Op::Remove(k).run(tree, model);
                    }
                }
                Op::InsertRun(ref keys) => {
                    for k in keys.clone() {
                        Op::Insert(k).run(tree, model);
                    }
                }
            }
        }
    }

    /// What one schedule showed.
    #[derive(Default)]
    struct Seen {
        injected: bool,
        invalidated: bool,
        nodes_before: usize,
        nodes_after: usize,
        height_before: u64,
        height_after: u64,
    }

    /// Whether a node changed from `old` to `new` only as a writer may without marking its
    /// stripe: not at all, or by one failure-atomic store of one value word (an upsert of a
    /// present key), which readers see whole either way.
    fn unmarked_change_allowed(old: &[u8], new: &[u8]) -> bool {
        let changed: Vec<usize> = old
            .chunks_exact(8)
            .zip(new.chunks_exact(8))
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .map(|(word, _)| word)
            .collect();
        // Words 0-7 are the header; then each entry is a key word and a value word.
        match changed[..] {
            [] => true,
            [word] => word >= 8 && (word - 8) % 2 == 1,
            _ => false,
        }
    }

    /// A tree of 128-byte nodes (four entries: three levels for the keys below) and its model.
    fn tree(policy: ShiftPolicy) -> (&'static Tree, BTreeMap<u64, u64>) {
        let heap: &'static Heap<Hardware> = Box::leak(Box::new(heap()));
        let config = FastFairConfig {
            node_size: 128,
            policy,
        };
        let tree = Box::leak(Box::new(
            FastFair::create(heap, heap.pool().root_offset(), config).unwrap(),
        ));
        let mut model = BTreeMap::new();
        for k in (10..=200).step_by(10) {
            tree.insert(k, k).unwrap();
            model.insert(k, k);
        }
        (tree, model)
    }

    /// Look `key` up with `op` run between the reader's read of its `inject_at`th node and
    /// the validation of that read.
    fn schedule(policy: ShiftPolicy, op: Op, key: u64, inject_at: usize) -> Seen {
        let (tree, model) = tree(policy);
        let before = model.get(&key).copied();
        let seen = Rc::new(RefCell::new(Seen {
            nodes_before: tree.blocks().unwrap().len(),
            height_before: tree.height().unwrap(),
            ..Seen::default()
        }));
        let reads = Cell::new(0usize);
        // The node read just before the writer ran, and its bytes then.
        let snapshot: Rc<RefCell<Option<NodeBytes>>> = Rc::default();
        let model_after = Rc::new(RefCell::new(model.clone()));
        let what = format!("{policy:?} {op:?}, get({key}) at read {inject_at}");
        let hook = {
            let what = what.clone();
            let (seen, snapshot, model_after) = (
                Rc::clone(&seen),
                Rc::clone(&snapshot),
                Rc::clone(&model_after),
            );
            Box::new(move |point: Point| match point {
                Point::Read(node) => {
                    let index = reads.get();
                    reads.set(index + 1);
                    if index != inject_at {
                        return;
                    }
                    let mut bytes = vec![0u8; tree.node_size() as usize];
                    tree.pool().read_bytes(node, &mut bytes).unwrap();
                    op.run(tree, &mut model_after.borrow_mut());
                    *snapshot.borrow_mut() = Some((node, bytes));
                    seen.borrow_mut().injected = true;
                }
                Point::Validated(valid) => {
                    let Some((node, bytes)) = snapshot.borrow_mut().take() else {
                        return;
                    };
                    let mut now = vec![0u8; bytes.len()];
                    tree.pool().read_bytes(node, &mut now).unwrap();
                    assert!(
                        !valid || unmarked_change_allowed(&bytes, &now),
                        "{what}: the read of node {node:#x} validated though a writer changed \
                         the node"
                    );
                    seen.borrow_mut().invalidated = !valid;
                }
                _ => {}
            })
        };
        let got = with_hook(hook, || tree.get(key).unwrap());
        let after = model_after.borrow().get(&key).copied();
        assert!(
            got == before || got == after,
            "{what}: got {got:?}, the model had {before:?} before and {after:?} after"
        );
        let mut seen = Rc::try_unwrap(seen)
            .ok()
            .expect("the hook is gone")
            .into_inner();
        seen.nodes_after = tree.blocks().unwrap().len();
        seen.height_after = tree.height().unwrap();
        assert_eq!(tree.check().unwrap(), model_after.borrow().len() as u64);
        seen
    }

    #[test]
    fn a_writer_between_a_read_and_its_validation_is_caught_or_harmless() {
        let ops = [
            Op::Insert(15),
            Op::Insert(5),
            Op::Insert(205),
            Op::Insert(105),
            Op::Remove(10),
            Op::Remove(20),
            Op::Remove(100),
            Op::Remove(200),
            Op::Upsert(100, 1),
            Op::RemoveRun(10..=180),
            Op::InsertRun(201..=300),
        ];
        let keys = [5, 10, 15, 20, 100, 105, 150, 200, 205, 250];
        let (mut injected, mut invalidated, mut splits, mut merges, mut root_changes) =
            (0, 0, 0, 0, 0);
        for policy in ShiftPolicy::ALL {
            for op in &ops {
                for key in keys {
                    for inject_at in 0..3 {
                        let seen = schedule(policy, op.clone(), key, inject_at);
                        injected += usize::from(seen.injected);
                        invalidated += usize::from(seen.invalidated);
                        splits += usize::from(seen.nodes_after > seen.nodes_before);
                        merges += usize::from(seen.nodes_after < seen.nodes_before);
                        root_changes += usize::from(seen.height_after != seen.height_before);
                    }
                }
            }
        }
        // The schedules must have exercised what they claim to.
        assert!(injected > 0 && invalidated > 0 && invalidated < injected);
        assert!(splits > 0, "no writer operation split a node");
        assert!(merges > 0, "no writer operation merged nodes");
        assert!(root_changes > 0, "no writer operation changed the root");
    }
}
