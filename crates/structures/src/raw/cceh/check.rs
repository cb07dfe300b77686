//! [`Cceh::check`]: a walk of the directory and every segment that verifies what the table's
//! lookups rely on, with a typed error (never a panic) for the first violation found.

use std::collections::HashSet;

use pmem_ordering::Backend;

use super::hashing::{belongs, hash};
use super::layout::{slots_of, Directory, Entry};
use super::{Cceh, CcehError, KeyWords, EMPTY_KEY, MAX_DEPTH, PROBE_BUCKETS, SLOTS_PER_BUCKET};

impl<B: Backend> Cceh<B> {
    /// Check the whole table and return the number of keys. Taken under the structure mutex
    /// and every stripe lock, like [`Cceh::iter`] (writers wait meanwhile; lookups do not).
    ///
    /// Verified: the global depth is at most [`MAX_DEPTH`]; the directory and every segment
    /// are blocks the heap allocated, of their size; each segment's directory entries form one
    /// aligned run of `2^(global - local)` equal entries (so every entry agrees with its
    /// segment's local depth); every live key (one whose hash prefix is its segment's pattern:
    /// the others are stale copies a split left behind, free slots) sits in its own probing
    /// window, where lookups search it; no live key is stored twice (in a table of hashed key
    /// words, no key word with the same value twice: colliding keys share a key word); and the
    /// live keys number [`Cceh::len`]. A violation is [`CcehError::Corrupt`], saying what and where.
    pub fn check(&self) -> Result<u64, CcehError> {
        let _structure = self.structure();
        let _stripes = self.stripes.lock_all();
        let directory = self.current_directory()?;
        let depth = self.word(directory.depth())?;
        if depth > MAX_DEPTH {
            return Err(self.corrupt(format!("global depth {depth} above {MAX_DEPTH}")));
        }
        if !self.allocated(directory.offset(), Directory::bytes(depth)) {
            return Err(self.corrupt(format!(
                "directory {:#x} of depth {depth} is not an allocated block of its size",
                directory.offset()
            )));
        }
        let mut keys = 0;
        for (start, segment, local) in self.segments()? {
            self.check_entries(directory, depth, start, segment, local)?;
            keys += self.check_segment(segment, local, start >> (depth - local))?;
        }
        if keys != self.len() {
            return Err(self.corrupt(format!("{keys} live keys, len says {}", self.len())));
        }
        Ok(keys)
    }

    /// The entries of the segment whose run starts at index `start`: an aligned run of
    /// `2^(depth - local)` entries, each naming the segment with its local depth.
    fn check_entries(
        &self,
        directory: Directory,
        depth: u64,
        start: u64,
        segment: u64,
        local: u64,
    ) -> Result<(), CcehError> {
        let span = 1u64 << (depth - local);
        if !start.is_multiple_of(span) {
            return Err(self.corrupt(format!(
                "entry {start} starts segment {segment:#x} of local depth {local}, not on a \
                 multiple of its span {span}"
            )));
        }
        let expected = Entry::new(segment, local).word();
        for i in start..start + span {
            let found = self.word(directory.entry(i))?;
            if found != expected {
                let found = Entry::from_word(found);
                return Err(self.corrupt(format!(
                    "entry {i} names segment {:#x} of local depth {}, but entry {start} gives \
                     that span to segment {segment:#x} of local depth {local}",
                    found.segment, found.local_depth
                )));
            }
        }
        Ok(())
    }

    /// The live keys of `segment` (local depth `local`, hash prefix `pattern`): each in its
    /// probing window, no entry twice (see `KeyWords::identity`). Returns how many there are.
    fn check_segment(&self, segment: u64, local: u64, pattern: u64) -> Result<u64, CcehError> {
        let shape = self.shape;
        if !self.allocated(segment, shape.bytes()) {
            return Err(self.corrupt(format!(
                "segment {segment:#x} is not an allocated block of {} bytes",
                shape.bytes()
            )));
        }
        let mut bytes = vec![0u8; shape.bytes() as usize];
        self.heap.pool().read_bytes(segment, &mut bytes)?;
        let mut seen = HashSet::new();
        for (i, (key, value)) in slots_of(&bytes).enumerate() {
            if key == EMPTY_KEY || !belongs(key, local, pattern) {
                continue;
            }
            let bucket = i as u64 / SLOTS_PER_BUCKET;
            let home = shape.home(hash(key));
            if shape.distance(home, bucket) >= PROBE_BUCKETS {
                return Err(self.corrupt(format!(
                    "key {key} sits in bucket {bucket} of segment {segment:#x}, outside its \
                     probing window from bucket {home}"
                )));
            }
            if !seen.insert(self.key_words.identity(key, value)) {
                return Err(self.corrupt(match self.key_words {
                    KeyWords::Unique => {
                        format!("key {key} is stored twice in segment {segment:#x}")
                    }
                    KeyWords::Hashed => format!(
                        "key word {key} with value {value} is stored twice in segment {segment:#x}"
                    ),
                }));
            }
        }
        Ok(seen.len() as u64)
    }

    /// Whether the heap allocated a block at `offset` of at least `bytes` bytes.
    fn allocated(&self, offset: u64, bytes: u64) -> bool {
        self.heap
            .block_size(offset)
            .is_some_and(|size| size >= bytes)
    }

