//! The set-up and the measured loops of the instruction-count benches (`instructions_*.rs`):
//! instructions per operation under callgrind (iai-callgrind), deterministic, so a change's
//! cost shows without timing noise. Needs valgrind and `iai-callgrind-runner` of the
//! same version as the `iai-callgrind` dev-dependency (docs/pmem-bench.md).
//!
//! Every benchmark runs in its own process under valgrind. Its set-up, outside the measured
//! region, opens a private copy of a pool of [`KEYS`] random keys loaded natively by the bench
//! binary's set-up (`pools.rs`: every key but the last [`TAIL`], which the process loads
//! itself, one call at a time, so the structure is the one a whole load in the process made),
//! and runs a warm-up batch of [`WARM_UP`] lookups; the measured function then runs a batch of
//! [`OPS`] operations ([`SCANS`] for range scans, [`TXS`] for transactions), so **instructions
//! per operation = the count / the batch size** (the bench ids say the batch size). The loop
//! adds a few instructions per operation (a load of the key, a compare, a branch, the test of
//! the call's `Result` a caller writes).
//!
//! * `get`: hits, in a random order;
//! * `insert_no_split` (hash maps): keys that were inserted then removed in the set-up, so
//!   their segments have room: an insert without a split;
//! * `insert` : new keys, splits included at their natural rate (amortised);
//! * `upsert`: present keys, each given a new value;
//! * `remove`: present keys;
//! * `scan`: 100-key range scans from random present keys (ordered maps), one `next` per pair;
//! * `scan_bulk` (raw FAST&FAIR): the same scans with `Range::next_into` into one buffer;
//! * `tx_words`: an undo-log transaction snapshotting then writing K random words of a 512 KiB
//!   array (the batched fence policy), including the choice of the K words.
//!
//! Set-up state is leaked on purpose (each benchmark is its own short-lived process), so no
//! destructor runs inside the measured region; each pool copy is removed right after it is
//! mapped, so nothing is left in the pool directory.

// Each bench target uses the part of this module its maps need.
#![allow(dead_code)]

use std::hint::black_box;
use std::path::{Path, PathBuf};

use pmem_bench::ccehbench::{self, Table};
use pmem_bench::fastfairbench::Tree;
use pmem_bench::poolfile::default_pool_dir;
use pmem_bench::txbench::{TxRunner, TxVariant};
use pmem_ordering::Granularity;
use pmem_structures::{BTreeMap, HashMap};
use pmem_undo_log::FencePolicy;

use super::pools::{fast_config, heap_at, open_copy, store_at, BatchKeys, Structure, WARM_UP};

/// Range scans per measured batch.
pub const SCANS: usize = 1_000;
/// Transactions per measured batch.
pub const TXS: usize = 1_000;
/// Pairs per range scan.
pub const SCAN_KEYS: usize = 100;

/// What a measured batch works on: the structure and the keys of the batch (leaked, so the
/// measured function drops nothing).
pub struct Fixture<M: 'static> {
    pub map: &'static M,
    pub batch: Vec<u64>,
}

/// What a measured batch of bulk scans works on: the tree, the scans' start keys and the
/// buffer every scan fills (its capacity reserved, so no scan allocates).
pub struct BulkScans {
    pub map: &'static Tree,
    pub batch: Vec<u64>,
    pub out: Vec<(u64, u64)>,
}

pub fn value_of(key: u64) -> u64 {
    ccehbench::value_of(key)
}

pub fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

/// A fresh directory in the pool directory for one benchmark's pool file.
pub fn fresh_dir() -> PathBuf {
    tempfile::Builder::new()
        .prefix("pmem-instr-")
        .tempdir_in(default_pool_dir())
        .expect("a directory for the benchmark pool")
        .keep()
}

/// Remove `dir` and the pool file in it: the mapping keeps its pages until the process ends.
pub fn unlink(dir: &Path) {
    std::fs::remove_dir_all(dir).expect("remove the benchmark pool directory");
}

/// The operations every map offers, on u64 keys and values. Each implementation is one call
/// of the map's method with the caller's `expect`, kept out of line so the method is inlined
/// into the same small function whatever the batch loop around it looks like (the count
/// does not move with the harness's inlining; the call and return add a few instructions).
pub trait PointOps {
    fn get(&self, key: u64) -> Option<u64>;
    fn insert(&self, key: u64, value: u64) -> bool;
    fn upsert(&self, key: u64, value: u64) -> Option<u64>;
    fn remove(&self, key: u64) -> Option<u64>;
}

