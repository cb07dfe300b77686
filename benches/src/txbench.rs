//! The transaction variants compared by `pmem-bench` and by the `undo_log` criterion bench.
//!
//! Three sections, each made of groups whose variants run side by side:
//!
//! * [`Section::TxWords`]: a transaction that snapshots K random words (one
//!   [`pmem_undo_log::Tx::snapshot_many`] batch), then writes them
//!   (K = 1, 2, 8, 32, 128), under the strict, batched and ideal fence policies. The K words are
//!   drawn one from each of K equal slices of a 64 Ki-word (512 KiB) array, so they are distinct.
//!   libpmemobj's figures for the same transaction are quoted in docs/results/README.md;
//! * [`Section::ThemisWorkloads`]: the workloads of Themis, Table II
//!   ([`pmem_themis_workloads`]), one transaction per operation, under the same three
//!   policies, and again with one and two threads under strict and batched ([`threads`]);
//! * [`Section::ObjectUpdate`]: an object replaced in place (snapshot + overwrite) or out of
//!   place (allocate, write, swing the pointer, free the old one), 64 B to 4 KiB, under the
//!   batched policy, round robin over [`OBJECTS`] objects.
//!
//! Every variant runs on its own heap, in its own fresh pool file (named after the variant, in
//! the run's pool directory, removed when the runner is dropped), so the variants of a group do
//! not share a heap and can be interleaved.
//!
//! The randomly accessed data (the word array, the SPS array, the TATP and TPCC tables) is kept
//! at 512 KiB or less, within a core's L2 cache: with megabytes of it, a cache and TLB miss per
//! word (hundreds of ns on a VM with nested paging) dominates every variant alike and hides the
//! persistence costs being compared.

use std::path::Path;

use pmem_ordering::{Granularity, PoolOptions};
use pmem_themis_workloads::cache::CacheShape;
use pmem_themis_workloads::tpcc::{LineInput, NewOrder, TpccConfig, MAX_LINES, MAX_QUANTITY};
use pmem_themis_workloads::{
    ChainedHashMap, CritBitTree, List, PersistentCache, Queue, RedBlackTree, Sps, Tatp, Tpcc,
};
use pmem_undo_log::{object, FencePolicy, Heap, HeapConfig, TxError, TxStats};

use crate::keys::{below, SplitMix64};
use crate::measure::Runner;
use crate::poolfile::{PoolFile, SetupError};
use crate::primitives::size_label;

pub mod threads;
mod variants;

pub use variants::{groups, variants, Section, TxVariant, Workload};

/// Size of each variant's pool.
pub const TX_POOL_SIZE: u64 = 32 << 20;
/// The K of [`Section::TxWords`].
pub const TX_WORDS: [u64; 5] = [1, 2, 8, 32, 128];
/// Words of the array the [`Section::TxWords`] transactions write.
pub const WORDS: u64 = 1 << 16;
/// The policies compared: the baseline, the batched fences, and no nt -> t fence at all.
pub const POLICIES: [FencePolicy; 3] = [
    FencePolicy::Strict,
    FencePolicy::Batched,
    FencePolicy::Ideal,
];
/// The object sizes of [`Section::ObjectUpdate`].
pub const OBJECT_SIZES: [u64; 4] = [64, 256, 1024, 4096];
/// Objects updated round robin in [`Section::ObjectUpdate`].
pub const OBJECTS: u64 = 256;
/// The policy of [`Section::ObjectUpdate`].
pub const OBJECT_POLICY: FencePolicy = FencePolicy::Batched;