    fn corrupt(&self, reason: String) -> CcehError {
        CcehError::Corrupt {
            root: self.root.offset(),
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_heap::{heap, keys_at_home};
    use super::super::CcehConfig;
    use super::*;
    use pmem_undo_log::Heap;

    fn buckets(buckets_per_segment: u64) -> CcehConfig {
        CcehConfig {
            buckets_per_segment,
        }
    }

    /// Store `word` at `offset`, behind the table's back (persisted, as a crash would leave
    /// it).
    fn scribble(heap: &Heap, offset: u64, word: u64) {
        let written = heap.pool().store_u64(offset, word).unwrap();
        heap.pool().persist(written);
    }

    /// The reason of a `Corrupt` error (any other outcome fails the test).
    fn corruption(result: Result<u64, CcehError>) -> String {
        match result {
            Err(CcehError::Corrupt { reason, .. }) => reason,
            other => panic!("expected a Corrupt error, got {other:?}"),
        }
    }

    #[test]
    fn a_table_grown_through_splits_and_doublings_checks_with_its_key_count() {
        let heap = heap();
        let table = Cceh::create(&heap, heap.pool().root_offset(), buckets(4)).unwrap();
        assert_eq!(table.check().unwrap(), 0);
        for k in 1..=3000 {
            assert!(table.insert(k, k * 2).unwrap());
        }
        for k in (1..=3000).step_by(3) {
            assert_eq!(table.remove(k).unwrap(), Some(k * 2));
        }
        assert!(
            table.global_depth().unwrap() >= 4,
            "splits and doublings ran"
        );
        assert_eq!(table.check().unwrap(), 2000);
        assert_eq!(table.len(), 2000);
    }

    #[test]
    fn a_live_key_stored_twice_is_reported() {
        let heap = heap();
        let table = Cceh::create(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
        let key = keys_at_home(5, 1).next().unwrap();
        assert!(table.insert(key, 7).unwrap());
        let place = table.locate(hash(key)).unwrap();
        let first = table.find(&place, &key, hash(key)).unwrap().unwrap().0;
        let free = table
            .shape
            .window(place.segment, hash(key))
            .find(|&slot| slot != first && table.word(slot).unwrap() == EMPTY_KEY)
            .unwrap();
        scribble(&heap, free + 8, 7);
        scribble(&heap, free, key);
        let reason = corruption(table.check());
        assert!(
            reason.contains(&format!("key {key} is stored twice")),
            "{reason}"
        );
    }

    #[test]
    fn a_live_key_outside_its_probing_window_is_reported() {
        let heap = heap();
        let table = Cceh::create(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
        let key = keys_at_home(0, 1).next().unwrap();
        let segment = table.locate(hash(key)).unwrap().segment;
        // Bucket 8 is eight buckets past the key's home: outside its four-bucket window.
        let slot = table.shape.slot(segment, 8, 0);
        scribble(&heap, slot + 8, 1);
        scribble(&heap, slot, key);
        let reason = corruption(table.check());
        assert!(
            reason.contains(&format!("key {key} sits in bucket 8")),
            "{reason}"
        );
    }

    #[test]
    fn a_key_the_count_does_not_know_is_reported() {
        let heap = heap();
        let table = Cceh::create(&heap, heap.pool().root_offset(), buckets(16)).unwrap();
        assert!(table.insert(3, 30).unwrap());
        // A key written into its home bucket behind the table's back: well placed, uncounted.
        let key = keys_at_home(2, 4).next().unwrap();
        let segment = table.locate(hash(key)).unwrap().segment;
        let slot = table.shape.slot(segment, 2, 3);
        assert_eq!(table.word(slot).unwrap(), EMPTY_KEY);
        scribble(&heap, slot + 8, 1);
        scribble(&heap, slot, key);
        let reason = corruption(table.check());
        assert!(reason.contains("2 live keys, len says 1"), "{reason}");
    }

    #[test]
    fn a_directory_entry_disagreeing_with_its_segment_span_is_reported() {
        let heap = heap();
        let table = Cceh::create(&heap, heap.pool().root_offset(), buckets(4)).unwrap();
        // Grow until some segment spans two entries or more.
        let mut keys = 1..;
        let (start, segment, local, depth) = loop {
            table.insert(keys.next().unwrap(), 1).unwrap();
            let depth = table.global_depth().unwrap();
            let wide = table
                .segments()
                .unwrap()
                .into_iter()
                .find(|&(_, _, local)| local < depth);
            if let Some((start, segment, local)) = wide {
                break (start, segment, local, depth);
            }
        };
        let (_, other, _) = table
            .segments()
            .unwrap()
            .into_iter()
            .find(|&(_, s, _)| s != segment)
            .unwrap();
        let last = start + (1 << (depth - local)) - 1;
        let directory = table.current_directory().unwrap();
        scribble(
            &heap,
            directory.entry(last),
            Entry::new(other, local).word(),
        );
        let reason = corruption(table.check());
        assert!(
            reason.contains(&format!("entry {last} names segment {other:#x}")),
            "{reason}"
        );
    }
}
