//! Pools and heaps for tests: anonymous (hardware backend) for the functional tests, simulated
//! for crash tests and fuzzing, each heap with a small test configuration.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pmem_ordering::sim::{SimBackend, SimConfig};
use pmem_ordering::{Backend, Granularity, Pool, PoolOptions};
use pmem_structures::raw::leafmap::LeafMapConfig;
use pmem_structures::StoreOptions;
use pmem_undo_log::{FencePolicy, Heap, HeapConfig, Layout};

/// The heap of the functional tests on anonymous pools: two lanes (the tests run two writers)
/// with room for large transactions.
pub const TEST_HEAP: HeapConfig = HeapConfig {
    lanes: 2,
    lane_log_bytes: 64 << 10,
    chunk_size: 64 << 10,
};

/// [`TEST_HEAP`] with 16 KiB lane logs: the heap of the undo-log's and the Themis workloads'
/// functional tests, whose exact fence counts are asserted on it.
pub const TEST_HEAP_16K_LOGS: HeapConfig = HeapConfig {
    lane_log_bytes: 16 << 10,
    ..TEST_HEAP
};

/// The heap of crash tests and fuzz targets on small simulated pools: one lane whose log holds
/// the largest transaction of any structure (a FAST&FAIR split), and the smallest chunks.
pub const SIM_HEAP: HeapConfig = HeapConfig {
    lanes: 1,
    lane_log_bytes: 16 << 10,
    chunk_size: 4096,
};

/// A heap configuration, for the tests that need another than [`TEST_HEAP`] or [`SIM_HEAP`]
/// (the undo-log's own tests size the lane log and the chunks to reach the states they test).
/// Leaves of 4 slots of 64 bytes (56 bytes of key and value inline): a few keys split a leaf,
/// a value of more than about 40 bytes goes to a record. The crash tests' and fuzzing's shape.
pub const SMALL_LEAVES: LeafMapConfig = LeafMapConfig {
    leaf_bytes: 320,
    slot_bytes: 64,
};

pub const fn heap_config(lanes: u64, lane_log_bytes: u64, chunk_size: u64) -> HeapConfig {
    HeapConfig {
        lanes,
        lane_log_bytes,
        chunk_size,
    }
}

/// An anonymous pool of `size` bytes named `layout`, shared so a heap can own it.
pub fn anonymous_pool(layout: &str, size: u64) -> Arc<Pool> {
    Arc::new(
        Pool::anonymous(layout, size, &PoolOptions::new())
            .unwrap_or_else(|e| panic!("an anonymous pool of {size} bytes: {e}")),
    )
}

/// A fresh heap of `size` bytes on an anonymous pool named `layout` ([`TEST_HEAP`], batched
/// fences).
pub fn anonymous_heap(layout: &str, size: u64) -> Heap {
    anonymous_heap_with(layout, size, TEST_HEAP)
}

/// [`anonymous_heap`] with another heap configuration.
pub fn anonymous_heap_with(layout: &str, size: u64, config: HeapConfig) -> Heap {
    anonymous_heap_under(layout, size, config, FencePolicy::Batched)
}

/// [`anonymous_heap_with`] under another fence policy.
pub fn anonymous_heap_under(
    layout: &str,
    size: u64,
    config: HeapConfig,
    policy: FencePolicy,
) -> Heap {
    Heap::create(anonymous_pool(layout, size), config, policy)
        .unwrap_or_else(|e| panic!("format a heap on the anonymous pool: {e}"))
}

/// Close `heap` and open its pool again, as a restart would. Panics if a structure still holds
/// a clone of the heap.
pub fn reopen(heap: Heap) -> Heap {
    let pool = heap
        .into_pool()
        .unwrap_or_else(|_| panic!("reopen the heap: a structure still holds a handle to it"));
    Heap::open(pool).unwrap_or_else(|e| panic!("reopen the heap: {e}"))
}

/// A simulated pool of `size` bytes with a `root_size`-byte root object.
pub fn simulated_pool(
    layout: &str,
    size: u64,
    root_size: u64,
    sim: SimConfig,
) -> Arc<Pool<SimBackend>> {
    Pool::simulated(layout, size, root_size, sim)
        .map(Arc::new)
        .unwrap_or_else(|e| panic!("a simulated pool of {size} bytes: {e}"))
}

/// A fresh heap ([`SIM_HEAP`]) on a simulated pool.
pub fn simulated_heap(pool: &Arc<Pool<SimBackend>>, policy: FencePolicy) -> Heap<SimBackend> {
    simulated_heap_with(pool, SIM_HEAP, policy)
}

/// [`simulated_heap`] with another heap configuration.
pub fn simulated_heap_with(
    pool: &Arc<Pool<SimBackend>>,
    config: HeapConfig,
    policy: FencePolicy,
) -> Heap<SimBackend> {
    Heap::create(pool.clone(), config, policy)
        .unwrap_or_else(|e| panic!("format a heap on the simulated pool: {e}"))
}

