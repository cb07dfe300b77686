//! FAST&FAIR: a persistent B+-tree with sorted nodes, in-place shifts and lock-free readers
//! (Hwang et al., "Endurable Transient Inconsistency in Byte-Addressable Persistent B+-Tree",
//! FAST'18), with the three shift policies compared in seed 001 Sec. 4.2 (Fig. 11).
//!
//! # Layout
//!
//! * A **root object** of 64 bytes at an offset the caller chooses (e.g. the pool's root):
//!   magic, format version, node size, shift policy, the root node's offset, the redo-log area's
//!   offset and its lane count. Everything but the root node's offset is written once at
//!   [`FastFair::create`]; [`FastFair::open`] checks it all and refuses a foreign or damaged
//!   object with [`FastFairError::Corrupt`].
//! * **Nodes** of a fixed size (512 bytes by default; any power of two from 128 to 4096), each
//!   a block of the undo-log [`Heap`]'s allocator. The first cache line is the header: level
//!   (0 for a leaf), the right sibling's offset (0 for none), the leftmost child (internal
//!   nodes), the *high key* (every key of the node is below it; `u64::MAX` for the rightmost
//!   node of a level) and a tag. Then `(node_size - 64) / 16` entries of `(key, value)` (a
//!   leaf) or `(separator key, child)` (an internal node), sorted by key. A slot whose key is
//!   [`EMPTY_KEY`] (`u64::MAX`, so it sorts last) is free, and every free slot follows every
//!   used one, so a binary search over all slots needs no entry count. `u64::MAX` is therefore
//!   not a valid key ([`FastFairError::ReservedKey`]).
//! * The **redo-log area** ([`ShiftPolicy::Redo`]): [`LANES`] lanes of 256 bytes, two slots
//!   each of a data line and a commit line.
//!
//! # Shifts without a split (FAST, seed 001 Sec. 4.2)
//!
//! An insert at position `p` of a leaf with `n` entries moves entries `n-1 .. p` one slot to the
//! right, highest first, then writes the new entry at `p`; a remove moves entries `p+1 .. n-1`
//! one slot to the left, lowest first, then frees slot `n-1`. While a shift runs, and in any
//! crash image of one, the node holds at most one *transient duplicate*: two neighbouring slots
//! with the same key. Moving an entry right writes its value before its key, moving it left
//! writes its key before its value, so of two equal neighbouring keys the **right one always
//! carries the right value** (the left one may pair the key with its neighbour's value). Keys
//! are unique, so readers recognise the duplicate without any extra state: a lookup takes the
//! last slot holding its key (an upper-bound binary search), a scan keeps the rightmost of equal
//! keys. This replaces FAST&FAIR's duplicate-*pointer* test, which needs unique values; ours are
//! arbitrary `u64`s. The three policies differ only in how a shift is made durable:
//!
//! * [`ShiftPolicy::PerShift`]: a flush and a fence after each moved entry, the baseline of seed
//!   001 Sec. 4.2 (one flush and one fence per shifted key, plus one for the new entry);
//! * [`ShiftPolicy::Fast`]: stores in place, a flush and a fence only when the shift leaves a
//!   cache line (and at the end). Correct because stores to one line persist in program order
//!   (seed 004 Sec. II-C): a line that persists early carries a prefix of its stores. Under the
//!   simulator's torn-line mode this does not hold and FAST loses data: the crash tests show it;
//! * [`ShiftPolicy::Redo`]: for each cache line the shift touches (in the same order), the
//!   line's new bytes are computed in DRAM, written to the writer's redo lane and persisted, then
//!   committed by one 8-byte store of the target address and length, persisted; then the line is
//!   written in place from the DRAM copy and persisted, and the commit word is cleared (seed 001
//!   Sec. 4.2, Fig. 11). No line is read right after it was persisted, which per-shift does for
//!   every entry it moves within a line: that read-after-persist delay of first-generation
//!   Optane (seed 001 Sec. 3.5) is what the redo log avoids. A lane has two slots used in turn, so a slot's clear is made durable by
//!   the fence of the next line's log write instead of a fence of its own. [`FastFair::open`]
//!   replays committed slots and ignores the rest. Per line: 4 flushes and 3 fences, plus one
//!   fence at the end.
//!
//! # Splits, merges and the root (FAIR)
//!
//! A full leaf splits, an underfull one (below a third of its slots) merges with a neighbour
//! under the same parent if the two fit in one node, else borrows an entry from it; the root
//! grows when it splits and shrinks when it is left with one child. Each of these runs as **one
//! undo-log transaction** of the [`Heap`], which also allocates and frees the nodes: a crash at any point
//! rolls the whole change back at [`Heap::open`], so no node leaks, none is freed twice, and the
//! root pointer, the sibling links and the parents always agree after recovery. Inside the
//! transaction the stores follow FAIR's order, for the sake of lock-free readers: the new
//! sibling is written in full, then linked from the old node with its high key, then the old
//! node is truncated, then the parent is updated, up to a new root swapped in by one 8-byte
//! store of the root pointer. Only the entries that change are written (and so logged and
//! flushed). A split logs every range it will write before writing any, so its log entries
//! share one fence. The published implementation had crash-consistency bugs exactly here (unpersisted
//! new nodes, non-atomic root changes, no recovery); the transaction makes these steps
//! all-or-nothing instead of relying on a repair pass.
//!
//! # Recovery ([`FastFair::open`])
//!
//! The heap has already rolled back any interrupted split or merge. Open then replays committed
//! redo slots, walks every level along the sibling links, checks each node (an allocated block,
//! tagged, of the right level, sorted keys) and rewrites, in a small transaction, any node that
//! still holds a transient duplicate from an interrupted shift, keeping the right copy. So a
//! crash mid-shift leaves the operation either done or not done.
//!
//! # Concurrency
//!
//! * **Readers take no lock.** Each node has a version counter in DRAM (a stripe of
//!   [`LANES`] counters keyed by the node's offset), marked while a writer changes the node,
//!   and the tree has a structure version, made odd while a merge or a root change runs (the
//!   ones that free nodes or move the root). A reader reads a node, then checks both versions;
//!   if either moved it starts again from the root. A reader that finds its key at or above a
//!   node's high key follows the sibling link: the key moved right in a split that happened
//!   after the reader left the parent (FAIR's B-link reads), so a split restarts only the
//!   readers that were reading one of the nodes it changed, while it changed them.
//! * **Writers** find their leaf like a reader, then take the DRAM lock of the leaf's stripe
//!   (a bit of the stripe's version word: one compare-and-swap to take it, a plain store to
//!   release it) and check that the leaf is still the key's: no merge or root change ran since
//!   the descent began and the key is below the leaf's high key (else a split moved it right,
//!   and the writer looks again). Inserts and removes in leaves of different stripes run in
//!   parallel; the stripe's index is also the writer's redo lane. A split or merge takes every
//!   stripe's lock, in order, and new writers wait while one is pending, so they cannot starve
//!   it. The locks live in DRAM only: a crash cannot leave one held.

use std::ops::{Bound, Deref, RangeBounds};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use pmem_ordering::{Backend, PPtr, Pool, PoolError, Words, Written};
use pmem_undo_log::{Heap, Tx, TxError};

use crossbeam_utils::Backoff;

use crate::sync::{StripeGuard, Stripes};

/// The reserved key that marks a free slot; it sorts after every valid key.
pub const EMPTY_KEY: u64 = u64::MAX;
/// Bytes of the tree's root object.
pub const ROOT_BYTES: u64 = 64;
/// Redo lanes, node lock stripes and version stripes (one each per writer slot).
pub const LANES: usize = 16;
/// Bytes of one redo lane: two slots of a data line and a commit line.
pub const LANE_BYTES: u64 = 256;
/// The smallest node size.
pub const MIN_NODE_SIZE: u64 = 128;
/// The largest node size.
pub const MAX_NODE_SIZE: u64 = 4096;
/// The default node size (FAST&FAIR's).
pub const DEFAULT_NODE_SIZE: u64 = 512;

const LINE: u64 = 64;
const HEADER: u64 = 64;
const ENTRY: u64 = 16;
const HEADER_WORDS: usize = (HEADER / 8) as usize;

const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"FASTFAIR");
const FORMAT_VERSION: u64 = 1;
const NODE_TAG: u64 = u64::from_le_bytes(*b"FFnode01");

// Root object fields.
const META_MAGIC: u64 = 0;
const META_VERSION: u64 = 8;
const META_NODE_SIZE: u64 = 16;
const META_POLICY: u64 = 24;
const META_ROOT: u64 = 32;
const META_REDO: u64 = 40;
const META_LANES: u64 = 48;

// Node header fields.
const LEVEL: u64 = 0;
const SIBLING: u64 = 8;
const LEFTMOST: u64 = 16;
const HIGH: u64 = 24;
const TAG: u64 = 32;

