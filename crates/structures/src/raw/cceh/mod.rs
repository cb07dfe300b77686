//! CCEH: Cacheline-Conscious Extendible Hashing (FAST'19 CCEH; with the speculative helper
//! thread of Optane buffering (EuroSys'22), Sec. 4.1).
//!
//! # Layout
//!
//! * A **root** of 32 bytes at an offset the caller chooses: magic, the directory's offset, the
//!   number of buckets per segment, and the offset of a *retired* directory (0 if none): one
//!   that a doubling replaced but that a lookup may still be reading (see Concurrency).
//! * The **directory**: its global depth `G` (8 bytes), then `2^G` entries. An entry is a
//!   segment's offset with the segment's *local depth* `L` in its low 6 bits (segments are
//!   64-byte aligned), so a segment is exactly its buckets and fits its allocator size class
//!   with nothing wasted.
//! * A **segment**: `buckets_per_segment` (default 256) cache-line buckets of four 16-byte
//!   slots `(key, value)`: 16 KiB by default.
//!
//! A key's hash ([`hash`]) picks the segment by its `G` most significant bits and the bucket by
//! its least significant bits; the key may sit in any slot of that bucket and the next three
//! (linear probing over four buckets, wrapping inside the segment).
//!
//! # Crash consistency
//!
//! * **Insert**: the value is stored, then the key with one 8-byte store, in the same cache
//!   line; one flush and one fence make both durable. Stores to one line persist in order (the
//!   prefix rule of the x86 persistency model, Themis, Sec. II-C), so a crash leaves the slot
//!   empty, or empty with a stray value, or whole: never a key with a wrong value. An insert
//!   without a split costs exactly one flush and one fence.
//! * **Remove**: one 8-byte store of the empty key, persisted. **Update**: one 8-byte store of
//!   the value, persisted.
//! * **Displacement** (a full probing window): before splitting, keys move further along their
//!   own windows to make room: a key of the full window moves to a later bucket of its window,
//!   where room may in turn be made the same way (two moves deep at most, the shortest chain
//!   first). Each move copies the key on and persists it, then the old slot is reused (emptied
//!   first, in the same line). A crash between the two leaves the moved key twice with one
//!   value; [`Cceh::open`] keeps one copy. Keys move only forward in their own probing order,
//!   which is what keeps lock-free lookups correct, and the window stays four buckets: splits
//!   come later (a fuller table, fewer bytes per key) at the price of one more flush and fence
//!   per move and of the search for a chain (deeper chains were measured to save a little more
//!   memory and cost far more time).
//! * **Split** (a window full even after that), in the order of FAST'19 CCEH, Sec. 4: a new
//!   segment receives, slot for slot, the keys whose next hash bit is 1, and the first
//!   directory entry of the old segment's upper half is pointed at it (with the new local
//!   depth), in one undo-log transaction of `pmem-undo-log` that also allocates the segment:
//!   before it commits, a crash rolls everything back (no segment leaks); once it has, the new
//!   segment is written, persisted and reachable. Then the rest of the upper half is pointed at
//!   the new segment (persisted), then the lower half takes the new local depth (persisted),
//!   each entry one 8-byte store. The keys that moved stay in the old segment (*lazy
//!   deletion*): a slot whose key's hash prefix no longer matches its segment counts as free. A
//!   crash between these steps leaves a directory whose entries disagree about the old
//!   segment's span; [`Cceh::open`] finishes the split from the entries there, as FAST'19's
//!   recovery does (`finish_interrupted_split`; [`Cceh::repaired_at_open`] counts the entries
//!   it rewrote).
//! * **Directory doubling** writes a directory twice the size, persisted, and swaps it in with
//!   one 8-byte store of the root's pointer, in one transaction that allocates the new
//!   directory and records the old one as retired (so a crash neither leaks nor frees a live
//!   directory).
//!
//! # Integrity
//!
//! Slots hold their key and value inline, 8 bytes each, with no checksum: a bit flipped in a
//! slot by the medium is **not detected**. A lookup returns the flipped value, or misses the key
//! (or finds one never inserted) if the key word flipped. What [`Cceh::open`] checks is the
//! shape: the root, the directory's depth and entries, and that every segment is a block the
//! heap allocated ([`CcehError::Corrupt`]). A checksum per bucket line would not fit for free:
//! the line is four full slots, so it would take a slot's room (a fourth fewer keys per
//! bucket), or a checksum line beside each bucket with one more line written and flushed per
//! insert, remove or update; and since it cannot change in the same 8-byte store as the slot,
//! recovery would have to tell a crash between the two from damage. The datalog, whose pages
//! are 4 KiB, checks its data ([`crate::datalog`]).
//!
//! # Concurrency
//!
//! Writers of different segments run in parallel: a writer takes its segment stripe's DRAM
//! lock (one compare-and-swap), then checks that the directory still maps its key there.
//! Splits and doublings take a structure mutex and the split segment's stripe lock. Lookups
//! take no lock and no barrier: they run inside a read section (`crate::sync::readers`: two
//! plain stores, the reclaimer pays an asymmetric barrier), read the
//! directory, scan the window, then check that the directory and the key's entry are still the
//! ones they started from (a split or doubling in between means a retry). A directory replaced
//! by a doubling is *retired*: recorded in the root, so a crash cannot leak it, and freed by a
//! later split or doubling once a grace period says no lookup can still be reading it (or at the
//! next [`Cceh::open`]). Segments are never freed. See [`Cceh`].
//!
//! # Keys
//!
//! `u64` keys and values. Key 0 ([`EMPTY_KEY`]) marks an empty slot and is rejected with
//! [`CcehError::ReservedKey`]. The hash is fixed (MurmurHash3's 64-bit finalizer, a bijection, so
//! distinct keys never share a full hash): a table written today opens tomorrow.
//!
//! Inside the crate a table may hold *hashed key words* instead (the byte-key map's): each key
//! word is a 64-bit hash of a byte key, which entries of colliding keys share, and the value
//! points at a record holding the key. Operations recognise their slot through a probe that
//! also checks the value (`SlotProbe`, `probe.rs`; the `u64` operations' probe checks nothing
//! and compiles away), and recovery and [`Cceh::check`] tell entries apart by key word and
//! value. The mode is the caller's to give at create and open: the root does not record it.
//!
//! # Where things are
//!
//! | file | what it owns |
//! |---|---|
//! | `mod.rs` | the public types, [`Cceh::create`], counters |
//! | `layout.rs` | every offset: root, directory, entries, segments, buckets, slots |
//! | `hashing.rs` | the fixed hash, directory prefixes, which keys a split moves |
//! | `access.rs` | checked reads of pool words through one range-checked view |
//! | `probe.rs` | how an operation recognises its slot (`SlotProbe`); unique or hashed key words |
//! | `lookup.rs` | the lock-free lookup ([`Cceh::get`], [`Cceh::get_batch`]), prefetching |
//! | `write.rs` | insert, upsert, remove: stripe locks and the failure-atomic slot commit |
//! | `displace.rs` | making room in a full window by moving keys forward |
//! | `split.rs` | segment split and directory doubling, and why each is crash-safe |
//! | `reclaim.rs` | directories retired by a doubling, freed after a grace period |
//! | `recovery.rs` | [`Cceh::open`]: finishing an interrupted split, checks, duplicate keys |
//! | `check.rs` | [`Cceh::check`]: the directory and every segment verified, keys counted |
//! | `verify.rs` | [`Cceh::verify`]: the same walk, read-only, every violation listed as a typed finding |
//! | `snapshot.rs` | walks of the whole table: [`Cceh::iter`], [`Cceh::blocks`] |
//! | `batch.rs` | [`Cceh::insert_batch`] and the speculative helper thread |
//! | `store_batch.rs` | a store write batch's changes: slot writes planned, room made by splits first, applied in a single write's order |
//! | `interleaving_tests/` | (tests) lookups stepped against writers, every schedule: the harness (`mod.rs`) and the scenarios (`scenarios.rs`) |
//! | `probe_tests.rs` | (tests) colliding key words: splits, `before_store`, recovery, races |
//! | `probe_crash_tests.rs` | (tests) colliding key words under simulated crashes |
//! | `test_heap.rs` | (tests) a small heap and key generators |

