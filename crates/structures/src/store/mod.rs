//! The `Store`: one pool file, a catalog of named structures, owned handles.
//!
//! ```no_run
//! use pmem_structures::{Store, StoreOptions};
//!
//! # fn main() -> Result<(), pmem_structures::Error> {
//! let store = Store::open_or_create("/dev/shm/example.pool", 64 << 20, &StoreOptions::new())?;
//! let users = store.hash_map::<u64, u64>("users")?;
//! users.insert(42, 7)?;
//! assert_eq!(users.get(42)?, Some(7));
//! # Ok(())
//! # }
//! ```
//!
//! * `mod.rs`: [`Store`] (create, open, names, removal, check).
//! * `options`: [`StoreOptions`], and what each granularity costs.
//! * `catalog/`: the persistent catalog (layout, crash-safe removal).
//! * `registry`: the heap, the catalog and the structures open now, shared by every handle.
//! * `raw`: the structures behind the handles, seen through one interface.
//! * `hash_map`, `btree_map`: [`HashMap`] and [`BTreeMap`], typed handles with one contract;
//!   `handle_methods`: the methods both share; `types`: the key and value types and their
//!   encodings; `codec`: typed keys and values to and from what the structures hold; `map`:
//!   the state of maps of `u64` words (CCEH, FAST&FAIR) and `entries`, their iterators;
//!   `encoded_range`: the ordered map's borrowed scan ([`EncodedRange`]);
//!   `record_map`: the state of maps of records ([`crate::records`]).
//! * `tree_layout`: [`BTreeLayout`], how a new ordered map keeps its pairs; `leaf_tree`: the
//!   state and scans of an ordered map of the leaf layout ([`crate::leafmap`]).
//! * `datalog`: [`Datalog`], a named file store.
//! * `batch/`: [`WriteBatch`], writes to any of the maps made durable and visible together;
//!   `batch_state/`: the write-batch area (the log's bytes and recovery) and the batch lock.
//! * `name`, `error`: valid names; the one [`Error`] type.
//! * `space`: what the store tells about itself ([`Store::space`], [`Store::granularity`],
//!   [`thread_persist_counts`]) without handing out its engine.
//! * `verify`: [`Store::verify`] and [`verify_pool`] for a file; `findings`, what they report.
//!
//! A store holds its pool file open, and the file's lock (a second open, from this process or
//! another, is refused with [`PoolError::AlreadyOpen`](pmem_ordering::PoolError)), until the
//! store and every handle made from it are dropped.

mod batch;
mod batch_state;
mod btree_map;
mod catalog;
mod codec;
mod datalog;
mod encoded_range;
mod entries;
mod error;
mod findings;
mod handle_methods;
mod hash_map;
mod leaf_tree;
mod map;
mod name;
mod options;
pub(crate) mod raw;
mod record_map;
mod registry;
mod space;
mod tree_layout;

pub mod types;
mod verify;

use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use pmem_ordering::{Backend, Hardware, Pool, PoolError};
use pmem_undo_log::{Heap, TxError};

pub use batch::{WriteBatch, MAX_BATCH_CHANGES};
pub use btree_map::{BTreeIter, BTreeMap};
pub use catalog::MAX_NAME_BYTES;
pub use datalog::Datalog;
pub use encoded_range::EncodedRange;
pub use entries::{BTreeEntries, Entries, HashEntries};
pub use error::Error;
pub use findings::{StoreFinding, StoreProblem, StoreVerification, StructureVerification};
pub use hash_map::{HashIter, HashMap};
pub use options::{StoreOptions, MAX_STRUCTURES};
pub use space::{thread_persist_counts, PersistCounts, Space};
pub use tree_layout::BTreeLayout;
pub use types::LentPair;
pub use verify::verify_pool;

use self::btree_map::TreeRepr;
use self::catalog::Catalog;
use self::hash_map::HashRepr;
use self::registry::Shared;
use self::types::{Key, Value};
use crate::cceh::CcehConfig;
use crate::datalog::DatalogConfig;
use crate::kind::StructureKind;

/// Whether an open's error says the file provably never finished creation (and may be made
/// again by [`Store::open_or_create`], once [`Pool::claim_unfinished`] proves it under lock).
fn never_finished(e: &Error) -> bool {
    matches!(
        e,
        Error::Incomplete { .. }
            | Error::Pool(PoolError::Incomplete { .. })
            | Error::Pool(PoolError::TooShort { len: 0, .. })
    )
}

