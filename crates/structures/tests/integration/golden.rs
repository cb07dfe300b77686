//! Golden pool files (`tests/golden/*.pool`): stores written by earlier builds, one for each
//! set of on-media format versions this build still reads, made by
//! `examples/golden_pools.rs` (`tests/golden/README.md` says when and how).
//!
//! Each file is opened on a copy (an open recovers, so it may write) and must hold exactly
//! what `golden/contents.rs` wrote, verify clean and account for every heap block. Then, on
//! fresh copies, each format's version field is set to a version this build refuses, and the
//! open must fail with the message that names it. The offsets read and patched are the ones
//! docs/design.md documents, so this also checks the document.

#[path = "../golden/mod.rs"]
mod golden_format;

use std::path::{Path, PathBuf};

use golden_format::contents;
use golden_format::{Formats, StoreFile};
use pmem_structures::raw::datalog::DatalogConfig;
use pmem_structures::{Error, Store};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Every golden pool file, sorted.
fn golden_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("tests/golden")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "pool"))
        .collect();
    files.sort();
    files
}

/// The versions this build writes: the newest golden file must hold exactly these.
fn current() -> Formats {
    Formats {
        pool: 1,
        heap: 4,
        catalog: 3,
        cceh: "1".into(),
        fastfair: 1,
        records: 2,
        record_tree: 3,
        datalog: "2".into(),
        leaf_map: Some(1),
    }
}

/// A copy of `bytes` in a new temporary directory (kept alive by the returned guard).
fn copy_of(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("golden.pool");
    std::fs::write(&path, bytes).expect("the copy is written");
    (dir, path)
}