mod access;
mod batch;
mod check;
mod directory_cache;
mod displace;
mod hashing;
#[cfg(test)]
mod interleaving_tests;
mod layout;
mod lookup;
mod probe;
#[cfg(test)]
mod probe_crash_tests;
#[cfg(test)]
mod probe_tests;
mod reclaim;
mod recovery;
mod snapshot;
mod split;
mod store_batch;
#[cfg(test)]
mod test_heap;
mod verify;
mod write;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use pmem_ordering::{Backend, PoolError};
use pmem_undo_log::{Heap, TxError};

use crate::kind::{describe_magic, StructureKind};
use crate::sync::Stripes;
use crate::u64map::ReservedKey;

use access::SegmentSpan;
use directory_cache::DirectoryCache;
pub use hashing::hash;
use layout::{Directory, Entry, Root, SegmentShape};
pub(crate) use probe::{KeyWords, SlotProbe};
use reclaim::Retired;
pub use snapshot::Iter;
pub(crate) use store_batch::SlotWrite;

/// The reserved key that marks an empty slot.
pub const EMPTY_KEY: u64 = 0;
/// The refusal of [`EMPTY_KEY`] ([`CcehError::ReservedKey`]).
const RESERVED: ReservedKey = ReservedKey {
    key: EMPTY_KEY,
    reason: "a CCEH hash table marks its empty slots with key 0",
};
/// Slots per bucket (a 64-byte bucket of 16-byte slots).
pub const SLOTS_PER_BUCKET: u64 = 4;
/// Buckets a key may be probed in.
pub const PROBE_BUCKETS: u64 = 4;
/// Bytes of the root.
pub const ROOT_BYTES: u64 = 32;
/// The largest global depth: the local depth must fit the entry's 6 low bits.
pub const MAX_DEPTH: u64 = 58;

