//! The loaded pools of the instruction-count benches, built natively and copied per benchmark.
//!
//! Loading 1M keys one call at a time under valgrind took minutes per benchmark (over an hour
//! for the suite). So the bench binary's `main!` set-up, which iai-callgrind runs natively
//! (not under valgrind) before the benchmarks, builds each pool the binary needs once and
//! keeps it in [`cache_dir`]: every key but the last [`TAIL`] loaded in order, the same calls
//! as before, then the pool closed. Each benchmark process (under valgrind) copies the cached
//! file to a private one (a kernel copy, cheap under valgrind), opens it with the structure's
//! own `open` and loads the last [`TAIL`] keys itself, so the structure holds exactly the keys,
//! inserted in exactly the order, of a load made in the process, and the measured thread has
//! run inserts, splits and their transactions before its warm-up and batch.
//!
//! A cached file is named by its structure, the key count, the key seed and the bench binary
//! (path, size and modification time: a rebuilt binary may lay its pools out differently, on-pool
//! format versions included, so it builds its own). It is rebuilt when missing, or when a
//! private copy of it does not open (refused by a format check, or damaged). The files of this
//! binary's earlier builds are removed; `rm -r /dev/shm/pmem-instr-cache` removes them all.
//! The keys of the batches are computed natively too and cached beside the pools.

// The transaction bench uses none of this (its set-up makes no large pool).
#![allow(dead_code)]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use pmem_bench::ccehbench::{self, Table, CCEH_POLICY};
use pmem_bench::fastfairbench::{self, Tree, FASTFAIR_HEAP_POLICY};
use pmem_bench::keys::{random_keys_except_max, shuffled};
use pmem_bench::poolfile::{default_pool_dir, LAYOUT};
use pmem_ordering::{Granularity, Pool, PoolOptions};
use pmem_structures::raw::cceh::{Cceh, CcehConfig};
use pmem_structures::raw::fastfair::{FastFair, FastFairConfig, ShiftPolicy};
use pmem_structures::{BTreeMap, HashMap};
use pmem_structures::{Store, StoreOptions};
use pmem_undo_log::{Heap, HeapConfig};

/// Keys loaded before any measurement.
pub const KEYS: u64 = 1_000_000;
/// The last keys of the load, inserted by each benchmark process into its copy of the pool.
pub const TAIL: usize = 10_000;
/// Point operations per measured batch.
pub const OPS: usize = 10_000;
/// Operations run before the measured batch (warm thread-locals, allocator state).
pub const WARM_UP: usize = 1_000;
/// Seed of the keys (splitmix64): the first [`KEYS`] are loaded, the rest are fresh.
const KEY_SEED: u64 = 0x1A57;
/// Seed of the random order of the batches' present keys.
const SAMPLE_SEED: u64 = 0x6E7;
/// Seed of the random order of the warm-up's keys.
const WARM_SEED: u64 = 0x3A3;
/// The persistence the pools emulate: flushes and fences issued as on persistent memory.
const GRANULARITY: Granularity = Granularity::Emulated;

/// A structure whose loaded pool is cached.
#[derive(Clone, Copy, Debug)]
pub enum Structure {
    /// The raw CCEH table.
    Cceh,
    /// The raw FAST&FAIR tree, FAST shifts.
    FastFair,
    /// The Store's u64 -> u64 hash map `h`.
    StoreHash,
    /// The Store's u64 -> u64 B+-tree map `b` (FAST shifts).
    StoreBTree,
}

impl Structure {
    fn name(self) -> &'static str {
        match self {
            Structure::Cceh => "cceh",
            Structure::FastFair => "fastfair",
            Structure::StoreHash => "store-hash",
            Structure::StoreBTree => "store-btree",
        }
    }

    /// The pool's size: as the benches' earlier fresh pools.
    fn pool_size(self) -> u64 {
        match self {
            Structure::Cceh | Structure::StoreHash => ccehbench::pool_size(KEYS),
            Structure::FastFair | Structure::StoreBTree => fastfairbench::pool_size(KEYS),
        }
    }
}

/// The keys a benchmark process needs, in the orders the batches use them.
pub struct BatchKeys {
    /// The last [`TAIL`] keys of the load, in load order.
    pub tail: Vec<u64>,
    /// [`WARM_UP`] loaded keys in a random order.
    pub warm: Vec<u64>,
    /// [`OPS`] loaded keys in a random order (distinct); scans take the first ones.
    pub sample: Vec<u64>,
    /// [`OPS`] keys never loaded.
    pub fresh: Vec<u64>,
}

impl BatchKeys {
    /// The parts' lengths, in file order.
    const LENS: [usize; 4] = [TAIL, WARM_UP, OPS, OPS];

    fn compute(all: &[u64]) -> BatchKeys {
        let loaded = &all[..KEYS as usize];
        let first = |n: usize, seed| shuffled(loaded, seed).into_iter().take(n).collect();
        BatchKeys {
            tail: loaded[loaded.len() - TAIL..].to_vec(),
            warm: first(WARM_UP, WARM_SEED),
            sample: first(OPS, SAMPLE_SEED),
            fresh: all[KEYS as usize..][..OPS].to_vec(),
        }
    }

