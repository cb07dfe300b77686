//! The datalog's handle: a named store of files in a [`Store`](super::Store).

use std::ops::Deref;
use std::sync::Arc;

use pmem_ordering::{Backend, Hardware, Pool};

use super::catalog::Listed;
use super::error::Error;
use super::raw::Files;
use super::registry::{Core, Opened, Shared};

/// A datalog's shared state: the structure and the store it lives in.
pub(crate) struct FilesCore<B: Backend, P: Deref<Target = Pool<B>>> {
    raw: Files<B, P>,
    name: String,
    // Keeps the store (and its file lock) alive as long as a handle is.
    _shared: Arc<Shared<B, P>>,
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Core<B, P> for FilesCore<B, P> {
    type Raw = Files<B, P>;
    fn wrap(
        raw: Files<B, P>,
        _listed: &Listed,
        name: &str,
        shared: Arc<Shared<B, P>>,
    ) -> Result<Self, Error> {
        Ok(FilesCore {
            raw,
            name: name.to_string(),
            _shared: shared,
        })
    }
    fn record(core: &Arc<Self>) -> Opened<B, P> {
        Opened::Datalog(Arc::downgrade(core))
    }
    fn recall(opened: &Opened<B, P>) -> Option<Arc<Self>> {
        match opened {
            Opened::Datalog(weak) => weak.upgrade(),
            _ => None,
        }
    }
    fn raw(&self) -> &Files<B, P> {
        &self.raw
    }
}

/// A persistent store of named files (a NOVA-style datalog, NOVA (FAST'16)), named in a
/// [`Store`](super::Store).
///
/// Dereferences to [`crate::datalog::Datalog`], whose methods it offers (`create_file`,
/// `write_at`, `read_at`, `truncate`, ...). Cheap to clone; `Send + Sync + 'static` for a store
/// on a file.
pub struct Datalog<B: Backend = Hardware, P: Deref<Target = Pool<B>> = Arc<Pool<B>>> {
    pub(crate) core: Arc<FilesCore<B, P>>,
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Datalog<B, P> {
    /// The datalog's name in its store.
    pub fn name(&self) -> &str {
        &self.core.name
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Clone for Datalog<B, P> {
    fn clone(&self) -> Self {
        Datalog {
            core: self.core.clone(),
        }
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Deref for Datalog<B, P> {
    type Target = Files<B, P>;
    fn deref(&self) -> &Files<B, P> {
        &self.core.raw
    }
}
