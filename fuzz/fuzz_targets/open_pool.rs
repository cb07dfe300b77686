//! Fuzz pool opening: any file content must give a typed error or a usable pool, never a
//! panic or undefined behaviour (DESIGN.md, "Pools").
//!
//! Each input is tried twice: as the whole pool file, byte for byte, and zero-extended to a
//! whole number of 4 KiB pages. The second form is there because a file shorter than the 4 KiB
//! header page is rejected before any field is read, and libFuzzer, which grows inputs only
//! while they find new coverage, would otherwise never get past that length check. For each
//! file `Pool::inspect` and `Pool::open` read it; when it opens (a valid header whose size
//! matches the file, see `pool/header.rs`), the root object is read, written and persisted
//! through the pool's bounds-checked accessors.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pmem_ordering::{Granularity, Pool, PoolOptions};

/// The layout the target opens; inputs with another layout get `LayoutMismatch`.
const LAYOUT: &str = "fuzz";

/// Pool files are padded to a multiple of this (the header page).
const PAGE: usize = 4096;

/// Largest part of the root object read back and rewritten per input.
const MAX_ROOT_TOUCH: u64 = 1 << 16;

/// One pool file per process (fuzzing jobs run side by side), rewritten for every input.
fn pool_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("pmem-fuzz-open-pool-{}.pool", std::process::id()))
    })
}

fn exercise(path: &Path, data: &[u8]) {
    std::fs::write(path, data).expect("write the fuzz input to the pool file");
    let inspected = Pool::inspect(path, None);
    let options = PoolOptions::new().granularity(Granularity::Emulated);
    let opened = Pool::open(path, LAYOUT, &options);
    if let (Err(_), Ok(pool)) = (&inspected, &opened) {
        panic!("inspect rejected a header that open accepted: {pool:?}");
    }
    let Ok(pool) = opened else { return };
    let root = pool.root_offset();
    let len = pool.root_size().min(MAX_ROOT_TOUCH);
    let mut bytes = vec![0u8; len as usize];
    pool.read_bytes(root, &mut bytes)
        .expect("the root object lies inside an opened pool");
    for b in &mut bytes {
        *b = b.wrapping_add(1);
    }
    let written = pool
        .write(root, &bytes)
        .expect("the root object lies inside an opened pool");
    let _ = pool.persist(written);
    if pool.root_size() >= 8 && root.is_multiple_of(8) {
        let word = pool.load_u64(root).expect("an aligned word of the root");
        let w = pool
            .store_u64(root, word ^ u64::MAX)
            .expect("an aligned word of the root");
        let _ = pool.persist(w);
    }
    let mut back = vec![0u8; len as usize];
    pool.read_bytes(root, &mut back)
        .expect("the root object lies inside an opened pool");
    if len >= 8 && root.is_multiple_of(8) {
        for b in &mut bytes[..8] {
            *b ^= 0xff;
        }
    }
    assert_eq!(
        back, bytes,
        "the root object did not read back what was written"
    );
}

fuzz_target!(|data: &[u8]| {
    let path = pool_path();
    exercise(path, data);
    let padded_len = data.len().div_ceil(PAGE).max(1) * PAGE;
    if padded_len != data.len() {
        let mut padded = data.to_vec();
        padded.resize(padded_len, 0);
        exercise(path, &padded);
    }
    // Leave nothing behind between inputs; a crashing input leaves its file for inspection.
    let _ = std::fs::remove_file(path);
});