/// The heap on `pool` after a crash, recovered as a restart would (`Heap::open`); an `Err` names
/// the recovery's failure, for a crash check to return.
pub fn recover_heap<B: Backend>(pool: &Arc<Pool<B>>) -> Result<Heap<B>, String> {
    Heap::open(pool.clone()).map_err(|e| format!("recovery failed: {e}"))
}

/// A heap recovered on a crash image, with the blocks its walk found.
pub type RecoveredHeap<B> = (Heap<B>, Vec<(u64, u64)>);

/// [`recover_heap`], then the heap walk: the recovered heap and its committed blocks as
/// `(offset, size)`, by offset.
pub fn recover_and_walk_heap<B: Backend>(pool: &Arc<Pool<B>>) -> Result<RecoveredHeap<B>, String> {
    let heap = recover_heap(pool)?;
    let blocks = heap
        .check_heap()
        .map_err(|e| format!("heap walk failed: {e}"))?;
    Ok((heap, blocks))
}

/// The chunks the chunk table takes at the start of the allocator's region (8 bytes a chunk).
pub fn chunk_table_chunks(layout: &Layout) -> u64 {
    (layout.alloc_size / layout.chunk_size * 8).div_ceil(layout.chunk_size)
}

/// Checks that no chunk is lost: the free chunks are all those that hold none of the live
/// `blocks` (`(offset, size)`, as the heap walk returns them) and are not the chunk table (a
/// small chunk whose last block is freed returns to the free pool, so none sits empty).
pub fn check_chunks<B: Backend>(heap: &Heap<B>, blocks: &[(u64, u64)]) -> Result<(), String> {
    let layout = heap.layout();
    let total = layout.alloc_size / layout.chunk_size;
    let table = chunk_table_chunks(layout);
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

/// The offsets of the blocks the heap's allocator holds allocated, in order: a structure must
/// own exactly these (nothing leaked, nothing freed twice).
pub fn heap_blocks<B: Backend>(heap: &Heap<B>) -> Result<Vec<u64>, String> {
    let blocks = heap
        .check_heap()
        .map_err(|e| format!("the heap check fails: {e}"))?;
    Ok(blocks.into_iter().map(|(offset, _)| offset).collect())
}

/// Checks that the heap holds exactly the structure's `blocks` (`what` names the structure).
pub fn heap_holds_exactly<B: Backend>(
    heap: &Heap<B>,
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

/// The variable naming a directory for the tests' pool files (a DAX mount, a disk, a tmpfs):
/// the persistent-memory check (`.ci/dax/run`) points the tests at each in turn.
pub const POOL_DIR_ENV: &str = "PMEM_TEST_POOL_DIR";

/// The directory `PMEM_TEST_POOL_DIR` names, if it is set and not empty.
pub fn pool_dir_setting() -> Option<PathBuf> {
    std::env::var_os(POOL_DIR_ENV)
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
}

/// A fresh directory for pool files, removed when the guard drops: in the directory
/// `PMEM_TEST_POOL_DIR` names when it is set, else on tmpfs (`/dev/shm`) when the machine has
/// one, else in the system's temporary directory.
pub fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let parent = match pool_dir_setting() {
        Some(dir) => dir,
        None if shm.is_dir() => shm.to_path_buf(),
        None => std::env::temp_dir(),
    };
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(&parent)
        .unwrap_or_else(|e| panic!("a temporary directory in {}: {e}", parent.display()))
}

/// The granularity the tests force on their pool files: emulated (flushes as on persistent
/// memory, no `msync`, fast on tmpfs), unless `PMEM_TEST_POOL_DIR` names a directory, whose
/// file system is then the point: `None`, the granularity detected for the file (cache line
/// or byte on DAX, page with `msync` elsewhere).
pub fn file_granularity() -> Option<Granularity> {
    match pool_dir_setting() {
        Some(_) => None,
        None => Some(Granularity::Emulated),
    }
}

/// Store options for a test's pool file: [`file_granularity`] applied to the defaults.
pub fn file_store_options() -> StoreOptions {
    match file_granularity() {
        Some(granularity) => StoreOptions::new().granularity(granularity),
        None => StoreOptions::new(),
    }
}

/// Pool options for a test's pool file: [`file_granularity`] applied to the defaults.
pub fn file_pool_options() -> PoolOptions {
    match file_granularity() {
        Some(granularity) => PoolOptions::new().granularity(granularity),
        None => PoolOptions::new(),
    }
}

/// A path named `name` in a fresh [`scratch_dir`] (removed with the returned guard).
pub fn pool_path(prefix: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = scratch_dir(prefix);
    let path = dir.path().join(name);
    (dir, path)
}
