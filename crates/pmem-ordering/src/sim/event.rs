//! What the simulated backend records: events, and stores split into failure-atomic chunks.

use crate::isa::CACHE_LINE;

/// A store of at most 8 bytes inside one naturally aligned 8-byte word: the unit of failure
/// atomicity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Offset of the aligned word in the pool.
    pub word: u64,
    /// The word's bytes; only those whose bit is set in `mask` are written.
    pub data: [u8; 8],
    /// Bit `i` set: byte `word + i` is written.
    pub mask: u8,
}

impl Chunk {
    /// Split a store of `bytes` at `offset` into word chunks.
    pub fn split(offset: u64, bytes: &[u8]) -> impl Iterator<Item = Chunk> + '_ {
        let mut at = 0usize;
        std::iter::from_fn(move || {
            if at >= bytes.len() {
                return None;
            }
            let addr = offset + at as u64;
            let word = addr & !7;
            let first = (addr - word) as usize;
            let n = (8 - first).min(bytes.len() - at);
            let mut data = [0u8; 8];
            data[first..first + n].copy_from_slice(&bytes[at..at + n]);
            let mask = (((1u16 << n) - 1) << first) as u8;
            at += n;
            Some(Chunk { word, data, mask })
        })
    }

    /// The cache line the chunk falls in (as a line index).
    pub fn line(&self) -> u64 {
        self.word / CACHE_LINE as u64
    }

    pub(crate) fn apply(&self, image: &mut [u8]) {
        for i in 0..8 {
            if self.mask & (1 << i) != 0 {
                image[self.word as usize + i] = self.data[i];
            }
        }
    }
}

/// One recorded event of a simulated pool, in the order it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A temporal store (one failure-atomic chunk of it).
    Store {
        /// Simulator thread id.
        thread: u32,
        /// The bytes.
        chunk: Chunk,
    },
    /// A non-temporal store (one failure-atomic chunk of it).
    NtStore {
        /// Simulator thread id.
        thread: u32,
        /// The bytes.
        chunk: Chunk,
    },
    /// `clwb` or `clflushopt` of a line: durable at this thread's next fence.
    Flush {
        /// Simulator thread id.
        thread: u32,
        /// Line index (offset / 64).
        line: u64,
    },
    /// `clflush` of a line: ordered by itself, durable at once.
    FlushOrdered {
        /// Simulator thread id.
        thread: u32,
        /// Line index (offset / 64).
        line: u64,
    },
    /// `sfence` / `mfence`.
    Fence {
        /// Simulator thread id.
        thread: u32,
    },
    /// A logical operation of the workload returned.
    OperationEnd {
        /// Simulator thread id.
        thread: u32,
    },
}