/// How an in-node shift is made durable (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShiftPolicy {
    /// A flush and a fence after every moved entry (the baseline of seed 001 Sec. 4.2).
    PerShift,
    /// FAST: a flush and a fence only when the shift crosses a cache line.
    Fast,
    /// Out-of-place: each touched line is redo-logged, committed, then applied (seed 001
    /// Sec. 4.2, Fig. 11).
    Redo,
}

impl ShiftPolicy {
    /// Every policy, in the order reports list them.
    pub const ALL: [ShiftPolicy; 3] = [ShiftPolicy::PerShift, ShiftPolicy::Fast, ShiftPolicy::Redo];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ShiftPolicy::PerShift => "per-shift",
            ShiftPolicy::Fast => "fast",
            ShiftPolicy::Redo => "redo",
        }
    }

    fn code(self) -> u64 {
        match self {
            ShiftPolicy::PerShift => 1,
            ShiftPolicy::Fast => 2,
            ShiftPolicy::Redo => 3,
        }
    }

    fn from_code(code: u64) -> Option<ShiftPolicy> {
        ShiftPolicy::ALL.into_iter().find(|p| p.code() == code)
    }
}

/// What can go wrong with a FAST&FAIR tree.
#[derive(Debug, thiserror::Error)]
pub enum FastFairError {
    /// `u64::MAX` marks a free slot and cannot be a key.
    #[error("key u64::MAX is reserved (it marks a free slot)")]
    ReservedKey,
    /// A transaction of a split or merge, or an access of the pool, failed.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// The root object does not hold a tree, or the tree is damaged.
    #[error("not a valid FAST&FAIR tree at offset {root:#x}: {reason}")]
    Corrupt {
        /// The root object's offset.
        root: u64,
        /// What is wrong.
        reason: String,
    },
    /// A configuration or argument that cannot be used.
    #[error("invalid FAST&FAIR configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
}

impl From<PoolError> for FastFairError {
    fn from(e: PoolError) -> Self {
        FastFairError::Tx(TxError::Pool(e))
    }
}

/// Shape of a new tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastFairConfig {
    /// Bytes per node: a power of two from [`MIN_NODE_SIZE`] to [`MAX_NODE_SIZE`]. 512 by
    /// default; small nodes force deep trees in tests.
    pub node_size: u64,
    /// The shift policy, recorded in the pool.
    pub policy: ShiftPolicy,
}

impl Default for FastFairConfig {
    fn default() -> Self {
        FastFairConfig {
            node_size: DEFAULT_NODE_SIZE,
            policy: ShiftPolicy::Fast,
        }
    }
}

/// Every stripe held by a split or merge (see [`FastFair::exclusive`]).
struct Exclusive<'a> {
    _guards: Vec<StripeGuard<'a>>,
    pending: &'a AtomicU64,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A node as read into DRAM (structure changes and recovery only).
#[derive(Clone, Debug)]
struct NodeImage {
    level: u64,
    sibling: u64,
    leftmost: u64,
    high: u64,
    entries: Vec<(u64, u64)>,
}

/// A FAST&FAIR B+-tree in a heap.
///
/// Operations take `&self` and are safe to call from several threads: lookups and scans take
/// no lock, writers of different leaves run in parallel (see the module docs).
pub struct FastFair<'h, B: Backend, P: Deref<Target = Pool<B>>> {
    heap: &'h Heap<B, P>,
    meta: u64,
    node_size: u64,
    /// 8-byte words per node.
    node_words: usize,
    capacity: usize,
    /// Most nodes one descent can visit in a well-formed tree of this pool.
    step_limit: u64,
    policy: ShiftPolicy,
    redo: u64,
    structure_version: AtomicU64,
    /// Splits and merges waiting for or holding every stripe: new writers let them in first,
    /// so a stream of writers cannot starve them.
    structure_pending: AtomicU64,
    stripes: Stripes,
}

fn valid_node_size(size: u64) -> bool {
    size.is_power_of_two() && (MIN_NODE_SIZE..=MAX_NODE_SIZE).contains(&size)
}

fn entry_offset(node: u64, slot: usize) -> u64 {
    node + HEADER + ENTRY * slot as u64
}

/// Which of a node's cache lines holds `slot`.
fn line_of(slot: usize) -> u64 {
    (HEADER + ENTRY * slot as u64) / LINE
}

