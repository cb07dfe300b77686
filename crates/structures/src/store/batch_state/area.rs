//! The write-batch area: one heap block per store holding the log of the batch being
//! committed, and its recovery. The only file that knows the area's bytes.
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `PMBATCH1` |
//! | 8..16 | format version (1) |
//! | 16..24 | the area's bytes (its block's size) |
//! | 64..72 | the committed batch's sequence number |
//! | 72..80 | bytes of its log |
//! | 80..88 | XXH3-64 of the sequence number, the length and the log |
//! | 88..96 | the commit word: `BATCHCMT` while a batch is committed and not yet applied, else 0 |
//! | 96..104 | the freed count: how many of the log's `Free` blocks the clear has freed (0 when no batch is committed) |
//! | 128.. | the log: entries back to back, each a multiple of 8 bytes |
//!
//! Log entries, each starting with a word whose low byte is its kind:
//!
//! | kind | words after the first | meaning |
//! |---|---|---|
//! | 1 `Bytes` (length in bits 8..40) | offset, then the bytes padded to 8 | the pool's bytes at `offset` once the batch is applied |
//! | 2 `Publish` | offset, size | a record block allocated once applied |
//! | 3 `Retire` | offset, size | a record block free once applied |
//! | 4 `Free` | offset | a block (a transaction's or a record) the batch leaves unreachable, freed by the clear |
//!
//! `Free` entries came with the maps of leaves; a build that knows only kinds 1 to 3 refuses
//! a store whose committed log holds one (as a damaged area) rather than apply part of it.
//!
//! # The commit point
//!
//! [`Area::commit`] writes the log, then the line of words 64..96 (the commit word last),
//! flushes both and fences once: the batch is committed when that fence returns. A crash
//! before it leaves the commit line as the last batch's clear left it (commit word 0), or any
//! mix of old and new lines: then the checksum, over the new length and the log as they are,
//! does not match what the commit line says (but with probability 2^-64), and the batch is
//! not there. Once the batch is applied and its apply fenced, [`Area::clear`] stores 0 into
//! the commit word and fences: a batch committed is never applied twice over later writes.
//!
//! A log with `Free` entries is cleared by [`Area::clear_freeing`] instead: undo-log
//! transactions of up to [`FREES_PER_TX`] frees each, every one advancing the freed count,
//! the last one storing 0 into the commit word and the count. A block is free (and may be
//! handed out to another structure) only once the transaction that frees it commits, and
//! that transaction also records that it is done: recovery, finding the batch still
//! committed, frees the blocks from the count on, never one a transaction already freed.
//!
//! # Recovery
//!
//! [`Area::committed`] reads a committed log at open. Its `Bytes` entries are copied in first,
//! before any structure opens (they make every slot and leaf the batch writes whole and as the
//! batch left it); its `Publish` and `Retire` entries are resolved once the maps of records
//! have resolved their own writes in doubt, before anything allocates; then the area is
//! cleared, its `Free` blocks freed with it. Every step can run again after a crash of
//! recovery itself.

use pmem_ordering::{Backend, PPtr, Pool};
use pmem_undo_log::{Heap, RecordBlock};

use crate::store::catalog::Catalog;
use crate::store::error::Error;

/// The area's magic.
const MAGIC: u64 = u64::from_le_bytes(*b"PMBATCH1");
/// The area format this code reads and writes.
const VERSION: u64 = 1;
/// The commit word of a committed batch.
const COMMITTED: u64 = u64::from_le_bytes(*b"BATCHCMT");
/// Where the commit line starts.
const COMMIT_LINE: u64 = 64;
/// Where the commit word is.
const COMMIT_WORD: u64 = COMMIT_LINE + 24;
/// Where the freed count is.
const FREED_WORD: u64 = COMMIT_LINE + 32;
/// Blocks the clear frees per transaction: each free logs a word or two of allocator
/// metadata, far below a lane's log.
pub(crate) const FREES_PER_TX: usize = 64;
/// Where the log starts.
pub(crate) const LOG_AT: u64 = 128;

