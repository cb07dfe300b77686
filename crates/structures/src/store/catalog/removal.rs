//! Removing a structure: free every block it owns, crash-safely, in transactions of bounded
//! size.
//!
//! A structure of a few blocks goes in one transaction (its blocks, its root block and its
//! entry). A larger one would overflow a transaction's undo log, so its removal is recorded
//! first: one transaction writes the list of its blocks and marks the entry `Removing` with the
//! list and a cursor. Then each transaction frees the next [`BATCH`] listed blocks and advances
//! the cursor; the last frees the root and the list and clears the entry. A crash anywhere
//! leaves either the structure listed and whole, or a `Removing` entry whose list and cursor
//! say exactly which blocks are still owned, and the next open finishes the job.
//!
//! # Where the list goes
//!
//! * **The structure's own largest block**, when the list of the others fits it (that block is
//!   left out of the list and freed last, as the list): removing then allocates nothing. Its
//!   old bytes are logged, so the list must also fit the transaction's log. Format: `[count,
//!   block...]`.
//! * Else **a chain of small fresh blocks** ([`CHAIN_BYTES`] each, whose bytes need no
//!   logging), so that free space cut into small pieces takes it: each link is
//!   `[CHAINED | count, next link, block...]`; the entry names the current link and the cursor
//!   counts within it; a link is freed, and the entry moved to the next, once its blocks are.
//!   The count's top bit ([`CHAINED`]) tells the formats apart (a build without chains refuses
//!   such a count as past the pool).
//! * Where neither fits (a full pool), the store empties the structure first by its own
//!   removes (`Draining`, in `store/registry.rs`) and then removes what is left, which fits.

use pmem_ordering::{Backend, PPtr};
use pmem_undo_log::{Heap, TxError};

use super::corrupt;
use super::layout::{entry, EntryImage, State, ENTRY_BYTES};
use crate::store::error::Error;

/// Blocks freed per transaction: each free logs a word of allocator metadata, far below a
/// lane's log.
const BATCH: u64 = 64;
/// Bytes of a link of a chained list.
const CHAIN_BYTES: u64 = 4096;
/// Blocks one link lists: the words after its count and next-link words.
const PER_LINK: usize = (CHAIN_BYTES / 8) as usize - 2;
/// The count word's flag of a link of a chained list.
const CHAINED: u64 = 1 << 63;

/// Remove the structure of entry `entry_offset` (`image`), which owns `blocks` besides its root.
/// A full pool with no room for the list is [`Error::PoolFull`], with nothing changed.
pub(super) fn run<B: Backend>(
    heap: &Heap<B>,
    entry_offset: u64,
    image: &EntryImage,
    blocks: &[u64],
) -> Result<(), Error> {
    if blocks.len() as u64 <= BATCH {
        return heap.transaction(|tx| {
            for &block in blocks {
                tx.free(PPtr::<u8>::new(block))?;
            }
            tx.free(PPtr::<u8>::new(image.root))?;
            tx.write(entry_offset, &[0u8; ENTRY_BYTES as usize])?;
            Ok::<(), Error>(())
        });
    }
    let own = own_list_block(heap, blocks)
        .map(|holder| record_in_own_block(heap, entry_offset, blocks, holder));
    let list = match own {
        Some(Ok(list)) => list,
        // The list did not fit the transaction's undo log (it logs the holder's old bytes):
        // fresh blocks then, whose bytes need no logging.
        Some(Err(Error::Heap(TxError::LogFull { .. } | TxError::SnapshotTooLarge { .. })))
        | None => record_in_chain(heap, entry_offset, blocks)?,
        Some(Err(e)) => return Err(e),
    };
    free_from(heap, entry_offset, image.root, list, 0)
}

/// The structure's largest block, if the list of its other blocks fits it.
fn own_list_block<B: Backend>(heap: &Heap<B>, blocks: &[u64]) -> Option<u64> {
    let (holder, size) = blocks
        .iter()
        .filter_map(|&b| heap.block_size(b).map(|size| (b, size)))
        .max_by_key(|&(_, size)| size)?;
    // The count word and one word per other block.
    (size >= 8 * blocks.len() as u64).then_some(holder)
}

