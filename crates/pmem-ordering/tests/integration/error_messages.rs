//! Errors read as sentences under `Debug` too, since `fn main() -> Result<(), Box<dyn Error>>`
//! prints an error with `Debug`: magics as the text they spell, offsets in hex.

use super::common;

use common::*;
use pmem_ordering::isa::IsaError;
use pmem_ordering::{FlushKind, Pool, PoolError};

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_bad_magic_prints_as_text() {
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "other.pool");
    patch(&path, 0, b"NOTAPOOL");
    let err = Pool::open(&path, LAYOUT, &opts()).unwrap_err();
    assert!(matches!(err, PoolError::BadMagic { .. }), "{err}");
    assert_eq!(
        format!("{err:?}"),
        format!(
            "{} is not a pool file of this library: it starts with magic \"NOTAPOOL\", \
             not \"PMORDPL\\0\"",
            path.display()
        )
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps and locks a file, which Miri cannot")]
fn already_open_says_what_to_do() {
    let dir = scratch_dir();
    let path = dir.path().join("held.pool");
    let _pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
    let err = Pool::open(&path, LAYOUT, &opts()).unwrap_err();
    assert_eq!(
        format!("{err:?}"),
        format!(
            "pool file {} is already open (in this or another process); close it first",
            path.display()
        )
    );
}

#[test]
fn offsets_print_in_hex() {
    let pool = Pool::anonymous(LAYOUT, SIZE, &opts()).unwrap();
    let out_of_bounds = pool.read::<u64>(SIZE).unwrap_err();
    assert_eq!(
        format!("{out_of_bounds:?}"),
        "access of 8 bytes at offset 0x10000 is outside the pool of 65536 bytes (0x10000)"
    );
    let misaligned = pool.load_u64(4100).unwrap_err();
    assert_eq!(
        format!("{misaligned:?}"),
        "8-byte atomic access at offset 0x1004, which is not 8-byte aligned"
    );
}

#[test]
fn an_instruction_error_prints_its_message() {
    assert_eq!(
        format!("{:?}", IsaError::FlushUnsupported(FlushKind::Clwb)),
        "this CPU does not support the clwb flush instruction: use one that Isa::detected() allows"
    );
}
