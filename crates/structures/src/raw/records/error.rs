//! The one error of the maps of records, hash and ordered.

use pmem_ordering::PoolError;
use pmem_undo_log::TxError;

use crate::cceh::CcehError;
use crate::fastfair::FastFairError;
use crate::kind::StructureKind;

/// What can go wrong with a map of records (hash or ordered).
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum RecordMapError {
    /// The key is longer than [`MAX_KEY_BYTES`](super::MAX_KEY_BYTES).
    #[error("a key of {len} bytes is longer than the {max}-byte limit")]
    KeyTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value is longer than [`MAX_VALUE_BYTES`](super::MAX_VALUE_BYTES).
    #[error("a value of {len} bytes is longer than the {max}-byte limit")]
    ValueTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The hash table under the map failed.
    #[error(transparent)]
    Table(#[from] CcehError),
    /// A FAST&FAIR layer of the ordered map failed.
    #[error(transparent)]
    Tree(FastFairError),
    /// The heap (allocation, a transaction, the pool) failed.
    #[error(transparent)]
    Heap(#[from] TxError),
    /// `create` on a root in use.
    #[error("root {root:#x} already holds {found}: open it, or create the map at an unused (all-zero) root")]
    AlreadyExists {
        /// The root offset.
        root: u64,
        /// What it holds.
        found: String,
    },
    /// `open` on a root holding something else.
    #[error("root {root:#x} holds {found}, not {wanted}")]
    WrongKind {
        /// The root offset.
        root: u64,
        /// What it holds.
        found: String,
        /// What was asked for.
        wanted: StructureKind,
    },
    /// The map is damaged.
    #[error("not a valid map of records at {root:#x}: {reason}")]
    Corrupt {
        /// The root offset.
        root: u64,
        /// What is wrong.
        reason: String,
    },
    /// A record whose bytes do not match the checksum written with it, or whose header gives
    /// lengths past the pool: damaged on the media (or by a stray write). Its key and value
    /// are not served.
    #[error("the record at pool offset {offset:#x} is damaged: {reason}")]
    CorruptRecord {
        /// The record's pool offset.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An argument that cannot be used.
    #[error("invalid map of records configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
}

impl std::fmt::Debug for RecordMapError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl From<PoolError> for RecordMapError {
    fn from(e: PoolError) -> Self {
        RecordMapError::Heap(TxError::Pool(e))
    }
}

impl From<FastFairError> for RecordMapError {
    fn from(e: FastFairError) -> Self {
        match e {
            FastFairError::Tx(e) => RecordMapError::Heap(e),
            other => RecordMapError::Tree(other),
        }
    }
}