/// The words that mark a removal under way in entry `entry_offset`, with its list at `list`.
fn mark_removing<B: Backend>(
    tx: &pmem_undo_log::Tx<'_, B>,
    entry_offset: u64,
    list: u64,
) -> Result<(), TxError> {
    tx.write_value(entry_offset + entry::REMOVAL_LIST, &list)?;
    tx.write_value(entry_offset + entry::REMOVAL_CURSOR, &0u64)?;
    tx.write_value(entry_offset + entry::STATE, &State::Removing.code())
}

/// One transaction: write the list of the blocks but `holder` into `holder` (one of them), and
/// mark the entry `Removing`. Returns the list's offset.
fn record_in_own_block<B: Backend>(
    heap: &Heap<B>,
    entry_offset: u64,
    blocks: &[u64],
    holder: u64,
) -> Result<u64, Error> {
    heap.transaction(|tx| {
        let mut words = Vec::with_capacity(blocks.len());
        words.push(blocks.len() as u64 - 1);
        words.extend(blocks.iter().copied().filter(|&b| b != holder));
        tx.write(holder, bytemuck::cast_slice(&words))?;
        mark_removing(tx, entry_offset, holder)?;
        Ok::<u64, Error>(holder)
    })
}

/// One transaction: write the list of `blocks` into a chain of fresh links and mark the entry
/// `Removing`. Returns the first link's offset.
fn record_in_chain<B: Backend>(
    heap: &Heap<B>,
    entry_offset: u64,
    blocks: &[u64],
) -> Result<u64, Error> {
    heap.transaction(|tx| {
        let chunks: Vec<&[u64]> = blocks.chunks(PER_LINK).collect();
        let links = chunks
            .iter()
            .map(|_| tx.alloc(CHAIN_BYTES).map(|p| p.offset()))
            .collect::<Result<Vec<u64>, TxError>>()?;
        for (i, chunk) in chunks.iter().enumerate() {
            let next = links.get(i + 1).copied().unwrap_or(0);
            let mut words = Vec::with_capacity(chunk.len() + 2);
            words.push(CHAINED | chunk.len() as u64);
            words.push(next);
            words.extend_from_slice(chunk);
            tx.write(links[i], bytemuck::cast_slice(&words))?;
        }
        mark_removing(tx, entry_offset, links[0])?;
        Ok::<u64, Error>(links[0])
    })
}

/// Finish the removal a crash interrupted (entry `entry_offset` is `Removing`).
pub(super) fn finish<B: Backend>(
    heap: &Heap<B>,
    entry_offset: u64,
    image: &EntryImage,
) -> Result<(), Error> {
    free_from(
        heap,
        entry_offset,
        image.root,
        image.removal_list,
        image.removal_cursor,
    )
}

fn free_from<B: Backend>(
    heap: &Heap<B>,
    entry_offset: u64,
    root: u64,
    mut list: u64,
    mut cursor: u64,
) -> Result<(), Error> {
    let pool = heap.pool();
    loop {
        let head = pool.load_u64(list)?;
        let (count, next, first) = match head & CHAINED {
            0 => (head, 0, list + 8),
            _ => (head & !CHAINED, pool.load_u64(list + 8)?, list + 16),
        };
        if cursor > count || pool.check_range(first, 8 * count).is_err() {
            return Err(corrupt(format!(
                "a removal list at {list:#x} of {count} blocks with {cursor} freed"
            )));
        }
        while cursor < count {
            let end = (cursor + BATCH).min(count);
            heap.transaction(|tx| {
                for i in cursor..end {
                    let block: u64 = tx.read(first + 8 * i)?;
                    tx.free(PPtr::<u8>::new(block))?;
                }
                tx.write_value(entry_offset + entry::REMOVAL_CURSOR, &end)
            })?;
            cursor = end;
        }
        if next == 0 {
            break;
        }
        // This link's blocks are free: the link goes, and the entry names the next one.
        heap.transaction(|tx| {
            tx.free(PPtr::<u8>::new(list))?;
            tx.write_value(entry_offset + entry::REMOVAL_LIST, &next)?;
            tx.write_value(entry_offset + entry::REMOVAL_CURSOR, &0u64)
        })?;
        (list, cursor) = (next, 0);
    }
    heap.transaction(|tx| {
        tx.free(PPtr::<u8>::new(root))?;
        tx.free(PPtr::<u8>::new(list))?;
        tx.write(entry_offset, &[0u8; ENTRY_BYTES as usize])
    })?;
    Ok(())
}
