//! In-node shifts (FAST): the entry writes a shift makes, in the order that leaves at most one
//! transient duplicate whose right copy is right, and how the per-shift and FAST policies make
//! them durable. The redo-logged policy is in [`super::redo`].

use pmem_ordering::{Backend, WordStores};

use super::layout::{first_slot_of_line, key_word, line_of, NodeView, ENTRIES_PER_LINE};
use super::{FastFair, FastFairError, ShiftPolicy, EMPTY_KEY};

/// One entry write of a shift: `slot := (key, value)` (`None` leaves the value), as two
/// 8-byte stores in the order `key_first` says.
#[derive(Clone, Copy, Default)]
pub(super) struct SlotWrite {
    pub(super) slot: usize,
    pub(super) key: u64,
    pub(super) value: Option<u64>,
    key_first: bool,
}

/// A shift inside one node, as the sequence of entry writes it makes (see the module docs);
/// the writes are made one by one, each reading the entry it moves just before, so no plan is
/// built in memory.
#[derive(Clone, Copy)]
pub(super) enum Shift {
    /// Put `(key, value)` at slot `at` of a node with `n` entries: entries `n-1 .. at` move one
    /// slot right (highest first, value before key), then the new entry is written.
    Insert {
        at: usize,
        n: usize,
        key: u64,
        value: u64,
    },
    /// Drop slot `at` of a node with `n` entries: entries `at+1 .. n-1` move one slot left
    /// (lowest first, key before value), then slot `n-1` is freed.
    Remove { at: usize, n: usize },
}

impl Shift {
    /// Number of entry writes.
    pub(super) fn len(self) -> usize {
        match self {
            Shift::Insert { at, n, .. } => n - at + 1,
            Shift::Remove { at, n } => n - at,
        }
    }

    /// The `i`th entry write of this shift on the node `view` shows, reading the entry it
    /// moves (not yet overwritten: a right shift runs downward, a left shift upward).
    #[inline]
    pub(super) fn write(self, view: NodeView<'_>, i: usize) -> SlotWrite {
        match self {
            Shift::Insert { at, n, key, value } => {
                if i < n - at {
                    let slot = n - i;
                    SlotWrite {
                        slot,
                        key: view.key(slot - 1),
                        value: Some(view.value(slot - 1)),
                        key_first: false,
                    }
                } else {
                    SlotWrite {
                        slot: at,
                        key,
                        value: Some(value),
                        key_first: false,
                    }
                }
            }
            Shift::Remove { at, n } => {
                let slot = at + i;
                if slot + 1 < n {
                    SlotWrite {
                        slot,
                        key: view.key(slot + 1),
                        value: Some(view.value(slot + 1)),
                        key_first: true,
                    }
                } else {
                    SlotWrite {
                        slot,
                        key: EMPTY_KEY,
                        value: None,
                        key_first: true,
                    }
                }
            }
        }
    }
}

/// Make the stores of one entry write, in its order, through the node's store view: the words
/// stored, as `start .. end` word indices of the node.
#[inline(always)]
fn store_slot<B: Backend>(stores: &WordStores<'_, B>, w: &SlotWrite) -> (usize, usize) {
    let key = key_word(w.slot);
    match (w.value, w.key_first) {
        (None, _) => {
            stores.store(key, w.key);
            (key, key + 1)
        }
        (Some(v), true) => {
            stores.store_two(key, w.key, key + 1, v);
            (key, key + 2)
        }
        (Some(v), false) => {
            stores.store_two(key + 1, v, key, w.key);
            (key, key + 2)
        }
    }
}

/// Move the entries of slots `from .. to` of the node `view` shows up one slot, highest first,
/// each as its value's store then its key's (the writes of [`Shift::Insert`]), each entry read
/// just before its move (so not yet overwritten). At most a line's entries: a plain loop of
/// entries, each two loads and two stores.
///
/// The caller has checked `to < view.capacity()` and `key_word(to) + 2 <= stores.len()`.
#[inline(always)]
fn move_up_one_slot<B: Backend>(
    view: NodeView<'_>,
    stores: &WordStores<'_, B>,
    from: usize,
    to: usize,
) {
    debug_assert!(to < view.capacity() && key_word(to) + 2 <= stores.len());
    let mut slot = to;
    while slot > from {
        slot -= 1;
        // SAFETY: `slot < to < capacity` (the caller's check).
        let (key, value) = unsafe { (view.key_unchecked(slot), view.value_unchecked(slot)) };
        let word = key_word(slot + 1);
        // SAFETY: `slot + 1 <= to`, so `word + 1 < key_word(to) + 2 <= stores.len()` (the
        // caller's check).
        unsafe { stores.store_two_unchecked(word + 1, value, word, key) };
    }
}

