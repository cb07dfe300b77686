//! Creating a pool file whole: an unpublished pool is invisible at its path and leaves nothing
//! when dropped; `publish` links it in place without ever replacing a file; an unfinished file
//! an earlier build left is claimed only when provably unfinished, and replaced only while the
//! path still names it.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use pmem_ordering::pool::header::HEADER_PAGE;
use pmem_ordering::{Pool, PoolError};

/// The names in `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn an_unpublished_pool_is_invisible_and_leaves_nothing_when_dropped() {
    let dir = scratch_dir();
    let path = dir.path().join("staged.pool");
    let pool = Pool::create_unpublished(&path, LAYOUT, SIZE, &opts()).unwrap();
    assert_eq!(pool.path(), Some(path.as_path()));
    let stored = pool.store_u64(pool.root_offset(), 42).unwrap();
    pool.persist(stored);
    assert!(!path.exists(), "an unpublished pool is at its path");
    assert!(matches!(
        Pool::open(&path, LAYOUT, &opts()),
        Err(PoolError::NotFound { .. })
    ));
    drop(pool);
    assert!(entries(dir.path()).is_empty(), "{:?}", entries(dir.path()));
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn publish_puts_the_pool_at_its_path_locked_and_whole() {
    let dir = scratch_dir();
    let path = dir.path().join("published.pool");
    let pool = Pool::create_unpublished(&path, LAYOUT, SIZE, &opts()).unwrap();
    let stored = pool.store_u64(pool.root_offset(), 42).unwrap();
    pool.persist(stored);
    pool.publish().unwrap();
    pool.publish().expect("publishing twice is a no-op");
    assert_eq!(entries(dir.path()), ["published.pool"]);
    assert!(matches!(
        Pool::open(&path, LAYOUT, &opts()),
        Err(PoolError::AlreadyOpen { .. })
    ));
    drop(pool);
    let pool = Pool::open(&path, LAYOUT, &opts()).unwrap();
    assert_eq!(pool.load_u64(pool.root_offset()).unwrap(), 42);
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn the_second_of_two_creators_is_refused_at_publish_and_leaves_nothing() {
    let dir = scratch_dir();
    let path = dir.path().join("raced.pool");
    let first = Pool::create_unpublished(&path, LAYOUT, SIZE, &opts()).unwrap();
    let second = Pool::create_unpublished(&path, LAYOUT, SIZE, &opts()).unwrap();
    let stored = second.store_u64(second.root_offset(), 2).unwrap();
    second.persist(stored);
    second.publish().unwrap();
    let stored = first.store_u64(first.root_offset(), 1).unwrap();
    first.persist(stored);
    match first.publish() {
        Err(PoolError::AlreadyExists { path: p }) => assert_eq!(p, path),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    drop(first);
    drop(second);
    assert_eq!(entries(dir.path()), ["raced.pool"]);
    let pool = Pool::open(&path, LAYOUT, &opts()).unwrap();
    assert_eq!(pool.load_u64(pool.root_offset()).unwrap(), 2, "replaced");
    assert!(matches!(
        Pool::create_unpublished(&path, LAYOUT, SIZE, &opts()),
        Err(PoolError::AlreadyExists { .. })
    ));
}

/// A file like the one an earlier build's interrupted or refused create left: a header of
/// `LAYOUT` (its magic zeroed if `torn`) and zeros after it.
fn unfinished(dir: &Path, name: &str, torn: bool) -> std::path::PathBuf {
    let path = make_pool(dir, name);
    if torn {
        patch(&path, 0, &[0; 8]);
    }
    path
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn only_a_provably_unfinished_file_is_claimed() {
    let dir = scratch_dir();
    let empty = dir.path().join("empty.pool");
    fs::File::create(&empty).unwrap();
    assert!(Pool::claim_unfinished(&empty, LAYOUT).unwrap().is_some());
    let whole = unfinished(dir.path(), "whole.pool", false);
    assert!(Pool::claim_unfinished(&whole, LAYOUT).unwrap().is_some());
    let torn = unfinished(dir.path(), "torn.pool", true);
    assert!(Pool::claim_unfinished(&torn, LAYOUT).unwrap().is_some());
    // Another layout, a byte written after the header, or a short file: not provably ours.
    assert!(Pool::claim_unfinished(&whole, "other").unwrap().is_none());
    let written = unfinished(dir.path(), "written.pool", true);
    patch(&written, SIZE as usize - 1, &[1]);
    assert!(Pool::claim_unfinished(&written, LAYOUT).unwrap().is_none());
    let in_header_page = unfinished(dir.path(), "header-page.pool", false);
    patch(&in_header_page, HEADER_PAGE as usize - 1, &[1]);
    assert!(Pool::claim_unfinished(&in_header_page, LAYOUT)
        .unwrap()
        .is_none());
    let short = dir.path().join("short.pool");
    fs::write(&short, [0u8; 100]).unwrap();
    assert!(Pool::claim_unfinished(&short, LAYOUT).unwrap().is_none());
    // A file a pool holds is not claimed.
    let held = Pool::open(&whole, LAYOUT, &opts()).unwrap();
    assert!(matches!(
        Pool::claim_unfinished(&whole, LAYOUT),
        Err(PoolError::AlreadyOpen { .. })
    ));
    drop(held);
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_claimed_file_is_replaced_only_while_the_path_still_names_it() {
    let dir = scratch_dir();
    let path = unfinished(dir.path(), "replace.pool", true);
    let claim = Pool::claim_unfinished(&path, LAYOUT).unwrap().unwrap();
    let pool = Pool::create_replacement(&path, LAYOUT, SIZE, &opts()).unwrap();
    let stored = pool.store_u64(pool.root_offset(), 7).unwrap();
    pool.persist(stored);
    pool.publish_over(claim).unwrap();
    drop(pool);
    assert_eq!(entries(dir.path()), ["replace.pool"]);
    let reopened = Pool::open(&path, LAYOUT, &opts()).unwrap();
    assert_eq!(reopened.load_u64(reopened.root_offset()).unwrap(), 7);
    drop(reopened);

    // Claimed, then the path taken by another file: the replacement is refused.
    let path = unfinished(dir.path(), "moved.pool", false);
    let claim = Pool::claim_unfinished(&path, LAYOUT).unwrap().unwrap();
    fs::rename(&path, dir.path().join("elsewhere.pool")).unwrap();
    make_pool(dir.path(), "moved.pool");
    let pool = Pool::create_replacement(&path, LAYOUT, SIZE, &opts()).unwrap();
    assert!(matches!(
        pool.publish_over(claim),
        Err(PoolError::AlreadyExists { .. })
    ));
    drop(pool);
    assert_eq!(
        entries(dir.path()),
        ["elsewhere.pool", "moved.pool", "replace.pool"]
    );
}
