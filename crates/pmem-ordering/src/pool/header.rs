//! The on-media pool header.
//!
//! The first [`HEADER_PAGE`] bytes of a pool are reserved for the header; its encoded fields take
//! the first [`HEADER_LEN`] bytes, little-endian:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0      | 8    | magic `b"PMORDPL\0"` (written last at creation: zero means interrupted) |
//! | 8      | 4    | format version ([`FORMAT_VERSION`]) |
//! | 12     | 4    | reserved, zero |
//! | 16     | 32   | layout name, UTF-8, NUL-padded (at most [`MAX_LAYOUT_LEN`] bytes) |
//! | 48     | 8    | pool size in bytes (the file's length) |
//! | 56     | 8    | root object offset |
//! | 64     | 8    | root object size |
//! | 72     | 8    | heap offset: first byte after the root, page aligned |
//! | 80     | 8    | pool identity, random at creation |
//! | 88     | 32   | reserved, zero |
//! | 120    | 4    | CRC-32C of bytes 0..120 |
//! | 124    | 4    | reserved, zero |
//!
//! The header is written once, at creation, and never changed, so the checksum cannot be torn by
//! a crash of an opened pool.

use std::path::Path;

use super::PoolError;

/// Magic at offset 0 of every pool.
pub const MAGIC: [u8; 8] = *b"PMORDPL\0";
/// The format version this library writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes of encoded header fields.
pub const HEADER_LEN: usize = 128;
/// Bytes reserved for the header at the start of the pool; the root object follows.
pub const HEADER_PAGE: u64 = 4096;
/// The longest layout name, in bytes.
pub const MAX_LAYOUT_LEN: usize = 31;

const CHECKSUM_AT: usize = 120;

/// The decoded header of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The layout name the pool was created with.
    pub layout: String,
    /// Pool size in bytes.
    pub size: u64,
    /// Offset of the root object.
    pub root_offset: u64,
    /// Size of the root object.
    pub root_size: u64,
    /// Offset of the heap (the space after the root object).
    pub heap_offset: u64,
    /// Identity chosen at creation.
    pub pool_id: u64,
}

fn round_up(x: u64, to: u64) -> Option<u64> {
    x.checked_add(to - 1).map(|v| v / to * to)
}

/// Check a layout name before it is written.
pub fn validate_layout(layout: &str) -> Result<(), PoolError> {
    let bad = |reason| {
        Err(PoolError::InvalidLayout {
            name: layout.to_string(),
            reason,
        })
    };
    if layout.is_empty() {
        return bad("it is empty");
    }
    if layout.len() > MAX_LAYOUT_LEN {
        return bad("it is longer than 31 bytes");
    }
    if layout.contains('\0') {
        return bad("it contains a NUL byte");
    }
    Ok(())
}

impl Header {
    /// The header of a new pool of `size` bytes with a root object of `root_size` bytes.
    pub fn new(layout: &str, size: u64, root_size: u64, pool_id: u64) -> Result<Header, PoolError> {
        validate_layout(layout)?;
        let invalid = |reason: String| PoolError::InvalidSize { size, reason };
        let root_offset = HEADER_PAGE;
        let heap_offset = root_size
            .checked_add(root_offset)
            .and_then(|end| round_up(end, HEADER_PAGE))
            .ok_or_else(|| invalid(format!("root object of {root_size} bytes overflows")))?;
        if !size.is_multiple_of(HEADER_PAGE) {
            return Err(invalid(format!(
                "it must be a multiple of {HEADER_PAGE} bytes"
            )));
        }
        if size < heap_offset {
            return Err(invalid(format!(
                "it must hold the {HEADER_PAGE}-byte header and the {root_size}-byte root object (at least {heap_offset} bytes)"
            )));
        }
        Ok(Header {
            layout: layout.to_string(),
            size,
            root_offset,
            root_size,
            heap_offset,
            pool_id,
        })
    }