const BYTES: u64 = 1;
const PUBLISH: u64 = 2;
const RETIRE: u64 = 3;
const FREE: u64 = 4;

/// The smallest area a store makes.
pub(crate) const MIN_AREA_BYTES: u64 = 64 << 10;
/// The largest area a store makes.
pub(crate) const MAX_AREA_BYTES: u64 = 4 << 20;

/// The area's size for a pool of `pool_bytes`: a 32nd of it, from [`MIN_AREA_BYTES`] to
/// [`MAX_AREA_BYTES`], in whole 4 KiB pages.
pub(crate) fn area_bytes_for(pool_bytes: u64) -> u64 {
    (pool_bytes / 32).clamp(MIN_AREA_BYTES, MAX_AREA_BYTES) & !4095
}

/// A batch's log, built in DRAM before its commit.
#[derive(Debug, Default)]
pub(crate) struct Log {
    words: Vec<u64>,
}

impl Log {
    /// `bytes` at `offset` once the batch is applied.
    pub(crate) fn bytes(&mut self, offset: u64, bytes: &[u8]) {
        self.words.push(BYTES | (bytes.len() as u64) << 8);
        self.words.push(offset);
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.words.push(u64::from_le_bytes(word));
        }
    }

    /// A record block allocated once the batch is applied.
    pub(crate) fn publish(&mut self, block: RecordBlock) {
        self.words.extend([PUBLISH, block.offset, block.size]);
    }

    /// A record block free once the batch is applied.
    pub(crate) fn retire(&mut self, block: RecordBlock) {
        self.words.extend([RETIRE, block.offset, block.size]);
    }

    /// A block freed once the batch is applied, with the log's clear.
    pub(crate) fn free(&mut self, offset: u64) {
        self.words.extend([FREE, offset]);
    }

    /// The log's bytes.
    pub(crate) fn len(&self) -> u64 {
        8 * self.words.len() as u64
    }

    fn as_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.words)
    }
}

/// A committed log's entries, as recovery reads them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Committed {
    /// `(offset, bytes)` to copy in.
    pub bytes: Vec<(u64, Vec<u8>)>,
    /// Blocks to resolve: allocated (`true`) or free.
    pub blocks: Vec<(RecordBlock, bool)>,
    /// Blocks the clear frees.
    pub frees: Vec<u64>,
    /// How many of them the clear has freed.
    pub freed: u64,
}

/// A store's write-batch area.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Area {
    offset: u64,
    bytes: u64,
}

fn corrupt(reason: String) -> Error {
    Error::CorruptCatalog {
        reason: format!("the write-batch area: {reason}"),
    }
}

/// The checksum of a commit line's sequence number and length and the log.
fn checksum(sequence: u64, len: u64, log: &[u8]) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    hasher.update(&sequence.to_le_bytes());
    hasher.update(&len.to_le_bytes());
    hasher.update(log);
    hasher.digest()
}

impl Area {
    /// Make the store's area (a block of [`area_bytes_for`] the pool's size) and record it in
    /// the catalog, in one transaction; `catalog` learns it once it commits.
    pub(crate) fn create<B: Backend>(heap: &Heap<B>, catalog: &mut Catalog) -> Result<Area, Error> {
        let bytes = area_bytes_for(heap.pool().size());
        let offset = heap.transaction(|tx| {
            let offset = tx.alloc(bytes)?.offset();
            let mut head = [0u8; LOG_AT as usize];
            head[0..8].copy_from_slice(&MAGIC.to_le_bytes());
            head[8..16].copy_from_slice(&VERSION.to_le_bytes());
            head[16..24].copy_from_slice(&bytes.to_le_bytes());
            tx.write(offset, &head)?;
            catalog.set_batch_area_in(tx, offset)?;
            Ok::<_, Error>(offset)
        })?;
        catalog.batch_area_made(offset);
        Ok(Area { offset, bytes })
    }

