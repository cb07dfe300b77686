//! The `Store`'s catalog and map handles against a model: named structures of three kinds, the
//! errors the catalog gives (invalid names, a full catalog, kind mismatches, removal of a
//! missing or open structure), map operations through the handles (the reserved keys 0 and
//! `u64::MAX` drawn often), dropped handles, reopened stores and full comparisons.
//!
//! The model ([`StoreModel`]) is the names with their kinds and (for maps) contents, plus the
//! names whose handles the driver holds: it predicts every result and every error. The
//! [`StoreDriver`] runs operations on a store and checks them against it; [`crash_ops`] runs a
//! sequence under the crash driver and checks every recovered image against the model's
//! history.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, RangeInclusive};
use std::sync::Arc;

use arbitrary::{Arbitrary, Unstructured};
use pmem_ordering::sim::{CrashTest, Report, SimBackend, SimConfig};
use pmem_ordering::{Backend, Pool, PoolOptions};
use pmem_structures::cceh::CcehConfig;
use pmem_structures::datalog::DatalogConfig;
use pmem_structures::fastfair::{FastFairConfig, ShiftPolicy};
use pmem_structures::store::STORE_LAYOUT;
use pmem_structures::{
    BTreeMap as TreeHandle, Datalog, Error, HashMap as HashHandle, Store, StoreOptions,
    StructureKind,
};
use pmem_undo_log::{FencePolicy, Heap};

use crate::fixture::SIM_HEAP;
use crate::model::{agree, failed, run_each};
use crate::{run_crash_test, History, ModelOp};

/// The names operations draw from: five valid ones (the last two a non-ASCII one and one of
/// the longest length), then three the store must refuse.
pub const NAMES: [&str; 8] = [
    "users",
    "orders",
    "files",
    "übersicht/2026",
    LONGEST_NAME,
    "",
    TOO_LONG_NAME,
    "tab\there",
];

/// How many of [`NAMES`] are valid (they come first).
pub const VALID_NAMES: usize = 5;

const LONGEST_NAME: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const TOO_LONG_NAME: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef!";
const _: () = assert!(LONGEST_NAME.len() == pmem_structures::store::MAX_NAME_BYTES);
const _: () = assert!(TOO_LONG_NAME.len() == pmem_structures::store::MAX_NAME_BYTES + 1);

/// The catalog's capacity in every store the kit makes: fewer than the valid names, so
/// sequences fill it.
pub const CATALOG_CAPACITY: u64 = 3;

/// Keys of fuzz inputs besides the reserved ones: 1..=FUZZ_KEYS.
pub const FUZZ_KEYS: u64 = 32;

/// The structure kinds, in the order fuzz inputs choose them.
pub const KINDS: [StructureKind; 3] = StructureKind::ALL;

/// One of [`NAMES`], by index.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct NameId(u8);

impl NameId {
    /// The name at `index` of [`NAMES`]. Panics past its end (a test's own mistake).
    pub fn new(index: usize) -> NameId {
        assert!(index < NAMES.len(), "name index {index} past {NAMES:?}");
        NameId(index as u8)
    }

    /// Its index in [`NAMES`].
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The name.
    pub fn name(self) -> &'static str {
        NAMES[self.index()]
    }

    /// Whether the store accepts it.
    pub fn is_valid(self) -> bool {
        self.index() < VALID_NAMES
    }

    /// The draw `arbitrary` reads it from, in `0..=NAME_DRAWS`: most draws give a valid name.
    pub fn draw(self) -> u64 {
        if self.is_valid() {
            self.0 as u64
        } else {
            self.0 as u64 + (NAME_DRAWS + 1 - NAMES.len() as u64)
        }
    }

    /// The name a draw in `0..=NAME_DRAWS` stands for.
    fn from_draw(draw: u64) -> NameId {
        let invalid_from = NAME_DRAWS + 1 - (NAMES.len() - VALID_NAMES) as u64;
        if draw < invalid_from {
            NameId((draw % VALID_NAMES as u64) as u8)
        } else {
            NameId((draw - invalid_from) as u8 + VALID_NAMES as u8)
        }
    }

    /// Any name, a valid one ten times in eleven.
    #[cfg(feature = "proptest")]
    pub fn strategy() -> impl proptest::strategy::Strategy<Value = NameId> {
        use proptest::prelude::*;
        prop_oneof![
            10 => (0..VALID_NAMES).prop_map(NameId::new),
            1 => (VALID_NAMES..NAMES.len()).prop_map(NameId::new),
        ]
    }
}