/// Segment lock stripes.
const STRIPES: usize = 64;

/// What can go wrong with a CCEH table.
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum CcehError {
    /// Key 0 ([`EMPTY_KEY`]) is reserved: it marks an empty slot.
    #[error(transparent)]
    ReservedKey(ReservedKey),
    /// A transaction of a split or doubling failed (allocation, log space, pool access).
    #[error(transparent)]
    Tx(#[from] TxError),
    /// [`Cceh::create`] on a root that is in use (its magic word is not zero):
    /// nothing was written, the root's contents are intact.
    #[error(
        "root {root:#x} already holds {found}: open it, or create the table at an unused \
         (all-zero) root"
    )]
    AlreadyExists {
        /// The root offset.
        root: u64,
        /// What the root holds, in words ([`crate::kind::describe_magic`]).
        found: String,
    },
    /// [`Cceh::open`] on a root that holds something else (another kind of
    /// structure, nothing, or an unknown magic, printed as text).
    #[error("root {root:#x} holds {found}, not {}", StructureKind::HashMap.describe())]
    WrongKind {
        /// The root offset.
        root: u64,
        /// What the root holds, in words ([`crate::kind::describe_magic`]).
        found: String,
    },
    /// The table at the root is damaged.
    #[error("not a valid CCEH table at offset {root:#x}: {reason}")]
    Corrupt {
        /// The root offset.
        root: u64,
        /// What is wrong.
        reason: String,
    },
    /// A configuration that cannot be used.
    #[error("invalid CCEH configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
    /// The directory cannot grow further.
    #[error("the directory has reached its largest depth ({MAX_DEPTH})")]
    DirectoryFull,
    /// A write needed a directory doubling while the writing thread itself was inside one of
    /// the table's lookups (a crate-internal caller writing from a lookup's `read` callback),
    /// and the directory retired by the previous doubling was still waiting for that lookup:
    /// the doubling would wait for its own thread forever. Nothing was written; finish the
    /// lookup and retry. (Epoch guards of `crossbeam-epoch` hold nothing back: lookups do not
    /// pin it.)
    #[error(
        "a directory doubling must wait for the lookups in progress, and this thread is inside \
         one itself: nothing was written; finish the lookup and retry"
    )]
    WriterPinned,
    /// A table whose key words are hashes of byte keys: [`PROBE_BUCKETS`] ×
    /// [`SLOTS_PER_BUCKET`] entries already share this key word, which fills its probing
    /// window, and no split can separate entries of one key word. Nothing was written.
    #[error(
        "{} entries already share key word {word:#x}: its probing window is full, and no split \
         separates entries of one key word; nothing was written",
        PROBE_BUCKETS * SLOTS_PER_BUCKET
    )]
    KeyWordWindowFull {
        /// The key word.
        word: u64,
    },
}

