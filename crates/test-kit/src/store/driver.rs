//! Running [`StoreOp`]s on a live store: [`StoreDriver`] checks each result against the model,
//! and [`observe`] reads what a (recovered) store holds, both through the kit's handles.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use pmem_ordering::{Backend, Pool};
use pmem_structures::{
    BTreeMap as TreeHandle, Datalog, Error, HashMap as HashHandle, Store, StructureKind,
};

use super::{BatchChange, Catalog, NameId, Refusal, StoreModel, StoreOp, StoreSetup};
use super::{CATALOG_CAPACITY, VALID_NAMES};
use crate::model::{agree, failed, run_each};
use crate::ModelOp;

/// A handle the driver holds.
enum Handle<B: Backend> {
    Hash(HashHandle<u64, u64, B>),
    Tree(TreeHandle<u64, u64, B>),
    Files(Datalog<B>),
}

/// The methods both map handles share, called on either.
macro_rules! on_map {
    ($handle:expr, $map:ident => $call:expr) => {
        match $handle {
            Handle::Hash($map) => $call,
            Handle::Tree($map) => $call,
            Handle::Files(_) => unreachable!("map operations go to maps only"),
        }
    };
}

/// Runs [`StoreOp`]s on a store, checking each against a [`StoreModel`]. Holds one handle per
/// name the model counts live.
pub struct StoreDriver<'a, B: Backend> {
    store: Option<Store<B>>,
    handles: BTreeMap<NameId, Handle<B>>,
    setup: StoreSetup,
    reopen: Box<dyn FnMut() -> Result<Store<B>, Error> + 'a>,
}

impl<'a, B: Backend> StoreDriver<'a, B> {
    /// A driver of `store` (made with `setup`'s options), which `reopen` opens again after the
    /// store and every handle are dropped. Checks the store's capacity.
    pub fn new(
        store: Store<B>,
        setup: StoreSetup,
        reopen: impl FnMut() -> Result<Store<B>, Error> + 'a,
    ) -> Result<Self, String> {
        agree(
            "the catalog's capacity".to_string(),
            store.capacity(),
            CATALOG_CAPACITY,
        )?;
        Ok(StoreDriver {
            store: Some(store),
            handles: BTreeMap::new(),
            setup,
            reopen: Box::new(reopen),
        })
    }

    /// The store driven.
    pub fn store(&self) -> &Store<B> {
        self.store
            .as_ref()
            .expect("the store is dropped only inside reopen")
    }

    /// Runs `op`, checks its result against `model`, then applies it to `model`.
    pub fn run_checked(&mut self, op: &StoreOp, model: &mut StoreModel) -> Result<(), String> {
        match *op {
            StoreOp::Open(name, kind) => self.open(name, kind, model)?,
            StoreOp::Get(name, _)
            | StoreOp::Insert(name, ..)
            | StoreOp::Upsert(name, ..)
            | StoreOp::Remove(name, _)
            | StoreOp::Range(name, ..) => self.map_op(op, name, model)?,
            StoreOp::DropHandles(name) => {
                self.handles.remove(&name);
            }
            StoreOp::RemoveStructure(name) => {
                let outcome = self.store().remove_structure(name.name());
                expect_outcome(
                    "remove_structure",
                    name,
                    outcome,
                    model.remove_outcome(name),
                )?;
            }
            StoreOp::Reopen => {
                self.handles.clear();
                self.store = None;
                self.store = Some((self.reopen)().map_err(|e| failed("reopening the store", e))?);
            }
            StoreOp::Check => self.check(model)?,
            StoreOp::Batch(changes, len, commit) => {
                self.batch(&changes[..usize::from(len)], commit, model)?
            }
        }
        op.apply(0, model);
        Ok(())
    }

