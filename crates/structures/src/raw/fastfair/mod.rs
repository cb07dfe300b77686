//! FAST&FAIR: a persistent B+-tree with sorted nodes, in-place shifts and lock-free readers
//! (FAST'18 FAST&FAIR, Sec. 3-4), with the three shift policies compared in Optane buffering
//! (EuroSys'22), Sec. 4.2.
//!
//! # Where things are
//!
//! | file | what it owns |
//! |---|---|
//! | `mod.rs` | the public types, create and the small accessors |
//! | `layout.rs` | the on-media format: every offset of the root object, nodes and redo lanes |
//! | `search.rs` | lock-free descents and lookups, validated by versions; in-node binary search |
//! | `range.rs` | range scans along the sibling links |
//! | `write.rs` | insert, upsert and remove in one leaf under its stripe lock |
//! | `locks.rs` | finding and locking a writer's leaf; locking and checking a split's or merge's path; versions |
//! | `shift.rs` | FAST in-place shifts and the per-shift baseline: how a shift is made durable |
//! | `redo.rs` | redo-logged shifts: log, commit, apply, clear; replay at open |
//! | `split.rs` | FAIR splits up to a new root: how a split is made crash-safe |
//! | `merge.rs` | merges, borrows and root collapse: how a merge is made crash-safe |
//! | `batch.rs` | a store write batch's changes: leaf images planned, room made by splits first, applied under the leaf's lock |
//! | `recovery.rs` | open: root object checks, redo replay, duplicate repair, key count |
//! | `check.rs` | the level-by-level walk and the whole-tree checks built on it |
//! | `verify.rs` | [`FastFair::verify`]: every node walked read-only, every violation listed as a typed finding |
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
//! # Shifts without a split (FAST, Optane buffering (EuroSys'22), Sec. 4.2)
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
//! * [`ShiftPolicy::PerShift`]: a flush and a fence after each moved entry, the baseline of
//!   Optane buffering (EuroSys'22), Sec. 4.2 (one flush and one fence per shifted key, plus one
//!   for the new entry);
//! * [`ShiftPolicy::Fast`]: stores in place, a flush and a fence only when the shift leaves a
//!   cache line (and at the end). Correct because stores to one line persist in program order
//!   (Themis, Sec. II-C): a line that persists early carries a prefix of its stores. Under the
//!   simulator's torn-line mode this does not hold and FAST loses data: the crash tests show it;
//! * [`ShiftPolicy::Redo`]: for each cache line the shift touches (in the same order), the
//!   line's new bytes are computed in DRAM, written to the writer's redo lane and persisted, then
//!   committed by one 8-byte store of the target address and length, persisted; then the line is
//!   written in place from the DRAM copy and persisted, and the commit word is cleared
//!   (Optane buffering (EuroSys'22), Sec. 4.2). No line is read right after it was persisted,
//!   which per-shift does for every entry it moves within a line: that read-after-persist delay
//!   of first-generation Optane (Optane buffering (EuroSys'22), Sec. 3.5) is what the redo log
//!   avoids. A lane has two slots used in turn, so a slot's clear is made durable by the fence
//!   of the next line's log write instead of a fence of its own. [`FastFair::open`] replays
//!   committed slots and ignores the rest. Per line: 4 flushes and 3 fences, plus one fence at
//!   the end.
//!
//! # Splits, merges and the root (FAIR)
//!
//! A full leaf splits, an underfull one (below a third of its slots) merges with a neighbour
//! under the same parent if the two fit in one node, else borrows an entry from it; the root
//! grows when it splits and shrinks when it is left with one child. Each of these runs as **one
//! undo-log transaction** of the [`Heap`], which also allocates and frees the nodes: a crash at
//! any point rolls the whole change back at [`Heap::open`], so no node leaks, none is freed
//! twice, and the root pointer, the sibling links and the parents always agree after recovery.
//! Inside the transaction the stores follow FAIR's order, for the sake of lock-free readers: the
//! new sibling is written in full, then linked from the old node with its high key, then the old
//! node is truncated, then the parent is updated, up to a new root swapped in by one 8-byte
//! store of the root pointer. Only the entries that change are written (and so logged and
//! flushed). A split logs every range it will write before writing any, so its log entries
//! share one fence. The published implementation had crash-consistency bugs exactly here
//! (unpersisted new nodes, non-atomic root changes, no recovery); the transaction makes these
//! steps all-or-nothing instead of relying on a repair pass.
//!
//! # Recovery ([`FastFair::open`])
//!
//! The heap has already rolled back any interrupted split or merge. Open then replays committed
//! redo slots, walks every level along the sibling links, checks each node (an allocated block,
//! tagged, of the right level, sorted keys) and rewrites, in a small transaction, any node that
//! still holds a transient duplicate from an interrupted shift, keeping the right copy. So a
//! crash mid-shift leaves the operation either done or not done.
//!
//! # Integrity
//!
//! Entries hold their key and value inline, 8 bytes each, with no checksum: a bit flipped in a
//! **value** by the medium is **not detected**, and neither is a flipped key that keeps its
//! node sorted and inside its bounds. [`FastFair::open`] checks the shape (allocated, tagged
//! nodes of the right level, sorted keys inside their bounds, no gaps, no sibling cycle) and
//! reports what breaks it as [`FastFairError::Corrupt`]; lookups and scans trust what they read. A
//! checksum per node line would cost a slot of each 64-byte line (a fourth fewer entries per
//! node) or one more line written and flushed per line a shift touches, and FAST's in-place
//! shifts, which persist a line only when they leave it, would leave the checksum stale in
//! every crash image taken mid-line, so recovery would have to tell a crash from damage.
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
//!   parallel; the stripe's index is also the writer's redo lane.
//! * **Splits and merges lock only the nodes they change** (FAST'18 FAST&FAIR, Sec. 4), so
//!   writers of other leaves go on meanwhile. A writer whose leaf is full lets its stripe go,
//!   finds the path again without a lock, and locks the stripes of the nodes the split changes:
//!   the leaf, the full ancestors that split with it, and the one above them that takes the
//!   last separator (or the root). New nodes need no lock: nothing reaches them before the
//!   split links them, under the stripes it holds. A merge first plans itself without locks,
//!   from node images each read whole, to learn which nodes it reads (the leaf, its neighbours,
//!   the parents up to where it stops, the root's child when the root collapses), and locks
//!   those. Either then checks its path under the locks (same structure version, each node at
//!   its level with the key below its high key and routing it to the next, the root unchanged
//!   if the change reaches it), and, for a split, that the split still stops within the locked
//!   nodes; a merge plans again under the locks and must read only locked nodes. If anything
//!   moved, it lets go and starts again. Stripes are taken in index order by a writer holding
//!   none, and a plain writer holds one, so no cycle of waiters forms (`locks.rs`).
//! * **The structure version** is made odd by every merge (it frees nodes and moves keys left,
//!   which readers following right links cannot see) and every root change (a root split or
//!   collapse), and its odd value is also the lock that runs one such change at a time: the
//!   root pointer changes only under it and the old root's stripe. It is taken after the
//!   stripes. Readers and writers that found a node before a merge freed it restart, or, for a
//!   writer, fail the check under its lock, so none writes into a freed block. A split below
//!   the root leaves it alone: readers see it through the stripe versions of the nodes it
//!   changes, marked while it runs.
//! * **Transactions of the heap run at once on different lanes** ([`Heap::transaction`] hands
//!   each a lane of its own, waiting only while all are taken): splits and merges of disjoint
//!   nodes run their transactions in parallel, each writing only nodes it holds, so their undo
//!   logs never cover the same bytes. What the heap serialises is its allocator: reservations
//!   under a short DRAM lock, and the commit of a transaction that allocated or freed (every
//!   split and merge) under that lock from publishing its block words until it is durable.
//!   So the commits of concurrent splits take turns, while plain inserts and removes, which
//!   use no transaction, go on.
//! * The locks live in DRAM only: a crash cannot leave one held. The locks and versions are the
//!   crate's shared ones (`sync`).

