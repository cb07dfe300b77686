//! The persistent allocator: size classes in chunks with persistent bitmaps, runs of chunks for
//! large objects, and record blocks allocated outside transactions.
//!
//! The allocator's region is cut into chunks. The first chunks hold the *chunk table*, one
//! 8-byte word per chunk saying what the chunk is:
//!
//! | kind (bits 0..8) | meaning | other bits |
//! |---|---|---|
//! | 0 | free | - |
//! | 1 | small objects of one size class, allocated by transactions | bits 8..16: the class |
//! | 2 | head of a run of chunks (one large object) | bit 8: a record run; bits 16..64: run length in chunks |
//! | 3 | small record blocks of one size class | bits 8..16: the class |
//! | 4 | holds the chunk table itself | - |
//!
//! The words of a run's other chunks stay 0: the head's length covers them, so allocating or
//! freeing a run of any length writes one 8-byte word.
//!
//! A small chunk (kind 1 or 3) starts with a bitmap (one bit per object, padded to a cache
//! line), then its objects.
//!
//! # Blocks of transactions
//!
//! Every change of a chunk word or a bitmap word for a transaction is made inside the
//! transaction that allocates or frees, undone through its undo log by *intents* logged with its
//! entries long before its commit writes them (`publish.rs` says why that spares the commit a
//! fence), so a crash at any
//! point leaves each block either allocated by a committed transaction or free: nothing leaks,
//! nothing is handed out twice. A small chunk whose last block is freed returns to the free pool
//! in the same transaction.
//!
//! In DRAM the allocator keeps, under one lock, a mirror of the persistent bitmaps, the blocks
//! reserved by open transactions, and which chunks have room; it is rebuilt from the chunk table
//! and bitmaps at open. An allocation is only *reserved* in DRAM while its transaction runs; the
//! metadata words are written at commit ([`Allocator::publish`]), under the lock, which is held
//! until the commit is durable. So two transactions never log and write the same metadata word
//! at once, and a rolled-back transaction cannot restore a word over another one's change.
//!
//! # Record blocks
//!
//! A structure that allocates one block per operation (the byte-key maps' out-of-line records)
//! cannot afford a transaction each time. Its blocks come from *record chunks* (kind 3) and
//! *record runs* (flag bit 8), which transactions are never handed, and are published and
//! retired by single unfenced bit stores that the structure's own fence makes durable together
//! with the slot that publishes the record (`records.rs`). A crash between the bit and the slot
//! is repaired at open from the structure's *intent* line, which names the blocks its
//! interrupted operation touched: the structure decides whether each is reachable and the
//! allocator sets or clears its bit ([`crate::Heap::resolve_record`], `record_recovery.rs`).
//! Intents are never cleared, so a stale one can name a block long since freed and reused: that
//! is why record blocks live in chunks of their own, and why resolution only ever touches a
//! block that is the start of a record block of the intent's size.
//!
//! A record chunk is formatted (its empty bitmap, then its chunk word, each persisted) when a
//! reservation takes it from the free pool; one left empty by a crash is harmless (it stays a
//! record chunk, used by the next reservation of its class, or given back by
//! [`crate::Heap::trim_record_chunks`]). A record chunk whose last block is released (or
//! cancelled) returns to the free pool at once: its word is set free and persisted.
//!
//! A transaction may free a published record block ([`crate::Tx::free`]: a structure being
//! removed frees its records in the transaction that removes it); the bitmap word is logged like
//! any other. That word may also hold bits of records published or retired by unfenced stores:
//! every metadata word is written under the allocator's lock, and a transaction's commit holds
//! the lock from logging the word until the commit is durable, so the log holds the word as the
//! record stores left it. A rollback at open restores record bits as they were when the
//! transaction logged them, and intent resolution runs after the rollback, so it has the last
//! word on every record bit.
//!
//! # Files
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | the [`Allocator`] and its DRAM state, geometry, lookups of committed blocks, statistics |
//! | `chunk.rs` | chunk-table word kinds, size-class shapes, a chunk's DRAM state, bitmaps |
//! | `reserve.rs` | reserving and cancelling blocks for an open transaction, claiming blocks to free |
//! | `publish.rs` | the metadata writes a commit makes ([`Allocator::publish`]), the intents that undo them, and their effect once durable |
//! | `records.rs` | record blocks: reserve, cancel, publish, retire, release, look up |
//! | `record_recovery.rs` | resolving an intent's record block at open, giving back empty record chunks |
//! | `recovery.rs` | formatting the chunk table, rebuilding DRAM from the pool at open, the heap walk of [`crate::Heap::check_heap`] |