    /// A write batch of `changes` to the listed maps (the others left out), committed or
    /// dropped. Its effect is checked by the operations and checks that follow.
    fn batch(
        &mut self,
        changes: &[BatchChange],
        commit: bool,
        model: &StoreModel,
    ) -> Result<(), String> {
        for change in changes {
            if let Some(kind) = model.map_kind(change.name) {
                if !self.handles.contains_key(&change.name) {
                    let handle = self.open_handle(change.name, kind).map_err(|e| {
                        failed(&format!("opening the map {:?}", change.name.name()), e)
                    })?;
                    self.handles.insert(change.name, handle);
                }
            }
        }
        let store = self.store.as_ref().expect("the store is open");
        let mut batch = store.batch().map_err(|e| failed("opening a batch", e))?;
        for change in changes {
            let Some(handle) = self.handles.get(&change.name) else {
                continue;
            };
            if model.map_kind(change.name).is_none() {
                continue;
            }
            let written = match change.value {
                Some(v) => on_map!(handle, m => m.put_in(&mut batch, change.key, v)),
                None => on_map!(handle, m => m.delete_in(&mut batch, change.key)),
            };
            written.map_err(|e| failed("a write through a batch", e))?;
        }
        if commit {
            batch.commit().map_err(|e| failed("a batch's commit", e))?;
        }
        Ok(())
    }

    /// Runs `ops` on the store, each checked ([`StoreDriver::run_checked`]), telling `pool`
    /// after each that an operation returned, then a full [`StoreOp::Check`].
    pub fn run_all(
        &mut self,
        pool: &Pool<B>,
        ops: &[StoreOp],
        model: &mut StoreModel,
    ) -> Result<(), String> {
        run_each(pool, ops, model, |_, op, model| self.run_checked(op, model))?;
        self.check(model)
            .map_err(|e| format!("after the sequence: {e}"))
    }

    fn open(
        &mut self,
        name: NameId,
        kind: StructureKind,
        model: &StoreModel,
    ) -> Result<(), String> {
        let predicted = model.open_outcome(name, kind);
        let opened = self.open_handle(name, kind);
        let what = format!("opening {} as {kind:?}", name.name());
        match (opened, predicted) {
            (Ok(handle), Ok(())) => {
                self.handles.insert(name, handle);
                Ok(())
            }
            (Err(e), Err(refusal)) if refusal.is(name.name(), &e) => Ok(()),
            (Ok(_), Err(refusal)) => Err(format!("{what} worked, the model refuses {refusal:?}")),
            (Err(e), predicted) => Err(format!("{what} failed ({e}), the model: {predicted:?}")),
        }
    }

    fn open_handle(&self, name: NameId, kind: StructureKind) -> Result<Handle<B>, Error> {
        let store = self.store();
        Ok(match kind {
            StructureKind::HashMap => {
                Handle::Hash(store.hash_map_with::<u64, u64>(name.name(), self.setup.table())?)
            }
            StructureKind::BTreeMap => {
                Handle::Tree(store.btree_map_with::<u64, u64>(name.name(), self.setup.tree())?)
            }
            StructureKind::LeafMap => {
                Handle::Tree(store.btree_map_with::<u64, u64>(name.name(), self.setup.leaves())?)
            }
            StructureKind::Datalog => {
                Handle::Files(store.datalog(name.name(), self.setup.datalog())?)
            }
            other => {
                return Err(Error::InvalidConfig {
                    reason: format!("the test kit drives no {}", other.describe()),
                })
            }
        })
    }

