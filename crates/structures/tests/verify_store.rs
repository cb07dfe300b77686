//! `Store::verify` and `verify_pool` (what the `verify_pool` example prints): a store after
//! writes, truncates, removes, `remove_structure` and a reopen gives no findings and reaches
//! every allocated block once; a leaked block, a catalog root outside the pool and damage in a
//! structure are reported; a file that is not a store, is locked or is truncated is a typed
//! error; random bit flips in live lines never make `verify()` panic.
//!
//! The catalog's offsets (`store/catalog/layout.rs`) are spelled out as constants: a change of
//! format must change them.

use pmem_undo_log::Heap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use pmem_structures::raw::verify::Problem;
use pmem_structures::{verify_pool, StoreProblem, StoreVerification};
use pmem_structures::{DatalogConfig, Error, PoolError, Store, StoreOptions, StructureKind};
use pmem_test_kit::fixture::{file_store_options, pool_path};
use pmem_test_kit::SplitMix64;

/// The catalog: header bytes (entry 0 follows), the root word of an entry.
const CATALOG_HEADER: u64 = 64;
const ENTRY_ROOT: u64 = 16;

/// Emulated granularity, or the one detected for the file where `PMEM_TEST_POOL_DIR` points
/// the tests at a file system of interest (the test kit's `file_granularity`).
fn options() -> StoreOptions {
    file_store_options()
}

/// Every kind of structure, written, shrunk and partly removed; one structure removed whole.
fn fill(store: &Store) {
    let words = store.hash_map::<u64, u64>("words").unwrap();
    let tree = store.btree_map::<u64, u64>("tree").unwrap();
    let records = store.hash_map::<String, Vec<u8>>("records").unwrap();
    let sorted = store.btree_map::<String, u64>("sorted").unwrap();
    let files = store.datalog("files", DatalogConfig::default()).unwrap();
    let doomed = store.hash_map::<u64, u64>("doomed").unwrap();
    for k in 0..3000u64 {
        words.insert(k, k).unwrap();
        tree.insert(k * 7, k).unwrap();
        doomed.insert(k, 1).unwrap();
        if k % 10 == 0 {
            records
                .insert(format!("key {k}"), vec![k as u8; 40])
                .unwrap();
            sorted.insert(format!("key {k}"), k).unwrap();
        }
    }
    words.insert(0, 99).unwrap(); // the reserved key, kept in the catalog entry
    for k in (0..3000u64).step_by(3) {
        words.remove(k).unwrap();
        tree.remove(k * 7).unwrap();
    }
    let log = files.create_file("log").unwrap();
    let scratch = files.create_file("scratch").unwrap();
    for i in 0..200u64 {
        files.write_at(log, i * 700, &[i as u8; 900]).unwrap();
        files.write_at(scratch, 0, &[1u8; 5000]).unwrap();
    }
    files.truncate(log, 30_000).unwrap();
    files.remove("scratch").unwrap();
    drop(doomed);
    store.remove_structure("doomed").unwrap();
}

fn assert_healthy(report: &StoreVerification, store: &Store) {
    assert!(report.is_healthy(), "{report}");
    assert_eq!(report.structures.len(), store.names().len());
    assert_eq!(report.blocks_reached, report.blocks_allocated);
    assert_eq!(report.blocks_allocated, store.check_blocks().unwrap());
    assert!(report.to_string().contains("no damage found"), "{report}");
}

