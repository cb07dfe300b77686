//! Inserts, updates and removes: the segment's stripe lock, and the failure-atomic commit of a
//! slot that lets lookups read it without a lock.
//!
//! A slot is committed by 8-byte stores in one cache line, in this order: the old key emptied
//! (only if the slot held one), the value, then the key. Stores to one line persist in order
//! (Themis, Sec. II-C) and one flush and one fence make them durable, so a crash leaves the
//! slot as it was, or empty, or whole. A lookup reads the key, then the value, then the key
//! again: it can only pair a key with the value stored before that key, never with a value
//! stored for another key.

use std::ops::Deref;
use std::sync::MutexGuard;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::hashing::{belongs, hash, prefix};
use super::layout::{bucket_word, line_key, line_value, value_of};
use super::lookup::scan_bucket;
use super::{write_step, Cceh, CcehError, Place, WriteStep, RESERVED};
use super::{EMPTY_KEY, PROBE_BUCKETS, SLOTS_PER_BUCKET, STRIPES};
use crate::sync::StripeGuard;

/// What one attempt to put a key in its window found.
enum Attempt {
    /// Done: the old value if the key was there.
    Done(Option<u64>),
    /// The window is full: the segment must split.
    Full(Place),
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Cceh<B, P, H> {
    /// Insert `key -> value` if `key` is absent: `Ok(true)` if inserted, `Ok(false)` if the key
    /// was already there (its value is left alone). Durable when it returns.
    pub fn insert(&self, key: u64, value: u64) -> Result<bool, CcehError> {
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey(RESERVED));
        }
        match self.put(key, value, false)? {
            None => Ok(true),
            Some(_) => Ok(false),
        }
    }

    /// Insert or replace: returns the old value if the key was present. Durable when it
    /// returns.
    pub fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, CcehError> {
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey(RESERVED));
        }
        self.put(key, value, true)
    }

    /// Remove `key`: its value, if it was present. Durable when it returns.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, CcehError> {
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey(RESERVED));
        }
        let pool = self.heap.pool();
        let h = hash(key);
        let (place, stripe) = self.lock_place(h)?;
        match self.find(&place, key, h)? {
            Some(slot) => {
                let value = self.word(value_of(slot))?;
                let w = pool.store_u64(slot, EMPTY_KEY)?;
                let _ = pool.persist(w);
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
    fn lock_place(&self, h: u64) -> Result<(Place, StripeGuard<'_>), CcehError> {
        let words = self.pool_words()?;
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
            let guard = self.stripes.lock((hash(place.segment) as usize) % STRIPES);
            if self.current_directory_in(words)? == directory
                && self.word_in(words, place.entry_offset())? == place.entry()
            {
                return Ok((place, guard));
            }
        }
    }

    /// Insert, or (with `replace`) update; the old value if the key was there. Tries under the
    /// segment's stripe lock; a full window is split under the structure mutex and that lock
    /// (taken in this order, after letting the stripe go), then the put is tried again.
    fn put(&self, key: u64, value: u64, replace: bool) -> Result<Option<u64>, CcehError> {
        let h = hash(key);
        loop {
            {
                let (place, stripe) = self.lock_place(h)?;
                if let Attempt::Done(old) = self.attempt(&place, &stripe, key, value, replace, h)? {
                    return Ok(old);
                }
            }
            let _structure = self.structure();
            // Another thread may have split this segment already: look again before splitting.
            let (place, stripe) = self.lock_place(h)?;
            match self.attempt(&place, &stripe, key, value, replace, h)? {
                Attempt::Done(old) => return Ok(old),
                Attempt::Full(place) => self.split(&place)?,
            }
        }
    }

    /// One try at putting `key` in its window (the caller holds the segment's stripe lock).
    /// The key goes to the window's first empty slot, else to its first slot holding a key a
    /// split left behind (lazy deletion: hashing each key to tell is only paid for when there
    /// is no empty slot), else to a slot made free by displacement.
    fn attempt(
        &self,
        place: &Place,
        stripe: &StripeGuard<'_>,
        key: u64,
        value: u64,
        replace: bool,
        h: u64,
    ) -> Result<Attempt, CcehError> {
        let pool = self.heap.pool();
        let segment = self.segment_words(self.pool_words()?, place.segment)?;
        let shape = self.shape;
        let home = shape.home(h);
        let mut lines = [[0u64; 8]; PROBE_BUCKETS as usize];
        let mut empty = None;
        for (step, line) in lines.iter_mut().enumerate() {
            let bucket = shape.bucket_after(home, step as u64);
            let first = bucket_word(bucket);
            *line = segment
                .line(first)
                .ok_or_else(|| self.bad_offset(shape.slot(place.segment, bucket, 0), 64))?;
            let slot_at = |s: usize| shape.slot(place.segment, bucket, s as u64);
            if let Some(s) = scan_bucket(line, key) {
                // Under the stripe lock nothing else writes this segment: the value loaded
                // with the line is the key's.
                if replace {
                    let w = pool.store_u64(value_of(slot_at(s)), value)?;
                    let _ = pool.persist(w);
                }
                return Ok(Attempt::Done(Some(line_value(line, s))));
            }
            if empty.is_none() {
                empty = scan_bucket(line, EMPTY_KEY).map(slot_at);
            }
        }
        let stale = || {
            let pattern = prefix(h, place.local_depth);
            (0..PROBE_BUCKETS as usize).find_map(|step| {
                let bucket = shape.bucket_after(home, step as u64);
                (0..SLOTS_PER_BUCKET as usize)
                    .find(|&s| !belongs(line_key(&lines[step], s), place.local_depth, pattern))
                    .map(|s| shape.slot(place.segment, bucket, s as u64))
            })
        };
        let slot = match empty.or_else(stale) {
            Some(slot) => slot,
            None => match self.displace(place, h)? {
                Some(slot) => slot,
                None => return Ok(Attempt::Full(*place)),
            },
        };
        self.put_slot(slot, key, value)?;
        stripe.count(1);
        Ok(Attempt::Done(None))
    }

    /// Write `key -> value` into `slot` and persist it: value first, then the key that commits
    /// it, in one line (one flush, one fence). A slot still holding a key (one a displacement
    /// has just copied on, or a stale copy a split left) is emptied first, in the same line, so
    /// a crash leaves the old key there whole, or the slot empty, or the new pair whole (stores
    /// to one line persist in order), and a lookup never pairs the old key with the new value
    /// (it re-reads the key after the value).
    pub(super) fn put_slot(&self, slot: u64, key: u64, value: u64) -> Result<(), CcehError> {
        let pool = self.heap.pool();
        let emptied = match self.word(slot)? {
            EMPTY_KEY => None,
            _ => {
                let emptied = pool.store_u64(slot, EMPTY_KEY)?;
                write_step(WriteStep::SlotEmptied);
                Some(emptied)
            }
        };
        let mut w = pool.store_u64(value_of(slot), value)?;
        write_step(WriteStep::ValueStored);
        if let Some(e) = emptied {
            w = e.merge(w);
        }
        let w = w.merge(pool.store_u64(slot, key)?);
        write_step(WriteStep::KeyStored);
        let _ = pool.persist(w);
        Ok(())
    }

    /// The slot holding `key` in its window, if any.
    pub(super) fn find(&self, place: &Place, key: u64, h: u64) -> Result<Option<u64>, CcehError> {
        let words = self.pool_words()?;
        for slot in self.shape.window(place.segment, h) {
            // Reached through the key's own directory entry, a slot holding the key is live: a
            // stale copy left by a split sits only in a segment the key no longer maps to.
            if self.word_in(words, slot)? == key {
                return Ok(Some(slot));
            }
        }
        Ok(None)
    }
}
