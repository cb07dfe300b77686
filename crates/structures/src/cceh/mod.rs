//! CCEH: Cacheline-Conscious Extendible Hashing (Nam et al., "Write-Optimized Dynamic Hashing
//! for Persistent Memory", FAST'19; as studied in seed 001 Sec. 4.1).
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
//!   prefix rule of seed 004 Sec. II-C), so a crash leaves the slot empty, or empty with a stray
//!   value, or whole: never a key with a wrong value. An insert without a split costs exactly one
//!   flush and one fence.
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
//! * **Split** (a window full even after that), in the order of FAST'19: a new segment receives,
//!   slot for slot, the keys whose next hash bit is 1, and the first directory entry of the
//!   old segment's upper half is pointed at it (with the new local depth), in one undo-log
//!   transaction of `pmem-undo-log` that also allocates the segment: before it commits, a crash
//!   rolls everything back (no segment leaks); once it has, the new segment is written,
//!   persisted and reachable. Then the rest of the upper half is pointed at the new segment
//!   (persisted), then the lower half takes the new local depth (persisted), each entry one
//!   8-byte store. The keys that moved stay in the old segment (*lazy deletion*): a slot
//!   whose key's hash prefix no longer matches its segment counts as free. A crash between
//!   these steps leaves a directory whose entries disagree about the old segment's span;
//!   [`Cceh::open`] finishes the split from the entries there, as FAST'19's recovery does
//!   (`finish_interrupted_split`; [`Cceh::repaired_at_open`] counts the entries it rewrote).
//! * **Directory doubling** writes a directory twice the size, persisted, and swaps it in with
//!   one 8-byte store of the root's pointer, in one transaction that allocates the new
//!   directory and records the old one as retired (so a crash neither leaks nor frees a live
//!   directory).
//!
//! # Concurrency
//!
//! Writers of different segments run in parallel: a writer takes its segment stripe's DRAM
//! lock (one compare-and-swap), then checks that the directory still maps its key there.
//! Splits and doublings take a structure mutex and the split segment's stripe lock. Lookups
//! take no lock at all: they run inside a `crossbeam-epoch` critical section, read the
//! directory, scan the window, then check that the directory and the key's entry are still the
//! ones they started from (a split or doubling in between means a retry). A directory replaced
//! by a doubling is *retired*: recorded in the root, so a crash cannot leak it, and freed by a
//! later split or doubling once the epoch says no lookup can still be reading it (or at the
//! next [`Cceh::open`]). Segments are never freed. See [`Cceh`].
//!
//! # Keys
//!
//! `u64` keys and values. Key 0 ([`EMPTY_KEY`]) marks an empty slot and is rejected with
//! [`CcehError::ReservedKey`]. The hash is fixed (MurmurHash3's 64-bit finalizer, a bijection, so
//! distinct keys never share a full hash): a table written today opens tomorrow.

use std::ops::Deref;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_epoch as epoch;

use pmem_ordering::{Backend, Pool, PoolError, Words};
use pmem_undo_log::{Heap, TxError};

use crate::sync::affinity::{current_cpu, pin_away_from};
use crate::sync::{StripeGuard, Stripes};

/// The reserved key that marks an empty slot.
pub const EMPTY_KEY: u64 = 0;
/// Slots per bucket (a 64-byte bucket of 16-byte slots).
pub const SLOTS_PER_BUCKET: u64 = 4;
/// Buckets a key may be probed in.
pub const PROBE_BUCKETS: u64 = 4;
/// How deep a chain of moves a full window may start before its segment splits (see
/// `Cceh::displace`): each move shifts one key to a later bucket of its own window.
const DISPLACEMENT_HOPS: u32 = 2;
const BUCKET_BYTES: u64 = 64;
const WORDS_PER_BUCKET: u64 = BUCKET_BYTES / 8;
const SLOT_BYTES: u64 = 16;
const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"CCEH\0v01");
/// Bytes of the root.
pub const ROOT_BYTES: u64 = 32;
/// The largest global depth: the local depth must fit the entry's 6 low bits.
pub const MAX_DEPTH: u64 = 58;
const DEPTH_MASK: u64 = 63;

/// The hash of a key: MurmurHash3's 64-bit finalizer. Fixed forever: the layout depends on it.
pub fn hash(key: u64) -> u64 {
    let mut h = key;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// What can go wrong with a CCEH table.
#[derive(Debug, thiserror::Error)]
pub enum CcehError {
    /// Key 0 is reserved for empty slots.
    #[error("key 0 is reserved (it marks an empty slot)")]
    ReservedKey,
    /// A transaction of a split or doubling failed (allocation, log space, pool access).
    #[error(transparent)]
    Tx(#[from] TxError),
    /// The root does not hold a CCEH table, or the table is damaged.
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
    /// A write needed a directory doubling while the writing thread itself was pinned in
    /// `crossbeam-epoch` (it held a guard of its own) and the directory retired by the previous
    /// doubling was still waiting for readers: the doubling would wait for this thread's own
    /// guard forever. Nothing was written; drop the guard and retry.
    #[error(
        "a directory doubling must wait for pinned readers, and this thread is pinned itself \
         (it holds a crossbeam-epoch guard): nothing was written; drop the guard and retry"
    )]
    WriterPinned,
}

impl From<PoolError> for CcehError {
    fn from(e: PoolError) -> Self {
        CcehError::Tx(TxError::Pool(e))
    }
}

/// Shape of a new table.
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
    /// Run the speculative helper thread (seed 001 Sec. 4.1).
    pub helper: bool,
    /// Have the inserting thread itself prefetch the lookup path of the key `depth` ahead
    /// before each insert: the helper's loads without the helper's thread. A baseline that
    /// tells what the second thread adds (or costs) over plain software prefetching.
    pub inline_prefetch: bool,
    /// How many keys ahead of the inserting thread the helper may walk, or the inline
    /// prefetch looks (8, the depth seed 001 found best, by default).
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

/// Points of a lookup where tests may interfere (see `Cceh::get_observed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LookupStep {
    /// The directory entry was read; the window is next.
    Located,
    /// The keys of one bucket were read (and compared with the key looked up).
    BucketRead,
}

/// Where a key's probing window is.
#[derive(Clone, Copy, Debug)]
struct Place {
    directory: u64,
    global_depth: u64,
    index: u64,
    segment: u64,
    local_depth: u64,
}

impl Place {
    /// Offset of the directory entry this place was read from.
    fn entry_offset(&self) -> u64 {
        self.directory + 8 + 8 * self.index
    }

    /// The entry's value: segment offset and local depth.
    fn entry(&self) -> u64 {
        self.segment | self.local_depth
    }
}

/// A CCEH table in a heap.
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
/// * lookups take no lock and never wait, not even for a split: they pin a `crossbeam-epoch`
///   guard, scan the probing window with atomic loads, re-read the key after the value (a slot
///   reused under them means a rescan), and finally check that the directory pointer and the
///   key's directory entry are unchanged (a split or doubling that ran meanwhile means a retry
///   from the top). The guard keeps a directory that a doubling retired from being freed while
///   they read it.
pub struct Cceh<'h, B: Backend, P: Deref<Target = Pool<B>>> {
    heap: &'h Heap<B, P>,
    root: u64,
    buckets: u64,
    structure: Mutex<()>,
    stripes: Stripes,
    /// The directory the last doubling replaced (also recorded at `root + 24`), until a later
    /// split or doubling frees it.
    retired: Mutex<Option<Retired>>,
    /// Keys moved by [`Cceh::displacements`].
    displaced: AtomicU64,
    /// Every word of the pool, range-checked once: lookups load through it, each load one
    /// index check instead of the pool's offset, alignment and size checks.
    words: Words<'h>,
    /// Directory entries [`Cceh::open`] rewrote to finish a split a crash interrupted.
    repaired_at_open: u64,
}

