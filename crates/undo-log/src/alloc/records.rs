//! Record blocks: blocks a structure allocates outside any transaction, one per operation (the
//! byte-key maps' out-of-line records), in record chunks and record runs of their own.
//!
//! A record block goes through four states, each kept in DRAM under the allocator's lock:
//!
//! | state | media | DRAM |
//! |---|---|---|
//! | reserved ([`Allocator::reserve_record`]) | free | `taken` bit (a run: head, not formatted), in `record_reserved` |
//! | published ([`Allocator::publish_record`]) | allocated | `taken` and `persistent` bits (a run: head formatted) |
//! | retired ([`Allocator::retire_record`]) | free | `taken` bit (a run: head, not formatted), in `record_retired` |
//! | free (cancelled, or [`Allocator::release_record`]d) | free | nothing |
//!
//! Publishing and retiring store one metadata word (a bitmap word, or a run's head word) and
//! flush it, and return the flush's token unfenced: the caller's one fence makes the bit durable
//! together with the slot that publishes (or unpublishes) the record. A retired block stays
//! unavailable until released, because lock-free readers may still read it.
//!
//! Every word is computed from DRAM and stored under the lock, so the stores of neighbours in
//! one bitmap word, and a transaction's logged write of that word, never interleave (see the
//! module documentation of `alloc` for why an unfenced record bit next to a logged word is safe).

use std::sync::MutexGuard;

use pmem_ordering::{Backend, Pending, Pool};

use super::chunk::{
    first_clear, set_bit, ChunkState, KIND_FREE, KIND_RECORD, KIND_RUN_HEAD, RUN_RECORD,
};
use super::{Allocator, Place, Reservation, State};
use crate::TxError;

/// The states of a record block a caller hands back.
#[derive(Clone, Copy)]
enum Phase {
    Reserved,
    Retired,
}

/// A record block reserved, published or retired outside any transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordBlock {
    /// Offset of the block in the pool.
    pub offset: u64,
    /// The block's real size: its size class, or whole chunks for a run.
    pub size: u64,
}

