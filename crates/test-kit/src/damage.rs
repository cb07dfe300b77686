//! Damage written into a pool behind a structure's back, and the findings its `verify()` must
//! report: the helpers the verification tests share.

use pmem_structures::raw::verify::{Problem, Verification};
use pmem_undo_log::Heap;

/// The word at `offset`.
pub fn load(heap: &Heap, offset: u64) -> u64 {
    heap.pool().load_u64(offset).unwrap()
}

/// Store `word` at `offset` behind the structure's back, persisted (as a crash or a stray
/// write would leave it).
pub fn scribble(heap: &Heap, offset: u64, word: u64) {
    let written = heap.pool().store_u64(offset, word).unwrap();
    heap.pool().persist(written);
}

/// Flip the bits of `mask` in the byte at `offset` (through its aligned word).
pub fn flip_byte(heap: &Heap, offset: u64, mask: u8) {
    let word = offset & !7;
    let shift = 8 * (offset - word);
    scribble(heap, word, load(heap, word) ^ (u64::from(mask) << shift));
}

/// Whether `report` has a finding at `offset` whose problem `matches`.
pub fn has_finding(report: &Verification, offset: u64, matches: impl Fn(&Problem) -> bool) -> bool {
    report
        .findings
        .iter()
        .any(|f| f.offset == offset && matches(&f.problem))
}

/// Fail with the whole report unless it has a finding at `offset` that `matches`.
pub fn assert_found(report: &Verification, offset: u64, matches: impl Fn(&Problem) -> bool) {
    assert!(
        has_finding(report, offset, matches),
        "expected finding at {offset:#x} in\n{report}"
    );
}
