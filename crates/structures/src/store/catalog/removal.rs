//! Removing a structure: free every block it owns, crash-safely, in transactions of bounded
//! size.
//!
//! A structure of a few blocks goes in one transaction (its blocks, its root block and its
//! entry). A larger one would overflow a transaction's undo log, so its removal is recorded
//! first: one transaction writes the list of its blocks to a fresh block and marks the entry
//! `Removing` with a cursor; then each transaction frees the next `BATCH` listed blocks and
//! advances the cursor; the last frees the root and the list and clears the entry. A crash
//! anywhere leaves either the structure listed and whole, or a `Removing` entry whose cursor
//! says exactly which blocks are still owned, and the next open finishes the job.

use std::ops::Deref;

use pmem_ordering::{Backend, PPtr, Pool};
use pmem_undo_log::Heap;

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
    let list = heap.transaction(|tx| {
        let mut words = Vec::with_capacity(blocks.len() + 1);
        words.push(blocks.len() as u64);
        words.extend_from_slice(blocks);
        let list = tx.alloc(words.len() as u64 * 8)?.offset();
        tx.write(list, bytemuck::cast_slice(&words))?;
        tx.write_value(entry_offset + entry::REMOVAL_LIST, &list)?;
        tx.write_value(entry_offset + entry::REMOVAL_CURSOR, &0u64)?;
        tx.write_value(entry_offset + entry::STATE, &State::Removing.code())?;
        Ok::<u64, Error>(list)
    })?;
    free_from(heap, entry_offset, image.root, list, 0)
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
