//! The set-up and the measured loops of the instruction-count benches (`instructions_*.rs`):
//! instructions per operation under callgrind (iai-callgrind), deterministic, so a change's
//! cost shows without timing noise. Needs valgrind and `iai-callgrind-runner` of the
//! same version as the `iai-callgrind` dev-dependency (see the README).
//!
//! Every benchmark runs in its own process under valgrind. Its set-up, outside the measured
//! region, makes a fresh pool in the pool directory (/dev/shm, else the temporary directory;
//! emulated granularity: flushes and fences issued as on persistent memory), loads
//! [`KEYS`] random keys one call at a time, and runs a warm-up batch; the measured function
//! then runs a batch of [`OPS`] operations ([`SCANS`] for range scans, [`TXS`] for
//! transactions), so **instructions per operation = the count / the batch size** (the bench
//! ids say the batch size). The loop adds a few instructions per operation (a load of the key,
//! a compare, a branch).
//!
//! * `get`: hits, in a random order;
//! * `insert_no_split` (CCEH): keys that were inserted then removed in the set-up, so their
//!   segments have room: an insert without a split;
//! * `insert` : new keys, splits included at their natural rate (amortised);
//! * `upsert`: present keys, each given a new value;
//! * `remove`: present keys;
//! * `scan`: 100-key range scans from random present keys (ordered maps);
//! * `tx_words`: an undo-log transaction snapshotting then writing K random words of a 512 KiB
//!   array (the batched fence policy), including the choice of the K words.
//!
//! Set-up state is leaked on purpose (each benchmark is its own short-lived process), so no
//! destructor runs inside the measured region; each pool file is made in a fresh directory,
//! removed right after the pool is mapped, so nothing is left in the pool directory.

// Each bench target uses the part of this module its maps need.
#![allow(dead_code)]

use std::hint::black_box;
use std::path::{Path, PathBuf};

use pmem_bench::ccehbench::{self, CcehHeap, Table};
use pmem_bench::fastfairbench::{FastFairHeap, Tree};
use pmem_bench::keys::{random_keys_except_max, shuffled};
use pmem_bench::poolfile::{default_pool_dir, StoreFile};
use pmem_bench::txbench::{TxRunner, TxVariant};
use pmem_ordering::Granularity;
use pmem_structures::fastfair::{FastFairConfig, ShiftPolicy};
use pmem_structures::store::{BTreeMap, HashMap};
use pmem_undo_log::FencePolicy;

/// Keys loaded before any measurement.
pub const KEYS: u64 = 1_000_000;
/// Point operations per measured batch.
pub const OPS: usize = 10_000;
/// Range scans per measured batch.
pub const SCANS: usize = 1_000;
/// Transactions per measured batch.
pub const TXS: usize = 1_000;
/// Pairs per range scan.
pub const SCAN_KEYS: usize = 100;
/// Operations run before the measured batch (warm thread-locals, allocator state).
pub const WARM_UP: usize = 1_000;

/// The keys of one benchmark: the loaded ones, and fresh ones (never loaded).
pub struct Keys {
    loaded: Vec<u64>,
    fresh: Vec<u64>,
}

impl Keys {
    fn new() -> Keys {
        let mut all = random_keys_except_max(KEYS + (OPS + WARM_UP) as u64, 0x1A57);
        let fresh = all.split_off(KEYS as usize);
        Keys { loaded: all, fresh }
    }

    /// `n` loaded keys in a random order (distinct).
    fn sample(&self, n: usize, seed: u64) -> Vec<u64> {
        shuffled(&self.loaded, seed).into_iter().take(n).collect()
    }
}

/// What a measured batch works on: the structure and the keys of the batch (leaked, so the
/// measured function drops nothing).
pub struct Fixture<M: 'static> {
    pub map: &'static M,
    pub batch: Vec<u64>,
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

/// The operations every map offers, on u64 keys and values.
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

impl PointOps for Table<'static> {
    fn get(&self, key: u64) -> Option<u64> {
        Table::get(self, key).expect("get")
    }
    fn insert(&self, key: u64, value: u64) -> bool {
        Table::insert(self, key, value).expect("insert")
    }
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        Table::upsert(self, key, value).expect("upsert")
    }
    fn remove(&self, key: u64) -> Option<u64> {
        Table::remove(self, key).expect("remove")
    }
}

impl PointOps for Tree<'static> {
    fn get(&self, key: u64) -> Option<u64> {
        Tree::get(self, key).expect("get")
    }
    fn insert(&self, key: u64, value: u64) -> bool {
        Tree::insert(self, key, value).expect("insert")
    }
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        Tree::upsert(self, key, value).expect("upsert")
    }
    fn remove(&self, key: u64) -> Option<u64> {
        Tree::remove(self, key).expect("remove")
    }
}

