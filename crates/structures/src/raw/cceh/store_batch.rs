//! What a write batch of the store (`crate::store::batch`) asks of a table: its changes
//! planned as slot writes, with room made first by splits (so applying them never splits or
//! displaces), and made in place under the segment's stripe lock.
//!
//! A batch holds the table's writer gate from planning to the end of its apply, so no other
//! writer changes a slot meanwhile. Each planned write names a slot and what it will hold:
//! the batch logs those bytes before its commit point and copies them in again at recovery.
//! Live, a write makes its stores in the order of a single write (`write.rs`: an occupied slot
//! emptied, the value, then the key), so lock-free lookups read each slot whole, and flushes
//! them without a fence: the batch fences once after every write.
//!
//! Planning skips displacement: a new key takes an empty slot of its window, or one a split
//! left stale, that no earlier change of the batch took; if there is none the segment splits
//! (its own transaction and fences, changing no key) and the plan starts again.

use pmem_ordering::Backend;
use rustc_hash::FxHashSet;

use super::hashing::{belongs, hash, prefix};
use super::layout::{segment_word_offset, value_of};
use super::write::{fill_slot_unpersisted, stripe_of, Chosen};
use super::{Cceh, CcehError, SlotProbe, EMPTY_KEY, PROBE_BUCKETS, RESERVED, SLOTS_PER_BUCKET};

/// How many changes ahead the plan prefetches a window.
const AHEAD: usize = 8;

/// What a planned write stores into its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotChange {
    /// A present key's new value.
    Value(u64),
    /// A new entry; `occupied`: the slot holds a key a split left stale, emptied first.
    Fill {
        key: u64,
        value: u64,
        occupied: bool,
    },
    /// The key removed.
    Empty,
}

/// One planned slot write ([`Cceh::plan_batch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotWrite {
    /// The segment holding the slot (its stripe guards it).
    pub segment: u64,
    /// The slot's offset (its key word; the value follows).
    pub slot: u64,
    /// What it will hold.
    pub change: SlotChange,
}

impl SlotWrite {
    /// The bytes the slot holds once written, and where they start: what the batch logs.
    pub(crate) fn image(&self) -> (u64, Vec<u8>) {
        match self.change {
            SlotChange::Value(v) => (value_of(self.slot), v.to_le_bytes().to_vec()),
            SlotChange::Fill { key, value, .. } => {
                let mut bytes = key.to_le_bytes().to_vec();
                bytes.extend_from_slice(&value.to_le_bytes());
                (self.slot, bytes)
            }
            SlotChange::Empty => (self.slot, EMPTY_KEY.to_le_bytes().to_vec()),
        }
    }
}

