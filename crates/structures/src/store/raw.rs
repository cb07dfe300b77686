//! The structures behind the handles, seen through one interface: how each is created,
//! opened and walked for its blocks. (The maps' operations are [`crate::U64Map`].)

use std::ops::Deref;
use std::sync::Arc;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::error::Error;
use crate::cceh::{self, Cceh, CcehConfig};
use crate::datalog::{self, Datalog, DatalogConfig};
use crate::fastfair::{self, FastFair, FastFairConfig};
use crate::kind::StructureKind;
use crate::records::{hash as record_hash, tree as record_tree, RecordHashMap, RecordTreeMap};
use crate::verify::Verification;

/// The heap as the handles hold it.
pub(crate) type SharedHeap<B, P> = Arc<Heap<B, P>>;

/// A structure the catalog can list.
pub(crate) trait Structure<B: Backend, P: Deref<Target = Pool<B>>>: Sized {
    /// Its kind.
    const KIND: StructureKind;
    /// Bytes of its root block.
    const ROOT_BYTES: u64;
    /// What shapes a new one.
    type Config: Copy;
    /// Make an empty one at `root` (a zeroed block).
    fn create(heap: SharedHeap<B, P>, root: u64, config: Self::Config) -> Result<Self, Error>;
    /// Open the one at `root`, recovering it.
    fn open(heap: SharedHeap<B, P>, root: u64) -> Result<Self, Error>;
    /// Every heap block it owns, its root block aside.
    fn blocks(&self) -> Result<Vec<u64>, Error>;
    /// Walk it read-only and report every violation found.
    fn verify(&self) -> Verification;
}

/// The CCEH table as the store holds it.
pub(crate) type HashTable<B, P> = Cceh<B, P, SharedHeap<B, P>>;
/// The FAST&FAIR tree as the store holds it.
pub(crate) type Tree<B, P> = FastFair<B, P, SharedHeap<B, P>>;
/// The byte-key hash map as the store holds it.
pub(crate) type RecordTable<B, P> = RecordHashMap<B, P, SharedHeap<B, P>>;
/// The byte-key ordered map as the store holds it.
pub(crate) type RecordTree<B, P> = RecordTreeMap<B, P, SharedHeap<B, P>>;
/// The datalog as the store holds it.
pub(crate) type Files<B, P> = Datalog<B, P, SharedHeap<B, P>>;

impl<B: Backend, P: Deref<Target = Pool<B>>> Structure<B, P> for HashTable<B, P> {
    const KIND: StructureKind = StructureKind::HashMap;
    const ROOT_BYTES: u64 = cceh::ROOT_BYTES;
    type Config = CcehConfig;
    fn create(heap: SharedHeap<B, P>, root: u64, config: CcehConfig) -> Result<Self, Error> {
        Ok(Cceh::create(heap, root, config)?)
    }
    fn open(heap: SharedHeap<B, P>, root: u64) -> Result<Self, Error> {
        Ok(Cceh::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(Cceh::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        Cceh::verify(self)
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Structure<B, P> for Tree<B, P> {
    const KIND: StructureKind = StructureKind::BTreeMap;
    const ROOT_BYTES: u64 = fastfair::ROOT_BYTES;
    type Config = FastFairConfig;
    fn create(heap: SharedHeap<B, P>, root: u64, config: FastFairConfig) -> Result<Self, Error> {
        Ok(FastFair::create(heap, root, config)?)
    }
    fn open(heap: SharedHeap<B, P>, root: u64) -> Result<Self, Error> {
        Ok(FastFair::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(FastFair::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        FastFair::verify(self)
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Structure<B, P> for Files<B, P> {
    const KIND: StructureKind = StructureKind::Datalog;
    const ROOT_BYTES: u64 = datalog::ROOT_BYTES;
    type Config = DatalogConfig;
    fn create(heap: SharedHeap<B, P>, root: u64, config: DatalogConfig) -> Result<Self, Error> {
        Ok(Datalog::create(heap, root, config)?)
    }
    fn open(heap: SharedHeap<B, P>, root: u64) -> Result<Self, Error> {
        Ok(Datalog::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(Datalog::blocks(self))
    }
    fn verify(&self) -> Verification {
        Datalog::verify(self)
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Structure<B, P> for RecordTable<B, P> {
    const KIND: StructureKind = StructureKind::RecordHashMap;
    const ROOT_BYTES: u64 = record_hash::ROOT_BYTES;
    type Config = CcehConfig;
    fn create(heap: SharedHeap<B, P>, root: u64, config: CcehConfig) -> Result<Self, Error> {
        Ok(RecordHashMap::create(heap, root, config)?)
    }
    fn open(heap: SharedHeap<B, P>, root: u64) -> Result<Self, Error> {
        Ok(RecordHashMap::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(RecordHashMap::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        RecordHashMap::verify(self)
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Structure<B, P> for RecordTree<B, P> {
    const KIND: StructureKind = StructureKind::RecordBTreeMap;
    const ROOT_BYTES: u64 = record_tree::ROOT_BYTES;
    type Config = FastFairConfig;
    fn create(heap: SharedHeap<B, P>, root: u64, config: FastFairConfig) -> Result<Self, Error> {
        Ok(RecordTreeMap::create(heap, root, config)?)
    }
    fn open(heap: SharedHeap<B, P>, root: u64) -> Result<Self, Error> {
        Ok(RecordTreeMap::open(heap, root)?)
    }
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Ok(RecordTreeMap::blocks(self)?)
    }
    fn verify(&self) -> Verification {
        RecordTreeMap::verify(self)
    }
}
