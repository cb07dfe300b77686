//! Helpers shared by the pool test binaries (`pool.rs`, `pool_open.rs`); each uses a subset.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use pmem_ordering::{Granularity, Pool, PoolError, PoolOptions};

pub const LAYOUT: &str = "pool-tests";
pub const SIZE: u64 = 64 * 1024;

pub fn opts() -> PoolOptions {
    PoolOptions::new()
}

/// A fresh pool file in `dir`, closed again.
pub fn make_pool(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).expect("create a pool");
    drop(pool);
    path
}

pub fn patch(path: &Path, at: usize, bytes: &[u8]) {
    let mut data = fs::read(path).unwrap();
    data[at..at + bytes.len()].copy_from_slice(bytes);
    fs::write(path, data).unwrap();
}

/// Assert the error's message names every needle (the path, the numbers involved).
pub fn assert_message_names(err: &PoolError, needles: &[&str]) {
    let msg = err.to_string();
    for needle in needles {
        assert!(
            msg.contains(needle),
            "message {msg:?} does not name {needle:?}"
        );
    }
}

pub fn show(path: &Path) -> String {
    path.display().to_string()
}

/// Deterministic bytes that are not a pool (the workspace's one generator; the first byte is never zero).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = pmem_ordering::sim::SplitMix64::new(seed);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out[0] = 0x5a;
    out
}

/// The variable naming a directory for the tests' pool files (a DAX mount, a disk, a tmpfs):
/// the persistent-memory check (`.ci/dax/run`) points the tests at each in turn. The test
/// kit reads the same variable; this crate's tests cannot use the kit (it depends on them).
pub const POOL_DIR_ENV: &str = "PMEM_TEST_POOL_DIR";

/// A fresh directory for pool files, removed when the guard drops: in the directory
/// `PMEM_TEST_POOL_DIR` names, else in the system's temporary directory.
pub fn scratch_dir() -> tempfile::TempDir {
    match std::env::var_os(POOL_DIR_ENV).filter(|dir| !dir.is_empty()) {
        Some(dir) => tempfile::tempdir_in(&dir).unwrap_or_else(|e| {
            panic!(
                "a temporary directory in {}: {e}",
                Path::new(&dir).display()
            )
        }),
        None => tempfile::tempdir().expect("a temporary directory"),
    }
}

/// Whether the kernel accesses the file at `path` directly, without the page cache (DAX), by
/// its own account (`statx`'s `STATX_ATTR_DAX`, Linux 5.8 on): a witness independent of the
/// pool's `MAP_SYNC` test. `false` where the kernel does not say.
#[cfg(target_os = "linux")]
pub fn is_dax_file(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("a path without NUL");
    // SAFETY: statx is plain data, valid when zeroed.
    let mut stat: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a NUL-terminated path and `stat` a writable statx buffer, both live
    // for the call.
    let rc = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            name.as_ptr(),
            0,
            libc::STATX_BASIC_STATS,
            &mut stat,
        )
    };
    let dax = libc::STATX_ATTR_DAX as u64;
    rc == 0 && stat.stx_attributes_mask & dax != 0 && stat.stx_attributes & dax != 0
}

#[cfg(not(target_os = "linux"))]
pub fn is_dax_file(_path: &Path) -> bool {
    false
}

/// Asserts that `pool`, opened from `path` with the granularity left to detection, got the one
/// its file system gives: cache line or byte (by its region's persistence domain) on DAX,
/// whose basis names the `persistence_domain` it read or the regions it found; page, with
/// `MAP_SYNC` refused, anywhere else.
pub fn assert_detected_granularity(pool: &Pool, path: &Path) {
    let basis = pool
        .granularity_basis()
        .expect("a file pool says how its granularity was chosen");
    if is_dax_file(path) {
        assert!(
            matches!(
                pool.granularity(),
                Granularity::CacheLine | Granularity::Byte
            ),
            "{} is a DAX file but got {:?} granularity: {basis}",
            path.display(),
            pool.granularity()
        );
        assert!(
            basis.contains("persistence_domain") || basis.contains("region"),
            "{basis}"
        );
    } else {
        assert_eq!(pool.granularity(), Granularity::Page, "{basis}");
        assert!(basis.contains("MAP_SYNC was refused"), "{basis}");
    }
}
