//! A commit's allocator metadata: the chunk-table and bitmap words that make a transaction's
//! allocations and frees persistent ([`Allocator::publish`]), written under the allocator's
//! lock, and the DRAM update once the commit is durable ([`Publish::committed`]); and the
//! intents that undo those writes ([`Allocator::alloc_intents`], [`Allocator::free_intents`]),
//! which the transaction logs when it allocates or frees, long before the commit writes them.
//!
//! Why a commit writes these words without a fence of their own. The rule to keep is the undo
//! log's: the way to undo a store must be persistent before the store can be (DESIGN.md, the
//! persistency model: an intent is a non-temporal store, the word a temporal one, and nt -> t
//! needs a fence). An intent is known when the block is reserved or claimed (the bit of one
//! slot, the word of a run or of the chunk holding a freed block: nothing another transaction
//! changes in between, and a bit is undone by itself, not by restoring its whole word), so it
//! goes to the log then, and the next data write's fence, or the ordering at the top of the
//! commit if no fence came since, orders it before the commit's metadata stores. Those are then
//! flushed with the data and made durable by the commit's fence, before the 8-byte store that
//! commits the log (t -> t: flush, then fence). Only a chunk taken from the free pool still logs
//! its chunk word at commit (whether this commit formats it is known only then), and pays a
//! fence for it.

use std::collections::BTreeMap;
use std::sync::MutexGuard;

use super::chunk::{set_bit, ChunkState, KIND_FREE, KIND_RUN_HEAD, KIND_SMALL};
use pmem_ordering::{Backend, Pool};

use super::{Allocator, Block, Place, Reservation, State};
use crate::lane::Intent;
use crate::TxError;

/// One metadata write made at commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MetaWrite {
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// Whether the old bytes must be logged at commit: only the word of a chunk this commit
    /// takes from the free pool. The transaction's intents undo every other write, and the
    /// bitmap of a chunk taken from the free pool means nothing if the chunk is free again.
    pub logged: bool,
}

impl Allocator {
    /// The metadata writes that make `allocs` and `frees` persistent, computed under the lock,
    /// which the returned [`Publish`] keeps until the commit is durable.
    pub fn publish(&self, allocs: &[Reservation], frees: &[Block]) -> Result<Publish<'_>, TxError> {
        let mut writes = Vec::new();
        if allocs.is_empty() && frees.is_empty() {
            // Nothing to publish: take no lock, so commits without allocation run in parallel.
            return Ok(Publish {
                state: None,
                writes,
                released: Vec::new(),
                allocs: Vec::new(),
            });
        }
        let st = self.lock();
        // New bitmap words per chunk, starting from the persistent ones.
        let mut bitmaps: BTreeMap<u64, (Vec<u64>, Vec<u64>)> = BTreeMap::new();
        for r in allocs {
            match r.place {
                Place::Small { chunk, slot, class } => {
                    set_bit(new_bitmap(&mut bitmaps, &st, chunk)?, slot, true);
                    if let ChunkState::Small {
                        formatted: false, ..
                    } = st.chunks[chunk as usize]
                    {
                        // A chunk taken from the free pool: its word says what it now is, and its
                        // bitmap starts empty (old bytes of a free chunk mean nothing).
                        let shape = self.classes[class];
                        writes.push(MetaWrite {
                            offset: self.chunk_offset(chunk),
                            bytes: vec![0; shape.header as usize],
                            logged: false,
                        });
                        writes.push(MetaWrite {
                            offset: self.table_word(chunk),
                            bytes: (KIND_SMALL | (class as u64) << 8).to_le_bytes().to_vec(),
                            logged: true,
                        });
                    }
                }
                Place::Run { chunk, chunks } => {
                    writes.push(MetaWrite {
                        offset: self.table_word(chunk),
                        bytes: (KIND_RUN_HEAD | chunks << 16).to_le_bytes().to_vec(),
                        logged: false,
                    });
                }
            }
        }
        for b in frees {
            match b.place {
                Place::Small { chunk, slot, .. } => {
                    set_bit(new_bitmap(&mut bitmaps, &st, chunk)?, slot, false);
                }
                Place::Run { chunk, .. } => writes.push(MetaWrite {
                    offset: self.table_word(chunk),
                    bytes: KIND_FREE.to_le_bytes().to_vec(),
                    logged: false,
                }),
            }
        }
        // Changed bitmap words (a fresh chunk's old words are the zeros written above).
        for (&chunk, (old, new)) in &bitmaps {
            let fresh = matches!(
                st.chunks[chunk as usize],
                ChunkState::Small {
                    formatted: false,
                    ..
                }
            );
            for (i, (&o, &n)) in old.iter().zip(new.iter()).enumerate() {
                if o != n || (fresh && n != 0) {
                    writes.push(MetaWrite {
                        offset: self.chunk_offset(chunk) + 8 * i as u64,
                        bytes: n.to_le_bytes().to_vec(),
                        logged: false,
                    });
                }
            }
        }
        // A small chunk left with no block at all (none committed, none reserved by any open
        // transaction: `taken` counts both) goes back to the free pool, so space freed in one
        // size class can serve another, or a large block.
        let mut released = Vec::new();
        for (&chunk, (_, new)) in &bitmaps {
            let ChunkState::Small {
                taken,
                formatted: true,
                ..
            } = &st.chunks[chunk as usize]
            else {
                continue;
            };
            let freed_here: Vec<u64> = frees
                .iter()
                .filter_map(|b| match b.place {
                    Place::Small { chunk: c, slot, .. } if c == chunk => Some(slot),
                    _ => None,
                })
                .collect();
            let mut remaining = taken.clone();
            for &slot in &freed_here {
                set_bit(&mut remaining, slot, false);
            }
            if !freed_here.is_empty()
                && remaining.iter().all(|&w| w == 0)
                && new.iter().all(|&w| w == 0)
            {
                writes.push(MetaWrite {
                    offset: self.table_word(chunk),
                    bytes: KIND_FREE.to_le_bytes().to_vec(),
                    logged: false,
                });
                released.push(chunk);
            }
        }
        Ok(Publish {
            state: Some(st),
            writes,
            released,
            allocs: allocs.to_vec(),
        })
    }
}

