//! The persistent catalog: names -> (kind, root block), in the pool's root object.
//!
//! * `layout`: the header and entry bytes.
//! * `removal`: freeing a removed structure's blocks in bounded transactions.
//! * `check`: the catalog in the pool against the copy read at open, for `Store::verify`.
//!
//! Every change is an undo-log transaction, so a crash leaves the catalog before or after it.
//! Adding a structure is *one* transaction: the root block's allocation, the structure's own
//! creation (its transaction joins this one) and the entry, so a crash can leave neither an
//! entry without a structure nor a structure no entry owns. Removal is a sequence of bounded
//! transactions recorded in the entry (`removal`), finished by the next open if a crash stops it.
//! A structure too large to list on a full pool is first emptied by its own removes, its entry
//! `Draining` meanwhile; the store finishes a draining removal a crash stopped when it loads
//! (it alone can open the structure).
//!
//! The catalog keeps a DRAM copy of its entries; the store serialises changes with a lock.

mod check;
mod layout;
mod removal;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::{Heap, Tx, TxError};

use layout::{capacity_of, entry, header, EntryImage, State, ENTRY_BYTES, HEADER_BYTES};
pub use layout::{root_bytes, MAX_NAME_BYTES};

use super::error::Error;
use super::types::TypeCode;
use crate::kind::StructureKind;

/// A structure the catalog lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    /// Its entry's index.
    pub slot: u64,
    /// Its kind.
    pub kind: StructureKind,
    /// Its root block.
    pub root: u64,
    /// Pool offset of its entry.
    pub entry: u64,
    /// A map's key and value types (`u64` for other structures).
    pub types: (TypeCode, TypeCode),
    /// The fingerprint of the types' names ([`crate::store::types::fingerprint`]); 0 if the
    /// entry predates fingerprints.
    pub fingerprint: u32,
}

/// The catalog of a store: where it lives, its format version and a DRAM copy of its entries.
pub(crate) struct Catalog {
    base: u64,
    version: u64,
    entries: Vec<Option<EntryImage>>,
    /// The write-batch area's block, 0 until the store's first batch makes it.
    batch_area: u64,
}

impl Catalog {
    /// Format an empty catalog of the root object's capacity (one transaction).
    pub(crate) fn format<B: Backend>(heap: &Heap<B>) -> Result<Catalog, Error> {
        let pool = heap.pool();
        let base = pool.root_offset();
        let capacity = capacity_of(pool.root_size());
        if capacity == 0 {
            return Err(Error::InvalidConfig {
                reason: format!(
                    "a root object of {} bytes holds no catalog entry ({} needed for one)",
                    pool.root_size(),
                    root_bytes(1)
                ),
            });
        }
        heap.transaction(|tx| {
            tx.write_value(base + header::VERSION, &layout::VERSION)?;
            tx.write_value(base + header::CAPACITY, &capacity)?;
            tx.write_value(base + header::MAGIC, &layout::MAGIC)
        })?;
        Ok(Catalog {
            base,
            version: layout::VERSION,
            entries: vec![None; capacity as usize],
            batch_area: 0,
        })
    }

