//! What the hook tests share: small trees on simulated pools, and the fake allocation bits a
//! hook stores and flushes, as the crate's byte-key maps do for their records.

use std::collections::BTreeMap;
use std::sync::Arc;

use pmem_ordering::sim::{Event, SimBackend, SimConfig};
use pmem_ordering::{thread_stats, Pool};
use pmem_undo_log::{FencePolicy, Heap, HeapConfig};

use crate::fastfair::{FastFair, FastFairConfig, FastFairError, ShiftPolicy, ROOT_BYTES};

/// Bytes of each simulated pool.
pub(super) const POOL_BYTES: u64 = 512 << 10;
/// Bytes of the pool's root area: the tree's root object, then the bits.
pub(super) const ROOT_AREA: u64 = 1024;
/// The pools' layout name.
pub(super) const LAYOUT: &str = "fastfair-hook";
/// The smallest node (4 entries), so a handful of keys splits and merges.
pub(super) const NODE_BYTES: u64 = 128;

/// A tree on a simulated pool.
pub(super) type SimTree = FastFair<SimBackend>;
/// A heap on a simulated pool.
pub(super) type SimHeap = Heap<SimBackend>;

/// A fresh simulated pool (x86 persistency, whole lines).
pub(super) fn sim_pool() -> Arc<Pool<SimBackend>> {
    Pool::simulated(LAYOUT, POOL_BYTES, ROOT_AREA, SimConfig::x86())
        .map(Arc::new)
        .expect("a simulated pool")
}

/// A fresh heap on `pool`, with batched fences as the benchmarks use.
pub(super) fn sim_heap(pool: &Arc<Pool<SimBackend>>) -> SimHeap {
    let config = HeapConfig {
        lanes: 1,
        lane_log_bytes: 16 << 10,
        chunk_size: 4096,
    };
    Heap::create(pool.clone(), config, FencePolicy::Batched).expect("a heap on the simulated pool")
}

/// A fresh tree of 128-byte nodes under `policy` at the pool's root.
pub(super) fn small_tree(heap: &SimHeap, policy: ShiftPolicy) -> SimTree {
    tree_of(heap, policy, NODE_BYTES)
}

/// A fresh tree of `node_size`-byte nodes under `policy` at the pool's root.
pub(super) fn tree_of(heap: &SimHeap, policy: ShiftPolicy, node_size: u64) -> SimTree {
    let config = FastFairConfig { node_size, policy };
    FastFair::create(heap, heap.pool().root_offset(), config).expect("a tree")
}

/// The tree's pairs in key order.
pub(super) fn contents(tree: &SimTree) -> BTreeMap<u64, u64> {
    tree.iter()
        .collect::<Result<_, _>>()
        .expect("a scan of the tree")
}

/// Fences this thread issues while `f` runs (the pool counters the simulator keeps too).
pub(super) fn fences_of<R>(f: impl FnOnce() -> R) -> (R, u64) {
    let before = thread_stats().fences;
    let result = f();
    (result, thread_stats().fences - before)
}

/// Whether `event` is a store (temporal or not) of the simulated pool.
pub(super) fn is_store(event: &Event) -> bool {
    matches!(event, Event::Store { .. } | Event::NtStore { .. })
}

/// The fake allocation bits: one word per record id in the pool's root area after the tree's
/// root object, lines no tree node shares. A hook sets or clears one with a store and a flush
/// and no fence, as the byte-key maps do; the operation's own last fence must make it durable.
#[derive(Clone, Copy)]
pub(super) struct Bits<'p> {
    pool: &'p Pool<SimBackend>,
}

impl<'p> Bits<'p> {
    /// The largest record id with a word.
    pub(super) const MAX_RECORD: u64 = (ROOT_AREA - ROOT_BYTES) / 8 - 1;

    /// The bits of `pool`.
    pub(super) fn new(pool: &'p Pool<SimBackend>) -> Bits<'p> {
        Bits { pool }
    }

    /// The offset of `record`'s word.
    pub(super) fn offset(pool: &Pool<SimBackend>, record: u64) -> u64 {
        assert!(
            record <= Self::MAX_RECORD,
            "record {record} has no bit word"
        );
        pool.root_offset() + ROOT_BYTES + 8 * record
    }

    /// Set or clear `record`'s bit: a store and a flush, no fence.
    pub(super) fn mark(self, record: u64, on: bool) {
        let w = self
            .pool
            .store_u64(Self::offset(self.pool, record), u64::from(on))
            .expect("the bit word is in the pool");
        let _ = self.pool.flush(w);
    }

    /// Set or clear `record`'s bit and make it durable (test set-up).
    pub(super) fn mark_durably(self, record: u64, on: bool) {
        let w = self
            .pool
            .store_u64(Self::offset(self.pool, record), u64::from(on))
            .expect("the bit word is in the pool");
        self.pool.persist(w);
    }

    /// `record`'s bit in the image a crash right now would leave if nothing pending persisted.
    pub(super) fn durable(self, record: u64) -> bool {
        let at = Self::offset(self.pool, record) as usize;
        let image = self.pool.sim().persisted_image();
        let word: [u8; 8] = image[at..at + 8].try_into().expect("eight bytes");
        u64::from_le_bytes(word) != 0
    }

    /// `record`'s bit as `pool` (e.g. a crash image) holds it.
    pub(super) fn read(pool: &Pool<SimBackend>, record: u64) -> Result<bool, String> {
        let word = pool
            .load_u64(Self::offset(pool, record))
            .map_err(|e| format!("reading the bit of record {record}: {e}"))?;
        Ok(word != 0)
    }

    /// The hook of a put of `record`: set its bit, and clear the bit of the record it replaces.
    pub(super) fn put_hook(
        self,
        record: u64,
    ) -> impl FnOnce(Option<u64>) -> Result<(), FastFairError> + 'p {
        move |old| {
            self.mark(record, true);
            if let Some(old) = old {
                self.mark(old, false);
            }
            Ok(())
        }
    }

    /// The hook of a remove: clear the bit of the removed record.
    pub(super) fn remove_hook(self) -> impl FnOnce(u64) -> Result<(), FastFairError> + 'p {
        move |old| {
            self.mark(old, false);
            Ok(())
        }
    }
}
