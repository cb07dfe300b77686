//! The on-media format of the undo-log entries, and the scan that finds a generation's entries.
//!
//! Entries are packed from the start of a lane's log:
//!
//! ```text
//! | gen: u64 | offset: u64 | len: u32 | crc: u32 | old bytes, padded to 8 |
//! ```
//!
//! Entries come in *groups*: the entries of one snapshot batch
//! ([`OpenLog::append_with_intents`](super::OpenLog::append_with_intents)), or one allocator
//! intent. One copy into the log writes one or more whole groups. A snapshot's `len` with bit
//! 30 set says the next entry belongs to its group. The first
//! entry's `crc` is the CRC-32C of the whole group's bytes (padding included, that `crc` read
//! as zero); the other entries' `crc` fields are zero. So a group torn by a crash (or left over
//! from an earlier transaction, whose generation differs) is recognised and ends the scan, and
//! a batch of K entries costs one checksum, not K (heap format 4 on; format 3 checked each
//! entry on its own).
//!
//! Dropping a whole torn group is safe for the same reason dropping a torn entry is: no range
//! of a batch is overwritten before the caller has ordered the batch's copy, so a crash that
//! tears the copy finds every range of the batch unchanged.
//!
//! A `len` with bit 31 set is an allocator *intent* (heap format 3 on): how to undo one change
//! of allocator metadata at `offset` (an 8-byte word) that the transaction will make when it
//! commits, logged when it allocates or frees. Its 8 bytes of payload are the word to restore
//! (kind 0), or the mask of the bits to clear (kind 1) or set (kind 2); the kind is in bits
//! 0..8 of `len`. An intent is a group of its own.

use pmem_ordering::{Backend, Pool};

use crate::TxError;

/// Bytes of an entry's header.
pub(crate) const ENTRY_HEADER: u64 = 24;

/// The flag of `len` that makes an entry an [`Intent`].
const INTENT: u32 = 1 << 31;

/// The flag of a snapshot's `len` that puts the next entry in the same group.
const CONTINUED: u32 = 1 << 30;

/// Snapshots must be shorter than this: the bits above hold [`INTENT`] and [`CONTINUED`].
pub(crate) const SNAPSHOT_LEN_LIMIT: u64 = CONTINUED as u64;

/// Where an entry's `crc` field lies in its header.
const CRC_AT: usize = 20;

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

/// Append an [`Intent`] entry for the word at `offset` to `buf`: a group of its own.
pub(crate) fn push_intent(buf: &mut Vec<u8>, generation: u64, offset: u64, intent: Intent) {
    let (len, payload) = intent.encode();
    // Encoded and sealed in a local array, then appended once.
    let mut entry = [0u8; INTENT_SIZE as usize];
    entry[0..8].copy_from_slice(&generation.to_le_bytes());
    entry[8..16].copy_from_slice(&offset.to_le_bytes());
    entry[16..20].copy_from_slice(&len.to_le_bytes());
    entry[ENTRY_HEADER as usize..].copy_from_slice(&payload.to_le_bytes());
    seal_group(&mut entry);
    buf.extend_from_slice(&entry);
}

/// Bytes an intent entry takes in the log.
pub(crate) const INTENT_SIZE: u64 = ENTRY_HEADER + 8;

/// Bytes an entry for `len` snapshot bytes takes in the log.
pub(crate) fn entry_size(len: u64) -> u64 {
    ENTRY_HEADER + len.div_ceil(8) * 8
}

/// Encode an entry snapshotting `old` (the bytes at `offset`) for `generation` into `buf`,
/// as a group of its own.
#[cfg(test)]
pub(crate) fn encode(buf: &mut Vec<u8>, generation: u64, offset: u64, old: &[u8]) {
    buf.clear();
    let body = push_snapshot(buf, generation, offset, old.len() as u64, false);
    buf[body..body + old.len()].copy_from_slice(old);
    seal_group(buf);
}