    /// Read the catalog, finish every removal a crash interrupted (but the draining ones: see
    /// [`Catalog::draining`]), and return it. A catalog that cannot be read (an all-zero root
    /// object included: a store is published only once its catalog is written, so zeros there
    /// are damage) is refused with [`Error::CorruptCatalog`] before anything is written.
    pub(crate) fn open<B: Backend>(heap: &Heap<B>) -> Result<Catalog, Error> {
        let pool = heap.pool();
        let base = pool.root_offset();
        let magic = pool.load_u64(base + header::MAGIC)?;
        if magic == 0 && root_is_zero(pool)? {
            let blocks = heap.check_heap().map(|b| b.len());
            return Err(corrupt(format!(
                "the root object holding it is all zero, and the heap holds {}: the catalog \
                 was damaged (or an earlier build's creation of the store was interrupted \
                 before it); nothing was written",
                match blocks {
                    Ok(1) => "1 block".to_string(),
                    Ok(n) => format!("{n} blocks"),
                    Err(e) => format!("blocks that do not check ({e})"),
                }
            )));
        }
        if magic != layout::MAGIC {
            return Err(corrupt(format!(
                "the root object starts with {} instead of the catalog's magic",
                pmem_ordering::MagicText::from_word(magic)
            )));
        }
        let version = pool.load_u64(base + header::VERSION)?;
        if ![
            layout::VERSION_WITHOUT_FINGERPRINTS,
            layout::VERSION,
            layout::VERSION_WITH_BATCHES,
        ]
        .contains(&version)
        {
            return Err(corrupt(format!(
                "catalog format version {version}, but this library reads versions {} to {}: \
                 open it with the library version that wrote it",
                layout::VERSION_WITHOUT_FINGERPRINTS,
                layout::VERSION_WITH_BATCHES
            )));
        }
        let batch_area = pool.load_u64(base + header::BATCH_AREA)?;
        if (version == layout::VERSION_WITH_BATCHES) == (batch_area == 0) {
            return Err(corrupt(format!(
                "catalog format version {version} with write-batch area {batch_area:#x}"
            )));
        }
        let capacity = pool.load_u64(base + header::CAPACITY)?;
        if capacity == 0 || capacity > capacity_of(pool.root_size()) {
            return Err(corrupt(format!(
                "capacity {capacity} does not fit the {}-byte root object",
                pool.root_size()
            )));
        }
        let mut catalog = Catalog {
            base,
            version,
            entries: Vec::with_capacity(capacity as usize),
            batch_area,
        };
        for slot in 0..capacity {
            let mut bytes = [0u8; ENTRY_BYTES as usize];
            pool.read_bytes(catalog.entry_offset(slot), &mut bytes)?;
            let image = EntryImage::decode(&bytes, version)
                .map_err(|reason| corrupt(format!("entry {slot}: {reason}")))?;
            catalog.entries.push(image);
        }
        catalog.check_names()?;
        for slot in 0..capacity {
            if let Some(image) = &catalog.entries[slot as usize] {
                if image.state == State::Removing {
                    removal::finish(heap, catalog.entry_offset(slot), image)?;
                    catalog.entries[slot as usize] = None;
                }
            }
        }
        Ok(catalog)
    }

    /// The write-batch area's block, if the store has one.
    pub(crate) fn batch_area(&self) -> Option<u64> {
        (self.batch_area != 0).then_some(self.batch_area)
    }

    /// Record `area` as the store's write-batch area inside `tx` (the one that allocates it),
    /// with the catalog version that says so (from version 1 too: its entries' fingerprints,
    /// all unknown, read the same in version 3).
    pub(crate) fn set_batch_area_in<B: Backend>(
        &self,
        tx: &Tx<'_, B>,
        area: u64,
    ) -> Result<(), TxError> {
        tx.write_value(self.base + header::BATCH_AREA, &area)?;
        tx.write_value(self.base + header::VERSION, &layout::VERSION_WITH_BATCHES)
    }

    /// The area recorded, once the transaction of [`Catalog::set_batch_area_in`] committed.
    pub(crate) fn batch_area_made(&mut self, area: u64) {
        self.batch_area = area;
        self.version = layout::VERSION_WITH_BATCHES;
    }

    /// How many names the catalog can hold.
    pub(crate) fn capacity(&self) -> u64 {
        self.entries.len() as u64
    }

    /// The live entries.
    fn live(&self) -> impl Iterator<Item = &EntryImage> {
        self.entries
            .iter()
            .flatten()
            .filter(|e| e.state == State::Live)
    }

    /// The structure listed under `name`.
    pub(crate) fn find(&self, name: &str) -> Option<Listed> {
        let slot = self.entries.iter().position(|e| {
            e.as_ref()
                .is_some_and(|e| e.name == name && e.state == State::Live)
        })?;
        self.listed_at(slot as u64)
    }

    /// The structure listed in entry `slot`, if any and live.
    fn listed_at(&self, slot: u64) -> Option<Listed> {
        self.entries[slot as usize]
            .as_ref()
            .filter(|e| e.state == State::Live)
            .map(|e| self.listed_of(slot, e))
    }

    fn listed_of(&self, slot: u64, e: &EntryImage) -> Listed {
        Listed {
            slot,
            kind: e.kind,
            root: e.root,
            entry: self.entry_offset(slot),
            types: e.types,
            fingerprint: e.fingerprint,
        }
    }

