//! The byte-key ordered map: a trie of FAST&FAIR trees, each keyed by 7 bytes of the key
//! (the layering of EuroSys'12 Masstree, Sec. 4), whose entries point at records, with long
//! shared runs of key bytes compressed into one layer (path compression, as Masstree's and
//! ART's, ICDE'13 ART, Sec. III-E).
//!
//! # Layers
//!
//! A layer of *depth* `d` is a `u64 -> u64` FAST&FAIR tree keyed by the *slice word* of key
//! bytes `7d .. 7d + 7`: those bytes big-endian, padded with zeros, then one byte saying how
//! many of them the key has (0 to 7) or 8 if the key goes on past them. Words sort as the keys
//! do (a key that ends sorts before its extensions), and never reach `u64::MAX` (the tree's
//! free slot). An entry's value is a record (a key ending in this slice is the only key with its
//! word; a key going on is the only one *so far*), or, tagged with bit 0, the root of a deeper
//! layer, which holds every key going on past this slice with these bytes.
//!
//! A layer's depth need not be its parent's plus one: it may *skip* the key bytes between the
//! two slices, which all its keys share and its header holds (`layout.rs`). When a key meets
//! another going on with the same word, the two move into one new layer at the first slice
//! where they differ (`layers.rs`, `push_down`): two keys sharing 64 KiB make one layer, not
//! 9,000. When a key reaches a layer whose skipped bytes it does not share, a layer is made at
//! the first slice where it leaves them, holding the old layer and then the key (`split`). So
//! an insert makes at most one layer and compares each key byte a bounded number of times:
//! time and space linear in the key.
//!
//! A layer emptied by removes is unlinked from its parent and freed (`retire.rs`), and so is a
//! parent left empty by that: a map emptied by removes holds nothing but its top layer.
//!
//! Random 16-byte keys nearly all end their walk in layer 0: a lookup is one FAST&FAIR lookup
//! and one record read. Keys with a long common prefix (`user:0000001`) go down one layer.
//!
//! # Crash consistency
//!
//! Record writes follow [`super`] (two fences, intent lines, resolution at open). A new layer
//! is made in one transaction that also names it in the writer's intent line (its *layer
//! word*); the record or layer it takes over is then entered in it, and the layer is published
//! by one 8-byte store of the parent entry's value. The layer word is cleared after. An emptied
//! layer is named in a *retire word* before the remove of its parent entry unlinks it, and
//! freed, with the word cleared, in one transaction once its readers are gone. At open, a
//! layer a word names and no walk reaches (a crash before the publish, or after the unlink) is
//! freed; one it reaches is kept. A word never names a freed layer: the freeing transaction
//! clears it. Empty layers a crash left linked are retired at open.
//!
//! # Readers
//!
//! Lookups take no lock and pin the map's epoch (`super::reclaim`); a layer leaves the map's
//! DRAM index, and its blocks the heap, only once every reader pinned when it was unlinked has
//! unpinned. Writers pin while they touch a layer and first check that it is not dead (being
//! retired); scans pin per batch (`scan.rs`).

mod batch;
mod check;
#[cfg(test)]
mod damaged_entry_tests;
mod layer;
mod layers;
pub(crate) mod layout;
mod retire;
mod scan;
mod verify;
mod write;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_epoch::Guard;
use crossbeam_utils::sync::ShardedLock;
use pmem_ordering::{Backend, Pool, PoolError};
use pmem_undo_log::{Heap, TxError};

use super::layout::{self as record_layout, MAX_KEY_BYTES};
use super::limbo::Limbo;
use super::{Records, Resolved};

use crate::fastfair::{FastFair, FastFairConfig, FastFairError};
use crate::kind::StructureKind;
pub use scan::Scan;

use self::layer::Layer;
use self::layout::LayerHeader;
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

type Result<T, E = RecordMapError> = std::result::Result<T, E>;
/// Layers below the top, by the offset of their block.
type Layers<B> = HashMap<u64, Arc<Layer<B>>>;
/// A layer below the top holding no entry, with a key of its path.
type EmptyLayer<B> = (Arc<Layer<B>>, Vec<u8>);

