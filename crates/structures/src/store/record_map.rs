//! The shared state of a map of records: the structure, its name and the store.

use std::sync::Arc;

use pmem_ordering::Backend;

use super::catalog::Listed;
use super::error::Error;
use super::raw::{RecordTable, RecordTree};
use super::registry::{Core, Shared};
use crate::sync::{WriteSection, WriterGate};

/// A byte-key hash map's shared state.
pub(crate) struct RecordHashCore<B: Backend> {
    pub(super) raw: RecordTable<B>,
    pub(super) name: String,
    /// Keeps the store (heap, file, lock) alive as long as a handle is.
    pub(super) shared: Arc<Shared<B>>,
    /// Keeps single writers out while a write batch holds the map (`batch/`).
    pub(super) gate: WriterGate,
}

impl<B: Backend> Core<B> for RecordHashCore<B> {
    type Raw = RecordTable<B>;
    fn wrap(
        raw: RecordTable<B>,
        _listed: &Listed,
        name: &str,
        shared: Arc<Shared<B>>,
    ) -> Result<Self, Error> {
        Ok(RecordHashCore {
            raw,
            name: name.to_string(),
            shared,
            gate: WriterGate::new(),
        })
    }
    fn raw(&self) -> &RecordTable<B> {
        &self.raw
    }
}

/// A byte-key ordered map's shared state.
pub(crate) struct RecordTreeCore<B: Backend> {
    pub(super) raw: RecordTree<B>,
    pub(super) name: String,
    /// Keeps the store (heap, file, lock) alive as long as a handle is.
    pub(super) shared: Arc<Shared<B>>,
    /// Keeps single writers out while a write batch holds the map (`batch/`).
    pub(super) gate: WriterGate,
}

impl<B: Backend> Core<B> for RecordTreeCore<B> {
    type Raw = RecordTree<B>;
    fn wrap(
        raw: RecordTree<B>,
        _listed: &Listed,
        name: &str,
        shared: Arc<Shared<B>>,
    ) -> Result<Self, Error> {
        Ok(RecordTreeCore {
            raw,
            name: name.to_string(),
            shared,
            gate: WriterGate::new(),
        })
    }
    fn raw(&self) -> &RecordTree<B> {
        &self.raw
    }
}

/// Entering the writer gate of a map of records for a single write.
macro_rules! enter_gate {
    ($core:ident) => {
        impl<B: Backend> $core<B> {
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