    /// A map operation: on a listed map through its handle (opened if none is held); on a
    /// datalog, the map's open must be refused with `KindMismatch`; on an invalid name with
    /// `InvalidName`; on a name not listed, nothing runs (a map is not made by a key
    /// operation) and the store must not list it.
    fn map_op(&mut self, op: &StoreOp, name: NameId, model: &StoreModel) -> Result<(), String> {
        let Some(kind) = model.map_kind(name) else {
            return self.not_a_map(op, name, model);
        };
        if !self.handles.contains_key(&name) {
            let handle = self
                .open_handle(name, kind)
                .map_err(|e| failed(&format!("opening the map {:?}", name.name()), e))?;
            self.handles.insert(name, handle);
        }
        let handle = &self.handles[&name];
        let pairs = &model.catalog[name.name()].1;
        match *op {
            StoreOp::Get(_, k) => {
                let got = on_map!(handle, m => m.get(k)).map_err(|e| failed("get", e))?;
                agree(format!("get({k})"), got, pairs.get(&k).copied())?;
            }
            StoreOp::Insert(_, k, v) => {
                let inserted =
                    on_map!(handle, m => m.insert(k, v)).map_err(|e| failed("insert", e))?;
                agree(format!("insert({k})"), inserted, !pairs.contains_key(&k))?;
            }
            StoreOp::Upsert(_, k, v) => {
                let old = on_map!(handle, m => m.upsert(k, v)).map_err(|e| failed("upsert", e))?;
                agree(format!("upsert({k})"), old, pairs.get(&k).copied())?;
            }
            StoreOp::Remove(_, k) => {
                let old = on_map!(handle, m => m.remove(k)).map_err(|e| failed("remove", e))?;
                agree(format!("remove({k})"), old, pairs.get(&k).copied())?;
            }
            StoreOp::Range(_, a, b) => {
                let bounds = a.min(b)..=a.max(b);
                let got = scan(handle, bounds.clone())?;
                let want: Vec<(u64, u64)> = pairs.range(bounds).map(|(&k, &v)| (k, v)).collect();
                agree(format!("range({a}, {b})"), got, want)?;
            }
            _ => unreachable!("map_op is called with map operations"),
        }
        let mut after = model.clone();
        op.apply(0, &mut after);
        let len = on_map!(handle, m => m.len());
        agree(
            format!("{:?}'s len", name.name()),
            len,
            after.catalog[name.name()].1.len() as u64,
        )
    }

    fn not_a_map(&self, op: &StoreOp, name: NameId, model: &StoreModel) -> Result<(), String> {
        let store = self.store();
        // Lookups and inserts try the hash map, the other operations the tree.
        let wanted = match op {
            StoreOp::Get(..) | StoreOp::Insert(..) => StructureKind::HashMap,
            _ => StructureKind::BTreeMap,
        };
        let predicted = match model.open_outcome(name, wanted) {
            Err(refusal) => refusal,
            // A valid name not listed: opening would create it.
            Ok(()) => {
                return match store.structures().iter().find(|(n, _)| n == name.name()) {
                    Some(listed) => {
                        Err(format!("{op:?}: the store lists {listed:?}, the model not"))
                    }
                    None => Ok(()),
                };
            }
        };
        let opened = match wanted {
            StructureKind::HashMap => store
                .hash_map_with::<u64, u64>(name.name(), self.setup.table())
                .map(drop),
            _ => store
                .btree_map_with::<u64, u64>(name.name(), self.setup.tree())
                .map(drop),
        };
        match opened {
            Err(e) if predicted.is(name.name(), &e) => Ok(()),
            other => Err(format!(
                "opening the map gave {other:?}, the model {predicted:?}"
            )),
        }
    }

    /// The full comparison: the heap walk, the names and kinds, and each map's pairs (by
    /// iteration, each key once), length and `check()`; each datalog opens. Handles not held
    /// are opened for the check and dropped after it.
    pub fn check(&self, model: &StoreModel) -> Result<(), String> {
        let store = self.store();
        store
            .check_blocks()
            .map_err(|e| failed("check_blocks", e))?;
        let listed: Vec<(String, StructureKind)> = model
            .catalog
            .iter()
            .map(|(name, (kind, _))| (name.clone(), *kind))
            .collect();
        agree("the structures".to_string(), store.structures(), listed)?;
        for index in 0..VALID_NAMES {
            let name = NameId::new(index);
            let Some((kind, pairs)) = model.catalog.get(name.name()) else {
                continue;
            };
            let opened;
            let handle = match self.handles.get(&name) {
                Some(handle) => handle,
                None => {
                    opened = self
                        .open_handle(name, *kind)
                        .map_err(|e| failed(&format!("opening {:?}", name.name()), e))?;
                    &opened
                }
            };
            if let Handle::Files(files) = handle {
                agree("a datalog's name".to_string(), files.name(), name.name())?;
                continue;
            }
            let what = format!("{:?}", name.name());
            let got = scan(handle, 0..=u64::MAX)?;
            let want: Vec<(u64, u64)> = pairs.iter().map(|(&k, &v)| (k, v)).collect();
            agree(format!("{what}'s pairs"), got, want)?;
            agree(
                format!("{what}'s len"),
                on_map!(handle, m => m.len()),
                pairs.len() as u64,
            )?;
            let checked = on_map!(handle, m => m.check()).map_err(|e| failed("check", e))?;
            agree(format!("{what}'s check()"), checked, pairs.len() as u64)?;
        }
        Ok(())
    }
}