use std::fmt;

use pmem_ordering::{Backend, Pool, PoolError};
use pmem_undo_log::{Heap, TxError};

use crate::kind::{describe_magic, StructureKind};
use crate::sync::{SeqVersion, Stripes};
use crate::u64map::ReservedKey;

mod batch;
mod check;
#[cfg(test)]
mod hook_tests;
mod layout;
mod locks;
mod merge;
mod range;
mod recovery;
mod redo;
mod search;
mod shift;
mod split;
#[cfg(test)]
mod test_interleaving;
mod verify;
mod write;
#[cfg(test)]
mod writer_interleave_tests;

use layout::{NodeImage, NodeShape, NodeView, RedoArea, RootFields, RootObject};

pub(crate) use batch::{KeyChange, LeafImage};
pub use range::Range;

/// The reserved key that marks a free slot; it sorts after every valid key.
pub const EMPTY_KEY: u64 = u64::MAX;
/// The refusal of [`EMPTY_KEY`] ([`FastFairError::ReservedKey`]).
const RESERVED: ReservedKey = ReservedKey {
    key: EMPTY_KEY,
    reason: "a FAST&FAIR B+-tree marks its free slots with key u64::MAX",
};
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

/// How an in-node shift is made durable (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShiftPolicy {
    /// A flush and a fence after every moved entry (the baseline of Optane buffering
    /// (EuroSys'22), Sec. 4.2).
    PerShift,
    /// FAST: a flush and a fence only when the shift crosses a cache line.
    Fast,
    /// Out-of-place: each touched line is redo-logged, committed, then applied (Optane
    /// buffering (EuroSys'22), Sec. 4.2).
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

    /// The policy's code in the root object.
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
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum FastFairError {
    /// `u64::MAX` ([`EMPTY_KEY`]) is reserved: it marks a free slot.
    #[error(transparent)]
    ReservedKey(ReservedKey),
    /// A transaction of a split or merge, or an access of the pool, failed.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// [`FastFair::create`] on a root that is in use (its magic word is not zero):
    /// nothing was written, the root's contents are intact.
    #[error(
        "root {root:#x} already holds {found}: open it, or create the tree at an unused \
         (all-zero) root"
    )]
    AlreadyExists {
        /// The root offset.
        root: u64,
        /// What the root holds, in words ([`crate::kind::describe_magic`]).
        found: String,
    },
    /// [`FastFair::open`] on a root that holds something else (another kind of
    /// structure, nothing, or an unknown magic, printed as text).
    #[error("root {root:#x} holds {found}, not {}", StructureKind::BTreeMap.describe())]
    WrongKind {
        /// The root offset.
        root: u64,
        /// What the root holds, in words ([`crate::kind::describe_magic`]).
        found: String,
    },
    /// The tree at the root object is damaged.
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

