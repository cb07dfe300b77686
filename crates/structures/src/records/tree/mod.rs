//! The byte-key ordered map: a trie of FAST&FAIR trees, each keyed by 7 bytes of the key
//! (the layering of EuroSys'12 Masstree, Sec. 4), whose entries point at records.
//!
//! # Layers
//!
//! Layer `l` is a `u64 -> u64` FAST&FAIR tree keyed by the *slice word* of key bytes
//! `7l .. 7l + 7`: those bytes big-endian, padded with zeros, then one byte saying how many of
//! them the key has (0 to 7) or 8 if the key goes on past them. Words sort as the keys do
//! (a key that ends sorts before its extensions), and never reach `u64::MAX` (the tree's free
//! slot). An entry's value is a record (a key ending in this slice is the only key with its
//! word; a key going on is the only one *so far*), or, tagged with bit 0, the root of the next
//! layer, which holds every key going on past this slice. A key that meets another going on
//! with the same 7 bytes moves the other into a new layer, then goes down to it. Layers are
//! never taken apart: a layer left with one key, or none, stays (one node and its redo area).
//!
//! Random 16-byte keys nearly all end their walk in layer 0: a lookup is one FAST&FAIR lookup
//! and one record read. Keys with a long common prefix (`user:0000001`) go down one layer per
//! 7 shared bytes.
//!
//! # Crash consistency
//!
//! Record writes follow [`super`] (two fences, intent lines, resolution at open). A new layer
//! is made in one transaction that also names it in the writer's intent line (its *layer
//! word*); the record it takes over is then entered in it, and the layer is published by one
//! 8-byte store of the parent entry's value. The layer word is cleared after. At open, a layer
//! the word names and no walk reaches (a crash before the publish) is freed; one it reaches is
//! kept. A layer word never names a freed layer: the freeing transaction clears it.
//!
//! # Root object ([`ROOT_BYTES`], 64-byte aligned)
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic ([`StructureKind::RecordBTreeMap`]) |
//! | 8 | format version |
//! | 16 | the intent area's offset |
//! | 64..128 | layer 0's FAST&FAIR root object |

mod batch;
mod check;
mod layers;
mod scan;
mod verify;

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch as epoch;
use crossbeam_utils::sync::ShardedLock;
use pmem_ordering::{Backend, Pool, PoolError};
use pmem_undo_log::{Heap, TxError};

use super::hash::check_sizes;
use super::layout::{self, MAX_KEY_BYTES};
use super::{Records, Resolved};

use crate::fastfair::{FastFair, FastFairConfig, FastFairError};
use crate::kind::StructureKind;
pub use scan::Scan;

use super::error::RecordMapError;
use super::head;

/// Bytes of the root object.
pub const ROOT_BYTES: u64 = 128;
/// Where layer 0's root object sits in the root object.
const TOP_AT: u64 = 64;
/// Key bytes per layer.
const SLICE: usize = 7;
/// The tag of an entry value naming a layer (records and layer roots are 64-byte aligned).
const LAYER_TAG: u64 = 1;
/// Entries a scan takes from a layer per descent.
const SCAN_BATCH: usize = 64;

type Result<T, E = RecordMapError> = std::result::Result<T, E>;
type Layer<B, P, H> = FastFair<B, P, H>;
/// Layers below the top, by the offset of their root object.
type Layers<B, P, H> = HashMap<u64, Arc<Layer<B, P, H>>>;

/// The slice word of `key` in layer `layer` (see the module docs).
pub(crate) fn slice_word(key: &[u8], layer: usize) -> u64 {
    let rest = &key[(layer * SLICE).min(key.len())..];
    let take = rest.len().min(SLICE);
    let mut bytes = [0u8; 8];
    bytes[..take].copy_from_slice(&rest[..take]);
    bytes[7] = if rest.len() > SLICE { 8 } else { take as u8 };
    u64::from_be_bytes(bytes)
}

/// Whether keys with this slice word go on past it (so several may share it).
fn goes_on(word: u64) -> bool {
    word & 0xff == 8
}

