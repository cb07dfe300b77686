//! Write batches: any number of writes to any of a store's maps, durable and visible all
//! together or not at all ([`WriteBatch`], [`Store::write`]).
//!
//! The design, its on-media format, commit point, recovery order, fence count, concurrency
//! rules and limits are the repository's `docs/write-batches.md`; in short:
//!
//! * a batch gathers its changes in DRAM (one per key: its last value, or a remove), reading
//!   through itself ([`WriteBatch`]'s `get_in` sees its own writes);
//! * at commit, under the writer gates of its maps, each map *plans* its changes: the bytes each
//!   slot or leaf it touches will hold, room made first by splits and new layers that change
//!   no key, and new records written and flushed. The plans go to the store's write-batch
//!   area as a log (`../batch_state/area.rs`), committed by one fence: the commit point;
//! * the apply writes the planned bytes in place under the structures' own locks, publishes
//!   and retires the records, and fences once; then the log is cleared, one more fence;
//! * at open, a committed log is applied again (`../batch_state/area.rs`, "Recovery").
//!
//! This file holds the batch and the changes it gathers and reads back (the backing of the
//! handles' `*_in` methods, `../handle_methods.rs`); `commit.rs` the plan, the log and the
//! apply.

mod commit;

use std::marker::PhantomData;
use std::sync::Arc;

use pmem_ordering::{Backend, Hardware};
use rustc_hash::FxHashMap;

use super::batch_state::BatchHold;
use super::error::Error;
use super::leaf_tree::LeafTreeCore;
use super::map::{HashCore, TreeCore};
use super::record_map::{RecordHashCore, RecordTreeCore};
use super::registry::Shared;
use super::Store;
use crate::records::layout::check_sizes;
use crate::records::MAX_KEY_BYTES;
use crate::sync::WriterGate;

/// The most changes (distinct keys written, over all maps) one batch takes: past it a write
/// through the batch is refused with [`Error::BatchTooLarge`]. Each change costs a few words of
/// log, and the log must also fit the store's write-batch area (a 32nd of the pool, from 64
/// KiB to 4 MiB), or the commit is refused with [`Error::BatchLogFull`].
pub const MAX_BATCH_CHANGES: usize = 16_384;

/// A map a batch writes, by the core its handles share.
pub(crate) enum BatchMap<B: Backend> {
    HashWords(Arc<HashCore<B>>),
    TreeWords(Arc<TreeCore<B>>),
    HashRecords(Arc<RecordHashCore<B>>),
    TreeRecords(Arc<RecordTreeCore<B>>),
    TreeLeaves(Arc<LeafTreeCore<B>>),
}

impl<B: Backend> BatchMap<B> {
    /// The core's address: one per open map.
    fn id(&self) -> usize {
        match self {
            BatchMap::HashWords(c) => Arc::as_ptr(c) as *const () as usize,
            BatchMap::TreeWords(c) => Arc::as_ptr(c) as *const () as usize,
            BatchMap::HashRecords(c) => Arc::as_ptr(c) as *const () as usize,
            BatchMap::TreeRecords(c) => Arc::as_ptr(c) as *const () as usize,
            BatchMap::TreeLeaves(c) => Arc::as_ptr(c) as *const () as usize,
        }
    }

    fn gate(&self) -> &WriterGate {
        match self {
            BatchMap::HashWords(c) => &c.gate,
            BatchMap::TreeWords(c) => &c.gate,
            BatchMap::HashRecords(c) => &c.gate,
            BatchMap::TreeRecords(c) => &c.gate,
            BatchMap::TreeLeaves(c) => &c.gate,
        }
    }

    fn shared(&self) -> &Arc<Shared<B>> {
        match self {
            BatchMap::HashWords(c) => &c.shared,
            BatchMap::TreeWords(c) => &c.shared,
            BatchMap::HashRecords(c) => &c.shared,
            BatchMap::TreeRecords(c) => &c.shared,
            BatchMap::TreeLeaves(c) => &c.shared,
        }
    }

    fn name(&self) -> &str {
        match self {
            BatchMap::HashWords(c) => &c.name,
            BatchMap::TreeWords(c) => &c.name,
            BatchMap::HashRecords(c) => &c.name,
            BatchMap::TreeRecords(c) => &c.name,
            BatchMap::TreeLeaves(c) => &c.name,
        }
    }
}