/// The pairs of the map `handle` with keys in `bounds`, in key order: the tree's `range`, which
/// must come sorted with each key once, or the hash map's `iter` (each key once), filtered.
fn scan<B: Backend>(
    handle: &Handle<B>,
    bounds: RangeInclusive<u64>,
) -> Result<Vec<(u64, u64)>, String> {
    let pairs: Vec<(u64, u64)> = match handle {
        Handle::Tree(map) => {
            let pairs: Vec<(u64, u64)> = map
                .range(bounds)
                .collect::<Result<_, _>>()
                .map_err(|e| failed("range", e))?;
            if let Some(w) = pairs.windows(2).find(|w| w[0].0 >= w[1].0) {
                return Err(format!("range is not strictly increasing: {w:?}"));
            }
            pairs
        }
        Handle::Hash(map) => {
            let mut pairs: Vec<(u64, u64)> = map
                .iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| failed("iter", e))?;
            pairs.retain(|(k, _)| bounds.contains(k));
            pairs.sort_unstable();
            if let Some(w) = pairs.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(format!("iter lists key {} twice: {w:?}", w[0].0));
            }
            pairs
        }
        Handle::Files(_) => unreachable!("scans go to maps only"),
    };
    Ok(pairs)
}

/// `Ok` if `outcome` is what the model predicts for `what` on `name`.
fn expect_outcome(
    what: &str,
    name: NameId,
    outcome: Result<(), Error>,
    predicted: Result<(), Refusal>,
) -> Result<(), String> {
    match (outcome, predicted) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Err(refusal)) if refusal.is(name.name(), &e) => Ok(()),
        (outcome, predicted) => Err(format!(
            "{what}({:?}) gave {outcome:?}, the model {predicted:?}",
            name.name()
        )),
    }
}

/// What a (recovered) store holds: every listed structure with its pairs (by iteration, each
/// key once, agreeing with `len` and `check()`).
pub fn observe<B: Backend>(store: &Store<B>, setup: &StoreSetup) -> Result<Catalog, String> {
    let mut catalog = Catalog::new();
    for (name, kind) in store.structures() {
        let pairs = match kind {
            StructureKind::HashMap | StructureKind::BTreeMap | StructureKind::LeafMap => {
                let opened = match kind {
                    StructureKind::HashMap => store
                        .hash_map_with::<u64, u64>(&name, setup.table())
                        .map(Handle::Hash),
                    StructureKind::LeafMap => store
                        .btree_map_with::<u64, u64>(&name, setup.leaves())
                        .map(Handle::Tree),
                    _ => store
                        .btree_map_with::<u64, u64>(&name, setup.tree())
                        .map(Handle::Tree),
                };
                let handle = opened.map_err(|e| failed(&name, e))?;
                let pairs = scan(&handle, 0..=u64::MAX)?;
                let len = on_map!(&handle, m => m.len());
                let checked = on_map!(&handle, m => m.check()).map_err(|e| failed("check", e))?;
                if len != pairs.len() as u64 || checked != len {
                    return Err(format!(
                        "{name:?}: {} pairs listed, len {len}, check() {checked}",
                        pairs.len()
                    ));
                }
                pairs.into_iter().collect()
            }
            StructureKind::Datalog => {
                store
                    .datalog(&name, setup.datalog())
                    .map_err(|e| failed(&name, e))?;
                BTreeMap::new()
            }
            other => {
                return Err(format!(
                    "{name:?} is {}, which the test kit does not model",
                    other.describe()
                ))
            }
        };
        catalog.insert(name, (kind, pairs));
    }
    Ok(catalog)
}