/// A view of every whole word of `pool`.
fn whole_pool<B: Backend>(pool: &Pool<B>) -> Result<Words<'_>, PoolError> {
    pool.words(0, (pool.size() / 8) as usize)
}

/// A directory replaced by a doubling, and whether the epoch has since shown that no lookup
/// can still be reading it.
struct Retired {
    directory: u64,
    reclaimable: Arc<AtomicBool>,
}

impl Retired {
    /// Retire `directory`, already unlinked from the root: the flag is set once every lookup
    /// that might have loaded it has unpinned.
    fn new(directory: u64) -> Retired {
        let reclaimable = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&reclaimable);
        let guard = epoch::pin();
        guard.defer(move || flag.store(true, Ordering::Release));
        guard.flush();
        Retired {
            directory,
            reclaimable,
        }
    }

    fn is_reclaimable(&self) -> bool {
        self.reclaimable.load(Ordering::Acquire)
    }

    /// Wait until the directory can be freed: lookups are short and never block, so the epoch
    /// moves on as soon as this thread helps it along.
    fn wait_until_reclaimable(&self) {
        while !self.is_reclaimable() {
            epoch::pin().flush();
            std::thread::yield_now();
        }
    }
}

/// Lookups of [`Cceh::get_batch`] under one epoch guard.
const BATCH_PIN_CHUNK: usize = 1024;

/// Offset of the retired directory's word in the root.
const RETIRED_AT: u64 = 24;

/// Segment lock stripes.
const STRIPES: usize = 64;

/// The buckets a displacement chain starting in one window can reach, read once: bucket `r`
/// of it is the `r`-th after the window's home bucket (wrapping in the segment; a segment
/// smaller than the reach has each of its buckets once).
struct Neighbourhood {
    segment: u64,
    home: u64,
    mask: u64,
    buckets: Vec<NearBucket>,
    /// Bit `r`: bucket `r` was found to have no room within one move. That does not depend on
    /// the chain that led there (a bucket on a chain has no free slot, so it is never a
    /// chain's end), so the search asks each bucket once, not once per chain through it.
    no_room_in_one_move: std::cell::Cell<u16>,
}

/// One bucket of a [`Neighbourhood`].
#[derive(Clone, Copy, Default)]
struct NearBucket {
    keys: [u64; SLOTS_PER_BUCKET as usize],
    /// Each key's home bucket, relative to the window's home (meaningless for a free slot).
    homes: [u64; SLOTS_PER_BUCKET as usize],
    /// Bit `s` set: slot `s` is free (empty, or holding a key a split left behind).
    free: u8,
}

/// How far past a window's home a displacement chain can reach: the window, then up to
/// `PROBE_BUCKETS - 1` buckets further per move.
const DISPLACEMENT_REACH: u64 = PROBE_BUCKETS + DISPLACEMENT_HOPS as u64 * (PROBE_BUCKETS - 1);
const _: () = assert!(
    DISPLACEMENT_REACH <= 16,
    "Neighbourhood's bit masks are 16 bits"
);

impl Neighbourhood {
    fn read<B: Backend, P: Deref<Target = Pool<B>>>(
        table: &Cceh<'_, B, P>,
        place: &Place,
        h: u64,
    ) -> Result<Neighbourhood, CcehError> {
        let segment = table.segment_words(place.segment)?;
        let mask = table.buckets - 1;
        let home = h & mask;
        let pattern = prefix(h, place.local_depth);
        let buckets = (0..DISPLACEMENT_REACH.min(table.buckets))
            .map(|rel| {
                let first = (((home + rel) & mask) * WORDS_PER_BUCKET) as usize;
                let line = segment
                    .line(first)
                    .ok_or_else(|| table.bad_offset(place.segment + 8 * first as u64, 64))?;
                let mut bucket = NearBucket::default();
                for s in 0..SLOTS_PER_BUCKET as usize {
                    let k = line[2 * s];
                    bucket.keys[s] = k;
                    let hk = hash(k);
                    if k == EMPTY_KEY || prefix(hk, place.local_depth) != pattern {
                        bucket.free |= 1 << s;
                    }
                    bucket.homes[s] = (hk & mask).wrapping_sub(home) & mask;
                }
                Ok(bucket)
            })
            .collect::<Result<Vec<_>, CcehError>>()?;
        Ok(Neighbourhood {
            segment: place.segment,
            home,
            mask,
            buckets,
            no_room_in_one_move: std::cell::Cell::new(0),
        })
    }

    /// A chain of moves that frees a slot of bucket `rel` (relative to the window's home)
    /// within `hops` moves: its free slot, or one of its keys moved forward along that key's
    /// own window into room made the same way in a later bucket. Fills `chain[depth..]` with
    /// `(bucket, slot)` from the slot to free to the free slot found, and returns the chain's
    /// length. Buckets already on the chain are not used again.
    fn room(
        &self,
        rel: u64,
        hops: u32,
        chain: &mut [(u64, usize); DISPLACEMENT_HOPS as usize + 1],
        depth: usize,
    ) -> Option<usize> {
        let bucket = &self.buckets[rel as usize];
        if bucket.free != 0 {
            chain[depth] = (rel, bucket.free.trailing_zeros() as usize);
            return Some(depth + 1);
        }
        if hops == 0 || (hops == 1 && self.no_room_in_one_move.get() & (1 << rel) != 0) {
            return None;
        }
        for (s, &moved_home) in bucket.homes.iter().enumerate() {
            chain[depth] = (rel, s);
            // Where the key sits in its own window, and the buckets of that window after it.
            let position = rel.wrapping_sub(moved_home) & self.mask;
            for step in position + 1..PROBE_BUCKETS {
                let next = (moved_home + step) & self.mask;
                if chain[..=depth]
                    .iter()
                    .any(|&(on_chain, _)| on_chain == next)
                {
                    continue;
                }
                if let Some(len) = self.room(next, hops - 1, chain, depth + 1) {
                    return Some(len);
                }
            }
        }
        if hops == 1 {
            self.no_room_in_one_move
                .set(self.no_room_in_one_move.get() | 1 << rel);
        }
        None
    }

    /// Offset of slot `s` of bucket `rel`.
    fn slot(&self, rel: u64, s: u64) -> u64 {
        self.segment + ((self.home + rel) & self.mask) * BUCKET_BYTES + s * SLOT_BYTES
    }
}

/// What one attempt to put a key in its window found.
enum Attempt {
    /// Done: the old value if the key was there.
    Done(Option<u64>),
    /// The window is full: the segment must split.
    Full(Place),
}

impl<'h, B: Backend, P: Deref<Target = Pool<B>>> Cceh<'h, B, P> {
    /// Make an empty table with its root at `root` (64-byte aligned, 32 bytes, e.g. in the pool's
    /// root object). The root and first segment are written in one transaction.
    pub fn create(heap: &'h Heap<B, P>, root: u64, config: CcehConfig) -> Result<Self, CcehError> {
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
        heap.transaction(|tx| {
            let segment = tx.alloc(b * BUCKET_BYTES)?;
            tx.write(segment.offset(), &vec![0u8; (b * BUCKET_BYTES) as usize])?;
            let directory = tx.alloc(16)?;
            // Global depth 0, one entry: the segment, local depth 0.
            let mut dir = [0u8; 16];
            dir[8..16].copy_from_slice(&segment.offset().to_le_bytes());
            tx.write(directory.offset(), &dir)?;
            let mut r = [0u8; ROOT_BYTES as usize];
            r[0..8].copy_from_slice(&ROOT_MAGIC.to_le_bytes());
            r[8..16].copy_from_slice(&directory.offset().to_le_bytes());
            r[16..24].copy_from_slice(&b.to_le_bytes());
            tx.write(root, &r)
        })?;
        Ok(Cceh {
            heap,
            root,
            buckets: b,
            structure: Mutex::new(()),
            stripes: Stripes::new(STRIPES),
            retired: Mutex::new(None),
            displaced: AtomicU64::new(0),
            words: whole_pool(heap.pool())?,
            repaired_at_open: 0,
        })
    }

