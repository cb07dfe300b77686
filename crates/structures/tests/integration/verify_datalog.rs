//! `Datalog::verify`: a store after writes of both kinds, truncates, renames, removes, log
//! cleaning and a reopen gives no findings and counts its blocks and files; damage written
//! behind its back (a data page byte, an entry's bit, a log link) is reported as the finding
//! of its kind at its offset; random bit flips in live lines never make `verify()` panic.
//!
//! Offsets of the on-media format (`datalog/layout/mod.rs`) are spelled out as constants: a
//! change of format must change them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem_structures::raw::datalog::{Datalog, DatalogConfig, Policy, WriteMode, PAGE};
use pmem_structures::raw::verify::Problem;
use pmem_structures::StructureKind;
use pmem_test_kit::damage::{assert_found, load, scribble};
use pmem_test_kit::fixture::{anonymous_heap, reopen};
use pmem_test_kit::SplitMix64;
use pmem_undo_log::Heap;

/// Root word: the inode table.
const ROOT_TABLE: u64 = 8;
/// Inode words: the tail, the head.
const INODE_TAIL: u64 = 0;
const INODE_HEAD: u64 = 8;
const INODE_BYTES: u64 = 128;
/// A log page's first entry; an entry's header; an extent's data block word.
const LOG_HEADER: u64 = 64;
const EXTENT_BLOCK: u64 = 32;

type Files = Datalog<pmem_ordering::Hardware>;

/// Inode `slot`'s (head, tail).
fn log_of(heap: &Heap, slot: u64) -> (u64, u64) {
    let inode = load(heap, heap.pool().root_offset() + ROOT_TABLE) + slot * INODE_BYTES;
    (
        load(heap, inode + INODE_HEAD),
        load(heap, inode + INODE_TAIL),
    )
}

fn create(heap: &Heap, mode: WriteMode) -> Files {
    let config = DatalogConfig {
        max_files: 8,
        policy: Policy::with_mode(mode),
    };
    Datalog::create(heap, heap.pool().root_offset(), config).unwrap()
}

fn assert_healthy(files: &Files) {
    let report = files.verify();
    assert!(report.is_healthy(), "{report}");
    assert_eq!(report.structure, StructureKind::Datalog);
    assert_eq!(report.blocks_walked, files.blocks().len() as u64);
    assert_eq!(report.keys, files.list().len() as u64);
}

/// Files written both ways, overwritten until cleaning runs, truncated, renamed and removed.
fn busy(files: &Files) {
    let a = files.create_file("a").unwrap();
    let b = files.create_file("b").unwrap();
    let gone = files.create_file("gone").unwrap();
    let mut rng = SplitMix64::new(5);
    for round in 0..400u64 {
        let offset = rng.below(6 * PAGE);
        let len = 1 + rng.below(if round % 7 == 0 { 3 * PAGE } else { 300 });
        let bytes = vec![round as u8; len as usize];
        let mode = if round % 3 == 0 {
            WriteMode::CopyOnWrite
        } else {
            WriteMode::Embedded
        };
        files.write_at_with(a, offset, &bytes, mode).unwrap();
        files.write_at(b, offset / 2, &bytes).unwrap();
        files.write_at(gone, 0, &bytes).unwrap();
        if round % 50 == 49 {
            files.truncate(a, rng.below(4 * PAGE)).unwrap();
        }
    }
    files.rename("b", "bee").unwrap();
    files.remove("gone").unwrap();
}

#[test]
fn a_busy_store_verifies_clean_before_and_after_a_reopen() {
    let mut heap = anonymous_heap("verify", 32 << 20);
    let root = heap.pool().root_offset();
    {
        let files = create(&heap, WriteMode::Auto);
        assert_healthy(&files);
        busy(&files);
        let cleaning = files.cleaning_stats();
        assert!(
            cleaning.pages_reclaimed + cleaning.compactions > 0,
            "cleaning ran: {cleaning:?}"
        );
        assert_healthy(&files);
        assert_eq!(files.verify().keys, 2);
    }
    heap = reopen(heap);
    let files = Datalog::open(&heap, root).unwrap();
    assert_healthy(&files);
}

