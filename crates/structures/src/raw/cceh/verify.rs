//! [`Cceh::verify`]: a read-only walk of the root, the directory and every segment that lists
//! every violation it finds ([`Verification`]) instead of stopping at the first, for damaged
//! pools as much as healthy ones.
//!
//! Every offset read from the pool is range-checked before it is followed (the pool's checked
//! reads return errors, never panic), every directory index is bounded by the directory's
//! checked size, and each segment is read once however many runs name it, so no bytes make
//! the walk panic or loop.

use std::collections::HashMap;

use pmem_ordering::Backend;

use super::hashing::{belongs, hash};
use super::layout::{slots_of, Directory, Entry, ROOT_MAGIC, SLOT_BYTES};
use super::{Cceh, EMPTY_KEY, MAX_DEPTH, PROBE_BUCKETS, SLOTS_PER_BUCKET};
use crate::kind::StructureKind;
use crate::verify::{readable_block, Problem, Verification};

impl<B: Backend> Cceh<B> {
    /// Walk the whole table and report every violation found, with the blocks and live keys
    /// walked. Reads only: it changes nothing and takes no lock, so call it with no writers
    /// (a checker on a table just opened, or between batches); a writer running meanwhile can
    /// make it report damage that is only a split or an insert in progress.
    ///
    /// Checked: the root's magic; the directory pointer (aligned, inside the pool, an allocated
    /// block of its size) and its global depth (at most [`MAX_DEPTH`]); each segment's run of
    /// directory entries (local depth at most the global depth, `2^(global - local)` equal
    /// entries starting at a multiple of that span, no segment heading two runs: what
    /// extendible hashing keeps, FAST'19 CCEH); each segment (inside the pool, an allocated block of its size); each live slot
    /// (a key whose hash prefix is its segment's pattern; the other keys are stale copies a
    /// split left behind, which lazy deletion counts as free) inside its probing window; no
    /// live key twice in the table; the retired directory, if any, an allocated block; and the
    /// live keys against [`Cceh::len`].
    ///
    /// Not a check of its own: a stale key's hash prefix is not its segment's, by design, so
    /// "every key's prefix belongs to its segment" holds of live keys by definition; what
    /// makes a key reachable is its segment's run of entries and its probing window, both
    /// checked.
    pub fn verify(&self) -> Verification {
        self.verify_visiting(&mut |_, _, _| {})
    }

    /// [`Cceh::verify`], handing each live entry found (once) to `live` as `(slot offset, key,
    /// value)`: the maps built on the table check what the values point at.
    pub(crate) fn verify_visiting(&self, live: &mut dyn FnMut(u64, u64, u64)) -> Verification {
        let root = self.root.offset();
        let mut report = Verification::new(StructureKind::HashMap, root);
        let pool = self.heap.pool();
        match pool.load_u64(self.root.magic()) {
            Ok(ROOT_MAGIC) => {}
            Ok(found) => report.report(root, Problem::WrongMagic { found }),
            Err(_) => {
                report.report(root, Problem::OutOfPool { len: 8 });
                return report;
            }
        }
        if let Ok(retired) = pool.load_u64(self.root.retired()) {
            if retired != 0 && readable_block(&self.heap, &mut report, retired, 8, 8) {
                report.blocks_walked += 1;
            }
        }
        let Ok(directory) = pool.load_u64(self.root.directory()) else {
            report.report(self.root.directory(), Problem::OutOfPool { len: 8 });
            return report;
        };
        if let Some(entries) = self.directory_entries(&mut report, Directory::at(directory)) {
            report.blocks_walked += 1;
            self.verify_runs(&mut report, Directory::at(directory), &entries, live);
        }
        if report.keys != self.len() {
            report.report(
                root,
                Problem::CountMismatch {
                    counted: report.keys,
                    recorded: self.len(),
                },
            );
        }
        report
    }