/// Entries of the SPS array.
pub const SPS_LEN: u64 = 1 << 16;
/// Swaps per SPS transaction (2 logged stores each: Themis, Fig. 8 shows SPS transactions of
/// over a hundred stores).
pub const SPS_SWAPS: usize = 64;
/// Key range of the linked list; half of it is in the list at any time.
pub const LIST_KEYS: u64 = 256;
/// Key range of the hash map; half of it is in the map at any time.
pub const MAP_KEYS: u64 = 4096;
/// Buckets of the hash map.
pub const MAP_BUCKETS: u64 = 1024;
/// Values in the queue before the run (it stays within one of that).
pub const QUEUE_LEN: u64 = 1024;
/// Subscribers of the TATP table.
pub const TATP_SUBSCRIBERS: u64 = 8_000;
/// Key range of the crit-bit tree; half of it is in the tree at any time.
pub const CTREE_KEYS: u64 = 4096;
/// Key range of the red-black tree; half of it is in the tree at any time.
pub const RB_KEYS: u64 = 4096;
/// The persistent cache: 1024 sets of 4 ways of 64-byte values (8 words, each logged).
pub const PC_SHAPE: CacheShape = CacheShape {
    sets: 1024,
    ways: 4,
    value_words: 8,
};
/// Key range of the persistent cache: twice its entries, so updates overwrite and evict.
pub const PC_KEYS: u64 = 2 * 1024 * 4;

/// What a runner keeps between operations.
enum Driver {
    Words {
        array: u64,
        k: u64,
        picks: Vec<u64>,
        ranges: Vec<(u64, u64)>,
        value: u64,
    },
    Sps {
        pairs: Vec<(u64, u64)>,
    },
    List {
        present: Vec<bool>,
    },
    Hashmap {
        present: Vec<bool>,
    },
    Queue {
        next: u64,
        enqueue: bool,
    },
    Tatp,
    Tpcc {
        order: NewOrder,
    },
    CTree {
        present: Vec<bool>,
    },
    Rb {
        present: Vec<bool>,
    },
    Pc {
        value: Vec<u64>,
    },
    Object {
        out_of_place: bool,
        data: Vec<u8>,
        next: u64,
    },
}

/// A variant ready to run: its heap in its own pool file, its structure set up, its driver's
/// state.
pub struct TxRunner {
    variant: TxVariant,
    // Dropped before the file (fields drop in order).
    heap: Heap,
    root: u64,
    rng: SplitMix64,
    driver: Driver,
    file: PoolFile,
}

impl std::fmt::Debug for TxRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxRunner")
            .field("variant", &self.variant)
            .field("pool", &self.file.path())
            .finish()
    }
}

impl TxRunner {
    /// Create a fresh pool file for `variant` in `dir` (named `{prefix}-{variant}.pool`, removed
    /// when the runner is dropped), format a heap in it and set up the variant's structure.
    /// `granularity` is forced on the pool (`None`: detected).
    pub fn new(
        dir: &Path,
        prefix: &str,
        variant: TxVariant,
        granularity: Option<Granularity>,
    ) -> Result<TxRunner, SetupError> {
        let file = PoolFile::create(
            dir,
            &format!("{prefix}-{}.pool", variant.slug()),
            TX_POOL_SIZE,
            granularity,
        )?;
        let heap_err = |source: TxError| SetupError::Heap {
            path: file.path().to_path_buf(),
            source,
        };
        let pool = file.open(PoolOptions::new())?;
        let heap: Heap =
            Heap::create(pool, HeapConfig::default(), variant.policy()).map_err(heap_err)?;
        let root = heap.pool().root_offset();
        // One seed for all: the variants of a group make the same operations.
        let mut rng = SplitMix64::new(0x5EED);
        let driver = setup(&heap, root, variant, &mut rng).map_err(heap_err)?;
        Ok(TxRunner {
            variant,
            heap,
            root,
            rng,
            driver,
            file,
        })
    }

    /// The variant this runner runs.
    pub fn variant(&self) -> TxVariant {
        self.variant
    }

    /// The heap the runner's transactions run on.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// One operation: one transaction.
    pub fn step(&mut self) -> Result<(), TxError> {
        step(&self.heap, self.root, &mut self.rng, &mut self.driver)
    }
}

