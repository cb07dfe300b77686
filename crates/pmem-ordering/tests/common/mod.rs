//! Helpers shared by the pool test binaries (`pool.rs`, `pool_open.rs`); each uses a subset.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use pmem_ordering::{Pool, PoolError, PoolOptions};

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