/// The error for a store pool whose heap superblock reads all zero: [`Error::Incomplete`] if
/// nothing past the pool's header was ever written (creation stopped before the heap), damage
/// otherwise, since the heap then holds data no open may format over.
fn unformatted_heap(pool: &Pool, path: &Path) -> Error {
    let mut chunk = vec![0u8; 1 << 20];
    let mut at = pool.root_offset();
    let mut written = false;
    while at < pool.size() && !written {
        let n = chunk.len().min((pool.size() - at) as usize);
        if pool.read_bytes(at, &mut chunk[..n]).is_err() {
            written = true;
            break;
        }
        written = chunk[..n].iter().any(|&b| b != 0);
        at += n as u64;
    }
    if written {
        Error::Heap(TxError::BadSuperblock {
            reason: "it is all zero, but the pool holds data after it: the superblock was \
                     damaged (or an earlier build's creation of the store was interrupted); \
                     the file was not changed"
                .into(),
        })
    } else {
        Error::Incomplete {
            path: path.to_path_buf(),
        }
    }
}

/// The layout name of a store's pool file.
pub const STORE_LAYOUT: &str = "pmem-store";

/// One pool file holding named persistent structures.
///
/// `Store` is cheap to clone and `Send + Sync + 'static` (for a store on a file), like the
/// handles it gives out. The pool file stays open, and locked, until the store and all its
/// handles are dropped.
pub struct Store<B: Backend = Hardware> {
    shared: Arc<Shared<B>>,
}

impl<B: Backend> Clone for Store<B> {
    fn clone(&self) -> Self {
        Store {
            shared: self.shared.clone(),
        }
    }
}

impl Store {
    /// Create a store of `size` bytes in a new file at `path`. Refused if the file exists.
    ///
    /// The path names the file only once the store in it is whole: the pool is made
    /// unpublished, its heap and catalog formatted, then published with no-replace semantics
    /// ([`Pool::publish`]). So a refused or failed create leaves nothing at the path, and a
    /// create racing another one for the path gets [`PoolError::AlreadyExists`] from whichever
    /// publishes second.
    pub fn create(
        path: impl AsRef<Path>,
        size: u64,
        options: &StoreOptions,
    ) -> Result<Store, Error> {
        let path = path.as_ref();
        let pool = Pool::create_unpublished(path, STORE_LAYOUT, size, &options.pool_options()?)?;
        let store = Store::format(Arc::new(pool), options)?;
        store.shared.heap.pool().publish()?;
        Ok(store)
    }