#[test]
fn a_flipped_data_page_byte_fails_its_checksum_at_the_page() {
    let heap = anonymous_heap("verify", 8 << 20);
    let files = create(&heap, WriteMode::CopyOnWrite);
    let id = files.create_file("f").unwrap();
    files.write_at(id, 0, &[7u8; 2 * PAGE as usize]).unwrap();
    let (head, _) = log_of(&heap, 0);
    let block = load(&heap, head + LOG_HEADER + EXTENT_BLOCK);
    let word = block + PAGE + 800;
    let original = load(&heap, word);
    scribble(&heap, word, original ^ 1 << 9);
    let report = files.verify();
    assert_found(&report, block + PAGE, |p| {
        matches!(p, Problem::PageChecksum { file, file_page: 1, recorded, found }
            if file == "f" && recorded != found)
    });
    assert_eq!(report.findings.len(), 1, "{report}");
    assert!(report.findings[0]
        .to_string()
        .contains("data page 1 of file \"f\""));
    scribble(&heap, word, original);
    assert_healthy(&files);
}

#[test]
fn a_flipped_entry_bit_fails_the_entry_checksum() {
    let heap = anonymous_heap("verify", 8 << 20);
    let files = create(&heap, WriteMode::Embedded);
    let id = files.create_file("f").unwrap();
    files.write_at(id, 0, b"first").unwrap();
    files.write_at(id, 100, b"second").unwrap();
    let (head, _) = log_of(&heap, 0);
    let entry = head + LOG_HEADER;
    let payload = entry + 32;
    let original = load(&heap, payload);
    scribble(&heap, payload, original ^ 1 << 3);
    let report = files.verify();
    assert_found(&report, entry, |p| *p == Problem::EntryChecksum);
    scribble(&heap, payload, original);
    assert_healthy(&files);
}

#[test]
fn broken_log_links_are_reported_without_looping() {
    let heap = anonymous_heap("verify", 8 << 20);
    let files = create(&heap, WriteMode::Embedded);
    let long = files.create_file("long").unwrap();
    // Distinct offsets keep every entry live: the log spans several pages.
    for i in 0..100u64 {
        files.write_at(long, i * 128, &[i as u8; 100]).unwrap();
    }
    files.create_file("short").unwrap();
    let (head, tail) = log_of(&heap, 0);
    let (other_head, _) = log_of(&heap, 1);
    let next = load(&heap, head);
    assert!(
        next != 0 && tail - tail % PAGE != head,
        "the tail is past the first page"
    );
    // A link out of the pool.
    let nowhere = (heap.pool().size() + 4 * PAGE) & !(PAGE - 1);
    scribble(&heap, head, nowhere);
    let report = files.verify();
    assert_found(&report, nowhere, |p| matches!(p, Problem::OutOfPool { .. }));
    assert_found(&report, head, |p| *p == Problem::LogEndsBeforeTail { tail });
    // A cycle back to the head.
    scribble(&heap, head, head);
    assert_found(&files.verify(), head, |p| {
        *p == Problem::LogCycle { next: head }
    });
    // A link into the other file's log.
    scribble(&heap, head, other_head);
    let report = files.verify();
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.offset == other_head && matches!(f.problem, Problem::ReachedTwice { .. })),
        "{report}"
    );
    // A misaligned link.
    scribble(&heap, head, next + 8);
    assert_found(&files.verify(), next + 8, |p| {
        *p == Problem::Misaligned { alignment: 64 }
    });
    scribble(&heap, head, next);
    assert_healthy(&files);
}

#[test]
fn random_bit_flips_in_live_lines_never_make_verify_panic() {
    let heap = anonymous_heap("verify", 16 << 20);
    let files = create(&heap, WriteMode::Auto);
    busy(&files);
    let blocks = files.blocks();
    let mut rng = SplitMix64::new(41);
    let mut reported = 0;
    for flip in 0..200 {
        let block = blocks[rng.below(blocks.len() as u64) as usize];
        let size = heap.block_size(block).expect("a live block");
        let word = block + 64 * rng.below(size / 64) + 8 * rng.below(8);
        let bit = rng.below(64);
        let original = load(&heap, word);
        scribble(&heap, word, original ^ 1 << bit);
        let outcome = catch_unwind(AssertUnwindSafe(|| files.verify()));
        scribble(&heap, word, original);
        match outcome {
            Ok(report) => reported += u64::from(!report.is_healthy()),
            Err(_) => panic!("verify panicked on flip {flip}: bit {bit} of {word:#x}"),
        }
    }
    assert!(reported > 0, "some flips must be seen");
    assert_healthy(&files);
}