/// The message, as `Display` prints it: readable where a `Debug` is shown, e.g. the error a
/// `main() -> Result<(), Box<dyn Error>>` returns.
impl fmt::Debug for FastFairError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
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

/// A FAST&FAIR B+-tree in a heap.
///
/// The handle holds its own clone of the heap (a [`Heap`] is a shared handle), so it is
/// `Send + Sync + 'static` and can live beside the heap or go to another thread.
///
/// Operations take `&self` and are safe to call from several threads: lookups and scans take
/// no lock, writers of different leaves run in parallel (see the module docs).
pub struct FastFair<B: Backend> {
    heap: Heap<B>,
    meta: RootObject,
    node_size: u64,
    /// Words and entries per node, for node views.
    shape: NodeShape,
    /// Entries per node.
    capacity: usize,
    /// Most nodes one descent can visit in a well-formed tree of this pool.
    step_limit: u64,
    policy: ShiftPolicy,
    redo: RedoArea,
    /// Odd while a merge or root change runs: lock-free descents restart across one. Also the
    /// lock that lets one such change run at a time.
    structure_version: SeqVersion,
    stripes: Stripes,
}

fn valid_node_size(size: u64) -> bool {
    size.is_power_of_two() && (MIN_NODE_SIZE..=MAX_NODE_SIZE).contains(&size)
}

/// The error for a root object offset that is not on a cache line.
fn misaligned_root(root: u64) -> FastFairError {
    FastFairError::InvalidConfig {
        reason: format!("root offset {root:#x} is not 64-byte aligned"),
    }
}