    /// The structures being emptied before their removal (a crash stopped it), which the store
    /// finishes when it loads.
    pub(crate) fn draining(&self) -> Vec<Listed> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(slot, e)| {
                let e = e.as_ref().filter(|e| e.state == State::Draining)?;
                Some(self.listed_of(slot as u64, e))
            })
            .collect()
    }

    /// Mark the structure in `slot` `Draining` (one transaction): no handle reaches it from
    /// now on, and the store empties it before it removes it.
    pub(crate) fn mark_draining<B: Backend>(
        &mut self,
        heap: &Heap<B>,
        slot: u64,
    ) -> Result<(), Error> {
        let entry_offset = self.entry_offset(slot);
        heap.transaction(|tx| {
            tx.write_value(entry_offset + entry::STATE, &State::Draining.code())
        })?;
        if let Some(e) = self.entries[slot as usize].as_mut() {
            e.state = State::Draining;
        }
        Ok(())
    }

    /// Every name with its kind, sorted by name.
    pub(crate) fn list(&self) -> Vec<(String, StructureKind)> {
        let mut names: Vec<_> = self.live().map(|e| (e.name.clone(), e.kind)).collect();
        names.sort();
        names
    }

    /// Every structure listed, with its name.
    pub(crate) fn listed(&self) -> Vec<(String, Listed)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(slot, e)| Some((e.as_ref()?.name.clone(), self.listed_at(slot as u64)?)))
            .collect()
    }

    /// Pool offset of entry `slot`.
    pub(crate) fn entry_offset(&self, slot: u64) -> u64 {
        self.base + HEADER_BYTES + slot * ENTRY_BYTES
    }

    /// List a new structure of `kind` under `name` (checked by the caller), in one
    /// transaction: allocate and zero a root block of `root_bytes`, run `create` on it (its own
    /// transaction joins this one) and write the entry with its `types` and their
    /// `fingerprint`. Returns what `create` made.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add<B: Backend, S>(
        &mut self,
        heap: &Heap<B>,
        name: &str,
        kind: StructureKind,
        types: (TypeCode, TypeCode),
        fingerprint: u32,
        root_bytes: u64,
        create: impl FnOnce(u64) -> Result<S, Error>,
    ) -> Result<(S, Listed), Error> {
        let slot = self
            .entries
            .iter()
            .position(Option::is_none)
            .ok_or(Error::CatalogFull {
                capacity: self.capacity(),
            })? as u64;
        let entry_offset = self.entry_offset(slot);
        let (structure, image) = heap.transaction(|tx| {
            let root = tx.alloc(root_bytes)?.offset();
            if !root.is_multiple_of(64) {
                // The allocator hands out 64-byte-aligned blocks; a structure's root needs it.
                return Err(Error::Heap(TxError::CorruptHeap {
                    reason: format!("a {root_bytes}-byte block at {root:#x} is not line-aligned"),
                }));
            }
            tx.write(root, &vec![0u8; root_bytes as usize])?;
            let structure = create(root)?;
            let image = EntryImage {
                kind,
                state: State::Live,
                root,
                removal_list: 0,
                removal_cursor: 0,
                name: name.to_string(),
                side: None,
                types,
                fingerprint,
            };
            tx.write(entry_offset, &image.bytes())?;
            self.upgrade_in(tx)?;
            Ok::<_, Error>((structure, image))
        })?;
        self.version = self.version.max(layout::VERSION);
        let listed = Listed {
            slot,
            kind,
            root: image.root,
            entry: entry_offset,
            types,
            fingerprint,
        };
        self.entries[slot as usize] = Some(image);
        Ok((structure, listed))
    }

    /// Record `fingerprint` for the structure in `slot`, whose entry has none (it predates
    /// fingerprints): the types its first open names are taken for the ones it was made with.
    pub(crate) fn record_fingerprint<B: Backend>(
        &mut self,
        heap: &Heap<B>,
        slot: u64,
        fingerprint: u32,
    ) -> Result<(), Error> {
        let entry_offset = self.entry_offset(slot);
        let Some(kind) = self.entries[slot as usize].as_ref().map(|e| e.kind) else {
            return Ok(());
        };
        let kind_word = kind.code() | u64::from(fingerprint) << 32;
        heap.transaction(|tx| {
            tx.write_value(entry_offset + entry::KIND, &kind_word)?;
            self.upgrade_in(tx)
        })?;
        if let Some(image) = self.entries[slot as usize].as_mut() {
            image.fingerprint = fingerprint;
        }
        self.version = self.version.max(layout::VERSION);
        Ok(())
    }

    /// Inside `tx`, which writes a fingerprint: make a version 1 catalog version 2 (a version
    /// 1 reader would take the fingerprint for a kind code it does not know, and report the
    /// catalog damaged; version 2 it refuses by name).
    fn upgrade_in<B: Backend>(&self, tx: &Tx<'_, B>) -> Result<(), TxError> {
        if self.version != layout::VERSION_WITHOUT_FINGERPRINTS {
            return Ok(());
        }
        tx.write_value(self.base + header::VERSION, &layout::VERSION)
    }

    /// Unlist the structure in `slot` (live or draining) and free its root block and
    /// `blocks`, which must be every block it owns. Crash-safe: see `removal`. A full pool
    /// with no room for the list of `blocks` is [`Error::PoolFull`], with nothing changed.
    pub(crate) fn remove<B: Backend>(
        &mut self,
        heap: &Heap<B>,
        slot: u64,
        blocks: &[u64],
    ) -> Result<(), Error> {
        let image = self.entries[slot as usize]
            .clone()
            .expect("remove is called on a listed slot");
        removal::run(heap, self.entry_offset(slot), &image, blocks)?;
        self.entries[slot as usize] = None;
        Ok(())
    }

    /// Two entries with one name mean a damaged catalog: refuse it rather than pick one.
    fn check_names(&self) -> Result<(), Error> {
        let mut names: Vec<&str> = self
            .entries
            .iter()
            .flatten()
            .map(|e| e.name.as_str())
            .collect();
        names.sort_unstable();
        match names.windows(2).find(|w| w[0] == w[1]) {
            Some(w) => Err(corrupt(format!("two entries are named {:?}", w[0]))),
            None => Ok(()),
        }
    }
}