/// The message, as `Display` prints it: readable where a `Debug` is shown, e.g. the error a
/// `main() -> Result<(), Box<dyn Error>>` returns.
impl fmt::Debug for CcehError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<PoolError> for CcehError {
    fn from(e: PoolError) -> Self {
        CcehError::Tx(TxError::Pool(e))
    }
}

/// Shape of a new table, recorded in its root by [`Cceh::create`] and read back by
/// [`Cceh::open`] ([`Cceh::config`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcehConfig {
    /// Buckets per segment: a power of two, at least [`PROBE_BUCKETS`]. 256 (16 KiB segments)
    /// by default, as in FAST'19; small values force many splits in tests.
    pub buckets_per_segment: u64,
}

impl Default for CcehConfig {
    fn default() -> Self {
        CcehConfig {
            buckets_per_segment: 256,
        }
    }
}

/// Options of [`Cceh::insert_batch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    /// Run the speculative helper thread (Optane buffering (EuroSys'22), Sec. 4.1).
    pub helper: bool,
    /// Have the inserting thread itself prefetch the lookup path of the key `depth` ahead
    /// before each insert: the helper's loads without the helper's thread. A baseline that
    /// tells what the second thread adds (or costs) over plain software prefetching.
    pub inline_prefetch: bool,
    /// How many keys ahead of the inserting thread the helper may walk, or the inline
    /// prefetch looks (8, the depth Optane buffering (EuroSys'22), Sec. 4.1 found best, by
    /// default).
    pub depth: usize,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            helper: false,
            inline_prefetch: false,
            depth: 8,
        }
    }
}

/// Points of a write where the interleaving tests (`interleaving_tests/`) let a lookup run in
/// between two of the writer's stores; outside tests, [`write_step`] is nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WriteStep {
    /// `put_slot` emptied a slot that held another key.
    SlotEmptied,
    /// `put_slot` stored the value; the key is next.
    ValueStored,
    /// `put_slot` stored the key; the persist is next.
    KeyStored,
    /// A split's transaction committed: the first entry of the upper half names the new
    /// segment.
    SplitCommitted,
    /// A split pointed the rest of the upper half at the new segment.
    UpperHalfPointed,
    /// A split gave the lower half the new local depth: the split is done.
    LowerHalfDeepened,
    /// A doubling's transaction committed: the root names the new directory.
    DirectorySwapped,
}

/// Nothing: only tests stop a writer between its stores.
#[cfg(not(test))]
#[inline(always)]
fn write_step(_step: WriteStep) {}

#[cfg(test)]
use interleaving_tests::write_step;

/// Where a key's probing window is.
#[derive(Clone, Copy, Debug)]
struct Place {
    directory: Directory,
    global_depth: u64,
    index: u64,
    segment: u64,
    local_depth: u64,
}

impl Place {
    /// Offset of the directory entry this place was read from.
    #[inline]
    fn entry_offset(&self) -> u64 {
        self.directory.entry(self.index)
    }

    /// The entry's value: segment offset and local depth.
    #[inline]
    fn entry(&self) -> u64 {
        Entry::new(self.segment, self.local_depth).word()
    }
}

