//! The shared state of a map whose keys and values are `u64` words: one contract over CCEH
//! and FAST&FAIR (the typed handles of `hash_map.rs` and `btree_map.rs` encode into words).
//!
//! Each structure keeps one key for itself (CCEH's empty slot is key 0, FAST&FAIR's free slot
//! `u64::MAX`). The handles make every `u64` a key: the reserved one's value lives in the map's
//! catalog entry (a presence word and a value word), written by a small transaction, while
//! every other key keeps the structure's one-fence path.

use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_utils::atomic::AtomicCell;

use pmem_ordering::Backend;

use super::catalog::{self, Listed};
use super::entries::{BTreeEntries, Entries, HashEntries};
use super::error::Error;
use super::raw::{HashTable, Structure, Tree};
use super::registry::{Core, Shared};
use crate::sync::{WriteSection, WriterGate};
use crate::u64map::U64Map;

/// A map's shared state: the structure, the reserved key's value, and the store.
pub(crate) struct MapCore<S, B: Backend> {
    pub(super) raw: S,
    /// The reserved key's value, as the catalog entry holds it: read without a lock (a
    /// lookup or a scan costs one optimistic read), written only under `reserved_writer`.
    reserved: AtomicCell<Option<u64>>,
    /// Orders the writes of the reserved key (each persists before it is published).
    reserved_writer: Mutex<()>,
    entry: u64,
    pub(super) name: String,
    pub(super) shared: Arc<Shared<B>>,
    /// Keeps single writers out while a write batch holds the map (`batch/`).
    pub(super) gate: WriterGate,
}

pub(crate) type HashCore<B> = MapCore<HashTable<B>, B>;
pub(crate) type TreeCore<B> = MapCore<Tree<B>, B>;

// The point operations are `#[inline(always)]` and `range_entries` `#[inline]`: each is a thin
// layer over the structure's call, and left out of line (as codegen-unit partitioning or the
// inliner's size limit may leave it) it costs a call, a frame and a copy of the returned result
// or iterator per operation, as the instruction benches and callgrind on
// `benches/examples/ycsb_profile.rs` showed.
impl<S, B> MapCore<S, B>
where
    S: Structure<B> + U64Map,
    Error: From<S::Error>,
    B: Backend,
{
    fn new(raw: S, listed: &Listed, name: &str, shared: Arc<Shared<B>>) -> Result<Self, Error> {
        let entry = listed.entry;
        let reserved = catalog::read_side(shared.heap.pool(), entry)?;
        Ok(MapCore {
            raw,
            reserved: AtomicCell::new(reserved),
            reserved_writer: Mutex::new(()),
            entry,
            name: name.to_string(),
            shared,
            gate: WriterGate::new(),
        })
    }

    /// The reserved key's value now.
    pub(super) fn reserved(&self) -> Option<u64> {
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

    #[inline(always)]
    pub(super) fn get(&self, key: u64) -> Result<Option<u64>, Error> {
        if key == S::RESERVED_KEY {
            return Ok(self.reserved());
        }
        Ok(self.raw.get(key)?)
    }

    /// Enter the map's writer gate for a single write (see `batch/`).
    #[inline(always)]
    pub(super) fn enter(&self) -> Result<WriteSection, Error> {
        self.gate.enter().map_err(|_| Error::InBatch {
            name: self.name.clone(),
        })
    }

    #[inline(always)]
    pub(super) fn insert(&self, key: u64, value: u64) -> Result<bool, Error> {
        let _section = self.enter()?;
        if key != S::RESERVED_KEY {
            return Ok(self.raw.insert(key, value)?);
        }
        self.insert_reserved(value)
    }

    #[inline(always)]
    pub(super) fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, Error> {
        let _section = self.enter()?;
        if key != S::RESERVED_KEY {
            return Ok(self.raw.upsert(key, value)?);
        }
        self.upsert_reserved(value)
    }

    #[inline(always)]
    pub(super) fn remove(&self, key: u64) -> Result<Option<u64>, Error> {
        let _section = self.enter()?;
        if key != S::RESERVED_KEY {
            return Ok(self.raw.remove(key)?);
        }
        self.remove_reserved()
    }

    // The reserved key's writes, out of line: the point operations above are inlined into
    // every handle's call, and with these in them they were too large to be (each call then
    // paid a second frame's prologue, epilogue and result copy: about 40 instructions an
    // upsert under callgrind).

    #[cold]
    #[inline(never)]
    fn insert_reserved(&self, value: u64) -> Result<bool, Error> {
        let _writer = self.reserved_write();
        if self.reserved().is_some() {
            return Ok(false);
        }
        self.set_reserved(Some(value))?;
        Ok(true)
    }

    #[cold]
    #[inline(never)]
    fn upsert_reserved(&self, value: u64) -> Result<Option<u64>, Error> {
        let _writer = self.reserved_write();
        let old = self.reserved();
        self.set_reserved(Some(value))?;
        Ok(old)
    }

    #[cold]
    #[inline(never)]
    fn remove_reserved(&self) -> Result<Option<u64>, Error> {
        let _writer = self.reserved_write();
        let old = self.reserved();
        if old.is_some() {
            self.set_reserved(None)?;
        }
        Ok(old)
    }

    pub(super) fn len(&self) -> u64 {
        self.raw.len() + u64::from(self.reserved().is_some())
    }

    pub(super) fn check(&self) -> Result<u64, Error> {
        Ok(self.raw.check()? + u64::from(self.reserved().is_some()))
    }
}

impl<S, B: Backend> MapCore<S, B> {
    /// A write batch's new value of the reserved key: the catalog entry's bytes (where, and
    /// what they become).
    pub(super) fn side_image(&self, value: Option<u64>) -> (u64, [u8; 16]) {
        catalog::side_image(self.entry, value)
    }

    /// A write batch's new value of the reserved key, for readers (once the batch is
    /// committed: its apply stores the entry's bytes of [`MapCore::side_image`]).
    pub(super) fn publish_reserved(&self, value: Option<u64>) {
        self.reserved.store(value);
    }
}

macro_rules! map_core {
    ($core:ident, $raw:ident, $variant:ident) => {
        impl<B: Backend> Core<B> for $core<B> {
            type Raw = $raw<B>;
            fn wrap(
                raw: $raw<B>,
                listed: &Listed,
                name: &str,
                shared: Arc<Shared<B>>,
            ) -> Result<Self, Error> {
                MapCore::new(raw, listed, name, shared)
            }
            fn raw(&self) -> &$raw<B> {
                &self.raw
            }
        }
    };
}

map_core!(HashCore, HashTable, HashMap);
map_core!(TreeCore, Tree, BTreeMap);

impl<B: Backend> HashCore<B> {
    /// Every `(key, value)` word pair, the reserved key's last.
    pub(super) fn entries(&self) -> HashEntries {
        let reserved = <HashTable<B> as U64Map>::RESERVED_KEY;
        let last = self.reserved().map(|value| (reserved, value));
        Entries::new(self.raw.iter(), last)
    }
}

impl<B: Backend> TreeCore<B> {
    /// The `(key, value)` word pairs with keys in `range`, in order; the reserved key (the
    /// largest) last.
    #[inline]
    pub(super) fn range_entries(&self, range: (Bound<u64>, Bound<u64>)) -> BTreeEntries<'_, B> {
        let reserved = <Tree<B> as U64Map>::RESERVED_KEY;
        let last = match self.reserved() {
            Some(value) if range.contains(&reserved) => Some((reserved, value)),
            _ => None,
        };
        BTreeEntries::new(self.raw.range(range), last)
    }
}
