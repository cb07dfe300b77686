//! The store's shared state: the heap, the catalog, and the structures open right now.
//!
//! One structure must have one DRAM handle: two `Cceh`s over one root would each take their
//! own locks and corrupt it. So the store remembers the handle it gave out for each catalog
//! entry (weakly: the last clone's drop closes the structure) and gives out clones of it.

use std::any::Any;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use super::catalog::{Catalog, Listed};
use super::error::Error;
use super::name::check_name;
use super::raw::Structure;
use super::types::MapTypes;
use crate::kind::StructureKind;
use crate::verify::Verification;

/// What every handle holds: the heap, the catalog and the open structures.
pub(crate) struct Shared<B: Backend> {
    pub heap: Heap<B>,
    pub path: Option<PathBuf>,
    state: Mutex<State<B>>,
    /// Write batches: the lock, the readers' version, the area.
    pub batches: super::batch_state::Batches,
}

pub(crate) struct State<B: Backend> {
    pub catalog: Catalog,
    open: HashMap<u64, Opened<B>>,
}

/// An open structure's core, as the registry keeps it: weakly (the last clone's drop closes
/// the structure), behind what the registry asks of every kind ([`OpenCore`]), so the registry
/// names none of the handle cores.
pub(crate) struct Opened<B: Backend>(Weak<dyn OpenCore<B>>);