/// One operation of `driver`'s structure at `root`: one transaction.
fn step(heap: &Heap, root: u64, rng: &mut SplitMix64, driver: &mut Driver) -> Result<(), TxError> {
    match driver {
        Driver::Words {
            array,
            k,
            picks,
            ranges,
            value,
        } => {
            // One word from each of K equal slices: K distinct random words.
            let slice = WORDS / *k;
            picks.clear();
            picks.extend((0..*k).map(|i| *array + 8 * (i * slice + below(rng, slice))));
            *value += 1;
            let v = *value;
            ranges.clear();
            ranges.extend(picks.iter().map(|&p| (p, 8)));
            heap.transaction(|tx| {
                // One batch: one prefetch pass, one log copy, one fence (strict still logs and
                // fences range by range).
                tx.snapshot_many(ranges)?;
                for &p in picks.iter() {
                    tx.write_value(p, &v)?;
                }
                Ok::<_, TxError>(())
            })
        }
        Driver::Sps { pairs } => {
            pairs.clear();
            pairs.extend((0..SPS_SWAPS).map(|_| (below(rng, SPS_LEN), below(rng, SPS_LEN))));
            Sps::open(heap, root)?.swap_all(pairs)
        }
        Driver::List { present } => {
            let key = below(rng, LIST_KEYS);
            let list = List::open(heap, root)?;
            let k = key as usize;
            present[k] = if present[k] {
                !list.remove(key)?
            } else {
                list.insert(key)?
            };
            Ok(())
        }
        Driver::Hashmap { present } => {
            let key = below(rng, MAP_KEYS);
            let map = ChainedHashMap::open(heap, root)?;
            let k = key as usize;
            present[k] = if present[k] {
                map.remove(key)?.is_none()
            } else {
                map.insert(key, rng.next_u64())?;
                true
            };
            Ok(())
        }
        Driver::Queue { next, enqueue } => {
            let queue = Queue::open(heap, root)?;
            if *enqueue {
                queue.enqueue(*next)?;
                *next += 1;
            } else {
                queue.dequeue()?;
            }
            *enqueue = !*enqueue;
            Ok(())
        }
        Driver::Tatp => {
            let tatp = Tatp::open(heap, root)?;
            tatp.update_location(below(rng, TATP_SUBSCRIBERS) + 1, rng.next_u64())?;
            Ok(())
        }
        Driver::Tpcc { order } => {
            let db = Tpcc::open(heap, root)?;
            let config = db.config();
            order.district = below(rng, config.districts) + 1;
            order.customer = below(rng, 3000) + 1;
            let lines = 5 + below(rng, MAX_LINES as u64 - 4);
            order.lines.clear();
            order.lines.extend((0..lines).map(|_| LineInput {
                item: below(rng, config.items) + 1,
                quantity: below(rng, MAX_QUANTITY) + 1,
            }));
            db.new_order(order)?;
            Ok(())
        }
        Driver::CTree { present } => {
            let key = below(rng, CTREE_KEYS);
            let tree = CritBitTree::open(heap, root)?;
            toggle(present, key, |k| tree.insert(k, k), |k| tree.remove(k))
        }
        Driver::Rb { present } => {
            let key = below(rng, RB_KEYS);
            let tree = RedBlackTree::open(heap, root)?;
            toggle(present, key, |k| tree.insert(k, k), |k| tree.remove(k))
        }
        Driver::Pc { value } => {
            let key = below(rng, PC_KEYS);
            value[0] = value[0].wrapping_add(1);
            PersistentCache::open(heap, root)?.update(key, value)?;
            Ok(())
        }
        Driver::Object {
            out_of_place,
            data,
            next,
        } => {
            let slot = root + 8 * *next;
            *next = (*next + 1) % OBJECTS;
            data[0] = data[0].wrapping_add(1);
            if *out_of_place {
                object::update_out_of_place(heap, slot, data)?;
            } else {
                object::update_in_place(heap, slot, data)?;
            }
            Ok(())
        }
    }
}

impl Runner for TxRunner {
    type Error = TxError;

    fn run(&mut self, n: u64) -> Result<(), TxError> {
        for _ in 0..n {
            self.step()?;
        }
        Ok(())
    }

    fn tx_stats(&self) -> Option<TxStats> {
        Some(self.heap.tx_stats())
    }
}