    /// The entries of `directory`, if its pointer, depth and block are sound enough to read
    /// them; the violations found on the way are reported.
    fn directory_entries(
        &self,
        report: &mut Verification,
        directory: Directory,
    ) -> Option<Vec<Entry>> {
        let offset = directory.offset();
        if !offset.is_multiple_of(8) {
            report.report(offset, Problem::Misaligned { alignment: 8 });
            return None;
        }
        let Ok(depth) = self.heap.pool().load_u64(directory.depth()) else {
            report.report(offset, Problem::OutOfPool { len: 8 });
            return None;
        };
        if depth > MAX_DEPTH {
            report.report(
                offset,
                Problem::DepthTooLarge {
                    depth,
                    max: MAX_DEPTH,
                },
            );
            return None;
        }
        if !readable_block(&self.heap, report, offset, Directory::bytes(depth), 8) {
            return None;
        }
        // In the pool (just checked), so no bigger than the pool and addressable.
        let mut bytes = vec![0u8; Directory::entries_bytes(depth) as usize];
        self.heap
            .pool()
            .read_bytes(directory.entry(0), &mut bytes)
            .ok()?;
        Some(Directory::entries_from(&bytes).collect())
    }

    /// Each segment's run of entries, and each segment once.
    fn verify_runs(
        &self,
        report: &mut Verification,
        directory: Directory,
        entries: &[Entry],
        visit: &mut dyn FnMut(u64, u64, u64),
    ) {
        // The global depth, as the entry count gives it (a power of two: see `Directory`).
        let depth = u64::from(entries.len().trailing_zeros());
        let mut first_run: HashMap<u64, u64> = HashMap::new();
        let mut live: HashMap<(u64, u64), u64> = HashMap::new();
        let mut start = 0u64;
        while let Some(&head) = entries.get(start as usize) {
            let local = head.local_depth;
            if local > depth {
                report.report(
                    directory.entry(start),
                    Problem::LocalDepthAboveGlobal {
                        index: start,
                        local,
                        global: depth,
                    },
                );
                start += 1;
                continue;
            }
            let span = 1u64 << (depth - local);
            if !start.is_multiple_of(span) {
                report.report(
                    directory.entry(start),
                    Problem::MisalignedRun { index: start, span },
                );
            }
            let end = (start + span).min(entries.len() as u64);
            for index in start + 1..end {
                let found = entries[index as usize];
                if found != head {
                    report.report(
                        directory.entry(index),
                        Problem::EntryDisagrees {
                            index,
                            found: (found.segment, found.local_depth),
                            expected: (head.segment, local),
                            run_start: start,
                        },
                    );
                }
            }
            match first_run.get(&head.segment) {
                Some(&first_index) => report.report(
                    directory.entry(start),
                    Problem::SegmentInTwoRuns {
                        segment: head.segment,
                        first_index,
                        index: start,
                    },
                ),
                None => {
                    first_run.insert(head.segment, start);
                    let pattern = start >> (depth - local);
                    let segment = (head.segment, local, pattern);
                    self.verify_segment(report, &mut live, segment, visit);
                }
            }
            start = end;
        }
    }

    /// The live slots of one segment (its offset, local depth and hash prefix), each handed
    /// to `visit` once; `live` maps each live entry's identity (see `KeyWords::identity`) to
    /// its slot, table-wide.
    fn verify_segment(
        &self,
        report: &mut Verification,
        live: &mut HashMap<(u64, u64), u64>,
        (segment, local, pattern): (u64, u64, u64),
        visit: &mut dyn FnMut(u64, u64, u64),
    ) {
        let shape = self.shape;
        if !readable_block(&self.heap, report, segment, shape.bytes(), 64) {
            return;
        }
        let mut bytes = vec![0u8; shape.bytes() as usize];
        if self.heap.pool().read_bytes(segment, &mut bytes).is_err() {
            return;
        }
        report.blocks_walked += 1;
        for (i, (key, value)) in slots_of(&bytes).enumerate() {
            if key == EMPTY_KEY || !belongs(key, local, pattern) {
                continue;
            }
            let slot = segment + i as u64 * SLOT_BYTES;
            let bucket = i as u64 / SLOTS_PER_BUCKET;
            let home = shape.home(hash(key));
            if shape.distance(home, bucket) >= PROBE_BUCKETS {
                report.report(slot, Problem::KeyOutsideWindow { key, bucket, home });
            }
            match live.get(&self.key_words.identity(key, value)) {
                Some(&first) => report.report(slot, Problem::DuplicateKey { key, first }),
                None => {
                    live.insert(self.key_words.identity(key, value), slot);
                    report.keys += 1;
                    visit(slot, key, value);
                }
            }
        }
    }
}
