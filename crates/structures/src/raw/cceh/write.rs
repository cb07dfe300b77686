//! Inserts, updates and removes: the segment's stripe lock, and the failure-atomic commit of a
//! slot that lets lookups read it without a lock.
//!
//! A slot is committed by 8-byte stores in one cache line, in this order: the old key emptied
//! (only if the slot held one), the value, then the key. Stores to one line persist in order
//! (Themis, Sec. II-C) and one flush and one fence make them durable, so a crash leaves the
//! slot as it was, or empty, or whole. A lookup reads the key, then the value, then the key
//! again: it can only pair a key with the value stored before that key, never with a value
//! stored for another key.
//!
//! Every write is written once, over a [`SlotProbe`] (`probe.rs`): the `u64` operations pass
//! their key, whose `matches` is `true`, and a `before_store` that does nothing; both inline
//! away. A byte-key map passes a probe that reads the record a value points at, and a
//! `before_store` that makes the record's allocation durable with the slot's own fence.

use std::sync::MutexGuard;

use pmem_ordering::{Backend, WordStores, Words};

use super::access::SegmentView;
use super::hashing::{belongs, hash, prefix};
use super::layout::{bucket_word, key_word, pool_word, segment_word_offset, value_of, value_word};
use super::layout::{Directory, Entry, WORDS_PER_BUCKET};
use super::lookup::{first_hit, hit_mask};
use super::{write_step, Cceh, CcehError, Place, SlotProbe, WriteStep, RESERVED};
use super::{EMPTY_KEY, PROBE_BUCKETS, SLOTS_PER_BUCKET, STRIPES};
use crate::sync::StripeGuard;

/// Where a write goes in its window, chosen under the segment's stripe lock. A slot is named by
/// the word of its key among the segment's words.
pub(super) enum Chosen {
    /// The slot holding the probe's key, and its value.
    Found { slot: usize, old: u64 },
    /// A free slot for a new entry. `vacated` says a displacement freed it: it still holds
    /// the key it moved on (a copy of which is now further along), so a write that does not
    /// happen must empty it.
    Free {
        slot: usize,
        vacated: bool,
        /// The slot holds a key (a stale copy a split left, or one a displacement moved on),
        /// which the write empties first.
        occupied: bool,
    },
}

/// The entry a write stores, and whether it replaces the value of a present key
/// (`replace == false`: a present key's value is left as it is).
#[derive(Clone, Copy)]
struct EntryWrite {
    key: u64,
    value: u64,
    replace: bool,
}

/// A `before_store` that does nothing: the `u64` operations' (it inlines away).
#[inline(always)]
fn nothing_before<T>(_old: T) -> Result<(), CcehError> {
    Ok(())
}

/// The slot (0..4) of a bucket whose key word is `probe`'s and whose value (loaded from the
/// segment from the bucket's first word `first` on, only for slots with the key word) it
/// matches, if any: the first such in slot order.
#[inline(always)]
fn matching_slot(
    keys: &[u64; SLOTS_PER_BUCKET as usize],
    segment: &SegmentView<'_>,
    first: usize,
    probe: &impl SlotProbe,
) -> Option<(usize, u64)> {
    let word = probe.word();
    // Most buckets hold no slot with the key word: one pass of conditional moves tells.
    let slot = first_hit(keys, word);
    if slot == SLOTS_PER_BUCKET as usize {
        return None;
    }
    let value = segment.value(first, slot);
    if probe.matches(value) {
        return Some((slot, value));
    }
    // Key words shared by several keys (hashed tables only; a `u64` probe matches any value,
    // so this compiles away for it): the later slots with the word.
    let mut hits = hit_mask(keys, word) & !((2u32 << slot) - 1);
    while hits != 0 {
        let slot = hits.trailing_zeros() as usize;
        let value = segment.value(first, slot);
        if probe.matches(value) {
            return Some((slot, value));
        }
        hits &= hits - 1;
    }
    None
}

/// The stripe whose lock guards the segment at `segment`: the offset's Fibonacci hash (one
/// multiply), its top bits picking one of [`STRIPES`].
#[inline(always)]
pub(super) fn stripe_of(segment: u64) -> usize {
    const _: () = assert!(STRIPES.is_power_of_two() && STRIPES > 1);
    (segment.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - STRIPES.trailing_zeros())) as usize
}

