//! Opening a table after a clean shutdown or a crash ([`Cceh::open`]): finishing a split a
//! crash interrupted, checking the directory, counting the keys (and dropping the second copy
//! of a key a crash left twice mid-displacement), and freeing a retired directory.
//!
//! The heap's own recovery runs first (when the heap is opened): it rolls back a split whose
//! transaction had not committed, and a doubling. What is left for this file is a split that
//! had passed its transaction: see `split.rs` for the steps.

use pmem_ordering::{Backend, PPtr};
use pmem_undo_log::Heap;

use super::hashing::{belongs, hash};
use super::layout::{slots_of, Directory, Entry, Root, SegmentShape, ROOT_MAGIC};
use super::SLOTS_PER_BUCKET as SLOTS;
use super::{valid_bucket_count, Cceh, CcehError, KeyWords, EMPTY_KEY, MAX_DEPTH};
use crate::kind::describe_magic;

impl<B: Backend> Cceh<B> {
    /// Open the table whose root is at `root`, with the configuration its root records. A root
    /// that holds anything else is refused with [`CcehError::WrongKind`]. The heap has already
    /// rolled back a doubling, or a split whose transaction, a crash interrupted; this finishes
    /// a split that had passed its transaction (FAST'19's recovery), checks the directory,
    /// counts the keys (keeping one copy of a key a crash left twice by a displacement) and
    /// frees the directory a doubling retired (no lookup of an earlier run can still be reading
    /// it).
    pub fn open(heap: &Heap<B>, root: u64) -> Result<Self, CcehError> {
        Cceh::open_in_mode(heap, root, KeyWords::Unique)
    }

    /// [`Cceh::open`] for a table made by [`Cceh::create_hashed`]: entries that share a key
    /// word are distinct unless their values are equal too (only those are copies a crash
    /// left mid-displacement, of which one is kept). Opening such a table with
    /// [`Cceh::open`] is a bug of the caller (it would keep one entry per key word).
    pub(crate) fn open_hashed(heap: &Heap<B>, root: u64) -> Result<Self, CcehError> {
        Cceh::open_in_mode(heap, root, KeyWords::Hashed)
    }

    /// [`Cceh::open`] with key words of the given mode.
    fn open_in_mode(heap: &Heap<B>, root: u64, key_words: KeyWords) -> Result<Self, CcehError> {
        let pool = heap.pool();
        let corrupt = |reason: String| CcehError::Corrupt { root, reason };
        // As at create: lookups read the root's words without an alignment check.
        if !root.is_multiple_of(64) {
            return Err(CcehError::InvalidConfig {
                reason: format!("root offset {root:#x} is not 64-byte aligned"),
            });
        }
        let root = Root::at(root);
        let magic = pool.read::<u64>(root.magic())?;
        if magic != ROOT_MAGIC {
            return Err(CcehError::WrongKind {
                root: root.offset(),
                found: describe_magic(magic),
            });
        }
        let buckets = pool.read::<u64>(root.buckets_per_segment())?;
        if !valid_bucket_count(buckets) {
            return Err(corrupt(format!("{buckets} buckets per segment")));
        }
        let shape = SegmentShape::new(buckets);
        let mut table = Cceh::with_shape(heap, root, shape, key_words)?;
        let directory = table.current_directory()?;
        let depth = table.word(directory.depth())?;
        if depth > MAX_DEPTH {
            return Err(corrupt(format!("global depth {depth}")));
        }
        // The directory and every segment must be blocks the heap gave this table.
        let owned = |offset: u64, needed: u64| {
            table
                .heap
                .block_size(offset)
                .is_some_and(|size| size >= needed)
        };
        if !owned(directory.offset(), Directory::bytes(depth)) {
            return Err(corrupt(format!(
                "directory {:#x} of depth {depth} is not an allocated block of its size",
                directory.offset()
            )));
        }
        table.repaired_at_open = table.finish_interrupted_split()?;
        // Every segment's entries must agree, and its depth must not exceed the directory's.
        let mut count = 0;
        for (start, segment, local) in table.segments()? {
            if local > depth || !owned(segment, shape.bytes()) {
                return Err(corrupt(format!(
                    "entry {start}: segment {segment:#x} (local depth {local}) is not an allocated segment"
                )));
            }
            let span = 1u64 << (depth - local);
            if !start.is_multiple_of(span) {
                return Err(corrupt(format!(
                    "entry {start} starts a segment of span {span}"
                )));
            }
            let expected = Entry::new(segment, local).word();
            for i in start..start + span {
                if table.word(directory.entry(i))? != expected {
                    return Err(corrupt(format!("entry {i} disagrees with entry {start}")));
                }
            }
            count += table.remove_duplicates(segment, local, start >> (depth - local))?;
        }
        table.stripes.set_total(count);
        let retired = table.word(root.retired())?;
        if retired != 0 {
            if retired == directory.offset() || !owned(retired, Directory::bytes(0)) {
                return Err(corrupt(format!(
                    "retired directory {retired:#x} is not an allocated block of its own"
                )));
            }
            table.heap.transaction(|tx| {
                tx.write_value(root.retired(), &0u64)?;
                tx.free(PPtr::<u8>::new(retired))
            })?;
        }
        Ok(table)
    }