impl<B: Backend> FastFair<B> {
    /// Make an empty tree with its root object at `root` (64-byte aligned, [`ROOT_BYTES`]
    /// bytes), recording `config` there for [`FastFair::open`]. The root object, the redo area
    /// and the first leaf are written in one transaction. A root in use (a non-zero magic word)
    /// is refused with [`FastFairError::AlreadyExists`], and left as it is.
    pub fn create(
        heap: &Heap<B>,
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
        if !root.is_multiple_of(layout::LINE) {
            return Err(misaligned_root(root));
        }
        heap.pool().check_range(root, ROOT_BYTES)?;
        let magic = heap.pool().read::<u64>(root)?;
        if magic != 0 {
            return Err(FastFairError::AlreadyExists {
                root,
                found: describe_magic(magic),
            });
        }
        let node_size = config.node_size;
        let redo = heap.transaction(|tx| {
            let redo = tx.alloc(RedoArea::BYTES)?.offset();
            tx.write(redo, &vec![0u8; RedoArea::BYTES as usize])?;
            let leaf = tx.alloc(node_size)?.offset();
            let image = NodeImage {
                level: 0,
                sibling: 0,
                leftmost: 0,
                high: EMPTY_KEY,
                entries: Vec::new(),
            };
            tx.write(leaf, &image.bytes(node_size))?;
            let fields = RootFields {
                magic: layout::ROOT_MAGIC,
                version: layout::FORMAT_VERSION,
                node_size,
                policy: config.policy.code(),
                root_node: leaf,
                redo,
                lanes: LANES as u64,
            };
            tx.write(root, &fields.bytes())?;
            Ok::<_, TxError>(redo)
        })?;
        Ok(FastFair::handle(
            heap,
            root,
            node_size,
            config.policy,
            RedoArea(redo),
        ))
    }

    /// The DRAM handle of a tree whose root object is checked: no lock held, versions zero.
    fn handle(
        heap: &Heap<B>,
        meta: u64,
        node_size: u64,
        policy: ShiftPolicy,
        redo: RedoArea,
    ) -> Self {
        let step_limit = heap.pool().size() / node_size + 64;
        FastFair {
            heap: heap.clone(),
            meta: RootObject(meta),
            node_size,
            shape: NodeShape::of(node_size),
            capacity: layout::capacity(node_size),
            step_limit,
            policy,
            redo,
            structure_version: SeqVersion::new(),
            stripes: Stripes::new(LANES),
        }
    }

    /// The heap the tree lives in (through whatever holder it was given: a borrow, an
    /// `Arc`, ...).
    pub fn heap(&self) -> &Heap<B> {
        &self.heap
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

    /// Levels of the tree (1 for a single leaf).
    pub fn height(&self) -> Result<u64, FastFairError> {
        let root = self.root_node()?;
        Ok(layout::level_word(self.pool(), root)? + 1)
    }

    fn pool(&self) -> &Pool<B> {
        self.heap.pool()
    }

    fn corrupt(&self, reason: String) -> FastFairError {
        FastFairError::Corrupt {
            root: self.meta.0,
            reason,
        }
    }

    #[inline]
    fn root_node(&self) -> Result<u64, FastFairError> {
        Ok(self.meta.root_node(self.pool())?)
    }

    /// The words of `node`, bounds-checked once: every read of a node goes through this.
    #[inline]
    fn view(&self, node: u64) -> Result<NodeView<'_>, PoolError> {
        NodeView::new(self.pool(), node, self.shape)
    }

    /// Most nodes one descent can visit in a well-formed tree of this pool.
    fn step_limit(&self) -> u64 {
        self.step_limit
    }

    /// Fewest entries a node keeps before it tries to merge.
    fn min_fill(&self) -> usize {
        self.capacity.div_ceil(3)
    }
}

#[cfg(test)]
mod test_heap {
    //! A small anonymous heap for the unit tests of this module's files.

    use pmem_ordering::{Hardware, Pool, PoolOptions};
    use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

    pub(super) fn heap() -> Heap<Hardware> {
        // Miri interprets every byte the heap formats: its one test here needs only a few nodes.
        let size = if cfg!(miri) { 64 << 10 } else { 4 << 20 };
        let pool = Pool::anonymous("fastfair-unit", size, &PoolOptions::new()).unwrap();
        let config = HeapConfig {
            lanes: 1,
            lane_log_bytes: 16 << 10,
            chunk_size: 4096,
        };
        Heap::create(pool, config, FencePolicy::Batched).unwrap()
    }
}
