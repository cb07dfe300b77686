//! The structures behind the handles, seen through one interface: how each is created,
//! opened and walked for its blocks. (The maps' operations are [`crate::raw::U64Map`].)

use std::ops::{Bound, ControlFlow};

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use super::error::Error;
use crate::cceh::{self, Cceh, CcehConfig};
use crate::datalog::{self, Datalog, DatalogConfig};
use crate::fastfair::{self, FastFair, FastFairConfig};
use crate::kind::StructureKind;
use crate::leafmap::{self, LeafMap, LeafMapConfig};
use crate::records::{hash as record_hash, tree as record_tree, RecordHashMap, RecordTreeMap};
use crate::verify::Verification;

/// A structure the catalog can list.
pub(crate) trait Structure<B: Backend>: Sized {
    /// Its kind.
    const KIND: StructureKind;
    /// Bytes of its root block.
    const ROOT_BYTES: u64;
    /// What shapes a new one.
    type Config: Copy;
    /// Make an empty one at `root` (a zeroed block).
    fn create(heap: &Heap<B>, root: u64, config: Self::Config) -> Result<Self, Error>;
    /// Open the one at `root`, recovering it.
    fn open(heap: &Heap<B>, root: u64) -> Result<Self, Error>;
    /// Every heap block it owns, its root block aside.
    fn blocks(&self) -> Result<Vec<u64>, Error>;
    /// Walk it read-only and report every violation found.
    fn verify(&self) -> Verification;
    /// Whether [`Structure::drain`] frees blocks: whether emptying it makes it small enough
    /// to list on a full pool.
    const DRAINS: bool;
    /// Empty it by its own crash-safe removes, which allocate nothing (for a removal that
    /// found no room for the list of its blocks: `catalog/removal.rs`).
    fn drain(&self) -> Result<(), Error>;
}

/// Keys a drain takes from a map at a time.
const DRAIN_BATCH: usize = 256;

/// Remove every key of a map a batch at a time: `batch` lists the first keys left (empty
/// when none is), `remove` removes one.
fn drain_keys<K>(
    mut batch: impl FnMut() -> Result<Vec<K>, Error>,
    mut remove: impl FnMut(&K) -> Result<(), Error>,
) -> Result<(), Error> {
    loop {
        let keys = batch()?;
        if keys.is_empty() {
            return Ok(());
        }
        for key in &keys {
            remove(key)?;
        }
    }
}

/// The CCEH table as the store holds it.
pub(crate) type HashTable<B> = Cceh<B>;
/// The FAST&FAIR tree as the store holds it.
pub(crate) type Tree<B> = FastFair<B>;
/// The byte-key hash map as the store holds it.
pub(crate) type RecordTable<B> = RecordHashMap<B>;
/// The byte-key ordered map as the store holds it.
pub(crate) type RecordTree<B> = RecordTreeMap<B>;
/// The byte-key ordered map of inline leaves as the store holds it.
pub(crate) type LeafTree<B> = LeafMap<B>;
/// The datalog as the store holds it.
pub(crate) type Files<B> = Datalog<B>;