/// The largest name draw: draws `0..13` are valid names, `13..=15` the invalid ones.
pub const NAME_DRAWS: u64 = 15;

impl std::fmt::Debug for NameId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.name())
    }
}

impl<'a> Arbitrary<'a> for NameId {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<NameId> {
        Ok(NameId::from_draw(u.int_in_range(0..=NAME_DRAWS)?))
    }
}

/// The largest key draw: draws `0..=3` give the hash map's reserved key 0, `4..=7` the tree's
/// `u64::MAX`, the rest the keys `1..=FUZZ_KEYS`.
pub const KEY_DRAWS: u64 = FUZZ_KEYS + 7;

/// The draw `arbitrary` reads `key` from (one of 0, `u64::MAX` and `1..=FUZZ_KEYS`).
pub fn key_draw(key: u64) -> u64 {
    match key {
        0 => 0,
        u64::MAX => 4,
        k => {
            assert!(k <= FUZZ_KEYS, "key {k} has no fuzz encoding");
            k + 7
        }
    }
}

fn fuzz_key(u: &mut Unstructured) -> arbitrary::Result<u64> {
    Ok(match u.int_in_range(0..=KEY_DRAWS)? {
        0..=3 => 0,
        4..=7 => u64::MAX,
        draw => draw - 7,
    })
}

fn choose_kind(u: &mut Unstructured) -> arbitrary::Result<StructureKind> {
    Ok(*u.choose(&KINDS)?)
}

