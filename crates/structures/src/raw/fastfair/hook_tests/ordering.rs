//! Where the hook runs, for every shift policy and for each write path (in-leaf insert, upsert
//! in place, split, in-leaf remove, merge): after the write is decided and before any store of
//! the operation, while a reader still sees the old state; its `Err` stores nothing and leaves
//! the tree as it was; it adds no fence, and the bit it flushed is durable when the call
//! returns.

use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::BTreeMap;

use super::fixture::{
    contents, fences_of, is_store, sim_heap, sim_pool, small_tree, Bits, SimTree,
};
use pmem_ordering::sim::{Event, SimBackend};
use pmem_ordering::Pool;

use crate::fastfair::{FastFairError, ShiftPolicy};

/// The write a scenario makes.
#[derive(Clone, Copy, Debug)]
enum Op {
    Insert(u64),
    Upsert(u64),
    Remove(u64),
}

/// A tree built from `setup`'s keys, then one write whose path shows in the node count.
struct Scenario {
    name: &'static str,
    setup: &'static [u64],
    op: Op,
    /// How the write changes the number of blocks: more for a split, fewer for a merge.
    blocks: Ordering,
}

const SCENARIOS: [Scenario; 7] = [
    Scenario {
        name: "insert into the root leaf",
        setup: &[1, 2, 3],
        op: Op::Insert(4),
        blocks: Ordering::Equal,
    },
    Scenario {
        name: "insert into a leaf below the root",
        setup: &[1, 2, 3, 4, 5],
        op: Op::Insert(0),
        blocks: Ordering::Equal,
    },
    Scenario {
        name: "upsert in place",
        setup: &[1, 2, 3],
        op: Op::Upsert(2),
        blocks: Ordering::Equal,
    },
    Scenario {
        name: "insert that splits the root leaf",
        setup: &[1, 2, 3, 4],
        op: Op::Insert(5),
        blocks: Ordering::Greater,
    },
    Scenario {
        name: "remove from the root leaf",
        setup: &[1, 2, 3],
        op: Op::Remove(2),
        blocks: Ordering::Equal,
    },
    Scenario {
        name: "remove from a leaf below the root",
        setup: &[1, 2, 3, 4, 5],
        op: Op::Remove(4),
        blocks: Ordering::Equal,
    },
    Scenario {
        name: "remove that merges and collapses the root",
        setup: &[1, 2, 3, 4, 5],
        op: Op::Remove(1),
        blocks: Ordering::Less,
    },
];

/// The value a set-up key holds.
fn setup_value(key: u64) -> u64 {
    0xA000 + key
}

/// The value a scenario's put writes: a word no other store of the test makes.
fn new_value(key: u64) -> u64 {
    0x5EED_0000_0000_0000 | key
}

/// The record whose bit a put's hook sets.
const PUT_RECORD: u64 = 7;
/// The record whose bit a remove's hook clears (set durably before).
const REMOVED_RECORD: u64 = 8;

/// The model after `op` on `map`, and the value `op` returns.
fn model_after(map: &BTreeMap<u64, u64>, op: Op) -> (BTreeMap<u64, u64>, Option<u64>) {
    let mut after = map.clone();
    let old = match op {
        Op::Insert(k) => {
            let old = map.get(&k).copied();
            if old.is_none() {
                after.insert(k, new_value(k));
            }
            old
        }
        Op::Upsert(k) => after.insert(k, new_value(k)),
        Op::Remove(k) => after.remove(&k),
    };
    (after, old)
}

/// Build the scenario's tree under `policy`.
fn set_up(tree: &SimTree, scenario: &Scenario) {
    for &k in scenario.setup {
        assert!(tree.insert(k, setup_value(k)).expect("a set-up insert"));
    }
}

/// What a hooked call saw: the event count when its hook began, and what a reader found then.
struct Seen {
    hook_event: Cell<Option<u64>>,
    reader_saw: Cell<Option<Option<u64>>>,
}

/// Run `scenario`'s write with a hook that records where it ran and flushes a bit.
fn hooked_call(tree: &SimTree, bits: Bits<'_>, op: Op, seen: &Seen) -> Option<u64> {
    let pool = tree.heap().pool();
    let observe = |key: u64| -> Result<(), FastFairError> {
        seen.hook_event.set(Some(pool.sim().event_count()));
        seen.reader_saw.set(Some(tree.get(key)?));
        Ok(())
    };
    match op {
        Op::Insert(k) | Op::Upsert(k) => {
            let replace = matches!(op, Op::Upsert(_));
            tree.put_with(k, new_value(k), replace, |_old| {
                observe(k)?;
                bits.mark(PUT_RECORD, true);
                Ok::<(), FastFairError>(())
            })
        }
        Op::Remove(k) => tree.remove_with(k, |_old| {
            observe(k)?;
            bits.mark(REMOVED_RECORD, false);
            Ok::<(), FastFairError>(())
        }),
    }
    .expect("the hooked write")
}

