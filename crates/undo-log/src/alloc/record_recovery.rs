//! Record blocks after a crash: resolving the blocks a structure's intent line names (set or
//! clear each one's allocation as the structure finds it reachable or not), and giving back the
//! record chunks a crash left empty.
//!
//! An intent is never cleared, so a stale one may name a block that was freed long ago and
//! whose space now belongs to something else. Resolution therefore touches only a block that is,
//! right now, the start of a record block of the intent's shape: a slot of a record chunk of the
//! size's class, or the head of a record run of the size's length (or, to allocate a run, free
//! chunks of that length). Anything else (a transaction's chunk, another class, the middle of a
//! block) is left alone.

use pmem_ordering::{Backend, Pool};

use super::chunk::{bit, set_bit, ChunkState, KIND_FREE};
use super::{Allocator, Place, Reservation, State};
use crate::TxError;

impl Allocator {
    /// Set the allocation of the record block at `offset`, of `size` bytes (the block's size,
    /// or the size it was reserved for), to `allocated`, persisted (flush and fence) if that
    /// changes anything. Returns whether `offset` names such a block: `Ok(false)` means nothing
    /// was done.
    pub fn resolve_record<B: Backend>(
        &self,
        pool: &Pool<B>,
        offset: u64,
        size: u64,
        allocated: bool,
    ) -> Result<bool, TxError> {
        if size == 0 {
            return Ok(false);
        }
        let mut st = self.lock();
        let busy = |reason| Err(TxError::InvalidRecord { offset, reason });
        if st.record_reserved.contains(&offset)
            || st.record_retired.contains(&offset)
            || st.freeing.contains(&offset)
        {
            return busy(
                "this session is using the block: resolve intents at open, before anything \
                 allocates",
            );
        }
        let wanted_class = self.class_for(size);
        let found = match self.record_slot(&st, offset) {
            Some(r) => Some(r),
            // Free chunks where a published record run must be (its head word never reached
            // the media): the run is made again.
            None if allocated && wanted_class.is_none() => self.free_run_at(&st, offset, size),
            None => None,
        };
        let Some(r) = found else {
            return Ok(false);
        };
        let shape_agrees = match r.place {
            Place::Small { class, .. } => wanted_class == Some(class),
            Place::Run { chunks, .. } => {
                wanted_class.is_none() && size.div_ceil(self.layout.chunk_size) == chunks
            }
        };
        if !shape_agrees {
            return Ok(false);
        }
        match r.place {
            Place::Small { chunk, slot, class } => {
                let ChunkState::Small { persistent, .. } = &st.chunks[chunk as usize] else {
                    unreachable!("a record slot's chunk is a record chunk");
                };
                if bit(persistent, slot) == allocated {
                    return Ok(true);
                }
                let pending = self.store_record_state(pool, &mut st, r, allocated)?;
                pool.fence(pending);
                let ChunkState::Small { taken, .. } = &mut st.chunks[chunk as usize] else {
                    unreachable!("a record slot's chunk is a record chunk");
                };
                set_bit(taken, slot, allocated);
                let full = taken.iter().map(|w| w.count_ones() as u64).sum::<u64>()
                    == self.classes[class].objects;
                if full {
                    st.record_partial[class].remove(&chunk);
                } else {
                    st.record_partial[class].insert(chunk);
                }
            }
            Place::Run { chunk, chunks } => {
                let published = matches!(
                    st.chunks[chunk as usize],
                    ChunkState::RunHead {
                        formatted: true,
                        ..
                    }
                );
                if published == allocated {
                    return Ok(true);
                }
                let pending = self.store_record_state(pool, &mut st, r, allocated)?;
                pool.fence(pending);
                for c in chunk..chunk + chunks {
                    if allocated {
                        st.free_chunks.remove(&c);
                        st.chunks[c as usize] = ChunkState::RunCont { head: chunk };
                    } else {
                        st.chunks[c as usize] = ChunkState::Free;
                        st.free_chunks.insert(c);
                    }
                }
                if allocated {
                    st.chunks[chunk as usize] = ChunkState::RunHead {
                        chunks,
                        formatted: true,
                        record: true,
                    };
                }
            }
        }
        Ok(true)
    }

    /// A record run of `size` bytes at `offset` over chunks that are all free, if they are.
    fn free_run_at(&self, st: &State, offset: u64, size: u64) -> Option<Reservation> {
        let rel = offset.checked_sub(self.layout.alloc_offset)?;
        if !rel.is_multiple_of(self.layout.chunk_size) {
            return None;
        }
        let chunk = rel / self.layout.chunk_size;
        let chunks = size.div_ceil(self.layout.chunk_size);
        let end = chunk.checked_add(chunks)?;
        if end > st.chunks.len() as u64 || !(chunk..end).all(|c| st.free_chunks.contains(&c)) {
            return None;
        }
        Some(Reservation {
            offset,
            size: chunks * self.layout.chunk_size,
            place: Place::Run { chunk, chunks },
        })
    }

    /// Return every record chunk with no block reserved, published or retired to the free pool
    /// (their words set free, then one fence); returns how many. Only after every intent is
    /// resolved: resolution may need to allocate a block in a chunk a crash left empty.
    pub fn trim_record_chunks<B: Backend>(&self, pool: &Pool<B>) -> Result<u64, TxError> {
        let mut st = self.lock();
        let empty: Vec<(u64, usize)> = st
            .chunks
            .iter()
            .enumerate()
            .filter_map(|(c, ch)| match ch {
                ChunkState::Small {
                    class,
                    taken,
                    record: true,
                    ..
                } if taken.iter().all(|&w| w == 0) => Some((c as u64, *class)),
                _ => None,
            })
            .collect();
        let mut pending = None;
        for &(chunk, class) in &empty {
            // Each word is one failure-atomic store, independent of the others: one fence
            // for them all. The chunks' bitmaps are all clear on the media already.
            let word = pool.store_u64(self.table_word(chunk), KIND_FREE)?;
            let flushed = pool.flush(word);
            pending = Some(match pending {
                None => flushed,
                Some(p) => flushed.and(p),
            });
            st.record_partial[class].remove(&chunk);
            st.chunks[chunk as usize] = ChunkState::Free;
            st.free_chunks.insert(chunk);
        }
        if let Some(p) = pending {
            pool.fence(p);
        }
        Ok(empty.len() as u64)
    }
}
