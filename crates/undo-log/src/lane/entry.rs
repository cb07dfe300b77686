//! The on-media format of one undo-log entry, and the scan that finds a generation's entries.
//!
//! Entries are packed from the start of a lane's log:
//!
//! ```text
//! | gen: u64 | offset: u64 | len: u32 | crc: u32 | old bytes, padded to 8 |
//! ```
//!
//! The CRC-32C covers generation, offset, length and bytes, so an entry torn by a crash (or
//! left over from an earlier transaction, whose generation differs) is recognised and ends the
//! scan.
//!
//! A `len` with bit 31 set is an allocator *intent* (heap format 3 on): how to undo one change
//! of allocator metadata at `offset` (an 8-byte word) that the transaction will make when it
//! commits, logged when it allocates or frees. Its 8 bytes of payload are the word to restore
//! (kind 0), or the mask of the bits to clear (kind 1) or set (kind 2); the kind is in bits
//! 0..8 of `len`.

use pmem_ordering::{Backend, Pool};

use crate::TxError;

/// Bytes of an entry's header.
pub(crate) const ENTRY_HEADER: u64 = 24;

/// The flag of `len` that makes an entry an [`Intent`].
const INTENT: u32 = 1 << 31;

/// How to undo one allocator metadata change (see the module's documentation). Applied by
/// recovery, and by an abort only once the commit has written the metadata (before that, the
/// words are the allocator's and other transactions' to write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Intent {
    /// Store this word.
    Word(u64),
    /// Clear these bits of the word.
    ClearBits(u64),
    /// Set these bits of the word.
    SetBits(u64),
}

impl Intent {
    fn encode(self) -> (u32, u64) {
        match self {
            Intent::Word(w) => (INTENT, w),
            Intent::ClearBits(m) => (INTENT | 1, m),
            Intent::SetBits(m) => (INTENT | 2, m),
        }
    }

    fn decode(kind: u32, payload: u64) -> Option<Intent> {
        match kind {
            0 => Some(Intent::Word(payload)),
            1 => Some(Intent::ClearBits(payload)),
            2 => Some(Intent::SetBits(payload)),
            _ => None,
        }
    }

    /// The word after undoing this change of `current`.
    pub(crate) fn undo(self, current: u64) -> u64 {
        match self {
            Intent::Word(w) => w,
            Intent::ClearBits(m) => current & !m,
            Intent::SetBits(m) => current | m,
        }
    }

    /// This intent and `later`, about the same word, as one (if they can be one): masks of
    /// the same kind join.
    pub(crate) fn merge(self, later: Intent) -> Option<Intent> {
        match (self, later) {
            (Intent::ClearBits(a), Intent::ClearBits(b)) => Some(Intent::ClearBits(a | b)),
            (Intent::SetBits(a), Intent::SetBits(b)) => Some(Intent::SetBits(a | b)),
            _ => None,
        }
    }
}

/// Append an [`Intent`] entry for the word at `offset` to `buf`.
pub(crate) fn push_intent(buf: &mut Vec<u8>, generation: u64, offset: u64, intent: Intent) {
    let (len, payload) = intent.encode();
    let at = buf.len();
    buf.extend_from_slice(&generation.to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(&len.to_le_bytes());
    let crc = checksum_raw(generation, offset, len, &payload.to_le_bytes());
    buf.extend_from_slice(&crc.to_le_bytes());
    buf.extend_from_slice(&payload.to_le_bytes());
    debug_assert_eq!(buf.len() - at, INTENT_SIZE as usize);
}

/// Bytes an intent entry takes in the log.
pub(crate) const INTENT_SIZE: u64 = ENTRY_HEADER + 8;

/// Bytes an entry for `len` snapshot bytes takes in the log.
pub(crate) fn entry_size(len: u64) -> u64 {
    ENTRY_HEADER + len.div_ceil(8) * 8
}

fn checksum(generation: u64, offset: u64, old: &[u8]) -> u32 {
    checksum_raw(generation, offset, old.len() as u32, old)
}

fn checksum_raw(generation: u64, offset: u64, len: u32, body: &[u8]) -> u32 {
    let mut head = [0u8; 20];
    head[0..8].copy_from_slice(&generation.to_le_bytes());
    head[8..16].copy_from_slice(&offset.to_le_bytes());
    head[16..20].copy_from_slice(&len.to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&head), body)
}