impl<B: Backend> Cceh<B> {
    /// Insert `key -> value` if `key` is absent: `Ok(true)` if inserted, `Ok(false)` if the key
    /// was already there (its value is left alone). Durable when it returns.
    pub fn insert(&self, key: u64, value: u64) -> Result<bool, CcehError> {
        match self.put_probe(&key, value, false, nothing_before)? {
            None => Ok(true),
            Some(_) => Ok(false),
        }
    }

    /// Insert or replace: returns the old value if the key was present. Durable when it
    /// returns.
    pub fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, CcehError> {
        self.put_probe(&key, value, true, nothing_before)
    }

    /// Remove `key`: its value, if it was present. Durable when it returns.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, CcehError> {
        self.remove_probe(&key, nothing_before)
    }

    /// Insert `probe`'s key with `value` (`replace == false`: if a slot matching the probe
    /// exists, its value is returned and nothing is called or written), or upsert it
    /// (`replace == true`). Durable when it returns; the old value if the key was there.
    ///
    /// `before_store(old)` is called under the segment's stripe lock once the slot is chosen,
    /// before the stores that commit the write (the value, then the key word of a new entry;
    /// the value of an existing one), which are then persisted with one flush and one fence:
    /// whatever it has stored and flushed is durable by that fence. An `Err` from it aborts
    /// the write (nothing of the entry is stored) and is returned. Splits and displacements,
    /// which do not depend on the new entry, run before it is called; a slot a displacement
    /// vacated for the entry is emptied again on abort (one more persist), so the table holds
    /// the same entries as before.
    ///
    /// A table full of entries of the probe's key word (only possible for hashed key words) is
    /// refused with [`CcehError::KeyWordWindowFull`].
    pub(crate) fn put_probe<E: From<CcehError>>(
        &self,
        probe: &impl SlotProbe,
        value: u64,
        replace: bool,
        before_store: impl FnOnce(Option<u64>) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        let key = probe.word();
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey(RESERVED).into());
        }
        let h = hash(key);
        let write = EntryWrite {
            key,
            value,
            replace,
        };
        // The common case in one straight pass: the fast walk to the stripe lock, and a window
        // with room. Its own branch (not a result merged with the slow walk's), so that the
        // place it found stays in registers.
        let words = self.pool_words()?;
        let window_full = match self.lock_place_fast(words, h) {
            Some((place, segment, stripe)) => {
                let chosen = match self.choose(segment, probe, h)? {
                    Some(chosen) => Some(chosen),
                    None => self.choose_in_full_window(place, probe, h)?,
                };
                if let Some(chosen) = chosen {
                    return self.commit(place.segment, chosen, &stripe, write, before_store);
                }
                true
            }
            None => false,
        };
        self.put_slow(probe, h, write, before_store, window_full)
    }

    /// [`Cceh::put_probe`] the way that retries: after the fast pass found `h`'s window full
    /// (`window_full`: split it first), or could not take the fast walk. Splits and tries
    /// again until the write finds room. Out of line, so that the common case is one straight
    /// pass with no loop around it (which made the compiler compute and keep the whole pass's
    /// invariants ahead of it).
    #[inline(never)]
    fn put_slow<E: From<CcehError>>(
        &self,
        probe: &impl SlotProbe,
        h: u64,
        write: EntryWrite,
        before_store: impl FnOnce(Option<u64>) -> Result<(), E>,
        window_full: bool,
    ) -> Result<Option<u64>, E> {
        let mut split_next = window_full;
        loop {
            // A full window is split under the structure mutex and the stripe lock (taken in
            // this order: the stripe of the look that found the window full was let go at the
            // end of its round); another thread may have split this segment already, so the
            // look under the mutex comes first.
            let structure = split_next.then(|| self.structure());
            let (place, stripe, chosen) = self.place_write(probe, h)?;
            if let Some(chosen) = chosen {
                return self.commit(place.segment, chosen, &stripe, write, before_store);
            }
            if structure.is_some() {
                self.split(&place)?;
            }
            split_next = structure.is_none();
        }
    }

    /// Where `h` leads, with the lock of that segment's stripe held ([`Cceh::lock_place`]),
    /// and where `probe`'s write goes in its window: `None` if the window is full and the
    /// segment must split.
    #[inline(always)]
    fn place_write(
        &self,
        probe: &impl SlotProbe,
        h: u64,
    ) -> Result<(Place, StripeGuard<'_>, Option<Chosen>), CcehError> {
        let (place, stripe) = self.lock_place(h)?;
        let chosen = match self.choose(self.writer_view(place.segment)?, probe, h)? {
            Some(chosen) => Some(chosen),
            None => self.choose_in_full_window(place, probe, h)?,
        };
        Ok((place, stripe, chosen))
    }

    /// Remove the slot matching `probe`: its value, if there was one. `before_store(old
    /// value)` is called under the segment's stripe lock before the store that empties the
    /// slot (which is then persisted with one flush and one fence); an `Err` from it aborts
    /// the removal (nothing stored) and is returned.
    pub(crate) fn remove_probe<E: From<CcehError>>(
        &self,
        probe: &impl SlotProbe,
        before_store: impl FnOnce(u64) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        let key = probe.word();
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey(RESERVED).into());
        }
        let pool = self.heap.pool();
        let h = hash(key);
        let (place, stripe) = self.lock_place(h)?;
        match self.find(&place, probe, h)? {
            Some((slot, value)) => {
                before_store(value)?;
                let w = pool.store_u64(slot, EMPTY_KEY).map_err(CcehError::from)?;
                pool.persist(w);
                stripe.count(1u64.wrapping_neg());
                Ok(Some(value))
            }
            None => Ok(None),
        }
    }

    /// The structure mutex: one split, doubling or snapshot at a time.
    pub(super) fn structure(&self) -> MutexGuard<'_, ()> {
        self.structure.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where `h` leads, with the lock of that segment's stripe held. The directory is read
    /// without a guard (a writer does not pin the epoch), so what was read is checked under
    /// the lock: an unchanged directory pointer means the directory is still the current one
    /// (so not freed), and an unchanged entry that it still maps `h` to this segment, which no
    /// split can change while the lock is held.
    #[inline(always)]
    pub(super) fn lock_place(&self, h: u64) -> Result<(Place, StripeGuard<'_>), CcehError> {
        let words = self.pool_words()?;
        match self.lock_place_fast(words, h) {
            Some((place, _, stripe)) => Ok((place, stripe)),
            None => self.lock_place_walk(words, h),
        }
    }

    /// [`Cceh::lock_place`] the way that retries and tells errors, out of line.
    #[inline(never)]
    fn lock_place_walk(
        &self,
        words: Words<'_>,
        h: u64,
    ) -> Result<(Place, StripeGuard<'_>), CcehError> {
        loop {
            let directory = self.current_directory_in(words)?;
            let place = match self.locate_in(words, directory, h) {
                Ok(place) => place,
                // A directory swapped out (and maybe reused) meanwhile: look again.
                Err(e) if self.current_directory_in(words)? == directory => return Err(e),
                Err(_) => continue,
            };
            // The lock's compare-and-swap is a full barrier: it waits for this thread's last
            // persist (the previous write's flush and fence) to finish, and no load after it
            // starts before. Prefetched here, the window's lines arrive during that wait.
            self.prefetch_window(words, place.segment, h);
            let guard = self.stripes.lock(stripe_of(place.segment));
            if self.current_directory_in(words)? == directory
                && self.word_in(words, place.entry_offset())? == place.entry()
            {
                return Ok((place, guard));
            }
        }
    }

    /// One pass of [`Cceh::lock_place`]'s walk, written for the fewest instructions (as
    /// `Cceh::lookup_fast` is for lookups): the same reads, prefetches, lock and check, but a
    /// read out of the pool or a directory changed before the lock was taken gives `None`,
    /// and the caller walks again the way that retries and tells errors. With the place, the
    /// segment's words for [`Cceh::choose`] ([`Cceh::writer_view`]'s, checked once here).
    #[inline(always)]
    #[allow(clippy::type_complexity)]
    fn lock_place_fast<'w>(
        &'w self,
        words: Words<'w>,
        h: u64,
    ) -> Option<(Place, SegmentView<'w>, StripeGuard<'w>)> {
        let at = self.entry_fast(words, h)?;
        let entry = Entry::from_word(at.entry);
        let segment = SegmentView::alone(words, entry.segment, self.span)?;
        let home_word = h.wrapping_mul(WORDS_PER_BUCKET) as usize;
        for step in 0..PROBE_BUCKETS {
            segment.prefetch_bucket(home_word.wrapping_add(bucket_word(step)));
        }
        let guard = self.stripes.lock(stripe_of(entry.segment));
        if !at.unchanged(words)? {
            return None;
        }
        let place = Place {
            directory: Directory::at(at.directory),
            global_depth: at.global_depth,
            index: at.index,
            segment: entry.segment,
            local_depth: entry.local_depth,
        };
        Some((place, segment, guard))
    }

    /// Where `probe`'s write goes in its window in `segment` ([`Cceh::writer_view`]; the
    /// caller holds the segment's stripe lock): the slot matching the probe, else the window's
    /// first empty slot. `None`: neither; [`Cceh::choose_in_full_window`] looks further.
    #[inline(always)]
    pub(super) fn choose(
        &self,
        segment: SegmentView<'_>,
        probe: &impl SlotProbe,
        h: u64,
    ) -> Result<Option<Chosen>, CcehError> {
        // The home bucket's first word, wrapped into the segment by the view (as in lookups).
        let home_word = h.wrapping_mul(WORDS_PER_BUCKET) as usize;
        let word = probe.word();
        // Keys only: a value is loaded for a slot holding the probe's key word alone.
        let mut empty = None;
        for step in 0..PROBE_BUCKETS {
            let (first, keys) = segment.bucket_keys(home_word.wrapping_add(bucket_word(step)));
            // Most buckets hold no slot with the key word (every bucket of a new key's
            // window): one compare and branch per slot tells, without computing which slot.
            // Under the stripe lock nothing else writes this segment: the value loaded is the
            // key's.
            if keys.contains(&word) {
                if let Some((s, old)) = matching_slot(&keys, &segment, first, probe) {
                    return Ok(Some(Chosen::Found {
                        slot: key_word(first, s),
                        old,
                    }));
                }
            }
            if empty.is_none() {
                empty = keys
                    .iter()
                    .position(|&k| k == EMPTY_KEY)
                    .map(|free| key_word(first, free));
            }
        }
        Ok(empty.map(|slot| Chosen::Free {
            slot,
            vacated: false,
            occupied: false,
        }))
    }

    /// The words of the segment at `segment`, for a writer ([`SegmentView::alone`]).
    #[inline(always)]
    pub(super) fn writer_view(&self, segment: u64) -> Result<SegmentView<'_>, CcehError> {
        match SegmentView::alone(self.pool_words()?, segment, self.span) {
            Some(view) => Ok(view),
            None => Err(self.bad_offset(segment, self.shape.bytes())),
        }
    }

    /// Where [`Cceh::choose`] found no room for `probe`'s write (rare; out of line, so that
    /// the common case keeps its registers): the window's first slot holding a key a split
    /// left behind (lazy deletion: hashing each key to tell is only paid for when there is no
    /// empty slot), else a slot made free by displacement. `None`: the window is full, and
    /// the segment must split. Takes the place by value: a reference would make the caller
    /// keep it in memory on the common path too.
    #[inline(never)]
    fn choose_in_full_window(
        &self,
        place: Place,
        probe: &impl SlotProbe,
        h: u64,
    ) -> Result<Option<Chosen>, CcehError> {
        let segment = self.writer_view(place.segment)?;
        let home_word = h.wrapping_mul(WORDS_PER_BUCKET) as usize;
        let bucket_keys =
            |step: u64| segment.bucket_keys(home_word.wrapping_add(bucket_word(step)));
        // The keys again, read under the same lock as `choose`'s, so the same.
        let pattern = prefix(h, place.local_depth);
        let stale = (0..PROBE_BUCKETS).find_map(|step| {
            let (first, keys) = bucket_keys(step);
            (0..SLOTS_PER_BUCKET as usize)
                .find(|&s| !belongs(keys[s], place.local_depth, pattern))
                .map(|s| key_word(first, s))
        });
        if let Some(slot) = stale {
            return Ok(Some(Chosen::Free {
                slot,
                vacated: false,
                occupied: true,
            }));
        }
        if let Some(slot) = self.displace(&place, h)? {
            return Ok(Some(Chosen::Free {
                // A slot of this segment (`Neighbourhood::slot`): above its start, inside it.
                slot: pool_word(slot - place.segment),
                vacated: true,
                occupied: self.word(slot)? != EMPTY_KEY,
            }));
        }
        // Every slot holds a live entry of the probe's own key word (hashed key words only: a
        // unique one would have matched): all share one hash, so no split can part them.
        let word = probe.word();
        if (0..PROBE_BUCKETS).all(|step| bucket_keys(step).1 == [word; SLOTS_PER_BUCKET as usize]) {
            return Err(CcehError::KeyWordWindowFull { word });
        }
        Ok(None)
    }

    /// Carry out `write` at the slot `chosen` in the segment at `segment` (the caller still
    /// holds the segment's stripe lock): `before_store` first, then the stores, persisted.
    /// See [`Cceh::put_probe`].
    #[inline(always)]
    fn commit<E: From<CcehError>>(
        &self,
        segment: u64,
        chosen: Chosen,
        stripe: &StripeGuard<'_>,
        write: EntryWrite,
        before_store: impl FnOnce(Option<u64>) -> Result<(), E>,
    ) -> Result<Option<u64>, E> {
        let EntryWrite {
            key,
            value,
            replace,
        } = write;
        let (Chosen::Found { slot, .. } | Chosen::Free { slot, .. }) = chosen;
        // The slot's two words, checked once for its stores and their persist (a slot of the
        // segment `choose` read, at most `line_mask + 6` words into it, so no overflow).
        let stores = self
            .heap
            .pool()
            .word_stores(segment_word_offset(segment, slot), 2)
            .map_err(CcehError::from)?;
        match chosen {
            Chosen::Found { old, .. } => {
                if replace {
                    before_store(Some(old))?;
                    stores.store(1, value);
                    stores.persist(1, 2);
                }
                Ok(Some(old))
            }
            Chosen::Free {
                vacated, occupied, ..
            } => {
                if let Err(e) = before_store(None) {
                    if vacated {
                        // The moved key's copy further along is persisted: emptying this one
                        // leaves the table's entries as they were before the write.
                        stores.store(0, EMPTY_KEY);
                        stores.persist(0, 1);
                    }
                    return Err(e);
                }
                fill_slot(&stores, occupied, key, value);
                stripe.count(1);
                Ok(None)
            }
        }
    }

    /// Write `key -> value` into `slot` and persist it: value first, then the key that commits
    /// it, in one line (one flush, one fence). A slot still holding a key (one a displacement
    /// has just copied on, or a stale copy a split left) is emptied first, in the same line, so
    /// a crash leaves the old key there whole, or the slot empty, or the new pair whole (stores
    /// to one line persist in order), and a lookup never pairs the old key with the new value
    /// (it re-reads the key after the value).
    pub(super) fn put_slot(&self, slot: u64, key: u64, value: u64) -> Result<(), CcehError> {
        let occupied = self.word(slot)? != EMPTY_KEY;
        let stores = self.heap.pool().word_stores(slot, 2)?;
        fill_slot(&stores, occupied, key, value);
        Ok(())
    }

    /// The slot holding `probe`'s key in its window, if any, with its value.
    pub(super) fn find(
        &self,
        place: &Place,
        probe: &impl SlotProbe,
        h: u64,
    ) -> Result<Option<(u64, u64)>, CcehError> {
        let words = self.pool_words()?;
        let key = probe.word();
        for slot in self.shape.window(place.segment, h) {
            // Reached through the key's own directory entry, a slot holding the key is live: a
            // stale copy left by a split sits only in a segment the key no longer maps to.
            if self.word_in(words, slot)? == key {
                let value = self.word_in(words, value_of(slot))?;
                if probe.matches(value) {
                    return Ok(Some((slot, value)));
                }
            }
        }
        Ok(None)
    }
}