impl<B: Backend> Structure<B> for HashTable<B> {
    const KIND: StructureKind = StructureKind::HashMap;
    const ROOT_BYTES: u64 = cceh::ROOT_BYTES;
    type Config = CcehConfig;
    fn create(heap: &Heap<B>, root: u64, config: CcehConfig) -> Result<Self, Error> {
        Ok(Cceh::create(heap, root, config)?)
    }
    fn open(heap: &Heap<B>, root: u64) -> Result<Self, Error> {
        Ok(Cceh::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(Cceh::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        Cceh::verify(self)
    }
    // A table's removes free no segment: there is nothing to gain.
    const DRAINS: bool = false;
    fn drain(&self) -> Result<(), Error> {
        Ok(())
    }
}

impl<B: Backend> Structure<B> for Tree<B> {
    const KIND: StructureKind = StructureKind::BTreeMap;
    const ROOT_BYTES: u64 = fastfair::ROOT_BYTES;
    type Config = FastFairConfig;
    fn create(heap: &Heap<B>, root: u64, config: FastFairConfig) -> Result<Self, Error> {
        Ok(FastFair::create(heap, root, config)?)
    }
    fn open(heap: &Heap<B>, root: u64) -> Result<Self, Error> {
        Ok(FastFair::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(FastFair::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        FastFair::verify(self)
    }
    // Its removes merge and free nodes down to one leaf.
    const DRAINS: bool = true;
    fn drain(&self) -> Result<(), Error> {
        drain_keys(
            || {
                let keys = self.range(..).take(DRAIN_BATCH).map(|e| e.map(|(k, _)| k));
                Ok(keys.collect::<Result<Vec<u64>, _>>()?)
            },
            |&k| FastFair::remove(self, k).map(drop).map_err(Error::from),
        )
    }
}

impl<B: Backend> Structure<B> for Files<B> {
    const KIND: StructureKind = StructureKind::Datalog;
    const ROOT_BYTES: u64 = datalog::ROOT_BYTES;
    type Config = DatalogConfig;
    fn create(heap: &Heap<B>, root: u64, config: DatalogConfig) -> Result<Self, Error> {
        Ok(Datalog::create(heap, root, config)?)
    }
    fn open(heap: &Heap<B>, root: u64) -> Result<Self, Error> {
        Ok(Datalog::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(Datalog::blocks(self))
    }
    fn verify(&self) -> Verification {
        Datalog::verify(self)
    }
    // Removing its files frees their pages.
    const DRAINS: bool = true;
    fn drain(&self) -> Result<(), Error> {
        for name in self.list() {
            Datalog::remove(self, &name)?;
        }
        Ok(())
    }
}

impl<B: Backend> Structure<B> for RecordTable<B> {
    const KIND: StructureKind = StructureKind::RecordHashMap;
    const ROOT_BYTES: u64 = record_hash::ROOT_BYTES;
    type Config = CcehConfig;
    fn create(heap: &Heap<B>, root: u64, config: CcehConfig) -> Result<Self, Error> {
        Ok(RecordHashMap::create(heap, root, config)?)
    }
    fn open(heap: &Heap<B>, root: u64) -> Result<Self, Error> {
        Ok(RecordHashMap::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(RecordHashMap::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        RecordHashMap::verify(self)
    }
    // Its removes free its records (its segments stay: few and large).
    const DRAINS: bool = true;
    fn drain(&self) -> Result<(), Error> {
        drain_keys(
            || {
                let pairs = self.iter().take(DRAIN_BATCH).map(|e| e.map(|(k, _)| k));
                Ok(pairs.collect::<Result<Vec<Vec<u8>>, _>>()?)
            },
            |k| {
                RecordHashMap::remove(self, k)
                    .map(drop)
                    .map_err(Error::from)
            },
        )
    }
}

impl<B: Backend> Structure<B> for RecordTree<B> {
    const KIND: StructureKind = StructureKind::RecordBTreeMap;
    const ROOT_BYTES: u64 = record_tree::ROOT_BYTES;
    type Config = FastFairConfig;
    fn create(heap: &Heap<B>, root: u64, config: FastFairConfig) -> Result<Self, Error> {
        Ok(RecordTreeMap::create(heap, root, config)?)
    }
    fn open(heap: &Heap<B>, root: u64) -> Result<Self, Error> {
        Ok(RecordTreeMap::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(RecordTreeMap::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        RecordTreeMap::verify(self)
    }
    // Its removes free its records and layers.
    const DRAINS: bool = true;
    fn drain(&self) -> Result<(), Error> {
        drain_keys(
            || {
                let pairs = self.iter().take(DRAIN_BATCH).map(|e| e.map(|(k, _)| k));
                Ok(pairs.collect::<Result<Vec<Vec<u8>>, _>>()?)
            },
            |k| {
                RecordTreeMap::remove(self, k)
                    .map(drop)
                    .map_err(Error::from)
            },
        )
    }
}

impl<B: Backend> Structure<B> for LeafTree<B> {
    const KIND: StructureKind = StructureKind::LeafMap;
    const ROOT_BYTES: u64 = leafmap::ROOT_BYTES;
    type Config = LeafMapConfig;
    fn create(heap: &Heap<B>, root: u64, config: LeafMapConfig) -> Result<Self, Error> {
        Ok(LeafMap::create(heap, root, config)?)
    }
    fn open(heap: &Heap<B>, root: u64) -> Result<Self, Error> {
        Ok(LeafMap::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(LeafMap::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        LeafMap::verify(self)
    }
    // Its removes free its records and unlink and free its emptied leaves.
    const DRAINS: bool = true;
    fn drain(&self) -> Result<(), Error> {
        drain_keys(
            || {
                let mut keys = Vec::with_capacity(DRAIN_BATCH);
                self.scan(Bound::Unbounded, Bound::Unbounded, |key, _| {
                    keys.push(key.to_vec());
                    match keys.len() < DRAIN_BATCH {
                        true => ControlFlow::Continue(()),
                        false => ControlFlow::Break(()),
                    }
                })?;
                Ok(keys)
            },
            |k| LeafMap::remove(self, k).map(drop).map_err(Error::from),
        )
    }
}
