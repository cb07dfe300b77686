//! Pools and heaps for tests: anonymous (hardware backend) for the functional tests, simulated
//! for crash tests and fuzzing, each heap with a small test configuration.

use std::ops::Deref;
use std::sync::Arc;

use pmem_ordering::sim::{SimBackend, SimConfig};
use pmem_ordering::{Backend, Pool, PoolOptions};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

/// The heap of the functional tests on anonymous pools: two lanes (the tests run two writers)
/// with room for large transactions.
pub const TEST_HEAP: HeapConfig = HeapConfig {
    lanes: 2,
    lane_log_bytes: 64 << 10,
    chunk_size: 64 << 10,
};

/// The heap of crash tests and fuzz targets on small simulated pools: one lane whose log holds
/// the largest transaction of any structure (a FAST&FAIR split), and the smallest chunks.
pub const SIM_HEAP: HeapConfig = HeapConfig {
    lanes: 1,
    lane_log_bytes: 16 << 10,
    chunk_size: 4096,
};

/// A fresh heap of `size` bytes on an anonymous pool named `layout` ([`TEST_HEAP`], batched
/// fences).
pub fn anonymous_heap(layout: &str, size: u64) -> Heap {
    anonymous_heap_with(layout, size, TEST_HEAP)
}

/// [`anonymous_heap`] with another heap configuration.
pub fn anonymous_heap_with(layout: &str, size: u64, config: HeapConfig) -> Heap {
    let pool = Pool::anonymous(layout, size, &PoolOptions::new())
        .unwrap_or_else(|e| panic!("an anonymous pool of {size} bytes: {e}"));
    Heap::create(Arc::new(pool), config, FencePolicy::Batched)
        .unwrap_or_else(|e| panic!("format a heap on the anonymous pool: {e}"))
}

/// Close `heap` and open its pool again, as a restart would.
pub fn reopen(heap: Heap) -> Heap {
    Heap::open(heap.into_pool(), FencePolicy::Batched)
        .unwrap_or_else(|e| panic!("reopen the heap: {e}"))
}

/// A simulated pool of `size` bytes with a `root_size`-byte root object.
pub fn simulated_pool(layout: &str, size: u64, root_size: u64, sim: SimConfig) -> Pool<SimBackend> {
    Pool::simulated(layout, size, root_size, sim)
        .unwrap_or_else(|e| panic!("a simulated pool of {size} bytes: {e}"))
}

/// A fresh heap ([`SIM_HEAP`]) on a simulated pool.
pub fn simulated_heap(
    pool: &Pool<SimBackend>,
    policy: FencePolicy,
) -> Heap<SimBackend, &Pool<SimBackend>> {
    Heap::create(pool, SIM_HEAP, policy)
        .unwrap_or_else(|e| panic!("format a heap on the simulated pool: {e}"))
}

/// The offsets of the blocks the heap's allocator holds allocated, in order: a structure must
/// own exactly these (nothing leaked, nothing freed twice).
pub fn heap_blocks<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
) -> Result<Vec<u64>, String> {
    let blocks = heap
        .check_heap()
        .map_err(|e| format!("the heap check fails: {e}"))?;
    Ok(blocks.into_iter().map(|(offset, _)| offset).collect())
}

/// Checks that the heap holds exactly the structure's `blocks` (`what` names the structure).
pub fn heap_holds_exactly<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
    blocks: &[u64],
    what: &str,
) -> Result<(), String> {
    let allocated = heap_blocks(heap)?;
    if allocated != blocks {
        return Err(format!(
            "the heap's blocks {allocated:x?} are not exactly the {what}'s {blocks:x?}"
        ));
    }
    Ok(())
}
