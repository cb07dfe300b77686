//! The `Store`'s catalog and map handles against a model: named structures of four kinds (the
//! ordered map in either layout among them), the
//! errors the catalog gives (invalid names, a full catalog, kind mismatches, removal of a
//! missing or open structure), map operations through the handles (the reserved keys 0 and
//! `u64::MAX` drawn often), write batches over several maps (committed or dropped), dropped
//! handles, reopened stores and full comparisons.
//!
//! The model ([`StoreModel`]) is the names with their kinds and (for maps) contents, plus the
//! names whose handles the driver holds: it predicts every result and every error. The
//! [`StoreDriver`] runs operations on a store and checks them against it; [`crash_ops`] runs a
//! sequence under the crash driver and checks every recovered image against the model's
//! history.
//!
//! Files: this one holds the names, the key draws and [`StoreOp`] (with its `arbitrary` and
//! `proptest` generation); `model.rs` the model and its refusals; `setup.rs` how the kit's
//! stores are made ([`StoreSetup`]); `driver.rs` the driver and [`observe`]; `crash.rs`
//! [`crash_ops`] and [`load`].

mod crash;
mod driver;
mod model;
mod setup;

pub use crash::{crash_ops, crash_ops_outcome, load, SimStore};
pub use driver::{observe, StoreDriver};
pub use model::{Catalog, Listing, Refusal, StoreModel};
pub use setup::StoreSetup;

use arbitrary::{Arbitrary, Unstructured};
use pmem_structures::StructureKind;

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
const _: () = assert!(LONGEST_NAME.len() == pmem_structures::MAX_NAME_BYTES);
const _: () = assert!(TOO_LONG_NAME.len() == pmem_structures::MAX_NAME_BYTES + 1);

/// The catalog's capacity in every store the kit makes: fewer than the valid names, so
/// sequences fill it.
pub const CATALOG_CAPACITY: u64 = 3;

/// Keys of fuzz inputs besides the reserved ones: 1..=FUZZ_KEYS.
pub const FUZZ_KEYS: u64 = 32;

/// The structure kinds, in the order fuzz inputs choose them. `LeafMap` is the ordered map
/// of the leaf layout: opened with [`StoreSetup::leaves`], it is the same family as `BTreeMap`
/// (either opens a listed map of the other, as the store records it).
pub const KINDS: [StructureKind; 4] = [
    StructureKind::HashMap,
    StructureKind::BTreeMap,
    StructureKind::Datalog,
    StructureKind::LeafMap,
];

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
    /// A write batch of the first `len` changes (`put_in`, or `delete_in` for `None`),
    /// committed if the flag says so, else dropped (nothing may change). A change to a name
    /// that is not a listed map is left out (a batch makes no map).
    Batch(
        [BatchChange; BATCH_CHANGES],
        #[arbitrary(with = batch_len)] u8,
        bool,
    ),
}

/// The number of [`StoreOp`] variants (for the fuzz encoder).
pub const STORE_OP_VARIANTS: u64 = 11;

/// The most changes of a [`StoreOp::Batch`].
pub const BATCH_CHANGES: usize = 4;

/// One change of a [`StoreOp::Batch`]: `key` of the map named `name` set to `value`, or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Arbitrary)]
pub struct BatchChange {
    /// The map.
    pub name: NameId,
    /// The key.
    #[arbitrary(with = fuzz_key)]
    pub key: u64,
    /// The new value, or `None` to remove the key.
    pub value: Option<u64>,
}

fn batch_len(u: &mut Unstructured) -> arbitrary::Result<u8> {
    u.int_in_range(0..=BATCH_CHANGES as u8)
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
            3 => (
                proptest::array::uniform4((name(), key(), proptest::option::of(any::<u64>()))),
                0..=BATCH_CHANGES as u8,
                prop_oneof![4 => Just(true), 1 => Just(false)],
            )
                .prop_map(|(changes, len, commit)| {
                    let changes = changes.map(|(name, key, value)| BatchChange { name, key, value });
                    StoreOp::Batch(changes, len, commit)
                }),
        ]
    }
}