    /// The area at `offset` (from the catalog), its head checked.
    pub(crate) fn open<B: Backend>(heap: &Heap<B>, offset: u64) -> Result<Area, Error> {
        let pool = heap.pool();
        let block = heap
            .block_size(offset)
            .ok_or_else(|| corrupt(format!("{offset:#x} is not an allocated block")))?;
        let magic = pool.load_u64(offset)?;
        let version = pool.load_u64(offset + 8)?;
        let bytes = pool.load_u64(offset + 16)?;
        if magic != MAGIC {
            return Err(corrupt(format!(
                "{offset:#x} starts with {} instead of the area's magic",
                pmem_ordering::MagicText::from_word(magic)
            )));
        }
        if version != VERSION {
            return Err(corrupt(format!(
                "format version {version}, but this library reads version {VERSION}"
            )));
        }
        if bytes <= LOG_AT || bytes > block {
            return Err(corrupt(format!(
                "{bytes} bytes in a block of {block} at {offset:#x}"
            )));
        }
        Ok(Area { offset, bytes })
    }

    /// The most bytes a log can take.
    pub(crate) fn capacity(&self) -> u64 {
        self.bytes - LOG_AT
    }

    /// Write `log` and commit it as batch `sequence`: durable, with everything this thread
    /// flushed before, when this returns (one fence). The caller checked that it fits.
    pub(crate) fn commit<B: Backend>(
        &self,
        pool: &Pool<B>,
        log: &Log,
        sequence: u64,
    ) -> Result<(), Error> {
        debug_assert!(log.len() <= self.capacity());
        let bytes = log.as_bytes();
        // Streamed: no line of the log is read before the commit word is stored after it, and
        // the fence below orders and persists it.
        let streamed = pool.nt_write(self.offset + LOG_AT, bytes)?;
        let mut line = [0u8; 24];
        line[0..8].copy_from_slice(&sequence.to_le_bytes());
        line[8..16].copy_from_slice(&log.len().to_le_bytes());
        line[16..24].copy_from_slice(&checksum(sequence, log.len(), bytes).to_le_bytes());
        let head = pool.write(self.offset + COMMIT_LINE, &line)?;
        // The commit word after the rest of its line: stores to one line persist in order.
        let head = head.merge(pool.store_u64(self.offset + COMMIT_WORD, COMMITTED)?);
        let flushed = pool.flush(head).and(streamed);
        pool.fence(flushed);
        Ok(())
    }

    /// Mark the committed batch applied (one store, one fence).
    pub(crate) fn clear<B: Backend>(&self, pool: &Pool<B>) -> Result<(), Error> {
        pool.persist(pool.store_u64(self.offset + COMMIT_WORD, 0)?);
        Ok(())
    }

    /// Mark the committed batch applied, freeing `frees` (from the `done`th on) with it: in
    /// transactions of [`FREES_PER_TX`] frees, each advancing the freed count, the last one
    /// also storing 0 into the commit word and the count (see the module docs). With no
    /// frees left, [`Area::clear`].
    pub(crate) fn clear_freeing<B: Backend>(
        &self,
        heap: &Heap<B>,
        frees: &[u64],
        done: usize,
    ) -> Result<(), Error> {
        if done >= frees.len() {
            return self.clear(heap.pool());
        }
        let mut at = done;
        while at < frees.len() {
            let end = (at + FREES_PER_TX).min(frees.len());
            let last = end == frees.len();
            heap.transaction(|tx| {
                for &block in &frees[at..end] {
                    tx.free(PPtr::<u8>::new(block))?;
                }
                if last {
                    tx.write(self.offset + COMMIT_WORD, &[0u8; 16])?;
                } else {
                    tx.write(self.offset + FREED_WORD, &(end as u64).to_le_bytes())?;
                }
                Ok::<(), Error>(())
            })?;
            at = end;
        }
        Ok(())
    }

