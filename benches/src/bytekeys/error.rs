//! Why the byte-key section fails: every map's errors, ours and the peers', in one type.

use std::path::PathBuf;

use crate::phase::CountError;
use crate::poolfile::SetupError;

/// Why the byte-key section failed.
#[derive(Debug, thiserror::Error)]
pub enum ByteKeyError {
    /// A store's pool could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// An operation through the store failed.
    #[error("a byte-key map operation failed: {0}")]
    Store(#[from] pmem_structures::Error),
    /// An operation on the leaf map failed.
    #[error("a leaf map operation failed: {0}")]
    Leaf(#[from] pmem_structures::raw::records::RecordMapError),
    /// A map opened again holds another number of pairs (a bug, not a measurement).
    #[error("the map opened again holds {found} pairs, not {expected}")]
    Reopened {
        /// Pairs the reopened map holds.
        found: u64,
        /// Pairs the map held.
        expected: u64,
    },
    /// Operations did not do what they should have (a bug, not a measurement).
    #[error(transparent)]
    Count(#[from] CountError),
    /// A value read back was not the one written for its record (a bug, not a measurement).
    #[error("record {record}: read back a value of {len} bytes that is not one written for it")]
    BadValue {
        /// The record read, or the scan's start.
        record: usize,
        /// Bytes of the value read.
        len: usize,
    },
    /// A scan visited a pair it should not have (a bug, not a measurement).
    #[error("the scan from record {record}, pair {pair}: {what}")]
    BadScan {
        /// The scan's start.
        record: usize,
        /// Pairs visited before the bad one.
        pair: usize,
        /// What was wrong.
        what: &'static str,
    },
    /// A scan on a hash map (a bug of the section's plan).
    #[error("a hash map has no ordered scan")]
    NoScan,
    /// A peer was given `u64` keys (a bug of the section's plan).
    #[error("{0} is measured with byte keys only")]
    PeerKeys(&'static str),
    /// A peer's database file or directory could not be made fresh.
    #[error("cannot make the peer database {path} fresh: {source}")]
    PeerFile {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// LMDB (through heed) failed: the section fails rather than leave the peer out.
    #[error("LMDB (heed) failed to {what}: {source}")]
    Lmdb {
        /// What it was doing.
        what: &'static str,
        /// What heed reported.
        source: heed::Error,
    },
    /// redb failed: the section fails rather than leave the peer out.
    #[error("redb failed to {what}: {source}")]
    Redb {
        /// What it was doing.
        what: &'static str,
        /// What redb reported.
        source: redb::Error,
    },
}