#[test]
fn a_busy_store_verifies_clean_with_handles_open_closed_and_after_a_reopen() {
    let (_dir, path) = pool_path("pmem-verify-test", "healthy.pool");
    {
        let store = Store::create(&path, 64 << 20, &options()).unwrap();
        fill(&store);
        // Handles open: each verifies through its own.
        let words = store.hash_map::<u64, u64>("words").unwrap();
        let records = store.hash_map::<String, Vec<u8>>("records").unwrap();
        let files = store.datalog("files", DatalogConfig::default()).unwrap();
        assert!(words.verify().is_healthy(), "{}", words.verify());
        assert_eq!(words.verify().structure, StructureKind::HashMap);
        assert_eq!(records.verify().structure, StructureKind::RecordHashMap);
        assert!(files.verify().is_healthy(), "{}", files.verify());
        assert_eq!(files.verify().keys, 1);
        assert_healthy(&store.verify(), &store);
    }
    // Reopened, no handle open: each structure is opened for the walk.
    let report = verify_pool(&path).unwrap();
    let store = Store::open(&path).unwrap();
    assert_healthy(&report, &store);
    let tree = report.structure("tree").expect("the tree was verified");
    assert_eq!(tree.keys, 2000);
    assert!(report.structure("doomed").is_none());
}

#[test]
fn a_block_allocated_and_attached_nowhere_is_reported_leaked() {
    let store = Store::anonymous(16 << 20, &options()).unwrap();
    store
        .hash_map::<u64, u64>("m")
        .unwrap()
        .insert(1, 2)
        .unwrap();
    let leaked = engine(&store)
        .transaction(|tx| tx.alloc(200).map(|p| p.offset()))
        .unwrap();
    let report = store.verify();
    assert!(!report.is_healthy());
    let finding = report
        .findings
        .iter()
        .find(|f| f.offset == leaked)
        .unwrap_or_else(|| panic!("no finding at {leaked:#x} in\n{report}"));
    assert!(
        matches!(finding.problem, StoreProblem::Leaked { bytes } if bytes >= 200),
        "{report}"
    );
    assert_eq!(report.finding_count(), 1, "{report}");
    assert!(report.to_string().contains("leaked"), "{report}");
    assert!(
        store.check_blocks().is_err(),
        "check_blocks sees the same leak"
    );
}

#[test]
fn a_catalog_root_outside_the_pool_is_reported_by_the_command_logic() {
    let (_dir, path) = pool_path("pmem-verify-test", "damaged.pool");
    let entry;
    {
        let store = Store::create(&path, 16 << 20, &options()).unwrap();
        store
            .hash_map::<u64, u64>("m")
            .unwrap()
            .insert(1, 2)
            .unwrap();
        let pool = engine(&store).pool();
        entry = pool.root_offset() + CATALOG_HEADER;
        assert_eq!(store.names(), ["m"], "the map is in entry 0");
        let nowhere = (pool.size() + (1 << 20)) & !63;
        let written = pool.store_u64(entry + ENTRY_ROOT, nowhere).unwrap();
        pool.persist(written);
    }
    let report = verify_pool(&path).unwrap();
    assert!(!report.is_healthy());
    let bad_root = report.findings.iter().find(|f| {
        f.offset == entry
            && matches!(&f.problem, StoreProblem::BadRoot { name, kind: StructureKind::HashMap, .. }
                if name == "m")
    });
    assert!(bad_root.is_some(), "{report}");
    assert!(
        report
            .findings
            .iter()
            .all(|f| !matches!(f.problem, StoreProblem::Leaked { .. })),
        "no leak is claimed while a structure's blocks are unknown: {report}"
    );
    assert!(report.to_string().contains("not verified"), "{report}");
}

#[test]
fn damage_inside_a_structure_is_its_own_finding() {
    let store = Store::anonymous(16 << 20, &options()).unwrap();
    let files = store.datalog("files", DatalogConfig::default()).unwrap();
    let id = files.create_file("f").unwrap();
    files.write_at(id, 0, &[3u8; 4096]).unwrap();
    // The file's data block: the datalog's block that is neither its inode table nor a log
    // page (both of which the inode table and log name).
    let blocks = files.blocks();
    let pool = engine(&store).pool();
    let table = pool.load_u64(files.root() + 8).unwrap();
    let head = pool.load_u64(table + 8).unwrap();
    let data = *blocks
        .iter()
        .find(|&&b| b != table && b != head)
        .expect("a data block");
    let original = pool.load_u64(data + 64).unwrap();
    pool.persist(pool.store_u64(data + 64, !original).unwrap());
    let report = store.verify();
    assert!(
        report.findings.is_empty(),
        "the store itself is sound: {report}"
    );
    let verification = report.structure("files").unwrap();
    assert!(
        verification
            .findings
            .iter()
            .any(|f| f.offset == data && matches!(f.problem, Problem::PageChecksum { .. })),
        "{report}"
    );
    assert_eq!(
        files.verify(),
        *verification,
        "the handle's verify is the same walk"
    );
}