/// One map a batch writes: its changes, and whether the batch holds its gate yet.
struct Touched<B: Backend> {
    map: BatchMap<B>,
    /// The gate is closed (by the first read through the batch, or at commit).
    closed: bool,
    /// A map of words' changes: each key's new value, or `None` to remove it.
    words: FxHashMap<u64, Option<u64>>,
    /// A map of records' (or of leaves') changes.
    records: FxHashMap<Vec<u8>, Option<Vec<u8>>>,
}

/// Writes to a store's maps that become durable and visible together, or not at all.
///
/// Made by [`Store::batch`] (or run inside [`Store::write`]), written through the maps'
/// `*_in` methods ([`HashMap::insert_in`](super::HashMap::insert_in),
/// [`BTreeMap::upsert_in`](super::BTreeMap::upsert_in), `remove_in`, `get_in`, `put_in`,
/// `delete_in`), and committed by [`WriteBatch::commit`]; dropped without a commit, it changes
/// nothing. Reads through the batch see its own writes.
///
/// While a batch is open it holds the store's batch lock (one batch at a time, as redb and
/// LMDB run one write transaction), and each map it has read through it keeps single writers
/// out until the batch ends (a map only written blindly, with `put_in` or `delete_in`, is held
/// from the commit only). Reads without the batch (`get`, scans) never wait. A batch belongs to
/// the thread that opened it: a single write from that thread to a map the batch holds is
/// refused with [`Error::InBatch`] (it would wait for itself).
///
/// ```
/// use pmem_structures::{FastFairConfig, Granularity, Store, StoreOptions};
///
/// # fn main() -> Result<(), pmem_structures::Error> {
/// let store = Store::anonymous(16 << 20, &StoreOptions::new().granularity(Granularity::Emulated))?;
/// let accounts = store.hash_map::<String, u64>("accounts")?;
/// let ledger = store.btree_map::<u64, u64>("ledger")?;
/// accounts.insert("alice", 100)?;
/// // Move 30 from alice to bob and record it: all three writes, or none.
/// store.write(|batch| {
///     let alice = accounts.get_in(batch, "alice")?.unwrap_or(0);
///     let bob = accounts.get_in(batch, "bob")?.unwrap_or(0);
///     accounts.upsert_in(batch, "alice", alice - 30)?;
///     accounts.upsert_in(batch, "bob", bob + 30)?;
///     ledger.insert_in(batch, 1u64, 30u64)?;
///     Ok::<_, pmem_structures::Error>(())
/// })?;
/// assert_eq!(accounts.get("bob")?, Some(30));
/// assert_eq!(ledger.get(1u64)?, Some(30));
/// # Ok(())
/// # }
/// ```
pub struct WriteBatch<B: Backend = Hardware> {
    shared: Arc<Shared<B>>,
    _hold: BatchHold,
    maps: Vec<Touched<B>>,
    changes: usize,
    /// The batch's gates and lock belong to its thread.
    _not_send: PhantomData<*const ()>,
}

impl<B: Backend> Store<B> {
    /// Open a write batch: waits while another thread's batch is open, refused with
    /// [`Error::InBatch`] if this thread has one open.
    pub fn batch(&self) -> Result<WriteBatch<B>, Error> {
        let hold = self.shared.batches.hold().ok_or_else(|| Error::InBatch {
            name: "the store".into(),
        })?;
        Ok(WriteBatch {
            shared: self.shared.clone(),
            _hold: hold,
            maps: Vec::new(),
            changes: 0,
            _not_send: PhantomData,
        })
    }

    /// Run `f` on a new batch and commit it if `f` returns `Ok`: every write `f` made through
    /// the batch is durable when this returns `Ok`. If `f` returns an error or panics, or the
    /// commit fails, nothing changed (the error, or the panic, goes on to the caller).
    pub fn write<T, E: From<Error>>(
        &self,
        f: impl FnOnce(&mut WriteBatch<B>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut batch = self.batch()?;
        let out = f(&mut batch)?;
        batch.commit()?;
        Ok(out)
    }

    /// Run `f`, which reads any of the store's maps, so that it sees each write batch whole
    /// or not at all: if a batch was applied while `f` ran, `f` runs again. Single writes are
    /// not held back (each is seen whole or not at all by itself). `f` may run several times,
    /// so it should only read. Never waits for a batch that is not applying right now.
    pub fn read_consistent<T>(&self, mut f: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
        loop {
            let seen = self.shared.batches.applying.read_begin();
            let result = f();
            if self.shared.batches.applying.read_valid(seen) {
                return result;
            }
        }
    }
}

impl<B: Backend> WriteBatch<B> {
    /// How many changes the batch holds (keys written, over all its maps).
    pub fn len(&self) -> usize {
        self.changes
    }