impl<B: Backend> Cceh<B> {
    /// Plan `changes` (one per key: the probe, and the new value or `None` to remove it) as
    /// slot writes, in order. The caller holds the table's writer gate. A key whose window has
    /// no slot left splits its segment first ([`Cceh::split`], committed before this returns,
    /// changing no key), and the plan starts again.
    pub(crate) fn plan_batch<Pr: SlotProbe>(
        &self,
        changes: &[(Pr, Option<u64>)],
    ) -> Result<Vec<SlotWrite>, CcehError> {
        let words = self.pool_words()?;
        'plan: loop {
            let mut taken = FxHashSet::default();
            let mut writes = Vec::with_capacity(changes.len());
            for (i, (probe, change)) in changes.iter().enumerate() {
                // The window of the change `AHEAD` on is fetched meanwhile: the batch's misses
                // overlap, where a single write waits for each of its own.
                if let Some((ahead, _)) = changes.get(i + AHEAD) {
                    self.prefetch_path(words, hash(ahead.word()));
                }
                let word = probe.word();
                if word == EMPTY_KEY {
                    return Err(CcehError::ReservedKey(RESERVED));
                }
                let h = hash(word);
                let (place, stripe) = self.lock_place(h)?;
                // A single write's choice first (the key's slot, else the window's first empty
                // one); the full look only when that slot is one the batch took already.
                let chosen = self.choose(self.writer_view(place.segment)?, probe, h)?;
                let (found, free) = match chosen {
                    Some(Chosen::Found { slot, old }) => {
                        (Some((segment_word_offset(place.segment, slot), old)), None)
                    }
                    Some(Chosen::Free {
                        slot,
                        occupied: false,
                        ..
                    }) if !taken.contains(&segment_word_offset(place.segment, slot)) => (
                        None,
                        Some((segment_word_offset(place.segment, slot), false)),
                    ),
                    _ => (self.find(&place, probe, h)?, None),
                };
                let write = match (found, *change) {
                    (Some((slot, old)), Some(value)) => (old != value).then_some(SlotWrite {
                        segment: place.segment,
                        slot,
                        change: SlotChange::Value(value),
                    }),
                    (Some((slot, _)), None) => Some(SlotWrite {
                        segment: place.segment,
                        slot,
                        change: SlotChange::Empty,
                    }),
                    (None, None) => None,
                    (None, Some(value)) => {
                        let free = match free {
                            Some(free) => Some(free),
                            None => self.free_slot(place.segment, place.local_depth, h, &taken)?,
                        };
                        match free {
                            Some((slot, occupied)) => Some(SlotWrite {
                                segment: place.segment,
                                slot,
                                change: SlotChange::Fill {
                                    key: word,
                                    value,
                                    occupied,
                                },
                            }),
                            None => {
                                self.check_window_separable(place.segment, h, word)?;
                                drop(stripe);
                                self.split_for_batch(h)?;
                                continue 'plan;
                            }
                        }
                    }
                };
                if let Some(write) = write {
                    taken.insert(write.slot);
                    writes.push(write);
                }
            }
            return Ok(writes);
        }
    }

    /// A slot of `h`'s window in `segment` (local depth `local`) that a new key may take and
    /// no planned write has taken: an empty one, else one holding a key a split left stale
    /// (`true`: occupied).
    fn free_slot(
        &self,
        segment: u64,
        local: u64,
        h: u64,
        taken: &FxHashSet<u64>,
    ) -> Result<Option<(u64, bool)>, CcehError> {
        let pattern = prefix(h, local);
        let mut stale = None;
        for slot in self.shape.window(segment, h) {
            if taken.contains(&slot) {
                continue;
            }
            let key = self.word(slot)?;
            if key == EMPTY_KEY {
                return Ok(Some((slot, false)));
            }
            if stale.is_none() && !belongs(key, local, pattern) {
                stale = Some((slot, true));
            }
        }
        Ok(stale)
    }

    /// Refuse a new entry of key word `word` whose window is all live entries of that same
    /// word (hashed key words only): no split can part them.
    fn check_window_separable(&self, segment: u64, h: u64, word: u64) -> Result<(), CcehError> {
        let mut same = 0;
        for slot in self.shape.window(segment, h) {
            same += u64::from(self.word(slot)? == word);
        }
        if same == PROBE_BUCKETS * SLOTS_PER_BUCKET {
            return Err(CcehError::KeyWordWindowFull { word });
        }
        Ok(())
    }

    /// Split the segment `h` leads to (doubling the directory first if it must), under the
    /// structure mutex and the segment's stripe lock as a single write's split runs.
    fn split_for_batch(&self, h: u64) -> Result<(), CcehError> {
        let _structure = self.structure();
        let (place, _stripe) = self.lock_place(h)?;
        self.split(&place)
    }

    /// Make `write` in its slot under the segment's stripe lock, in a single write's store
    /// order, counting its key, and flush it: the caller's fence makes it durable. The slot
    /// was planned by [`Cceh::plan_batch`] under the gate the caller still holds.
    pub(crate) fn apply_slot_write(&self, write: &SlotWrite) -> Result<(), CcehError> {
        let pool = self.heap.pool();
        let stores = pool.word_stores(write.slot, 2)?;
        let stripe = self.stripes.lock(stripe_of(write.segment));
        let (start, end) = match write.change {
            SlotChange::Value(value) => {
                stores.store(1, value);
                (1, 2)
            }
            SlotChange::Fill {
                key,
                value,
                occupied,
            } => {
                fill_slot_unpersisted(&stores, occupied, key, value);
                stripe.count(1);
                (0, 2)
            }
            SlotChange::Empty => {
                stores.store(0, EMPTY_KEY);
                stripe.count(1u64.wrapping_neg());
                (0, 1)
            }
        };
        drop(stripe);
        // Flushed; the batch's fence after every write makes it durable.
        let _ = stores.flush(start, end);
        Ok(())
    }
}
