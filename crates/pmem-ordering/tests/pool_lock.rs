//! The exclusive lock of a pool file: while a pool holds its file, a second open (in this
//! process or another) fails with `PoolError::AlreadyOpen` and changes nothing; once the pool
//! drops, the file opens again.
//!
//! The cross-process cases re-execute this test binary with an environment variable naming the
//! pool file (no `fork` inside the multi-threaded libtest harness): the child tries to open it
//! and prints a marker saying what happened, which the parent checks, so a child that
//! never reached the open cannot pass for one that was refused.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use common::*;
use pmem_ordering::{PersistModel, Pool, PoolError};

/// Set in the child process to the path of the pool it must try to open.
const CHILD_ENV: &str = "PMEM_ORDERING_POOL_LOCK_CHILD";
/// The test whose body the child runs (and only it).
const CROSS_PROCESS_TEST: &str = "a_pool_held_by_one_process_cannot_be_opened_by_another";
const CHILD_REFUSED: &str = "child: open refused: already open";
const CHILD_OPENED: &str = "child: open succeeded";

/// Taken by every test of this binary, so they run one at a time. A spawned child holds copies
/// of the parent's file descriptors between its fork and its exec, and with them the locks of
/// any pool open at that moment: a test dropping and reopening a pool while another test
/// spawns its child could be refused for that instant.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Assert `result` is `AlreadyOpen` for `path`, with a message that names the path and says
/// what to do.
fn assert_already_open(result: Result<Pool, PoolError>, path: &Path) {
    match result {
        Err(e @ PoolError::AlreadyOpen { .. }) => {
            let PoolError::AlreadyOpen { path: reported } = &e else {
                unreachable!()
            };
            assert_eq!(reported, path);
            assert_message_names(&e, &[&show(path), "already open", "close it first"]);
        }
        other => panic!("expected AlreadyOpen, got {other:?}"),
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps and locks a file, which Miri cannot")]
fn a_created_pool_cannot_be_opened_again_until_it_drops() {
    let _serial = one_at_a_time();
    let dir = scratch_dir();
    let path = dir.path().join("held.pool");
    let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
    let root = pool.root::<u64>().unwrap();
    pool.persist(pool.set(root, &0xfeed).unwrap());
    let before = fs::read(&path).unwrap();

    assert_already_open(Pool::open(&path, LAYOUT, &opts()), &path);
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "the refused open wrote nothing"
    );
    // The holder is unaffected by the refused open.
    assert_eq!(pool.get(root).unwrap(), 0xfeed);

    drop(pool);
    let reopened = Pool::open(&path, LAYOUT, &opts()).expect("open after the holder dropped");
    assert_eq!(reopened.get(root).unwrap(), 0xfeed);
}

#[test]
#[cfg_attr(miri, ignore = "maps and locks a file, which Miri cannot")]
fn an_opened_pool_cannot_be_opened_again_until_it_drops() {
    let _serial = one_at_a_time();
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "held.pool");
    let before = fs::read(&path).unwrap();
    let pool = Pool::open(&path, LAYOUT, &opts()).unwrap();

    assert_already_open(Pool::open(&path, LAYOUT, &opts()), &path);
    // A second open that would fail anyway (wrong layout) is refused by the lock first, before
    // the header is read.
    assert_already_open(Pool::open(&path, "another-layout", &opts()), &path);
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "the refused opens wrote nothing"
    );

    // Inspecting takes no lock: it reads the header of a held pool.
    let header = Pool::inspect(&path, Some(LAYOUT)).expect("inspect a held pool");
    assert_eq!(header.size, SIZE);

    drop(pool);
    Pool::open(&path, LAYOUT, &opts()).expect("open after the holder dropped");
}

#[test]
#[cfg_attr(miri, ignore = "maps and locks a file, which Miri cannot")]
fn the_lock_is_on_the_file_not_the_path() {
    let _serial = one_at_a_time();
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "held.pool");
    let link = dir.path().join("link.pool");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let _pool = Pool::open(&path, LAYOUT, &opts()).unwrap();
    assert_already_open(Pool::open(&link, LAYOUT, &opts()), &link);
}

#[test]
#[cfg_attr(miri, ignore = "maps and locks a file, which Miri cannot")]
fn a_create_over_a_held_pool_fails_and_leaves_the_pool_in_place() {
    let _serial = one_at_a_time();
    let dir = scratch_dir();
    let path = dir.path().join("held.pool");
    let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
    let before = fs::read(&path).unwrap();
    match Pool::create(&path, LAYOUT, SIZE, &opts()) {
        Err(PoolError::AlreadyExists { path: p }) => assert_eq!(p, path),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(
        fs::read(&path).unwrap(),
        before,
        "the held pool is untouched"
    );
    drop(pool);
    Pool::open(&path, LAYOUT, &opts()).expect("the pool still opens");
}

/// Run this binary's cross-process test in a child that tries to open `path`; its stdout.
fn child_open(path: &Path) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            CROSS_PROCESS_TEST,
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "child failed ({}): stdout {stdout}\nstderr {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The child's side: try to open the pool and print a marker saying what happened (libtest
/// prints it inside its own "test ... ok" line, so the parent looks for it anywhere).
fn run_child(path: &Path) {
    match Pool::open(path, LAYOUT, &opts()) {
        Ok(pool) => {
            assert_eq!(pool.size(), SIZE);
            println!("{CHILD_OPENED}");
        }
        Err(PoolError::AlreadyOpen { path: reported }) => {
            assert_eq!(reported, path);
            println!("{CHILD_REFUSED}");
        }
        Err(other) => panic!("child: unexpected error: {other}"),
    }
}

#[test]
#[cfg_attr(miri, ignore = "spawns a process that maps a file, which Miri cannot")]
fn a_pool_held_by_one_process_cannot_be_opened_by_another() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        run_child(Path::new(&path));
        return;
    }
    let _serial = one_at_a_time();
    let dir = scratch_dir();
    let path = dir.path().join("shared.pool");
    let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
    let before = fs::read(&path).unwrap();

    let stdout = child_open(&path);
    assert!(
        stdout.contains(CHILD_REFUSED),
        "the child did not report a refused open: {stdout}"
    );
    assert_eq!(fs::read(&path).unwrap(), before, "the child wrote nothing");

    drop(pool);
    let stdout = child_open(&path);
    assert!(
        stdout.contains(CHILD_OPENED),
        "the child did not open the released pool: {stdout}"
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps and locks a file, which Miri cannot")]
fn a_second_mapping_shares_the_lock_and_the_bytes() {
    let _serial = one_at_a_time();
    let dir = scratch_dir();
    let path = dir.path().join("shared.pool");
    let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
    let other = pool
        .map_again(&opts().model(PersistModel::Themis))
        .expect("map the held file again");
    assert_eq!(other.model(), PersistModel::Themis);
    let root = pool.root::<u64>().unwrap();
    pool.persist(pool.set(root, &41).unwrap());
    assert_eq!(other.get(root).unwrap(), 41, "both map the same bytes");

    // The lock is held while either mapping lives.
    drop(pool);
    assert_already_open(Pool::open(&path, LAYOUT, &opts()), &path);
    drop(other);
    Pool::open(&path, LAYOUT, &opts()).expect("open after both mappings dropped");

    let anonymous = Pool::anonymous(LAYOUT, SIZE, &opts()).unwrap();
    match anonymous.map_again(&opts()) {
        Err(e @ PoolError::NoFile { .. }) => assert_message_names(&e, &["anonymous"]),
        other => panic!("expected NoFile, got {other:?}"),
    }
}
