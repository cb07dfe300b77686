//! The bit-flip experiment, for every kind of structure a `Store` holds: a store
//! file is written and closed; then copies of it, each with one random bit flipped in a live
//! line of that structure (a line of a block it owns), are opened, read in full (a `get` of
//! every key or a read of every file, and a full iteration) and verified (`Store::verify`).
//!
//! Each copy has one outcome:
//! - **detected**: the open, a read or `verify()` reported damage;
//! - **harmless**: every read equals the healthy file's and `verify()` is clean;
//! - **silent**: a read served something else and nothing reported it.
//!
//! The test fails on a panic anywhere, and on any silent outcome for a flip in bytes a
//! checksum covers: the byte-key maps' records and the datalog's log pages and copy-on-write
//! data pages. The `u64` maps keep their entries inline without a checksum (their docs say
//! what that misses); their silent outcomes are counted and printed, not refused.

use pmem_undo_log::Heap;
use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use pmem_ordering::Granularity;
use pmem_structures::raw::datalog::{DatalogConfig, Policy, WriteMode};
use pmem_structures::{Error, Store, StoreOptions};
use pmem_test_kit::fixture::scratch_dir;
use pmem_test_kit::SplitMix64;

/// Copies checked per structure: enough to reach every kind of line, quick in release mode.
const FLIPS: u64 = 200;
/// Bytes of each store file.
const POOL: u64 = 8 << 20;
/// The one structure in each file.
const NAME: &str = "subject";

/// What a full read of a structure returned, in a form two reads can be compared in.
type Readout = Vec<(Vec<u8>, Vec<u8>)>;

/// Whether a checksum covers the bytes of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Cover {
    Checksummed,
    Unchecked,
}

/// One kind of structure under test: how to fill it, read it all back, and tell which of its
/// blocks a checksum covers.
struct Subject {
    label: &'static str,
    fill: fn(&Store),
    read: fn(&Store) -> Result<Readout, Error>,
    cover: fn(&Store, u64) -> Cover,
}

fn options() -> StoreOptions {
    StoreOptions::new().granularity(Granularity::Emulated)
}

fn key_bytes(i: u64) -> Vec<u8> {
    format!("key-{i:06}-{}", "k".repeat((i % 13) as usize)).into_bytes()
}

fn value_bytes(i: u64) -> Vec<u8> {
    format!("value-{i}-{}", "v".repeat((i * 7 % 90) as usize)).into_bytes()
}

/// The keys every map holds: some removed and some overwritten after insertion, so that the
/// file has the shapes those leave.
fn map_contents() -> BTreeMap<u64, u64> {
    let mut model = BTreeMap::new();
    for i in 0..1500u64 {
        model.insert(i * 7919 % 100_003, i);
    }
    for i in (0..1500u64).step_by(5) {
        model.remove(&(i * 7919 % 100_003));
    }
    for i in (1..1500u64).step_by(7) {
        if let Some(v) = model.get_mut(&(i * 7919 % 100_003)) {
            *v += 1_000_000;
        }
    }
    model
}

/// Fill a map with `map_contents` through its `insert`, `upsert` and `remove`.
macro_rules! fill_map {
    ($map:expr, $key:expr, $value:expr) => {{
        let map = $map;
        for i in 0..1500u64 {
            map.insert($key(i * 7919 % 100_003), $value(i)).unwrap();
        }
        for i in (0..1500u64).step_by(5) {
            map.remove($key(i * 7919 % 100_003)).unwrap();
        }
        let model = map_contents();
        for i in (1..1500u64).step_by(7) {
            let key = i * 7919 % 100_003;
            if let Some(v) = model.get(&key) {
                map.upsert($key(key), $value(*v)).unwrap();
            }
        }
    }};
}

