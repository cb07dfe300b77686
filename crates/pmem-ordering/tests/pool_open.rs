//! Opening and creating pool files: every bad file or argument returns its own typed error
//! (never a panic) and leaves no half-made file behind.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::*;
use pmem_ordering::pool::header::{FORMAT_VERSION, HEADER_PAGE, MAGIC};
use pmem_ordering::{Pool, PoolError};

// ------------------------------------------------------------------------- opening

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_missing_file_is_not_found() {
    let dir = scratch_dir();
    let path = dir.path().join("absent.pool");
    match Pool::open(&path, LAYOUT, &opts()) {
        Err(e @ PoolError::NotFound { .. }) => {
            let PoolError::NotFound { path: p } = &e else {
                unreachable!()
            };
            assert_eq!(p, &path);
            assert_message_names(&e, &[&show(&path)]);
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    match Pool::inspect(&path, None) {
        Err(PoolError::NotFound { path: p }) => assert_eq!(p, path),
        other => panic!("expected NotFound, got {other:?}"),
    }
    // Creating in a directory that does not exist.
    let nested = dir.path().join("no-such-dir").join("x.pool");
    match Pool::create(&nested, LAYOUT, SIZE, &opts()) {
        Err(e @ PoolError::NotFound { .. }) => assert_message_names(&e, &[&show(&nested)]),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(!nested.exists());
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_directory_is_reported_as_such() {
    let dir = scratch_dir();
    let path = dir.path().to_path_buf();
    match Pool::open(&path, LAYOUT, &opts()) {
        Err(e @ PoolError::IsDirectory { .. }) => assert_message_names(&e, &[&show(&path)]),
        other => panic!("open: expected IsDirectory, got {other:?}"),
    }
    match Pool::create(&path, LAYOUT, SIZE, &opts()) {
        Err(e @ PoolError::IsDirectory { .. }) => assert_message_names(&e, &[&show(&path)]),
        other => panic!("create: expected IsDirectory, got {other:?}"),
    }
    match Pool::inspect(&path, Some(LAYOUT)) {
        Err(PoolError::IsDirectory { path: p }) => assert_eq!(p, path),
        other => panic!("inspect: expected IsDirectory, got {other:?}"),
    }
    assert!(path.is_dir(), "the directory survived");
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_file_shorter_than_a_header_is_too_short() {
    let dir = scratch_dir();
    for len in [0usize, 7, 100, 128, 4095] {
        let path = dir.path().join(format!("short-{len}"));
        fs::write(&path, &noise(len.max(1), len as u64 + 1)[..len]).unwrap();
        match Pool::open(&path, LAYOUT, &opts()) {
            Err(e @ PoolError::TooShort { .. }) => {
                let PoolError::TooShort {
                    path: p,
                    len: found,
                    needed,
                } = &e
                else {
                    unreachable!()
                };
                assert_eq!(p, &path);
                assert_eq!(*found, len as u64, "the file's real length is reported");
                assert_eq!(*needed, HEADER_PAGE);
                assert_message_names(&e, &[&show(&path), &format!("{len} bytes"), "4096"]);
            }
            other => panic!("{len} bytes: expected TooShort, got {other:?}"),
        }
        assert_eq!(fs::metadata(&path).unwrap().len(), len as u64, "untouched");
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn another_magic_is_bad_magic() {
    let dir = scratch_dir();
    let path = dir.path().join("noise.bin");
    let bytes = noise(SIZE as usize, 99);
    fs::write(&path, &bytes).unwrap();
    match Pool::open(&path, LAYOUT, &opts()) {
        Err(e @ PoolError::BadMagic { .. }) => {
            let PoolError::BadMagic {
                found, expected, ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(found[..], bytes[..8]);
            assert_eq!(*expected, MAGIC);
            assert_message_names(&e, &[&show(&path)]);
        }
        other => panic!("expected BadMagic, got {other:?}"),
    }
    assert_eq!(
        fs::read(&path).unwrap(),
        bytes,
        "a failed open writes nothing"
    );

    // A real pool with one magic byte changed.
    let pool_path = make_pool(dir.path(), "p.pool");
    patch(&pool_path, 3, b"X");
    assert!(matches!(
        Pool::open(&pool_path, LAYOUT, &opts()),
        Err(PoolError::BadMagic { .. })
    ));
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_zeroed_magic_is_an_incomplete_pool() {
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "p.pool");
    patch(&path, 0, &[0; 8]);
    match Pool::open(&path, LAYOUT, &opts()) {
        Err(e @ PoolError::Incomplete { .. }) => assert_message_names(&e, &[&show(&path)]),
        other => panic!("expected Incomplete, got {other:?}"),
    }
    // An all-zero file of a valid length (creation interrupted before anything was written).
    let zeros = dir.path().join("zeros.pool");
    fs::write(&zeros, vec![0u8; SIZE as usize]).unwrap();
    assert!(matches!(
        Pool::open(&zeros, LAYOUT, &opts()),
        Err(PoolError::Incomplete { .. })
    ));
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn another_format_version_is_a_version_mismatch() {
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "p.pool");
    let other = FORMAT_VERSION + 41;
    patch(&path, 8, &other.to_le_bytes());
    match Pool::open(&path, LAYOUT, &opts()) {
        Err(e @ PoolError::VersionMismatch { .. }) => {
            let PoolError::VersionMismatch {
                found, supported, ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(*found, other);
            assert_eq!(*supported, FORMAT_VERSION);
            assert_message_names(
                &e,
                &[
                    &show(&path),
                    &format!("version {other}"),
                    &format!("reads version {FORMAT_VERSION}"),
                ],
            );
        }
        other => panic!("expected VersionMismatch, got {other:?}"),
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn another_layout_is_a_layout_mismatch_naming_both() {
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "p.pool");
    match Pool::open(&path, "some-other-layout", &opts()) {
        Err(e @ PoolError::LayoutMismatch { .. }) => {
            let PoolError::LayoutMismatch {
                expected, found, ..
            } = &e
            else {
                unreachable!()
            };
            assert_eq!(expected, "some-other-layout");
            assert_eq!(found, LAYOUT);
            assert_message_names(&e, &[&show(&path), "some-other-layout", LAYOUT]);
        }
        other => panic!("expected LayoutMismatch, got {other:?}"),
    }
    assert!(matches!(
        Pool::inspect(&path, Some("nope")),
        Err(PoolError::LayoutMismatch { .. })
    ));
    // Any layout is accepted by inspect(None).
    assert_eq!(Pool::inspect(&path, None).unwrap().layout, LAYOUT);
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_corrupted_covered_field_is_a_checksum_mismatch() {
    let dir = scratch_dir();
    // Reserved byte 12, a layout byte, a size byte, the pool identity, reserved 88..120 and the
    // checksum itself: all pass the magic and version checks, all are covered.
    for at in [12usize, 13, 16, 20, 47, 50, 85, 88, 100, 119, 120, 123] {
        let path = make_pool(dir.path(), &format!("p{at}.pool"));
        let mut data = fs::read(&path).unwrap();
        data[at] ^= 0x10;
        fs::write(&path, &data).unwrap();
        match Pool::open(&path, LAYOUT, &opts()) {
            Err(e @ PoolError::ChecksumMismatch { .. }) => {
                let PoolError::ChecksumMismatch {
                    stored, computed, ..
                } = &e
                else {
                    unreachable!()
                };
                assert_ne!(stored, computed);
                assert_message_names(
                    &e,
                    &[
                        &show(&path),
                        &format!("{stored:#010x}"),
                        &format!("{computed:#010x}"),
                    ],
                );
            }
            other => panic!("byte {at}: expected ChecksumMismatch, got {other:?}"),
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_resized_file_is_a_size_mismatch() {
    let dir = scratch_dir();
    for new_len in [SIZE + 4096, SIZE + 1, SIZE - 4096, HEADER_PAGE] {
        let path = make_pool(dir.path(), &format!("p{new_len}.pool"));
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(new_len)
            .unwrap();
        match Pool::open(&path, LAYOUT, &opts()) {
            Err(e @ PoolError::SizeMismatch { .. }) => {
                let PoolError::SizeMismatch { header, file, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*header, SIZE);
                assert_eq!(*file, new_len);
                assert_message_names(
                    &e,
                    &[
                        &show(&path),
                        &format!("{SIZE} bytes"),
                        &format!("{new_len} bytes"),
                    ],
                );
            }
            other => panic!("{new_len} bytes: expected SizeMismatch, got {other:?}"),
        }
    }
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_read_only_file_is_read_only() {
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "p.pool");
    let before = fs::read(&path).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o444)).unwrap();
    // Tests may run as root, which ignores permission bits: the pool checks them itself.
    match Pool::open(&path, LAYOUT, &opts()) {
        Err(e @ PoolError::ReadOnly { .. }) => assert_message_names(&e, &[&show(&path)]),
        other => panic!("expected ReadOnly, got {other:?}"),
    }
    // Inspecting only reads, so a read-only file can be inspected.
    assert_eq!(Pool::inspect(&path, Some(LAYOUT)).unwrap().layout, LAYOUT);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(fs::read(&path).unwrap(), before);
    Pool::open(&path, LAYOUT, &opts()).expect("writable again");
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn create_over_an_existing_file_fails_and_leaves_it_untouched() {
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "p.pool");
    let before = fs::read(&path).unwrap();
    match Pool::create(&path, LAYOUT, SIZE, &opts()) {
        Err(e @ PoolError::AlreadyExists { .. }) => assert_message_names(&e, &[&show(&path)]),
        other => panic!("expected AlreadyExists, got {other:?}"),
    }
    assert_eq!(fs::read(&path).unwrap(), before, "the pool was not touched");
    // Also over a file that is not a pool, and with another size.
    let other = dir.path().join("notes.txt");
    fs::write(&other, b"precious").unwrap();
    assert!(matches!(
        Pool::create(&other, LAYOUT, 2 * SIZE, &opts()),
        Err(PoolError::AlreadyExists { .. })
    ));
    assert_eq!(fs::read(&other).unwrap(), b"precious");
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn invalid_layout_names_are_rejected_and_leave_no_file() {
    let dir = scratch_dir();
    let long32 = "x".repeat(32);
    let long40 = "y".repeat(40);
    for (i, name) in ["", long32.as_str(), long40.as_str(), "a\0b", "\0"]
        .into_iter()
        .enumerate()
    {
        let path = dir.path().join(format!("bad-layout-{i}"));
        match Pool::create(&path, name, SIZE, &opts()) {
            Err(e @ PoolError::InvalidLayout { .. }) => {
                let PoolError::InvalidLayout { name: n, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(n, name);
                assert_message_names(&e, &[&format!("{name:?}")]);
            }
            other => panic!("layout {name:?}: expected InvalidLayout, got {other:?}"),
        }
        assert!(!path.exists(), "a failed create left {path:?} behind");
        assert!(matches!(
            Pool::anonymous(name, SIZE, &opts()),
            Err(PoolError::InvalidLayout { .. })
        ));
    }
    // The longest valid name (31 bytes) works and round-trips.
    let name31 = "z".repeat(31);
    let path = dir.path().join("ok");
    drop(Pool::create(&path, &name31, SIZE, &opts()).unwrap());
    assert_eq!(
        Pool::open(&path, &name31, &opts()).unwrap().layout(),
        name31
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn invalid_sizes_are_rejected_and_leave_no_file() {
    let dir = scratch_dir();
    let cases = [
        (SIZE + 1, opts()),
        (4096 * 3 + 100, opts()),
        (0, opts()),
        // Default root: 4096 header + 4032 root = at least 8192 bytes.
        (4096, opts()),
        (8192, opts().root_size(4097)),
        (SIZE, opts().root_size(u64::MAX)),
    ];
    for (i, (size, o)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("bad-size-{i}"));
        match Pool::create(&path, LAYOUT, *size, o) {
            Err(e @ PoolError::InvalidSize { .. }) => {
                let PoolError::InvalidSize { size: s, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(s, size);
                assert_message_names(&e, &[&size.to_string()]);
            }
            other => panic!("size {size}: expected InvalidSize, got {other:?}"),
        }
        assert!(!path.exists(), "a failed create left {path:?} behind");
        assert!(matches!(
            Pool::anonymous(LAYOUT, *size, o),
            Err(PoolError::InvalidSize { .. })
        ));
    }
    // The smallest valid pool with the default root.
    let path = dir.path().join("smallest");
    let pool = Pool::create(&path, LAYOUT, 8192, &opts()).unwrap();
    assert_eq!(pool.heap_offset(), 8192);
    assert_eq!(fs::metadata(&path).unwrap().len(), 8192);
}
