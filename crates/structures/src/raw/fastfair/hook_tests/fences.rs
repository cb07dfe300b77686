//! What an insert without a split costs in fences under each policy, with the hook and
//! without it, in the default 512-byte node (28 entries, 4 to a cache line after the header
//! line): the numbers the byte-key maps' fence budget is built on, pinned.

use super::fixture::{fences_of, sim_heap, sim_pool, tree_of, Bits};
use crate::fastfair::layout::{line_of, ENTRIES_PER_LINE};
use crate::fastfair::{ShiftPolicy, DEFAULT_NODE_SIZE};

/// The record whose bit the hook sets.
const RECORD: u64 = 1;

/// Fences of inserting a key at slot `at` of the root leaf holding `n` keys, through the
/// hook-free insert and through `put_with` with a hook that stores and flushes a bit.
fn insert_fences(policy: ShiftPolicy, n: u64, at: u64) -> (u64, u64) {
    let run = |hooked: bool| {
        let pool = sim_pool();
        let heap = sim_heap(&pool);
        let tree = tree_of(&heap, policy, DEFAULT_NODE_SIZE);
        // Keys 0, 2, 4, ...: an odd key lands between them.
        for i in 0..n {
            assert!(tree.insert(2 * i + 2, i).expect("a set-up insert"));
        }
        let key = 2 * at + 1;
        let bits = Bits::new(&pool);
        let (inserted, fences) = fences_of(|| {
            if hooked {
                let old = tree.put_with(key, 7, false, bits.put_hook(RECORD));
                old.expect("the hooked insert").is_none()
            } else {
                tree.insert(key, 7).expect("the insert")
            }
        });
        assert!(inserted, "key {key} was absent");
        assert_eq!(tree.height().expect("the height"), 1, "no split");
        if hooked {
            assert!(bits.durable(RECORD), "the hook's bit is durable on return");
        }
        fences
    };
    (run(false), run(true))
}

/// Cache lines an insert at slot `at` of `n` entries writes: the new entry's line up to the
/// line of the last moved entry.
fn lines_touched(n: u64, at: u64) -> u64 {
    line_of(n as usize) - line_of(at as usize) + 1
}

#[test]
fn a_fast_insert_without_a_split_fences_once_per_line_it_shifts_and_the_hook_adds_none() {
    assert_eq!(ENTRIES_PER_LINE, 4);
    for (n, at) in [
        (0, 0),
        (3, 3),
        (3, 0),
        (10, 10),
        (10, 0),
        (27, 27),
        (27, 13),
        (27, 0),
    ] {
        let (plain, hooked) = insert_fences(ShiftPolicy::Fast, n, at);
        assert_eq!(plain, lines_touched(n, at), "{n} entries, insert at {at}");
        assert_eq!(
            hooked, plain,
            "{n} entries, insert at {at}: the hook added a fence"
        );
    }
    // An append to a leaf: one fence; an insert at the front of a full-but-one leaf: seven.
    assert_eq!(insert_fences(ShiftPolicy::Fast, 10, 10).0, 1);
    assert_eq!(insert_fences(ShiftPolicy::Fast, 27, 0).0, 7);
}

#[test]
fn per_shift_fences_once_per_entry_and_redo_three_times_per_line_plus_one() {
    for (n, at) in [(0, 0), (3, 0), (10, 4), (27, 0)] {
        let (plain, hooked) = insert_fences(ShiftPolicy::PerShift, n, at);
        assert_eq!(plain, n - at + 1, "per-shift, {n} entries, insert at {at}");
        assert_eq!(hooked, plain, "per-shift: the hook added a fence");
        let (plain, hooked) = insert_fences(ShiftPolicy::Redo, n, at);
        assert_eq!(
            plain,
            3 * lines_touched(n, at) + 1,
            "redo, {n} entries, at {at}"
        );
        assert_eq!(hooked, plain, "redo: the hook added a fence");
    }
}