/// Read a map in full: a `get` of every key of `map_contents`, then every pair of its iterator.
macro_rules! read_map {
    ($map:expr, $key:expr, $encode_key:expr, $encode_value:expr) => {{
        let map = $map;
        let mut out = Readout::new();
        for key in map_contents().keys() {
            let value = map.get($key(*key))?;
            out.push((
                $encode_key($key(*key)),
                value.map(|v| $encode_value(v)).unwrap_or_default(),
            ));
        }
        for pair in map.iter() {
            let (k, v) = pair?;
            out.push(($encode_key(k), $encode_value(v)));
        }
        Ok(out)
    }};
}

fn words(v: u64) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

fn u64_hash() -> Subject {
    Subject {
        label: "u64 hash map (CCEH)",
        fill: |store| fill_map!(store.hash_map::<u64, u64>(NAME).unwrap(), |k| k, |v| v),
        read: |store| read_map!(store.hash_map::<u64, u64>(NAME)?, |k| k, words, words),
        cover: |_, _| Cover::Unchecked,
    }
}

fn u64_tree() -> Subject {
    Subject {
        label: "u64 ordered map (FAST&FAIR)",
        fill: |store| fill_map!(store.btree_map::<u64, u64>(NAME).unwrap(), |k| k, |v| v),
        read: |store| read_map!(store.btree_map::<u64, u64>(NAME)?, |k| k, words, words),
        cover: |_, _| Cover::Unchecked,
    }
}

/// A byte-key map's records carry a checksum; the index blocks that reach them do not.
fn record_cover(store: &Store, block: u64) -> Cover {
    if engine(store).record_block(block).is_some() {
        Cover::Checksummed
    } else {
        Cover::Unchecked
    }
}

fn bytes_hash() -> Subject {
    Subject {
        label: "byte-key hash map (records)",
        fill: |store| {
            fill_map!(
                store.hash_map::<Vec<u8>, Vec<u8>>(NAME).unwrap(),
                key_bytes,
                value_bytes
            )
        },
        read: |store| {
            read_map!(
                store.hash_map::<Vec<u8>, Vec<u8>>(NAME)?,
                key_bytes,
                |k: Vec<u8>| k,
                |v: Vec<u8>| v
            )
        },
        cover: record_cover,
    }
}

fn bytes_tree() -> Subject {
    Subject {
        label: "byte-key ordered map (records)",
        fill: |store| {
            fill_map!(
                store.btree_map::<Vec<u8>, Vec<u8>>(NAME).unwrap(),
                key_bytes,
                value_bytes
            )
        },
        read: |store| {
            read_map!(
                store.btree_map::<Vec<u8>, Vec<u8>>(NAME)?,
                key_bytes,
                |k: Vec<u8>| k,
                |v: Vec<u8>| v
            )
        },
        cover: record_cover,
    }
}

const FILES: u64 = 12;

fn file_name(i: u64) -> String {
    format!("file-{i}")
}

fn datalog_config(mode: WriteMode) -> DatalogConfig {
    DatalogConfig {
        max_files: 16,
        policy: Policy::with_mode(mode),
    }
}

/// Files written in pieces: small writes go into log entries, page-sized ones into
/// copy-on-write pages; some truncated, one removed.
fn fill_datalog(store: &Store) {
    let log = store
        .datalog(NAME, datalog_config(WriteMode::CopyOnWrite))
        .unwrap();
    for i in 0..FILES {
        let id = log.create_file(&file_name(i)).unwrap();
        let mut rng = SplitMix64::new(i);
        for piece in 0..6u64 {
            let len = if piece % 2 == 0 { 300 } else { 5000 };
            let bytes: Vec<u8> = (0..len).map(|_| rng.below(256) as u8).collect();
            log.write_at(id, piece * 3000, &bytes).unwrap();
        }
        if i % 3 == 0 {
            log.truncate(id, 7000 + i * 100).unwrap();
        }
    }
    log.remove(&file_name(FILES - 1)).unwrap();
}