#[test]
fn files_that_cannot_be_opened_as_stores_are_typed_errors() {
    let (dir, path) = pool_path("pmem-verify-test", "store.pool");
    let missing = dir.path().join("missing.pool");
    assert!(matches!(verify_pool(&missing), Err(Error::Pool(_))));
    let junk = dir.path().join("junk.pool");
    std::fs::write(&junk, vec![0x5a; 1 << 20]).unwrap();
    let error = verify_pool(&junk).unwrap_err();
    assert!(!error.to_string().is_empty());
    {
        let store = Store::create(&path, 16 << 20, &options()).unwrap();
        store.hash_map::<u64, u64>("m").unwrap();
        // Locked by this open.
        assert!(
            matches!(
                verify_pool(&path),
                Err(Error::Pool(PoolError::AlreadyOpen { .. }))
            ),
            "a second open is refused"
        );
    }
    let truncated = dir.path().join("truncated.pool");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let error = verify_pool(&truncated).unwrap_err();
    assert!(!error.to_string().is_empty(), "{error}");
    assert!(verify_pool(&path).unwrap().is_healthy());
}

#[test]
fn random_bit_flips_in_live_lines_never_make_verify_panic() {
    let store = Store::anonymous(32 << 20, &options()).unwrap();
    fill(&store);
    // Every structure open, so that verify walks through the handles and opens nothing.
    let _handles = (
        store.hash_map::<u64, u64>("words").unwrap(),
        store.btree_map::<u64, u64>("tree").unwrap(),
        store.hash_map::<String, Vec<u8>>("records").unwrap(),
        store.btree_map::<String, u64>("sorted").unwrap(),
        store.datalog("files", DatalogConfig::default()).unwrap(),
    );
    let pool = engine(&store).pool();
    // The catalog's lines and every block the structures own.
    let mut lines: Vec<(u64, u64)> = vec![(pool.root_offset(), pool.root_size())];
    for (_, blocks) in store.owned_blocks().unwrap() {
        for block in blocks {
            lines.push((
                block,
                engine(&store).block_size(block).expect("a live block"),
            ));
        }
    }
    let mut rng = SplitMix64::new(97);
    let mut reported = 0;
    for flip in 0..200 {
        let (start, size) = lines[rng.below(lines.len() as u64) as usize];
        let word = start + 64 * rng.below(size.div_ceil(64)) + 8 * rng.below(8);
        if pool.check_range(word, 8).is_err() {
            continue;
        }
        let bit = rng.below(64);
        let original = pool.load_u64(word).unwrap();
        pool.persist(pool.store_u64(word, original ^ 1 << bit).unwrap());
        let outcome = catch_unwind(AssertUnwindSafe(|| store.verify()));
        pool.persist(pool.store_u64(word, original).unwrap());
        match outcome {
            Ok(report) => reported += u64::from(!report.is_healthy()),
            Err(_) => panic!("verify panicked on flip {flip}: bit {bit} of {word:#x}"),
        }
    }
    assert!(reported > 0, "some flips must be seen");
    assert!(store.verify().is_healthy(), "every flip was undone");
}

/// The store's heap, to read its allocator and to damage its bytes on purpose.
fn engine(store: &Store) -> &Heap {
    // SAFETY: the test runs on one thread, so no handle of the store is in use while the heap
    // or its pool is written.
    unsafe { store.raw_heap() }
}
