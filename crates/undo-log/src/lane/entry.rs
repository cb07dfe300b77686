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

use pmem_ordering::{Backend, Pool};

use crate::TxError;

/// Bytes of an entry's header.
pub(crate) const ENTRY_HEADER: u64 = 24;

/// Bytes an entry for `len` snapshot bytes takes in the log.
pub(crate) fn entry_size(len: u64) -> u64 {
    ENTRY_HEADER + len.div_ceil(8) * 8
}

fn checksum(generation: u64, offset: u64, old: &[u8]) -> u32 {
    let mut head = [0u8; 20];
    head[0..8].copy_from_slice(&generation.to_le_bytes());
    head[8..16].copy_from_slice(&offset.to_le_bytes());
    head[16..20].copy_from_slice(&(old.len() as u32).to_le_bytes());
    crc32c::crc32c_append(crc32c::crc32c(&head), old)
}

/// Encode an entry snapshotting `old` (the bytes at `offset`) for `generation` into `buf`.
pub(crate) fn encode(buf: &mut Vec<u8>, generation: u64, offset: u64, old: &[u8]) {
    buf.clear();
    buf.extend_from_slice(&generation.to_le_bytes());
    buf.extend_from_slice(&offset.to_le_bytes());
    buf.extend_from_slice(&(old.len() as u32).to_le_bytes());
    buf.extend_from_slice(&checksum(generation, offset, old).to_le_bytes());
    buf.extend_from_slice(old);
    buf.resize(entry_size(old.len() as u64) as usize, 0);
}

/// A valid entry found in a lane's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    /// Where the snapshot was taken.
    pub offset: u64,
    /// The bytes it held before the transaction wrote them.
    pub old: Vec<u8>,
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
        let len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(head[20..24].try_into().expect("4 bytes"));
        if pos + entry_size(len) > capacity {
            // A length running off the log: torn (a crash mid-append), not an entry.
            break;
        }
        let mut old = vec![0u8; len as usize];
        pool.read_bytes(log + pos + ENTRY_HEADER, &mut old)?;
        if checksum(gen, offset, &old) != crc {
            break;
        }
        if pool.check_range(offset, len).is_err() {
            return Err(TxError::CorruptLog {
                lane,
                position: pos,
                reason: format!("its checksum holds but it restores {len} bytes at {offset:#x}, outside the pool"),
            });
        }
        entries.push(Entry { offset, old });
        pos += entry_size(len);
    }
    Ok(entries)
}
