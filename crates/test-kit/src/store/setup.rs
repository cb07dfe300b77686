//! How the kit's stores are made: [`StoreSetup`] (options, shapes, simulator model) and the
//! anonymous stores it creates.

use std::sync::Arc;

use pmem_ordering::sim::SimConfig;
use pmem_ordering::{Pool, PoolOptions};
use pmem_structures::raw::cceh::CcehConfig;
use pmem_structures::raw::datalog::DatalogConfig;
use pmem_structures::raw::fastfair::{FastFairConfig, ShiftPolicy};
use pmem_structures::raw::leafmap::LeafMapConfig;
use pmem_structures::raw::STORE_LAYOUT;
use pmem_structures::{Error, Store, StoreOptions};
use pmem_undo_log::FencePolicy;

use super::CATALOG_CAPACITY;
use crate::fixture::{SIM_HEAP, SMALL_LEAVES};

/// How the kit's stores are made: the heap's fence policy, the maps' shapes and the tree's
/// shift policy. Every store has [`CATALOG_CAPACITY`] names and the [`SIM_HEAP`] heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreSetup {
    /// The undo log's fence policy.
    pub policy: FencePolicy,
    /// The B+-trees' shift policy.
    pub shift: ShiftPolicy,
    /// Hash map segments of 8 buckets rather than 4.
    pub wide_segments: bool,
}

impl Default for StoreSetup {
    fn default() -> Self {
        StoreSetup {
            policy: FencePolicy::Batched,
            shift: ShiftPolicy::Fast,
            wide_segments: false,
        }
    }
}

impl StoreSetup {
    /// The options stores are created with.
    pub fn options(&self) -> StoreOptions {
        StoreOptions::new()
            .max_structures(CATALOG_CAPACITY)
            .fence_policy(self.policy)
            .heap(SIM_HEAP)
    }

    /// The simulator model the fence policy is correct under.
    pub fn sim(&self) -> SimConfig {
        match self.policy {
            FencePolicy::Themis => SimConfig::themis(),
            _ => SimConfig::x86(),
        }
    }

    /// New hash maps' shape: tiny segments, so a few keys split them.
    pub fn table(&self) -> CcehConfig {
        CcehConfig {
            buckets_per_segment: if self.wide_segments { 8 } else { 4 },
        }
    }

    /// New B+-trees' shape: nodes of one entry line.
    pub fn tree(&self) -> FastFairConfig {
        FastFairConfig {
            node_size: 128,
            policy: self.shift,
        }
    }

    /// New ordered maps' leaves, for the leaf layout: four slots, so a few keys split them.
    pub fn leaves(&self) -> LeafMapConfig {
        SMALL_LEAVES
    }

    /// New datalogs' shape: a few inodes.
    pub fn datalog(&self) -> DatalogConfig {
        DatalogConfig {
            max_files: 4,
            ..DatalogConfig::default()
        }
    }

    /// The root object size that holds exactly the options' catalog (the store computes it;
    /// the kit does not copy the catalog's layout).
    pub fn root_size(&self) -> Result<u64, Error> {
        self.options().root_size()
    }

    /// A fresh store of `size` bytes on an anonymous pool the caller keeps (to reopen it).
    pub fn anonymous_store(&self, size: u64) -> Result<(Arc<Pool>, Store), Error> {
        let options = PoolOptions::new().root_size(self.root_size()?);
        let pool = Arc::new(Pool::anonymous(STORE_LAYOUT, size, &options)?);
        let store = Store::format(pool.clone(), &self.options())?;
        Ok((pool, store))
    }
}
