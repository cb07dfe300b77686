//! A commit's allocator metadata: the chunk-table and bitmap words that make a transaction's
//! allocations and frees persistent ([`Allocator::publish`]), written under the allocator's
//! lock, and the DRAM update once the commit is durable ([`Publish::committed`]); and the
//! intents that undo those writes ([`Allocator::alloc_intent`], [`Allocator::free_intents`]),
//! which the transaction logs when it frees, or with the next entries it logs after it
//! allocates (at the latest at the top of the commit), before the commit writes them.
//!
//! Why a commit writes these words without a fence of their own. The rule to keep is the undo
//! log's: the way to undo a store must be persistent before the store can be (DESIGN.md, the
//! persistency model: an intent is a non-temporal store, the word a temporal one, and nt -> t
//! needs a fence). An intent is known when the block is reserved or claimed (the bit of one
//! slot, the word of a run or of the chunk holding a freed block: nothing another transaction
//! changes in between, and a bit is undone by itself, not by restoring its whole word), so it
//! goes to the log early (an allocation's in the same copy as the transaction's next snapshots,
//! which spares it a copy of its own), and the next data write's fence, or the ordering at the
//! top of the commit if no fence came since, orders it before the commit's metadata stores.
//! Those are then flushed with the data and made durable by the commit's fence, before the
//! 8-byte store that commits the log (t -> t: flush, then fence). Only a chunk taken from the free pool still logs
//! its chunk word at commit (whether this commit formats it is known only then), and pays a
//! fence for it.

use std::sync::MutexGuard;

use super::chunk::{set_bit, ChunkState, KIND_FREE, KIND_RUN_HEAD, KIND_SMALL};
use pmem_ordering::{Backend, Pool};

use super::{Allocator, Block, Place, Reservation, State};
use crate::lane::Intent;
use crate::TxError;

/// What a commit writes at a metadata write's offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetaBytes {
    /// One 8-byte word (a chunk-table or bitmap word).
    Word(u64),
    /// This many zero bytes: the empty bitmap of a chunk taken from the free pool.
    Zeros(u64),
}

/// One metadata write made at commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MetaWrite {
    pub offset: u64,
    pub bytes: MetaBytes,
    /// Whether the old bytes must be logged at commit: only the word of a chunk this commit
    /// takes from the free pool. The transaction's intents undo every other write, and the
    /// bitmap of a chunk taken from the free pool means nothing if the chunk is free again.
    pub logged: bool,
}

/// One bitmap word a commit changes: its chunk, its index in the bitmap, and its value as
/// the commit leaves it (starting from the persistent one).
pub(super) struct BitmapWord {
    chunk: u64,
    index: usize,
    old: u64,
    new: u64,
}

/// The bitmap words a commit changes, in the order first touched: a transaction touches a
/// few, so a vector searched from the end beats a map (and allocates nothing when empty).
fn bitmap_word<'w>(
    words: &'w mut Vec<BitmapWord>,
    st: &State,
    chunk: u64,
    slot: u64,
) -> Result<&'w mut BitmapWord, TxError> {
    let index = (slot / 64) as usize;
    if let Some(i) = words
        .iter()
        .rposition(|w| w.chunk == chunk && w.index == index)
    {
        return Ok(&mut words[i]);
    }
    let ChunkState::Small { persistent, .. } = &st.chunks[chunk as usize] else {
        return Err(TxError::CorruptHeap {
            reason: format!("chunk {chunk} should hold small blocks"),
        });
    };
    let old = persistent[index];
    words.push(BitmapWord {
        chunk,
        index,
        old,
        new: old,
    });
    Ok(words.last_mut().expect("just pushed"))
}

/// Set or clear bit `slot` of its word.
fn set_word_bit(word: &mut BitmapWord, slot: u64, on: bool) {
    let mask = 1u64 << (slot % 64);
    if on {
        word.new |= mask;
    } else {
        word.new &= !mask;
    }
}