/// What the registry asks of an open core, whatever its kind.
trait OpenCore<B: Backend>: Send + Sync {
    /// The blocks of its structure.
    fn blocks(&self) -> Result<Vec<u64>, Error>;
    /// Its structure verified and its blocks listed.
    fn walk(&self) -> Walked;
    /// As `Any`, for [`Core::recall`] to take it back as its own kind.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<B: Backend, C: Core<B>> OpenCore<B> for C {
    fn blocks(&self) -> Result<Vec<u64>, Error> {
        Structure::blocks(self.raw())
    }
    fn walk(&self) -> Walked {
        walk(self.raw())
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

impl<B: Backend> Opened<B> {
    /// The blocks of the structure, walked through its handle, if a handle is still alive.
    fn live_blocks(&self) -> Option<Result<Vec<u64>, Error>> {
        self.0.upgrade().map(|core| core.blocks())
    }

    /// The structure verified and its blocks listed through its handle, if a handle is still
    /// alive.
    fn live_walk(&self) -> Option<Walked> {
        self.0.upgrade().map(|core| core.walk())
    }

    fn is_live(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// The shared core of a handle of one kind.
pub(crate) trait Core<B: Backend>: Sized + Send + Sync + 'static {
    /// The structure inside.
    type Raw: Structure<B>;
    /// Wrap a structure just opened or created for the entry `listed`.
    fn wrap(
        raw: Self::Raw,
        listed: &Listed,
        name: &str,
        shared: Arc<Shared<B>>,
    ) -> Result<Self, Error>;
    /// The structure inside.
    fn raw(&self) -> &Self::Raw;
    /// The registry's record of it.
    fn record(core: &Arc<Self>) -> Opened<B> {
        let weak: Weak<Self> = Arc::downgrade(core);
        Opened(weak)
    }
    /// The core a record holds, if it is of this kind and alive.
    fn recall(opened: &Opened<B>) -> Option<Arc<Self>> {
        opened.0.upgrade()?.into_any().downcast::<Self>().ok()
    }
}

impl<B: Backend> Shared<B> {
    pub(crate) fn new(heap: Heap<B>, catalog: Catalog, path: Option<PathBuf>) -> Self {
        Shared {
            heap,
            path,
            state: Mutex::new(State {
                catalog,
                open: HashMap::new(),
            }),
            batches: super::batch_state::Batches::default(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State<B>> {
        // A panic while the lock was held left the DRAM copy as it was before the failed
        // change (catalog changes update it only after their transaction commits).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The handle core of `name`: the one already open, else the structure opened from the
    /// catalog, else a new structure made with `config` and listed. `types` are a map's key
    /// and value types (`u64` for other structures), checked against the catalog's; an entry
    /// that predates type fingerprints is given this one (its first open names its types).
    pub(crate) fn open_or_create<C>(
        self: &Arc<Self>,
        name: &str,
        config: <C::Raw as Structure<B>>::Config,
        types: MapTypes,
    ) -> Result<Arc<C>, Error>
    where
        C: Core<B>,
    {
        check_name(name)?;
        let mut state = self.lock();
        let wanted = <C::Raw as Structure<B>>::KIND;
        let (raw, listed) = match state.catalog.find(name) {
            Some(listed) => {
                check_types(name, &listed, wanted, types)?;
                if listed.fingerprint == 0 {
                    state
                        .catalog
                        .record_fingerprint(&self.heap, listed.slot, types.fingerprint)?;
                }
                if let Some(core) = state.open.get(&listed.slot).and_then(C::recall) {
                    return Ok(core);
                }
                (C::Raw::open(&self.heap, listed.root)?, listed)
            }
            None => state.catalog.add(
                &self.heap,
                name,
                wanted,
                types.codes,
                types.fingerprint,
                <C::Raw as Structure<B>>::ROOT_BYTES,
                |root| C::Raw::create(&self.heap, root, config),
            )?,
        };
        let core = Arc::new(C::wrap(raw, &listed, name, self.clone())?);
        state.open.insert(listed.slot, C::record(&core));
        Ok(core)
    }

    /// Remove `name` and free everything it owns; refused while a handle of it is open.
    pub(crate) fn remove(&self, name: &str) -> Result<(), Error> {
        check_name(name)?;
        let mut state = self.lock();
        let listed = state.catalog.find(name).ok_or_else(|| Error::NotFound {
            name: name.to_string(),
        })?;
        if state.open.get(&listed.slot).is_some_and(Opened::is_live) {
            return Err(Error::InUse {
                name: name.to_string(),
            });
        }
        state.open.remove(&listed.slot);
        let blocks = blocks_of(&self.heap, &listed)?;
        match state.catalog.remove(&self.heap, listed.slot, &blocks) {
            // No room for the list of its blocks: empty it first, by its own removes (which
            // allocate nothing), with its entry `Draining` so that a crash finishes the job.
            Err(Error::PoolFull { .. }) if drains::<B>(listed.kind) => {
                state.catalog.mark_draining(&self.heap, listed.slot)?;
                drain_and_remove(&self.heap, &mut state.catalog, &listed)
            }
            other => other,
        }
    }

    /// Finish every removal a crash stopped while it emptied its structure (`Draining`). Run
    /// when the store loads, before anything allocates (the drains only free).
    pub(crate) fn finish_drains(&self) -> Result<(), Error> {
        let mut state = self.lock();
        for listed in state.catalog.draining() {
            drain_and_remove(&self.heap, &mut state.catalog, &listed)?;
        }
        Ok(())
    }

    /// Open every map of records once, so that each resolves what a crash left in doubt
    /// before anything allocates ([`crate::records`]). Run when the store loads, before the
    /// record chunks a crash left empty are trimmed.
    pub(crate) fn resolve_records(&self) -> Result<(), Error> {
        use super::raw::{RecordTable, RecordTree};
        let state = self.lock();
        for (_, listed) in state.catalog.listed() {
            match listed.kind {
                StructureKind::RecordHashMap => {
                    RecordTable::open(&self.heap, listed.root)?;
                }
                StructureKind::RecordBTreeMap => {
                    RecordTree::open(&self.heap, listed.root)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The structure `listed` verified and its blocks listed, with the lock held (`state`):
    /// through its live handle, else through one opened for the walk.
    pub(crate) fn walk_listed(&self, state: &State<B>, listed: &Listed) -> Result<Walked, Error> {
        match state.open.get(&listed.slot).and_then(Opened::live_walk) {
            Some(walked) => Ok(walked),
            None => walk_closed(&self.heap, listed),
        }
    }

    /// Every block each listed structure owns, its root block included, by structure name.
    /// Open structures are walked through their handle, the others opened for the walk.
    pub(crate) fn owned_blocks(&self) -> Result<Vec<(String, Vec<u64>)>, Error> {
        let state = self.lock();
        let mut owned = Vec::new();
        for (name, listed) in state.catalog.listed() {
            let mut blocks = match state.open.get(&listed.slot).and_then(Opened::live_blocks) {
                Some(blocks) => blocks?,
                None => blocks_of(&self.heap, &listed)?,
            };
            blocks.push(listed.root);
            blocks.sort_unstable();
            owned.push((name, blocks));
        }
        Ok(owned)
    }
}

/// A structure's walk for `Store::verify`: its verification, and its blocks (root aside).
pub(crate) type Walked = (Verification, Result<Vec<u64>, Error>);

fn walk<B: Backend, S: Structure<B>>(structure: &S) -> Walked {
    (structure.verify(), structure.blocks())
}

/// [`Walked`] for a structure no handle has open, through a handle made for the walk.
fn walk_closed<B: Backend>(heap: &Heap<B>, listed: &Listed) -> Result<Walked, Error> {
    use super::raw::{Files, HashTable, LeafTree, RecordTable, RecordTree, Tree};
    let root = listed.root;
    Ok(match listed.kind {
        StructureKind::RecordBTreeMap => walk(&RecordTree::open(heap, root)?),
        StructureKind::RecordHashMap => walk(&RecordTable::open(heap, root)?),
        StructureKind::HashMap => walk(&HashTable::open(heap, root)?),
        StructureKind::BTreeMap => walk(&Tree::open(heap, root)?),
        StructureKind::Datalog => walk(&Files::open(heap, root)?),
        StructureKind::LeafMap => walk(&LeafTree::open(heap, root)?),
    })
}

/// Whether structures of `kind` shrink when emptied ([`Structure::DRAINS`]).
fn drains<B: Backend>(kind: StructureKind) -> bool {
    use super::raw::{Files, HashTable, LeafTree, RecordTable, RecordTree, Tree};
    match kind {
        StructureKind::RecordBTreeMap => <RecordTree<B> as Structure<B>>::DRAINS,
        StructureKind::RecordHashMap => <RecordTable<B> as Structure<B>>::DRAINS,
        StructureKind::HashMap => <HashTable<B> as Structure<B>>::DRAINS,
        StructureKind::BTreeMap => <Tree<B> as Structure<B>>::DRAINS,
        StructureKind::Datalog => <Files<B> as Structure<B>>::DRAINS,
        StructureKind::LeafMap => <LeafTree<B> as Structure<B>>::DRAINS,
    }
}

/// Empty the structure `listed` (no handle has it open; its entry is `Draining`) by its own
/// removes, opening it (which recovers it), then remove it.
fn drain_and_remove<B: Backend>(
    heap: &Heap<B>,
    catalog: &mut Catalog,
    listed: &Listed,
) -> Result<(), Error> {
    use super::raw::{Files, HashTable, LeafTree, RecordTable, RecordTree, Tree};
    fn drained<B: Backend, S: Structure<B>>(heap: &Heap<B>, root: u64) -> Result<Vec<u64>, Error> {
        let structure = S::open(heap, root)?;
        structure.drain()?;
        structure.blocks()
    }
    let root = listed.root;
    let blocks = match listed.kind {
        StructureKind::RecordBTreeMap => drained::<B, RecordTree<B>>(heap, root)?,
        StructureKind::RecordHashMap => drained::<B, RecordTable<B>>(heap, root)?,
        StructureKind::HashMap => drained::<B, HashTable<B>>(heap, root)?,
        StructureKind::BTreeMap => drained::<B, Tree<B>>(heap, root)?,
        StructureKind::Datalog => drained::<B, Files<B>>(heap, root)?,
        StructureKind::LeafMap => drained::<B, LeafTree<B>>(heap, root)?,
    };
    catalog.remove(heap, listed.slot, &blocks)
}

/// The blocks of a structure no handle has open, through a handle made for the walk.
fn blocks_of<B: Backend>(heap: &Heap<B>, listed: &Listed) -> Result<Vec<u64>, Error> {
    use super::raw::{Files, HashTable, LeafTree, RecordTable, RecordTree, Tree};
    match listed.kind {
        StructureKind::RecordBTreeMap => Structure::blocks(&RecordTree::open(heap, listed.root)?),
        StructureKind::RecordHashMap => Structure::blocks(&RecordTable::open(heap, listed.root)?),
        StructureKind::HashMap => Structure::blocks(&HashTable::open(heap, listed.root)?),
        StructureKind::BTreeMap => Structure::blocks(&Tree::open(heap, listed.root)?),
        StructureKind::Datalog => Structure::blocks(&Files::open(heap, listed.root)?),
        StructureKind::LeafMap => Structure::blocks(&LeafTree::open(heap, listed.root)?),
    }
}

/// Whether the structure `listed` under `name` is the `wanted` kind with the `types` asked for.
/// A map asked for with other types is a type mismatch, even when the other types would have
/// made it the other kind of map (inline words or records), or when they differ only by the
/// names of plain-data types of the same sizes (the fingerprints; an entry without one, made
/// before fingerprints, is taken at its codes' word).
fn check_types(
    name: &str,
    listed: &Listed,
    wanted: StructureKind,
    types: MapTypes,
) -> Result<(), Error> {
    let family = |kind| match kind {
        StructureKind::RecordHashMap => StructureKind::HashMap,
        StructureKind::RecordBTreeMap | StructureKind::LeafMap => StructureKind::BTreeMap,
        other => other,
    };
    if family(listed.kind) != family(wanted) {
        return Err(Error::KindMismatch {
            name: name.to_string(),
            found: listed.kind,
            wanted,
        });
    }
    let other_names = listed.fingerprint != 0 && listed.fingerprint != types.fingerprint;
    if listed.types != types.codes || listed.kind != wanted || other_names {
        return Err(Error::TypeMismatch {
            name: name.to_string(),
            found_key: listed.types.0,
            found_value: listed.types.1,
            wanted_key: types.codes.0,
            wanted_value: types.codes.1,
            found_fingerprint: listed.fingerprint,
            wanted_fingerprint: types.fingerprint,
        });
    }
    Ok(())
}