fn is_layer(value: u64) -> bool {
    value & LAYER_TAG != 0
}

/// Why one try at a write must start again from the top.
enum Attempt {
    /// A concurrent writer changed the entry between the descent and the lock.
    Retry,
    Fail(RecordMapError),
}

impl From<FastFairError> for Attempt {
    fn from(e: FastFairError) -> Self {
        Attempt::Fail(e.into())
    }
}

impl From<RecordMapError> for Attempt {
    fn from(e: RecordMapError) -> Self {
        Attempt::Fail(e)
    }
}

impl From<TxError> for Attempt {
    fn from(e: TxError) -> Self {
        Attempt::Fail(e.into())
    }
}

impl From<PoolError> for Attempt {
    fn from(e: PoolError) -> Self {
        Attempt::Fail(e.into())
    }
}

/// Where a descent for a key ended: the layer, its depth, the key's word there and the
/// entry's value (a record), or no entry.
struct Spot<'a, B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    layer: &'a Layer<B, P, H>,
    depth: usize,
    word: u64,
    record: Option<u64>,
}

/// A FAST&FAIR ordered map from byte strings to byte strings, in a heap (see the module docs).
pub struct RecordTreeMap<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> {
    heap: H,
    root: u64,
    config: FastFairConfig,
    records: Records,
    top: Arc<Layer<B, P, H>>,
    /// Every layer below the top, by root offset: readers that meet a layer entry find it here
    /// (a new layer is entered before it is published). Sharded: every descent past the top
    /// reads it, on every core, and only a new layer writes it. A layer leaves it only when
    /// its publication failed (no entry ever named it), so a layer reached through an entry
    /// lives as long as the map.
    layers: ShardedLock<Layers<B, P, H>>,
    count: AtomicU64,
    resolved: Resolved,
}

