//! The allocator on the pool: format an empty chunk table, rebuild the DRAM state from the
//! chunk table and bitmaps at open (checking them as it goes), and walk the heap to check the
//! pool against DRAM.

use std::collections::BTreeSet;

use rustc_hash::FxHashSet;
use std::sync::Mutex;

use pmem_ordering::{Backend, Pool};

use super::chunk::{
    bit, ChunkState, KIND_FREE, KIND_RECORD, KIND_RUN_HEAD, KIND_SMALL, KIND_TABLE, RUN_RECORD,
};
use super::{Allocator, State};
use crate::layout::Layout;
use crate::TxError;

impl Allocator {
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
        pool.persist(w);
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
            record_partial: vec![BTreeSet::new(); classes.len()],
            freeing: FxHashSet::default(),
            record_reserved: FxHashSet::default(),
            record_retired: FxHashSet::default(),
            record_publishes: 0,
            record_retires: 0,
            publish_bitmap: Vec::new(),
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
                KIND_SMALL | KIND_RECORD => {
                    let record = kind == KIND_RECORD;
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
                        state.partial_of(record, class).insert(c);
                    }
                    bits.shrink_to_fit();
                    state.chunks.push(ChunkState::Small {
                        class,
                        taken: bits.clone(),
                        persistent: bits,
                        formatted: true,
                        record,
                    });
                    c += 1;
                }
                KIND_RUN_HEAD => {
                    let n = w >> 16;
                    if n == 0 || c + n > chunks || w & 0xff00 & !RUN_RECORD != 0 {
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
                        record: w & RUN_RECORD != 0,
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

    /// Walk the persistent heap and check it against itself and against the DRAM state: every
    /// chunk word valid, every run whole, no bitmap bit past a chunk's last object, and DRAM
    /// agreeing with the pool. Returns every committed block (published record blocks included) as
    /// `(offset, size)`, ascending.
    pub fn check<B: Backend>(&self, pool: &Pool<B>) -> Result<Vec<(u64, u64)>, TxError> {
        // Rebuilding from the pool checks the persistent structure...
        let fresh = Allocator::open(pool, self.layout)?;
        let rebuilt = fresh.lock();
        let st = self.lock();
        let mut blocks = Vec::new();
        for (c, (now, disk)) in st.chunks.iter().zip(rebuilt.chunks.iter()).enumerate() {
            // ...and each chunk's committed state must match what DRAM believes. Chunks taken by
            // reservations not yet published, and record runs retired but not yet released, are
            // free on the pool.
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
                        record: ra,
                        ..
                    },
                    ChunkState::Small {
                        class: b,
                        persistent: pb,
                        record: rb,
                        ..
                    },
                ) => a == b && pa == pb && ra == rb,
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
