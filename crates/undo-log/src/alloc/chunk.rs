//! What a chunk is, on the pool and in DRAM: the chunk-table word kinds, the shape of a
//! small chunk of one size class (bitmap, then objects), the DRAM state of a chunk, and bitmap
//! arithmetic.

/// Chunk-table word kind (bits 0..8): the chunk is free (the whole word is 0).
pub(super) const KIND_FREE: u64 = 0;
/// Kind: small objects of one size class (bits 8..16: the class).
pub(super) const KIND_SMALL: u64 = 1;
/// Kind: head of a run of chunks holding one large block (bits 16..64: the run length; bit 8:
/// [`RUN_RECORD`]).
pub(super) const KIND_RUN_HEAD: u64 = 2;
/// Kind: small record blocks of one size class (bits 8..16: the class), allocated outside
/// transactions (`records.rs`); the bitmap has the format of a [`KIND_SMALL`] chunk's.
pub(super) const KIND_RECORD: u64 = 3;
/// Kind: the chunk holds the chunk table itself.
pub(super) const KIND_TABLE: u64 = 4;
/// Flag of a run head's word: the run is one record block, allocated outside transactions.
pub(super) const RUN_RECORD: u64 = 1 << 8;

/// The shape of a small chunk of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct SmallShape {
    /// Bytes of one object (the class size).
    pub object: u64,
    /// Objects in one chunk.
    pub objects: u64,
    /// Bytes of bitmap at the chunk's start (a multiple of 64).
    pub header: u64,
}

/// The shape of a small chunk of `chunk` bytes holding objects of `object` bytes.
pub(super) fn small_shape(chunk: u64, object: u64) -> SmallShape {
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

/// What DRAM knows of one chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum ChunkState {
    Free,
    Table,
    Small {
        class: usize,
        /// Bits set in the persistent bitmap (committed allocations).
        persistent: Vec<u64>,
        /// Persistent bits plus reservations of open transactions.
        taken: Vec<u64>,
        /// Whether the chunk word saying "small, this class" is persistent yet (a record
        /// chunk is formatted when it is taken, so always).
        formatted: bool,
        /// A record chunk: its blocks are reserved, published and retired outside
        /// transactions, and never handed to one.
        record: bool,
    },
    RunHead {
        chunks: u64,
        /// Whether the head word is persistent: a transaction's run once it committed, a
        /// record run while published (not while reserved or retired).
        formatted: bool,
        /// A record run (see `Small::record`).
        record: bool,
    },
    /// A chunk inside a run, after its head.
    RunCont {
        head: u64,
    },
}

/// Whether bit `i` is set.
pub(super) fn bit(words: &[u64], i: u64) -> bool {
    words[(i / 64) as usize] & (1 << (i % 64)) != 0
}

/// The first clear bit below `limit`, a word at a time.
pub(super) fn first_clear(words: &[u64], limit: u64) -> Option<u64> {
    words
        .iter()
        .enumerate()
        .find(|(_, &w)| w != u64::MAX)
        .map(|(i, &w)| i as u64 * 64 + w.trailing_ones() as u64)
        .filter(|&slot| slot < limit)
}

/// Set or clear bit `i`.
pub(super) fn set_bit(words: &mut [u64], i: u64, on: bool) {
    let w = &mut words[(i / 64) as usize];
    if on {
        *w |= 1 << (i % 64);
    } else {
        *w &= !(1 << (i % 64));
    }
}
