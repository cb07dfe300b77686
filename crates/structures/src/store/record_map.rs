//! The shared state of a map of records: the structure, its name and the store.

use std::ops::Deref;
use std::sync::Arc;

use pmem_ordering::{Backend, Pool};

use super::catalog::Listed;
use super::error::Error;
use super::raw::{RecordTable, RecordTree};
use super::registry::{Core, Opened, Shared};

/// A byte-key hash map's shared state.
pub(crate) struct RecordHashCore<B: Backend, P: Deref<Target = Pool<B>>> {
    pub(super) raw: RecordTable<B, P>,
    pub(super) name: String,
    /// Keeps the store (heap, file, lock) alive as long as a handle is.
    _shared: Arc<Shared<B, P>>,
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Core<B, P> for RecordHashCore<B, P> {
    type Raw = RecordTable<B, P>;
    fn wrap(
        raw: RecordTable<B, P>,
        _listed: &Listed,
        name: &str,
        shared: Arc<Shared<B, P>>,
    ) -> Result<Self, Error> {
        Ok(RecordHashCore {
            raw,
            name: name.to_string(),
            _shared: shared,
        })
    }
    fn record(core: &Arc<Self>) -> Opened<B, P> {
        Opened::RecordHashMap(Arc::downgrade(core))
    }
    fn recall(opened: &Opened<B, P>) -> Option<Arc<Self>> {
        match opened {
            Opened::RecordHashMap(weak) => weak.upgrade(),
            _ => None,
        }
    }
    fn raw(&self) -> &RecordTable<B, P> {
        &self.raw
    }
}

/// A byte-key ordered map's shared state.
pub(crate) struct RecordTreeCore<B: Backend, P: Deref<Target = Pool<B>>> {
    pub(super) raw: RecordTree<B, P>,
    pub(super) name: String,
    /// Keeps the store (heap, file, lock) alive as long as a handle is.
    _shared: Arc<Shared<B, P>>,
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Core<B, P> for RecordTreeCore<B, P> {
    type Raw = RecordTree<B, P>;
    fn wrap(
        raw: RecordTree<B, P>,
        _listed: &Listed,
        name: &str,
        shared: Arc<Shared<B, P>>,
    ) -> Result<Self, Error> {
        Ok(RecordTreeCore {
            raw,
            name: name.to_string(),
            _shared: shared,
        })
    }
    fn record(core: &Arc<Self>) -> Opened<B, P> {
        Opened::RecordBTreeMap(Arc::downgrade(core))
    }
    fn recall(opened: &Opened<B, P>) -> Option<Arc<Self>> {
        match opened {
            Opened::RecordBTreeMap(weak) => weak.upgrade(),
            _ => None,
        }
    }
    fn raw(&self) -> &RecordTree<B, P> {
        &self.raw
    }
}