/// A whole node's bytes: header and sorted entries, free slots after them.
fn node_bytes(node_size: u64, image: &NodeImage) -> Vec<u8> {
    let mut out = Vec::with_capacity(node_size as usize);
    for word in [
        image.level,
        image.sibling,
        image.leftmost,
        image.high,
        NODE_TAG,
    ] {
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.resize(HEADER as usize, 0);
    out.extend_from_slice(&entry_bytes(node_size, &image.entries));
    out
}

/// The entry area of a node holding `entries`.
fn entry_bytes(node_size: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    let capacity = ((node_size - HEADER) / ENTRY) as usize;
    let mut out = Vec::with_capacity(capacity * ENTRY as usize);
    for i in 0..capacity {
        let (k, v) = entries.get(i).copied().unwrap_or((EMPTY_KEY, 0));
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// A node's words, bounds-checked once ([`Pool::words`]): the searches of the hot paths read
/// through it instead of paying a pool bounds check per load.
#[derive(Clone, Copy)]
struct NodeView<'a> {
    words: Words<'a>,
    capacity: usize,
}

impl NodeView<'_> {
    #[inline]
    fn level(&self) -> u64 {
        self.words.load((LEVEL / 8) as usize)
    }

    #[inline]
    fn sibling(&self) -> u64 {
        self.words.load((SIBLING / 8) as usize)
    }

    #[inline]
    fn leftmost(&self) -> u64 {
        self.words.load((LEFTMOST / 8) as usize)
    }

    #[inline]
    fn high(&self) -> u64 {
        self.words.load((HIGH / 8) as usize)
    }

    #[inline]
    fn key(&self, slot: usize) -> u64 {
        self.words.load(HEADER_WORDS + 2 * slot)
    }

    #[inline]
    fn value(&self, slot: usize) -> u64 {
        self.words.load(HEADER_WORDS + 2 * slot + 1)
    }

    /// The first slot whose entry fails `below` (which holds for a prefix of the slots), by a
    /// binary search without data-dependent branches: the probes' lines are already being
    /// fetched, so a mispredicted branch per probe would cost more than the compare.
    #[inline]
    fn partition(&self, below: impl Fn(u64) -> bool) -> usize {
        let mut base = 0;
        let mut size = self.capacity;
        while size > 1 {
            let half = size / 2;
            let mid = base + half;
            base = std::hint::select_unpredictable(below(self.key(mid)), mid, base);
            size -= half;
        }
        base + usize::from(below(self.key(base)))
    }

    /// The first slot whose key is above `key` (free slots count as above every key). Of a
    /// transient duplicate, the slot before the result is the right copy.
    #[inline]
    fn upper_bound(&self, key: u64) -> usize {
        self.partition(|k| k <= key)
    }

    /// Used slots (the first free slot).
    #[inline]
    fn count(&self) -> usize {
        self.partition(|k| k != EMPTY_KEY)
    }

    /// The child of this internal node that covers `key`.
    #[inline]
    fn child_for(&self, key: u64) -> u64 {
        match self.upper_bound(key) {
            0 => self.leftmost(),
            ub => self.value(ub - 1),
        }
    }

    /// The value of `key` in this leaf, if there.
    #[inline]
    fn leaf_value(&self, key: u64) -> Option<u64> {
        let ub = self.upper_bound(key);
        (ub > 0 && self.key(ub - 1) == key).then(|| self.value(ub - 1))
    }
}

/// Writes planned in order, as (offset, bytes): a split is planned, then logged, then written.
type Staged = Vec<(u64, Vec<u8>)>;

/// The write of the slots of node `offset` whose entry differs between `old` (as stored) and
/// `new`, if any: the transaction then logs and flushes only those lines, not the whole node.
fn changed_entries(offset: u64, old: &[(u64, u64)], new: &[(u64, u64)]) -> Option<(u64, Vec<u8>)> {
    let first = old
        .iter()
        .zip(new)
        .position(|(a, b)| a != b)
        .unwrap_or(old.len().min(new.len()));
    let end = old.len().max(new.len());
    if first >= end {
        return None;
    }
    let mut bytes = Vec::with_capacity((end - first) * ENTRY as usize);
    for slot in first..end {
        let (k, v) = new.get(slot).copied().unwrap_or((EMPTY_KEY, 0));
        bytes.extend_from_slice(&k.to_le_bytes());
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    Some((entry_offset(offset, first), bytes))
}

/// What one validated step of a lock-free descent found.
enum Step {
    /// Go right: the key is at or above this node's high key.
    Right(u64),
    /// Go down to this child.
    Down(u64),
    /// A leaf: the value, if the key is there.
    Leaf(Option<u64>),
}

/// One entry write of a shift: `slot := (key, value)` (`None` leaves the value), as two
/// 8-byte stores in the order `key_first` says.
#[derive(Clone, Copy, Default)]
struct SlotWrite {
    slot: usize,
    key: u64,
    value: Option<u64>,
    key_first: bool,
}

/// A shift inside one node, as the sequence of entry writes it makes (see the module docs);
/// the writes are made one by one, each reading the entry it moves just before, so no plan is
/// built in memory.
#[derive(Clone, Copy)]
enum Shift {
    /// Put `(key, value)` at slot `at` of a node with `n` entries: entries `n-1 .. at` move one
    /// slot right (highest first, value before key), then the new entry is written.
    Insert {
        at: usize,
        n: usize,
        key: u64,
        value: u64,
    },
    /// Drop slot `at` of a node with `n` entries: entries `at+1 .. n-1` move one slot left
    /// (lowest first, key before value), then slot `n-1` is freed.
    Remove { at: usize, n: usize },
}

impl Shift {
    /// Number of entry writes.
    fn len(self) -> usize {
        match self {
            Shift::Insert { at, n, .. } => n - at + 1,
            Shift::Remove { at, n } => n - at,
        }
    }
}

impl<'h, B: Backend, P: Deref<Target = Pool<B>>> FastFair<'h, B, P> {
    /// Make an empty tree with its root object at `root` (64-byte aligned, [`ROOT_BYTES`]
    /// bytes). The root object, the redo area and the first leaf are written in one
    /// transaction.
    pub fn create(
        heap: &'h Heap<B, P>,
        root: u64,
        config: FastFairConfig,
    ) -> Result<Self, FastFairError> {
        if !valid_node_size(config.node_size) {
            return Err(FastFairError::InvalidConfig {
                reason: format!(
                    "node size {}: a power of two from {MIN_NODE_SIZE} to {MAX_NODE_SIZE} is needed",
                    config.node_size
                ),
            });
        }
        if !root.is_multiple_of(LINE) {
            return Err(FastFairError::InvalidConfig {
                reason: format!("root offset {root:#x} is not 64-byte aligned"),
            });
        }
        heap.pool().check_range(root, ROOT_BYTES)?;
        let node_size = config.node_size;
        let redo = heap.transaction(|tx| {
            let redo = tx.alloc(LANES as u64 * LANE_BYTES)?.offset();
            tx.write(redo, &vec![0u8; LANES * LANE_BYTES as usize])?;
            let leaf = tx.alloc(node_size)?.offset();
            let image = NodeImage {
                level: 0,
                sibling: 0,
                leftmost: 0,
                high: EMPTY_KEY,
                entries: Vec::new(),
            };
            tx.write(leaf, &node_bytes(node_size, &image))?;
            let mut meta = Vec::with_capacity(ROOT_BYTES as usize);
            for word in [
                ROOT_MAGIC,
                FORMAT_VERSION,
                node_size,
                config.policy.code(),
                leaf,
                redo,
                LANES as u64,
                0,
            ] {
                meta.extend_from_slice(&word.to_le_bytes());
            }
            tx.write(root, &meta)?;
            Ok::<_, TxError>(redo)
        })?;
        Ok(FastFair::handle(heap, root, node_size, config.policy, redo))
    }

    fn handle(
        heap: &'h Heap<B, P>,
        meta: u64,
        node_size: u64,
        policy: ShiftPolicy,
        redo: u64,
    ) -> Self {
        FastFair {
            heap,
            meta,
            node_size,
            node_words: (node_size / 8) as usize,
            capacity: ((node_size - HEADER) / ENTRY) as usize,
            step_limit: heap.pool().size() / node_size + 64,
            policy,
            redo,
            structure_version: AtomicU64::new(0),
            structure_pending: AtomicU64::new(0),
            stripes: Stripes::new(LANES),
        }
    }

    /// Open the tree whose root object is at `root`. The heap has already rolled back any
    /// split or merge a crash interrupted; this replays committed redo slots, checks every
    /// node, removes the transient duplicate an interrupted shift may have left, and counts the
    /// keys.
    pub fn open(heap: &'h Heap<B, P>, root: u64) -> Result<Self, FastFairError> {
        let pool = heap.pool();
        let corrupt = |reason: String| FastFairError::Corrupt { root, reason };
        if !root.is_multiple_of(LINE) {
            return Err(FastFairError::InvalidConfig {
                reason: format!("root offset {root:#x} is not 64-byte aligned"),
            });
        }
        pool.check_range(root, ROOT_BYTES)?;
        let magic = pool.load_u64(root + META_MAGIC)?;
        if magic != ROOT_MAGIC {
            return Err(corrupt(format!("magic {magic:#x}")));
        }
        let version = pool.load_u64(root + META_VERSION)?;
        if version != FORMAT_VERSION {
            return Err(corrupt(format!(
                "format version {version}, this build reads {FORMAT_VERSION}"
            )));
        }
        let node_size = pool.load_u64(root + META_NODE_SIZE)?;
        if !valid_node_size(node_size) {
            return Err(corrupt(format!("node size {node_size}")));
        }
        let code = pool.load_u64(root + META_POLICY)?;
        let policy =
            ShiftPolicy::from_code(code).ok_or_else(|| corrupt(format!("shift policy {code}")))?;
        let redo = pool.load_u64(root + META_REDO)?;
        let lanes = pool.load_u64(root + META_LANES)?;
        if lanes != LANES as u64 {
            return Err(corrupt(format!("{lanes} redo lanes, {LANES} expected")));
        }
        if heap
            .block_size(redo)
            .is_none_or(|size| size < LANES as u64 * LANE_BYTES)
        {
            return Err(corrupt(format!(
                "redo area {redo:#x} is not an allocated block of its size"
            )));
        }
        let tree = FastFair::handle(heap, root, node_size, policy, redo);
        tree.replay_redo()?;
        let len = tree.check_and_repair()?;
        tree.stripes.set_total(len);
        Ok(tree)
    }

    /// The shift policy recorded in the pool.
    pub fn policy(&self) -> ShiftPolicy {
        self.policy
    }

    /// Bytes per node.
    pub fn node_size(&self) -> u64 {
        self.node_size
    }

    /// Entries per node.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of keys.
    pub fn len(&self) -> u64 {
        self.stripes.total()
    }

    /// Whether the tree holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn pool(&self) -> &Pool<B> {
        self.heap.pool()
    }

    fn corrupt(&self, reason: String) -> FastFairError {
        FastFairError::Corrupt {
            root: self.meta,
            reason,
        }
    }

    fn root_node(&self) -> Result<u64, FastFairError> {
        Ok(self.pool().load_u64(self.meta + META_ROOT)?)
    }

    /// Levels of the tree (1 for a single leaf).
    pub fn height(&self) -> Result<u64, FastFairError> {
        let root = self.root_node()?;
        Ok(self.pool().load_u64(root + LEVEL)? + 1)
    }

    // ------------------------------------------------------------------ locks and versions

    fn stripe_index(node: u64) -> usize {
        ((node / LINE).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % LANES
    }

    /// Every stripe's lock, taken in index order (writers hold one stripe at a time, so this
    /// cannot deadlock): no other writer runs until the guards drop.
    fn exclusive(&self) -> Exclusive<'_> {
        self.structure_pending.fetch_add(1, Ordering::Relaxed);
        Exclusive {
            _guards: self.stripes.lock_all(),
            pending: &self.structure_pending,
        }
    }

    /// Find `key`'s leaf without a lock, lock its stripe, and check that it is still `key`'s
    /// leaf: no merge or root change ran since the descent began (they move the structure
    /// version) and no split moved `key` to a right sibling (the leaf's high key is above it).
    /// A structure change takes every stripe, so none runs while the guard is held.
    fn lock_leaf(&self, key: u64) -> Result<(u64, usize, StripeGuard<'_>), FastFairError> {
        loop {
            let backoff = Backoff::new();
            while self.structure_pending.load(Ordering::Relaxed) != 0 {
                backoff.snooze();
            }
            let (leaf, structure) = self.lock_free_leaf(key)?;
            let lane = Self::stripe_index(leaf);
            let guard = self.stripes.lock(lane);
            if self.structure_version.load(Ordering::Relaxed) != structure {
                continue;
            }
            let view = self.view(leaf)?;
            if view.level() == 0 && key < view.high() {
                return Ok((leaf, lane, guard));
            }
        }
    }

    /// Wait until `version` is even (no writer inside) and return it.
    fn read_begin(version: &AtomicU64) -> u64 {
        loop {
            let v = version.load(Ordering::Acquire);
            if v & 1 == 0 {
                return v;
            }
            std::hint::spin_loop();
        }
    }

    /// Whether `version` still reads `seen` after this thread's reads.
    fn read_valid(version: &AtomicU64, seen: u64) -> bool {
        fence(Ordering::Acquire);
        version.load(Ordering::Relaxed) == seen
    }

    /// Make the structure version odd before a change. Its writer holds every stripe, so a
    /// plain store does: no locked read-modify-write, which would wait for the flushes in
    /// flight.
    fn write_begin(version: &AtomicU64) {
        let v = version.load(Ordering::Relaxed);
        version.store(v.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Make the structure version even again after the change.
    fn write_end(version: &AtomicU64) {
        let v = version.load(Ordering::Relaxed);
        version.store(v.wrapping_add(1), Ordering::Release);
    }

    // ------------------------------------------------------------------ node reads

    fn key_at(&self, node: u64, slot: usize) -> Result<u64, PoolError> {
        self.pool().load_u64(entry_offset(node, slot))
    }

    fn value_at(&self, node: u64, slot: usize) -> Result<u64, PoolError> {
        self.pool().load_u64(entry_offset(node, slot) + 8)
    }

    /// The words of `node`, bounds-checked once: the hot paths read nodes through this.
    #[inline]
    fn view(&self, node: u64) -> Result<NodeView<'_>, PoolError> {
        Ok(NodeView {
            words: self.pool().words(node, self.node_words)?,
            capacity: self.capacity,
        })
    }

    /// The first slot whose key is above `key` (free slots count as above every key). Of
    /// a transient duplicate, the slot before the result is the right copy.
    fn upper_bound(&self, node: u64, key: u64) -> Result<usize, PoolError> {
        Ok(self.view(node)?.upper_bound(key))
    }

    /// Used slots of a node (the first free slot).
    fn count(&self, node: u64) -> Result<usize, PoolError> {
        Ok(self.view(node)?.count())
    }

    /// A node as stored, transient duplicates dropped (the right copy kept).
    fn read_node(&self, node: u64) -> Result<NodeImage, FastFairError> {
        let view = self.view(node)?;
        let mut entries: Vec<(u64, u64)> = Vec::with_capacity(self.capacity);
        for slot in 0..self.capacity {
            let k = view.key(slot);
            if k == EMPTY_KEY {
                break;
            }
            let v = view.value(slot);
            match entries.last_mut() {
                Some(last) if last.0 == k => *last = (k, v),
                _ => entries.push((k, v)),
            }
        }
        Ok(NodeImage {
            level: view.level(),
            sibling: view.sibling(),
            leftmost: view.leftmost(),
            high: view.high(),
            entries,
        })
    }

    // ------------------------------------------------------------------ lock-free reads

    /// One step of a lock-free descent at `node`.
    fn step(&self, node: u64, key: u64) -> Result<Step, PoolError> {
        let pool = self.pool();
        // Ask for every line of the node at once: the search then waits for one miss, not one
        // per probe.
        pool.prefetch(node, self.node_size);
        let view = self.view(node)?;
        if key >= view.high() {
            return Ok(Step::Right(view.sibling()));
        }
        if view.level() == 0 {
            Ok(Step::Leaf(view.leaf_value(key)))
        } else {
            Ok(Step::Down(view.child_for(key)))
        }
    }

    /// Most nodes one descent can visit in a well-formed tree of this pool.
    fn step_limit(&self) -> u64 {
        self.step_limit
    }

    /// Walk from the root to `key`'s leaf, validating each node, restarting after a change.
    fn lock_free_get(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        'restart: loop {
            let structure = Self::read_begin(&self.structure_version);
            let mut node = self.root_node()?;
            let mut steps = 0;
            loop {
                steps += 1;
                if steps > self.step_limit() {
                    return Err(self.corrupt(format!("a lookup of {key} does not end")));
                }
                let stripe = Self::stripe_index(node);
                let seen = self.stripes.read_begin(stripe);
                let outcome = self.step(node, key);
                if !self.stripes.read_valid(stripe, seen)
                    || !Self::read_valid(&self.structure_version, structure)
                {
                    continue 'restart;
                }
                match outcome? {
                    Step::Leaf(value) => return Ok(value),
                    Step::Down(child) | Step::Right(child) if child != 0 => node = child,
                    _ => {
                        return Err(
                            self.corrupt(format!("node {node:#x} has a null link for {key}"))
                        )
                    }
                }
            }
        }
    }

    /// The value of `key`, if present. Takes no lock.
    pub fn get(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey);
        }
        self.lock_free_get(key)
    }

    /// The leaf that covers `key`, found without a lock, and the structure version it was
    /// found under.
    fn lock_free_leaf(&self, key: u64) -> Result<(u64, u64), FastFairError> {
        'restart: loop {
            let structure = Self::read_begin(&self.structure_version);
            let mut node = self.root_node()?;
            let mut steps = 0;
            loop {
                steps += 1;
                if steps > self.step_limit() {
                    return Err(self.corrupt(format!("a descent to {key} does not end")));
                }
                let stripe = Self::stripe_index(node);
                let seen = self.stripes.read_begin(stripe);
                let outcome = (|| -> Result<Option<u64>, PoolError> {
                    self.pool().prefetch(node, self.node_size);
                    let view = self.view(node)?;
                    if key >= view.high() {
                        return Ok(Some(view.sibling()));
                    }
                    if view.level() == 0 {
                        return Ok(None);
                    }
                    Ok(Some(view.child_for(key)))
                })();
                if !self.stripes.read_valid(stripe, seen)
                    || !Self::read_valid(&self.structure_version, structure)
                {
                    continue 'restart;
                }
                match outcome? {
                    None => return Ok((node, structure)),
                    Some(0) => {
                        return Err(
                            self.corrupt(format!("node {node:#x} has a null link for {key}"))
                        )
                    }
                    Some(next) => node = next,
                }
            }
        }
    }

    /// The pairs with keys in `range`, in key order, read without a lock: leaf by leaf along
    /// the sibling links. Each leaf is read consistently; a scan running beside writers sees
    /// every key that was present for its whole duration.
    pub fn range<R: RangeBounds<u64>>(&self, range: R) -> Range<'_, 'h, B, P> {
        let start = match range.start_bound() {
            Bound::Included(&k) => Some(k),
            Bound::Excluded(&k) => k.checked_add(1),
            Bound::Unbounded => Some(0),
        };
        let end = match range.end_bound() {
            Bound::Included(&k) => Bound::Included(k),
            Bound::Excluded(&k) => Bound::Excluded(k),
            Bound::Unbounded => Bound::Unbounded,
        };
        Range {
            tree: self,
            resume: start.filter(|&k| k != EMPTY_KEY),
            end,
            hop: None,
            buf: Vec::new(),
            raw: Vec::new(),
            pos: 0,
            failed: false,
        }
    }

    /// Read leaf `node` consistently: (high key, sibling, entries with keys `>= from`).
    fn read_leaf_from(
        &self,
        node: u64,
        from: u64,
        raw: &mut Vec<u8>,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<Option<(u64, u64)>, FastFairError> {
        raw.resize(self.capacity * ENTRY as usize, 0);
        let raw = &mut raw[..];
        let stripe = Self::stripe_index(node);
        let seen = self.stripes.read_begin(stripe);
        let pool = self.pool();
        let header = (|| -> Result<(u64, u64, u64), PoolError> {
            let level = pool.load_u64(node + LEVEL)?;
            let high = pool.load_u64(node + HIGH)?;
            let sibling = pool.load_u64(node + SIBLING)?;
            pool.read_bytes(node + HEADER, raw)?;
            Ok((level, high, sibling))
        })();
        if !self.stripes.read_valid(stripe, seen) {
            return Ok(None);
        }
        let (level, high, sibling) = header?;
        if level != 0 {
            return Ok(None);
        }
        let start = out.len();
        for chunk in raw.chunks_exact(ENTRY as usize) {
            let k = u64::from_le_bytes(chunk[0..8].try_into().expect("8"));
            if k == EMPTY_KEY {
                break;
            }
            if k < from {
                continue;
            }
            let v = u64::from_le_bytes(chunk[8..16].try_into().expect("8"));
            match out[start..].last_mut() {
                Some(last) if last.0 == k => *last = (k, v),
                _ => out.push((k, v)),
            }
        }
        Ok(Some((high, sibling)))
    }

    // ------------------------------------------------------------------ writes

    /// Insert `key -> value` if `key` is absent: `Ok(true)` if inserted, `Ok(false)` if the key
    /// was already there (its value is left alone). Durable when it returns.
    pub fn insert(&self, key: u64, value: u64) -> Result<bool, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey);
        }
        Ok(self.put(key, value, false)?.is_none())
    }

    /// Insert or replace: the old value if the key was present. Durable when it returns.
    pub fn upsert(&self, key: u64, value: u64) -> Result<Option<u64>, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey);
        }
        self.put(key, value, true)
    }

    /// Root-to-leaf path of `key`, for a writer holding every stripe.
    fn writer_path(&self, key: u64) -> Result<Vec<u64>, FastFairError> {
        let mut path = Vec::with_capacity(8);
        let mut node = self.root_node()?;
        for _ in 0..self.step_limit() {
            path.push(node);
            let view = self.view(node)?;
            if key >= view.high() {
                return Err(self.corrupt(format!("key {key} above the high key of {node:#x}")));
            }
            if view.level() == 0 {
                return Ok(path);
            }
            node = view.child_for(key);
        }
        Err(self.corrupt(format!("a descent to {key} does not end")))
    }

    fn put(&self, key: u64, value: u64, replace: bool) -> Result<Option<u64>, FastFairError> {
        {
            let (leaf, lane, _node) = self.lock_leaf(key)?;
            if let Some(old) = self.put_in_leaf(leaf, lane, key, value, replace)? {
                return Ok(old);
            }
        }
        let _all = self.exclusive();
        let path = self.writer_path(key)?;
        let leaf = *path.last().expect("a path ends at a leaf");
        // Another writer may have split this leaf or inserted the key meanwhile.
        if let Some(old) = self.put_in_leaf(leaf, Self::stripe_index(leaf), key, value, replace)? {
            return Ok(old);
        }
        self.split_insert(&path, key, value)?;
        self.stripes.count_held(0, 1);
        Ok(None)
    }

    /// Put into a leaf whose lock the caller holds: `Some(result)` if done, `None` if the key
    /// is absent and the leaf is full.
    fn put_in_leaf(
        &self,
        leaf: u64,
        lane: usize,
        key: u64,
        value: u64,
        replace: bool,
    ) -> Result<Option<Option<u64>>, FastFairError> {
        let pool = self.pool();
        let view = self.view(leaf)?;
        let ub = view.upper_bound(key);
        if ub > 0 && view.key(ub - 1) == key {
            let at = entry_offset(leaf, ub - 1) + 8;
            let old = view.value(ub - 1);
            if replace {
                // One failure-atomic store: readers see the old or the new value.
                let w = pool.store_u64(at, value)?;
                let _ = pool.persist(w);
            }
            return Ok(Some(Some(old)));
        }
        let n = view.count();
        if n >= self.capacity {
            return Ok(None);
        }
        let shift = Shift::Insert {
            at: ub,
            n,
            key,
            value,
        };
        self.shift(leaf, lane, shift)?;
        self.stripes.count_held(lane, 1);
        Ok(Some(None))
    }

    /// Remove `key`: its value, if it was present. Durable when it returns.
    pub fn remove(&self, key: u64) -> Result<Option<u64>, FastFairError> {
        if key == EMPTY_KEY {
            return Err(FastFairError::ReservedKey);
        }
        {
            let (leaf, lane, _node) = self.lock_leaf(key)?;
            let ub = self.upper_bound(leaf, key)?;
            if ub == 0 || self.key_at(leaf, ub - 1)? != key {
                return Ok(None);
            }
            let n = self.count(leaf)?;
            if n > self.min_fill() || leaf == self.root_node()? {
                let old = self.value_at(leaf, ub - 1)?;
                self.remove_in_leaf(leaf, lane, ub - 1, n)?;
                return Ok(Some(old));
            }
        }
        let _all = self.exclusive();
        let path = self.writer_path(key)?;
        let leaf = *path.last().expect("a path ends at a leaf");
        let ub = self.upper_bound(leaf, key)?;
        if ub == 0 || self.key_at(leaf, ub - 1)? != key {
            return Ok(None);
        }
        let old = self.value_at(leaf, ub - 1)?;
        let n = self.count(leaf)?;
        if n > self.min_fill() || path.len() == 1 {
            self.remove_in_leaf(leaf, Self::stripe_index(leaf), ub - 1, n)?;
        } else {
            self.remove_and_merge(&path, key)?;
            self.stripes.count_held(0, 1u64.wrapping_neg());
        }
        Ok(Some(old))
    }

    /// Fewest entries a node keeps before it tries to merge.
    fn min_fill(&self) -> usize {
        self.capacity.div_ceil(3)
    }

    fn remove_in_leaf(
        &self,
        leaf: u64,
        lane: usize,
        slot: usize,
        n: usize,
    ) -> Result<(), FastFairError> {
        let shift = Shift::Remove { at: slot, n };
        self.shift(leaf, lane, shift)?;
        self.stripes.count_held(lane, 1u64.wrapping_neg());
        Ok(())
    }

    /// Carry out `shift` on `node` under the tree's policy, with the node's stripe marked as
    /// changing meanwhile. The caller holds the node's stripe lock (or every stripe), so
    /// `lane` is this writer's alone.
    fn shift(&self, node: u64, lane: usize, shift: Shift) -> Result<(), FastFairError> {
        let stripe = Self::stripe_index(node);
        self.stripes.change_begin_held(stripe);
        let result = match self.policy {
            ShiftPolicy::PerShift => self.shift_per_entry(node, shift),
            ShiftPolicy::Fast => self.shift_fast(node, shift),
            ShiftPolicy::Redo => self.shift_redo(node, lane, shift),
        };
        self.stripes.change_end_held(stripe);
        result
    }

    /// The `i`th entry write of `shift` on `node`, reading the entry it moves (not yet
    /// overwritten: a right shift runs downward, a left shift upward).
    #[inline]
    fn slot_write(view: NodeView<'_>, shift: Shift, i: usize) -> SlotWrite {
        match shift {
            Shift::Insert { at, n, key, value } => {
                if i < n - at {
                    let slot = n - i;
                    SlotWrite {
                        slot,
                        key: view.key(slot - 1),
                        value: Some(view.value(slot - 1)),
                        key_first: false,
                    }
                } else {
                    SlotWrite {
                        slot: at,
                        key,
                        value: Some(value),
                        key_first: false,
                    }
                }
            }
            Shift::Remove { at, n } => {
                let slot = at + i;
                if slot + 1 < n {
                    SlotWrite {
                        slot,
                        key: view.key(slot + 1),
                        value: Some(view.value(slot + 1)),
                        key_first: true,
                    }
                } else {
                    SlotWrite {
                        slot,
                        key: EMPTY_KEY,
                        value: None,
                        key_first: true,
                    }
                }
            }
        }
    }

    #[inline]
    fn store_slot(&self, node: u64, w: &SlotWrite) -> Result<Written, PoolError> {
        let pool = self.pool();
        let at = entry_offset(node, w.slot);
        match (w.value, w.key_first) {
            (None, _) => pool.store_u64(at, w.key),
            (Some(v), true) => {
                let k = pool.store_u64(at, w.key)?;
                Ok(k.merge(pool.store_u64(at + 8, v)?))
            }
            (Some(v), false) => {
                let vw = pool.store_u64(at + 8, v)?;
                Ok(vw.merge(pool.store_u64(at, w.key)?))
            }
        }
    }

    /// The baseline: every moved entry flushed and fenced before the next.
    fn shift_per_entry(&self, node: u64, shift: Shift) -> Result<(), FastFairError> {
        let view = self.view(node)?;
        for i in 0..shift.len() {
            let w = Self::slot_write(view, shift, i);
            let written = self.store_slot(node, &w)?;
            let _ = self.pool().persist(written);
        }
        Ok(())
    }

    /// FAST: stores in place; one flush and fence each time the shift leaves a line.
    fn shift_fast(&self, node: u64, shift: Shift) -> Result<(), FastFairError> {
        let pool = self.pool();
        let view = self.view(node)?;
        let mut pending: Option<(u64, Written)> = None;
        for i in 0..shift.len() {
            let w = Self::slot_write(view, shift, i);
            let line = line_of(w.slot);
            if let Some((open, written)) = pending.take() {
                if open == line {
                    pending = Some((line, written.merge(self.store_slot(node, &w)?)));
                    continue;
                }
                let _ = pool.persist(written);
            }
            pending = Some((line, self.store_slot(node, &w)?));
        }
        if let Some((_, written)) = pending {
            let _ = pool.persist(written);
        }
        Ok(())
    }

    /// Offsets of a lane slot's data line and commit word.
    fn redo_slot(&self, lane: usize, slot: usize) -> (u64, u64) {
        let data = self.redo + lane as u64 * LANE_BYTES + slot as u64 * 2 * LINE;
        (data, data + LINE)
    }

    /// Redo-logged: each touched line goes through the lane before it is written in place.
    fn shift_redo(&self, node: u64, lane: usize, shift: Shift) -> Result<(), FastFairError> {
        const PER_LINE: usize = (LINE / ENTRY) as usize;
        let mut turn = 0;
        let mut unfenced_clear: Option<Written> = None;
        let mut group = [SlotWrite::default(); PER_LINE];
        let mut grouped = 0;
        let view = self.view(node)?;
        for i in 0..=shift.len() {
            let next = if i < shift.len() {
                Some(Self::slot_write(view, shift, i))
            } else {
                None
            };
            let same_line = next.is_some_and(|w| line_of(w.slot) == line_of(group[0].slot));
            if grouped > 0 && !same_line {
                // The line's new bytes, built in DRAM from its current bytes and the writes.
                let writes = &group[..grouped];
                let lo = writes.iter().map(|w| w.slot).min().expect("non-empty");
                let hi = writes.iter().map(|w| w.slot).max().expect("non-empty");
                let mut bytes = [0u8; LINE as usize];
                let len = (hi - lo + 1) * ENTRY as usize;
                self.pool()
                    .read_bytes(entry_offset(node, lo), &mut bytes[..len])?;
                for w in writes {
                    let at = (w.slot - lo) * ENTRY as usize;
                    bytes[at..at + 8].copy_from_slice(&w.key.to_le_bytes());
                    if let Some(v) = w.value {
                        bytes[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
                    }
                }
                unfenced_clear = Some(self.redo_line(
                    lane,
                    turn,
                    entry_offset(node, lo),
                    &bytes[..len],
                    unfenced_clear.take(),
                )?);
                turn ^= 1;
                grouped = 0;
            }
            if let Some(w) = next {
                group[grouped] = w;
                grouped += 1;
            }
        }
        if let Some(clear) = unfenced_clear {
            let _ = self.pool().persist(clear);
        }
        Ok(())
    }

    /// Log, commit, apply and clear one line's update through slot `turn` of `lane`. The
    /// previous slot's clear, still unfenced, is made durable by this slot's first fence (it
    /// must be, before that slot's data line is written again). Returns this slot's clear.
    fn redo_line(
        &self,
        lane: usize,
        turn: usize,
        target: u64,
        bytes: &[u8],
        previous_clear: Option<Written>,
    ) -> Result<Written, FastFairError> {
        let pool = self.pool();
        let (data, commit) = self.redo_slot(lane, turn);
        let logged = pool.flush(pool.write(data, bytes)?);
        let pending = match previous_clear {
            Some(clear) => logged.and(pool.flush(clear)),
            None => logged,
        };
        let _ = pool.fence(pending);
        let _ = pool.persist(pool.store_u64(commit, (target << 7) | bytes.len() as u64)?);
        let _ = pool.persist(pool.write(target, bytes)?);
        Ok(pool.store_u64(commit, 0)?)
    }

    /// Apply every committed redo slot (recovery).
    fn replay_redo(&self) -> Result<(), FastFairError> {
        let pool = self.pool();
        for lane in 0..LANES {
            for turn in 0..2 {
                let (data, commit) = self.redo_slot(lane, turn);
                let word = pool.load_u64(commit)?;
                if word == 0 {
                    continue;
                }
                let target = word >> 7;
                let len = word & 127;
                let fits = (1..=LINE).contains(&len)
                    && target.is_multiple_of(8)
                    && target / LINE == (target + len - 1) / LINE
                    && pool.check_range(target, len).is_ok();
                if !fits {
                    return Err(self.corrupt(format!(
                        "redo lane {lane} slot {turn} commits {len} bytes at {target:#x}"
                    )));
                }
                let mut bytes = [0u8; LINE as usize];
                pool.read_bytes(data, &mut bytes[..len as usize])?;
                let _ = pool.persist(pool.write(target, &bytes[..len as usize])?);
                let _ = pool.persist(pool.store_u64(commit, 0)?);
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------------ structure changes

    /// Run `f` with the versions of `nodes`' stripes odd (each stripe once).
    fn with_nodes_versioned<R>(&self, nodes: &[u64], f: impl FnOnce() -> R) -> R {
        let mut mask = 0u64;
        for &n in nodes {
            mask |= 1 << Self::stripe_index(n);
        }
        for i in 0..self.stripes.len() {
            if mask & (1 << i) != 0 {
                self.stripes.change_begin_held(i);
            }
        }
        let result = f();
        for i in 0..self.stripes.len() {
            if mask & (1 << i) != 0 {
                self.stripes.change_end_held(i);
            }
        }
        result
    }

    /// Run `f` with the structure version odd: lock-free readers restart after it.
    fn with_structure_versioned<R>(&self, f: impl FnOnce() -> R) -> R {
        Self::write_begin(&self.structure_version);
        let result = f();
        Self::write_end(&self.structure_version);
        result
    }

    fn write_node(&self, tx: &Tx<'_, B>, node: u64, image: &NodeImage) -> Result<(), TxError> {
        tx.write(node, &node_bytes(self.node_size, image))
    }

    /// Split the full leaf at the end of `path` to insert `key`, and its ancestors as needed:
    /// one transaction, written in FAIR order (see the module docs).
    fn split_insert(&self, path: &[u64], key: u64, value: u64) -> Result<(), FastFairError> {
        let root_splits = self.root_would_split(path)?;
        let run = || {
            self.with_nodes_versioned(path, || {
                self.heap.transaction(|tx| {
                    let mut staged = Vec::new();
                    self.split_in_tx(tx, path, key, value, &mut staged)?;
                    // Log every range before writing any: the log entries then share one
                    // fence, where logging each just before its write fenced once per range.
                    // The writes still follow in FAIR order, for lock-free readers.
                    for (offset, bytes) in &staged {
                        tx.snapshot(*offset, bytes.len() as u64)?;
                    }
                    for (offset, bytes) in &staged {
                        tx.write(*offset, bytes)?;
                    }
                    Ok::<_, FastFairError>(())
                })
            })
        };
        if root_splits {
            self.with_structure_versioned(run)
        } else {
            run()
        }
    }

    /// Whether every node of `path` is full, so the split reaches the root.
    fn root_would_split(&self, path: &[u64]) -> Result<bool, FastFairError> {
        for &n in path {
            if self.count(n)? < self.capacity {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Plan the split in `staged`, the writes in FAIR order (new nodes are allocated in `tx`).
    fn split_in_tx(
        &self,
        tx: &Tx<'_, B>,
        path: &[u64],
        key: u64,
        value: u64,
        staged: &mut Staged,
    ) -> Result<(), FastFairError> {
        let leaf_off = *path.last().expect("a path ends at a leaf");
        let mut node = self.read_node(leaf_off)?;
        let old = node.entries.clone();
        let at = node.entries.partition_point(|&(k, _)| k < key);
        node.entries.insert(at, (key, value));
        let mid = node.entries.len() / 2;
        let right_entries = node.entries.split_off(mid);
        let mut carry = (right_entries[0].0, 0u64);
        carry.1 = self.split_node(
            tx,
            staged,
            leaf_off,
            &mut node,
            &old,
            right_entries,
            0,
            carry.0,
        )?;
        for i in (0..path.len() - 1).rev() {
            let parent_off = path[i];
            let mut parent = self.read_node(parent_off)?;
            let old = parent.entries.clone();
            let at = parent.entries.partition_point(|&(k, _)| k < carry.0);
            parent.entries.insert(at, carry);
            if parent.entries.len() <= self.capacity {
                staged.extend(changed_entries(parent_off, &old, &parent.entries));
                return Ok(());
            }
            let m = parent.entries.len() / 2;
            let mut right = parent.entries.split_off(m);
            let (up_key, mid_child) = right.remove(0);
            let sibling = self.split_node(
                tx,
                staged,
                parent_off,
                &mut parent,
                &old,
                right,
                mid_child,
                up_key,
            )?;
            carry = (up_key, sibling);
        }
        // The root split: a new root above it, swapped in by one 8-byte store.
        let old_root = path[0];
        let level = self.pool().load_u64(old_root + LEVEL)? + 1;
        let new_root = tx.alloc(self.node_size)?.offset();
        let image = NodeImage {
            level,
            sibling: 0,
            leftmost: old_root,
            high: EMPTY_KEY,
            entries: vec![carry],
        };
        staged.push((new_root, node_bytes(self.node_size, &image)));
        staged.push((self.meta + META_ROOT, new_root.to_le_bytes().to_vec()));
        Ok(())
    }

    /// FAIR's split of `node` (at `offset`) whose upper part is `right` (with `leftmost` for an
    /// internal node) and whose new high key is `separator`: the sibling written in full, then
    /// linked, then the old node truncated. Returns the sibling.
    #[allow(clippy::too_many_arguments)]
    fn split_node(
        &self,
        tx: &Tx<'_, B>,
        staged: &mut Staged,
        offset: u64,
        node: &mut NodeImage,
        old: &[(u64, u64)],
        right: Vec<(u64, u64)>,
        leftmost: u64,
        separator: u64,
    ) -> Result<u64, FastFairError> {
        let sibling = tx.alloc(self.node_size)?.offset();
        let image = NodeImage {
            level: node.level,
            sibling: node.sibling,
            leftmost,
            high: node.high,
            entries: right,
        };
        staged.push((sibling, node_bytes(self.node_size, &image)));
        staged.push((offset + HIGH, separator.to_le_bytes().to_vec()));
        staged.push((offset + SIBLING, sibling.to_le_bytes().to_vec()));
        node.sibling = sibling;
        node.high = separator;
        staged.extend(changed_entries(offset, old, &node.entries));
        Ok(sibling)
    }

    /// Move one entry into the underfull `node` (child `index` of `parent`) from its right
    /// neighbour, or its left one if it is the last child, rotating the separator.
    fn borrow(
        &self,
        tx: &Tx<'_, B>,
        offset: u64,
        mut node: NodeImage,
        parent_off: u64,
        parent: &mut NodeImage,
        index: usize,
    ) -> Result<(), FastFairError> {
        let children = parent.entries.len() + 1;
        if index + 1 < children {
            let right_off = Self::child_at(parent, index + 1);
            let mut right = self.read_node(right_off)?;
            let separator = parent.entries[index].0;
            let new_separator = if node.level == 0 {
                node.entries.push(right.entries.remove(0));
                right.entries[0].0
            } else {
                node.entries.push((separator, right.leftmost));
                let (k, child) = right.entries.remove(0);
                right.leftmost = child;
                k
            };
            node.high = new_separator;
            parent.entries[index].0 = new_separator;
            self.write_node(tx, right_off, &right)?;
        } else {
            let left_off = Self::child_at(parent, index - 1);
            let mut left = self.read_node(left_off)?;
            let separator = parent.entries[index - 1].0;
            let (k, v) = left
                .entries
                .pop()
                .expect("a neighbour too full to merge is not empty");
            if node.level == 0 {
                node.entries.insert(0, (k, v));
            } else {
                node.entries.insert(0, (separator, node.leftmost));
                node.leftmost = v;
            }
            left.high = k;
            parent.entries[index - 1].0 = k;
            self.write_node(tx, left_off, &left)?;
        }
        self.write_node(tx, offset, &node)?;
        self.write_node(tx, parent_off, parent)?;
        Ok(())
    }

    /// Index of `child` among `parent`'s children: 0 for the leftmost, `i + 1` for entry `i`.
    fn child_index(&self, parent: &NodeImage, child: u64) -> Option<usize> {
        if parent.leftmost == child {
            return Some(0);
        }
        parent
            .entries
            .iter()
            .position(|&(_, c)| c == child)
            .map(|i| i + 1)
    }

    fn child_at(parent: &NodeImage, index: usize) -> u64 {
        if index == 0 {
            parent.leftmost
        } else {
            parent.entries[index - 1].1
        }
    }

    /// Remove `key` from the leaf at the end of `path`, merging underfull nodes with a
    /// neighbour (or borrowing from one) upward and collapsing a root left with one child: one
    /// transaction.
    fn remove_and_merge(&self, path: &[u64], key: u64) -> Result<(), FastFairError> {
        self.with_structure_versioned(|| {
            self.with_nodes_versioned(path, || {
                self.heap.transaction(|tx| self.merge_in_tx(tx, path, key))
            })
        })
    }

    fn merge_in_tx(&self, tx: &Tx<'_, B>, path: &[u64], key: u64) -> Result<(), FastFairError> {
        let mut level = path.len() - 1;
        let mut offset = path[level];
        let mut node = self.read_node(offset)?;
        node.entries.retain(|&(k, _)| k != key);
        loop {
            if level == 0 {
                // The root: collapse it while it is internal with a single child.
                self.write_node(tx, offset, &node)?;
                let mut root = offset;
                let mut image = node;
                while image.level > 0 && image.entries.is_empty() {
                    let child = image.leftmost;
                    tx.write_value(self.meta + META_ROOT, &child)?;
                    tx.free(PPtr::<u8>::new(root))?;
                    root = child;
                    image = self.read_node(child)?;
                }
                return Ok(());
            }
            if node.entries.len() >= self.min_fill() {
                self.write_node(tx, offset, &node)?;
                return Ok(());
            }
            let parent_off = path[level - 1];
            let mut parent = self.read_node(parent_off)?;
            let Some(index) = self.child_index(&parent, offset) else {
                return Err(self.corrupt(format!("node {offset:#x} is not a child of its parent")));
            };
            let children = parent.entries.len() + 1;
            // Try the right neighbour, then the left one.
            let mut merged = false;
            for (left_index, right_index) in [(index, index + 1), (index.wrapping_sub(1), index)] {
                if right_index >= children || left_index >= children {
                    continue;
                }
                let left_off = Self::child_at(&parent, left_index);
                let right_off = Self::child_at(&parent, right_index);
                let (mut left, right) = if left_off == offset {
                    (node.clone(), self.read_node(right_off)?)
                } else {
                    (self.read_node(left_off)?, node.clone())
                };
                let separator = parent.entries[right_index - 1].0;
                let mut combined = left.entries.clone();
                if left.level > 0 {
                    combined.push((separator, right.leftmost));
                }
                combined.extend_from_slice(&right.entries);
                if combined.len() > self.capacity {
                    continue;
                }
                left.entries = combined;
                left.sibling = right.sibling;
                left.high = right.high;
                self.write_node(tx, left_off, &left)?;
                tx.free(PPtr::<u8>::new(right_off))?;
                parent.entries.remove(right_index - 1);
                merged = true;
                break;
            }
            if !merged {
                // No neighbour has room for both: take one entry from a neighbour through the
                // parent instead, so no node stays underfull (and no internal node childless).
                if children > 1 {
                    self.borrow(tx, offset, node, parent_off, &mut parent, index)?;
                } else {
                    self.write_node(tx, offset, &node)?;
                }
                return Ok(());
            }
            level -= 1;
            offset = parent_off;
            node = parent;
        }
    }

    // ------------------------------------------------------------------ recovery and checks

    /// Walk every level; check each node; rewrite a node holding a transient duplicate.
    /// Returns the number of keys.
    fn check_and_repair(&self) -> Result<u64, FastFairError> {
        let root = self.root_node()?;
        let mut keys = 0;
        self.walk(root, |offset, raw_len, image| {
            if image.entries.len() != raw_len {
                // An interrupted shift left a duplicate: keep the right copy, durably.
                self.heap.transaction(|tx| {
                    tx.write(
                        offset + HEADER,
                        &entry_bytes(self.node_size, &image.entries),
                    )
                })?;
            }
            if image.level == 0 {
                keys += image.entries.len() as u64;
            }
            Ok(())
        })?;
        Ok(keys)
    }

    /// Visit every node level by level along the sibling links, checking it; `visit` gets the
    /// offset, the number of used slots as stored, and the node with duplicates dropped.
    /// Returns every node's offset.
    fn walk(
        &self,
        root: u64,
        mut visit: impl FnMut(u64, usize, &NodeImage) -> Result<(), FastFairError>,
    ) -> Result<Vec<u64>, FastFairError> {
        let pool = self.pool();
        let limit = self.step_limit();
        let mut all = Vec::new();
        let mut first = root;
        let mut level = pool.load_u64(root + LEVEL)?;
        if level > 64 {
            return Err(self.corrupt(format!("root level {level}")));
        }
        loop {
            let mut node = first;
            let mut previous_high = None;
            let mut next_first = 0;
            while node != 0 {
                if all.len() as u64 > limit {
                    return Err(self.corrupt("the sibling links form a cycle".into()));
                }
                if self
                    .heap
                    .block_size(node)
                    .is_none_or(|size| size < self.node_size)
                {
                    return Err(self.corrupt(format!("node {node:#x} is not an allocated node")));
                }
                if pool.load_u64(node + TAG)? != NODE_TAG {
                    return Err(self.corrupt(format!("node {node:#x} has no node tag")));
                }
                let image = self.read_node(node)?;
                if image.level != level {
                    return Err(self.corrupt(format!(
                        "node {node:#x} has level {} on level {level}",
                        image.level
                    )));
                }
                let raw_len = self.count(node)?;
                for slot in raw_len..self.capacity {
                    if self.key_at(node, slot)? != EMPTY_KEY {
                        return Err(self.corrupt(format!("node {node:#x} has a gap")));
                    }
                }
                let sorted = image.entries.windows(2).all(|w| w[0].0 < w[1].0);
                let low = previous_high.unwrap_or(0);
                let bounded = image
                    .entries
                    .iter()
                    .all(|&(k, _)| k >= low && k < image.high);
                if !sorted || !bounded {
                    return Err(self.corrupt(format!(
                        "node {node:#x} keys are unsorted or outside their bounds"
                    )));
                }
                if level > 0 && next_first == 0 {
                    next_first = image.leftmost;
                }
                visit(node, raw_len, &image)?;
                all.push(node);
                previous_high = Some(image.high);
                node = image.sibling;
            }
            if previous_high != Some(EMPTY_KEY) {
                return Err(self.corrupt(format!("level {level} does not end at the top key")));
            }
            if level == 0 {
                return Ok(all);
            }
            if next_first == 0 {
                return Err(self.corrupt(format!("level {level} has no leftmost child")));
            }
            first = next_first;
            level -= 1;
        }
    }

    /// Every block the tree owns (the redo area and every node), sorted, for heap checks.
    pub fn blocks(&self) -> Result<Vec<u64>, FastFairError> {
        let _all = self.exclusive();
        let mut out = self.walk(self.root_node()?, |_, _, _| Ok(()))?;
        out.push(self.redo);
        out.sort_unstable();
        Ok(out)
    }

    /// Check the whole tree (levels, links, key order and bounds, that every child pointer
    /// names the next level's node) and return the number of keys.
    pub fn check(&self) -> Result<u64, FastFairError> {
        let _all = self.exclusive();
        let mut keys = 0;
        let mut children: Vec<Vec<u64>> = Vec::new();
        let mut chains: Vec<Vec<u64>> = Vec::new();
        let root = self.root_node()?;
        let top = self.pool().load_u64(root + LEVEL)? as usize;
        children.resize(top + 1, Vec::new());
        chains.resize(top + 1, Vec::new());
        self.walk(root, |offset, raw_len, image| {
            if raw_len != image.entries.len() {
                return Err(self.corrupt(format!("node {offset:#x} holds a duplicate")));
            }
            let level = image.level as usize;
            chains[level].push(offset);
            if level > 0 {
                children[level - 1].push(image.leftmost);
                children[level - 1].extend(image.entries.iter().map(|&(_, c)| c));
            } else {
                keys += image.entries.len() as u64;
            }
            Ok(())
        })?;
        for level in 0..top {
            if children[level] != chains[level] {
                return Err(self.corrupt(format!(
                    "level {level}: the parents' children are not the sibling chain"
                )));
            }
        }
        if keys != self.len() {
            return Err(self.corrupt(format!("{keys} keys, len says {}", self.len())));
        }
        Ok(keys)
    }
}

/// An iterator over the pairs of a key range, in key order (see [`FastFair::range`]).
pub struct Range<'t, 'h, B: Backend, P: Deref<Target = Pool<B>>> {
    tree: &'t FastFair<'h, B, P>,
    /// The smallest key not yet returned, `None` when done.
    resume: Option<u64>,
    end: Bound<u64>,
    /// The next leaf along the sibling link and the structure version it was read under.
    hop: Option<(u64, u64)>,
    buf: Vec<(u64, u64)>,
    /// A leaf's entry bytes, reused from leaf to leaf.
    raw: Vec<u8>,
    pos: usize,
    failed: bool,
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Range<'_, '_, B, P> {
    fn in_end(&self, key: u64) -> bool {
        match self.end {
            Bound::Included(e) => key <= e,
            Bound::Excluded(e) => key < e,
            Bound::Unbounded => true,
        }
    }

    /// Read the next leaf with keys in range into `buf`.
    fn refill(&mut self) -> Result<(), FastFairError> {
        let tree = self.tree;
        let mut steps = 0;
        while let Some(from) = self.resume {
            if !self.in_end(from) {
                self.resume = None;
                break;
            }
            steps += 1;
            if steps > tree.step_limit() * 4 {
                return Err(tree.corrupt(format!("a scan from {from} does not end")));
            }
            // Follow the sibling link if no merge ran since it was read, else descend again.
            let (leaf, structure) = match self.hop.take() {
                Some((next, seen))
                    if next != 0 && FastFair::<B, P>::read_valid(&tree.structure_version, seen) =>
                {
                    (next, seen)
                }
                _ => tree.lock_free_leaf(from)?,
            };
            self.buf.clear();
            self.pos = 0;
            let read = tree.read_leaf_from(leaf, from, &mut self.raw, &mut self.buf)?;
            if !FastFair::<B, P>::read_valid(&tree.structure_version, structure) {
                self.buf.clear();
                continue;
            }
            let Some((high, sibling)) = read else {
                // Changed under us: read it again from a fresh descent.
                self.buf.clear();
                continue;
            };
            if from >= high {
                // The leaf split after we found it: its upper keys are to the right.
                self.buf.clear();
                self.hop = Some((sibling, structure));
                continue;
            }
            let end = self.end;
            self.buf.retain(|&(k, _)| match end {
                Bound::Included(e) => k <= e,
                Bound::Excluded(e) => k < e,
                Bound::Unbounded => true,
            });
            self.resume = (high != EMPTY_KEY).then_some(high);
            self.hop = Some((sibling, structure));
            if !self.buf.is_empty() {
                break;
            }
        }
        Ok(())
    }
}

impl<B: Backend, P: Deref<Target = Pool<B>>> Iterator for Range<'_, '_, B, P> {
    type Item = Result<(u64, u64), FastFairError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.pos >= self.buf.len() {
            if let Err(e) = self.refill() {
                self.failed = true;
                return Some(Err(e));
            }
        }
        let item = self.buf.get(self.pos).copied()?;
        self.pos += 1;
        Some(Ok(item))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pmem_ordering::{Hardware, PoolOptions};
    use pmem_undo_log::{FencePolicy, HeapConfig};

    use super::*;

    fn heap() -> Heap<Hardware, Arc<Pool>> {
        let pool = Pool::anonymous("fastfair-unit", 4 << 20, &PoolOptions::new()).unwrap();
        let config = HeapConfig {
            lanes: 1,
            lane_log_bytes: 16 << 10,
            chunk_size: 4096,
        };
        Heap::create(Arc::new(pool), config, FencePolicy::Batched).unwrap()
    }

    /// A reader that reached a leaf before it split (through a parent read earlier) finds the
    /// keys that moved right by following the sibling link on the high key.
    #[test]
    fn a_stale_leaf_sends_a_reader_to_its_sibling() {
        let heap = heap();
        let config = FastFairConfig {
            node_size: 128,
            policy: ShiftPolicy::Fast,
        };
        let tree = FastFair::create(&heap, heap.pool().root_offset(), config).unwrap();
        for k in 0..4 {
            tree.insert(k * 10, k).unwrap();
        }
        // The single leaf a reader would have found before the split.
        let leaf = tree.root_node().unwrap();
        tree.insert(35, 99).unwrap();
        assert_eq!(tree.height().unwrap(), 2, "the leaf split");
        let sibling = heap.pool().load_u64(leaf + SIBLING).unwrap();
        assert_ne!(sibling, 0);
        match tree.step(leaf, 35).unwrap() {
            Step::Right(next) => assert_eq!(next, sibling),
            _ => panic!("a key above the high key must go right"),
        }
        assert!(matches!(
            tree.step(sibling, 35).unwrap(),
            Step::Leaf(Some(99))
        ));
        assert!(matches!(tree.step(leaf, 0).unwrap(), Step::Leaf(Some(0))));
    }

    /// Two equal neighbouring keys (an interrupted shift): readers take the right copy, and
    /// open rewrites the node without the duplicate.
    #[test]
    fn a_transient_duplicate_is_read_right_and_repaired_at_open() {
        let heap = heap();
        let root = heap.pool().root_offset();
        let tree = FastFair::create(&heap, root, FastFairConfig::default()).unwrap();
        for k in [10, 20, 30] {
            tree.insert(k, k).unwrap();
        }
        let leaf = tree.root_node().unwrap();
        // The state an insert of 15 leaves after moving 20 and 30 right and storing the new
        // value at slot 1 but not yet its key: slot 1 pairs key 20 with the new value.
        let pool = heap.pool();
        let image: [u64; 8] = [10, 10, 20, 1500, 20, 20, 30, 30];
        for (i, w) in image.iter().enumerate() {
            let _ = pool.persist(
                pool.store_u64(entry_offset(leaf, 0) + 8 * i as u64, *w)
                    .unwrap(),
            );
        }
        // A lock-free reader resolves the duplicate without any repair.
        assert_eq!(tree.get(20).unwrap(), Some(20));
        assert_eq!(tree.get(15).unwrap(), None);
        let pairs: Vec<(u64, u64)> = tree.range(..).collect::<Result<_, _>>().unwrap();
        assert_eq!(pairs, vec![(10, 10), (20, 20), (30, 30)]);
        drop(tree);
        let reopened = FastFair::open(&heap, root).unwrap();
        assert_eq!(reopened.len(), 3);
        assert_eq!(reopened.get(20).unwrap(), Some(20));
        assert_eq!(reopened.check().unwrap(), 3);
        assert_eq!(
            reopened.count(leaf).unwrap(),
            3,
            "open removed the duplicate"
        );
    }

    #[test]
    fn damaged_nodes_and_redo_slots_are_refused() {
        let heap = heap();
        let root = heap.pool().root_offset();
        let tree = FastFair::create(&heap, root, FastFairConfig::default()).unwrap();
        for k in [10, 20, 30] {
            tree.insert(k, k).unwrap();
        }
        let leaf = tree.root_node().unwrap();
        let redo = tree.redo;
        drop(tree);
        let pool = heap.pool();
        let poke = |offset: u64, value: u64| {
            let old = pool.load_u64(offset).unwrap();
            let _ = pool.persist(pool.store_u64(offset, value).unwrap());
            old
        };
        let expect_corrupt = |what: &str| match FastFair::open(&heap, root) {
            Err(FastFairError::Corrupt { reason, .. }) => reason,
            other => panic!("{what}: expected Corrupt, got {:?}", other.map(|t| t.len())),
        };
        let tag = poke(leaf + TAG, 0);
        assert!(expect_corrupt("tag").contains("tag"));
        poke(leaf + TAG, tag);
        let key = poke(entry_offset(leaf, 0), 25);
        assert!(expect_corrupt("order").contains("unsorted"));
        poke(entry_offset(leaf, 0), key);
        // A committed redo slot whose target lies outside the pool.
        let commit = redo + LINE;
        poke(commit, (pool.size() << 7) | 16);
        assert!(expect_corrupt("redo").contains("redo lane 0"));
        poke(commit, 0);
        assert_eq!(FastFair::open(&heap, root).unwrap().len(), 3);
    }
}