/// [`Cceh::put_slot`] through `stores`, a view of the slot's two words (its key, then its
/// value), for a caller that has just read the slot's key under the segment's stripe lock (so
/// it is still there): `occupied` if it is not [`EMPTY_KEY`].
#[inline(always)]
fn fill_slot<B: Backend>(stores: &WordStores<'_, B>, occupied: bool, key: u64, value: u64) {
    fill_slot_unpersisted(stores, occupied, key, value);
    // The key and the value: one line (a bucket is one aligned line), one flush, one fence.
    stores.persist(0, 2);
}

/// The stores of [`fill_slot`], in its order, without the persist: a write batch's
/// (`store_batch.rs`), which flushes the slot and leaves the fence to the batch.
#[inline(always)]
pub(super) fn fill_slot_unpersisted<B: Backend>(
    stores: &WordStores<'_, B>,
    occupied: bool,
    key: u64,
    value: u64,
) {
    const KEY: usize = 0;
    const VALUE: usize = value_word(KEY);
    if occupied {
        stores.store(KEY, EMPTY_KEY);
        write_step(WriteStep::SlotEmptied);
    }
    stores.store(VALUE, value);
    write_step(WriteStep::ValueStored);
    stores.store(KEY, key);
    write_step(WriteStep::KeyStored);
}