    /// Finish a split a crash interrupted, as FAST'19's recovery does: a split is recorded
    /// once its first transaction commits (the new segment written, the first entry of the
    /// upper half naming it); the rest of the upper half and then the new local depth of the
    /// lower half may be missing. Walking the directory block by block, a block that does not
    /// agree with its first entry is such a split: its lower half takes the old segment with
    /// the new depth, its upper half the new segment. Idempotent (a crash during the repair is
    /// repaired the same way). Returns how many entries it rewrote.
    fn finish_interrupted_split(&self) -> Result<u64, CcehError> {
        let pool = self.heap.pool();
        let corrupt = |reason: String| CcehError::Corrupt {
            root: self.root.offset(),
            reason,
        };
        let directory = self.current_directory()?;
        let depth = self.word(directory.depth())?;
        if depth > MAX_DEPTH {
            return Err(corrupt(format!("global depth {depth}")));
        }
        let n = 1u64 << depth;
        let mut bytes = vec![0u8; Directory::entries_bytes(depth) as usize];
        pool.read_bytes(directory.entry(0), &mut bytes)?;
        let entries: Vec<u64> = Directory::entries_from(&bytes).map(Entry::word).collect();
        let mut repaired = 0;
        let mut i = 0;
        while i < n {
            let first = entries[i as usize];
            let Entry {
                segment,
                local_depth: local,
            } = Entry::from_word(first);
            if local > depth {
                return Err(corrupt(format!(
                    "entry {i}: local depth {local} above {depth}"
                )));
            }
            let span = 1u64 << (depth - local);
            if !i.is_multiple_of(span) {
                return Err(corrupt(format!(
                    "entry {i} starts a segment of span {span}"
                )));
            }
            let block = &entries[i as usize..(i + span) as usize];
            if block.iter().all(|&e| e == first) {
                i += span;
                continue;
            }
            let half = span / 2;
            let (lower, upper) = block.split_at(half as usize);
            let is_old = |e: u64| Entry::from_word(e).segment == segment;
            if block.iter().all(|&e| is_old(e)) {
                // The lower half of a split, part of it still at the old depth: the first
                // entry already has the new one.
                if local == 0
                    || block
                        .iter()
                        .any(|&e| e != first && e != Entry::new(segment, local - 1).word())
                {
                    return Err(corrupt(format!(
                        "entries {i}..{}: depths that no split leaves",
                        i + span
                    )));
                }
                self.store_entries(directory, i, span, Entry::from_word(first))?;
            } else {
                // The old segment's whole span: the upper half's first entry names the new
                // segment (it was written in the split's transaction); the rest of that half
                // names the new segment or still the old one, the lower half the old one.
                let new = upper.first().copied().unwrap_or(first);
                if is_old(new)
                    || Entry::from_word(new).local_depth != local + 1
                    || lower.iter().any(|&e| !is_old(e))
                    || upper.iter().any(|&e| e != new && e != first)
                {
                    return Err(corrupt(format!(
                        "entries {i}..{}: a split that cannot be finished",
                        i + span
                    )));
                }
                self.store_entries(directory, i + half, half, Entry::from_word(new))?;
                self.store_entries(directory, i, half, Entry::new(segment, local + 1))?;
            }
            repaired += span;
            i += span;
        }
        Ok(repaired)
    }

    /// Clear the second copy of any entry a crash in the middle of a displacement left twice
    /// in a segment (both copies hold the same key word and value); returns the number of
    /// distinct live entries. Which live slots are copies of one entry is the table's
    /// [`KeyWords`]: the same key word (`Unique`), or the same key word and value (`Hashed`:
    /// entries of colliding keys share a key word and differ by value, and are all kept).
    fn remove_duplicates(&self, segment: u64, local: u64, pattern: u64) -> Result<u64, CcehError> {
        let pool = self.heap.pool();
        let mut bytes = vec![0u8; self.shape.bytes() as usize];
        pool.read_bytes(segment, &mut bytes)?;
        let shape = self.shape;
        let key_words = self.key_words;
        // (entry identity, its place in its key's probing order, slot offset): sorted, an
        // entry's first copy in probing order is kept.
        let mut live: Vec<((u64, u64), u64, u64)> = slots_of(&bytes)
            .enumerate()
            .filter_map(|(i, (k, v))| {
                if k == EMPTY_KEY || !belongs(k, local, pattern) {
                    return None;
                }
                let (bucket, slot) = (i as u64 / SLOTS, i as u64 % SLOTS);
                let order = shape.distance(shape.home(hash(k)), bucket) * SLOTS + slot;
                Some((
                    key_words.identity(k, v),
                    order,
                    shape.slot(segment, bucket, slot),
                ))
            })
            .collect();
        live.sort_unstable();
        let mut distinct = 0;
        for (i, &(identity, _, slot)) in live.iter().enumerate() {
            if i > 0 && live[i - 1].0 == identity {
                let w = pool.store_u64(slot, EMPTY_KEY)?;
                pool.persist(w);
            } else {
                distinct += 1;
            }
        }
        Ok(distinct)
    }
}
