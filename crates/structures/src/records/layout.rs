//! The bytes of one record: the only file that knows them.
//!
//! A record is a heap block (from the allocator's record chunks) holding one key and its value:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | bits 0..40: the owner (its structure's root offset / 64); bits 40..64: key length |
//! | 8..12 | value length (little-endian `u32`) |
//! | 12.. | the key's bytes, then the value's |
//!
//! A record is written in full and persisted before the slot that publishes it, and never
//! changed while published (an overwrite writes a new record), so a reader that reached it
//! through a slot reads a whole one. The owner lets recovery tell a record of this structure
//! from a block that was freed and reused by another one (see `intent.rs`).

use pmem_ordering::{Backend, Pool, PoolError};

/// Bytes of the header.
pub(crate) const HEADER_BYTES: u64 = 12;
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 64 << 10;
/// The longest value, in bytes (a pool must also have room for it).
pub const MAX_VALUE_BYTES: usize = 1 << 30;
/// Roots (and so owners) must lie below this offset: 40 bits of root offset / 64.
pub(crate) const MAX_OWNER_ROOT: u64 = 1 << 46;

/// The owner field of a structure whose root is at `root` (64-byte aligned, below
/// [`MAX_OWNER_ROOT`]).
pub(crate) fn owner_of(root: u64) -> u64 {
    root >> 6
}

/// Bytes a record of a `key_len`-byte key and a `value_len`-byte value takes.
pub(crate) fn record_bytes(key_len: usize, value_len: usize) -> u64 {
    HEADER_BYTES + key_len as u64 + value_len as u64
}

/// The header of a record of `owner` holding `key` and `value_len` value bytes.
pub(crate) fn header(owner: u64, key_len: usize, value_len: usize) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&(owner | (key_len as u64) << 40).to_le_bytes());
    h[8..12].copy_from_slice(&(value_len as u32).to_le_bytes());
    h
}

/// A record's header as read from the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// The owner field ([`owner_of`]).
    pub owner: u64,
    /// Bytes of the key.
    pub key_len: usize,
    /// Bytes of the value.
    pub value_len: usize,
}

impl Header {
    /// Bytes of the whole record.
    pub fn record_bytes(&self) -> u64 {
        record_bytes(self.key_len, self.value_len)
    }

    /// Offset of the key's first byte in a record at `record`.
    pub fn key_at(record: u64) -> u64 {
        record + HEADER_BYTES
    }

    /// Offset of the value's first byte in a record at `record`.
    pub fn value_at(&self, record: u64) -> u64 {
        record + HEADER_BYTES + self.key_len as u64
    }
}

/// Read the header of the record at `record`. `None` if the words cannot be a header of a
/// record that fits in `limit` bytes (a block that holds something else, or garbage): callers
/// that follow an unvalidated pointer rely on this never reading past the block.
pub(crate) fn read_header<B: Backend>(
    pool: &Pool<B>,
    record: u64,
    limit: u64,
) -> Result<Option<Header>, PoolError> {
    let mut h = [0u8; HEADER_BYTES as usize];
    pool.read_bytes(record, &mut h)?;
    Ok(parse_header(&h, limit))
}

/// The header in `bytes`, if it describes a record that fits in `limit` bytes.
pub(crate) fn parse_header(bytes: &[u8], limit: u64) -> Option<Header> {
    let word = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let value_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let header = Header {
        owner: word & ((1 << 40) - 1),
        key_len: (word >> 40) as usize,
        value_len,
    };
    let fits = header.key_len <= MAX_KEY_BYTES
        && header.value_len <= MAX_VALUE_BYTES
        && header.record_bytes() <= limit;
    fits.then_some(header)
}

/// Whether the record at `record` (whose header is `header`) holds `key`, compared a piece at
/// a time without allocating.
pub(crate) fn key_equals<B: Backend>(
    pool: &Pool<B>,
    record: u64,
    header: &Header,
    key: &[u8],
) -> Result<bool, PoolError> {
    if header.key_len != key.len() {
        return Ok(false);
    }
    let mut buf = [0u8; 64];
    let mut at = Header::key_at(record);
    for piece in key.chunks(buf.len()) {
        let got = &mut buf[..piece.len()];
        pool.read_bytes(at, got)?;
        if got != piece {
            return Ok(false);
        }
        at += piece.len() as u64;
    }
    Ok(true)
}