impl ScanOps for Tree<'static> {
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
    fn get(&self, key: u64) -> Option<u64> {
        HashMap::get(self, key).expect("get")
    }
    fn insert(&self, key: u64, value: u64) -> bool {
        HashMap::insert(self, key, value).expect("insert")
    }
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        HashMap::upsert(self, key, value).expect("upsert")
    }
    fn remove(&self, key: u64) -> Option<u64> {
        HashMap::remove(self, key).expect("remove")
    }
}

impl PointOps for BTreeMap<u64, u64> {
    fn get(&self, key: u64) -> Option<u64> {
        BTreeMap::get(self, key).expect("get")
    }
    fn insert(&self, key: u64, value: u64) -> bool {
        BTreeMap::insert(self, key, value).expect("insert")
    }
    fn upsert(&self, key: u64, value: u64) -> Option<u64> {
        BTreeMap::upsert(self, key, value).expect("upsert")
    }
    fn remove(&self, key: u64) -> Option<u64> {
        BTreeMap::remove(self, key).expect("remove")
    }
}

impl ScanOps for BTreeMap<u64, u64> {
    fn scan(&self, start: u64) -> usize {
        let mut pairs = 0;
        for pair in self.range(start..).take(SCAN_KEYS) {
            black_box(pair.expect("scan"));
            pairs += 1;
        }
        pairs
    }
}

/// Load every key, then warm up with lookups.
pub fn load<M: PointOps>(map: &M, keys: &Keys) {
    for &k in &keys.loaded {
        assert!(map.insert(k, value_of(k)), "a loaded key was present");
    }
    for k in keys.sample(WARM_UP, 0x3A3) {
        assert_eq!(map.get(k), Some(value_of(k)), "a loaded key is missing");
    }
}

/// The batch of keys `op` works on, the map prepared for it.
pub fn batch<M: PointOps>(map: &M, keys: &Keys, op: &str) -> Vec<u64> {
    match op {
        "get" | "upsert" | "remove" | "scan" => {
            keys.sample(if op == "scan" { SCANS } else { OPS }, 0x6E7)
        }
        "insert" => keys.fresh[..OPS].to_vec(),
        "insert_no_split" => {
            // Inserted and removed once: the re-inserts find room without splitting.
            let fresh = keys.fresh[..OPS].to_vec();
            for &k in &fresh {
                assert!(map.insert(k, value_of(k)), "a fresh key was present");
            }
            for &k in &fresh {
                assert!(map.remove(k).is_some(), "a fresh key was not removed");
            }
            fresh
        }
        _ => panic!("no operation {op}"),
    }
}

pub fn cceh(op: &str) -> &'static Fixture<Table<'static>> {
    let dir = fresh_dir();
    let name = "cceh.pool";
    let heap =
        leak(CcehHeap::create(&dir, name, KEYS, Some(Granularity::Emulated)).expect("CCEH heap"));
    unlink(&dir);
    let map = leak(heap.table().expect("CCEH table"));
    let keys = Keys::new();
    load(map, &keys);
    let batch = batch(map, &keys, op);
    leak(Fixture { map, batch })
}

pub fn fastfair(op: &str) -> &'static Fixture<Tree<'static>> {
    let dir = fresh_dir();
    let name = "fastfair.pool";
    let heap = leak(
        FastFairHeap::create(&dir, name, KEYS, Some(Granularity::Emulated))
            .expect("FAST&FAIR heap"),
    );
    unlink(&dir);
    let map = leak(heap.tree(ShiftPolicy::Fast).expect("FAST&FAIR tree"));
    let keys = Keys::new();
    load(map, &keys);
    let batch = batch(map, &keys, op);
    leak(Fixture { map, batch })
}

pub fn store_file(size: u64) -> &'static StoreFile {
    let dir = fresh_dir();
    let name = "store.pool";
    let file =
        leak(StoreFile::create(&dir, name, size, Some(Granularity::Emulated)).expect("store file"));
    unlink(&dir);
    file
}

pub fn store_hash(op: &str) -> &'static Fixture<HashMap<u64, u64>> {
    let file = store_file(ccehbench::pool_size(KEYS));
    let map = leak(file.store().hash_map::<u64, u64>("h").expect("hash map"));
    let keys = Keys::new();
    load(map, &keys);
    let batch = batch(map, &keys, op);
    leak(Fixture { map, batch })
}

pub fn store_btree(op: &str) -> &'static Fixture<BTreeMap<u64, u64>> {
    let file = store_file(pmem_bench::fastfairbench::pool_size(KEYS));
    let config = FastFairConfig {
        policy: ShiftPolicy::Fast,
        ..FastFairConfig::default()
    };
    let map = leak(
        file.store()
            .btree_map::<u64, u64>("b", config)
            .expect("btree map"),
    );
    let keys = Keys::new();
    load(map, &keys);
    let batch = batch(map, &keys, op);
    leak(Fixture { map, batch })
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