/// A CCEH table in a heap.
///
/// The handle holds its own clone of the heap (a [`Heap`] is a shared handle), so it is
/// `Send + Sync + 'static` and can live beside the heap or go to another thread.
///
/// Operations take `&self` and are safe to call from several threads. The locks live in DRAM,
/// never in the pool, so a crash cannot leave one held:
///
/// * inserts, updates and removes take the lock of their segment's stripe (one of 64, a single
///   compare-and-swap), then check that the directory still names that segment for their key
///   (else they unlock and look again): writers of different segments run in parallel;
/// * a split or doubling takes the *structure* mutex (one structural change at a time) and the
///   stripe lock of the segment it splits, so no writer of that segment runs meanwhile; a
///   snapshot ([`Cceh::iter`]) takes the structure mutex and every stripe;
/// * lookups take no lock, issue no barrier and never wait, not even for a split: they enter a
///   read section (two plain stores), scan the probing window with atomic loads, re-read the key after the value (a slot
///   reused under them means a rescan), and finally check that the directory pointer and the
///   key's directory entry are unchanged (a split or doubling that ran meanwhile means a retry
///   from the top). The section keeps a directory that a doubling retired from being freed
///   while they read it.
pub struct Cceh<B: Backend> {
    heap: Heap<B>,
    root: Root,
    /// The index among the pool's words of the root's directory word (the root is 64-byte
    /// aligned: checked at create and open), for the lookups' unchecked alignment.
    directory_word: usize,
    shape: SegmentShape,
    /// The shape's extent in words, for the lookup's unchecked reads inside a segment.
    span: SegmentSpan,
    /// The current directory and its depth, for lookups (see `directory_cache.rs`): stored
    /// by this handle's writers only, after the root.
    directory_cache: DirectoryCache,
    structure: Mutex<()>,
    stripes: Stripes,
    /// The directory the last doubling replaced (also recorded in the root), until a later
    /// split or doubling frees it.
    retired: Mutex<Option<Retired>>,
    /// Keys moved by [`Cceh::displacements`].
    displaced: AtomicU64,
    /// Directory entries [`Cceh::open`] rewrote to finish a split a crash interrupted.
    repaired_at_open: u64,
    /// Whether key words are keys or hashes of keys, as the caller said at create or open.
    key_words: KeyWords,
}

/// Buckets per segment this table supports: a power of two, enough for one probing window, at
/// most 2^20 (a 64 MiB segment).
fn valid_bucket_count(buckets: u64) -> bool {
    buckets.is_power_of_two() && (PROBE_BUCKETS..=1 << 20).contains(&buckets)
}

impl<B: Backend> Cceh<B> {
    /// Make an empty table with its root at `root` (64-byte aligned, 32 bytes, e.g. in the pool's
    /// root object), recording `config` there for [`Cceh::open`]. The root and first segment
    /// are written in one transaction. A root in use (a non-zero magic word) is refused with
    /// [`CcehError::AlreadyExists`], and left as it is.
    pub fn create(heap: &Heap<B>, root: u64, config: CcehConfig) -> Result<Self, CcehError> {
        Cceh::create_in_mode(heap, root, config, KeyWords::Unique)
    }

    /// [`Cceh::create`] for a byte-key table: key words are hashes of keys, shared by the
    /// entries of colliding keys, which [`SlotProbe::matches`] tells apart by their values. The
    /// mode is not recorded in the root: open the table with [`Cceh::open_hashed`].
    pub(crate) fn create_hashed(
        heap: &Heap<B>,
        root: u64,
        config: CcehConfig,
    ) -> Result<Self, CcehError> {
        Cceh::create_in_mode(heap, root, config, KeyWords::Hashed)
    }

