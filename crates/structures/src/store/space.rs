//! What a store tells about itself without handing out its engine: the space its pool holds and
//! uses, the persistence granularity it runs at, and the persist costs a thread has paid.

use std::ops::Deref;

use pmem_ordering::{Backend, Granularity, Pool};
use pmem_undo_log::Heap;

use super::Store;

/// The space of a store's pool, as [`Store::space`] reads it.
///
/// `used + free` is the heap's usable capacity: the pool's size less its header, the
/// transaction lanes and the allocator's own tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Space {
    /// The pool file's size in bytes, as created.
    pub pool_bytes: u64,
    /// Bytes the heap can give to structures: `used + free`.
    pub capacity: u64,
    /// Bytes in allocated blocks (each rounded up to its size class or to whole chunks).
    pub used: u64,
    /// Bytes neither allocated nor the allocator's own metadata.
    pub free: u64,
    /// Allocated blocks: the structures' own and their records.
    pub blocks: u64,
    /// Of `blocks`, the out-of-line records of byte-string keys and values.
    pub records: u64,
    /// Bytes in those records.
    pub record_bytes: u64,
}

impl Space {
    /// `used` as a percentage of `capacity` (0 for an empty capacity).
    pub fn used_percent(&self) -> f64 {
        if self.capacity == 0 {
            0.0
        } else {
            100.0 * self.used as f64 / self.capacity as f64
        }
    }
}

/// Persist instructions the calling thread has issued so far, over every pool it wrote:
/// counted by the ordering layer, so a caller measures an operation's cost by reading them
/// before and after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PersistCounts {
    /// Cache lines written back (`clwb`, `clflushopt` or `clflush`, whichever the CPU has).
    pub flushes: u64,
    /// Store fences.
    pub fences: u64,
    /// Non-temporal (streaming) stores.
    pub streaming_stores: u64,
}

/// The calling thread's [`PersistCounts`].
pub fn thread_persist_counts() -> PersistCounts {
    let stats = pmem_ordering::thread_stats();
    PersistCounts {
        flushes: stats.flushes,
        fences: stats.fences,
        streaming_stores: stats.nt_stores,
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Store<B, P> {
    /// The space the store's pool holds and uses now.
    pub fn space(&self) -> Space {
        let heap = &self.shared.heap;
        let stats = heap.alloc_stats();
        Space {
            pool_bytes: heap.pool().size(),
            capacity: stats.bytes_allocated + stats.bytes_free,
            used: stats.bytes_allocated,
            free: stats.bytes_free,
            blocks: stats.objects,
            records: stats.record_objects,
            record_bytes: stats.record_bytes,
        }
    }

    /// The persistence granularity the store runs at (detected from its file, or forced by
    /// [`super::StoreOptions::granularity`]).
    pub fn granularity(&self) -> Granularity {
        self.shared.heap.pool().granularity()
    }

    /// How the granularity was chosen, for a store on a file: forced by the caller, `MAP_SYNC`
    /// refused, or the persistence domain of the file's NVDIMM region. `None` for anonymous
    /// and simulated stores.
    pub fn granularity_basis(&self) -> Option<&str> {
        self.shared.heap.pool().granularity_basis()
    }

    /// The heap under the store, for tools that inspect or damage a pool on purpose (the
    /// project's own damage tests) and for those who place their own structures in it.
    ///
    /// # Safety
    /// A store's handles write some bytes with non-atomic streaming stores (a datalog's
    /// copy-on-write blocks before they are published, a write batch's log), relying on no
    /// other thread reaching them. The caller must not write through the returned heap or its
    /// pool (nor free or reuse a block of the store) while any other thread may be using this
    /// store or one of its handles. Reads are always sound; writes made while no other thread
    /// uses the store are damage at worst, which the store reports as errors.
    pub unsafe fn raw_heap(&self) -> &Heap<B, P> {
        &self.shared.heap
    }
}