/// The same write through the public, hook-free operation.
fn plain_call(tree: &SimTree, op: Op) -> Option<u64> {
    match op {
        Op::Insert(k) => {
            let inserted = tree.insert(k, new_value(k)).expect("the insert");
            // An insert of a present key returns its value through a lookup here.
            if inserted {
                None
            } else {
                tree.get(k).expect("a lookup")
            }
        }
        Op::Upsert(k) => tree.upsert(k, new_value(k)).expect("the upsert"),
        Op::Remove(k) => tree.remove(k).expect("the remove"),
    }
}

/// The hook runs before every store of the write, sees the old state through a reader, adds
/// no fence, and its bit is durable when the call returns; the write takes the scenario's path.
fn hook_runs_first_and_costs_no_fence(policy: ShiftPolicy, scenario: &Scenario) {
    let name = format!("{} under {}", scenario.name, policy.name());
    // The plain write on a twin tree: its fences, result and contents.
    let twin_pool = sim_pool();
    let twin_heap = sim_heap(&twin_pool);
    let twin = small_tree(&twin_heap, policy);
    set_up(&twin, scenario);
    let (plain_old, plain_fences) = fences_of(|| plain_call(&twin, scenario.op));

    let pool = sim_pool();
    let heap = sim_heap(&pool);
    let tree = small_tree(&heap, policy);
    set_up(&tree, scenario);
    let bits = Bits::new(&pool);
    bits.mark_durably(REMOVED_RECORD, true);
    let before = contents(&tree);
    let blocks_before = tree.blocks().expect("the tree's blocks").len();
    let start = pool.sim().event_count();
    let seen = Seen {
        hook_event: Cell::new(None),
        reader_saw: Cell::new(None),
    };
    let (old, hooked_fences) = fences_of(|| hooked_call(&tree, bits, scenario.op, &seen));

    let (expected, expected_old) = model_after(&before, scenario.op);
    assert_eq!(old, expected_old, "{name}: the returned value");
    assert_eq!(plain_old, expected_old, "{name}: the plain write's value");
    assert_eq!(
        contents(&tree),
        expected,
        "{name}: the tree after the write"
    );
    assert_eq!(
        contents(&twin),
        expected,
        "{name}: the twin after the write"
    );
    tree.check().expect("a well-formed tree");
    let blocks_after = tree.blocks().expect("the tree's blocks").len();
    assert_eq!(
        blocks_after.cmp(&blocks_before),
        scenario.blocks,
        "{name}: blocks {blocks_before} -> {blocks_after}: not the path under test"
    );

    let hook_event = seen.hook_event.get().expect("the hook ran");
    let key = match scenario.op {
        Op::Insert(k) | Op::Upsert(k) | Op::Remove(k) => k,
    };
    assert_eq!(
        seen.reader_saw.get(),
        Some(before.get(&key).copied()),
        "{name}: a reader saw the write before the hook ran"
    );
    let trace = pool.sim().trace();
    let (ahead, after_hook) = trace[start as usize..].split_at((hook_event - start) as usize);
    assert!(
        !ahead.iter().any(is_store),
        "{name}: stores before the hook: {ahead:?}"
    );
    let tree_stores = after_hook
        .iter()
        .filter(|e| is_store(e))
        .filter(|e| !is_bit_store(&pool, e))
        .count();
    assert!(
        tree_stores > 0,
        "{name}: the write stored nothing after the hook"
    );
    if let Op::Insert(k) | Op::Upsert(k) = scenario.op {
        let value = new_value(k).to_le_bytes();
        let stored = after_hook.iter().any(|e| {
            matches!(e, Event::Store { chunk, .. }
                if chunk.mask == 0xFF && chunk.data == value)
        });
        assert!(stored, "{name}: no store of the new value after the hook");
    }

    let (record, on) = match scenario.op {
        Op::Insert(_) | Op::Upsert(_) => (PUT_RECORD, true),
        Op::Remove(_) => (REMOVED_RECORD, false),
    };
    assert_eq!(
        bits.durable(record),
        on,
        "{name}: the hook's bit is not durable when the call returns"
    );
    assert_eq!(
        hooked_fences, plain_fences,
        "{name}: the hook changed the number of fences"
    );
    assert!(hooked_fences > 0, "{name}: the write issued no fence");
}

