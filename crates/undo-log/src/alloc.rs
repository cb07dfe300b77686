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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::{Mutex, MutexGuard};

use pmem_ordering::{Backend, Pool};

use crate::layout::Layout;
use crate::TxError;

const KIND_FREE: u64 = 0;
const KIND_SMALL: u64 = 1;
const KIND_RUN_HEAD: u64 = 2;
const KIND_TABLE: u64 = 4;

/// Smallest size class.
pub const MIN_CLASS: u64 = 64;

/// The shape of a small chunk of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SmallShape {
    object: u64,
    objects: u64,
    /// Bytes of bitmap at the chunk's start (a multiple of 64).
    header: u64,
}

fn small_shape(chunk: u64, object: u64) -> SmallShape {
    // The bitmap takes room from the objects: shrink until both fit.
    let mut objects = chunk / object;
    loop {
        let header = objects.div_ceil(8).div_ceil(64) * 64;
        let fit = (chunk - header) / object;
        if fit >= objects {
            return SmallShape {
                object,
                objects,
                header,
            };
        }
        objects = fit;
    }
}

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

/// One metadata write made at commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MetaWrite {
    pub offset: u64,
    pub bytes: Vec<u8>,
    /// Whether the old bytes must be logged (false only for the bitmap of a chunk taken from
    /// the free pool, whose old bytes mean nothing).
    pub logged: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum ChunkState {
    Free,
    Table,
    Small {
        class: usize,
        /// Bits set in the persistent bitmap (committed allocations).
        persistent: Vec<u64>,
        /// Persistent bits plus reservations of open transactions.
        taken: Vec<u64>,
        /// Whether the chunk word saying "small, this class" is persistent yet.
        formatted: bool,
    },
    RunHead {
        chunks: u64,
        formatted: bool,
    },
    /// A chunk inside a run, after its head.
    RunCont {
        head: u64,
    },
}

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

fn bit(words: &[u64], i: u64) -> bool {
    words[(i / 64) as usize] & (1 << (i % 64)) != 0
}

/// The first clear bit below `limit`, a word at a time.
fn first_clear(words: &[u64], limit: u64) -> Option<u64> {
    words
        .iter()
        .enumerate()
        .find(|(_, &w)| w != u64::MAX)
        .map(|(i, &w)| i as u64 * 64 + w.trailing_ones() as u64)
        .filter(|&slot| slot < limit)
}