impl<B, P, H> RecordTreeMap<B, P, H>
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>> + Clone,
{
    /// Make an empty map at `root` (an all-zero, 64-byte aligned range of [`ROOT_BYTES`]), in
    /// one transaction (joining the caller's, if any). Every layer gets `config`.
    pub fn create(heap: H, root: u64, config: FastFairConfig) -> Result<Self> {
        head::check_new(heap.pool(), root, ROOT_BYTES)?;
        let (top, area) = heap.transaction(|tx| -> Result<_> {
            let area = head::write_head(tx, root, StructureKind::RecordBTreeMap)?;
            let top = FastFair::create(heap.clone(), root + TOP_AT, config)?;
            Ok((top, area))
        })?;
        Ok(RecordTreeMap {
            heap,
            root,
            config,
            records: Records::new(root, area),
            top: Arc::new(top),
            layers: ShardedLock::new(HashMap::new()),
            count: AtomicU64::new(0),
            resolved: Resolved::default(),
        })
    }

    /// Open the map at `root`: every layer recovers (FAST&FAIR's open), layers a crash left
    /// unpublished are freed, and every record an interrupted write left in doubt is
    /// resolved. Must run before anything else allocates from the heap after a crash.
    pub fn open(heap: H, root: u64) -> Result<Self> {
        let area = head::read_head(&heap, root, StructureKind::RecordBTreeMap)?;
        let top = FastFair::open(heap.clone(), root + TOP_AT)?;
        let config = FastFairConfig {
            node_size: top.node_size(),
            policy: top.policy(),
        };
        let mut map = RecordTreeMap {
            heap,
            root,
            config,
            records: Records::new(root, area),
            top: Arc::new(top),
            layers: ShardedLock::new(HashMap::new()),
            count: AtomicU64::new(0),
            resolved: Resolved::default(),
        };
        // Every layer reached from the top, opened (recovered) once; the records counted.
        let (layers, count) = map.walk_layers()?;
        *map.layers.get_mut().unwrap_or_else(|p| p.into_inner()) = layers;
        map.count = AtomicU64::new(count);
        map.free_unpublished_layers()?;
        // A record is reachable if the descent for its key ends at it: told without reading
        // any other record, so damage elsewhere does not stop the open.
        let resolved = map.records.resolve(&map.heap, |offset, key| {
            let _guard = epoch::pin();
            Ok::<_, RecordMapError>(map.descend(key)?.record == Some(offset))
        })?;
        map.resolved = resolved;
        Ok(map)
    }

    fn put(&self, key: &[u8], value: &[u8], replace: bool) -> Result<(bool, Option<Vec<u8>>)> {
        check_sizes(key, value)?;
        let heap = &*self.heap;
        let pool = heap.pool();
        let mut staged: Option<super::Staged<'_>> = None;
        loop {
            // The descent and the record reads it decides on are pinned, so those records
            // cannot be reused under it. The rest is not: a reservation on a full heap waits
            // for retired records, which a pinned thread would hold back; under the leaf lock
            // of the write, the entry's record cannot be retired by anyone else.
            let (spot, ours) = self.find(key)?;
            let attempt = match spot.record {
                Some(r) if !ours => {
                    // Another key going on with the same 7 bytes: both go down a layer. A record
                    // staged by an earlier try is given back first, so that no writer holds an
                    // intent line while it waits for another (`push_down` claims one): with
                    // every line held that way, writers would wait for each other forever.
                    if let Some(s) = staged.take() {
                        s.abandon(heap);
                    }
                    self.push_down(spot.layer, spot.depth, spot.word, r)
                        .map(|()| None)
                }
                Some(_) if !replace => {
                    if let Some(s) = staged.take() {
                        super::Staged::abandon(s, heap);
                    }
                    return Ok((false, None));
                }
                found => {
                    let s = match staged.as_mut() {
                        Some(s) => s,
                        None => staged.insert(self.records.stage(heap, key, value, found)?),
                    };
                    let new = s.new_offset().expect("a staged put has a record");
                    let mut old_value = None;
                    let word = spot.word;
                    let put = spot.layer.put_with(word, new, replace, |old| {
                        if let Some(o) = old {
                            if is_layer(o) || (goes_on(word) && !self.record_has_key(o, key)?) {
                                return Err(Attempt::Retry);
                            }
                            old_value = Some(read_value(pool, o)?);
                        }
                        s.commit(heap, old).map_err(Attempt::from)
                    });
                    match put {
                        Ok(None) => {
                            self.count.fetch_add(1, Ordering::Relaxed);
                            Ok(Some((true, None)))
                        }
                        Ok(Some(_)) if !replace => Err(Attempt::Retry),
                        Ok(Some(_)) => Ok(Some((true, old_value))),
                        Err(e) => Err(e),
                    }
                }
            };
            match attempt {
                Ok(Some(done)) => {
                    if let Some(s) = staged.take() {
                        s.finish();
                    }
                    return Ok(done);
                }
                Ok(None) | Err(Attempt::Retry) => continue,
                Err(Attempt::Fail(e)) => {
                    if let Some(s) = staged.take() {
                        // A split that found the heap full left the tree as it was.
                        let _ = s.undo(heap);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// Insert `key -> value` if `key` is absent: `true` if inserted, `false` (and nothing
    /// written) if it was there.
    pub fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        Ok(self.put(key, value, false)?.0)
    }

    /// Insert or overwrite `key -> value`; the old value if there was one.
    pub fn upsert(&self, key: &[u8], value: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.put(key, value, true)?.1)
    }

    /// Remove `key`; its value if it was there.
    pub fn remove(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > MAX_KEY_BYTES {
            return Ok(None);
        }
        let heap = &*self.heap;
        let pool = heap.pool();
        loop {
            let _guard = epoch::pin();
            let spot = self.descend(key)?;
            let Some(r) = spot.record else {
                return Ok(None);
            };
            if !self.holds(&spot, r, key)? {
                return Ok(None);
            }
            let mut staged = self.records.stage_remove(heap, r)?;
            let mut old_value = None;
            let word = spot.word;
            let removed = spot.layer.remove_with(word, |old| {
                if is_layer(old) || (goes_on(word) && !self.record_has_key(old, key)?) {
                    return Err(Attempt::Retry);
                }
                old_value = Some(read_value(pool, old)?);
                staged.commit(heap, Some(old)).map_err(Attempt::from)
            });
            match removed {
                Ok(Some(_)) => {
                    self.count.fetch_sub(1, Ordering::Relaxed);
                    staged.finish();
                    return Ok(old_value);
                }
                Ok(None) => {
                    staged.abandon(heap);
                    return Ok(None);
                }
                Err(Attempt::Retry) => {
                    staged.abandon(heap);
                    continue;
                }
                Err(Attempt::Fail(e)) => {
                    // A merge whose transaction failed left the tree as it was.
                    let _ = staged.undo(heap);
                    return Err(e);
                }
            }
        }
    }
}

impl<B, P, H> RecordTreeMap<B, P, H>
where
    B: Backend,
    P: Deref<Target = Pool<B>>,
    H: Deref<Target = Heap<B, P>>,
{
    /// The heap.
    pub fn heap(&self) -> &Heap<B, P> {
        &self.heap
    }

    /// The root object's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The node size and shift policy of every layer.
    pub fn config(&self) -> FastFairConfig {
        self.config
    }

    /// What the last open's resolution of interrupted writes did.
    pub fn resolved_at_open(&self) -> Resolved {
        self.resolved
    }

    /// The layer whose root object is at `root`.
    fn layer(&self, root: u64) -> Result<&Layer<B, P, H>> {
        let layers = self.layers.read().unwrap_or_else(|p| p.into_inner());
        let layer: *const Layer<B, P, H> =
            Arc::as_ptr(layers.get(&root).ok_or_else(|| RecordMapError::Corrupt {
                root: self.root,
                reason: format!("an entry names layer {root:#x}, which is not one of the map's"),
            })?);
        drop(layers);
        // The layer is in `layers`, which holds an `Arc` of it, and an entry named it (only
        // entries lead here). A layer leaves `layers` only in `push_down`, when its publication
        // failed: then no entry ever named it.
        // SAFETY: so the `Arc` stays in `layers`, and the layer alive, as long as the map,
        // which the returned reference borrows.
        Ok(unsafe { &*layer })
    }

    /// Walk down the layers for `key` (the caller is pinned) to the entry of its word.
    fn descend(&self, key: &[u8]) -> Result<Spot<'_, B, P, H>> {
        let mut layer: &Layer<B, P, H> = &self.top;
        let mut depth = 0;
        loop {
            let word = slice_word(key, depth);
            match layer.get(word)? {
                Some(v) if is_layer(v) => {
                    layer = self.layer(v & !LAYER_TAG)?;
                    depth += 1;
                }
                record => {
                    return Ok(Spot {
                        layer,
                        depth,
                        word,
                        record,
                    })
                }
            }
        }
    }

    /// The descent for `key`, pinned, and whether the record it ends at (if any) is `key`'s.
    fn find(&self, key: &[u8]) -> Result<(Spot<'_, B, P, H>, bool)> {
        let _guard = epoch::pin();
        let spot = self.descend(key)?;
        let ours = match spot.record {
            Some(r) => self.holds(&spot, r, key)?,
            None => false,
        };
        Ok((spot, ours))
    }

    /// Whether the record `r` at `spot` is `key`'s, read from the record: a word of keys going
    /// on may name another key's of that word; any other record there (another key's where
    /// only the key looked for may be, or one of another word) is a damaged entry,
    /// [`RecordMapError::Corrupt`].
    fn holds(&self, spot: &Spot<'_, B, P, H>, r: u64, key: &[u8]) -> Result<bool> {
        let pool = self.heap.pool();
        let line = layout::first_line(pool, r)?;
        if line.key_equals(pool, r, key)? {
            return Ok(true);
        }
        let (other, _) = line.checked_key_value(pool, r)?;
        self.another_keys_record(spot, r, &other)?;
        Ok(false)
    }

    /// `Ok` if the whole record `r` of `other` (not the key looked for) may be at `spot`: a
    /// key going on past the same slice as the key looked for. Otherwise the entry is damaged.
    fn another_keys_record(&self, spot: &Spot<'_, B, P, H>, r: u64, other: &[u8]) -> Result<()> {
        if goes_on(spot.word) && slice_word(other, spot.depth) == spot.word {
            return Ok(());
        }
        Err(RecordMapError::Corrupt {
            root: self.root,
            reason: format!(
                "the entry of word {:#x} of layer {} points at the record at {r:#x}, which \
                 holds a key that does not belong there",
                spot.word, spot.depth
            ),
        })
    }

    /// Whether `record` holds `key`; a record whose header is impossible, or that holds
    /// another key and fails its checksum, is [`RecordMapError::CorruptRecord`] (it may be
    /// `key`'s, damaged).
    fn record_has_key(&self, record: u64, key: &[u8]) -> Result<bool> {
        let pool = self.heap.pool();
        let line = layout::first_line(pool, record)?;
        if line.key_equals(pool, record, key)? {
            return Ok(true);
        }
        line.check(pool, record)?;
        Ok(false)
    }

    /// The record `key` has now, if any.
    fn record_of(&self, key: &[u8]) -> Result<Option<u64>> {
        let _guard = epoch::pin();
        let spot = self.descend(key)?;
        match spot.record {
            Some(r) if self.holds(&spot, r, key)? => Ok(Some(r)),
            _ => Ok(None),
        }
    }

    /// The value of `key`, if present. Takes no lock.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if key.len() > MAX_KEY_BYTES {
            return Ok(None);
        }
        let _guard = epoch::pin();
        let spot = self.descend(key)?;
        let Some(r) = spot.record else {
            return Ok(None);
        };
        // One line read decides and starts the copy.
        let pool = self.heap.pool();
        let line = layout::first_line(pool, r)?;
        if line.key_equals(pool, r, key)? {
            return Ok(Some(line.checked_value(pool, r)?));
        }
        // This key's record damaged (its checksum fails), or a whole record of another key:
        // one going on past the same slice, or one a damaged entry points at.
        let (other, _) = line.checked_key_value(pool, r)?;
        self.another_keys_record(&spot, r, &other)?;
        Ok(None)
    }

    /// Whether `key` is present. Takes no lock.
    pub fn contains_key(&self, key: &[u8]) -> Result<bool> {
        if key.len() > MAX_KEY_BYTES {
            return Ok(false);
        }
        Ok(self.record_of(key)?.is_some())
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Drop
    for RecordTreeMap<B, P, H>
{
    /// No handle, so no reader, is left: records retired by this map go back to the heap now
    /// instead of after an epoch no one will wait for.
    fn drop(&mut self) {
        self.records.release_all(&self.heap);
    }
}

/// The value of the record at `record`, checked.
fn read_value<B: Backend>(pool: &Pool<B>, record: u64) -> Result<Vec<u8>> {
    layout::first_line(pool, record)?.checked_value(pool, record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_words_sort_as_their_keys() {
        let mut keys: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"a\0",
            b"ab",
            b"abcdefg",
            b"abcdefg\0",
            b"abcdefgh",
            b"b",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
        ];
        keys.sort();
        let words: Vec<u64> = keys.iter().map(|k| slice_word(k, 0)).collect();
        for w in words.windows(2) {
            assert!(w[0] <= w[1], "{:#x} > {:#x}", w[0], w[1]);
        }
        assert_eq!(
            slice_word(b"abcdefg\0", 0),
            slice_word(b"abcdefgh", 0),
            "both go on"
        );
        assert!(words.iter().all(|&w| w != u64::MAX));
        assert!(goes_on(slice_word(b"abcdefgh", 0)));
        assert!(!goes_on(slice_word(b"abcdefg", 0)));
        assert_eq!(slice_word(b"abcdefgh", 1), slice_word(b"h", 0));
    }
}