    /// Whether the batch holds no change.
    pub fn is_empty(&self) -> bool {
        self.changes == 0
    }

    /// The index of `map` among the batch's maps, added if new.
    pub(crate) fn touch(&mut self, map: BatchMap<B>) -> Result<usize, Error> {
        let id = map.id();
        if let Some(i) = self.maps.iter().position(|t| t.map.id() == id) {
            return Ok(i);
        }
        if !Arc::ptr_eq(map.shared(), &self.shared) {
            return Err(Error::OtherStore {
                name: map.name().to_string(),
            });
        }
        self.maps.push(Touched {
            map,
            closed: false,
            words: FxHashMap::default(),
            records: FxHashMap::default(),
        });
        Ok(self.maps.len() - 1)
    }

    /// Hold map `i`'s gate from now on: what the batch reads there stays true until it ends.
    fn hold(&mut self, i: usize) {
        let touched = &mut self.maps[i];
        if !touched.closed {
            touched.map.gate().close();
            touched.closed = true;
        }
    }

    /// Count one more change, refusing it past the limit.
    fn count_change(&mut self) -> Result<(), Error> {
        if self.changes >= MAX_BATCH_CHANGES {
            return Err(Error::BatchTooLarge {
                changes: self.changes + 1,
                max: MAX_BATCH_CHANGES,
            });
        }
        self.changes += 1;
        Ok(())
    }

    /// The value of `key` in map of words `i`, as the batch would leave it.
    pub(crate) fn read_word(&mut self, i: usize, key: u64) -> Result<Option<u64>, Error> {
        if let Some(&change) = self.maps[i].words.get(&key) {
            return Ok(change);
        }
        self.hold(i);
        match &self.maps[i].map {
            BatchMap::HashWords(core) => core.get(key),
            BatchMap::TreeWords(core) => core.get(key),
            _ => unreachable!("a map of words"),
        }
    }

    /// Set `key` of map of words `i` to `value` (`None`: removed) when the batch commits.
    pub(crate) fn write_word(
        &mut self,
        i: usize,
        key: u64,
        value: Option<u64>,
    ) -> Result<(), Error> {
        if !self.maps[i].words.contains_key(&key) {
            self.count_change()?;
        }
        self.maps[i].words.insert(key, value);
        Ok(())
    }

    /// The value of `key` in map of records (or of leaves) `i`, as the batch would leave it.
    pub(crate) fn read_record(&mut self, i: usize, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        if let Some(change) = self.maps[i].records.get(key) {
            return Ok(change.clone());
        }
        self.hold(i);
        Ok(match &self.maps[i].map {
            BatchMap::HashRecords(core) => core.raw.get(key)?,
            BatchMap::TreeRecords(core) => core.raw.get(key)?,
            BatchMap::TreeLeaves(core) => core.raw.get(key)?,
            _ => unreachable!("a map of records"),
        })
    }

    /// Set `key` of map of records `i` to `value` (`None`: removed) when the batch commits.
    /// A key or value past the limits is refused here, with nothing added.
    pub(crate) fn write_record(
        &mut self,
        i: usize,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), Error> {
        match value {
            Some(value) => check_sizes(key, value)?,
            // A key no map can hold is absent: removing it changes nothing.
            None if key.len() > MAX_KEY_BYTES => return Ok(()),
            None => {}
        }
        if !self.maps[i].records.contains_key(key) {
            self.count_change()?;
        }
        self.maps[i]
            .records
            .insert(key.to_vec(), value.map(<[u8]>::to_vec));
        Ok(())
    }
}

impl<B: Backend> Drop for WriteBatch<B> {
    /// The batch ends (committed or not): its maps' gates open again, then the store's batch
    /// lock is let go (the field's drop, after this).
    fn drop(&mut self) {
        for touched in &self.maps {
            if touched.closed {
                touched.map.gate().open();
            }
        }
    }
}
