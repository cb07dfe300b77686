//! What both maps' `verify()` check the same way: the head (magic, version, intent lines) and
//! each record (a published block of the heap, of this map, its lengths within its block, its
//! checksum). Every offset is range-checked before it is read, each record is read once, and
//! a record is read only inside the block the heap gives it, so no bytes make a walk panic or
//! read far.

use std::collections::HashMap;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::head;
use super::intent::{AREA_BYTES, LINE_BYTES};
use super::layout::{self, HEADER_BYTES};
use crate::kind::StructureKind;
use crate::verify::{readable_block, Problem, Verification};

/// Records are line-aligned (the heap's record blocks are).
const RECORD_ALIGNMENT: u64 = 64;

/// Add a sub-structure's walk to `report`: its findings (which name the sub-structure) and
/// blocks. Its keys are the caller's to count.
pub(super) fn absorb(report: &mut Verification, part: Verification) {
    report.findings.extend(part.findings);
    report.blocks_walked += part.blocks_walked;
}

/// Check the head of the map of `kind` at `root`: magic, version, the intent area (an
/// allocated block, counted as walked) and each of its lines, whose retire words may name only
/// the layers of `retiring` (an ordered map's layers retired and not freed yet).
pub(super) fn verify_head<B: Backend>(
    heap: &Heap<B>,
    report: &mut Verification,
    root: u64,
    kind: StructureKind,
    retiring: &[u64],
) {
    let pool = heap.pool();
    let mut head = [0u8; 24];
    if pool.read_bytes(root, &mut head).is_err() {
        report.report(root, Problem::OutOfPool { len: 24 });
        return;
    }
    let word = |i: usize| u64::from_le_bytes(head[i * 8..i * 8 + 8].try_into().expect("8"));
    if word(0) != kind.magic() {
        report.report(root, Problem::WrongMagic { found: word(0) });
    }
    if word(1) != head::version_of(kind) {
        report.report(
            root + 8,
            Problem::WrongVersion {
                found: word(1),
                expected: head::version_of(kind),
            },
        );
    }
    let area = word(2);
    if !readable_block(heap, report, area, AREA_BYTES, 64) {
        return;
    }
    report.blocks_walked += 1;
    let mut bytes = vec![0u8; AREA_BYTES as usize];
    if pool.read_bytes(area, &mut bytes).is_err() {
        return;
    }
    for (line, words) in bytes.chunks_exact(LINE_BYTES as usize).enumerate() {
        let words: Vec<u64> = words
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8")))
            .collect();
        if let Some(reason) = malformed_line(pool, &words, retiring) {
            let line = line as u64;
            report.report(
                area + line * LINE_BYTES,
                Problem::MalformedIntentLine { line, reason },
            );
        }
    }
}

/// What is wrong with an intent line's words `[new offset, new size, old offset, old size,
/// layer, retire, 0, 0]`, if anything: what no write, whole or cut short, leaves there.
///
/// Lines are never cleared, and a crash in the middle of naming two blocks leaves each word
/// holding its old value or its new one (the words are 8-byte stores; `Records::stage`), so a
/// line may pair an offset with no size, or with the size of another write's block. Recovery
/// takes such a pair for what its header says (`Records::resolve`), which is harmless, so it is
/// no finding. Every offset a write names is a record block's (on a cache line, inside the
/// pool) and every size a block's (at most the pool's size): a word that breaks that, a
/// layer word at rest (set only while a layer is being made, and cleared at open), a retire
/// word naming no layer being retired, or an unused word that is not zero is damage.
fn malformed_line<B: Backend>(
    pool: &Pool<B>,
    words: &[u64],
    retiring: &[u64],
) -> Option<&'static str> {
    for (offset, size) in [(words[0], words[1]), (words[2], words[3])] {
        if offset != 0 && !offset.is_multiple_of(RECORD_ALIGNMENT) {
            return Some("it names a block that is not on a cache line");
        }
        if offset != 0 && pool.check_range(offset, HEADER_BYTES).is_err() {
            return Some("it names a block that is not inside the pool");
        }
        if size > pool.size() {
            return Some("it names a block larger than the pool");
        }
    }
    if words[4] != 0 {
        // Set only while a writer makes a layer, cleared once it is published or freed (and
        // at open): a map at rest has none.
        return Some("its layer word names a layer that was never published");
    }
    if words[5] != 0 && !retiring.contains(&words[5]) {
        // Set only while a layer is retired, cleared once it is freed (and at open).
        return Some("its retire word names a layer that is not being retired");
    }
    if words[6..].iter().any(|&w| w != 0) {
        return Some("its unused words are not zero");
    }
    None
}