    /// The batch committed and not yet applied, if any: its entries, checked.
    pub(crate) fn committed<B: Backend>(&self, pool: &Pool<B>) -> Result<Option<Committed>, Error> {
        if pool.load_u64(self.offset + COMMIT_WORD)? != COMMITTED {
            return Ok(None);
        }
        let sequence = pool.load_u64(self.offset + COMMIT_LINE)?;
        let len = pool.load_u64(self.offset + COMMIT_LINE + 8)?;
        let sum = pool.load_u64(self.offset + COMMIT_LINE + 16)?;
        if len > self.capacity() || len % 8 != 0 {
            // A torn commit line of a batch that never committed.
            return Ok(None);
        }
        let mut bytes = vec![0u8; len as usize];
        pool.read_bytes(self.offset + LOG_AT, &mut bytes)?;
        if checksum(sequence, len, &bytes) != sum {
            return Ok(None);
        }
        let mut committed = parse(pool, &bytes)?;
        committed.freed = pool.load_u64(self.offset + FREED_WORD)?;
        if committed.freed > committed.frees.len() as u64 {
            return Err(corrupt(format!(
                "its freed count {} is past the log's {} blocks to free",
                committed.freed,
                committed.frees.len()
            )));
        }
        Ok(Some(committed))
    }

    /// Copy `committed`'s bytes in, flushed, and fence: phase one of recovery, before any
    /// structure opens.
    pub(crate) fn copy_in<B: Backend>(pool: &Pool<B>, committed: &Committed) -> Result<(), Error> {
        for (offset, bytes) in &committed.bytes {
            let _flushed = pool.flush(pool.write(*offset, bytes)?);
        }
        pool.sfence();
        Ok(())
    }

    /// Resolve `committed`'s record blocks: phase two of recovery, once the maps of records
    /// have resolved their own writes in doubt and before anything allocates.
    pub(crate) fn resolve_blocks<B: Backend>(
        heap: &Heap<B>,
        committed: &Committed,
    ) -> Result<(), Error> {
        for &(block, allocated) in &committed.blocks {
            heap.resolve_record(block.offset, block.size, allocated)?;
        }
        Ok(())
    }
}

/// The entries of a log whose checksum matched: each must be whole and name pool bytes.
fn parse<B: Backend>(pool: &Pool<B>, log: &[u8]) -> Result<Committed, Error> {
    let words: Vec<u64> = log
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .collect();
    let mut committed = Committed::default();
    let mut at = 0;
    let short = |at: usize| corrupt(format!("the log's entry at word {at} is cut short"));
    while at < words.len() {
        let head = words[at];
        let arg = |i: usize| words.get(at + i).copied().ok_or_else(|| short(at));
        match head & 0xff {
            BYTES => {
                let len = (head >> 8) as usize;
                let offset = arg(1)?;
                let padded = len.div_ceil(8);
                if at + 2 + padded > words.len() {
                    return Err(short(at));
                }
                pool.check_range(offset, len as u64)?;
                let start = 8 * (at + 2);
                committed
                    .bytes
                    .push((offset, log[start..start + len].to_vec()));
                at += 2 + padded;
            }
            kind @ (PUBLISH | RETIRE) => {
                let block = RecordBlock {
                    offset: arg(1)?,
                    size: arg(2)?,
                };
                committed.blocks.push((block, kind == PUBLISH));
                at += 3;
            }
            FREE => {
                committed.frees.push(arg(1)?);
                at += 2;
            }
            other => {
                return Err(corrupt(format!(
                    "the log's entry at word {at} has kind {other}"
                )))
            }
        }
    }
    Ok(committed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_area_is_a_32nd_of_the_pool_in_whole_pages_within_its_bounds() {
        assert_eq!(area_bytes_for(2 << 20), MIN_AREA_BYTES);
        assert_eq!(area_bytes_for(64 << 20), 2 << 20);
        assert_eq!(area_bytes_for(1 << 40), MAX_AREA_BYTES);
        assert_eq!(area_bytes_for((64 << 20) + 12345) % 4096, 0);
    }
}