/// Encode an entry snapshotting `old` (the bytes at `offset`) for `generation` into `buf`.
#[cfg(test)]
pub(crate) fn encode(buf: &mut Vec<u8>, generation: u64, offset: u64, old: &[u8]) {
    buf.clear();
    let at = push_header(buf, generation, offset, old.len() as u64);
    buf.extend_from_slice(old);
    finish(buf, at);
}

/// Append the header of an entry for `len` bytes at `offset` to `buf`, its checksum left to
/// [`finish`] once the old bytes follow it; returns where the entry starts in `buf`.
pub(crate) fn push_header(buf: &mut Vec<u8>, generation: u64, offset: u64, len: u64) -> usize {
    let at = buf.len();
    buf.extend_from_slice(&generation.to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(&(len as u32).to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    at
}

/// Complete the entry that starts at `at` in `buf` and whose old bytes are `buf[at + 24..]`:
/// its checksum, and the padding to 8 bytes.
pub(crate) fn finish(buf: &mut Vec<u8>, at: usize) {
    let head = at + ENTRY_HEADER as usize;
    let generation = u64::from_le_bytes(buf[at..at + 8].try_into().expect("8 bytes"));
    let offset = u64::from_le_bytes(buf[at + 8..at + 16].try_into().expect("8 bytes"));
    let crc = checksum(generation, offset, &buf[head..]);
    buf[at + 20..head].copy_from_slice(&crc.to_le_bytes());
    let len = (buf.len() - head) as u64;
    buf.resize(at + entry_size(len) as usize, 0);
}

/// A valid entry found in a lane's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Where the snapshot was taken, or the word the intent is about.
    pub offset: u64,
    /// What undoing it takes.
    pub undo: Undo,
}

/// What undoing one entry takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Undo {
    /// Restore these bytes (what the range held before the transaction wrote it).
    Restore(Vec<u8>),
    /// Undo an allocator metadata change.
    Intent(Intent),
}

/// Read the entries of `generation` from the log at `log` (of `capacity` bytes) of lane
/// `lane`, in order, stopping at the first entry that is not a whole entry of that generation.
pub(crate) fn scan<B: Backend>(
    pool: &Pool<B>,
    lane: usize,
    log: u64,
    capacity: u64,
    generation: u64,
) -> Result<Vec<Entry>, TxError> {
    let mut entries = Vec::new();
    let mut pos = 0u64;
    while pos + ENTRY_HEADER <= capacity {
        let mut head = [0u8; ENTRY_HEADER as usize];
        pool.read_bytes(log + pos, &mut head)?;
        let gen = u64::from_le_bytes(head[0..8].try_into().expect("8 bytes"));
        if gen != generation {
            break;
        }
        let offset = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let raw_len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(head[20..24].try_into().expect("4 bytes"));
        let len = if raw_len & INTENT != 0 {
            8
        } else {
            raw_len as u64
        };
        if pos + entry_size(len) > capacity {
            // A length running off the log: torn (a crash mid-append), not an entry.
            break;
        }
        let mut body = vec![0u8; len as usize];
        pool.read_bytes(log + pos + ENTRY_HEADER, &mut body)?;
        if checksum_raw(gen, offset, raw_len, &body) != crc {
            break;
        }
        let corrupt = |reason: String| TxError::CorruptLog {
            lane,
            position: pos,
            reason,
        };
        if pool.check_range(offset, len).is_err() {
            return Err(corrupt(format!(
                "its checksum holds but it restores {len} bytes at {offset:#x}, outside the pool"
            )));
        }
        let undo = if raw_len & INTENT != 0 {
            let payload = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
            let intent = Intent::decode(raw_len & !INTENT, payload).ok_or_else(|| {
                corrupt(format!(
                    "its checksum holds but it is an allocator intent of kind {:#x} with payload {payload}",
                    raw_len & !INTENT
                ))
            })?;
            if !offset.is_multiple_of(8) {
                return Err(corrupt(format!(
                    "its checksum holds but its allocator intent is about a misaligned word at {offset:#x}"
                )));
            }
            Undo::Intent(intent)
        } else {
            Undo::Restore(body)
        };
        entries.push(Entry { offset, undo });
        pos += entry_size(len);
    }
    Ok(entries)
}
