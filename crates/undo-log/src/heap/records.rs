//! The heap's record-block API: allocation outside transactions, for structures that publish
//! one out-of-line record per operation and cannot afford a transaction each time (the
//! protocol and its states are `alloc/records.rs`'s; resolution after a crash is
//! `alloc/record_recovery.rs`'s).
//!
//! The protocol a structure follows, per operation, with an *intent* line of its own:
//!
//! 1. [`Heap::reserve_record`], write the record into the block and flush it; write the intent
//!    (new block, old block) and flush it; one fence.
//! 2. [`Heap::publish_record`] (new), [`Heap::retire_record`] (old), store and flush the slot
//!    that points at the new record; one fence, over all three tokens.
//! 3. After no reader can hold the old block any more: [`Heap::release_record`].
//!
//! At open, before anything allocates: [`Heap::resolve_record`] for each block an intent
//! names, then [`Heap::trim_record_chunks`].

use pmem_ordering::{Backend, Pending};

use super::Heap;
use crate::{RecordBlock, TxError};

impl<B: Backend> Heap<B> {
    /// Reserve a block of at least `size` bytes for a record, in DRAM only: nothing is
    /// written but, once per chunk, the formatting of a record chunk taken from the free pool
    /// (its empty bitmap, then its chunk word, each persisted: an empty record chunk is
    /// harmless after a crash).
    ///
    /// Record blocks come from record chunks (sizes up to the largest size class) and record
    /// runs of whole chunks (larger sizes), never shared with blocks of transactions. Fails
    /// with [`TxError::InvalidAllocSize`] for 0 bytes and [`TxError::PoolFull`] when nothing
    /// fits, leaving the heap unchanged.
    ///
    /// ```
    /// use pmem_ordering::{Pool, PoolOptions};
    /// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
    ///
    /// let pool = Pool::anonymous("records", 4 << 20, &PoolOptions::new())?;
    /// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
    /// let (pool, slot) = (heap.pool(), heap.pool().root_offset());
    /// // Epoch 1: the record written and flushed (a map writes its intent line here too); a fence.
    /// let record = heap.reserve_record(11)?;
    /// let data = pool.flush(pool.write(record.offset, b"hello world")?);
    /// pool.fence(data);
    /// // Epoch 2: the allocation bit and the slot that publishes the record; one fence for both.
    /// let bit = heap.publish_record(record)?;
    /// let link = pool.flush(pool.store_u64(slot, record.offset)?);
    /// pool.fence(bit.and(link));
    /// assert_eq!(heap.record_block(record.offset), Some(record));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_record(&self, size: u64) -> Result<RecordBlock, TxError> {
        self.shared.allocator.reserve_record(&self.pool, size)
    }

    /// Give back a reservation that will not be published (e.g. the key already existed).
    /// A record chunk left with no block at all returns to the free pool (one persisted store).
    /// Fails with [`TxError::InvalidRecord`] unless `block` is a reservation of this heap not
    /// yet published or cancelled.
    pub fn cancel_record(&self, block: RecordBlock) -> Result<(), TxError> {
        self.shared.allocator.cancel_record(&self.pool, block)
    }

    /// Mark reserved `block` allocated on the media: store its bitmap word (a run: its chunk
    /// word) and flush it, **without a fence**: the returned token is fenced by the caller, in
    /// the one fence that also makes the slot publishing the record durable. Fails with
    /// [`TxError::InvalidRecord`] unless `block` is a reservation of this heap.
    pub fn publish_record(&self, block: RecordBlock) -> Result<Pending, TxError> {
        self.shared.allocator.publish_record(&self.pool, block)
    }

    /// Mark the published record block at `offset` free on the media (store and flush, **no
    /// fence**: the caller fences the returned token with its slot), but keep it unavailable
    /// until [`Heap::release_record`]: lock-free readers may still be reading it. Fails with
    /// [`TxError::InvalidFree`] if `offset` is not a published record block (a transaction's
    /// block, a reserved or retired record, one a transaction is freeing, or no block).
    pub fn retire_record(&self, offset: u64) -> Result<(RecordBlock, Pending), TxError> {
        self.shared.allocator.retire_record(&self.pool, offset)
    }

    /// Let a retired block be handed out again, once its retirement is durable (the caller's
    /// fence) and no reader can hold it. A record chunk left with no block at all returns to
    /// the free pool (one persisted store). Fails with [`TxError::InvalidRecord`] unless
    /// `block` is retired.
    pub fn release_record(&self, block: RecordBlock) -> Result<(), TxError> {
        self.shared.allocator.release_record(&self.pool, block)
    }

    /// Undo [`Heap::retire_record`] of `block` (the structure's change that was to unlink it
    /// failed, so the block is still reachable): store and flush its allocation again, **no
    /// fence**. Fails with [`TxError::InvalidRecord`] unless `block` is retired.
    pub fn restore_record(&self, block: RecordBlock) -> Result<Pending, TxError> {
        self.shared.allocator.restore_record(&self.pool, block)
    }

    /// Resolve a block an intent line names, after a crash: if `offset` is the start of a
    /// record block of `size` bytes (its [`RecordBlock::size`], or the size it was reserved
    /// for), set its allocation to `allocated` (whether the structure reaches it), persisted
    /// with a flush and a fence if that changes anything, and return `Ok(true)`. Anything else
    /// (an offset that is not the start of a record block, a record block of another size, a
    /// transaction's block) is left alone: `Ok(false)`. A record run that must be allocated is
    /// made again over its chunks if they are all free.
    ///
    /// Intents are never cleared, so a stale one may name a block freed and reused long ago.
    /// The allocator leaves a block alone unless it is a record block of the intent's shape,
    /// but it cannot tell whose record that is: when several structures allocate records, a
    /// block another structure's record now holds must not be resolved as unreachable (tag each
    /// record with its owner, and skip a block whose tag names another).
    ///
    /// **Call it at open, before anything else reserves or allocates**: a block this session
    /// reserved, retired or is freeing is refused with [`TxError::InvalidRecord`].
    pub fn resolve_record(&self, offset: u64, size: u64, allocated: bool) -> Result<bool, TxError> {
        self.shared
            .allocator
            .resolve_record(&self.pool, offset, size, allocated)
    }

    /// Return every record chunk with no block reserved, published or retired (the empty ones a
    /// crash can leave) to the free pool; returns how many. Call it after every intent is
    /// resolved (resolution may allocate a block in an empty record chunk), or any time for
    /// the space: record chunks emptied while the heap is open return at once.
    pub fn trim_record_chunks(&self) -> Result<u64, TxError> {
        self.shared.allocator.trim_record_chunks(&self.pool)
    }

    /// The published record block starting at `offset`, with its size, if there is one.
    pub fn record_block(&self, offset: u64) -> Option<RecordBlock> {
        self.shared.allocator.record_block(offset)
    }
}
