//! The persistent allocator: size classes in chunks with persistent bitmaps, runs of chunks for
//! large objects.
//!
//! The allocator's region is cut into chunks. The first chunks hold the *chunk table*, one
//! 8-byte word per chunk saying what the chunk is:
//!
//! | kind (bits 0..8) | meaning | other bits |
//! |---|---|---|
//! | 0 | free | - |
//! | 1 | small objects of one size class | bits 8..16: the class |
//! | 2 | head of a run of chunks (one large object) | bits 16..64: run length in chunks |
//! | 4 | holds the chunk table itself | - |
//!
//! The words of a run's other chunks stay 0: the head's length covers them, so allocating or
//! freeing a run of any length logs one 8-byte word.
//!
//! A small chunk starts with a bitmap (one bit per object, padded to a cache line), then its
//! objects. Every change of a chunk word or a bitmap word is made inside the transaction that
//! allocates or frees, through the undo log, so a crash at any point leaves each block either
//! allocated by a committed transaction or free: nothing leaks, nothing is handed out twice.
//!
//! A small chunk whose last block is freed returns to the free pool in the same transaction.
//!
//! In DRAM the allocator keeps, under one lock, a mirror of the persistent bitmaps, the blocks
//! reserved by open transactions, and which chunks have room; it is rebuilt from the chunk table
//! and bitmaps at open. An allocation is only *reserved* in DRAM while its transaction runs; the
//! metadata words are written at commit ([`Allocator::publish`]), under the lock, which is held
//! until the commit is durable. So two transactions never log and write the same metadata word
//! at once, and a rolled-back transaction cannot restore a word over another one's change.
//!
//! # Files
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the [`Allocator`] and its DRAM state, geometry, lookups of committed blocks, statistics |
//! | `chunk.rs` | chunk-table word kinds, size-class shapes, a chunk's DRAM state, bitmaps |
//! | `reserve.rs` | reserving and cancelling blocks for an open transaction, claiming blocks to free |
//! | `publish.rs` | the metadata writes a commit makes ([`Allocator::publish`]) and their effect once durable |
//! | `recovery.rs` | formatting the chunk table, rebuilding DRAM from the pool at open, the heap walk of [`crate::Heap::check_heap`] |

mod chunk;
mod publish;
mod recovery;
mod reserve;

use std::collections::{BTreeSet, HashSet};
use std::sync::{Mutex, MutexGuard};

use crate::layout::Layout;

use self::chunk::{bit, small_shape, ChunkState, SmallShape};

/// Smallest size class.
pub const MIN_CLASS: u64 = 64;

/// Where a block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    Small { chunk: u64, slot: u64, class: usize },
    Run { chunk: u64, chunks: u64 },
}

/// An allocation reserved by an open transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reservation {
    pub offset: u64,
    pub size: u64,
    pub place: Place,
}

/// A live block about to be freed.
pub(crate) type Block = Reservation;

/// The allocator's DRAM state, behind its one lock.
struct State {
    chunks: Vec<ChunkState>,
    free_chunks: BTreeSet<u64>,
    /// Per class: small chunks with a free slot.
    partial: Vec<BTreeSet<u64>>,
    /// Offsets of blocks some open transaction is freeing.
    freeing: HashSet<u64>,
}

/// Usage statistics of the heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Blocks allocated by committed transactions.
    pub objects: u64,
    /// Bytes in those blocks (rounded up to their size class or whole chunks).
    pub bytes_allocated: u64,
    /// Chunks not in use at all.
    pub free_chunks: u64,
    /// Chunks in the allocator's region (the chunk table's included).
    pub total_chunks: u64,
    /// Bytes of the region that are neither allocated nor metadata.
    pub bytes_free: u64,
}

/// The allocator of one heap.
pub(crate) struct Allocator {
    layout: Layout,
    classes: Vec<SmallShape>,
    state: Mutex<State>,
}