impl Allocator {
    /// Reserve a record block of at least `size` bytes (DRAM only, but for formatting a record
    /// chunk taken from the free pool: its empty bitmap, then its chunk word, each persisted).
    pub fn reserve_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        size: u64,
    ) -> Result<RecordBlock, TxError> {
        if size == 0 {
            return Err(TxError::InvalidAllocSize {
                size,
                reason: "a block must have at least one byte",
            });
        }
        let mut st = self.lock();
        let full = |st: &State| TxError::PoolFull {
            requested: size,
            free: self.free_bytes(st),
        };
        let block = match self.class_for(size) {
            Some(class) => {
                let shape = self.classes[class];
                let chunk = match st.record_partial[class].first().copied() {
                    Some(c) => c,
                    None => {
                        let c = st.free_chunks.first().copied().ok_or_else(|| full(&st))?;
                        // Formatted before DRAM changes, so a failure leaves the heap as it was.
                        self.format_record_chunk(pool, c, class)?;
                        let words = shape.objects.div_ceil(64) as usize;
                        st.free_chunks.remove(&c);
                        st.chunks[c as usize] = ChunkState::Small {
                            class,
                            persistent: vec![0; words],
                            taken: vec![0; words],
                            formatted: true,
                            record: true,
                        };
                        st.record_partial[class].insert(c);
                        c
                    }
                };
                let ChunkState::Small { taken, .. } = &mut st.chunks[chunk as usize] else {
                    unreachable!("a partial record chunk is small");
                };
                let slot = first_clear(taken, shape.objects)
                    .expect("a partial record chunk has a free slot");
                set_bit(taken, slot, true);
                if first_clear(taken, shape.objects).is_none() {
                    st.record_partial[class].remove(&chunk);
                }
                RecordBlock {
                    offset: self.chunk_offset(chunk) + shape.header + slot * shape.object,
                    size: shape.object,
                }
            }
            None => {
                let n = size.div_ceil(self.layout.chunk_size);
                let start = self.find_run(&st, n).ok_or_else(|| full(&st))?;
                for c in start..start + n {
                    st.free_chunks.remove(&c);
                    st.chunks[c as usize] = ChunkState::RunCont { head: start };
                }
                st.chunks[start as usize] = ChunkState::RunHead {
                    chunks: n,
                    formatted: false,
                    record: true,
                };
                RecordBlock {
                    offset: self.chunk_offset(start),
                    size: n * self.layout.chunk_size,
                }
            }
        };
        st.record_reserved.insert(block.offset);
        Ok(block)
    }

    /// Make free chunk `chunk` a record chunk of `class` on the media: its bitmap zeroed and
    /// persisted first (a free chunk's old bytes mean nothing, and a chunk word must never
    /// reach the media ahead of its bitmap), then its chunk word, persisted.
    fn format_record_chunk<B: Backend>(
        &self,
        pool: &Pool<B>,
        chunk: u64,
        class: usize,
    ) -> Result<(), TxError> {
        let header = self.classes[class].header;
        let bitmap = pool.write(self.chunk_offset(chunk), &vec![0; header as usize])?;
        pool.persist(bitmap);
        let word = pool.store_u64(self.table_word(chunk), KIND_RECORD | (class as u64) << 8)?;
        pool.persist(word);
        Ok(())
    }

    /// The record block whose start is `offset`, whatever its state: a slot of a record chunk,
    /// or the head of a record run.
    pub(super) fn record_slot(&self, st: &State, offset: u64) -> Option<Reservation> {
        let rel = offset.checked_sub(self.layout.alloc_offset)?;
        if rel >= self.layout.alloc_size {
            return None;
        }
        let chunk = rel / self.layout.chunk_size;
        let within = rel % self.layout.chunk_size;
        match st.chunks[chunk as usize] {
            ChunkState::Small {
                class,
                record: true,
                ..
            } => {
                let shape = self.classes[class];
                let slot = within.checked_sub(shape.header)? / shape.object;
                let start = shape.header + slot * shape.object;
                (within == start && slot < shape.objects).then_some(Reservation {
                    offset,
                    size: shape.object,
                    place: Place::Small { chunk, slot, class },
                })
            }
            ChunkState::RunHead {
                chunks,
                record: true,
                ..
            } if within == 0 => Some(Reservation {
                offset,
                size: chunks * self.layout.chunk_size,
                place: Place::Run { chunk, chunks },
            }),
            _ => None,
        }
    }

    /// The record block `block` names, if it is in `phase` and has that size.
    fn record_in(
        &self,
        st: &State,
        block: RecordBlock,
        phase: Phase,
    ) -> Result<Reservation, TxError> {
        let (set, not_there) = match phase {
            Phase::Reserved => (&st.record_reserved, "it is not a reserved record block"),
            Phase::Retired => (&st.record_retired, "it is not a retired record block"),
        };
        let invalid = |reason| TxError::InvalidRecord {
            offset: block.offset,
            reason,
        };
        let found = self
            .record_slot(st, block.offset)
            .filter(|_| set.contains(&block.offset))
            .ok_or_else(|| invalid(not_there))?;
        if found.size != block.size {
            return Err(invalid("its size is not the size the block was given"));
        }
        Ok(found)
    }

    /// Give back a reserved record block that will not be published.
    pub fn cancel_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        block: RecordBlock,
    ) -> Result<(), TxError> {
        let mut st = self.lock();
        let found = self.record_in(&st, block, Phase::Reserved)?;
        st.record_reserved.remove(&block.offset);
        self.vacate(pool, &mut st, found)
    }

    /// Store and flush the metadata word that marks reserved `block` allocated (no fence).
    pub fn publish_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        block: RecordBlock,
    ) -> Result<Pending, TxError> {
        let mut st = self.lock();
        let found = self.record_in(&st, block, Phase::Reserved)?;
        let pending = self.store_record_state(pool, &mut st, found, true)?;
        st.record_reserved.remove(&block.offset);
        st.record_publishes += 1;
        Ok(pending)
    }

    /// Store and flush the metadata word that marks published block `offset` free (no fence),
    /// keeping the block unavailable until [`Allocator::release_record`].
    pub fn retire_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        offset: u64,
    ) -> Result<(RecordBlock, Pending), TxError> {
        let mut st = self.lock();
        let refuse = |reason| TxError::InvalidFree { offset, reason };
        let Some(found) = self.record_slot(&st, offset) else {
            return Err(refuse(match self.committed_block(&st, offset) {
                Ok(_) => "a transaction allocated it: free it with Tx::free",
                Err(_) => "it is not the start of a record block",
            }));
        };
        if st.record_reserved.contains(&offset) {
            return Err(refuse("the record block is reserved, not published"));
        }
        if st.record_retired.contains(&offset) {
            return Err(refuse("the record block is already retired"));
        }
        if self.committed_block(&st, offset).is_err() {
            return Err(refuse("the record block is not published"));
        }
        if st.freeing.contains(&offset) {
            return Err(refuse("an open transaction is freeing it"));
        }
        let pending = self.store_record_state(pool, &mut st, found, false)?;
        st.record_retired.insert(offset);
        st.record_retires += 1;
        Ok((
            RecordBlock {
                offset,
                size: found.size,
            },
            pending,
        ))
    }

    /// Let a retired record block be reserved again.
    pub fn release_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        block: RecordBlock,
    ) -> Result<(), TxError> {
        let mut st = self.lock();
        let found = self.record_in(&st, block, Phase::Retired)?;
        st.record_retired.remove(&block.offset);
        self.vacate(pool, &mut st, found)
    }

    /// Mark retired `block` allocated again (store and flush, no fence): the retirement is
    /// undone, as if it never happened.
    pub fn restore_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        block: RecordBlock,
    ) -> Result<Pending, TxError> {
        let mut st = self.lock();
        let found = self.record_in(&st, block, Phase::Retired)?;
        let pending = self.store_record_state(pool, &mut st, found, true)?;
        st.record_retired.remove(&block.offset);
        Ok(pending)
    }

    /// The published record block starting at `offset`, if there is one.
    pub fn record_block(&self, offset: u64) -> Option<RecordBlock> {
        let st = self.lock();
        self.committed_block(&st, offset)
            .ok()
            .filter(|b| self.record_slot(&st, b.offset).is_some())
            .map(|b| RecordBlock {
                offset: b.offset,
                size: b.size,
            })
    }

    /// Store and flush the word that marks record block `r` allocated or free on the media,
    /// and mirror it in DRAM's persistent state (not in `taken`: the caller decides whether the
    /// block stays unavailable). Returns the flush, unfenced.
    pub(super) fn store_record_state<B: Backend>(
        &self,
        pool: &Pool<B>,
        st: &mut MutexGuard<'_, State>,
        r: Reservation,
        allocated: bool,
    ) -> Result<Pending, TxError> {
        let written = match r.place {
            Place::Small { chunk, slot, .. } => {
                let ChunkState::Small { persistent, .. } = &mut st.chunks[chunk as usize] else {
                    unreachable!("a record slot's chunk is a record chunk");
                };
                let mut word = persistent[(slot / 64) as usize];
                set_bit(std::slice::from_mut(&mut word), slot % 64, allocated);
                let at = self.chunk_offset(chunk) + 8 * (slot / 64);
                let written = pool.store_u64(at, word)?;
                set_bit(persistent, slot, allocated);
                written
            }
            Place::Run { chunk, chunks } => {
                let head = if allocated {
                    KIND_RUN_HEAD | RUN_RECORD | chunks << 16
                } else {
                    KIND_FREE
                };
                let written = pool.store_u64(self.table_word(chunk), head)?;
                if let ChunkState::RunHead { formatted, .. } = &mut st.chunks[chunk as usize] {
                    *formatted = allocated;
                }
                written
            }
        };
        Ok(pool.flush(written))
    }

    /// Make record block `r` (free on the media) available again in DRAM: a slot goes back to
    /// its chunk, and a chunk left with no block reserved, published or retired goes back to
    /// the free pool (its word set free and persisted); a run's chunks go back to the free pool.
    pub(super) fn vacate<B: Backend>(
        &self,
        pool: &Pool<B>,
        st: &mut MutexGuard<'_, State>,
        r: Reservation,
    ) -> Result<(), TxError> {
        match r.place {
            Place::Small { chunk, slot, class } => {
                let ChunkState::Small { taken, .. } = &mut st.chunks[chunk as usize] else {
                    unreachable!("a record slot's chunk is a record chunk");
                };
                set_bit(taken, slot, false);
                if taken.iter().all(|&w| w == 0) {
                    self.free_record_chunk(pool, st, chunk, class)?;
                } else {
                    st.record_partial[class].insert(chunk);
                }
            }
            Place::Run { chunk, chunks } => {
                for c in chunk..chunk + chunks {
                    st.chunks[c as usize] = ChunkState::Free;
                    st.free_chunks.insert(c);
                }
            }
        }
        Ok(())
    }

    /// Return empty record chunk `chunk` to the free pool: its word set free and persisted.
    /// Its bitmap is all clear on the media: every bit of it was cleared by a retire the caller
    /// has fenced, or never set.
    pub(super) fn free_record_chunk<B: Backend>(
        &self,
        pool: &Pool<B>,
        st: &mut MutexGuard<'_, State>,
        chunk: u64,
        class: usize,
    ) -> Result<(), TxError> {
        let word = pool.store_u64(self.table_word(chunk), KIND_FREE)?;
        pool.persist(word);
        st.record_partial[class].remove(&chunk);
        st.chunks[chunk as usize] = ChunkState::Free;
        st.free_chunks.insert(chunk);
        Ok(())
    }
}