/// The value the map in entry `entry_offset` keeps for the key its structure reserves, as the
/// pool holds it.
pub(crate) fn read_side<B: Backend>(
    pool: &Pool<B>,
    entry_offset: u64,
) -> Result<Option<u64>, Error> {
    match pool.load_u64(entry_offset + entry::SIDE_PRESENT)? {
        0 => Ok(None),
        1 => Ok(Some(pool.load_u64(entry_offset + entry::SIDE_VALUE)?)),
        other => Err(corrupt(format!(
            "reserved-key flag {other} at {entry_offset:#x}"
        ))),
    }
}

/// Write the reserved key's value (`None`: absent) into entry `entry_offset`, inside `tx`.
pub(crate) fn write_side<B: Backend>(
    tx: &Tx<'_, B>,
    entry_offset: u64,
    value: Option<u64>,
) -> Result<(), TxError> {
    let words = [u64::from(value.is_some()), value.unwrap_or(0)];
    tx.write(
        entry_offset + entry::SIDE_PRESENT,
        bytemuck::cast_slice(&words),
    )
}

/// Where the reserved key's value of the map in entry `entry_offset` lives, and its bytes once
/// set to `value`: what a write batch logs and stores.
pub(crate) fn side_image(entry_offset: u64, value: Option<u64>) -> (u64, [u8; 16]) {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&u64::from(value.is_some()).to_le_bytes());
    bytes[8..].copy_from_slice(&value.unwrap_or(0).to_le_bytes());
    (entry_offset + entry::SIDE_PRESENT, bytes)
}

fn root_is_zero<B: Backend>(pool: &Pool<B>) -> Result<bool, Error> {
    let mut bytes = vec![0u8; pool.root_size() as usize];
    pool.read_bytes(pool.root_offset(), &mut bytes)?;
    Ok(bytes.iter().all(|&b| b == 0))
}

fn corrupt(reason: String) -> Error {
    Error::CorruptCatalog { reason }
}