fn read_datalog(store: &Store) -> Result<Readout, Error> {
    let log = store.datalog(NAME, datalog_config(WriteMode::CopyOnWrite))?;
    let mut out = Readout::new();
    for name in log.list() {
        out.push((name.clone().into_bytes(), Vec::new()));
    }
    for i in 0..FILES {
        let name = file_name(i);
        let Ok(id) = log.open_file(&name) else {
            // A missing file is a wrong answer, not a report of damage.
            out.push((name.into_bytes(), b"<missing>".to_vec()));
            continue;
        };
        let mut contents = vec![0u8; log.len(id)? as usize];
        let read = log.read_at(id, 0, &mut contents)?;
        contents.truncate(read);
        out.push((name.into_bytes(), contents));
    }
    Ok(out)
}

/// The datalog's root and inode table carry no checksum; its log pages (entries) and data
/// pages do.
fn datalog_cover(store: &Store, block: u64) -> Cover {
    let log = store
        .datalog(NAME, datalog_config(WriteMode::CopyOnWrite))
        .unwrap();
    let root = log.root();
    let table = engine(store).pool().load_u64(root + 8).unwrap();
    let holds = |at: u64| block <= at && at < block + engine(store).block_size(block).unwrap();
    if holds(root) || holds(table) {
        Cover::Unchecked
    } else {
        Cover::Checksummed
    }
}

fn datalog() -> Subject {
    Subject {
        label: "datalog (copy-on-write)",
        fill: fill_datalog,
        read: read_datalog,
        cover: datalog_cover,
    }
}

/// Outcomes counted for flips in bytes of one cover.
#[derive(Clone, Copy, Debug, Default)]
struct Outcomes {
    detected: u64,
    harmless: u64,
    silent: u64,
    /// Detected ones whose reads had served wrong data first, without error: only `verify()`
    /// saw the damage.
    wrong_until_verified: u64,
}

impl fmt::Display for Outcomes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>4} detected ({} by verify() alone after wrong reads), {:>4} harmless, {:>4} silent",
            self.detected, self.wrong_until_verified, self.harmless, self.silent
        )
    }
}

/// How one damaged copy fared.
enum Outcome {
    Detected { wrong_reads: bool },
    Harmless,
    Silent,
}

/// Open, read in full and verify the store at `path`, comparing with `healthy`.
fn examine(path: &Path, subject: &Subject, healthy: &Readout) -> Outcome {
    let store = match Store::open_with(path, &options()) {
        Ok(store) => store,
        Err(_) => return Outcome::Detected { wrong_reads: false },
    };
    let wrong_reads = match (subject.read)(&store) {
        Err(_) => return Outcome::Detected { wrong_reads: false },
        Ok(readout) => readout != *healthy,
    };
    if !store.verify().is_healthy() {
        Outcome::Detected { wrong_reads }
    } else if wrong_reads {
        Outcome::Silent
    } else {
        Outcome::Harmless
    }
}

/// Every live line of the subject: (block, line offset, cover), for a uniform draw.
fn live_lines(store: &Store, subject: &Subject) -> Vec<(u64, Cover)> {
    let owned = store.owned_blocks().unwrap();
    let (_, blocks) = owned
        .into_iter()
        .find(|(name, _)| name == NAME)
        .expect("the subject is in the store");
    let mut lines = Vec::new();
    for block in blocks {
        let cover = (subject.cover)(store, block);
        let size = engine(store)
            .block_size(block)
            .expect("an owned block is allocated");
        lines.extend((0..size.div_ceil(64)).map(|l| (block + 64 * l, cover)));
    }
    lines
}

fn flip_bit(path: &Path, offset: u64, bit: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 1 << bit;
    std::fs::write(path, bytes).unwrap();
}