    /// Open the table whose root is at `root`. The heap has already rolled back a doubling, or
    /// a split whose transaction, a crash interrupted; this finishes a split that had passed
    /// its transaction (FAST'19's recovery), checks the directory, counts the keys (keeping
    /// one copy of a key a crash left twice by a displacement) and frees the directory a
    /// doubling retired (no lookup of an earlier run can still be reading it).
    pub fn open(heap: &'h Heap<B, P>, root: u64) -> Result<Self, CcehError> {
        let pool = heap.pool();
        let corrupt = |reason: String| CcehError::Corrupt { root, reason };
        let magic = pool.read::<u64>(root)?;
        if magic != ROOT_MAGIC {
            return Err(corrupt(format!("magic {magic:#x}")));
        }
        let buckets = pool.read::<u64>(root + 16)?;
        if !valid_bucket_count(buckets) {
            return Err(corrupt(format!("{buckets} buckets per segment")));
        }
        let mut table = Cceh {
            heap,
            root,
            buckets,
            structure: Mutex::new(()),
            stripes: Stripes::new(STRIPES),
            retired: Mutex::new(None),
            displaced: AtomicU64::new(0),
            words: whole_pool(pool)?,
            repaired_at_open: 0,
        };
        let directory = pool.load_u64(root + 8)?;
        let depth = pool.load_u64(directory)?;
        if depth > MAX_DEPTH {
            return Err(corrupt(format!("global depth {depth}")));
        }
        // The directory and every segment must be blocks the heap gave this table.
        let owned =
            |offset: u64, needed: u64| heap.block_size(offset).is_some_and(|size| size >= needed);
        if !owned(directory, 8 + 8 * (1u64 << depth)) {
            return Err(corrupt(format!(
                "directory {directory:#x} of depth {depth} is not an allocated block of its size"
            )));
        }
        table.repaired_at_open = table.finish_interrupted_split()?;
        // Every segment's entries must agree, and its depth must not exceed the directory's.
        let mut count = 0;
        for (start, segment, local) in table.segments()? {
            if local > depth || !owned(segment, buckets * BUCKET_BYTES) {
                return Err(corrupt(format!(
                    "entry {start}: segment {segment:#x} (local depth {local}) is not an allocated segment"
                )));
            }
            let span = 1u64 << (depth - local);
            if !start.is_multiple_of(span) {
                return Err(corrupt(format!(
                    "entry {start} starts a segment of span {span}"
                )));
            }
            for i in start..start + span {
                if pool.load_u64(directory + 8 + 8 * i)? != segment | local {
                    return Err(corrupt(format!("entry {i} disagrees with entry {start}")));
                }
            }
            count += table.remove_duplicates(segment, local, start >> (depth - local))?;
        }
        table.stripes.set_total(count);
        let retired = pool.load_u64(root + RETIRED_AT)?;
        if retired != 0 {
            if retired == directory || !owned(retired, 16) {
                return Err(corrupt(format!(
                    "retired directory {retired:#x} is not an allocated block of its own"
                )));
            }
            heap.transaction(|tx| {
                tx.write_value(root + RETIRED_AT, &0u64)?;
                tx.free(pmem_ordering::PPtr::<u8>::new(retired))
            })?;
        }
        Ok(table)
    }

    /// Each distinct segment once: (first directory index, offset, local depth).
    fn segments(&self) -> Result<Vec<(u64, u64, u64)>, CcehError> {
        let pool = self.heap.pool();
        let directory = pool.load_u64(self.root + 8)?;
        let depth = pool.load_u64(directory)?;
        let mut out = Vec::new();
        let mut i = 0;
        while i < 1u64 << depth {
            let entry = pool.load_u64(directory + 8 + 8 * i)?;
            let local = entry & DEPTH_MASK;
            if local > depth {
                return Err(CcehError::Corrupt {
                    root: self.root,
                    reason: format!("entry {i}: local depth {local} above global depth {depth}"),
                });
            }
            out.push((i, entry & !DEPTH_MASK, local));
            i += 1u64 << (depth - local);
        }
        Ok(out)
    }

    /// Clear the second copy of any key a crash in the middle of a displacement left twice in
    /// a segment (both copies hold the same value); returns the number of distinct live keys.
    fn remove_duplicates(&self, segment: u64, local: u64, pattern: u64) -> Result<u64, CcehError> {
        let pool = self.heap.pool();
        let mut bytes = vec![0u8; (self.buckets * BUCKET_BYTES) as usize];
        pool.read_bytes(segment, &mut bytes)?;
        let mask = self.buckets - 1;
        let mut live: Vec<(u64, u64, u64)> = bytes
            .chunks_exact(SLOT_BYTES as usize)
            .enumerate()
            .filter_map(|(i, s)| {
                let k = u64::from_le_bytes(s[0..8].try_into().expect("8 bytes"));
                if k == EMPTY_KEY || !belongs(k, local, pattern) {
                    return None;
                }
                let bucket = i as u64 / SLOTS_PER_BUCKET;
                let order = ((bucket.wrapping_sub(hash(k) & mask)) & mask) * SLOTS_PER_BUCKET
                    + i as u64 % SLOTS_PER_BUCKET;
                Some((k, order, segment + i as u64 * SLOT_BYTES))
            })
            .collect();
        live.sort_unstable();
        let mut distinct = 0;
        for (i, &(key, _, slot)) in live.iter().enumerate() {
            if i > 0 && live[i - 1].0 == key {
                let w = pool.store_u64(slot, EMPTY_KEY)?;
                let _ = pool.persist(w);
            } else {
                distinct += 1;
            }
        }
        Ok(distinct)
    }

    /// The live `(key, value)` pairs of a segment with local depth `local` and hash prefix
    /// `pattern`.
    fn live_slots(
        &self,
        segment: u64,
        local: u64,
        pattern: u64,
    ) -> Result<Vec<(u64, u64)>, CcehError> {
        let mut bytes = vec![0u8; (self.buckets * BUCKET_BYTES) as usize];
        self.heap.pool().read_bytes(segment, &mut bytes)?;
        Ok(bytes
            .chunks_exact(SLOT_BYTES as usize)
            .map(|s| {
                let k = u64::from_le_bytes(s[0..8].try_into().expect("8 bytes"));
                let v = u64::from_le_bytes(s[8..16].try_into().expect("8 bytes"));
                (k, v)
            })
            .filter(|&(k, _)| k != EMPTY_KEY && belongs(k, local, pattern))
            .collect())
    }

    #[cfg(test)]
    fn locate(&self, h: u64) -> Result<Place, CcehError> {
        self.locate_in(self.heap.pool().load_u64(self.root + 8)?, h)
    }