    /// The encoded bytes, magic and checksum included.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[16..16 + self.layout.len()].copy_from_slice(self.layout.as_bytes());
        b[48..56].copy_from_slice(&self.size.to_le_bytes());
        b[56..64].copy_from_slice(&self.root_offset.to_le_bytes());
        b[64..72].copy_from_slice(&self.root_size.to_le_bytes());
        b[72..80].copy_from_slice(&self.heap_offset.to_le_bytes());
        b[80..88].copy_from_slice(&self.pool_id.to_le_bytes());
        let crc = crc32c::crc32c(&b[..CHECKSUM_AT]);
        b[CHECKSUM_AT..CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check header bytes read from `path` (named in errors only), whose file is
    /// `file_len` bytes long, expecting `layout` (or any layout when `None`).
    ///
    /// Checks run in an order where each relies only on what the previous ones proved: length,
    /// magic, version, checksum, then the fields themselves.
    pub fn decode(
        path: &Path,
        bytes: &[u8],
        file_len: u64,
        layout: Option<&str>,
    ) -> Result<Header, PoolError> {
        let path_buf = || path.to_path_buf();
        if file_len < HEADER_PAGE || bytes.len() < HEADER_LEN {
            return Err(PoolError::TooShort {
                path: path_buf(),
                // The file's real length; the byte count only if the caller passed fewer
                // bytes than a header from a file long enough to hold one.
                len: if file_len < HEADER_PAGE {
                    file_len
                } else {
                    bytes.len() as u64
                },
                needed: HEADER_PAGE,
            });
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        let magic: [u8; 8] = bytes[0..8].try_into().expect("8 bytes");
        if magic == [0; 8] {
            return Err(PoolError::Incomplete { path: path_buf() });
        }
        if magic != MAGIC {
            return Err(PoolError::BadMagic {
                path: path_buf(),
                found: magic,
                expected: MAGIC,
            });
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(PoolError::VersionMismatch {
                path: path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let stored = u32_at(CHECKSUM_AT);
        let computed = crc32c::crc32c(&bytes[..CHECKSUM_AT]);
        if stored != computed {
            return Err(PoolError::ChecksumMismatch {
                path: path_buf(),
                stored,
                computed,
            });
        }
        let corrupt = |reason: String| PoolError::CorruptHeader {
            path: path_buf(),
            reason,
        };
        let name_bytes = &bytes[16..48];
        let name_len = name_bytes.iter().position(|&b| b == 0).unwrap_or(32);
        if name_len > MAX_LAYOUT_LEN || name_bytes[name_len..].iter().any(|&b| b != 0) {
            return Err(corrupt("layout name is not NUL-padded".into()));
        }
        let found_layout = std::str::from_utf8(&name_bytes[..name_len])
            .map_err(|_| corrupt("layout name is not UTF-8".into()))?
            .to_string();
        if let Some(expected) = layout {
            if expected != found_layout {
                return Err(PoolError::LayoutMismatch {
                    path: path_buf(),
                    expected: expected.to_string(),
                    found: found_layout,
                });
            }
        }
        let header = Header {
            layout: found_layout,
            size: u64_at(48),
            root_offset: u64_at(56),
            root_size: u64_at(64),
            heap_offset: u64_at(72),
            pool_id: u64_at(80),
        };
        if header.size != file_len {
            return Err(PoolError::SizeMismatch {
                path: path_buf(),
                header: header.size,
                file: file_len,
            });
        }
        // Every pool this library makes is a whole number of header pages; a size that is not
        // even a whole number of 8-byte words would leave the last bytes without the containing
        // word every access to them uses (`mem.rs`).
        if !header.size.is_multiple_of(8) {
            return Err(corrupt(format!(
                "pool size {} is not a multiple of 8 bytes",
                header.size
            )));
        }
        let root_end = header.root_offset.checked_add(header.root_size);
        let consistent = header.root_offset >= HEADER_PAGE
            && root_end.is_some_and(|end| end <= header.heap_offset)
            && header.heap_offset <= header.size
            && header.heap_offset.is_multiple_of(HEADER_PAGE);
        if !consistent {
            return Err(corrupt(format!(
                "root [{}, +{}) and heap offset {} do not fit a pool of {} bytes",
                header.root_offset, header.root_size, header.heap_offset, header.size
            )));
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn encode_then_decode_round_trips() {
        let h = Header::new("kv-store", 1 << 20, 300, 42).unwrap();
        assert_eq!(h.heap_offset, 8192);
        let bytes = h.encode();
        let back = Header::decode(Path::new("p"), &bytes, 1 << 20, Some("kv-store")).unwrap();
        assert_eq!(back, h);
    }

    #[test]
    fn a_size_that_is_not_whole_words_is_refused() {
        let mut h = Header::new("kv", 1 << 16, 64, 7).unwrap();
        h.size = (1 << 16) + 3;
        let err = Header::decode(Path::new("p"), &h.encode(), h.size, Some("kv")).unwrap_err();
        assert!(matches!(err, PoolError::CorruptHeader { .. }), "{err:?}");
        assert!(err.to_string().contains("not a multiple of 8"), "{err}");
    }

    proptest! {
        // Miri interprets every checksum: a few cases keep its run short.
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

        /// No byte string decodes into a panic, and any single flipped bit is rejected. The
        /// first is safe code over random bytes, slow under Miri and with nothing for it to check.
        #[test]
        #[cfg_attr(miri, ignore)]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200), len in 0u64..1 << 22) {
            let _ = Header::decode(Path::new("p"), &bytes, len, None);
        }

        #[test]
        fn a_flipped_bit_is_rejected(bit in 0usize..(CHECKSUM_AT + 4) * 8) {
            let h = Header::new("kv", 1 << 16, 64, 7).unwrap();
            let mut bytes = h.encode();
            bytes[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Header::decode(Path::new("p"), &bytes, 1 << 16, Some("kv")).is_err());
        }
    }
}