/// Run the experiment for one subject; returns the outcomes by cover.
fn experiment(subject: &Subject, seed: u64) -> BTreeMap<Cover, Outcomes> {
    let dir = scratch_dir("bit-flips");
    let original: PathBuf = dir.path().join("healthy.pool");
    let (healthy, lines) = {
        let store = Store::create(&original, POOL, &options()).unwrap();
        (subject.fill)(&store);
        let healthy = (subject.read)(&store).unwrap();
        let report = store.verify();
        assert!(report.is_healthy(), "{}: {report}", subject.label);
        (healthy, live_lines(&store, subject))
    };
    // The healthy file reads back the same after a reopen, or the comparison means nothing.
    {
        let store = Store::open_with(&original, &options()).unwrap();
        assert!(
            (subject.read)(&store).unwrap() == healthy,
            "{}: a reopened healthy file reads differently",
            subject.label
        );
    }
    assert!(!healthy.is_empty(), "{} read nothing", subject.label);
    let damaged = dir.path().join("damaged.pool");
    let mut rng = SplitMix64::new(seed);
    let mut outcomes: BTreeMap<Cover, Outcomes> = BTreeMap::new();
    for flip in 0..FLIPS {
        let (line, cover) = lines[rng.below(lines.len() as u64) as usize];
        let offset = line + rng.below(64);
        let bit = rng.below(8) as u8;
        std::fs::copy(&original, &damaged).unwrap();
        flip_bit(&damaged, offset, bit);
        let outcome = catch_unwind(AssertUnwindSafe(|| examine(&damaged, subject, &healthy)))
            .unwrap_or_else(|_| {
                panic!(
                    "{}: flip {flip} (seed {seed}) of bit {bit} at {offset:#x} ({cover:?}) \
                     made the store panic",
                    subject.label
                )
            });
        let counts = outcomes.entry(cover).or_default();
        match outcome {
            Outcome::Detected { wrong_reads } => {
                counts.detected += 1;
                counts.wrong_until_verified += u64::from(wrong_reads);
            }
            Outcome::Harmless => counts.harmless += 1,
            Outcome::Silent => {
                counts.silent += 1;
                if cover == Cover::Checksummed {
                    panic!(
                        "{}: flip {flip} (seed {seed}) of bit {bit} at {offset:#x}, in bytes a \
                         checksum covers, served wrong data and nothing reported it",
                        subject.label
                    );
                }
            }
        }
    }
    println!("{}:", subject.label);
    for (cover, counts) in &outcomes {
        println!("  {cover:?}: {counts}");
    }
    let total: u64 = outcomes
        .values()
        .map(|o| o.detected + o.harmless + o.silent)
        .sum();
    assert_eq!(total, FLIPS, "every copy has one outcome");
    assert!(
        outcomes.values().any(|o| o.detected > 0),
        "{}: no flip was detected: the experiment saw nothing",
        subject.label
    );
    outcomes
}

#[test]
fn flips_in_a_u64_hash_map_never_panic_and_are_counted() {
    experiment(&u64_hash(), 101);
}

#[test]
fn flips_in_a_u64_ordered_map_never_panic_and_are_counted() {
    experiment(&u64_tree(), 103);
}

#[test]
fn flips_in_byte_key_hash_map_records_are_never_silent() {
    let outcomes = experiment(&bytes_hash(), 107);
    assert!(
        outcomes.contains_key(&Cover::Checksummed),
        "records were hit"
    );
}

#[test]
fn flips_in_byte_key_ordered_map_records_are_never_silent() {
    let outcomes = experiment(&bytes_tree(), 109);
    assert!(
        outcomes.contains_key(&Cover::Checksummed),
        "records were hit"
    );
}

#[test]
fn flips_in_datalog_entries_and_pages_are_never_silent() {
    let outcomes = experiment(&datalog(), 113);
    assert!(
        outcomes.contains_key(&Cover::Checksummed),
        "log and data pages were hit"
    );
}

/// The store's heap, to read its allocator and to damage its bytes on purpose.
fn engine(store: &Store) -> &Heap {
    // SAFETY: the test runs on one thread, so no handle of the store is in use while the heap
    // or its pool is written.
    unsafe { store.raw_heap() }
}
