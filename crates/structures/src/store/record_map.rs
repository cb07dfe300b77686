//! The shared state of a map of records: the structure, its name and the store.

use std::ops::Deref;
use std::sync::Arc;

use pmem_ordering::{Backend, Pool};

use super::catalog::Listed;
use super::error::Error;
use super::raw::{RecordTable, RecordTree};
use super::registry::{Core, Opened, Shared};
use crate::sync::{WriteSection, WriterGate};

/// A byte-key hash map's shared state.
pub(crate) struct RecordHashCore<B: Backend, P: Deref<Target = Pool<B>>> {
    pub(super) raw: RecordTable<B, P>,
    pub(super) name: String,
    /// Keeps the store (heap, file, lock) alive as long as a handle is.
    pub(super) shared: Arc<Shared<B, P>>,
    /// Keeps single writers out while a write batch holds the map (`batch/`).
    pub(super) gate: WriterGate,
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
            shared,
            gate: WriterGate::new(),
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
    pub(super) shared: Arc<Shared<B, P>>,
    /// Keeps single writers out while a write batch holds the map (`batch/`).
    pub(super) gate: WriterGate,
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
            shared,
            gate: WriterGate::new(),
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

/// Entering the writer gate of a map of records for a single write.
macro_rules! enter_gate {
    ($core:ident) => {
        impl<B: Backend, P: Deref<Target = Pool<B>>> $core<B, P> {
            /// Enter the map's writer gate for a single write (see `batch/`).
            #[inline(always)]
            pub(super) fn enter(&self) -> Result<WriteSection, Error> {
                self.gate.enter().map_err(|_| Error::InBatch {
                    name: self.name.clone(),
                })
            }
        }
    };
}

enter_gate!(RecordHashCore);
enter_gate!(RecordTreeCore);