fn set_bit(words: &mut [u64], i: u64, on: bool) {
    let w = &mut words[(i / 64) as usize];
    if on {
        *w |= 1 << (i % 64);
    } else {
        *w &= !(1 << (i % 64));
    }
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

    /// Write an empty chunk table (persisted) for a new heap.
    pub fn format<B: Backend>(pool: &Pool<B>, layout: &Layout) -> Result<(), TxError> {
        let chunks = Allocator::chunk_count(layout);
        let table = Allocator::table_chunks(layout);
        if table >= chunks {
            return Err(TxError::InvalidConfig {
                reason: format!(
                    "{chunks} chunks leave no room after the {table}-chunk chunk table"
                ),
            });
        }
        let mut words = vec![0u8; (chunks * 8) as usize];
        for c in 0..table {
            words[(c * 8) as usize..(c * 8 + 8) as usize]
                .copy_from_slice(&KIND_TABLE.to_le_bytes());
        }
        let w = pool.write(layout.alloc_offset, &words)?;
        let _ = pool.persist(w);
        Ok(())
    }

    /// Rebuild the DRAM state from the chunk table and bitmaps, checking them as it goes.
    pub fn open<B: Backend>(pool: &Pool<B>, layout: Layout) -> Result<Allocator, TxError> {
        let chunks = Allocator::chunk_count(&layout);
        let table = Allocator::table_chunks(&layout);
        let classes = Allocator::shapes(&layout);
        let mut words = vec![0u8; (chunks * 8) as usize];
        pool.read_bytes(layout.alloc_offset, &mut words)?;
        let word = |c: u64| {
            u64::from_le_bytes(
                words[(c * 8) as usize..(c * 8 + 8) as usize]
                    .try_into()
                    .expect("8 bytes"),
            )
        };
        let corrupt = |reason: String| TxError::CorruptHeap { reason };
        let mut state = State {
            chunks: Vec::with_capacity(chunks as usize),
            free_chunks: BTreeSet::new(),
            partial: vec![BTreeSet::new(); classes.len()],
            freeing: HashSet::new(),
        };
        let mut c = 0;
        while c < chunks {
            let w = word(c);
            let kind = w & 0xff;
            if c < table {
                if w != KIND_TABLE {
                    return Err(corrupt(format!(
                        "chunk {c} belongs to the chunk table, but its word is {w:#x}"
                    )));
                }
                state.chunks.push(ChunkState::Table);
                c += 1;
                continue;
            }
            match kind {
                KIND_FREE if w == 0 => {
                    state.chunks.push(ChunkState::Free);
                    state.free_chunks.insert(c);
                    c += 1;
                }
                KIND_SMALL => {
                    let class = ((w >> 8) & 0xff) as usize;
                    let Some(shape) = classes.get(class) else {
                        return Err(corrupt(format!(
                            "chunk {c} has size class {class}, which does not exist"
                        )));
                    };
                    if w >> 16 != 0 {
                        return Err(corrupt(format!("chunk {c}'s word {w:#x} has stray bits")));
                    }
                    let nwords = shape.objects.div_ceil(64) as usize;
                    let mut bitmap = vec![0u8; nwords * 8];
                    let base = layout.alloc_offset + c * layout.chunk_size;
                    pool.read_bytes(base, &mut bitmap)?;
                    let mut bits: Vec<u64> = bitmap
                        .chunks_exact(8)
                        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                        .collect();
                    let tail = shape.objects % 64;
                    if tail != 0 && bits[nwords - 1] >> tail != 0 {
                        return Err(corrupt(format!(
                            "chunk {c}'s bitmap marks objects past its last"
                        )));
                    }
                    let used = bits.iter().map(|w| w.count_ones() as u64).sum::<u64>();
                    if used < shape.objects {
                        state.partial[class].insert(c);
                    }
                    bits.shrink_to_fit();
                    state.chunks.push(ChunkState::Small {
                        class,
                        taken: bits.clone(),
                        persistent: bits,
                        formatted: true,
                    });
                    c += 1;
                }
                KIND_RUN_HEAD => {
                    let n = w >> 16;
                    if n == 0 || c + n > chunks || (w >> 8) & 0xff != 0 {
                        return Err(corrupt(format!(
                            "chunk {c} heads a run of {n} chunks, which does not fit"
                        )));
                    }
                    for k in 1..n {
                        if word(c + k) != 0 {
                            return Err(corrupt(format!(
                                "chunk {} lies inside the run at chunk {c}, but its word is {:#x}",
                                c + k,
                                word(c + k)
                            )));
                        }
                    }
                    state.chunks.push(ChunkState::RunHead {
                        chunks: n,
                        formatted: true,
                    });
                    state
                        .chunks
                        .extend((1..n).map(|_| ChunkState::RunCont { head: c }));
                    c += n;
                }
                _ => return Err(corrupt(format!("chunk {c} has an invalid word {w:#x}"))),
            }
        }
        Ok(Allocator {
            layout,
            classes,
            state: Mutex::new(state),
        })
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

    fn find_run(&self, st: &State, n: u64) -> Option<u64> {
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
                        logged: true,
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
                    logged: true,
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
                        logged: true,
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
                    logged: true,
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

    /// Walk the persistent heap and check it against itself and against the DRAM state: every
    /// chunk word valid, every run whole, no bitmap bit past a chunk's last object, and DRAM
    /// agreeing with the pool. Returns every committed block as `(offset, size)`, ascending.
    pub fn check<B: Backend>(&self, pool: &Pool<B>) -> Result<Vec<(u64, u64)>, TxError> {
        // Rebuilding from the pool checks the persistent structure...
        let fresh = Allocator::open(pool, self.layout)?;
        let rebuilt = fresh.lock();
        let st = self.lock();
        let mut blocks = Vec::new();
        for (c, (now, disk)) in st.chunks.iter().zip(rebuilt.chunks.iter()).enumerate() {
            // ...and each chunk's committed state must match what DRAM believes. Chunks taken by
            // reservations not yet published are still free on the pool.
            let unpublished = |chunk: u64| {
                matches!(
                    st.chunks[chunk as usize],
                    ChunkState::RunHead {
                        formatted: false,
                        ..
                    }
                )
            };
            let agree = match (now, disk) {
                (
                    ChunkState::Small {
                        class: a,
                        persistent: pa,
                        formatted: true,
                        ..
                    },
                    ChunkState::Small {
                        class: b,
                        persistent: pb,
                        ..
                    },
                ) => a == b && pa == pb,
                (
                    ChunkState::Small {
                        formatted: false, ..
                    },
                    ChunkState::Free,
                ) => true,
                (
                    ChunkState::RunHead {
                        formatted: false, ..
                    },
                    ChunkState::Free,
                ) => true,
                (ChunkState::RunCont { head }, ChunkState::Free) => unpublished(*head),
                (a, b) => a == b,
            };
            if !agree {
                return Err(TxError::CorruptHeap {
                    reason: format!("chunk {c}: DRAM holds {now:?} but the pool holds {disk:?}"),
                });
            }
            match disk {
                ChunkState::Small {
                    class, persistent, ..
                } => {
                    let shape = self.classes[*class];
                    for slot in 0..shape.objects {
                        if bit(persistent, slot) {
                            blocks.push((
                                self.chunk_offset(c as u64) + shape.header + slot * shape.object,
                                shape.object,
                            ));
                        }
                    }
                }
                ChunkState::RunHead { chunks, .. } => {
                    blocks.push((self.chunk_offset(c as u64), chunks * self.layout.chunk_size));
                }
                _ => {}
            }
        }
        Ok(blocks)
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
                    if let ChunkState::Small {
                        persistent, taken, ..
                    } = &mut st.chunks[chunk as usize]
                    {
                        set_bit(persistent, slot, false);
                        set_bit(taken, slot, false);
                    }
                    st.partial[class].insert(chunk);
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
            if let ChunkState::Small { class, .. } = st.chunks[chunk as usize] {
                st.partial[class].remove(&chunk);
            }
            st.chunks[chunk as usize] = ChunkState::Free;
            st.free_chunks.insert(chunk);
        }
    }
}
