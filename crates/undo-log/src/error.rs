//! Typed errors of transactions, the heap layout and the allocator.

use std::fmt;

use pmem_ordering::PoolError;

/// Everything a transaction, the heap or the allocator can refuse.
///
/// `Debug` prints the same message as `Display`: `fn main() -> Result<(), Box<dyn Error>>`
/// reports an error with `Debug`, and a user should read a sentence there, not a struct dump.
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum TxError {
    /// An access of the pool failed (out of bounds, misaligned, ...).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The pool holds no undo-log heap (it was never formatted by [`crate::Heap::create`]).
    #[error("the pool holds no undo-log heap: create one with Heap::create")]
    NotFormatted,
    /// [`crate::Heap::create`] on a pool that already holds a heap.
    #[error("the pool already holds an undo-log heap: open it with Heap::open")]
    AlreadyFormatted,
    /// The heap's superblock is damaged or from another version.
    #[error("the undo-log heap's superblock is invalid ({reason}): the pool is damaged or was written by another version of this library")]
    BadSuperblock {
        /// What is wrong with it.
        reason: String,
    },
    /// The heap was made by an older version of this library, whose superblock did not record
    /// the fence policy: it is not opened under a guessed policy.
    #[error(
        "the undo-log heap's superblock is version {found}, from a release that did not record \
         the fence policy; this library reads version {supported}: create the pool anew"
    )]
    OutdatedSuperblock {
        /// The superblock's version.
        found: u32,
        /// The version this library reads.
        supported: u32,
    },
    /// The heap was made by an older version of this library, whose lane logs had another
    /// format (version 2: no allocator intents; version 3: a checksum per entry rather than per
    /// group): its logs are not read by rules they were not written for.
    #[error(
        "the undo-log heap is version {found}, whose lane logs this library cannot read (it \
         reads version {supported}, which logs allocator changes as intents and checksums each \
         batch of entries once): open the pool with the release that made it and copy its data \
         out, or create the pool anew"
    )]
    OutdatedLogFormat {
        /// The superblock's version.
        found: u32,
        /// The version this library reads.
        supported: u32,
    },
    /// The configuration cannot be laid out in this pool.
    #[error("invalid heap configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
    /// One snapshot larger than a lane's whole log.
    #[error("a snapshot of {len} bytes cannot fit a lane log of {capacity} bytes: snapshot less at once, or create the heap with a larger HeapConfig::lane_log_bytes")]
    SnapshotTooLarge {
        /// Bytes asked for.
        len: u64,
        /// Usable bytes of one lane log.
        capacity: u64,
    },
    /// The transaction's snapshots have filled its lane's log.
    #[error("the lane log is full: a {needed}-byte entry does not fit in the {free} bytes left; split the transaction, or create the heap with a larger HeapConfig::lane_log_bytes")]
    LogFull {
        /// Bytes the entry needs.
        needed: u64,
        /// Bytes left in the log.
        free: u64,
    },
    /// A committed log entry that cannot be right (its checksum holds but it points outside the
    /// pool): the pool is corrupted.
    #[error("the undo log of lane {lane} is corrupted: entry at byte {position:#x} of the log: {reason}")]
    CorruptLog {
        /// The lane.
        lane: usize,
        /// Byte position of the entry in the lane's log.
        position: u64,
        /// What is wrong.
        reason: String,
    },
    /// The allocator has no room for the request.
    #[error(
        "pool full: no room for an allocation of {requested} bytes ({free} bytes free in all); free some blocks or use a larger pool"
    )]
    PoolFull {
        /// Bytes asked for.
        requested: u64,
        /// Bytes free in the heap (possibly fragmented).
        free: u64,
    },
    /// An allocation size the allocator cannot serve.
    #[error("invalid allocation size {size}: {reason}")]
    InvalidAllocSize {
        /// Bytes asked for.
        size: u64,
        /// Why.
        reason: &'static str,
    },
    /// A free of something that is not a live allocation.
    #[error("invalid free of offset {offset:#x}: {reason}")]
    InvalidFree {
        /// Offset passed to free.
        offset: u64,
        /// Why.
        reason: &'static str,
    },
    /// A record block handed back in a state it is not in (e.g. published twice, or released
    /// without having been retired), or resolved while this session uses it.
    #[error("invalid use of the record block at offset {offset:#x}: {reason}")]
    InvalidRecord {
        /// The block's offset.
        offset: u64,
        /// Why.
        reason: &'static str,
    },
    /// The allocator's persistent metadata contradicts itself.
    #[error("heap metadata is corrupted: {reason}")]
    CorruptHeap {
        /// What is inconsistent.
        reason: String,
    },
    /// A nested transaction failed, so the whole (flattened) transaction was rolled back.
    #[error("a nested transaction failed, so the enclosing transaction was rolled back")]
    NestedAborted,
}

impl fmt::Debug for TxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::{PoolError, TxError};

    #[test]
    fn debug_prints_the_message() {
        let free = TxError::InvalidFree {
            offset: 0x2040,
            reason: "it is not the start of a live block",
        };
        assert_eq!(
            format!("{free:?}"),
            "invalid free of offset 0x2040: it is not the start of a live block"
        );
        let full = TxError::LogFull {
            needed: 96,
            free: 32,
        };
        assert_eq!(
            format!("{full:?}"),
            "the lane log is full: a 96-byte entry does not fit in the 32 bytes left; split the \
             transaction, or create the heap with a larger HeapConfig::lane_log_bytes"
        );
    }

    #[test]
    fn a_pool_error_prints_as_itself() {
        let pool = TxError::from(PoolError::Misaligned { offset: 0x1004 });
        assert_eq!(
            format!("{pool:?}"),
            "8-byte atomic access at offset 0x1004, which is not 8-byte aligned"
        );
    }
}