    /// [`Cceh::create`] with key words of the given mode.
    fn create_in_mode(
        heap: &Heap<B>,
        root: u64,
        config: CcehConfig,
        key_words: KeyWords,
    ) -> Result<Self, CcehError> {
        let b = config.buckets_per_segment;
        if !valid_bucket_count(b) {
            return Err(CcehError::InvalidConfig {
                reason: format!("{b} buckets per segment: a power of two from {PROBE_BUCKETS} to 2^20 is needed"),
            });
        }
        if !root.is_multiple_of(64) {
            return Err(CcehError::InvalidConfig {
                reason: format!("root offset {root:#x} is not 64-byte aligned"),
            });
        }
        heap.pool().check_range(root, ROOT_BYTES)?;
        let magic = heap.pool().read::<u64>(root)?;
        if magic != 0 {
            return Err(CcehError::AlreadyExists {
                root,
                found: describe_magic(magic),
            });
        }
        let shape = SegmentShape::new(b);
        heap.transaction(|tx| {
            let segment = tx.alloc(shape.bytes())?;
            tx.write(segment.offset(), &vec![0u8; shape.bytes() as usize])?;
            // Global depth 0, one entry: the segment, local depth 0.
            let directory = tx.alloc(Directory::bytes(0))?;
            let entries = [Entry::new(segment.offset(), 0)];
            tx.write(directory.offset(), &Directory::image(0, entries))?;
            tx.write(root, &Root::image(directory.offset(), b))
        })?;
        Cceh::with_shape(heap, Root::at(root), shape, key_words)
    }

    /// The in-DRAM state of the table at `root`, with no key counted and nothing retired.
    fn with_shape(
        heap: &Heap<B>,
        root: Root,
        shape: SegmentShape,
        key_words: KeyWords,
    ) -> Result<Self, CcehError> {
        let words = access::whole_pool(heap.pool())?;
        let span = SegmentSpan::of(shape)
            .and_then(|span| span.in_pool(words.len()))
            .ok_or_else(|| CcehError::InvalidConfig {
                reason: format!(
                    "{} buckets per segment in a pool of {} bytes",
                    shape.buckets(),
                    heap.pool().size()
                ),
            })?;
        // The directory the root names, if its words can be read (else an empty cache: the
        // open's own checks tell what is wrong).
        // Lookups read the root's directory word unchecked.
        if words.get(layout::pool_word(root.directory())).is_none() {
            return Err(CcehError::InvalidConfig {
                reason: format!("root {:#x} runs past the pool", root.offset()),
            });
        }
        let directory = Cceh::<B>::peek(words, root.directory()).unwrap_or(0);
        let depth = Cceh::<B>::peek(words, Directory::at(directory).depth()).unwrap_or(0);
        let directory_cache = DirectoryCache::new(words, directory, depth);
        Ok(Cceh {
            heap: heap.clone(),
            root,
            directory_word: layout::pool_word(root.directory()),
            shape,
            span,
            directory_cache,
            structure: Mutex::new(()),
            stripes: Stripes::new(STRIPES),
            retired: Mutex::new(None),
            displaced: AtomicU64::new(0),
            repaired_at_open: 0,
            key_words,
        })
    }

    /// Whether the table's key words are its keys or hashes of keys (as given at create or
    /// open).
    #[cfg(test)]
    pub(crate) fn key_words(&self) -> KeyWords {
        self.key_words
    }

    /// The heap the table lives in (through whatever holder it was given: a borrow, an
    /// `Arc`, ...).
    pub fn heap(&self) -> &Heap<B> {
        &self.heap
    }

    /// How many directory entries [`Cceh::open`] rewrote to finish a split that a crash had
    /// interrupted (0 for a table made by [`Cceh::create`]).
    pub fn repaired_at_open(&self) -> u64 {
        self.repaired_at_open
    }

    /// How many keys were moved along their probing window to make room for another since the
    /// table was opened (each move costs one extra flush and fence, and postpones a split).
    pub fn displacements(&self) -> u64 {
        self.displaced.load(Ordering::Relaxed)
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.stripes.total()
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The configuration the table was created with, as its root records it.
    pub fn config(&self) -> CcehConfig {
        CcehConfig {
            buckets_per_segment: self.shape.buckets(),
        }
    }

    /// The global depth (log2 of the directory's size).
    pub fn global_depth(&self) -> Result<u64, CcehError> {
        self.word(self.current_directory()?.depth())
    }
}