/// Set up `variant`'s structure in `heap` at `root`.
fn setup(
    heap: &Heap,
    root: u64,
    variant: TxVariant,
    rng: &mut SplitMix64,
) -> Result<Driver, TxError> {
    Ok(match variant {
        TxVariant::Words { k, .. } => {
            let array = heap.transaction(|tx| {
                let array = tx.alloc(8 * WORDS)?.offset();
                tx.write(array, &vec![0u8; (8 * WORDS) as usize])?;
                Ok::<_, TxError>(array)
            })?;
            Driver::Words {
                array,
                k,
                picks: Vec::with_capacity(k as usize),
                ranges: Vec::with_capacity(k as usize),
                value: 0,
            }
        }
        TxVariant::Workload { workload, .. } => match workload {
            Workload::Sps => {
                Sps::create(heap, root, SPS_LEN)?;
                Driver::Sps {
                    pairs: Vec::with_capacity(SPS_SWAPS),
                }
            }
            Workload::List => {
                let list = List::create(heap, root)?;
                let present = half_full(rng, LIST_KEYS, |k| list.insert(k))?;
                Driver::List { present }
            }
            Workload::Hashmap => {
                let map = ChainedHashMap::create(heap, root, MAP_BUCKETS)?;
                let present = half_full(rng, MAP_KEYS, |k| map.insert(k, k).map(|_| true))?;
                Driver::Hashmap { present }
            }
            Workload::Queue => {
                let queue = Queue::create(heap, root)?;
                for v in 0..QUEUE_LEN {
                    queue.enqueue(v)?;
                }
                Driver::Queue {
                    next: QUEUE_LEN,
                    enqueue: true,
                }
            }
            Workload::Tatp => {
                Tatp::create(heap, root, TATP_SUBSCRIBERS)?;
                Driver::Tatp
            }
            Workload::CTree => {
                let tree = CritBitTree::create(heap, root)?;
                let present = half_full(rng, CTREE_KEYS, |k| tree.insert(k, k).map(|_| true))?;
                Driver::CTree { present }
            }
            Workload::Rb => {
                let tree = RedBlackTree::create(heap, root)?;
                let present = half_full(rng, RB_KEYS, |k| tree.insert(k, k).map(|_| true))?;
                Driver::Rb { present }
            }
            Workload::Pc => {
                let cache = PersistentCache::create(heap, root, PC_SHAPE)?;
                let value: Vec<u64> = (0..PC_SHAPE.value_words).collect();
                // Fill about half the entries' worth of updates before the run.
                for _ in 0..PC_KEYS / 2 {
                    cache.update(below(rng, PC_KEYS), &value)?;
                }
                Driver::Pc { value }
            }
            Workload::Tpcc => {
                Tpcc::create(heap, root, TpccConfig::default())?;
                Driver::Tpcc {
                    order: NewOrder {
                        district: 1,
                        customer: 1,
                        lines: Vec::with_capacity(MAX_LINES),
                    },
                }
            }
        },
        TxVariant::Object {
            bytes,
            out_of_place,
        } => {
            let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8 + 1).collect();
            for i in 0..OBJECTS {
                object::create(heap, root + 8 * i, &data)?;
            }
            Driver::Object {
                out_of_place,
                data,
                next: 0,
            }
        }
    })
}

/// Remove `key` if it is present, else insert it, keeping `present` up to date.
fn toggle(
    present: &mut [bool],
    key: u64,
    insert: impl FnOnce(u64) -> Result<Option<u64>, TxError>,
    remove: impl FnOnce(u64) -> Result<Option<u64>, TxError>,
) -> Result<(), TxError> {
    let k = key as usize;
    present[k] = if present[k] {
        remove(key)?.is_none()
    } else {
        insert(key)?;
        true
    };
    Ok(())
}

/// Insert a random half of `0..keys` with `insert`; returns which keys are present.
fn half_full(
    rng: &mut SplitMix64,
    keys: u64,
    mut insert: impl FnMut(u64) -> Result<bool, TxError>,
) -> Result<Vec<bool>, TxError> {
    let mut present = vec![false; keys as usize];
    for k in 0..keys {
        if below(rng, 2) == 0 {
            present[k as usize] = insert(k)?;
        }
    }
    Ok(present)
}