/// Append an entry for `len` bytes (below [`SNAPSHOT_LEN_LIMIT`]) at `offset` to `buf`: its
/// header, `crc` zero, and room for the old bytes (zeroed, padding included). `continued`: the
/// next entry belongs to the same group. Returns where the old bytes go in `buf`.
pub(crate) fn push_snapshot(
    buf: &mut Vec<u8>,
    generation: u64,
    offset: u64,
    len: u64,
    continued: bool,
) -> usize {
    debug_assert!(len < SNAPSHOT_LEN_LIMIT);
    let at = buf.len();
    let flags = if continued { CONTINUED } else { 0 };
    let mut head = [0u8; ENTRY_HEADER as usize];
    head[0..8].copy_from_slice(&generation.to_le_bytes());
    head[8..16].copy_from_slice(&offset.to_le_bytes());
    head[16..20].copy_from_slice(&(len as u32 | flags).to_le_bytes());
    buf.extend_from_slice(&head);
    buf.resize(at + entry_size(len) as usize, 0);
    at + ENTRY_HEADER as usize
}

/// Checksum the group `group` (its entries encoded, every `crc` field zero) into its first
/// entry's `crc`.
pub(crate) fn seal_group(group: &mut [u8]) {
    let crc = crc32c::crc32c(group);
    group[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
}

/// The bytes an entry of `raw_len` (its `len` field) holds after its header.
fn body_len(raw_len: u32) -> u64 {
    if raw_len & INTENT != 0 {
        8
    } else {
        u64::from(raw_len & !CONTINUED)
    }
}

/// Whether the entry of `raw_len` is followed by another of its group.
fn continues(raw_len: u32) -> bool {
    raw_len & INTENT == 0 && raw_len & CONTINUED != 0
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
    let mut group = Vec::new();
    while let Some(end) = group_end(pool, log, capacity, generation, pos)? {
        group.resize((end - pos) as usize, 0);
        pool.read_bytes(log + pos, &mut group)?;
        let stored = u32::from_le_bytes(group[CRC_AT..CRC_AT + 4].try_into().expect("4 bytes"));
        group[CRC_AT..CRC_AT + 4].fill(0);
        if crc32c::crc32c(&group) != stored {
            break;
        }
        decode_group(pool, lane, pos, &group, &mut entries)?;
        pos = end;
    }
    Ok(entries)
}

/// Where the group of `generation` that starts at `pos` in the log ends, read from its
/// entries' headers; `None` if there is none there (another generation's bytes, or a length
/// running off the log: torn by a crash mid-append, not a group).
fn group_end<B: Backend>(
    pool: &Pool<B>,
    log: u64,
    capacity: u64,
    generation: u64,
    pos: u64,
) -> Result<Option<u64>, TxError> {
    let mut end = pos;
    loop {
        if end + ENTRY_HEADER > capacity {
            return Ok(None);
        }
        let mut head = [0u8; ENTRY_HEADER as usize];
        pool.read_bytes(log + end, &mut head)?;
        if u64::from_le_bytes(head[0..8].try_into().expect("8 bytes")) != generation {
            return Ok(None);
        }
        let raw_len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes"));
        end += entry_size(body_len(raw_len));
        if end > capacity {
            return Ok(None);
        }
        if !continues(raw_len) {
            return Ok(Some(end));
        }
    }
}

/// Decode the entries of `group` (a whole group, its checksum verified, found at `pos` in
/// lane `lane`'s log) onto `entries`.
fn decode_group<B: Backend>(
    pool: &Pool<B>,
    lane: usize,
    pos: u64,
    group: &[u8],
    entries: &mut Vec<Entry>,
) -> Result<(), TxError> {
    let mut at = 0usize;
    while at < group.len() {
        let head = &group[at..at + ENTRY_HEADER as usize];
        let offset = u64::from_le_bytes(head[8..16].try_into().expect("8 bytes"));
        let raw_len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes"));
        let len = body_len(raw_len);
        let body_at = at + ENTRY_HEADER as usize;
        let body = &group[body_at..body_at + len as usize];
        let corrupt = |reason: String| TxError::CorruptLog {
            lane,
            position: pos + at as u64,
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
            Undo::Restore(body.to_vec())
        };
        entries.push(Entry { offset, undo });
        at += entry_size(len) as usize;
    }
    Ok(())
}