    /// Open the store in the file at `path`, with the granularity detected from the file.
    /// Everything else it needs is read from the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, Error> {
        Store::open_with(path, &StoreOptions::new())
    }

    /// Open the store at `path`; of `options`, only the granularity applies (everything the
    /// store records is read from the file).
    ///
    /// An open formats nothing: a heap or catalog it cannot read is refused with a typed error
    /// ([`Error::Incomplete`] for a file whose creation provably never finished, which
    /// [`Store::open_or_create`] makes again; [`Error::Heap`] or [`Error::CorruptCatalog`] for
    /// damage), and the file is left as it was.
    pub fn open_with(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Store, Error> {
        let path = path.as_ref();
        let pool =
            Pool::open(path, STORE_LAYOUT, &options.pool_options()?).map_err(|e| match e {
                PoolError::LayoutMismatch { found, .. } => Error::NotAStore {
                    path: path.to_path_buf(),
                    layout: found,
                    expected: STORE_LAYOUT,
                },
                other => Error::Pool(other),
            })?;
        let pool = Arc::new(pool);
        let heap = Heap::open(pool.clone()).map_err(|e| match e {
            TxError::NotFormatted => unformatted_heap(&pool, path),
            other => Error::from(other),
        })?;
        drop(pool);
        Store::load(heap)
    }

    /// Open the store at `path`, or create it (`size` bytes, `options`) if there is no file,
    /// or in place of a file whose creation provably never finished (one an earlier build
    /// left: empty, or a store's pool header and nothing but zeros after it). Any other file
    /// that does not open is refused as [`Store::open_with`] refuses it, and left as it was.
    ///
    /// Callers racing on one path end with one store there: each gets it or
    /// [`PoolError::AlreadyOpen`] while another holds it, never a half-made file.
    pub fn open_or_create(
        path: impl AsRef<Path>,
        size: u64,
        options: &StoreOptions,
    ) -> Result<Store, Error> {
        let path = path.as_ref();
        // Each pass that does not return found the path changed by another caller (a file
        // published, replaced or removed between two steps): look again, a few times.
        let mut passes = 0;
        loop {
            passes += 1;
            match Store::create(path, size, options) {
                Err(Error::Pool(PoolError::AlreadyExists { .. })) => {}
                other => return other,
            }
            match Store::open_with(path, options) {
                Err(Error::Pool(PoolError::NotFound { .. })) if passes < 4 => {}
                Err(e) if never_finished(&e) => {
                    if let Some(store) = Store::create_over_unfinished(path, size, options)? {
                        return Ok(store);
                    }
                    // Not unfinished (any more): another caller replaced it, or it is a file
                    // that must not be replaced; the next pass tells which.
                    if passes >= 4 {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// A new store in place of the file at `path` if it provably never finished creation
    /// ([`Pool::claim_unfinished`]); `None` if it is not such a file or another file took its
    /// place meanwhile.
    fn create_over_unfinished(
        path: &Path,
        size: u64,
        options: &StoreOptions,
    ) -> Result<Option<Store>, Error> {
        let Some(unfinished) = Pool::claim_unfinished(path, STORE_LAYOUT)? else {
            return Ok(None);
        };
        let pool = Pool::create_replacement(path, STORE_LAYOUT, size, &options.pool_options()?)?;
        let store = Store::format(Arc::new(pool), options)?;
        match store.shared.heap.pool().publish_over(unfinished) {
            Ok(()) => Ok(Some(store)),
            Err(PoolError::AlreadyExists { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A store of `size` bytes in anonymous memory, gone when dropped: for tests.
    pub fn anonymous(size: u64, options: &StoreOptions) -> Result<Store, Error> {
        let pool = Pool::anonymous(STORE_LAYOUT, size, &options.pool_options()?)?;
        Store::format(Arc::new(pool), options)
    }
}

impl<B: Backend> Store<B> {
    /// Make a store in `pool` (a fresh pool, such as a simulated one for crash tests): format
    /// its heap with the options' fence policy and shape, then an empty catalog filling the
    /// pool's root object.
    pub fn format(
        pool: impl Into<Arc<Pool<B>>>,
        options: &StoreOptions,
    ) -> Result<Store<B>, Error> {
        let heap = Heap::create(pool, options.heap, options.fence_policy)?;
        let catalog = Catalog::format(&heap)?;
        let path = heap.pool().path().map(Path::to_path_buf);
        Ok(Store {
            shared: Arc::new(Shared::new(heap, catalog, path)),
        })
    }

    /// Open the store on `heap` (recovered by [`Heap::open`]): read the catalog, finish any
    /// removal a crash interrupted, and open every map of records once so that it resolves
    /// the writes a crash left in doubt before anything allocates ([`crate::records`]). An
    /// ordered map of records walks its layers to open, so a store with large ones takes time
    /// in proportion to their records to load.
    pub fn load(heap: Heap<B>) -> Result<Store<B>, Error> {
        let catalog = Catalog::open(&heap)?;
        // A write batch a crash cut short after its commit point: its bytes go back in before
        // any structure opens (`batch_state/area.rs`, "Recovery").
        let area = match catalog.batch_area() {
            Some(offset) => Some(batch_state::Area::open(&heap, offset)?),
            None => None,
        };
        let committed = match area {
            Some(area) => area.committed(heap.pool())?,
            None => None,
        };
        if let Some(committed) = &committed {
            batch_state::Area::copy_in(heap.pool(), committed)?;
        }
        let path = heap.pool().path().map(Path::to_path_buf);
        let shared = Arc::new(Shared::new(heap, catalog, path));
        // Before anything allocates: removals a crash stopped while they emptied their
        // structure (they only free), then what a crash left in doubt in the maps of records,
        // then the blocks of the batch, then the record chunks a crash left empty go back.
        shared.finish_drains()?;
        shared.resolve_records()?;
        if let (Some(area), Some(committed)) = (area, &committed) {
            batch_state::Area::resolve_blocks(&shared.heap, committed)?;
            area.clear_freeing(&shared.heap, &committed.frees, committed.freed as usize)?;
        }
        shared.heap.trim_record_chunks()?;
        if let Some(area) = area {
            shared.batches.set_area(area);
        }
        Ok(Store { shared })
    }

    /// The hash map named `name` from `K` to `V`: the one in the store (which must have been
    /// created with these types: [`Error::TypeMismatch`] otherwise), or a new empty one with
    /// the default configuration (16 KiB segments).
    ///
    /// ```no_run
    /// # use pmem_structures::{Store, StoreOptions};
    /// # fn main() -> Result<(), pmem_structures::Error> {
    /// # let store = Store::anonymous(64 << 20, &StoreOptions::new())?;
    /// let users = store.hash_map::<String, Vec<u8>>("users")?;
    /// users.insert("alice", b"{\"plan\":\"pro\"}")?;
    /// let counters = store.hash_map::<u64, u64>("counters")?;
    /// counters.upsert(7u64, 1u64)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn hash_map<K: Key, V: Value>(&self, name: &str) -> Result<HashMap<K, V, B>, Error> {
        self.hash_map_with(name, CcehConfig::default())
    }

    /// The hash map named `name` from `K` to `V`; `config` shapes it if it is new (an existing
    /// map keeps the configuration it was created with, recorded in the store).
    pub fn hash_map_with<K: Key, V: Value>(
        &self,
        name: &str,
        config: CcehConfig,
    ) -> Result<HashMap<K, V, B>, Error> {
        let types = types::MapTypes::of::<K, V>();
        let repr = if types::inline::<K, V>() {
            HashRepr::Words(self.shared.open_or_create(name, config, types)?)
        } else {
            HashRepr::Records(self.shared.open_or_create(name, config, types)?)
        };
        Ok(HashMap {
            repr,
            types: PhantomData,
        })
    }

    /// The ordered map named `name` from `K` to `V`: the one in the store (which must have
    /// been created with these types: [`Error::TypeMismatch`] otherwise), or a new empty one
    /// of the default layout ([`BTreeLayout::Trees`]: FAST&FAIR's 512-byte nodes, FAST
    /// shifts).
    ///
    /// ```no_run
    /// # use pmem_structures::{Store, StoreOptions};
    /// # fn main() -> Result<(), pmem_structures::Error> {
    /// # let store = Store::anonymous(64 << 20, &StoreOptions::new())?;
    /// let orders = store.btree_map::<u64, u64>("orders")?;
    /// orders.insert(42u64, 7u64)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn btree_map<K: Key, V: Value>(&self, name: &str) -> Result<BTreeMap<K, V, B>, Error> {
        self.btree_map_with(name, BTreeLayout::default())
    }

    /// The ordered map named `name` from `K` to `V`; `layout` shapes it if it is new: a
    /// [`FastFairConfig`](crate::FastFairConfig) (node size, shift policy) for the default
    /// layout of trees, or [`BTreeLayout::Leaves`] for pairs inline in leaves (see
    /// [`BTreeLayout`] for which to choose). An existing map opens with the layout and
    /// configuration recorded in the store, whatever `layout` asks (see
    /// [`BTreeMap::layout`]), and must have been created with these types
    /// ([`Error::TypeMismatch`] otherwise).
    ///
    /// ```
    /// # use pmem_structures::{BTreeLayout, Store, StoreOptions};
    /// # fn main() -> Result<(), pmem_structures::Error> {
    /// # let store = Store::anonymous(16 << 20, &StoreOptions::new())?;
    /// let events = store.btree_map_with::<String, Vec<u8>>("events", BTreeLayout::leaves())?;
    /// events.insert("2026-11-29T17:00:00Z", b"deploy")?;
    /// assert_eq!(events.layout(), BTreeLayout::leaves());
    /// // Opened again with the default: still the map of leaves.
    /// assert_eq!(store.btree_map::<String, Vec<u8>>("events")?.layout(), BTreeLayout::leaves());
    /// # Ok(())
    /// # }
    /// ```
    pub fn btree_map_with<K: Key, V: Value>(
        &self,
        name: &str,
        layout: impl Into<BTreeLayout>,
    ) -> Result<BTreeMap<K, V, B>, Error> {
        let types = types::MapTypes::of::<K, V>();
        let layout = layout.into();
        // Twice at most: a map another thread makes between the look-up and the open is
        // opened as it was made.
        let mut passes = 0;
        loop {
            passes += 1;
            let listed = self.shared.lock().catalog.find(name).map(|l| l.kind);
            // An ordered map listed opens as it was made; a name listed as another kind is
            // refused naming the kind asked for.
            let leaves = match listed {
                Some(StructureKind::LeafMap) => true,
                Some(StructureKind::BTreeMap | StructureKind::RecordBTreeMap) => false,
                _ => matches!(layout, BTreeLayout::Leaves(_)),
            };
            let opened = match leaves {
                true => {
                    let config = match layout {
                        BTreeLayout::Leaves(config) => config,
                        BTreeLayout::Trees(_) => Default::default(),
                    };
                    self.shared
                        .open_or_create(name, config, types)
                        .map(TreeRepr::Leaves)
                }
                false => {
                    let config = match layout {
                        BTreeLayout::Trees(config) => config,
                        BTreeLayout::Leaves(_) => Default::default(),
                    };
                    if types::inline::<K, V>() {
                        self.shared
                            .open_or_create(name, config, types)
                            .map(TreeRepr::Words)
                    } else {
                        self.shared
                            .open_or_create(name, config, types)
                            .map(TreeRepr::Records)
                    }
                }
            };
            let kind_now = || self.shared.lock().catalog.find(name).map(|l| l.kind);
            match opened {
                Ok(repr) => {
                    return Ok(BTreeMap {
                        repr,
                        types: PhantomData,
                    })
                }
                Err(Error::TypeMismatch { .. }) if passes < 2 && kind_now() != listed => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// The file store named `name`; `config` (write policy, file limit) shapes it if it is new
    /// (an existing one keeps the configuration recorded in the store).
    pub fn datalog(&self, name: &str, config: DatalogConfig) -> Result<Datalog<B>, Error> {
        let untyped = types::MapTypes::of::<u64, u64>();
        Ok(Datalog {
            core: self.shared.open_or_create(name, config, untyped)?,
        })
    }

    /// The names of the structures in the store, sorted.
    pub fn names(&self) -> Vec<String> {
        self.structures()
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    /// The structures in the store with their kinds, sorted by name.
    pub fn structures(&self) -> Vec<(String, StructureKind)> {
        self.shared.lock().catalog.list()
    }

    /// How many names the catalog can hold (fixed at create).
    pub fn capacity(&self) -> u64 {
        self.shared.lock().catalog.capacity()
    }

    /// Remove the structure named `name` and free every block it owned. Refused with
    /// [`Error::InUse`] while a handle of it is open, [`Error::NotFound`] if there is none,
    /// [`Error::InvalidName`] for a name no structure can have.
    /// Crash-safe: a removal a crash interrupts is finished by the next open. It allocates
    /// nothing when the list of the structure's other blocks fits in its largest block (always
    /// for a `u64` hash map, whose directory has a word per segment, while the list fits a
    /// transaction's log: tables of up to about 8,000 segments with the default 64 KiB log);
    /// otherwise the list takes small fresh blocks. On a pool too full for those, the
    /// structure is first emptied by its own removes, which allocate nothing (its name is gone
    /// from then on, and a crash meanwhile is finished by the next open), then removed: every
    /// kind but the `u64` hash map, whose removes free nothing, is removed this way on a full
    /// pool. A `u64` hash map too large for its directory to hold its list in one transaction
    /// is refused on a full pool with [`Error::PoolFull`], changing nothing.
    pub fn remove_structure(&self, name: &str) -> Result<(), Error> {
        self.shared.remove(name)
    }

    /// Every heap block each structure owns (its root block included), by name: with the
    /// heap's own walk, the proof that nothing leaked.
    pub fn owned_blocks(&self) -> Result<Vec<(String, Vec<u64>)>, Error> {
        self.shared.owned_blocks()
    }

    /// Check that the heap's allocated blocks are exactly the blocks the structures own
    /// (nothing leaked, nothing shared): returns how many there are, or names the difference.
    pub fn check_blocks(&self) -> Result<u64, Error> {
        let mut owned = self.owned_blocks()?;
        owned.extend(self.store_blocks());
        let allocated = self.shared.heap.check_heap()?;
        let (findings, _) = verify::reachability(&allocated, &owned, true);
        if !findings.is_empty() {
            let differences: Vec<String> = findings
                .iter()
                .map(|f| format!("at {:#x}: {}", f.offset, f.problem))
                .collect();
            return Err(Error::CorruptCatalog {
                reason: format!(
                    "the heap's blocks differ from the structures' blocks: {}",
                    differences.join("; ")
                ),
            });
        }
        Ok(allocated.len() as u64)
    }

    /// The store's own blocks besides the structures': the write-batch area, once made (as
    /// `check_blocks` and `verify` list it).
    pub(crate) fn store_blocks(&self) -> Vec<(String, Vec<u64>)> {
        let area = self.shared.lock().catalog.batch_area();
        area.map(|a| ("(the store's write-batch area)".to_string(), vec![a]))
            .into_iter()
            .collect()
    }

    /// The pool file's path (`None` for an anonymous or simulated store).
    pub fn path(&self) -> Option<&Path> {
        self.shared.path.as_deref()
    }
}
