//! The two `u64 -> u64` maps' handles: one contract over CCEH and FAST&FAIR.
//!
//! Each structure keeps one key for itself (CCEH's empty slot is key 0, FAST&FAIR's free slot
//! `u64::MAX`). The handles make every `u64` a key: the reserved one's value lives in the map's
//! catalog entry (a presence word and a value word), written by a small transaction, while
//! every other key keeps the structure's one-fence path.

use std::ops::{Deref, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_utils::atomic::AtomicCell;

use pmem_ordering::{Backend, Hardware, Pool};

use super::catalog::{self, Listed};
use super::entries::{BTreeEntries, Entries, HashEntries};
use super::error::Error;
use super::raw::{HashTable, Structure, Tree};
use super::registry::{Core, Opened, Shared};
use crate::fastfair::FastFairConfig;
use crate::U64Map;

/// A map's shared state: the structure, the reserved key's value, and the store.
pub(crate) struct MapCore<S, B: Backend, P: Deref<Target = Pool<B>>> {
    raw: S,
    /// The reserved key's value, as the catalog entry holds it: read without a lock (a
    /// lookup or a scan costs one optimistic read), written only under `reserved_writer`.
    reserved: AtomicCell<Option<u64>>,
    /// Orders the writes of the reserved key (each persists before it is published).
    reserved_writer: Mutex<()>,
    entry: u64,
    name: String,
    shared: Arc<Shared<B, P>>,
}

pub(crate) type HashCore<B, P> = MapCore<HashTable<B, P>, B, P>;
pub(crate) type TreeCore<B, P> = MapCore<Tree<B, P>, B, P>;

impl<S, B, P> MapCore<S, B, P>
where
    S: Structure<B, P> + U64Map,
    Error: From<S::Error>,
    B: Backend,
    P: Deref<Target = Pool<B>>,
{
    fn new(raw: S, listed: &Listed, name: &str, shared: Arc<Shared<B, P>>) -> Result<Self, Error> {
        let entry = listed.entry;
        let reserved = catalog::read_side(shared.heap.pool(), entry)?;
        Ok(MapCore {
            raw,
            reserved: AtomicCell::new(reserved),
            reserved_writer: Mutex::new(()),
            entry,
            name: name.to_string(),
            shared,
        })
    }

    /// The reserved key's value now.
    fn reserved(&self) -> Option<u64> {
        self.reserved.load()
    }

    /// Serialise a write of the reserved key.
    fn reserved_write(&self) -> MutexGuard<'_, ()> {
        // The value is published only after its transaction commits: a panic cannot leave it
        // ahead of the pool.
        self.reserved_writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Persist the reserved key's new value (one transaction), then publish it in DRAM.
    fn set_reserved(&self, value: Option<u64>) -> Result<(), Error> {
        self.shared
            .heap
            .transaction(|tx| catalog::write_side(tx, self.entry, value))?;
        self.reserved.store(value);
        Ok(())
    }

    fn get(&self, key: u64) -> Result<Option<u64>, Error> {
        if key == S::RESERVED_KEY {
            return Ok(self.reserved());
        }
        Ok(self.raw.get(key)?)
    }

    fn insert(&self, key: u64, value: u64) -> Result<bool, Error> {
        if key != S::RESERVED_KEY {
            return Ok(self.raw.insert(key, value)?);
        }
        let _writer = self.reserved_write();
        if self.reserved().is_some() {
            return Ok(false);
        }
        self.set_reserved(Some(value))?;
        Ok(true)
    }

    fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, Error> {
        if key != S::RESERVED_KEY {
            return Ok(self.raw.upsert(key, value)?);
        }
        let _writer = self.reserved_write();
        let old = self.reserved();
        self.set_reserved(Some(value))?;
        Ok(old)
    }

    fn remove(&self, key: u64) -> Result<Option<u64>, Error> {
        if key != S::RESERVED_KEY {
            return Ok(self.raw.remove(key)?);
        }
        let _writer = self.reserved_write();
        let old = self.reserved();
        if old.is_some() {
            self.set_reserved(None)?;
        }
        Ok(old)
    }

    fn len(&self) -> u64 {
        self.raw.len() + u64::from(self.reserved().is_some())
    }

    fn check(&self) -> Result<u64, Error> {
        Ok(self.raw.check()? + u64::from(self.reserved().is_some()))
    }
}

macro_rules! map_core {
    ($core:ident, $raw:ident, $variant:ident) => {
        impl<B: Backend, P: Deref<Target = Pool<B>>> Core<B, P> for $core<B, P> {
            type Raw = $raw<B, P>;
            fn wrap(
                raw: $raw<B, P>,
                listed: &Listed,
                name: &str,
                shared: Arc<Shared<B, P>>,
            ) -> Result<Self, Error> {
                MapCore::new(raw, listed, name, shared)
            }
            fn record(core: &Arc<Self>) -> Opened<B, P> {
                Opened::$variant(Arc::downgrade(core))
            }
            fn recall(opened: &Opened<B, P>) -> Option<Arc<Self>> {
                match opened {
                    Opened::$variant(weak) => weak.upgrade(),
                    _ => None,
                }
            }
            fn raw(&self) -> &$raw<B, P> {
                &self.raw
            }
        }
    };
}

map_core!(HashCore, HashTable, HashMap);
map_core!(TreeCore, Tree, BTreeMap);

/// The methods both maps share, with the same names, arguments and meaning.
macro_rules! map_methods {
    () => {
        /// The value of `key`.
        pub fn get(&self, key: u64) -> Result<Option<u64>, Error> {
            self.core.get(key)
        }

        /// Insert `key -> value` if `key` is absent: `true` if inserted, `false` (and nothing
        /// changed) if present. Durable when it returns.
        pub fn insert(&self, key: u64, value: u64) -> Result<bool, Error> {
            self.core.insert(key, value)
        }

        /// Set `key -> value` whether or not `key` is present; the old value if it was.
        /// Durable when it returns.
        pub fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, Error> {
            self.core.upsert(key, value)
        }

        /// Remove `key`; its value if it was present. Durable when it returns.
        pub fn remove(&self, key: u64) -> Result<Option<u64>, Error> {
            self.core.remove(key)
        }

        /// How many keys the map holds.
        pub fn len(&self) -> u64 {
            self.core.len()
        }

        /// Whether the map holds no key.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// Walk the whole structure and check every invariant it can; the number of keys.
        /// Changes nothing.
        pub fn check(&self) -> Result<u64, Error> {
            self.core.check()
        }

        /// The map's name in its store.
        pub fn name(&self) -> &str {
            &self.core.name
        }
    };
}

/// A persistent hash map from `u64` to `u64` (CCEH, FAST'19 CCEH), named in a [`Store`].
///
/// Cheap to clone; `Send + Sync + 'static` for a store on a file, so clones go to threads,
/// tasks and a service's state. Every `u64` is a key. Each write is durable when it returns;
/// lookups take no lock.
///
/// [`Store`]: super::Store
pub struct HashMap<B: Backend = Hardware, P: Deref<Target = Pool<B>> = Arc<Pool<B>>> {
    pub(crate) core: Arc<HashCore<B, P>>,
}

/// A persistent ordered map from `u64` to `u64` (FAST&FAIR, FAST'18 FAST&FAIR), named in a
/// [`Store`].
///
/// Cheap to clone; `Send + Sync + 'static` for a store on a file. Every `u64` is a key. Each
/// write is durable when it returns; lookups and scans take no lock.
///
/// [`Store`]: super::Store
pub struct BTreeMap<B: Backend = Hardware, P: Deref<Target = Pool<B>> = Arc<Pool<B>>> {
    pub(crate) core: Arc<TreeCore<B, P>>,
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Clone for HashMap<B, P> {
    fn clone(&self) -> Self {
        HashMap {
            core: self.core.clone(),
        }
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Clone for BTreeMap<B, P> {
    fn clone(&self) -> Self {
        BTreeMap {
            core: self.core.clone(),
        }
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> HashMap<B, P> {
    map_methods!();

    /// Every `(key, value)`, in no particular order, each `Ok` (or an error that ends the
    /// walk): a snapshot of each segment as it is read, so a write concurrent with the walk
    /// may or may not be seen.
    pub fn iter(&self) -> HashEntries {
        let reserved = <HashTable<B, P> as U64Map>::RESERVED_KEY;
        let last = self.core.reserved().map(|value| (reserved, value));
        Entries::new(self.core.raw.iter(), last)
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> BTreeMap<B, P> {
    map_methods!();

    /// The node size and shift policy the tree was created with (recorded in the store).
    pub fn config(&self) -> FastFairConfig {
        FastFairConfig {
            node_size: self.core.raw.node_size(),
            policy: self.core.raw.policy(),
        }
    }

    /// Every `(key, value)` in key order, each `Ok` (or an error that ends the walk).
    pub fn iter(&self) -> BTreeEntries<'_, B, P> {
        self.range(..)
    }

    /// The `(key, value)`s with keys in `range`, in key order, each `Ok` (or an error that
    /// ends the walk). Read leaf by leaf without a lock: a scan beside writers sees every key
    /// present for its whole duration, and each key once.
    pub fn range<R: RangeBounds<u64>>(&self, range: R) -> BTreeEntries<'_, B, P> {
        // The tree's reserved key is the largest: it comes last.
        let reserved = <Tree<B, P> as U64Map>::RESERVED_KEY;
        let last = match self.core.reserved() {
            Some(value) if range.contains(&reserved) => Some((reserved, value)),
            _ => None,
        };
        Entries::new(self.core.raw.range(range), last)
    }
}