/// The key of the record at `record`.
pub(crate) fn read_key<B: Backend>(
    pool: &Pool<B>,
    record: u64,
    header: &Header,
) -> Result<Vec<u8>, PoolError> {
    let mut key = vec![0u8; header.key_len];
    pool.read_bytes(Header::key_at(record), &mut key)?;
    Ok(key)
}

/// The value of the record at `record`.
pub(crate) fn read_value<B: Backend>(
    pool: &Pool<B>,
    record: u64,
    header: &Header,
) -> Result<Vec<u8>, PoolError> {
    let mut value = vec![0u8; header.value_len];
    pool.read_bytes(header.value_at(record), &mut value)?;
    Ok(value)
}

/// Bytes of a record read at once: one cache line (records are line-aligned), which holds the
/// header and a key of up to 52 bytes, and often the start of the value.
const LINE: usize = 64;

/// A record's first line, read with one load of the pool: lookups decide on it without
/// reading the record again, and take the value from it and one more read.
pub(crate) struct FirstLine {
    bytes: [u8; LINE],
    len: usize,
    /// The record's header.
    pub header: Header,
}

/// Read the first line of the record at `record` (less at the pool's end). `None` if its
/// header is not one of a record that fits in `limit` bytes.
pub(crate) fn read_first_line<B: Backend>(
    pool: &Pool<B>,
    record: u64,
    limit: u64,
) -> Result<Option<FirstLine>, PoolError> {
    let len = (LINE as u64).min(pool.size().saturating_sub(record)) as usize;
    if len < HEADER_BYTES as usize {
        return Ok(None);
    }
    let mut bytes = [0u8; LINE];
    pool.read_bytes(record, &mut bytes[..len])?;
    Ok(
        parse_header(&bytes[..HEADER_BYTES as usize], limit).map(|header| FirstLine {
            bytes,
            len,
            header,
        }),
    )
}

impl FirstLine {
    /// The bytes of the record from `from` on that the line holds.
    fn held(&self, from: usize, count: usize) -> &[u8] {
        let end = (from + count).min(self.len);
        &self.bytes[from.min(end)..end]
    }

    /// Copy `count` bytes of the record from `from` on: what the line holds, the rest read.
    fn copy<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
        from: usize,
        count: usize,
    ) -> Result<Vec<u8>, PoolError> {
        let held = self.held(from, count);
        let mut out = vec![0u8; count];
        out[..held.len()].copy_from_slice(held);
        if held.len() < count {
            pool.read_bytes(record + (from + held.len()) as u64, &mut out[held.len()..])?;
        }
        Ok(out)
    }

    /// Whether the record at `record` holds `key`.
    pub fn key_equals<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
        key: &[u8],
    ) -> Result<bool, PoolError> {
        if self.header.key_len != key.len() {
            return Ok(false);
        }
        let held = self.held(HEADER_BYTES as usize, key.len());
        if held != &key[..held.len()] {
            return Ok(false);
        }
        if held.len() == key.len() {
            return Ok(true);
        }
        let rest = Header {
            key_len: key.len() - held.len(),
            ..self.header
        };
        // The rest of a long key, compared a piece at a time from where the line ends.
        key_equals(pool, record + held.len() as u64, &rest, &key[held.len()..])
    }

    /// The record's key.
    pub fn key<B: Backend>(&self, pool: &Pool<B>, record: u64) -> Result<Vec<u8>, PoolError> {
        self.copy(pool, record, HEADER_BYTES as usize, self.header.key_len)
    }

    /// The record's value.
    pub fn value<B: Backend>(&self, pool: &Pool<B>, record: u64) -> Result<Vec<u8>, PoolError> {
        let from = HEADER_BYTES as usize + self.header.key_len;
        self.copy(pool, record, from, self.header.value_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_and_refuses_what_does_not_fit() {
        let h = header(owner_of(0x4000), 16, 100);
        let parsed = parse_header(&h, 128).expect("fits 128 bytes");
        assert_eq!(
            parsed,
            Header {
                owner: 0x100,
                key_len: 16,
                value_len: 100
            }
        );
        assert_eq!(parsed.record_bytes(), 128);
        assert_eq!(parse_header(&h, 127), None, "one byte short");
        let huge = header(1, MAX_KEY_BYTES + 1, 0);
        assert_eq!(parse_header(&huge, u64::MAX), None, "key past the limit");
    }
}
