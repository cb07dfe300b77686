//! Removing a structure: free every block it owns, crash-safely, in transactions of bounded
//! size.
//!
//! A structure of a few blocks goes in one transaction (its blocks, its root block and its
//! entry). A larger one would overflow a transaction's undo log, so its removal is recorded
//! first: one transaction writes the list of its blocks and marks the entry `Removing` with a
//! cursor. The list goes to the structure's own largest block when it fits there (that block
//! is left out of the list and freed last, as the list): removing then allocates nothing, so a
//! full pool can drop a structure; otherwise to a fresh block. Then each transaction frees the next `BATCH` listed blocks and
//! advances the cursor; the last frees the root and the list and clears the entry. A crash
//! anywhere leaves either the structure listed and whole, or a `Removing` entry whose cursor
//! says exactly which blocks are still owned, and the next open finishes the job.

use std::ops::Deref;

use pmem_ordering::{Backend, PPtr, Pool};
use pmem_undo_log::{Heap, TxError};

use super::corrupt;
use super::layout::{entry, EntryImage, State, ENTRY_BYTES};
use crate::store::error::Error;

/// Blocks freed per transaction: each free logs a word of allocator metadata, far below a
/// lane's log.
const BATCH: u64 = 64;

/// Remove the structure of entry `entry_offset` (`image`), which owns `blocks` besides its root.
pub(super) fn run<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
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
        .map(|holder| record_removal(heap, entry_offset, blocks, ListBlock::Own(holder)));
    let list = match own {
        Some(Ok(list)) => list,
        // The list did not fit the transaction's undo log (it logs the holder's old bytes):
        // a fresh block then, whose bytes need no logging.
        Some(Err(Error::Heap(TxError::LogFull { .. } | TxError::SnapshotTooLarge { .. })))
        | None => record_removal(heap, entry_offset, blocks, ListBlock::Fresh)?,
        Some(Err(e)) => return Err(e),
    };
    free_from(heap, entry_offset, image.root, list, 0)
}

/// Where the removal list goes.
#[derive(Clone, Copy)]
enum ListBlock {
    /// One of the structure's own blocks, left out of the list and freed last (as the list):
    /// once the entry says `Removing`, nothing reads the structure's bytes, so the removal
    /// needs no allocation and succeeds on a full pool.
    Own(u64),
    /// A block allocated for it.
    Fresh,
}

/// The structure's largest block, if the list of its other blocks fits it.
fn own_list_block<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
    blocks: &[u64],
) -> Option<u64> {
    let (holder, size) = blocks
        .iter()
        .filter_map(|&b| heap.block_size(b).map(|size| (b, size)))
        .max_by_key(|&(_, size)| size)?;
    // The count word and one word per other block.
    (size >= 8 * blocks.len() as u64).then_some(holder)
}

/// One transaction: write the list of the blocks to free to `place`, and mark the entry
/// `Removing` with the list and a cursor at 0. Returns the list's offset.
fn record_removal<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
    entry_offset: u64,
    blocks: &[u64],
    place: ListBlock,
) -> Result<u64, Error> {
    heap.transaction(|tx| {
        let listed: Vec<u64> = match place {
            ListBlock::Own(holder) => blocks.iter().copied().filter(|&b| b != holder).collect(),
            ListBlock::Fresh => blocks.to_vec(),
        };
        let mut words = Vec::with_capacity(listed.len() + 1);
        words.push(listed.len() as u64);
        words.extend_from_slice(&listed);
        let list = match place {
            ListBlock::Own(holder) => holder,
            ListBlock::Fresh => tx.alloc(words.len() as u64 * 8)?.offset(),
        };
        tx.write(list, bytemuck::cast_slice(&words))?;
        tx.write_value(entry_offset + entry::REMOVAL_LIST, &list)?;
        tx.write_value(entry_offset + entry::REMOVAL_CURSOR, &0u64)?;
        tx.write_value(entry_offset + entry::STATE, &State::Removing.code())?;
        Ok::<u64, Error>(list)
    })
}

/// Finish the removal a crash interrupted (entry `entry_offset` is `Removing`).
pub(super) fn finish<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
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

fn free_from<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
    entry_offset: u64,
    root: u64,
    list: u64,
    mut cursor: u64,
) -> Result<(), Error> {
    let pool = heap.pool();
    let count = pool.load_u64(list)?;
    if cursor > count || pool.check_range(list, 8 * (count + 1)).is_err() {
        return Err(corrupt(format!(
            "a removal list at {list:#x} of {count} blocks with {cursor} freed"
        )));
    }
    while cursor < count {
        let end = (cursor + BATCH).min(count);
        heap.transaction(|tx| {
            for i in cursor..end {
                let block: u64 = tx.read(list + 8 * (i + 1))?;
                tx.free(PPtr::<u8>::new(block))?;
            }
            tx.write_value(entry_offset + entry::REMOVAL_CURSOR, &end)
        })?;
        cursor = end;
    }
    heap.transaction(|tx| {
        tx.free(PPtr::<u8>::new(root))?;
        tx.free(PPtr::<u8>::new(list))?;
        tx.write(entry_offset, &[0u8; ENTRY_BYTES as usize])
    })?;
    Ok(())
}