    /// Where `h` leads in `directory`.
    #[inline(always)]
    fn locate_in(&self, directory: u64, h: u64) -> Result<Place, CcehError> {
        let global_depth = self.word(directory)?;
        if global_depth > MAX_DEPTH {
            return Err(CcehError::Corrupt {
                root: self.root,
                reason: format!("directory {directory:#x} has global depth {global_depth}"),
            });
        }
        let index = prefix(h, global_depth);
        let entry = self.word(directory + 8 + 8 * index)?;
        Ok(Place {
            directory,
            global_depth,
            index,
            segment: entry & !DEPTH_MASK,
            local_depth: entry & DEPTH_MASK,
        })
    }

    /// Offsets of the 16 slots of `h`'s probing window in `segment`.
    fn window(&self, segment: u64, h: u64) -> impl Iterator<Item = u64> {
        let buckets = self.buckets;
        let home = h & (buckets - 1);
        (0..PROBE_BUCKETS).flat_map(move |i| {
            let bucket = segment + ((home + i) & (buckets - 1)) * BUCKET_BYTES;
            (0..SLOTS_PER_BUCKET).map(move |s| bucket + s * SLOT_BYTES)
        })
    }

    /// The slot holding `key` in its window, if any.
    fn find(&self, place: &Place, key: u64, h: u64) -> Result<Option<u64>, CcehError> {
        let pool = self.heap.pool();
        for slot in self.window(place.segment, h) {
            // Reached through the key's own directory entry, a slot holding the key is live: a
            // stale copy left by a split sits only in a segment the key no longer maps to.
            if pool.load_u64(slot)? == key {
                return Ok(Some(slot));
            }
        }
        Ok(None)
    }

    /// The values of `keys`, in order ([`Cceh::get`] for each), with the lookup path of the
    /// key `ahead` places on prefetched before each lookup, so the cache misses of several
    /// lookups overlap (the inline prefetch of [`BatchOptions::inline_prefetch`], for reads).
    /// Key 0 anywhere in the batch is refused before anything is looked up.
    pub fn get_batch(&self, keys: &[u64], ahead: usize) -> Result<Vec<Option<u64>>, CcehError> {
        if keys.contains(&EMPTY_KEY) {
            return Err(CcehError::ReservedKey);
        }
        let ahead = ahead.max(1);
        let mut values = Vec::with_capacity(keys.len());
        // One guard per chunk: the lookups inside pin for free, and a doubling waiting for the
        // epoch waits for one chunk at most.
        for (c, chunk) in keys.chunks(BATCH_PIN_CHUNK).enumerate() {
            let guard = epoch::pin();
            for (i, &key) in chunk.iter().enumerate() {
                if let Some(&next) = keys.get(c * BATCH_PIN_CHUNK + i + ahead) {
                    self.prefetch_path(hash(next));
                }
                values.push(self.lookup(key, &guard, |_| ())?);
            }
        }
        Ok(values)
    }

    /// The value of `key`, if present. Takes no lock and never waits for a writer, not even
    /// for a split or doubling (see [`Cceh`]).
    ///
    /// Each call pins the epoch, a locked instruction on x86 and so a full barrier that no
    /// later load passes: the key's window is prefetched before it, so the window's cache miss
    /// overlaps the pin (and whatever the pin waits for) instead of following it.
    pub fn get(&self, key: u64) -> Result<Option<u64>, CcehError> {
        self.get_observed(key, |_| ())
    }

    /// [`Cceh::get`], calling `observe` at each step of the lookup: tests use it to change the
    /// table under a lookup at a chosen point, deterministically.
    fn get_observed(
        &self,
        key: u64,
        observe: impl FnMut(LookupStep),
    ) -> Result<Option<u64>, CcehError> {
        // Pinning is a full barrier, which no later load passes: the window is prefetched
        // first (a hint only, safe on a directory being freed), so its miss overlaps the pin
        // and whatever the pin waits for.
        self.prefetch_path(hash(key));
        // Pinned, no directory this lookup loads can be freed under it (a doubling retires
        // the old one and frees it only after every guard pinned before has gone).
        let guard = epoch::pin();
        self.lookup(key, &guard, observe)
    }

