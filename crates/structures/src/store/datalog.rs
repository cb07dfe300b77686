//! The datalog's handle: a named store of files in a [`Store`](super::Store).

use std::ops::Deref;
use std::sync::Arc;

use pmem_ordering::{Backend, Hardware};

use super::catalog::Listed;
use super::error::Error;
use super::raw::Files;
use super::registry::{Core, Shared};

/// A datalog's shared state: the structure and the store it lives in.
pub(crate) struct FilesCore<B: Backend> {
    raw: Files<B>,
    name: String,
    // Keeps the store (and its file lock) alive as long as a handle is.
    _shared: Arc<Shared<B>>,
}

impl<B: Backend> Core<B> for FilesCore<B> {
    type Raw = Files<B>;
    fn wrap(
        raw: Files<B>,
        _listed: &Listed,
        name: &str,
        shared: Arc<Shared<B>>,
    ) -> Result<Self, Error> {
        Ok(FilesCore {
            raw,
            name: name.to_string(),
            _shared: shared,
        })
    }
    fn raw(&self) -> &Files<B> {
        &self.raw
    }
}

/// A persistent store of named files (a NOVA-style datalog, NOVA (FAST'16)), named in a
/// [`Store`](super::Store).
///
/// Dereferences to [`crate::datalog::Datalog`], whose methods it offers (`create_file`,
/// `write_at`, `read_at`, `truncate`, ...). Cheap to clone; `Send + Sync + 'static` for a store
/// on a file.
pub struct Datalog<B: Backend = Hardware> {
    pub(crate) core: Arc<FilesCore<B>>,
}

impl<B: Backend> Datalog<B> {
    /// The datalog's name in its store.
    pub fn name(&self) -> &str {
        &self.core.name
    }
}

impl<B: Backend> Clone for Datalog<B> {
    fn clone(&self) -> Self {
        Datalog {
            core: self.core.clone(),
        }
    }
}

impl<B: Backend> Deref for Datalog<B> {
    type Target = Files<B>;
    fn deref(&self) -> &Files<B> {
        &self.core.raw
    }
}