    /// Read the keys the set-up cached.
    pub fn read() -> BatchKeys {
        let path = keys_path();
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .unwrap_or_else(|e| panic!("{}: {e}; {}", path.display(), RUN_HINT));
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(
            words.len(),
            Self::LENS.iter().sum::<usize>(),
            "{}: wrong length; {RUN_HINT}",
            path.display()
        );
        let mut parts = Self::LENS.iter().scan(0, |at, &n| {
            *at += n;
            Some(words[*at - n..*at].to_vec())
        });
        let mut next = || parts.next().expect("four parts");
        BatchKeys {
            tail: next(),
            warm: next(),
            sample: next(),
            fresh: next(),
        }
    }

    fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut bytes = Vec::with_capacity(8 * Self::LENS.iter().sum::<usize>());
        for part in [&self.tail, &self.warm, &self.sample, &self.fresh] {
            for k in part {
                bytes.extend_from_slice(&k.to_le_bytes());
            }
        }
        write_atomically(path, |f| f.write_all(&bytes))
    }
}

/// What a benchmark process says when the set-up's files are not there.
const RUN_HINT: &str = "run the instruction benches with `cargo bench` (their set-up, run \
natively before the benchmarks, builds the cached pools)";

/// Where the cached pools are: a directory in the pool directory (/dev/shm if it exists).
pub fn cache_dir() -> PathBuf {
    default_pool_dir().join("pmem-instr-cache")
}

/// This bench binary: a hash of its path, and one of its path, size and modification time.
/// (Under valgrind `argv[0]` is still the binary, as iai-callgrind runs it by its path.)
fn build_stamp() -> (u64, u64) {
    let exe = PathBuf::from(std::env::args_os().next().expect("argv[0]"));
    let meta = std::fs::metadata(&exe)
        .unwrap_or_else(|e| panic!("the bench binary {}: {e}", exe.display()));
    let hash = |parts: &dyn Fn(&mut DefaultHasher)| {
        let mut h = DefaultHasher::new();
        parts(&mut h);
        h.finish()
    };
    let place = hash(&|h| exe.hash(h));
    let build = hash(&|h| {
        exe.hash(h);
        meta.len().hash(h);
        meta.modified().ok().hash(h);
    });
    (place, build)
}

/// The name of a cached file: `what` for this key set, then this binary's place and build.
fn cached_name(what: &str) -> (String, String) {
    let (place, build) = build_stamp();
    let prefix = format!("{what}-k{KEYS}-s{KEY_SEED:x}-{place:016x}-");
    (format!("{prefix}{build:016x}"), prefix)
}

fn pool_path(structure: Structure) -> PathBuf {
    cache_dir().join(format!("{}.pool", cached_name(structure.name()).0))
}

fn keys_path() -> PathBuf {
    cache_dir().join(format!("{}.keys", cached_name("keys").0))
}

/// Write the file at `path` through a temporary file renamed into place, so a reader never
/// sees half a file.
fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    write(&mut file)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

