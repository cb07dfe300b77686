//! Segment splits and directory doublings, and why each is crash-safe and safe for lock-free
//! lookups.
//!
//! **Split** (FAST'19 CCEH, Sec. 4), three steps, each persisted before the next:
//!
//! 1. one undo-log transaction allocates the new segment, writes into it, slot for slot, the
//!    keys of the old segment whose next hash bit is 1, and points the first directory entry
//!    of the old segment's upper half at it with the new local depth. Until it commits, a crash
//!    rolls it all back (the segment is not leaked); once it has, the split is recorded;
//! 2. the rest of the upper half is pointed at the new segment;
//! 3. the lower half takes the new local depth.
//!
//! Each entry is one 8-byte store. A crash after step 1 leaves entries that disagree about the
//! old segment's span, which `Cceh::finish_interrupted_split` (`recovery.rs`) completes at
//! open. Keys that moved stay in the old segment (lazy deletion): they no longer match its
//! hash prefix, so they count as free slots there.
//!
//! For lookups: the new segment's slots are written before any entry names it (a release
//! fence orders them), so a lookup that reaches it through an entry sees its keys. A lookup
//! that read the old entry and scanned the old segment re-reads the entry at the end: any
//! entry store of steps 1 to 3 that touched its index makes it retry, which is what lets a
//! stale slot be reused under it.
//!
//! **Doubling**: a directory twice the size, every entry twice, is written and swapped in by
//! one 8-byte store of the root's pointer, in one transaction that allocates the new
//! directory and records the old one as retired (`reclaim.rs`): a crash neither leaks the new
//! directory nor frees the live one. A lookup that read the old pointer finds it changed at its
//! final check and retries; the old directory stays allocated until no lookup can read it.

use std::sync::atomic::{fence, Ordering};

use pmem_ordering::{Backend, PPtr};

use super::hashing::{belongs, hash, moves_at_split};
use super::layout::{set_slot_of, slots_of, Directory, Entry};
use super::reclaim::Retired;
use super::{write_step, Cceh, CcehError, Place, WriteStep, EMPTY_KEY, MAX_DEPTH};

impl<B: Backend> Cceh<B> {
    /// Split the segment at `place`, doubling the directory first if it has to.
    pub(super) fn split(&self, place: &Place) -> Result<(), CcehError> {
        if place.local_depth == place.global_depth {
            return self.double(place);
        }
        let pool = self.heap.pool();
        let local = place.local_depth;
        let span = 1u64 << (place.global_depth - local);
        let start = place.index & !(span - 1);
        let pattern = place.index >> (place.global_depth - local);
        let seg_bytes = self.shape.bytes();
        let mut old = vec![0u8; seg_bytes as usize];
        pool.read_bytes(place.segment, &mut old)?;
        // Slot for slot: keys whose next hash bit is 1 move, at the same position, so they
        // stay inside their probing window.
        let mut moved = vec![0u8; seg_bytes as usize];
        for (i, (k, v)) in slots_of(&old).enumerate() {
            if k != EMPTY_KEY && belongs(k, local, pattern) && moves_at_split(hash(k), local) {
                set_slot_of(&mut moved, i, k, v);
            }
        }
        // A retired directory no lookup can still read is freed in the same transaction.
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        let reclaim = retired
            .as_ref()
            .filter(|r| r.is_reclaimable())
            .map(|r| r.directory);
        let half = span / 2;
        // Step 1, one transaction: the new segment is allocated and written, and the first
        // entry of the upper half is pointed at it. Committed, the split is recorded for good:
        // the segment is reachable (a crash cannot leak it) and recovery can finish the rest.
        let new_segment = self.heap.transaction(|tx| {
            let new_segment = tx.alloc(seg_bytes)?.offset();
            tx.write(new_segment, &moved)?;
            // A lookup that loads an entry naming the new segment must see its slots.
            fence(Ordering::Release);
            let entry = Entry::new(new_segment, local + 1);
            tx.write_value(place.directory.entry(start + half), &entry.word())?;
            if let Some(directory) = reclaim {
                tx.write_value(self.root.retired(), &0u64)?;
                tx.free(PPtr::<u8>::new(directory))?;
            }
            Ok::<u64, CcehError>(new_segment)
        })?;
        write_step(WriteStep::SplitCommitted);
        if reclaim.is_some() {
            *retired = None;
        }
        // Steps 2 and 3, the order of FAST'19: the rest of the upper half names the new
        // segment, persisted, then the lower half takes the new local depth, persisted. Each
        // entry is one 8-byte store; a crash anywhere leaves a directory that
        // `finish_interrupted_split` completes at open.
        let new_entry = Entry::new(new_segment, local + 1);
        self.store_entries(place.directory, start + half + 1, half - 1, new_entry)?;
        write_step(WriteStep::UpperHalfPointed);
        let old_entry = Entry::new(place.segment, local + 1);
        self.store_entries(place.directory, start, half, old_entry)?;
        write_step(WriteStep::LowerHalfDeepened);
        Ok(())
    }

    /// Store `entry` into the `count` entries of `directory` from index `first` on, then flush
    /// them and fence once.
    pub(super) fn store_entries(
        &self,
        directory: Directory,
        first: u64,
        count: u64,
        entry: Entry,
    ) -> Result<(), CcehError> {
        if count == 0 {
            return Ok(());
        }
        let pool = self.heap.pool();
        let mut written = pool.store_u64(directory.entry(first), entry.word())?;
        for i in 1..count {
            written = written.merge(pool.store_u64(directory.entry(first + i), entry.word())?);
        }
        pool.persist(written);
        Ok(())
    }

    /// Double the directory: every entry twice, in a new directory swapped in by one pointer.
    fn double(&self, place: &Place) -> Result<(), CcehError> {
        let depth = place.global_depth;
        if depth >= MAX_DEPTH {
            return Err(CcehError::DirectoryFull);
        }
        let pool = self.heap.pool();
        let mut old = vec![0u8; Directory::entries_bytes(depth) as usize];
        pool.read_bytes(place.directory.entry(0), &mut old)?;
        let new = Directory::image(
            depth + 1,
            Directory::entries_from(&old).flat_map(|entry| [entry, entry]),
        );
        // Lookups may still be reading the old directory: it is retired, not freed, and the
        // directory retired before it (whose readers have gone by now, or soon will) is freed.
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = retired.as_ref() {
            if !r.is_reclaimable() && r.waits_for_this_thread() {
                // This thread's own read section holds the directory: waiting would never end.
                return Err(CcehError::WriterPinned);
            }
            r.wait_until_reclaimable();
        }
        let previous = retired.as_ref().map(|r| r.directory);
        // Taken before the swap, so that nothing can fail between the swap and the cache.
        let words = self.pool_words()?;
        let directory = self.heap.transaction(|tx| {
            let directory = tx.alloc(new.len() as u64)?.offset();
            tx.write(directory, &new)?;
            // A lookup that loads the new pointer must see the new directory's entries.
            fence(Ordering::Release);
            tx.write_value(self.root.directory(), &directory)?;
            tx.write_value(self.root.retired(), &place.directory.offset())?;
            if let Some(previous) = previous {
                tx.free(PPtr::<u8>::new(previous))?;
            }
            Ok::<u64, CcehError>(directory)
        })?;
        // Committed: lookups may take the new directory from the cache, which must name it
        // before the old one's grace period starts (see `directory_cache.rs`).
        self.directory_cache.set(words, directory, depth + 1);
        write_step(WriteStep::DirectorySwapped);
        *retired = Some(Retired::new(place.directory.offset()));
        Ok(())
    }
}
