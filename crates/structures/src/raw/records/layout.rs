//! The bytes of one record: the only file that knows them.
//!
//! A record is a heap block (from the allocator's record chunks) holding one key and its value:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | bits 0..40: the owner (its structure's root offset / 64); bits 40..64: key length |
//! | 8..12 | value length (little-endian `u32`) |
//! | 12..16 | CRC-32C of bytes 0..12, the key and the value (little-endian `u32`) |
//! | 16.. | the key's bytes, then the value's |
//!
//! A record is written in full and persisted before the slot that publishes it, and never
//! changed while published (an overwrite writes a new record), so a reader that reached it
//! through a slot reads a whole one. The owner lets recovery tell a record of this structure
//! from a block that was freed and reused by another one (see `intent.rs`).
//!
//! The checksum is computed before the record is written, so it costs no fence, and every
//! read of a record checks it ([`FirstLine::checked_value`], [`FirstLine::checked_key_value`]):
//! a flipped bit in the header, the key or the value is reported as
//! [`RecordMapError::CorruptRecord`] naming the record's offset, never served. (Format
//! version 1 had a 12-byte header without it; see `head.rs`.)

use pmem_ordering::{isa, Backend, Pool, PoolError};

use super::error::RecordMapError;

/// Bytes of the header.
pub(crate) const HEADER_BYTES: u64 = 16;
/// Bytes of the header the checksum covers (all but the checksum itself).
const CHECKED_HEADER_BYTES: usize = 12;
/// The longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 64 << 10;
/// The longest value, in bytes (a pool must also have room for it).
pub const MAX_VALUE_BYTES: usize = 1 << 30;