/// Remove the cached files of this binary's earlier builds (same place, another build).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir(cache_dir()) else {
        return;
    };
    let (place, _) = build_stamp();
    let place = format!("-{place:016x}-");
    let current: Vec<String> = ["keys", "cceh", "fastfair", "store-hash", "store-btree"]
        .iter()
        .map(|w| cached_name(w).0)
        .collect();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let stem = name.split('.').next().unwrap_or_default();
        if name.contains(&place) && !current.iter().any(|c| c == stem) {
            // Best effort: another process may have removed it already.
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The set-up of a bench binary (run natively by iai-callgrind before its benchmarks): make
/// sure the batch keys and a loaded pool of each of `structures` are cached.
pub fn prepare(structures: &[Structure]) {
    let started = std::time::Instant::now();
    std::fs::create_dir_all(cache_dir()).expect("the cache directory");
    remove_stale();
    let mut all = None;
    let mut keys = || {
        all.get_or_insert_with(|| random_keys_except_max(KEYS + (OPS + WARM_UP) as u64, KEY_SEED))
            .clone()
    };
    if !keys_path().exists() {
        BatchKeys::compute(&keys())
            .write(&keys_path())
            .expect("write the batch keys");
    }
    for &structure in structures {
        let path = pool_path(structure);
        if path.exists() && opens(structure, &path) {
            continue;
        }
        let mut loaded = keys();
        loaded.truncate(KEYS as usize - TAIL);
        build(structure, &path, &loaded);
        assert!(
            opens(structure, &path),
            "the freshly built {} pool does not open",
            structure.name()
        );
    }
    eprintln!(
        "instruction benches: pools of {structures:?} ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Load `keys` into a fresh pool of `structure` at `path` (natively), one call per key as the
/// benches always loaded, then close it.
fn build(structure: Structure, path: &Path, keys: &[u64]) {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let size = structure.pool_size();
    match structure {
        Structure::Cceh | Structure::FastFair => {
            let options = PoolOptions::new().granularity(GRANULARITY);
            let pool = Pool::create(&tmp, LAYOUT, size, &options).expect("create the pool");
            let policy = match structure {
                Structure::Cceh => CCEH_POLICY,
                _ => FASTFAIR_HEAP_POLICY,
            };
            let heap = Heap::create(pool, HeapConfig::default(), policy).expect("the heap");
            let root = heap.pool().root_offset();
            if let Structure::Cceh = structure {
                let table: Table =
                    Cceh::create(&heap, root, CcehConfig::default()).expect("the CCEH table");
                load(keys, |k, v| table.insert(k, v).expect("insert"));
            } else {
                let tree: Tree =
                    FastFair::create(&heap, root, fast_config()).expect("the FAST&FAIR tree");
                load(keys, |k, v| tree.insert(k, v).expect("insert"));
            }
        }
        Structure::StoreHash | Structure::StoreBTree => {
            let options = StoreOptions::new().granularity(GRANULARITY);
            let store = Store::create(&tmp, size, &options).expect("create the store");
            if let Structure::StoreHash = structure {
                let map: HashMap<u64, u64> = store.hash_map("h").expect("the hash map");
                load(keys, |k, v| map.insert(k, v).expect("insert"));
            } else {
                let map: BTreeMap<u64, u64> = store
                    .btree_map_with("b", fast_config())
                    .expect("the B+-tree map");
                load(keys, |k, v| map.insert(k, v).expect("insert"));
            }
        }
    }
    std::fs::rename(&tmp, path).expect("move the built pool into the cache");
}

fn load(keys: &[u64], mut insert: impl FnMut(u64, u64) -> bool) {
    for &k in keys {
        assert!(
            insert(k, ccehbench::value_of(k)),
            "a loaded key was present"
        );
    }
}

/// The configuration of the FAST&FAIR trees measured: the default one, FAST shifts.
pub fn fast_config() -> FastFairConfig {
    FastFairConfig {
        policy: ShiftPolicy::Fast,
        ..FastFairConfig::default()
    }
}

/// Whether a private copy of the cached pool at `path` opens as `structure` with its keys.
fn opens(structure: Structure, path: &Path) -> bool {
    let Ok((dir, copy)) = private_copy_of(path) else {
        return false;
    };
    let ok = match structure {
        Structure::Cceh => open_heap(&copy).is_some_and(|heap| {
            Table::open(&heap, heap.pool().root_offset()).is_ok_and(|t| t.len() == keys_cached())
        }),
        Structure::FastFair => open_heap(&copy).is_some_and(|heap| {
            Tree::open(&heap, heap.pool().root_offset()).is_ok_and(|t| t.len() == keys_cached())
        }),
        Structure::StoreHash => open_store(&copy).is_ok_and(|s| {
            s.hash_map::<u64, u64>("h")
                .is_ok_and(|m| m.len() == keys_cached())
        }),
        Structure::StoreBTree => open_store(&copy).is_ok_and(|s| {
            s.btree_map_with::<u64, u64>("b", fast_config())
                .is_ok_and(|m| m.len() == keys_cached())
        }),
    };
    let _ = std::fs::remove_dir_all(dir);
    ok
}

/// Keys a cached pool holds.
fn keys_cached() -> u64 {
    KEYS - TAIL as u64
}

fn open_heap(path: &Path) -> Option<Heap> {
    let options = PoolOptions::new().granularity(GRANULARITY);
    let pool = Pool::open(path, LAYOUT, &options).ok()?;
    Heap::open(pool).ok()
}

fn open_store(path: &Path) -> Result<Store, pmem_structures::Error> {
    Store::open_with(path, &StoreOptions::new().granularity(GRANULARITY))
}

/// A copy of the file at `path` in a fresh directory of the pool directory: the directory and
/// the copy.
fn private_copy_of(path: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
    let dir = tempfile::Builder::new()
        .prefix("pmem-instr-")
        .tempdir_in(default_pool_dir())?
        .keep();
    let copy = dir.join("pool");
    match std::fs::copy(path, &copy) {
        Ok(_) => Ok((dir, copy)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

/// A private copy of the cached pool of `structure` for one benchmark process, opened with
/// `open`; the copy is removed once open (the mapping keeps its pages until the process ends).
pub fn open_copy<T>(structure: Structure, open: impl FnOnce(&Path) -> T) -> T {
    let cached = pool_path(structure);
    let (dir, copy) = private_copy_of(&cached)
        .unwrap_or_else(|e| panic!("copy {}: {e}; {RUN_HINT}", cached.display()));
    let opened = open(&copy);
    std::fs::remove_dir_all(&dir).expect("remove the private pool copy");
    opened
}

/// Open the heap of a raw structure's pool copy at `path`.
pub fn heap_at(path: &Path) -> Heap {
    open_heap(path).unwrap_or_else(|| panic!("the heap of {} does not open", path.display()))
}

/// Open the store of a pool copy at `path`.
pub fn store_at(path: &Path) -> Store {
    open_store(path).unwrap_or_else(|e| panic!("the store {}: {e}", path.display()))
}