/// A range scan of [`SCAN_KEYS`] pairs from `start`; the pairs read.
pub trait ScanOps {
    fn scan(&self, start: u64) -> usize;
}

impl PointOps for Table {
    #[inline(never)]
    fn get(&self, key: u64) -> Option<u64> {
        Table::get(self, key).expect("get")
    }
    #[inline(never)]
    fn insert(&self, key: u64, value: u64) -> bool {
        Table::insert(self, key, value).expect("insert")
    }
    #[inline(never)]
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        Table::upsert(self, key, value).expect("upsert")
    }
    #[inline(never)]
    fn remove(&self, key: u64) -> Option<u64> {
        Table::remove(self, key).expect("remove")
    }
}

impl PointOps for Tree {
    #[inline(never)]
    fn get(&self, key: u64) -> Option<u64> {
        Tree::get(self, key).expect("get")
    }
    #[inline(never)]
    fn insert(&self, key: u64, value: u64) -> bool {
        Tree::insert(self, key, value).expect("insert")
    }
    #[inline(never)]
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        Tree::upsert(self, key, value).expect("upsert")
    }
    #[inline(never)]
    fn remove(&self, key: u64) -> Option<u64> {
        Tree::remove(self, key).expect("remove")
    }
}

impl ScanOps for Tree {
    #[inline(never)]
    fn scan(&self, start: u64) -> usize {
        let mut pairs = 0;
        for pair in self.range(start..).take(SCAN_KEYS) {
            black_box(pair.expect("scan"));
            pairs += 1;
        }
        pairs
    }
}

impl PointOps for HashMap<u64, u64> {
    #[inline(never)]
    fn get(&self, key: u64) -> Option<u64> {
        HashMap::get(self, key).expect("get")
    }
    #[inline(never)]
    fn insert(&self, key: u64, value: u64) -> bool {
        HashMap::insert(self, key, value).expect("insert")
    }
    #[inline(never)]
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        HashMap::upsert(self, key, value).expect("upsert")
    }
    #[inline(never)]
    fn remove(&self, key: u64) -> Option<u64> {
        HashMap::remove(self, key).expect("remove")
    }
}

impl PointOps for BTreeMap<u64, u64> {
    #[inline(never)]
    fn get(&self, key: u64) -> Option<u64> {
        BTreeMap::get(self, key).expect("get")
    }
    #[inline(never)]
    fn insert(&self, key: u64, value: u64) -> bool {
        BTreeMap::insert(self, key, value).expect("insert")
    }
    #[inline(never)]
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        BTreeMap::upsert(self, key, value).expect("upsert")
    }
    #[inline(never)]
    fn remove(&self, key: u64) -> Option<u64> {
        BTreeMap::remove(self, key).expect("remove")
    }
}

impl ScanOps for BTreeMap<u64, u64> {
    #[inline(never)]
    fn scan(&self, start: u64) -> usize {
        let mut pairs = 0;
        for pair in self.range(start..).take(SCAN_KEYS) {
            black_box(pair.expect("scan"));
            pairs += 1;
        }
        pairs
    }
}

/// Load the last [`TAIL`] keys (the cached pool holds the others), then warm up with lookups.
pub fn load_tail<M: PointOps>(map: &M, keys: &BatchKeys) {
    for &k in &keys.tail {
        assert!(map.insert(k, value_of(k)), "a loaded key was present");
    }
    for &k in &keys.warm {
        assert_eq!(map.get(k), Some(value_of(k)), "a loaded key is missing");
    }
}

/// The batch of keys `op` works on, the map prepared for it.
pub fn batch<M: PointOps>(map: &M, keys: &BatchKeys, op: &str) -> Vec<u64> {
    match op {
        "get" | "upsert" | "remove" => keys.sample.clone(),
        "scan" => keys.sample[..SCANS].to_vec(),
        "insert" => keys.fresh.clone(),
        "insert_no_split" => {
            // Inserted and removed once: the re-inserts find room without splitting.
            for &k in &keys.fresh {
                assert!(map.insert(k, value_of(k)), "a fresh key was present");
            }
            for &k in &keys.fresh {
                assert!(map.remove(k).is_some(), "a fresh key was not removed");
            }
            keys.fresh.clone()
        }
        _ => panic!("no operation {op}"),
    }
}