impl Allocator {
    fn shapes(layout: &Layout) -> Vec<SmallShape> {
        // Powers of two from 64 B while a chunk still holds at least four objects.
        let mut classes = Vec::new();
        let mut size = MIN_CLASS;
        while size * 4 <= layout.chunk_size {
            classes.push(small_shape(layout.chunk_size, size));
            size *= 2;
        }
        classes
    }

    fn chunk_count(layout: &Layout) -> u64 {
        layout.alloc_size / layout.chunk_size
    }

    fn table_chunks(layout: &Layout) -> u64 {
        (Allocator::chunk_count(layout) * 8).div_ceil(layout.chunk_size)
    }

    fn chunk_offset(&self, chunk: u64) -> u64 {
        self.layout.alloc_offset + chunk * self.layout.chunk_size
    }

    fn table_word(&self, chunk: u64) -> u64 {
        self.layout.alloc_offset + 8 * chunk
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only changed in whole steps under the lock; a panic elsewhere in the
        // holder's thread leaves it consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn class_for(&self, size: u64) -> Option<usize> {
        self.classes.iter().position(|s| s.object >= size)
    }

    fn free_bytes(&self, st: &State) -> u64 {
        let mut free = st.free_chunks.len() as u64 * self.layout.chunk_size;
        for ch in &st.chunks {
            if let ChunkState::Small { class, taken, .. } = ch {
                let shape = self.classes[*class];
                let used: u64 = taken.iter().map(|w| w.count_ones() as u64).sum();
                free += (shape.objects - used) * shape.object;
            }
        }
        free
    }

    /// The committed block starting at `offset`, or why there is none.
    fn committed_block(&self, st: &State, offset: u64) -> Result<Block, &'static str> {
        let region = self.layout.alloc_offset..self.layout.alloc_offset + self.layout.alloc_size;
        if !region.contains(&offset) {
            return Err("it is outside the allocator's region");
        }
        let rel = offset - self.layout.alloc_offset;
        let chunk = rel / self.layout.chunk_size;
        let within = rel % self.layout.chunk_size;
        match &st.chunks[chunk as usize] {
            ChunkState::Small {
                class, persistent, ..
            } => {
                let shape = self.classes[*class];
                if within < shape.header || !(within - shape.header).is_multiple_of(shape.object) {
                    return Err("it is not the start of a block");
                }
                let slot = (within - shape.header) / shape.object;
                if slot >= shape.objects || !bit(persistent, slot) {
                    return Err("the block is not allocated");
                }
                Ok(Reservation {
                    offset,
                    size: shape.object,
                    place: Place::Small {
                        chunk,
                        slot,
                        class: *class,
                    },
                })
            }
            ChunkState::RunHead {
                chunks,
                formatted: true,
            } if within == 0 => Ok(Reservation {
                offset,
                size: chunks * self.layout.chunk_size,
                place: Place::Run {
                    chunk,
                    chunks: *chunks,
                },
            }),
            _ => Err("the block is not allocated"),
        }
    }

    /// The size of the committed block starting at `offset`, if there is one.
    pub fn block_size(&self, offset: u64) -> Option<u64> {
        self.committed_block(&self.lock(), offset)
            .ok()
            .map(|b| b.size)
    }

    /// Usage statistics.
    pub fn stats(&self) -> AllocStats {
        let st = self.lock();
        let mut s = AllocStats {
            free_chunks: st.free_chunks.len() as u64,
            total_chunks: st.chunks.len() as u64,
            ..AllocStats::default()
        };
        for ch in &st.chunks {
            match ch {
                ChunkState::Small {
                    class, persistent, ..
                } => {
                    let n: u64 = persistent.iter().map(|w| w.count_ones() as u64).sum();
                    s.objects += n;
                    s.bytes_allocated += n * self.classes[*class].object;
                }
                ChunkState::RunHead {
                    chunks,
                    formatted: true,
                } => {
                    s.objects += 1;
                    s.bytes_allocated += chunks * self.layout.chunk_size;
                }
                _ => {}
            }
        }
        s.bytes_free = self.free_bytes(&st);
        s
    }
}
