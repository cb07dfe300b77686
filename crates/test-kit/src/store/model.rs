//! The store's expected state: [`StoreModel`] (names with their kinds and pairs, and the names
//! whose handles the driver holds), the [`Refusal`]s it predicts, and [`StoreOp`]'s effect on it.

use std::collections::{BTreeMap, BTreeSet};

use pmem_structures::{Error, StructureKind};

use super::{NameId, StoreOp, CATALOG_CAPACITY};
use crate::ModelOp;

/// What the store holds under one name: its kind and, for a map, its pairs.
pub type Listing = (StructureKind, BTreeMap<u64, u64>);

/// Names to listings: what a store holds, and what a recovered one must hold.
pub type Catalog = BTreeMap<String, Listing>;

/// What a store must hold, and which names the driver holds handles of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreModel {
    /// The structures, by name.
    pub catalog: Catalog,
    /// The names with a live handle (removal is refused with `InUse`).
    pub live: BTreeSet<String>,
}

/// An error the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `Error::InvalidName`.
    InvalidName,
    /// `Error::CatalogFull` (with [`CATALOG_CAPACITY`]).
    CatalogFull,
    /// `Error::KindMismatch`.
    KindMismatch {
        /// The kind listed.
        found: StructureKind,
        /// The kind asked for.
        wanted: StructureKind,
    },
    /// `Error::NotFound`.
    NotFound,
    /// `Error::InUse`.
    InUse,
}

impl Refusal {
    /// Whether `error` is this refusal of `name`.
    pub fn is(self, name: &str, error: &Error) -> bool {
        match (self, error) {
            (Refusal::InvalidName, Error::InvalidName { name: n, .. })
            | (Refusal::NotFound, Error::NotFound { name: n })
            | (Refusal::InUse, Error::InUse { name: n }) => n == name,
            (Refusal::CatalogFull, Error::CatalogFull { capacity }) => {
                *capacity == CATALOG_CAPACITY
            }
            (
                Refusal::KindMismatch { found, wanted },
                Error::KindMismatch {
                    name: n,
                    found: f,
                    wanted: w,
                },
            ) => n == name && *f == found && *w == wanted,
            _ => false,
        }
    }
}

impl StoreModel {
    /// What opening `name` as `kind` gives.
    pub fn open_outcome(&self, name: NameId, kind: StructureKind) -> Result<(), Refusal> {
        if !name.is_valid() {
            return Err(Refusal::InvalidName);
        }
        match self.catalog.get(name.name()) {
            Some(&(found, _)) if family(found) != family(kind) => Err(Refusal::KindMismatch {
                found,
                wanted: kind,
            }),
            Some(_) => Ok(()),
            None if self.catalog.len() as u64 >= CATALOG_CAPACITY => Err(Refusal::CatalogFull),
            None => Ok(()),
        }
    }

    /// What `remove_structure(name)` gives. (The store looks an invalid name up like any
    /// other: it finds none.)
    pub fn remove_outcome(&self, name: NameId) -> Result<(), Refusal> {
        if !name.is_valid() {
            Err(Refusal::InvalidName)
        } else if !self.catalog.contains_key(name.name()) {
            Err(Refusal::NotFound)
        } else if self.live.contains(name.name()) {
            Err(Refusal::InUse)
        } else {
            Ok(())
        }
    }

    /// The kind of the map named `name`, if the store lists one.
    pub fn map_kind(&self, name: NameId) -> Option<StructureKind> {
        match self.catalog.get(name.name()) {
            Some(&(kind, _)) if kind != StructureKind::Datalog => Some(kind),
            _ => None,
        }
    }

    fn map_mut(&mut self, name: NameId) -> Option<&mut BTreeMap<u64, u64>> {
        self.map_kind(name)?;
        // A map operation opens the map's handle, which the driver keeps.
        self.live.insert(name.name().to_string());
        self.catalog.get_mut(name.name()).map(|(_, pairs)| pairs)
    }
}

impl ModelOp for StoreOp {
    type Model = StoreModel;

    fn apply(&self, _index: usize, model: &mut StoreModel) {
        match *self {
            StoreOp::Open(name, kind) => {
                if model.open_outcome(name, kind).is_ok() {
                    model
                        .catalog
                        .entry(name.name().to_string())
                        .or_insert((kind, BTreeMap::new()));
                    model.live.insert(name.name().to_string());
                }
            }
            StoreOp::Insert(name, k, v) => {
                if let Some(pairs) = model.map_mut(name) {
                    pairs.entry(k).or_insert(v);
                }
            }
            StoreOp::Upsert(name, k, v) => {
                if let Some(pairs) = model.map_mut(name) {
                    pairs.insert(k, v);
                }
            }
            StoreOp::Remove(name, k) => {
                if let Some(pairs) = model.map_mut(name) {
                    pairs.remove(&k);
                }
            }
            StoreOp::Get(name, _) | StoreOp::Range(name, ..) => {
                model.map_mut(name);
            }
            StoreOp::DropHandles(name) => {
                model.live.remove(name.name());
            }
            StoreOp::RemoveStructure(name) => {
                if model.remove_outcome(name).is_ok() {
                    model.catalog.remove(name.name());
                }
            }
            StoreOp::Reopen => model.live.clear(),
            StoreOp::Check => {}
            StoreOp::Batch(changes, len, commit) => {
                let changes = &changes[..usize::from(len)];
                for change in changes {
                    // The batch opens the handle of each listed map it writes.
                    let Some(pairs) = model.map_mut(change.name) else {
                        continue;
                    };
                    if commit {
                        match change.value {
                            Some(v) => pairs.insert(change.key, v),
                            None => pairs.remove(&change.key),
                        };
                    }
                }
            }
        }
    }
}

/// The kinds one handle type opens: an ordered map opens a listed ordered map of either
/// layout.
fn family(kind: StructureKind) -> StructureKind {
    match kind {
        StructureKind::LeafMap => StructureKind::BTreeMap,
        other => other,
    }
}