fn error_text<T>(result: Result<T, Error>) -> String {
    match result {
        Ok(_) => "no error".to_string(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_golden_files_include_one_of_the_current_versions() {
    let files = golden_files();
    assert!(
        !files.is_empty(),
        "no golden pool file in {:?}",
        golden_dir()
    );
    let mut found = Vec::new();
    for path in &files {
        let bytes = std::fs::read(path).expect("a golden file");
        assert_eq!(bytes.len() as u64, contents::POOL_BYTES, "{path:?}");
        let formats = StoreFile::read(&bytes).formats(&bytes);
        let name = path.file_name().unwrap().to_string_lossy();
        assert_eq!(
            name,
            formats.file_name(),
            "a golden file's name says its versions"
        );
        found.push(formats);
    }
    assert!(
        found.contains(&current()),
        "no golden file of this build's versions {}: make one (tests/golden/README.md)",
        current().file_name()
    );
}

#[test]
fn this_build_writes_the_current_versions_and_reads_back_what_it_wrote() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("fresh.pool");
    {
        let store = Store::create(&path, contents::POOL_BYTES, &contents::options())
            .expect("a fresh store");
        contents::write(&store).expect("the golden contents are written");
    }
    let store = Store::open_with(&path, &contents::options()).expect("the fresh store opens");
    contents::check(&store).expect("the fresh store holds the golden contents");
    drop(store);
    let bytes = std::fs::read(&path).expect("the fresh file");
    let formats = StoreFile::read(&bytes).formats(&bytes);
    assert_eq!(
        formats,
        current(),
        "this build writes other versions than current() says: add a golden file of them"
    );
}

#[test]
fn every_golden_file_opens_with_its_contents() {
    for path in golden_files() {
        let bytes = std::fs::read(&path).expect("a golden file");
        let (_dir, copy) = copy_of(&bytes);
        let store = Store::open_with(&copy, &contents::options())
            .unwrap_or_else(|e| panic!("{path:?} does not open: {e}"));
        if let Err(e) = contents::check(&store) {
            panic!("{path:?}: {e}");
        }
        let report = store.verify();
        assert!(report.is_healthy(), "{path:?}: {report:?}");
        store
            .check_blocks()
            .expect("every heap block is owned once");
        drop(store);
        // Opened again: what the first open left is as readable.
        let store = Store::open_with(&copy, &contents::options()).expect("a second open");
        contents::check(&store).expect("the contents after a second open");
    }
}

/// How a refused file is refused: at the store's open, or when the named structure is first
/// opened through its handle.
enum When {
    Open,
    HashMap(&'static str),
    BTreeMap(&'static str),
    LeafMap(&'static str),
    Datalog(&'static str),
}

/// Open `path` as `when` says; the error's text.
fn refusal(path: &Path, when: &When) -> String {
    let options = contents::options();
    let store = match Store::open_with(path, &options) {
        Ok(store) => store,
        Err(e) => return e.to_string(),
    };
    match *when {
        When::Open => "no error".to_string(),
        When::HashMap(name) => error_text(store.hash_map::<u64, u64>(name)),
        When::BTreeMap(name) => error_text(store.btree_map::<i64, u32>(name)),
        When::LeafMap(name) => error_text(store.btree_map::<String, Vec<u8>>(name)),
        When::Datalog(name) => error_text(store.datalog(name, DatalogConfig::default())),
    }
}

#[test]
fn versions_this_build_refuses_are_refused_with_their_message() {
    let path = golden_dir().join(current().file_name());
    let bytes = std::fs::read(&path).expect("the golden file of the current versions");
    let file = StoreFile::read(&bytes);
    let (heap, catalog) = (file.superblock, file.catalog);
    // (what, where, the bytes written there, when it is refused, what the message says)
    let cases: Vec<(&str, u64, Vec<u8>, When, &str)> = vec![
        (
            "a newer pool header",
            8,
            2u32.to_le_bytes().to_vec(),
            When::Open,
            "has pool format version 2, but this library reads version 1",
        ),
        (
            "a heap that did not record its fence policy",
            heap + 8,
            1u32.to_le_bytes().to_vec(),
            When::Open,
            "superblock is version 1, from a release that did not record the fence policy",
        ),
        (
            "a heap whose logs had no allocator intents",
            heap + 8,
            2u32.to_le_bytes().to_vec(),
            When::Open,
            "the undo-log heap is version 2, whose lane logs this library cannot read",
        ),
        (
            "a heap whose logs checksummed each entry",
            heap + 8,
            3u32.to_le_bytes().to_vec(),
            When::Open,
            "the undo-log heap is version 3, whose lane logs this library cannot read",
        ),
        (
            "a newer heap",
            heap + 8,
            5u32.to_le_bytes().to_vec(),
            When::Open,
            "version 5, this library reads 4",
        ),
        (
            "a newer catalog",
            catalog + 8,
            4u64.to_le_bytes().to_vec(),
            When::Open,
            "catalog format version 4, but this library reads versions 1 to 3",
        ),
        (
            "a catalog of version 2 naming a write-batch area",
            catalog + 8,
            2u64.to_le_bytes().to_vec(),
            When::Open,
            "catalog format version 2 with write-batch area",
        ),
        (
            "a hash map of records without checksums",
            file.root("users") + 8,
            1u64.to_le_bytes().to_vec(),
            When::Open,
            "format version 1 (records without checksums), this build reads 2",
        ),
        (
            "an ordered map of records without checksums",
            file.root("sessions") + 8,
            1u64.to_le_bytes().to_vec(),
            When::Open,
            "format version 1 (records without checksums), this build reads 3",
        ),
        (
            "a newer ordered map of records",
            file.root("sessions") + 8,
            4u64.to_le_bytes().to_vec(),
            When::Open,
            "format version 4, this build reads 3",
        ),
        (
            "a newer FAST&FAIR tree",
            file.root("orders") + 8,
            2u64.to_le_bytes().to_vec(),
            When::BTreeMap("orders"),
            "format version 2, this build reads 1",
        ),
        (
            "a datalog whose extents carry no page checksums",
            file.root("files"),
            b"DATALOG1".to_vec(),
            When::Datalog("files"),
            "format version 1 (data pages without checksums), this build reads 2",
        ),
        (
            "a newer leaf map",
            file.root("events") + 8,
            2u64.to_le_bytes().to_vec(),
            When::LeafMap("events"),
            "format version 2, this build reads 1",
        ),
        (
            "a newer CCEH table",
            file.root("counters"),
            b"CCEH\0v02".to_vec(),
            When::HashMap("counters"),
            "CCEH\\0v02",
        ),
    ];
    for (what, at, patch, when, message) in cases {
        let mut patched = bytes.clone();
        patched[at as usize..at as usize + patch.len()].copy_from_slice(&patch);
        let (_dir, copy) = copy_of(&patched);
        let text = refusal(&copy, &when);
        assert!(
            text.contains(message),
            "{what}: the refusal {text:?} does not say {message:?}"
        );
        // The refusal changed nothing in the file.
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            patched,
            "{what}: the file changed"
        );
    }
}
