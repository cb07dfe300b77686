//! Typed errors of transactions, the heap layout and the allocator.

use pmem_ordering::PoolError;

/// Everything a transaction, the heap or the allocator can refuse.
#[derive(Debug, thiserror::Error)]
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
    #[error("the undo-log heap's superblock is invalid: {reason}")]
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
    /// The configuration cannot be laid out in this pool.
    #[error("invalid heap configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
    /// One snapshot larger than a lane's whole log.
    #[error("a snapshot of {len} bytes cannot fit a lane log of {capacity} bytes")]
    SnapshotTooLarge {
        /// Bytes asked for.
        len: u64,
        /// Usable bytes of one lane log.
        capacity: u64,
    },
    /// The transaction's snapshots have filled its lane's log.
    #[error("the lane log is full: a {needed}-byte entry does not fit in the {free} bytes left")]
    LogFull {
        /// Bytes the entry needs.
        needed: u64,
        /// Bytes left in the log.
        free: u64,
    },
    /// A committed log entry that cannot be right (its checksum holds but it points outside the
    /// pool): the pool is corrupted.
    #[error("lane {lane}: log entry at {position} is corrupted: {reason}")]
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
        "pool full: no room for an allocation of {requested} bytes ({free} bytes free in all)"
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
