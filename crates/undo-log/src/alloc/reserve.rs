//! The DRAM side of an open transaction: reserve a block (a slot of a small chunk, or a run
//! of chunks), cancel a reservation, and claim a committed block for freeing. Nothing here
//! writes the pool: a reservation becomes persistent only when its transaction commits
//! (`publish.rs`).

use super::chunk::{first_clear, set_bit, ChunkState};
use super::{Allocator, Block, Place, Reservation, State};
use crate::TxError;

impl Allocator {
    /// Reserve a block of at least `size` bytes for an open transaction.
    pub fn reserve(&self, size: u64) -> Result<Reservation, TxError> {
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
        match self.class_for(size) {
            Some(class) => {
                let shape = self.classes[class];
                let chunk = match st.partial[class].first().copied() {
                    Some(c) => c,
                    None => {
                        let c = st.free_chunks.pop_first().ok_or_else(|| full(&st))?;
                        let words = shape.objects.div_ceil(64) as usize;
                        st.chunks[c as usize] = ChunkState::Small {
                            class,
                            persistent: vec![0; words],
                            taken: vec![0; words],
                            formatted: false,
                            record: false,
                        };
                        st.partial[class].insert(c);
                        c
                    }
                };
                let ChunkState::Small { taken, .. } = &mut st.chunks[chunk as usize] else {
                    unreachable!("a partial chunk is small");
                };
                let slot =
                    first_clear(taken, shape.objects).expect("a partial chunk has a free slot");
                set_bit(taken, slot, true);
                if first_clear(taken, shape.objects).is_none() {
                    st.partial[class].remove(&chunk);
                }
                Ok(Reservation {
                    offset: self.chunk_offset(chunk) + shape.header + slot * shape.object,
                    size: shape.object,
                    place: Place::Small { chunk, slot, class },
                })
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
                    record: false,
                };
                Ok(Reservation {
                    offset: self.chunk_offset(start),
                    size: n * self.layout.chunk_size,
                    place: Place::Run {
                        chunk: start,
                        chunks: n,
                    },
                })
            }
        }
    }

    /// The first of `n` adjacent free chunks.
    pub(super) fn find_run(&self, st: &State, n: u64) -> Option<u64> {
        let mut run_start = None;
        let mut prev = None;
        for &c in &st.free_chunks {
            match prev {
                Some(p) if p + 1 == c => {}
                _ => run_start = Some(c),
            }
            prev = Some(c);
            let s = run_start.expect("set above");
            if c + 1 - s >= n {
                return Some(s);
            }
        }
        None
    }

    /// Give back a reservation of a transaction that rolled back (or freed what it allocated).
    pub fn cancel(&self, r: Reservation) {
        let mut st = self.lock();
        match r.place {
            Place::Small { chunk, slot, class } => {
                let ChunkState::Small {
                    taken, formatted, ..
                } = &mut st.chunks[chunk as usize]
                else {
                    unreachable!("a reservation's chunk stays small while reserved");
                };
                set_bit(taken, slot, false);
                let empty_unformatted = !*formatted && taken.iter().all(|&w| w == 0);
                if empty_unformatted {
                    st.chunks[chunk as usize] = ChunkState::Free;
                    st.partial[class].remove(&chunk);
                    st.free_chunks.insert(chunk);
                } else {
                    st.partial[class].insert(chunk);
                }
            }
            Place::Run { chunk, chunks } => {
                for c in chunk..chunk + chunks {
                    st.chunks[c as usize] = ChunkState::Free;
                    st.free_chunks.insert(c);
                }
            }
        }
    }

    /// The committed block starting at `offset`, claimed for freeing by one transaction.
    pub fn live_block(&self, offset: u64) -> Result<Block, TxError> {
        let mut st = self.lock();
        let block = self
            .committed_block(&st, offset)
            .map_err(|reason| TxError::InvalidFree { offset, reason })?;
        if !st.freeing.insert(offset) {
            return Err(TxError::InvalidFree {
                offset,
                reason: "another open transaction is already freeing it",
            });
        }
        Ok(block)
    }

    /// Give up the claim on a block a rolled-back transaction meant to free.
    pub fn unclaim(&self, block: &Block) {
        self.lock().freeing.remove(&block.offset);
    }
}