mod chunk;
mod publish;
mod record_recovery;
mod records;
mod recovery;
mod reserve;

pub(crate) use self::publish::{MetaBytes, MetaWrite};
pub use self::records::RecordBlock;

use std::collections::BTreeSet;

use rustc_hash::FxHashSet;
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
    /// Per class: small chunks of transactions with a free slot.
    partial: Vec<BTreeSet<u64>>,
    /// Per class: record chunks with a free slot.
    record_partial: Vec<BTreeSet<u64>>,
    /// Offsets of blocks some open transaction is freeing.
    freeing: FxHashSet<u64>,
    /// Record blocks reserved and neither published nor cancelled yet.
    record_reserved: FxHashSet<u64>,
    /// Record blocks retired (free on the media) and not released yet.
    record_retired: FxHashSet<u64>,
    /// Record blocks published since the heap was opened.
    record_publishes: u64,
    /// Record blocks retired since the heap was opened.
    record_retires: u64,
    /// Scratch of [`Allocator::publish`]: the bitmap words a commit changes.
    publish_bitmap: Vec<publish::BitmapWord>,
}

impl State {
    /// The chunks of `class` with a free slot: record chunks or transactions' chunks.
    fn partial_of(&mut self, record: bool, class: usize) -> &mut BTreeSet<u64> {
        if record {
            &mut self.record_partial[class]
        } else {
            &mut self.partial[class]
        }
    }
}

/// Usage statistics of the heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocStats {
    /// Blocks allocated: by committed transactions, plus published record blocks.
    pub objects: u64,
    /// Bytes in those blocks (rounded up to their size class or whole chunks).
    pub bytes_allocated: u64,
    /// Of [`AllocStats::objects`], the published record blocks.
    pub record_objects: u64,
    /// Bytes in the published record blocks.
    pub record_bytes: u64,
    /// Chunks given to record blocks: record chunks (empty ones too), and the chunks of record
    /// runs reserved, published or retired.
    pub record_chunks: u64,
    /// Record blocks published since the heap was opened ([`crate::Heap::publish_record`]).
    pub record_publishes: u64,
    /// Record blocks retired since the heap was opened ([`crate::Heap::retire_record`]).
    pub record_retires: u64,
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
                ..
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

    /// The size of the committed block (a transaction's or a published record) starting at
    /// `offset`, if there is one.
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
            record_publishes: st.record_publishes,
            record_retires: st.record_retires,
            ..AllocStats::default()
        };
        for ch in &st.chunks {
            let (objects, bytes, record) = match ch {
                ChunkState::Small {
                    class,
                    persistent,
                    record,
                    ..
                } => {
                    s.record_chunks += u64::from(*record);
                    let n: u64 = persistent.iter().map(|w| w.count_ones() as u64).sum();
                    (n, n * self.classes[*class].object, *record)
                }
                ChunkState::RunHead {
                    chunks,
                    formatted,
                    record,
                } => {
                    if *record {
                        s.record_chunks += chunks;
                    }
                    let n = u64::from(*formatted);
                    (n, n * chunks * self.layout.chunk_size, *record)
                }
                _ => continue,
            };
            s.objects += objects;
            s.bytes_allocated += bytes;
            if record {
                s.record_objects += objects;
                s.record_bytes += bytes;
            }
        }
        s.bytes_free = self.free_bytes(&st);
        s
    }
}