/// FAST, an insert of `(key, value)` at slot `at` of the `n` entries of the node `view` shows
/// (`stores` its store view): stores in place; one flush and fence each time the shift leaves
/// a line (the line's stores flushed and fenced before the first store to the next line), and
/// at the end.
///
/// The writes of `Shift::write`, slots `n` down to `at` (each move value before key, the new
/// entry last), made line by line: the entries moving within one line go up one slot (value
/// then key each, highest first: the order of the writes), and the run of each line is
/// flushed and fenced when the shift is about to leave it (after its first slot's write).
#[inline(always)]
fn insert_fast<B: Backend>(
    view: NodeView<'_>,
    stores: &WordStores<'_, B>,
    at: usize,
    n: usize,
    key: u64,
    value: u64,
) {
    // Checked once for every store below: each is to a slot at most `n`.
    assert!(
        at <= n && n < view.capacity() && key_word(n) + 2 <= stores.len(),
        "an insert at slot {at} of {n} entries into a node of {}",
        view.capacity()
    );
    // The highest slot written in the current line, and that line's first slot.
    let mut high = n;
    let mut line_first = first_slot_of_line(n);
    // Each line whose first slot receives an entry from the line below: its entries
    // `line_first - 1 .. high - 1` go up one slot, then the line is flushed and fenced.
    while line_first > at {
        move_up_one_slot(view, stores, line_first - 1, high);
        stores.persist(key_word(line_first), key_word(high) + 2);
        high = line_first - 1;
        line_first -= ENTRIES_PER_LINE;
    }
    // The line of `at`: entries `at .. high - 1` go up one slot, then the new entry.
    move_up_one_slot(view, stores, at, high);
    let word = key_word(at);
    // SAFETY: `at <= n`, so `word + 1 < key_word(n) + 2 <= stores.len()` (checked above).
    unsafe { stores.store_two_unchecked(word + 1, value, word, key) };
    stores.persist(word, key_word(high) + 2);
}

impl<B: Backend> FastFair<B> {
    /// Carry out `shift` on `node` (which `view` shows) under the tree's policy, with the
    /// node's stripe marked as changing meanwhile. `stripe` is the node's stripe
    /// ([`FastFair::stripe_index`]), whose lock the caller holds (or every stripe's), so it is
    /// this writer's alone and serves as its redo lane.
    ///
    /// Inlined, so that a FAST insert (the hot case) runs in its caller's copy, for the
    /// caller's node shape; every other shift runs out of line.
    #[inline(always)]
    pub(super) fn shift(
        &self,
        view: NodeView<'_>,
        node: u64,
        stripe: usize,
        shift: Shift,
    ) -> Result<(), FastFairError> {
        debug_assert_eq!(stripe, Self::stripe_index(node));
        if let (ShiftPolicy::Fast, Shift::Insert { at, n, key, value }) = (self.policy, shift) {
            // The one fallible step first: a failure then marks nothing.
            let stores = self.pool().word_stores(node, view.words())?;
            let held = self.stripes.held(stripe);
            held.change_begin();
            insert_fast(view, &stores, at, n, key, value);
            held.change_end();
            return Ok(());
        }
        self.stripes.change_begin_held(stripe);
        let result = self.shift_by_policy(view, node, stripe, shift);
        self.stripes.change_end_held(stripe);
        result
    }

    /// Every shift but a FAST insert, under the tree's policy (see [`FastFair::shift`]).
    #[inline(never)]
    fn shift_by_policy(
        &self,
        view: NodeView<'_>,
        node: u64,
        stripe: usize,
        shift: Shift,
    ) -> Result<(), FastFairError> {
        match self.policy {
            ShiftPolicy::PerShift => self.shift_per_entry(view, node, shift),
            ShiftPolicy::Fast => self.shift_fast(view, node, shift),
            ShiftPolicy::Redo => self.shift_redo(view, node, stripe, shift),
        }
    }

    /// The baseline: every moved entry flushed and fenced before the next.
    fn shift_per_entry(
        &self,
        view: NodeView<'_>,
        node: u64,
        shift: Shift,
    ) -> Result<(), FastFairError> {
        let stores = self.pool().word_stores(node, view.words())?;
        for i in 0..shift.len() {
            let (start, end) = store_slot(&stores, &shift.write(view, i));
            stores.persist(start, end);
        }
        Ok(())
    }

    /// FAST, any shift: stores in place; one flush and fence each time the shift leaves a line
    /// (the line's stores flushed and fenced before the first store to the next line), and at
    /// the end. An insert goes through [`insert_fast`].
    fn shift_fast(&self, view: NodeView<'_>, node: u64, shift: Shift) -> Result<(), FastFairError> {
        let stores = self.pool().word_stores(node, view.words())?;
        if let Shift::Insert { at, n, key, value } = shift {
            insert_fast(view, &stores, at, n, key, value);
            return Ok(());
        }
        let writes = shift.len();
        let mut i = 0;
        while i < writes {
            let first = shift.write(view, i);
            let line = line_of(first.slot);
            let (mut start, mut end) = store_slot(&stores, &first);
            i += 1;
            while i < writes {
                let w = shift.write(view, i);
                if line_of(w.slot) != line {
                    break;
                }
                let (s, e) = store_slot(&stores, &w);
                (start, end) = (start.min(s), end.max(e));
                i += 1;
            }
            stores.persist(start, end);
        }
        Ok(())
    }
}