    /// A lookup inside `_guard`'s critical section (the guard is the proof of pinning).
    ///
    /// Written for the CPU to overlap one lookup's cache miss with the next one's: few
    /// instructions, one range check per segment and per bucket, and no branch on where in a
    /// bucket the key is (see `scan_bucket`).
    #[inline(always)]
    fn lookup(
        &self,
        key: u64,
        _guard: &epoch::Guard,
        mut observe: impl FnMut(LookupStep),
    ) -> Result<Option<u64>, CcehError> {
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey);
        }
        let h = hash(key);
        let mask = self.buckets - 1;
        let home = h & mask;
        loop {
            let directory = self.word(self.root + 8)?;
            let found = self.locate_in(directory, h).and_then(|place| {
                observe(LookupStep::Located);
                let segment = self.segment_words(place.segment)?;
                'scan: loop {
                    for step in 0..PROBE_BUCKETS {
                        let first = (((home + step) & mask) * WORDS_PER_BUCKET) as usize;
                        let Some(keys) = segment.keys_of_line(first) else {
                            return Err(self.bad_offset(place.segment + 8 * first as u64, 64));
                        };
                        observe(LookupStep::BucketRead);
                        if let Some(slot) = scan_keys(&keys, key) {
                            // The value is loaded after the key, and the key again after the
                            // value: a slot reused in between means a rescan.
                            let at = first + 2 * slot;
                            let value = segment.load(at + 1);
                            if segment.load(at) != key {
                                continue 'scan;
                            }
                            return Ok((place, Some(value)));
                        }
                    }
                    return Ok((place, None));
                }
            });
            match found {
                // The key's entry unchanged means no split of its segment (and no doubling)
                // completed or started during the scan: the segment scanned was its home all
                // along, and no slot of it was reused for a key that moved away by a split.
                Ok((place, value)) => {
                    if self.word(self.root + 8)? == directory
                        && self.word(place.entry_offset())? == place.entry()
                    {
                        return Ok(value);
                    }
                }
                // An error reading a directory that was swapped meanwhile (one a failed doubling
                // allocated and gave back) is no error of the table: read again.
                Err(e) => {
                    if self.word(self.root + 8)? == directory {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// The words of a segment, range-checked once.
    #[inline]
    fn segment_words(&self, segment: u64) -> Result<Words<'h>, CcehError> {
        let count = (self.buckets * WORDS_PER_BUCKET) as usize;
        // Segment offsets come from directory entries, whose low bits are masked off: always
        // 64-byte aligned, so only the range needs checking.
        match self.words.sub((segment / 8) as usize, count) {
            Some(words) => Ok(words),
            None => Err(self.bad_offset(segment, count as u64 * 8)),
        }
    }

    /// The word at `offset` of the pool (an acquire load, as [`Pool::load_u64`]).
    #[inline]
    fn word(&self, offset: u64) -> Result<u64, CcehError> {
        if offset.is_multiple_of(8) {
            if let Some(word) = self.words.get((offset / 8) as usize) {
                return Ok(word);
            }
        }
        Err(self.bad_offset(offset, 8))
    }

    /// The pool's own error for a read of `len` bytes at `offset` that [`Cceh::word`] or
    /// [`Cceh::segment_words`] refused.
    #[cold]
    #[inline(never)]
    fn bad_offset(&self, offset: u64, len: u64) -> CcehError {
        let pool = self.heap.pool();
        match pool
            .check_range(offset, len)
            .and_then(|()| pool.load_u64(offset))
        {
            Err(e) => e.into(),
            // Unreachable for the offsets refused above; an error either way.
            Ok(_) => CcehError::Corrupt {
                root: self.root,
                reason: format!("offset {offset:#x} refused"),
            },
        }
    }

    /// The structure mutex: one split, doubling or snapshot at a time.
    fn structure(&self) -> MutexGuard<'_, ()> {
        self.structure.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where `h` leads, with the lock of that segment's stripe held. The directory is read
    /// without a guard (a writer does not pin the epoch), so what was read is checked under
    /// the lock: an unchanged directory pointer means the directory is still the current one
    /// (so not freed), and an unchanged entry that it still maps `h` to this segment, which no
    /// split can change while the lock is held.
    fn lock_place(&self, h: u64) -> Result<(Place, StripeGuard<'_>), CcehError> {
        let pool = self.heap.pool();
        loop {
            let directory = pool.load_u64(self.root + 8)?;
            let place = match self.locate_in(directory, h) {
                Ok(place) => place,
                // A directory swapped out (and maybe reused) meanwhile: look again.
                Err(e) if pool.load_u64(self.root + 8)? == directory => return Err(e),
                Err(_) => continue,
            };
            // The lock's compare-and-swap is a full barrier: it waits for this thread's last
            // persist (the previous write's flush and fence) to finish, and no load after it
            // starts before. Prefetched here, the window's lines arrive during that wait.
            self.prefetch_window(place.segment, h);
            let guard = self.stripes.lock((hash(place.segment) as usize) % STRIPES);
            if pool.load_u64(self.root + 8)? == directory
                && pool.load_u64(place.entry_offset())? == place.entry()
            {
                return Ok((place, guard));
            }
        }
    }

    /// Insert `key -> value` if `key` is absent: `Ok(true)` if inserted, `Ok(false)` if the key
    /// was already there (its value is left alone). Durable when it returns.
    pub fn insert(&self, key: u64, value: u64) -> Result<bool, CcehError> {
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey);
        }
        match self.put(key, value, false)? {
            None => Ok(true),
            Some(_) => Ok(false),
        }
    }

    /// Insert or replace: returns the old value if the key was present. Durable when it
    /// returns.
    pub fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, CcehError> {
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey);
        }
        self.put(key, value, true)
    }

    /// Insert, or (with `replace`) update; the old value if the key was there. Tries under the
    /// segment's stripe lock; a full window is split under the structure mutex and that lock
    /// (taken in this order, after letting the stripe go), then the put is tried again.
    fn put(&self, key: u64, value: u64, replace: bool) -> Result<Option<u64>, CcehError> {
        let h = hash(key);
        loop {
            {
                let (place, stripe) = self.lock_place(h)?;
                if let Attempt::Done(old) = self.attempt(&place, &stripe, key, value, replace, h)? {
                    return Ok(old);
                }
            }
            let _structure = self.structure();
            // Another thread may have split this segment already: look again before splitting.
            let (place, stripe) = self.lock_place(h)?;
            match self.attempt(&place, &stripe, key, value, replace, h)? {
                Attempt::Done(old) => return Ok(old),
                Attempt::Full(place) => self.split(&place)?,
            }
        }
    }

    /// One try at putting `key` in its window (the caller holds the segment's stripe lock).
    /// The key goes to the window's first empty slot, else to its first slot holding a key a
    /// split left behind (lazy deletion: hashing each key to tell is only paid for when there
    /// is no empty slot), else to a slot made free by displacement.
    fn attempt(
        &self,
        place: &Place,
        stripe: &StripeGuard<'_>,
        key: u64,
        value: u64,
        replace: bool,
        h: u64,
    ) -> Result<Attempt, CcehError> {
        let pool = self.heap.pool();
        let segment = self.segment_words(place.segment)?;
        let mask = self.buckets - 1;
        let home = h & mask;
        let mut lines = [[0u64; 8]; PROBE_BUCKETS as usize];
        let mut empty = None;
        for (step, line) in lines.iter_mut().enumerate() {
            let first = (((home + step as u64) & mask) * WORDS_PER_BUCKET) as usize;
            *line = segment
                .line(first)
                .ok_or_else(|| self.bad_offset(place.segment + 8 * first as u64, 64))?;
            let slot_at = |s: usize| place.segment + 8 * (first + 2 * s) as u64;
            if let Some(s) = scan_bucket(line, key) {
                // Under the stripe lock nothing else writes this segment: the value loaded
                // with the line is the key's.
                if replace {
                    let w = pool.store_u64(slot_at(s) + 8, value)?;
                    let _ = pool.persist(w);
                }
                return Ok(Attempt::Done(Some(line[2 * s + 1])));
            }
            if empty.is_none() {
                empty = scan_bucket(line, EMPTY_KEY).map(slot_at);
            }
        }
        let stale = || {
            let pattern = prefix(h, place.local_depth);
            (0..PROBE_BUCKETS as usize).find_map(|step| {
                let first = ((home + step as u64) & mask) * WORDS_PER_BUCKET;
                (0..SLOTS_PER_BUCKET as usize)
                    .find(|&s| !belongs(lines[step][2 * s], place.local_depth, pattern))
                    .map(|s| place.segment + 8 * (first + 2 * s as u64))
            })
        };
        let slot = match empty.or_else(stale) {
            Some(slot) => slot,
            None => match self.displace(place, h)? {
                Some(slot) => slot,
                None => return Ok(Attempt::Full(*place)),
            },
        };
        self.put_slot(slot, key, value)?;
        stripe.count(1);
        Ok(Attempt::Done(None))
    }

    /// Write `key -> value` into `slot` and persist it: value first, then the key that commits
    /// it, in one line (one flush, one fence). A slot still holding a key (one a displacement
    /// has just copied on, or a stale copy a split left) is emptied first, in the same line, so
    /// a crash leaves the old key there whole, or the slot empty, or the new pair whole (stores
    /// to one line persist in order), and a lookup never pairs the old key with the new value
    /// (it re-reads the key after the value).
    fn put_slot(&self, slot: u64, key: u64, value: u64) -> Result<(), CcehError> {
        let pool = self.heap.pool();
        let emptied = match pool.load_u64(slot)? {
            EMPTY_KEY => None,
            _ => Some(pool.store_u64(slot, EMPTY_KEY)?),
        };
        let mut w = pool.store_u64(slot + 8, value)?;
        if let Some(e) = emptied {
            w = e.merge(w);
        }
        let w = w.merge(pool.store_u64(slot, key)?);
        let _ = pool.persist(w);
        Ok(())
    }

    /// Make room in `h`'s full window by moving keys further along their own windows: a key
    /// of the window moves to a later bucket of its window, where room may in turn be made
    /// the same way, up to [`DISPLACEMENT_HOPS`] moves deep, the shortest chain first. Returns
    /// the window's slot vacated, which still holds the key moved out: the caller overwrites
    /// it. Splitting later this way raises the load a segment reaches before it splits.
    ///
    /// Every move writes and persists the copy before the old slot is overwritten, and the
    /// copy lies *after* the old slot in the moved key's probing order, so a lookup scanning
    /// that order meets the key at one place or the other, never at neither; a crash between
    /// the two leaves two identical copies of one key, which [`Cceh::open`] reduces to one.
    ///
    /// The buckets a chain can reach are read, and their keys hashed, once ([`Neighbourhood`]);
    /// the search itself is arithmetic on that copy (the caller's stripe lock keeps it true).
    fn displace(&self, place: &Place, h: u64) -> Result<Option<u64>, CcehError> {
        let near = Neighbourhood::read(self, place, h)?;
        let mut chain = [(0u64, 0usize); DISPLACEMENT_HOPS as usize + 1];
        // Shallowest chain first: most full windows need one move, and a deep search is costly.
        let found = (1..=DISPLACEMENT_HOPS).find_map(|hops| {
            (0..PROBE_BUCKETS).find_map(|rel| near.room(rel, hops, &mut chain, 0))
        });
        let Some(len) = found else {
            return Ok(None);
        };
        // The last move first: each key moves into a slot already free.
        let pool = self.heap.pool();
        for i in (0..len - 1).rev() {
            let (from_rel, from_slot) = chain[i];
            let (to_rel, to_slot) = chain[i + 1];
            let from = near.slot(from_rel, from_slot as u64);
            let value = pool.load_u64(from + 8)?;
            let key = near.buckets[from_rel as usize].keys[from_slot];
            self.put_slot(near.slot(to_rel, to_slot as u64), key, value)?;
            self.displaced.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(near.slot(chain[0].0, chain[0].1 as u64)))
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

    /// Insert every pair, as [`Cceh::insert`] would one after the other; returns how many keys
    /// were new. Key 0 anywhere in the batch is refused before anything is written.
    ///
    /// With `options.helper`, a second thread (pinned to another core where the machine
    /// allows) walks the lookup path of the keys up to `options.depth` ahead of this one, hash
    /// -> directory entry -> segment -> the four buckets of the probing window, and prefetches
    /// them, so the inserting thread finds them in the cache: the speculative helper thread of
    /// seed 001 Sec. 4.1. The helper only loads and prefetches: it makes no store and takes no
    /// lock, so it cannot change what the batch does, only how fast. It stops when the batch
    /// ends. With `options.inline_prefetch`, this thread prefetches the same path itself,
    /// `options.depth` keys ahead, before each insert.
    pub fn insert_batch(
        &self,
        items: &[(u64, u64)],
        options: BatchOptions,
    ) -> Result<u64, CcehError>
    where
        P: Sync,
    {
        if items.iter().any(|&(k, _)| k == EMPTY_KEY) {
            return Err(CcehError::ReservedKey);
        }
        let ahead = options.depth.max(1);
        let insert_all = |progress: Option<&AtomicUsize>| {
            let mut inserted = 0;
            for (i, &(key, value)) in items.iter().enumerate() {
                if let Some(p) = progress {
                    p.store(i, Ordering::Release);
                }
                if options.inline_prefetch {
                    if let Some(&(next, _)) = items.get(i + ahead) {
                        self.prefetch_path(hash(next));
                    }
                }
                if self.insert(key, value)? {
                    inserted += 1;
                }
            }
            Ok(inserted)
        };
        if !options.helper || items.len() < 2 {
            return insert_all(None);
        }
        let progress = AtomicUsize::new(0);
        let finished = AtomicBool::new(false);
        let worker_cpu = current_cpu();
        std::thread::scope(|s| {
            s.spawn(|| {
                pin_away_from(worker_cpu);
                self.speculate(items, &progress, &finished, options.depth.max(1));
            });
            let result = insert_all(Some(&progress));
            finished.store(true, Ordering::Release);
            result
        })
    }

    /// The helper thread's walk: stay between 1 and `depth` keys ahead of the worker.
    fn speculate(
        &self,
        items: &[(u64, u64)],
        progress: &AtomicUsize,
        finished: &AtomicBool,
        depth: usize,
    ) {
        let mut next = 1;
        while next < items.len() && !finished.load(Ordering::Acquire) {
            let worker = progress.load(Ordering::Acquire);
            // Behind the worker, skip ahead; too far ahead, wait for it.
            next = next.max(worker + 1);
            if next > worker + depth {
                std::hint::spin_loop();
                continue;
            }
            if next >= items.len() {
                break;
            }
            self.prefetch_path(hash(items[next].0));
            next += 1;
        }
    }

    /// Prefetch the lookup path of hash `h`: directory entry, then the window's four buckets.
    /// Loads only, without a guard or a lock: any of them may see a directory that a split is
    /// changing, and the worst outcome is a prefetch of the wrong line (pool loads are bounds
    /// checked, and out-of-pool prefetches are ignored).
    fn prefetch_path(&self, h: u64) {
        if let Some(segment) = self.peek_segment(h) {
            self.prefetch_window(segment, h);
        }
    }

    /// The segment the current directory names for hash `h`, read without a guard or a lock
    /// (see [`Cceh::prefetch_path`]); `None` where an offset falls outside the pool.
    #[inline]
    fn peek_segment(&self, h: u64) -> Option<u64> {
        let directory = self.peek(self.root + 8)?;
        let depth = self.peek(directory)?;
        let entry = self.peek(directory + 8 + 8 * prefix(h, depth.min(MAX_DEPTH)))?;
        Some(entry & !DEPTH_MASK)
    }

    /// Prefetch the four buckets of `h`'s window in `segment` (nothing outside the pool).
    fn prefetch_window(&self, segment: u64, h: u64) {
        let mask = self.buckets - 1;
        let home = h & mask;
        for i in 0..PROBE_BUCKETS {
            let bucket = segment + ((home + i) & mask) * BUCKET_BYTES;
            self.words.prefetch((bucket / 8) as usize);
        }
    }

    /// The word at `offset`, or `None` outside the pool or misaligned: for speculative walks,
    /// which may follow offsets read from a table changing under them.
    #[inline]
    fn peek(&self, offset: u64) -> Option<u64> {
        offset
            .is_multiple_of(8)
            .then(|| self.words.get((offset / 8) as usize))
            .flatten()
    }

    /// Remove `key`: its value, if it was present. Durable when it returns.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, CcehError> {
        if key == EMPTY_KEY {
            return Err(CcehError::ReservedKey);
        }
        let pool = self.heap.pool();
        let h = hash(key);
        let (place, stripe) = self.lock_place(h)?;
        match self.find(&place, key, h)? {
            Some(slot) => {
                let value = pool.load_u64(slot + 8)?;
                let w = pool.store_u64(slot, EMPTY_KEY)?;
                let _ = pool.persist(w);
                stripe.count(1u64.wrapping_neg());
                Ok(Some(value))
            }
            None => Ok(None),
        }
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.stripes.total()
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The global depth (log2 of the directory's size).
    pub fn global_depth(&self) -> Result<u64, CcehError> {
        let pool = self.heap.pool();
        Ok(pool.load_u64(pool.load_u64(self.root + 8)?)?)
    }

    /// Every `(key, value)` pair, in no particular order: a consistent snapshot, taken under
    /// the structure mutex and every stripe lock (writers wait meanwhile; lookups do not).
    pub fn iter(&self) -> Result<impl Iterator<Item = (u64, u64)>, CcehError> {
        let _structure = self.structure();
        let _stripes = self.stripes.lock_all();
        let depth = self.global_depth()?;
        let mut all = Vec::with_capacity(self.len() as usize);
        for (start, segment, local) in self.segments()? {
            all.extend(self.live_slots(segment, local, start >> (depth - local))?);
        }
        Ok(all.into_iter())
    }

    /// Every block the table owns (directory, a retired directory not yet freed, segments),
    /// for heap-walk checks.
    pub fn blocks(&self) -> Result<Vec<u64>, CcehError> {
        let pool = self.heap.pool();
        let directory = pool.load_u64(self.root + 8)?;
        let mut out: Vec<u64> = self.segments()?.into_iter().map(|(_, s, _)| s).collect();
        out.push(directory);
        let retired = pool.load_u64(self.root + RETIRED_AT)?;
        if retired != 0 {
            out.push(retired);
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Split the segment at `place`, doubling the directory first if it has to.
    fn split(&self, place: &Place) -> Result<(), CcehError> {
        if place.local_depth == place.global_depth {
            return self.double(place);
        }
        let pool = self.heap.pool();
        let local = place.local_depth;
        let span = 1u64 << (place.global_depth - local);
        let start = place.index & !(span - 1);
        let pattern = place.index >> (place.global_depth - local);
        let seg_bytes = self.buckets * BUCKET_BYTES;
        let mut old = vec![0u8; seg_bytes as usize];
        pool.read_bytes(place.segment, &mut old)?;
        // Slot for slot: keys whose next hash bit is 1 move, at the same position, so they
        // stay inside their probing window.
        let mut moved = vec![0u8; seg_bytes as usize];
        for (from, to) in old
            .chunks_exact(SLOT_BYTES as usize)
            .zip(moved.chunks_exact_mut(SLOT_BYTES as usize))
        {
            let k = u64::from_le_bytes(from[0..8].try_into().expect("8 bytes"));
            if k != EMPTY_KEY && belongs(k, local, pattern) && (hash(k) >> (63 - local)) & 1 == 1 {
                to.copy_from_slice(from);
            }
        }
        // A retired directory no lookup can still read is freed in the same transaction.
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        let reclaim = retired
            .as_ref()
            .filter(|r| r.is_reclaimable())
            .map(|r| r.directory);
        let half = span / 2;
        let entry_at = |i: u64| place.directory + 8 + 8 * i;
        // Step 1, one transaction: the new segment is allocated and written, and the first
        // entry of the upper half is pointed at it. Committed, the split is recorded for good:
        // the segment is reachable (a crash cannot leak it) and recovery can finish the rest.
        let new_segment = self.heap.transaction(|tx| {
            let new_segment = tx.alloc(seg_bytes)?.offset();
            tx.write(new_segment, &moved)?;
            // A lookup that loads an entry naming the new segment must see its slots.
            fence(Ordering::Release);
            tx.write_value(entry_at(start + half), &(new_segment | (local + 1)))?;
            if let Some(directory) = reclaim {
                tx.write_value(self.root + RETIRED_AT, &0u64)?;
                tx.free(pmem_ordering::PPtr::<u8>::new(directory))?;
            }
            Ok::<u64, CcehError>(new_segment)
        })?;
        if reclaim.is_some() {
            *retired = None;
        }
        // Steps 2 and 3, the order of FAST'19: the rest of the upper half names the new
        // segment, persisted, then the lower half takes the new local depth, persisted. Each
        // entry is one 8-byte store; a crash anywhere leaves a directory that
        // `finish_interrupted_split` completes at open.
        self.store_entries(
            entry_at(start + half + 1),
            half - 1,
            new_segment | (local + 1),
        )?;
        self.store_entries(entry_at(start), half, place.segment | (local + 1))?;
        Ok(())
    }

    /// Store `entry` into the `count` directory entries from `offset` on, then flush them and
    /// fence once.
    fn store_entries(&self, offset: u64, count: u64, entry: u64) -> Result<(), CcehError> {
        if count == 0 {
            return Ok(());
        }
        let pool = self.heap.pool();
        let mut written = pool.store_u64(offset, entry)?;
        for i in 1..count {
            written = written.merge(pool.store_u64(offset + 8 * i, entry)?);
        }
        let _ = pool.persist(written);
        Ok(())
    }

    /// Finish a split a crash interrupted, as FAST'19's recovery does: a split is recorded
    /// once its first transaction commits (the new segment written, the first entry of the
    /// upper half naming it); the rest of the upper half and then the new local depth of the
    /// lower half may be missing. Walking the directory block by block, a block that does not
    /// agree with its first entry is such a split: its lower half takes the old segment with
    /// the new depth, its upper half the new segment. Idempotent (a crash during the repair is
    /// repaired the same way). Returns how many entries it rewrote.
    fn finish_interrupted_split(&self) -> Result<u64, CcehError> {
        let pool = self.heap.pool();
        let corrupt = |reason: String| CcehError::Corrupt {
            root: self.root,
            reason,
        };
        let directory = pool.load_u64(self.root + 8)?;
        let depth = pool.load_u64(directory)?;
        if depth > MAX_DEPTH {
            return Err(corrupt(format!("global depth {depth}")));
        }
        let n = 1u64 << depth;
        let mut entries = vec![0u8; (8 * n) as usize];
        pool.read_bytes(directory + 8, &mut entries)?;
        let entries: Vec<u64> = entries
            .chunks_exact(8)
            .map(|e| u64::from_le_bytes(e.try_into().expect("8 bytes")))
            .collect();
        let mut repaired = 0;
        let mut i = 0;
        while i < n {
            let first = entries[i as usize];
            let (segment, local) = (first & !DEPTH_MASK, first & DEPTH_MASK);
            if local > depth {
                return Err(corrupt(format!(
                    "entry {i}: local depth {local} above {depth}"
                )));
            }
            let span = 1u64 << (depth - local);
            if !i.is_multiple_of(span) {
                return Err(corrupt(format!(
                    "entry {i} starts a segment of span {span}"
                )));
            }
            let block = &entries[i as usize..(i + span) as usize];
            if block.iter().all(|&e| e == first) {
                i += span;
                continue;
            }
            let half = span / 2;
            let (lower, upper) = block.split_at(half as usize);
            let is_old = |e: u64| e & !DEPTH_MASK == segment;
            if block.iter().all(|&e| is_old(e)) {
                // The lower half of a split, part of it still at the old depth: the first
                // entry already has the new one.
                if local == 0 || block.iter().any(|&e| e != first && e != first - 1) {
                    return Err(corrupt(format!(
                        "entries {i}..{}: depths that no split leaves",
                        i + span
                    )));
                }
                self.store_entries(directory + 8 + 8 * i, span, first)?;
            } else {
                // The old segment's whole span: the upper half's first entry names the new
                // segment (it was written in the split's transaction); the rest of that half
                // names the new segment or still the old one, the lower half the old one.
                let new = upper.first().copied().unwrap_or(first);
                if is_old(new)
                    || new & DEPTH_MASK != local + 1
                    || lower.iter().any(|&e| !is_old(e))
                    || upper.iter().any(|&e| e != new && e != first)
                {
                    return Err(corrupt(format!(
                        "entries {i}..{}: a split that cannot be finished",
                        i + span
                    )));
                }
                self.store_entries(directory + 8 + 8 * (i + half), half, new)?;
                self.store_entries(directory + 8 + 8 * i, half, segment | (local + 1))?;
            }
            repaired += span;
            i += span;
        }
        Ok(repaired)
    }

    /// Double the directory: every entry twice, in a new directory swapped in by one pointer.
    fn double(&self, place: &Place) -> Result<(), CcehError> {
        let depth = place.global_depth;
        if depth >= MAX_DEPTH {
            return Err(CcehError::DirectoryFull);
        }
        let pool = self.heap.pool();
        let old_len = 1u64 << depth;
        let mut old = vec![0u8; (8 * old_len) as usize];
        pool.read_bytes(place.directory + 8, &mut old)?;
        let mut new = Vec::with_capacity((8 + 16 * old_len) as usize);
        new.extend_from_slice(&(depth + 1).to_le_bytes());
        for entry in old.chunks_exact(8) {
            new.extend_from_slice(entry);
            new.extend_from_slice(entry);
        }
        // Lookups may still be reading the old directory: it is retired, not freed, and the
        // directory retired before it (whose readers have gone by now, or soon will) is freed.
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = retired.as_ref() {
            if !r.is_reclaimable() && epoch::is_pinned() {
                // A guard of this thread's own holds the epoch back: waiting would never end.
                return Err(CcehError::WriterPinned);
            }
            r.wait_until_reclaimable();
        }
        let previous = retired.as_ref().map(|r| r.directory);
        self.heap.transaction(|tx| {
            let directory = tx.alloc(new.len() as u64)?.offset();
            tx.write(directory, &new)?;
            // A lookup that loads the new pointer must see the new directory's entries.
            fence(Ordering::Release);
            tx.write_value(self.root + 8, &directory)?;
            tx.write_value(self.root + RETIRED_AT, &place.directory)?;
            if let Some(previous) = previous {
                tx.free(pmem_ordering::PPtr::<u8>::new(previous))?;
            }
            Ok::<(), CcehError>(())
        })?;
        *retired = Some(Retired::new(place.directory));
        Ok(())
    }
}

/// Buckets per segment this table supports: a power of two, enough for one probing window, at
/// most 2^20 (a 64 MiB segment).
fn valid_bucket_count(buckets: u64) -> bool {
    buckets.is_power_of_two() && (PROBE_BUCKETS..=1 << 20).contains(&buckets)
}

/// The slot (0..4) of `bucket` holding `key`, if any. The four keys are compared into a bit
/// mask rather than branched on one by one: a branch on which slot holds the key would be
/// mispredicted, and a mispredicted branch waiting on a cache miss keeps the CPU from starting
/// the next lookup's miss meanwhile. The one branch left (is the key in this bucket?) is
/// mostly right, as most keys sit in their home bucket.
#[inline(always)]
fn scan_bucket(bucket: &[u64; 8], key: u64) -> Option<usize> {
    scan_keys(&[bucket[0], bucket[2], bucket[4], bucket[6]], key)
}

/// [`scan_bucket`] on a bucket's four keys alone.
#[inline(always)]
fn scan_keys(keys: &[u64; 4], key: u64) -> Option<usize> {
    let hits = (0..SLOTS_PER_BUCKET as usize)
        .fold(0u32, |hits, s| hits | (u32::from(keys[s] == key) << s));
    (hits != 0).then(|| hits.trailing_zeros() as usize)
}

/// The top `depth` bits of `h`.
fn prefix(h: u64, depth: u64) -> u64 {
    if depth == 0 {
        0
    } else {
        h >> (64 - depth)
    }
}

/// Whether key `k` belongs to a segment of local depth `local` and hash prefix `pattern`.
fn belongs(k: u64, local: u64, pattern: u64) -> bool {
    prefix(hash(k), local) == pattern
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem_ordering::PoolOptions;
    use pmem_undo_log::{FencePolicy, HeapConfig};

    fn heap() -> Heap {
        let pool = Pool::anonymous("cceh-unit", 8 << 20, &PoolOptions::new()).unwrap();
        let config = HeapConfig {
            lanes: 1,
            lane_log_bytes: 16 << 10,
            chunk_size: 16 << 10,
        };
        Heap::create(Arc::new(pool), config, FencePolicy::Batched).unwrap()
    }

    /// Keys whose hash starts with the given bit, from `from` on.
    fn keys_with_top_bit(bit: u64, from: u64) -> impl Iterator<Item = u64> {
        (from..).filter(move |&k| hash(k) >> 63 == bit)
    }

    #[test]
    fn a_lookup_survives_a_split_and_a_doubling_under_it_that_reuse_its_slot() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
        // One segment, global depth 0. The key that moves at the first split has top bit 1.
        let key = keys_with_top_bit(1, 1).next().unwrap();
        table.insert(key, 77).unwrap();
        let old = table.locate(hash(key)).unwrap();
        let slot = table.find(&old, key, hash(key)).unwrap().unwrap();
        let mut interfered = false;
        let found = table
            .get_observed(key, |step| {
                if interfered || step != LookupStep::Located {
                    return;
                }
                interfered = true;
                // Fill the segment until it splits (the directory doubles to depth 1), then
                // insert keys that stay in the old segment until one takes the moved key's
                // stale slot. The lookup has already read the old directory.
                let mut fillers = keys_with_top_bit(0, 1_000);
                while table.global_depth().unwrap() == 0 {
                    table.insert(fillers.next().unwrap(), 1).unwrap();
                }
                while table.heap.pool().load_u64(slot).unwrap() == key {
                    table.insert(fillers.next().unwrap(), 1).unwrap();
                }
                assert_eq!(table.global_depth().unwrap(), 1, "no second doubling");
            })
            .unwrap();
        assert!(interfered);
        assert_eq!(found, Some(77));
    }

    #[test]
    fn a_retired_directory_is_freed_by_a_later_split_or_at_open() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 4,
        };
        let root = heap.pool().root_offset();
        let table = Cceh::create(&heap, root, config).unwrap();
        let mut key = 1;
        while table.global_depth().unwrap() < 3 {
            table.insert(key, key).unwrap();
            key += 1;
        }
        let blocks = |table: &Cceh<'_, _, _>| {
            let owned: Vec<u64> = heap
                .check_heap()
                .unwrap()
                .into_iter()
                .map(|(o, _)| o)
                .collect();
            assert_eq!(
                owned,
                table.blocks().unwrap(),
                "the heap holds exactly the table's blocks"
            );
        };
        blocks(&table);
        let retired = heap.pool().load_u64(root + RETIRED_AT).unwrap();
        assert_ne!(retired, 0, "a doubling retires the old directory");
        // No lookup is pinned: the next split frees it.
        while table.heap.pool().load_u64(root + RETIRED_AT).unwrap() == retired {
            table.insert(key, key).unwrap();
            key += 1;
        }
        blocks(&table);
        drop(table);
        let table = Cceh::open(&heap, root).unwrap();
        assert_eq!(heap.pool().load_u64(root + RETIRED_AT).unwrap(), 0);
        blocks(&table);
        assert_eq!(table.len(), key - 1);
    }

    /// Keys whose home bucket (of 16) is `bucket`, from `from` on.
    fn keys_at_home(bucket: u64, from: u64) -> impl Iterator<Item = u64> {
        (from..).filter(move |&k| hash(k) & 15 == bucket)
    }

    #[test]
    fn a_lookup_finds_its_key_when_a_displacement_moves_it_mid_scan() {
        let heap = heap();
        let config = CcehConfig {
            buckets_per_segment: 16,
        };
        let table = Cceh::create(&heap, heap.pool().root_offset(), config).unwrap();
        // Buckets 0-2 full of keys at home in bucket 0, then the key under test (home 3) in
        // bucket 3, then three more home-0 keys: the window of bucket 0 is full, and only the
        // key under test can leave it (to bucket 4), making room for a chain of moves.
        let mut zeros = keys_at_home(0, 1);
        for _ in 0..12 {
            table.insert(zeros.next().unwrap(), 0).unwrap();
        }
        let key = keys_at_home(3, 1).next().unwrap();
        table.insert(key, 33).unwrap();
        for _ in 0..3 {
            table.insert(zeros.next().unwrap(), 0).unwrap();
        }
        let newcomer = zeros.next().unwrap();
        let mut buckets_read = 0;
        let found = table
            .get_observed(key, |step| {
                if step == LookupStep::BucketRead {
                    buckets_read += 1;
                    // The lookup has just found the key in its home bucket: move it now.
                    if buckets_read == 1 {
                        assert!(table.insert(newcomer, 99).unwrap());
                    }
                }
            })
            .unwrap();
        assert!(table.displacements() >= 1, "the newcomer displaced keys");
        assert_eq!(table.global_depth().unwrap(), 0, "and nothing split");
        assert_eq!(found, Some(33));
        assert_eq!(table.get(newcomer).unwrap(), Some(99));
    }
}