/// Whether `event` stores into the bits' words.
fn is_bit_store(pool: &Pool<SimBackend>, event: &Event) -> bool {
    let lo = Bits::offset(pool, 0);
    let hi = Bits::offset(pool, Bits::MAX_RECORD) + 8;
    match event {
        Event::Store { chunk, .. } => (lo..hi).contains(&chunk.word),
        _ => false,
    }
}

/// The hook's own error type, to check that a caller's `E` passes through.
#[derive(Debug)]
enum HookError {
    Refused,
    Tree(FastFairError),
}

impl From<FastFairError> for HookError {
    fn from(e: FastFairError) -> Self {
        HookError::Tree(e)
    }
}

/// A hook that refuses: the error comes back, nothing was stored, the tree is unchanged.
fn refusing_hook_changes_nothing(policy: ShiftPolicy, scenario: &Scenario) {
    let name = format!("{} under {}", scenario.name, policy.name());
    let pool = sim_pool();
    let heap = sim_heap(&pool);
    let tree = small_tree(&heap, policy);
    set_up(&tree, scenario);
    let before = contents(&tree);
    let blocks_before = tree.blocks().expect("the tree's blocks");
    let len_before = tree.len();
    let start = pool.sim().event_count();
    let called = Cell::new(false);
    let result = match scenario.op {
        Op::Insert(k) | Op::Upsert(k) => {
            let replace = matches!(scenario.op, Op::Upsert(_));
            tree.put_with(k, new_value(k), replace, |_| {
                called.set(true);
                Err(HookError::Refused)
            })
        }
        Op::Remove(k) => tree.remove_with(k, |_| {
            called.set(true);
            Err(HookError::Refused)
        }),
    };
    assert!(called.get(), "{name}: the hook was not called");
    match result {
        Err(HookError::Refused) => {}
        Err(HookError::Tree(e)) => panic!("{name}: the tree failed instead: {e}"),
        Ok(old) => panic!("{name}: Ok({old:?}) instead of the hook's error"),
    }
    let trace = pool.sim().trace();
    let stores: Vec<_> = trace[start as usize..]
        .iter()
        .filter(|e| is_store(e))
        .collect();
    assert!(
        stores.is_empty(),
        "{name}: a refused write stored {stores:?}"
    );
    assert_eq!(contents(&tree), before, "{name}: the tree changed");
    assert_eq!(tree.len(), len_before, "{name}: the key count changed");
    assert_eq!(
        tree.blocks().expect("the tree's blocks"),
        blocks_before,
        "{name}: the nodes changed"
    );
    tree.check().expect("a well-formed tree");
}

/// An insert of a present key (no replace) calls nothing and changes nothing.
fn insert_of_a_present_key_calls_nothing(policy: ShiftPolicy) {
    let pool = sim_pool();
    let heap = sim_heap(&pool);
    let tree = small_tree(&heap, policy);
    for k in 1..=5 {
        tree.insert(k, setup_value(k)).expect("a set-up insert");
    }
    for k in [1, 5] {
        let start = pool.sim().event_count();
        let result = tree.put_with(k, new_value(k), false, |_| -> Result<(), FastFairError> {
            panic!("the hook of an insert of present key {k} was called")
        });
        assert_eq!(result.expect("the insert"), Some(setup_value(k)));
        let trace = pool.sim().trace();
        assert!(
            !trace[start as usize..].iter().any(is_store),
            "key {k}: a store"
        );
    }
    // A missing key's remove calls nothing either.
    let result = tree.remove_with(9, |_| -> Result<(), FastFairError> {
        panic!("the hook of a remove of a missing key was called")
    });
    assert_eq!(result.expect("the remove"), None);
    // The reserved key is refused before any hook.
    let refused = tree.put_with(u64::MAX, 1, true, |_| -> Result<(), FastFairError> {
        panic!("the hook of the reserved key was called")
    });
    assert!(matches!(refused, Err(FastFairError::ReservedKey(_))));
}

fn every_scenario(policy: ShiftPolicy) {
    for scenario in &SCENARIOS {
        hook_runs_first_and_costs_no_fence(policy, scenario);
        refusing_hook_changes_nothing(policy, scenario);
    }
    insert_of_a_present_key_calls_nothing(policy);
}

#[test]
fn the_hook_runs_before_every_store_under_per_shift() {
    every_scenario(ShiftPolicy::PerShift);
}

#[test]
fn the_hook_runs_before_every_store_under_fast() {
    every_scenario(ShiftPolicy::Fast);
}

#[test]
fn the_hook_runs_before_every_store_under_redo() {
    every_scenario(ShiftPolicy::Redo);
}