impl Allocator {
    /// The intents that undo what a commit writes for reservation `r`: clear its bit, or make
    /// its run's head word free again.
    pub fn alloc_intents(&self, r: &Reservation) -> Vec<(u64, Intent)> {
        match r.place {
            Place::Small { chunk, slot, .. } => vec![(
                self.chunk_offset(chunk) + 8 * (slot / 64),
                Intent::ClearBits(1 << (slot % 64)),
            )],
            Place::Run { chunk, .. } => vec![(self.table_word(chunk), Intent::Word(KIND_FREE))],
        }
    }

    /// The intents that undo what a commit writes for freeing block `b`: set its bit again and
    /// restore its chunk's word (the commit may return an emptied chunk to the free pool), or
    /// restore its run's head word. The block is claimed, so no other transaction changes the
    /// words restored whole until this one ends.
    pub fn free_intents<B: Backend>(
        &self,
        pool: &Pool<B>,
        b: &Block,
    ) -> Result<Vec<(u64, Intent)>, TxError> {
        Ok(match b.place {
            // The chunk's word first: logged once per transaction, it then leaves the bits of
            // consecutive frees in one chunk next to each other, to share one entry.
            Place::Small { chunk, slot, .. } => vec![
                (
                    self.table_word(chunk),
                    Intent::Word(pool.load_u64(self.table_word(chunk))?),
                ),
                (
                    self.chunk_offset(chunk) + 8 * (slot / 64),
                    Intent::SetBits(1 << (slot % 64)),
                ),
            ],
            Place::Run { chunk, .. } => vec![(
                self.table_word(chunk),
                Intent::Word(pool.load_u64(self.table_word(chunk))?),
            )],
        })
    }
}

/// The bitmap of small chunk `chunk` as this commit will leave it, starting from its
/// persistent bits the first time the chunk is touched.
fn new_bitmap<'m>(
    bitmaps: &'m mut BTreeMap<u64, (Vec<u64>, Vec<u64>)>,
    st: &State,
    chunk: u64,
) -> Result<&'m mut Vec<u64>, TxError> {
    let entry = match bitmaps.entry(chunk) {
        std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::btree_map::Entry::Vacant(e) => {
            let ChunkState::Small { persistent, .. } = &st.chunks[chunk as usize] else {
                return Err(TxError::CorruptHeap {
                    reason: format!("chunk {chunk} should hold small blocks"),
                });
            };
            e.insert((persistent.clone(), persistent.clone()))
        }
    };
    Ok(&mut entry.1)
}

/// The metadata writes of one commit, holding the allocator's lock until
/// [`Publish::committed`] (or until dropped, if the commit failed and will roll back).
pub(crate) struct Publish<'a> {
    /// The allocator's lock, held when there is something to publish.
    state: Option<MutexGuard<'a, State>>,
    writes: Vec<MetaWrite>,
    /// Small chunks this commit returns to the free pool.
    released: Vec<u64>,
    allocs: Vec<Reservation>,
}

impl Publish<'_> {
    /// The writes to make inside the transaction, in order.
    pub fn writes(&self) -> &[MetaWrite] {
        &self.writes
    }

    /// The commit is durable: update the DRAM state and release the lock.
    pub fn committed(mut self, frees: &[Block]) {
        let Some(st) = self.state.as_deref_mut() else {
            return;
        };
        for r in &self.allocs {
            match r.place {
                Place::Small { chunk, slot, .. } => {
                    if let ChunkState::Small {
                        persistent,
                        formatted,
                        ..
                    } = &mut st.chunks[chunk as usize]
                    {
                        set_bit(persistent, slot, true);
                        *formatted = true;
                    }
                }
                Place::Run { chunk, .. } => {
                    if let ChunkState::RunHead { formatted, .. } = &mut st.chunks[chunk as usize] {
                        *formatted = true;
                    }
                }
            }
        }
        for b in frees {
            st.freeing.remove(&b.offset);
            match b.place {
                Place::Small { chunk, slot, class } => {
                    // A record block freed by a transaction (its structure removed) goes back to
                    // its record chunk.
                    let mut record = false;
                    if let ChunkState::Small {
                        persistent,
                        taken,
                        record: r,
                        ..
                    } = &mut st.chunks[chunk as usize]
                    {
                        set_bit(persistent, slot, false);
                        set_bit(taken, slot, false);
                        record = *r;
                    }
                    st.partial_of(record, class).insert(chunk);
                }
                Place::Run { chunk, chunks } => {
                    for c in chunk..chunk + chunks {
                        st.chunks[c as usize] = ChunkState::Free;
                        st.free_chunks.insert(c);
                    }
                }
            }
        }
        for &chunk in &self.released {
            if let ChunkState::Small { class, record, .. } = st.chunks[chunk as usize] {
                st.partial_of(record, class).remove(&chunk);
            }
            st.chunks[chunk as usize] = ChunkState::Free;
            st.free_chunks.insert(chunk);
        }
    }
}