/// `map`, loaded and warmed up, with the batch of `op`.
fn fixture<M: PointOps>(map: &'static M, op: &str) -> &'static Fixture<M> {
    let keys = BatchKeys::read();
    load_tail(map, &keys);
    let batch = batch(map, &keys, op);
    leak(Fixture { map, batch })
}

fn cceh_table() -> &'static Table {
    let heap = leak(open_copy(Structure::Cceh, heap_at));
    leak(Table::open(heap, heap.pool().root_offset()).expect("CCEH table"))
}

fn fastfair_tree() -> &'static Tree {
    let heap = leak(open_copy(Structure::FastFair, heap_at));
    leak(Tree::open(heap, heap.pool().root_offset()).expect("FAST&FAIR tree"))
}

pub fn cceh(op: &str) -> &'static Fixture<Table> {
    fixture(cceh_table(), op)
}

pub fn fastfair(op: &str) -> &'static Fixture<Tree> {
    fixture(fastfair_tree(), op)
}

/// The raw tree with the batch of scans and a buffer for [`run_scan_bulk`].
pub fn fastfair_bulk(op: &str) -> &'static mut BulkScans {
    let Fixture { map, batch } = fastfair(op);
    Box::leak(Box::new(BulkScans {
        map,
        batch: batch.clone(),
        // More than a scan holds: `next_into` may append a whole leaf before it trims.
        out: Vec::with_capacity(8 * SCAN_KEYS),
    }))
}

pub fn store_hash(op: &str) -> &'static Fixture<HashMap<u64, u64>> {
    let store = leak(open_copy(Structure::StoreHash, store_at));
    fixture(leak(store.hash_map::<u64, u64>("h").expect("hash map")), op)
}

pub fn store_btree(op: &str) -> &'static Fixture<BTreeMap<u64, u64>> {
    let store = leak(open_copy(Structure::StoreBTree, store_at));
    let map = store
        .btree_map_with::<u64, u64>("b", fast_config())
        .expect("btree map");
    fixture(leak(map), op)
}

pub fn run_get<M: PointOps>(f: &Fixture<M>) -> usize {
    f.batch.iter().filter(|&&k| f.map.get(k).is_some()).count()
}

pub fn run_insert<M: PointOps>(f: &Fixture<M>) -> usize {
    f.batch
        .iter()
        .filter(|&&k| f.map.insert(k, value_of(k)))
        .count()
}

pub fn run_upsert<M: PointOps>(f: &Fixture<M>) -> usize {
    f.batch
        .iter()
        .filter(|&&k| f.map.upsert(k, !k).is_some())
        .count()
}

pub fn run_remove<M: PointOps>(f: &Fixture<M>) -> usize {
    f.batch
        .iter()
        .filter(|&&k| f.map.remove(k).is_some())
        .count()
}

pub fn run_scan<M: ScanOps>(f: &Fixture<M>) -> usize {
    f.batch.iter().map(|&k| f.map.scan(k)).sum()
}

/// A bulk scan of [`SCAN_KEYS`] pairs from `start` into `out`, emptied first; out of line as
/// the [`PointOps`] calls are.
#[inline(never)]
fn scan_bulk(tree: &Tree, start: u64, out: &mut Vec<(u64, u64)>) -> usize {
    out.clear();
    tree.range(start..).next_into(out, SCAN_KEYS).expect("scan")
}

/// Each scan's pairs into the one buffer, with `Range::next_into`.
pub fn run_scan_bulk(f: &mut BulkScans) -> usize {
    let mut pairs = 0;
    for &k in &f.batch {
        pairs += scan_bulk(f.map, k, &mut f.out);
    }
    pairs
}

/// A transaction runner of K words on its own heap, warmed up.
pub fn tx_words(k: u64) -> &'static mut TxRunner {
    let dir = fresh_dir();
    let variant = TxVariant::Words {
        k,
        policy: FencePolicy::Batched,
    };
    let runner = Box::leak(Box::new(
        TxRunner::new(&dir, "tx", variant, Some(Granularity::Emulated))
            .expect("transaction runner"),
    ));
    unlink(&dir);
    for _ in 0..WARM_UP {
        runner.step().expect("warm-up transaction");
    }
    runner
}