impl Allocator {
    /// The metadata writes that make `allocs` and `frees` persistent, computed under the lock,
    /// which the returned [`Publish`] keeps until the commit is durable. `writes` (emptied
    /// first) receives the writes to make inside the transaction, in order: the caller keeps
    /// the buffer from one commit to the next.
    pub fn publish(
        &self,
        allocs: &[Reservation],
        frees: &[Block],
        writes: &mut Vec<MetaWrite>,
    ) -> Result<Publish<'_>, TxError> {
        writes.clear();
        if allocs.is_empty() && frees.is_empty() {
            // Nothing to publish: take no lock, so commits without allocation run in parallel.
            return Ok(Publish {
                state: None,
                released: Vec::new(),
            });
        }
        let mut st = self.lock();
        // The state's buffer, taken for this commit and put back below: a commit allocates
        // nothing for its bitmap words once an earlier one has sized it.
        let mut bitmap = std::mem::take(&mut st.publish_bitmap);
        bitmap.clear();
        for r in allocs {
            match r.place {
                Place::Small { chunk, slot, class } => {
                    set_word_bit(bitmap_word(&mut bitmap, &st, chunk, slot)?, slot, true);
                    // A chunk taken from the free pool (the first of its reservations here
                    // formats it): its word says what it now is, and its bitmap starts empty
                    // (old bytes of a free chunk mean nothing).
                    let table_word = self.table_word(chunk);
                    let unformatted = matches!(
                        st.chunks[chunk as usize],
                        ChunkState::Small {
                            formatted: false,
                            ..
                        }
                    );
                    if unformatted && !writes.iter().any(|w| w.offset == table_word) {
                        let shape = self.classes[class];
                        writes.push(MetaWrite {
                            offset: self.chunk_offset(chunk),
                            bytes: MetaBytes::Zeros(shape.header),
                            logged: false,
                        });
                        writes.push(MetaWrite {
                            offset: table_word,
                            bytes: MetaBytes::Word(KIND_SMALL | (class as u64) << 8),
                            logged: true,
                        });
                    }
                }
                Place::Run { chunk, chunks } => {
                    writes.push(MetaWrite {
                        offset: self.table_word(chunk),
                        bytes: MetaBytes::Word(KIND_RUN_HEAD | chunks << 16),
                        logged: false,
                    });
                }
            }
        }
        for b in frees {
            match b.place {
                Place::Small { chunk, slot, .. } => {
                    set_word_bit(bitmap_word(&mut bitmap, &st, chunk, slot)?, slot, false);
                }
                Place::Run { chunk, .. } => writes.push(MetaWrite {
                    offset: self.table_word(chunk),
                    bytes: MetaBytes::Word(KIND_FREE),
                    logged: false,
                }),
            }
        }
        // Changed bitmap words, after the zeroing of a fresh chunk's bitmap above (whose old
        // words, all zero in DRAM, are what these start from).
        for w in &bitmap {
            if w.old != w.new {
                writes.push(MetaWrite {
                    offset: self.chunk_offset(w.chunk) + 8 * w.index as u64,
                    bytes: MetaBytes::Word(w.new),
                    logged: false,
                });
            }
        }
        // A small chunk left with no block at all (none committed, none reserved by any open
        // transaction: `taken` counts both) goes back to the free pool, so space freed in one
        // size class can serve another, or a large block.
        let mut released = Vec::new();
        for (i, b) in frees.iter().enumerate() {
            let Place::Small { chunk, .. } = b.place else {
                continue;
            };
            let first_of_chunk = !frees[..i]
                .iter()
                .any(|e| matches!(e.place, Place::Small { chunk: c, .. } if c == chunk));
            if first_of_chunk && self.empties(&st, chunk, frees, &bitmap) {
                writes.push(MetaWrite {
                    offset: self.table_word(chunk),
                    bytes: MetaBytes::Word(KIND_FREE),
                    logged: false,
                });
                released.push(chunk);
            }
        }
        st.publish_bitmap = bitmap;
        Ok(Publish {
            state: Some(st),
            released,
        })
    }

    /// Whether the formatted small chunk `chunk` holds no block once `frees` are freed and
    /// `bitmap` (this commit's changed bitmap words) is written: no slot taken but the freed
    /// ones, and no bit left set.
    fn empties(&self, st: &State, chunk: u64, frees: &[Block], bitmap: &[BitmapWord]) -> bool {
        let ChunkState::Small {
            taken,
            persistent,
            formatted: true,
            ..
        } = &st.chunks[chunk as usize]
        else {
            return false;
        };
        // The bits of word `i` of the chunk's bitmap that `frees` free.
        let freed_in = |i: usize| {
            frees
                .iter()
                .filter_map(|b| match b.place {
                    Place::Small { chunk: c, slot, .. } if c == chunk && slot / 64 == i as u64 => {
                        Some(1u64 << (slot % 64))
                    }
                    _ => None,
                })
                .fold(0, |all, bit| all | bit)
        };
        let no_other_taken = taken
            .iter()
            .enumerate()
            .all(|(i, &word)| word == 0 || word & !freed_in(i) == 0);
        let no_bit_left = persistent.iter().enumerate().all(|(i, &word)| {
            bitmap
                .iter()
                .find(|w| w.chunk == chunk && w.index == i)
                .map_or(word, |w| w.new)
                == 0
        });
        no_other_taken && no_bit_left
    }
}

impl Allocator {
    /// The intent that undoes what a commit writes for reservation `r`: clear its bit, or make
    /// its run's head word free again.
    pub fn alloc_intent(&self, r: &Reservation) -> (u64, Intent) {
        match r.place {
            Place::Small { chunk, slot, .. } => (
                self.chunk_offset(chunk) + 8 * (slot / 64),
                Intent::ClearBits(1 << (slot % 64)),
            ),
            Place::Run { chunk, .. } => (self.table_word(chunk), Intent::Word(KIND_FREE)),
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

/// The metadata writes of one commit, holding the allocator's lock until
/// [`Publish::committed`] (or until dropped, if the commit failed and will roll back).
pub(crate) struct Publish<'a> {
    /// The allocator's lock, held when there is something to publish.
    state: Option<MutexGuard<'a, State>>,
    /// Small chunks this commit returns to the free pool.
    released: Vec<u64>,
}

impl Publish<'_> {
    /// The commit of `allocs` and `frees` (those given to [`Allocator::publish`]) is durable:
    /// update the DRAM state and release the lock.
    pub fn committed(mut self, allocs: &[Reservation], frees: &[Block]) {
        let Some(st) = self.state.as_deref_mut() else {
            return;
        };
        for r in allocs {
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