/// The records of one map, each checked once.
pub(super) struct RecordWalk<'h, B: Backend> {
    heap: &'h Heap<B>,
    /// The owner field the map's records carry.
    owner: u64,
    /// Each record reached, with the slot or node that reached it first and its key (if it
    /// could be trusted).
    reached: HashMap<u64, (u64, Option<Vec<u8>>)>,
}

impl<'h, B: Backend> RecordWalk<'h, B> {
    /// A walk of the records of the map whose records carry `owner`.
    pub(super) fn new(heap: &'h Heap<B>, owner: u64) -> Self {
        RecordWalk {
            heap,
            owner,
            reached: HashMap::new(),
        }
    }

    /// Check the record at `record`, reached from the slot or node at `from`: on a cache
    /// line, inside the pool, reached once, a published record block (counted as walked), its
    /// lengths within the block, of this map, its checksum right. Its key, when it can be
    /// trusted (the checksum holds); a record reached again is reported, not read again.
    pub(super) fn verify(
        &mut self,
        report: &mut Verification,
        from: u64,
        record: u64,
    ) -> Option<Vec<u8>> {
        if let Some((first, key)) = self.reached.get(&record) {
            report.report(record, Problem::RecordReachedTwice { first: *first });
            return key.clone();
        }
        let key = self.verify_once(report, record);
        self.reached.insert(record, (from, key.clone()));
        key
    }

    /// The checks of [`RecordWalk::verify`] for a record reached the first time.
    fn verify_once(&mut self, report: &mut Verification, record: u64) -> Option<Vec<u8>> {
        let pool = self.heap.pool();
        if !record.is_multiple_of(RECORD_ALIGNMENT) {
            report.report(
                record,
                Problem::Misaligned {
                    alignment: RECORD_ALIGNMENT,
                },
            );
            return None;
        }
        if pool.check_range(record, HEADER_BYTES).is_err() {
            report.report(record, Problem::OutOfPool { len: HEADER_BYTES });
            return None;
        }
        let Some(block) = self.heap.record_block(record) else {
            report.report(
                record,
                Problem::NotAllocated {
                    bytes: HEADER_BYTES,
                },
            );
            return None;
        };
        report.blocks_walked += 1;
        let mut bytes = [0u8; HEADER_BYTES as usize];
        pool.read_bytes(record, &mut bytes).ok()?;
        let Some(header) = layout::parse_header(&bytes, block.size) else {
            let (key_len, value_len) = layout::header_lengths(&bytes);
            report.report(
                record,
                Problem::RecordTooLong {
                    key_len,
                    value_len,
                    block: block.size,
                },
            );
            return None;
        };
        if header.owner != self.owner {
            report.report(
                record,
                Problem::WrongOwner {
                    found: layout::root_of(header.owner),
                    expected: layout::root_of(self.owner),
                },
            );
        }
        // Inside the block (the header fits it), so no bigger than the pool.
        let (key, value) = layout::read_key_value(pool, record, &header).ok()?;
        let computed = header.computed(&key, &value);
        if computed != header.crc {
            report.report(
                record,
                Problem::ChecksumMismatch {
                    stored: header.crc,
                    computed,
                },
            );
            return None;
        }
        Some(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem_ordering::{Pool, PoolOptions};

    #[test]
    fn a_line_a_crash_can_leave_is_no_finding_and_damage_is() {
        let pool = Pool::anonymous("intent-lines", 1 << 20, &PoolOptions::new()).unwrap();
        let line = |w: [u64; 5]| [w[0], w[1], w[2], w[3], w[4], 0, 0, 0];
        // Left by a crash while a line was named: an offset whose size is not written yet,
        // an old size under a new offset, a new size under an old offset of none.
        for torn in [
            [0x4_0040, 0, 0, 0, 0],
            [0x4_0040, 0x80, 0x5_0000, 0, 0],
            [0, 0x40, 0, 0, 0],
            [0x4_0040, 0x40, 0xf_ffc0, 0x4_0000, 0],
        ] {
            assert_eq!(malformed_line(&pool, &line(torn), &[]), None, "{torn:x?}");
        }
        for (damaged, why) in [
            ([0x4_0044, 0x40, 0, 0, 0], "not on a cache line"),
            ([0x10_0000, 0x40, 0, 0, 0], "not inside the pool"),
            ([0, 0, 0x4_0040, 0x10_0040, 0], "larger than the pool"),
            ([0, 0, 0, 0, 0x8_0000], "layer word"),
        ] {
            let found = malformed_line(&pool, &line(damaged), &[]);
            assert!(
                found.is_some_and(|r| r.contains(why)),
                "{damaged:x?}: {found:?}"
            );
        }
        let mut unused = line([0; 5]);
        unused[7] = 1;
        assert!(malformed_line(&pool, &unused, &[]).is_some_and(|r| r.contains("unused")));
    }
}
