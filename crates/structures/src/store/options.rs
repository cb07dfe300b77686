//! How a store is created and mapped.

use pmem_ordering::{Granularity, PoolOptions};
use pmem_undo_log::{FencePolicy, HeapConfig};

use super::catalog::root_bytes;
use super::error::Error;

/// The most names a catalog can be made for (a 512 KiB root object).
pub const MAX_STRUCTURES: u64 = 4096;

/// How to create (and map) a store.
///
/// What a store records (its fence policy, heap shape and catalog capacity; each structure's
/// own configuration) is fixed at create and read back at every open: only
/// [`StoreOptions::granularity`] applies to [`Store::open_with`](super::Store::open_with).
///
/// # Granularity: what a persist costs, and how it is chosen
///
/// A store is only as durable as the memory its file lives on (libpmem2's terms):
///
/// * **Cache line** (a file on a DAX filesystem over persistent memory, mapped with
///   `MAP_SYNC`): a persist is `clwb` (or `clflushopt`, `clflush`) of the lines written and one
///   `sfence`, a few hundred nanoseconds on Optane. Chosen automatically when the mapping
///   accepts `MAP_SYNC` and the region is not eADR, or its domain cannot be read.
/// * **Byte** (eADR: the CPU caches are inside the persistence domain): flushes are skipped,
///   fences kept. Chosen automatically when the mapping accepts `MAP_SYNC` and sysfs says the
///   file's NVDIMM region has `persistence_domain` `cpu_cache` (libpmem2's test); or forced
///   with [`StoreOptions::granularity`].
/// * **Page** (an ordinary file on a disk or in the page cache): every persist ends in
///   `msync` of the pages written, a system call and a write-back to the device: on the
///   development machine's ext4 disk a hash-map insert took 104 us this way (3,000 inserts),
///   against 0.26 us emulated on `/dev/shm`. Chosen automatically for any file that cannot be
///   mapped with `MAP_SYNC`. Durable across power failure as far as the disk's write cache
///   is.
/// * **Emulated** (tmpfs such as `/dev/shm`, or DRAM): flushes and fences are issued as on
///   persistent memory, nothing more, and nothing survives a power failure or reboot (a
///   process crash or `kill -9` loses nothing, since the file outlives the process).
///   Benchmarks and tests use it; force it with `.granularity(Granularity::Emulated)`.
///   Anonymous stores are always emulated.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub(super) granularity: Option<Granularity>,
    pub(super) fence_policy: FencePolicy,
    pub(super) heap: HeapConfig,
    pub(super) max_structures: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            granularity: None,
            fence_policy: FencePolicy::Batched,
            heap: HeapConfig::default(),
            max_structures: 64,
        }
    }
}

impl StoreOptions {
    /// Defaults: granularity detected from the file, batched fences, the heap's default shape
    /// (8 transaction lanes of 64 KiB), room for 64 named structures.
    pub fn new() -> StoreOptions {
        StoreOptions::default()
    }

    /// Force a granularity instead of detecting it (see the type's docs).
    pub fn granularity(mut self, granularity: Granularity) -> StoreOptions {
        self.granularity = Some(granularity);
        self
    }

    /// The undo log's fence policy, recorded in the store (default: batched).
    pub fn fence_policy(mut self, policy: FencePolicy) -> StoreOptions {
        self.fence_policy = policy;
        self
    }

    /// The heap's shape: transaction lanes, log bytes per lane, chunk size.
    pub fn heap(mut self, config: HeapConfig) -> StoreOptions {
        self.heap = config;
        self
    }

    /// How many named structures the catalog can hold, 1 to [`MAX_STRUCTURES`] (default 64).
    pub fn max_structures(mut self, names: u64) -> StoreOptions {
        self.max_structures = names;
        self
    }

    /// The root object size a pool needs for a store with these options (it holds the
    /// catalog): for a store formatted on a pool of one's own ([`super::Store::format`]: the
    /// crash simulator's, say). Refused like the options themselves.
    pub fn root_size(&self) -> Result<u64, Error> {
        self.pool_options()?;
        Ok(root_bytes(self.max_structures))
    }

    /// The pool options these stand for.
    pub(super) fn pool_options(&self) -> Result<PoolOptions, Error> {
        if !(1..=MAX_STRUCTURES).contains(&self.max_structures) {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "max_structures {}: from 1 to {MAX_STRUCTURES} names are allowed",
                    self.max_structures
                ),
            });
        }
        let mut options = PoolOptions::new().root_size(root_bytes(self.max_structures));
        if let Some(granularity) = self.granularity {
            options = options.granularity(granularity);
        }
        Ok(options)
    }
}