/// One operation on a store (names from [`NAMES`]).
///
/// A map operation on a listed map runs through the map's handle (opened if none is held); on
/// a datalog or an invalid name, opening the map must be refused (`KindMismatch`,
/// `InvalidName`); on a valid name the store does not list, nothing runs (a key operation
/// makes no map) and the store must not list it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub enum StoreOp {
    /// Open (or create) the structure of this kind named so, and hold its handle.
    Open(NameId, #[arbitrary(with = choose_kind)] StructureKind),
    /// `get(key)` on the named map.
    Get(NameId, #[arbitrary(with = fuzz_key)] u64),
    /// `insert(key, value)` on the named map.
    Insert(NameId, #[arbitrary(with = fuzz_key)] u64, u64),
    /// `upsert(key, value)` on the named map.
    Upsert(NameId, #[arbitrary(with = fuzz_key)] u64, u64),
    /// `remove(key)` on the named map.
    Remove(NameId, #[arbitrary(with = fuzz_key)] u64),
    /// The named map's pairs with keys from the smaller bound to the larger, both included.
    Range(
        NameId,
        #[arbitrary(with = fuzz_key)] u64,
        #[arbitrary(with = fuzz_key)] u64,
    ),
    /// Drop the handle held for the name (so the structure can be removed).
    DropHandles(NameId),
    /// `remove_structure(name)`.
    RemoveStructure(NameId),
    /// Drop every handle and the store, and open it again.
    Reopen,
    /// `check_blocks()`, the names and kinds, and every map's contents, length and `check()`.
    Check,
}

/// The number of [`StoreOp`] variants (for the fuzz encoder).
pub const STORE_OP_VARIANTS: u64 = 10;

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
            Some(&(found, _)) if found != kind => Err(Refusal::KindMismatch {
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
        }
    }
}

impl StoreOp {
    /// Any operation, map operations the most, on names from [`NameId::strategy`] and keys
    /// drawn from 0, `u64::MAX` (a fifth of the time each) and `1..=FUZZ_KEYS`.
    #[cfg(feature = "proptest")]
    pub fn strategy() -> impl proptest::strategy::Strategy<Value = StoreOp> {
        use proptest::prelude::*;
        let name = NameId::strategy;
        let key = || {
            prop_oneof![
                1 => Just(0u64),
                1 => Just(u64::MAX),
                3 => 1..=FUZZ_KEYS,
            ]
        };
        let kind = || proptest::sample::select(KINDS.to_vec());
        prop_oneof![
            3 => (name(), kind()).prop_map(|(n, k)| StoreOp::Open(n, k)),
            2 => (name(), key()).prop_map(|(n, k)| StoreOp::Get(n, k)),
            4 => (name(), key(), any::<u64>()).prop_map(|(n, k, v)| StoreOp::Insert(n, k, v)),
            3 => (name(), key(), any::<u64>()).prop_map(|(n, k, v)| StoreOp::Upsert(n, k, v)),
            3 => (name(), key()).prop_map(|(n, k)| StoreOp::Remove(n, k)),
            1 => (name(), key(), key()).prop_map(|(n, a, b)| StoreOp::Range(n, a, b)),
            3 => name().prop_map(StoreOp::DropHandles),
            3 => name().prop_map(StoreOp::RemoveStructure),
            1 => Just(StoreOp::Reopen),
            1 => Just(StoreOp::Check),
        ]
    }
}

/// How the kit's stores are made: the heap's fence policy, the maps' shapes and the tree's
/// shift policy. Every store has [`CATALOG_CAPACITY`] names and the [`SIM_HEAP`] heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreSetup {
    /// The undo log's fence policy.
    pub policy: FencePolicy,
    /// The B+-trees' shift policy.
    pub shift: ShiftPolicy,
    /// Hash map segments of 8 buckets rather than 4.
    pub wide_segments: bool,
}

impl Default for StoreSetup {
    fn default() -> Self {
        StoreSetup {
            policy: FencePolicy::Batched,
            shift: ShiftPolicy::Fast,
            wide_segments: false,
        }
    }
}

impl StoreSetup {
    /// The options stores are created with.
    pub fn options(&self) -> StoreOptions {
        StoreOptions::new()
            .max_structures(CATALOG_CAPACITY)
            .fence_policy(self.policy)
            .heap(SIM_HEAP)
    }

    /// The simulator model the fence policy is correct under.
    pub fn sim(&self) -> SimConfig {
        match self.policy {
            FencePolicy::Themis => SimConfig::themis(),
            _ => SimConfig::x86(),
        }
    }

    /// New hash maps' shape: tiny segments, so a few keys split them.
    pub fn table(&self) -> CcehConfig {
        CcehConfig {
            buckets_per_segment: if self.wide_segments { 8 } else { 4 },
        }
    }

    /// New B+-trees' shape: nodes of one entry line.
    pub fn tree(&self) -> FastFairConfig {
        FastFairConfig {
            node_size: 128,
            policy: self.shift,
        }
    }

    /// New datalogs' shape: a few inodes.
    pub fn datalog(&self) -> DatalogConfig {
        DatalogConfig {
            max_files: 4,
            ..DatalogConfig::default()
        }
    }

    /// The root object size that holds exactly the options' catalog: read from a small
    /// anonymous store made with them (the store computes it; the kit does not copy the
    /// catalog's layout).
    pub fn root_size(&self) -> Result<u64, Error> {
        let probe = Store::anonymous(STORE_PROBE_BYTES, &self.options())?;
        Ok(probe.heap().pool().root_size())
    }

    /// A fresh store of `size` bytes on an anonymous pool the caller keeps (to reopen it).
    pub fn anonymous_store(&self, size: u64) -> Result<(Arc<Pool>, Store), Error> {
        let options = PoolOptions::new().root_size(self.root_size()?);
        let pool = Arc::new(Pool::anonymous(STORE_LAYOUT, size, &options)?);
        let store = Store::format(pool.clone(), &self.options())?;
        Ok((pool, store))
    }
}

/// The size of the anonymous store [`StoreSetup::root_size`] reads the root size from.
const STORE_PROBE_BYTES: u64 = 1 << 20;

/// A handle the driver holds.
enum Handle<B: Backend, P: Deref<Target = Pool<B>>> {
    Hash(HashHandle<B, P>),
    Tree(TreeHandle<B, P>),
    Files(Datalog<B, P>),
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
pub struct StoreDriver<'a, B: Backend, P: Deref<Target = Pool<B>>> {
    store: Option<Store<B, P>>,
    handles: BTreeMap<NameId, Handle<B, P>>,
    setup: StoreSetup,
    reopen: Box<dyn FnMut() -> Result<Store<B, P>, Error> + 'a>,
}

impl<'a, B: Backend, P: Deref<Target = Pool<B>>> StoreDriver<'a, B, P> {
    /// A driver of `store` (made with `setup`'s options), which `reopen` opens again after the
    /// store and every handle are dropped. Checks the store's capacity.
    pub fn new(
        store: Store<B, P>,
        setup: StoreSetup,
        reopen: impl FnMut() -> Result<Store<B, P>, Error> + 'a,
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
    pub fn store(&self) -> &Store<B, P> {
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
        }
        op.apply(0, model);
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

    fn open_handle(&self, name: NameId, kind: StructureKind) -> Result<Handle<B, P>, Error> {
        let store = self.store();
        Ok(match kind {
            StructureKind::HashMap => {
                Handle::Hash(store.hash_map_with(name.name(), self.setup.table())?)
            }
            StructureKind::BTreeMap => {
                Handle::Tree(store.btree_map(name.name(), self.setup.tree())?)
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
                .hash_map_with(name.name(), self.setup.table())
                .map(drop),
            _ => store.btree_map(name.name(), self.setup.tree()).map(drop),
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
fn scan<B: Backend, P: Deref<Target = Pool<B>>>(
    handle: &Handle<B, P>,
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
pub fn observe<B: Backend, P: Deref<Target = Pool<B>>>(
    store: &Store<B, P>,
    setup: &StoreSetup,
) -> Result<Catalog, String> {
    let mut catalog = Catalog::new();
    for (name, kind) in store.structures() {
        let pairs = match kind {
            StructureKind::HashMap | StructureKind::BTreeMap => {
                let opened = match kind {
                    StructureKind::HashMap => {
                        store.hash_map_with(&name, setup.table()).map(Handle::Hash)
                    }
                    _ => store.btree_map(&name, setup.tree()).map(Handle::Tree),
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

/// A simulated store: the pool's handle to it.
pub type SimStore<'p> = Store<SimBackend, &'p Pool<SimBackend>>;

/// Crash-tests `ops` on a fresh store made with `setup` on `test`'s pool (whose root object
/// must hold the catalog: [`StoreSetup::root_size`]). The workload checks every result against
/// the model (a reopen is `Heap::open` and `Store::load` on the pool); every crash image must
/// recover (`Heap::open`, `Store::load`) to a store whose heap holds exactly the structures'
/// blocks (`check_blocks`) and whose names, kinds and pairs are the model's after the
/// operations that returned, or after the interrupted one too. Panics with the harness's
/// report on a failure.
pub fn crash_ops(test: &CrashTest, setup: StoreSetup, ops: &[StoreOp]) -> Report {
    let history = History::of(ops);
    run_crash_test(
        test,
        |pool| {
            SimStore::format(pool, &setup.options()).expect("format the store");
        },
        |pool| {
            let store = load(pool).expect("load the store");
            let mut driver =
                StoreDriver::new(store, setup, || load(pool)).unwrap_or_else(|e| panic!("{e}"));
            driver
                .run_all(pool, ops, &mut StoreModel::default())
                .unwrap_or_else(|e| panic!("{e}"));
        },
        |pool, crash| {
            let store = load(pool).map_err(|e| failed("recovery (Heap::open, Store::load)", e))?;
            store
                .check_blocks()
                .map_err(|e| failed("check_blocks", e))?;
            let now = observe(&store, &setup)?;
            let done = crash.operations_completed as usize;
            let admitted = |n: usize| n <= ops.len() && history.after(n).catalog == now;
            if !admitted(done) && !admitted(done + 1) {
                return Err(format!(
                    "after {done} operations (next {:?}) the store holds {now:?}, the model {:?}",
                    ops.get(done),
                    history.after(done).catalog
                ));
            }
            Ok(())
        },
    )
}

/// The store on `pool`, opened as a restart would: `Heap::open`, then `Store::load`.
pub fn load(pool: &Pool<SimBackend>) -> Result<SimStore<'_>, Error> {
    Store::load(Heap::open(pool)?)
}
