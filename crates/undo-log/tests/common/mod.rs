//! Checks shared by the undo-log crash tests.

use std::collections::BTreeSet;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

/// No chunk is lost either: the free chunks are all those that hold no live block (a small
/// chunk whose last block is freed returns to the free pool, so none sits empty).
pub fn check_chunks<B: Backend, P: std::ops::Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
    blocks: &[(u64, u64)],
) -> Result<(), String> {
    let layout = heap.layout();
    let total = layout.alloc_size / layout.chunk_size;
    let table = (total * 8).div_ceil(layout.chunk_size);
    let mut used = BTreeSet::new();
    for &(offset, size) in blocks {
        let first = (offset - layout.alloc_offset) / layout.chunk_size;
        let last = (offset + size - 1 - layout.alloc_offset) / layout.chunk_size;
        used.extend(first..=last);
    }
    let stats = heap.alloc_stats();
    if stats.free_chunks != total - table - used.len() as u64 {
        return Err(format!(
            "{} chunks hold live blocks and {table} the chunk table, but only {} of {total} are free",
            used.len(),
            stats.free_chunks
        ));
    }
    Ok(())
}