/// Checks a key and value against the limits.
pub(crate) fn check_sizes(key: &[u8], value: &[u8]) -> Result<(), RecordMapError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(RecordMapError::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_BYTES,
        });
    }
    if value.len() > MAX_VALUE_BYTES {
        return Err(RecordMapError::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}

/// Roots (and so owners) must lie below this offset: 40 bits of root offset / 64.
pub(crate) const MAX_OWNER_ROOT: u64 = 1 << 46;

/// The owner field of a structure whose root is at `root` (64-byte aligned, below
/// [`MAX_OWNER_ROOT`]).
pub(crate) fn owner_of(root: u64) -> u64 {
    root >> 6
}

/// The root offset of the structure whose owner field is `owner`.
pub(crate) fn root_of(owner: u64) -> u64 {
    owner << 6
}

/// Bytes a record of a `key_len`-byte key and a `value_len`-byte value takes.
pub(crate) fn record_bytes(key_len: usize, value_len: usize) -> u64 {
    HEADER_BYTES + key_len as u64 + value_len as u64
}

/// The header of a record of `owner` holding `key` and `value`, its checksum included.
pub(crate) fn header(owner: u64, key: &[u8], value: &[u8]) -> [u8; HEADER_BYTES as usize] {
    let mut h = [0u8; HEADER_BYTES as usize];
    h[0..8].copy_from_slice(&(owner | (key.len() as u64) << 40).to_le_bytes());
    h[8..12].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let crc = checksum(&h[..CHECKED_HEADER_BYTES], key, value);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The CRC-32C of a record's header words (its first 12 bytes), key and value.
fn checksum(header_words: &[u8], key: &[u8], value: &[u8]) -> u32 {
    let crc = isa::crc32c(header_words);
    isa::crc32c_append(isa::crc32c_append(crc, key), value)
}

/// The error for the record at `record` whose bytes do not match its checksum.
fn corrupt(record: u64, stored: u32, computed: u32) -> RecordMapError {
    RecordMapError::CorruptRecord {
        offset: record,
        reason: format!("its checksum is {stored:#010x}, its bytes' is {computed:#010x}"),
    }
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
    /// The checksum the header records.
    pub crc: u32,
    /// The header's first 12 bytes, which the checksum covers.
    words: [u8; CHECKED_HEADER_BYTES],
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

    /// Check `key` and `value`, read from the record at `record`, against the checksum: a
    /// [`RecordMapError::CorruptRecord`] if any byte of the record differs from what was
    /// written.
    pub fn check(&self, record: u64, key: &[u8], value: &[u8]) -> Result<(), RecordMapError> {
        match self.computed(key, value) {
            computed if computed == self.crc => Ok(()),
            computed => Err(corrupt(record, self.crc, computed)),
        }
    }

    /// [`Header::check`] of a key and value read as one run of bytes, `body` (the key then
    /// the value, as the record holds them): the same checksum, in one pass over them.
    pub fn check_body(&self, record: u64, body: &[u8]) -> Result<(), RecordMapError> {
        match isa::crc32c_append(isa::crc32c(&self.words), body) {
            computed if computed == self.crc => Ok(()),
            computed => Err(corrupt(record, self.crc, computed)),
        }
    }

    /// The checksum of this header's words with `key` and `value`.
    pub fn computed(&self, key: &[u8], value: &[u8]) -> u32 {
        checksum(&self.words, key, value)
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

/// The key and value lengths a header's bytes give, whether or not they are possible.
pub(crate) fn header_lengths(bytes: &[u8; HEADER_BYTES as usize]) -> (u64, u64) {
    let word = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let value_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    (word >> 40, u64::from(value_len))
}

/// The header in `bytes`, if it describes a record that fits in `limit` bytes.
pub(crate) fn parse_header(bytes: &[u8], limit: u64) -> Option<Header> {
    let word = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let value_len = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")) as usize;
    let header = Header {
        owner: word & ((1 << 40) - 1),
        key_len: (word >> 40) as usize,
        value_len,
        crc: u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes")),
        words: bytes[..CHECKED_HEADER_BYTES].try_into().expect("12 bytes"),
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

/// The key and the value of the record at `record`, unchecked (a verification compares the
/// checksum itself, to report both values).
pub(crate) fn read_key_value<B: Backend>(
    pool: &Pool<B>,
    record: u64,
    header: &Header,
) -> Result<(Vec<u8>, Vec<u8>), PoolError> {
    pool.check_range(record, header.record_bytes())?;
    let mut key = vec![0u8; header.key_len];
    pool.read_bytes(Header::key_at(record), &mut key)?;
    let mut value = vec![0u8; header.value_len];
    pool.read_bytes(header.value_at(record), &mut value)?;
    Ok((key, value))
}

/// The key of the record at `record`, its whole record checked against the checksum.
pub(crate) fn read_checked_key<B: Backend>(
    pool: &Pool<B>,
    record: u64,
    header: &Header,
) -> Result<Vec<u8>, RecordMapError> {
    let (key, value) = read_key_value(pool, record, header)?;
    header.check(record, &key, &value)?;
    Ok(key)
}

/// Bytes of a record read at once: one cache line (records are line-aligned), which holds the
/// header and a key of up to 48 bytes, and often the start of the value.
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

/// The first line of the record at `record`, which a slot or an entry names (so a record
/// must be there): a header that cannot be one (lengths past the limits) or a record that
/// does not fit in the pool is [`RecordMapError::CorruptRecord`], never "no record".
pub(crate) fn first_line<B: Backend>(
    pool: &Pool<B>,
    record: u64,
) -> Result<FirstLine, RecordMapError> {
    let damaged = |reason: String| RecordMapError::CorruptRecord {
        offset: record,
        reason,
    };
    if pool.check_range(record, HEADER_BYTES).is_err() {
        return Err(damaged(format!(
            "its header lies outside the pool of {} bytes",
            pool.size()
        )));
    }
    match read_first_line(pool, record, u64::MAX)? {
        Some(line) => Ok(line),
        None => {
            let mut bytes = [0u8; HEADER_BYTES as usize];
            pool.read_bytes(record, &mut bytes)?;
            let (key_len, value_len) = header_lengths(&bytes);
            Err(damaged(format!(
                "its header gives a {key_len}-byte key and a {value_len}-byte value, past \
                 the limits ({MAX_KEY_BYTES} and {MAX_VALUE_BYTES} bytes)"
            )))
        }
    }
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
        let mut out = Vec::new();
        self.copy_into(pool, record, from, count, &mut out)?;
        Ok(out)
    }

    /// [`FirstLine::copy`] into `out` (cleared first), reusing its capacity.
    fn copy_into<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
        from: usize,
        count: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), PoolError> {
        out.clear();
        self.append(pool, record, from, count, out)
    }

    /// [`FirstLine::copy`] appended to `out`, reusing its capacity (`out` is as it was on an
    /// error).
    fn append<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
        from: usize,
        count: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), PoolError> {
        // Lengths come from the pool's bytes: refuse a range past the pool before allocating.
        pool.check_range(record + from as u64, count as u64)?;
        let held = self.held(from, count);
        let at = out.len();
        out.extend_from_slice(held);
        out.resize(at + count, 0);
        if held.len() < count {
            let rest = &mut out[at + held.len()..];
            if let Err(e) = pool.read_bytes(record + (from + held.len()) as u64, rest) {
                out.truncate(at);
                return Err(e);
            }
        }
        Ok(())
    }

    /// [`RecordMapError::CorruptRecord`] if the record the header describes runs past the
    /// pool's end.
    fn in_pool<B: Backend>(&self, pool: &Pool<B>, record: u64) -> Result<(), RecordMapError> {
        match pool.check_range(record, self.header.record_bytes()) {
            Ok(()) => Ok(()),
            Err(_) => Err(RecordMapError::CorruptRecord {
                offset: record,
                reason: format!(
                    "its header gives a {}-byte key and a {}-byte value, past the pool's end",
                    self.header.key_len, self.header.value_len
                ),
            }),
        }
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

    /// The record's key and value, checked against the checksum.
    pub fn checked_key_value<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
    ) -> Result<(Vec<u8>, Vec<u8>), RecordMapError> {
        self.in_pool(pool, record)?;
        let key = self.copy(pool, record, HEADER_BYTES as usize, self.header.key_len)?;
        let value = self.value(pool, record)?;
        self.header.check(record, &key, &value)?;
        Ok((key, value))
    }

    /// The record's value, the whole record checked against the checksum. The key is taken
    /// from the line when it fits there (48 bytes or less), else read again.
    pub fn checked_value<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
    ) -> Result<Vec<u8>, RecordMapError> {
        Ok(self.checked_key_value(pool, record)?.1)
    }

    /// The value of a record whose key [`FirstLine::key_equals`] found equal to `key`, into
    /// `out` (cleared first, its capacity reused: no allocation once it is large enough), the
    /// whole record checked against the checksum with `key` standing for the key's bytes (a
    /// published record never changes while its reader is pinned, so they are the same).
    pub fn checked_value_into<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordMapError> {
        debug_assert_eq!(key.len(), self.header.key_len);
        self.in_pool(pool, record)?;
        let from = HEADER_BYTES as usize + self.header.key_len;
        self.copy_into(pool, record, from, self.header.value_len, out)?;
        self.header.check(record, key, out)
    }

    /// The record's key then its value appended to `out` (one copy of the record past its
    /// header; `out`'s capacity reused, so nothing is allocated once it is large enough),
    /// checked against the checksum: the key is `out[at..at + header.key_len]`, where `at`
    /// was `out.len()`. On an error `out` is as it was.
    pub fn checked_append<B: Backend>(
        &self,
        pool: &Pool<B>,
        record: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordMapError> {
        self.in_pool(pool, record)?;
        let at = out.len();
        let body = self.header.key_len + self.header.value_len;
        self.append(pool, record, HEADER_BYTES as usize, body, out)?;
        let checked = self.header.check_body(record, &out[at..]);
        if checked.is_err() {
            out.truncate(at);
        }
        checked
    }

    /// Check the whole record against the checksum (a key that differs from the one looked
    /// for under a word that matches it is damage, or another key; this tells which).
    pub fn check<B: Backend>(&self, pool: &Pool<B>, record: u64) -> Result<(), RecordMapError> {
        self.checked_key_value(pool, record).map(|_| ())
    }

    /// The record's value, unchecked.
    fn value<B: Backend>(&self, pool: &Pool<B>, record: u64) -> Result<Vec<u8>, PoolError> {
        let from = HEADER_BYTES as usize + self.header.key_len;
        self.copy(pool, record, from, self.header.value_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_and_refuses_what_does_not_fit() {
        let (key, value) = ([7u8; 16], [9u8; 96]);
        let h = header(owner_of(0x4000), &key, &value);
        let parsed = parse_header(&h, 128).expect("fits 128 bytes");
        assert_eq!(
            (parsed.owner, parsed.key_len, parsed.value_len),
            (0x100, 16, 96)
        );
        assert_eq!(parsed.record_bytes(), 128);
        assert_eq!(parse_header(&h, 127), None, "one byte short");
        let huge = header(1, &vec![0u8; MAX_KEY_BYTES + 1], &[]);
        assert_eq!(parse_header(&huge, u64::MAX), None, "key past the limit");
    }

    #[test]
    fn the_checksum_covers_the_header_words_the_key_and_the_value() {
        let (key, value) = (b"user:1".to_vec(), b"alice".to_vec());
        let h = header(owner_of(0x4000), &key, &value);
        let parsed = parse_header(&h, 64).expect("fits");
        assert!(parsed.check(0x80, &key, &value).is_ok());
        assert!(parsed.check_body(0x80, b"user:1alice").is_ok(), "one pass");
        assert!(parsed.check_body(0x80, b"user:1alicf").is_err());
        let err = parsed.check(0x80, &key, b"alicf").unwrap_err();
        assert!(
            matches!(err, RecordMapError::CorruptRecord { offset: 0x80, .. }),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("its checksum is {:#010x}", parsed.crc)),
            "{err}"
        );
        assert!(parsed.check(0x80, b"user:2", &value).is_err());
        let mut owner_flipped = h;
        owner_flipped[0] ^= 1;
        let other = parse_header(&owner_flipped, 64).expect("fits");
        assert!(
            other.check(0x80, &key, &value).is_err(),
            "the owner is covered"
        );
    }

    #[test]
    fn checked_append_adds_the_key_then_the_value_or_nothing_on_damage() {
        use pmem_ordering::{Pool, PoolOptions};
        let pool = Pool::anonymous("record-append", 1 << 20, &PoolOptions::new()).unwrap();
        // A key in the first line and a value past it; a record ending at the pool's end.
        let (key, value) = (b"user:42".to_vec(), vec![0x5a; 300]);
        let write = |record: u64, key: &[u8], value: &[u8]| {
            let bytes = [&header(owner_of(0x4000), key, value)[..], key, value].concat();
            drop(pool.write(record, &bytes).unwrap());
        };
        write(0x1000, &key, &value);
        let line = first_line(&pool, 0x1000).unwrap();
        let mut out = b"before".to_vec();
        line.checked_append(&pool, 0x1000, &mut out).unwrap();
        assert_eq!(out, [&b"before"[..], &key, &value].concat());
        let end = (1 << 20) - 64;
        write(end, b"k", &[1; 20]);
        let mut out = Vec::new();
        first_line(&pool, end)
            .unwrap()
            .checked_append(&pool, end, &mut out)
            .unwrap();
        assert_eq!(out, [&b"k"[..], &[1; 20]].concat());

        // A flipped value byte: an error naming the record, and `out` as it was.
        drop(pool.write(0x1000 + HEADER_BYTES + 200, &[0x5b]).unwrap());
        let mut out = b"before".to_vec();
        let err = line.checked_append(&pool, 0x1000, &mut out).unwrap_err();
        assert!(
            matches!(err, RecordMapError::CorruptRecord { offset: 0x1000, .. }),
            "{err}"
        );
        assert_eq!(out, b"before");
        // A header whose value runs past the pool's end.
        drop(pool.write(end + 8, &4096u32.to_le_bytes()).unwrap());
        let err = first_line(&pool, end)
            .unwrap()
            .checked_append(&pool, end, &mut out)
            .unwrap_err();
        assert!(err.to_string().contains("past the pool's end"), "{err}");
        assert_eq!(out, b"before");
    }
}