/// The slice word of `key` in a layer of depth `depth` (see the module docs).
pub(crate) fn slice_word(key: &[u8], depth: usize) -> u64 {
    let rest = &key[(depth * SLICE).min(key.len())..];
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

/// A layer retired: unlinked, waiting for its readers, named in retire word `slot`.
#[derive(Clone, Copy, Debug)]
struct Retired {
    root: u64,
    slot: usize,
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

/// Where a descent for a key ended: the layer, the key's word there and the entry's value (a
/// record), or no entry; or the layer below whose skipped bytes the key does not share.
struct Spot<'a, B: Backend> {
    layer: &'a Layer<B>,
    word: u64,
    record: Option<u64>,
    /// The entry names this layer, which the key does not belong under.
    diverged: Option<&'a Layer<B>>,
}

/// A FAST&FAIR ordered map from byte strings to byte strings, in a heap (see the module docs).
pub struct RecordTreeMap<B: Backend> {
    heap: Heap<B>,
    root: u64,
    config: FastFairConfig,
    records: Records,
    top: Arc<Layer<B>>,
    /// Every layer below the top a reader may reach, by block offset: readers that meet a
    /// layer entry find it here (a new layer is entered before it is published, and a retired
    /// one leaves only once the readers pinned when it was unlinked are gone). Sharded: every
    /// descent past the top reads it, on every core.
    layers: ShardedLock<Layers<B>>,
    /// Layers unlinked and waiting for their readers before their blocks are freed.
    retiring: Limbo<Retired>,
    /// Layers taken out of `layers` (a failed publication, a retirement), each kept alive
    /// until the readers pinned when it was taken out are gone: an entry may be damaged and
    /// lead a reader to a layer no write names, and the reference [`Self::layer`] hands out
    /// must outlive the reader's pin. Keyed by a sequence number, which `withdrawn_limbo`
    /// hands back once those readers are gone.
    withdrawn: Mutex<Layers<B>>,
    withdrawn_limbo: Limbo<u64>,
    withdrawn_seq: AtomicU64,
    count: AtomicU64,
    resolved: Resolved,
}

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// Make an empty map at `root` (an all-zero, 64-byte aligned range of [`ROOT_BYTES`]), in
    /// one transaction (joining the caller's, if any). Every layer gets `config`.
    pub fn create(heap: &Heap<B>, root: u64, config: FastFairConfig) -> Result<Self> {
        head::check_new(heap.pool(), root, ROOT_BYTES)?;
        let (top, area) = heap.transaction(|tx| -> Result<_> {
            let area = head::write_head(tx, root, StructureKind::RecordBTreeMap)?;
            let top = FastFair::create(heap, root + TOP_AT, config)?;
            Ok((top, area))
        })?;
        Ok(RecordTreeMap::with_parts(heap, root, config, area, top))
    }

    /// The map's DRAM state around its top layer.
    fn with_parts(
        heap: &Heap<B>,
        root: u64,
        config: FastFairConfig,
        area: u64,
        top: FastFair<B>,
    ) -> Self {
        let top_header = LayerHeader {
            depth: 0,
            skip_from: 0,
            skipped: Vec::new(),
        };
        RecordTreeMap {
            heap: heap.clone(),
            root,
            config,
            records: Records::new(root, area),
            top: Arc::new(Layer::new(top, root + TOP_AT, top_header)),
            layers: ShardedLock::new(HashMap::new()),
            retiring: Limbo::default(),
            withdrawn: Mutex::new(HashMap::new()),
            withdrawn_limbo: Limbo::default(),
            withdrawn_seq: AtomicU64::new(0),
            count: AtomicU64::new(0),
            resolved: Resolved::default(),
        }
    }

    /// Open the map at `root`: every layer recovers (FAST&FAIR's open), layers a crash left
    /// unpublished or unlinked are freed, every record an interrupted write left in doubt is
    /// resolved, and layers a crash left empty are retired. Must run before anything else
    /// allocates from the heap after a crash. A map of format version 2 is upgraded to 3
    /// (`layout.rs`).
    pub fn open(heap: &Heap<B>, root: u64) -> Result<Self> {
        let (area, version) = head::read_head(heap, root, StructureKind::RecordBTreeMap)?;
        let top = FastFair::open(heap, root + TOP_AT)?;
        let config = FastFairConfig {
            node_size: top.node_size(),
            policy: top.policy(),
        };
        let mut map = RecordTreeMap::with_parts(heap, root, config, area, top);
        // Every layer reached from the top, opened (recovered) once; the records counted.
        let walked = map.walk_layers()?;
        *map.layers.get_mut().unwrap_or_else(|p| p.into_inner()) = walked.layers;
        map.count = AtomicU64::new(walked.records);
        map.free_unlinked_layers()?;
        // A record is reachable if the descent for its key ends at it: told without reading
        // any other record, so damage elsewhere does not stop the open.
        let resolved = map.records.resolve(&map.heap, |offset, key| {
            let guard = map.records.pin();
            Ok::<_, RecordMapError>(map.descend(key, &guard)?.record == Some(offset))
        })?;
        map.resolved = resolved;
        map.retire_at_open(walked.empty)?;
        if version == layout::VERSION_WITHOUT_COMPRESSION {
            head::upgrade_version(map.heap.pool(), root, layout::VERSION)?;
        }
        Ok(map)
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
}

impl<B> RecordTreeMap<B>
where
    B: Backend,
{
    /// The heap.
    pub fn heap(&self) -> &Heap<B> {
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

    /// The layer whose block is at `root`, for a reader pinned by `_guard` that found `root`
    /// in an entry while pinned.
    fn layer<'g>(&'g self, root: u64, _guard: &'g Guard) -> Result<&'g Layer<B>> {
        let layers = self.layers.read().unwrap_or_else(|p| p.into_inner());
        let layer: *const Layer<B> =
            Arc::as_ptr(layers.get(&root).ok_or_else(|| RecordMapError::Corrupt {
                root: self.root,
                reason: format!("an entry names layer {root:#x}, which is not one of the map's"),
            })?);
        drop(layers);
        // The layer was in `layers`, which holds an `Arc` of it, while the caller was pinned.
        // Every way out of `layers` goes through `withdraw_layer`, which keeps an `Arc` until
        // every reader pinned at that moment has unpinned: whatever entry led here, damaged
        // or not, the layer lives at least as long as the caller's pin.
        // SAFETY: so the layer stays alive as long as the guard, which the returned reference
        // borrows.
        Ok(unsafe { &*layer })
    }

    /// Take the layer at `root` out of `layers` (`None` if it is not there), keeping it alive
    /// for the readers pinned now (see `withdrawn`); the caller gets its `Arc`.
    fn withdraw_layer(&self, root: u64) -> Option<Arc<Layer<B>>> {
        let layer = self
            .layers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&root)?;
        let mut withdrawn = self.withdrawn.lock().unwrap_or_else(|p| p.into_inner());
        for id in self.withdrawn_limbo.drain() {
            withdrawn.remove(&id);
        }
        let id = self.withdrawn_seq.fetch_add(1, Ordering::Relaxed);
        withdrawn.insert(id, Arc::clone(&layer));
        drop(withdrawn);
        // Pinned after the removal: the readers this waits for include every one that could
        // have found the layer in `layers`.
        self.withdrawn_limbo.defer(id, id, &self.records.pin());
        Some(layer)
    }

    /// An owned handle of the layer at `root`, for a reader pinned by `_guard` that found
    /// `root` in an entry while pinned.
    fn owned_at(&self, root: u64, _guard: &Guard) -> Result<Arc<Layer<B>>> {
        let layers = self.layers.read().unwrap_or_else(|p| p.into_inner());
        layers
            .get(&root)
            .cloned()
            .ok_or_else(|| RecordMapError::Corrupt {
                root: self.root,
                reason: format!("an entry names layer {root:#x}, which is not one of the map's"),
            })
    }

    /// An owned handle of `layer` (one of the map's, reached while pinned).
    fn owned(&self, layer: &Layer<B>) -> Result<Arc<Layer<B>>> {
        if std::ptr::eq(layer, &*self.top) {
            return Ok(self.top.clone());
        }
        let layers = self.layers.read().unwrap_or_else(|p| p.into_inner());
        layers
            .get(&layer.root)
            .cloned()
            .ok_or_else(|| RecordMapError::Corrupt {
                root: self.root,
                reason: format!("layer {:#x} is not one of the map's", layer.root),
            })
    }

    /// Walk down the layers for `key` (pinned by `guard`) to the entry of its word.
    fn descend<'g>(&'g self, key: &[u8], guard: &'g Guard) -> Result<Spot<'g, B>> {
        let mut layer: &Layer<B> = &self.top;
        loop {
            let word = slice_word(key, layer.depth());
            match layer.tree.get(word)? {
                Some(v) if is_layer(v) => {
                    let child = self.layer(v & !LAYER_TAG, guard)?;
                    if !child.admits(key, layer.start() + SLICE) {
                        return Ok(Spot {
                            layer,
                            word,
                            record: None,
                            diverged: Some(child),
                        });
                    }
                    layer = child;
                }
                record => {
                    return Ok(Spot {
                        layer,
                        word,
                        record,
                        diverged: None,
                    })
                }
            }
        }
    }

    /// Whether the record `r` at `spot` is `key`'s, read from the record: a word of keys going
    /// on may name another key's of that word; any other record there (another key's where
    /// only the key looked for may be, or one of another word) is a damaged entry,
    /// [`RecordMapError::Corrupt`].
    fn holds(&self, spot: &Spot<'_, B>, r: u64, key: &[u8]) -> Result<bool> {
        let pool = self.heap.pool();
        let line = record_layout::first_line(pool, r)?;
        if line.key_equals(pool, r, key)? {
            return Ok(true);
        }
        let (other, _) = line.checked_key_value(pool, r)?;
        self.another_keys_record(spot, r, &other)?;
        Ok(false)
    }

    /// `Ok` if the whole record `r` of `other` (not the key looked for) may be at `spot`: a
    /// key going on past the same slice as the key looked for. Otherwise the entry is damaged.
    fn another_keys_record(&self, spot: &Spot<'_, B>, r: u64, other: &[u8]) -> Result<()> {
        let depth = spot.layer.depth();
        if goes_on(spot.word) && slice_word(other, depth) == spot.word {
            return Ok(());
        }
        Err(RecordMapError::Corrupt {
            root: self.root,
            reason: format!(
                "the entry of word {:#x} of layer {depth} points at the record at {r:#x}, which \
                 holds a key that does not belong there",
                spot.word
            ),
        })
    }

    /// Whether `record` holds `key`; a record whose header is impossible, or that holds
    /// another key and fails its checksum, is [`RecordMapError::CorruptRecord`] (it may be
    /// `key`'s, damaged).
    fn record_has_key(&self, record: u64, key: &[u8]) -> Result<bool> {
        let pool = self.heap.pool();
        let line = record_layout::first_line(pool, record)?;
        if line.key_equals(pool, record, key)? {
            return Ok(true);
        }
        line.check(pool, record)?;
        Ok(false)
    }

    /// The record `key` has now, if any.
    fn record_of(&self, key: &[u8]) -> Result<Option<u64>> {
        let guard = self.records.pin();
        let spot = self.descend(key, &guard)?;
        match spot.record {
            Some(r) if self.holds(&spot, r, key)? => Ok(Some(r)),
            _ => Ok(None),
        }
    }

    /// The value of `key`, if present. Takes no lock.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// The value of `key` into `out` (cleared first; its capacity is reused, so a read
    /// allocates nothing once `out` is large enough): whether `key` is present (`out` is left
    /// empty if not). Takes no lock.
    pub fn get_into(&self, key: &[u8], out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        if key.len() > MAX_KEY_BYTES {
            return Ok(false);
        }
        let guard = self.records.pin();
        let spot = self.descend(key, &guard)?;
        let Some(r) = spot.record else {
            return Ok(false);
        };
        // One line read decides and starts the copy.
        let pool = self.heap.pool();
        let line = record_layout::first_line(pool, r)?;
        if line.key_equals(pool, r, key)? {
            return match line.checked_value_into(pool, r, key, out) {
                Ok(()) => Ok(true),
                Err(e) => {
                    out.clear();
                    Err(e)
                }
            };
        }
        // This key's record damaged (its checksum fails), or a whole record of another key:
        // one going on past the same slice, or one a damaged entry points at.
        let (other, _) = line.checked_key_value(pool, r)?;
        self.another_keys_record(&spot, r, &other)?;
        Ok(false)
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

impl<B: Backend> Drop for RecordTreeMap<B> {
    /// No handle, so no reader, is left: records retired by this map go back to the heap now
    /// instead of after an epoch no one will wait for, and so do retired layers (a layer whose
    /// free fails stays named in its retire word, and the next open frees it).
    fn drop(&mut self) {
        self.records.release_all(&self.heap);
        for retired in self.retiring.take_all() {
            let _ = self.free_retired(retired);
        }
    }
}

/// The value of the record at `record`, checked.
fn read_value<B: Backend>(pool: &Pool<B>, record: u64) -> Result<Vec<u8>> {
    record_layout::first_line(pool, record)?.checked_value(pool, record)
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
