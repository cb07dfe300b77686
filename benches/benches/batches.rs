//! Criterion benches of write batches against the same writes one by one, on stores in pool
//! files in /dev/shm (else the temporary directory) opened with **emulated** granularity:
//! flushes and fences are issued as on persistent memory, but the files are in DRAM.
//!
//! One group, `batches`, each row 100 upserts per iteration (throughput in upserts), for the
//! four kinds of maps (`u64 -> u64` and 16-byte keys to 32-byte values, hash and ordered) and
//! the byte-key ordered map in the leaf layout (`bytes leaves`, default leaves),
//! each preloaded with 100,000 keys, the upserts' keys drawn from twice that range (about half
//! overwrite a present key, half insert one):
//!
//! * `single`: 100 `upsert` calls, each durable when it returns;
//! * `batch upsert_in`: one batch of 100 `upsert_in` calls (each reads the key's value first),
//!   committed;
//! * `batch put_in`: one batch of 100 blind `put_in` calls, committed.
//!
//! Each row runs on a store of its own, loaded the same way, a handle on its map held for the
//! whole row (so no iteration opens the map again). The fences per upsert of each row
//! are printed once, from the thread's persist statistics.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pmem_bench::poolfile::{default_pool_dir, StoreFile};
use pmem_ordering::stats::thread_stats;
use pmem_ordering::Granularity;
use pmem_structures::{BTreeLayout, Error, Store};

const POOL_FILE: &str = "pmem-bench-criterion-batches.pool";
const POOL_BYTES: u64 = 2 << 30;
/// Keys loaded before timing.
const PRELOAD: u64 = 100_000;
/// Upserts per iteration.
const BATCH: usize = 100;
/// Keys drawn per row, cycled through.
const DRAWS: usize = 1 << 16;

/// The ways to write `BATCH` upserts.
#[derive(Clone, Copy)]
enum Way {
    Single,
    BatchUpsert,
    BatchPut,
}

impl Way {
    const ALL: [Way; 3] = [Way::Single, Way::BatchUpsert, Way::BatchPut];

    fn name(self) -> &'static str {
        match self {
            Way::Single => "single",
            Way::BatchUpsert => "batch upsert_in",
            Way::BatchPut => "batch put_in",
        }
    }
}

/// SplitMix64: the keys of a row.
fn draws(seed: u64, count: usize, range: u64) -> Vec<u64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) % range
        })
        .collect()
}

fn byte_key(k: u64) -> [u8; 16] {
    let mut key = *b"key:000000000000";
    key[4..].copy_from_slice(format!("{k:012}").as_bytes());
    key
}

fn byte_value(k: u64) -> [u8; 32] {
    let mut value = [0u8; 32];
    value[..8].copy_from_slice(&k.to_le_bytes());
    value
}

/// One of the four maps, with its upserts written one way.
trait Target {
    /// A handle on the map, held for a row: without one, each `write` would open the map
    /// again (a map of leaves rebuilds its DRAM index at open).
    fn hold(&self, store: &Store) -> Result<Box<dyn std::any::Any>, Error>;
    fn preload(&self, store: &Store, keys: &[u64]) -> Result<(), Error>;
    fn write(&self, store: &Store, way: Way, keys: &[u64]) -> Result<(), Error>;
}

/// [`Target`] for `$name`, whose `open` gives its map, with keys `$k(k)` and values `$v(k)`.
macro_rules! target {
    ($name:ident, $k:expr, $v:expr) => {
        impl Target for $name {
            fn hold(&self, store: &Store) -> Result<Box<dyn std::any::Any>, Error> {
                Ok(Box::new($name::open(store)?))
            }
            fn preload(&self, store: &Store, keys: &[u64]) -> Result<(), Error> {
                let map = $name::open(store)?;
                for chunk in keys.chunks(1000) {
                    store.write(|batch| {
                        for &k in chunk {
                            map.put_in(batch, $k(k), $v(k))?;
                        }
                        Ok::<_, Error>(())
                    })?;
                }
                Ok(())
            }
            fn write(&self, store: &Store, way: Way, keys: &[u64]) -> Result<(), Error> {
                let map = $name::open(store)?;
                match way {
                    Way::Single => {
                        for &k in keys {
                            map.upsert($k(k), $v(k))?;
                        }
                        Ok(())
                    }
                    Way::BatchUpsert => store.write(|batch| {
                        for &k in keys {
                            map.upsert_in(batch, $k(k), $v(k))?;
                        }
                        Ok(())
                    }),
                    Way::BatchPut => store.write(|batch| {
                        for &k in keys {
                            map.put_in(batch, $k(k), $v(k))?;
                        }
                        Ok(())
                    }),
                }
            }
        }
    };
}

type WordHash = pmem_structures::HashMap<u64, u64>;
type WordTree = pmem_structures::BTreeMap<u64, u64>;
type ByteHash = pmem_structures::HashMap<Vec<u8>, Vec<u8>>;
type ByteTree = pmem_structures::BTreeMap<Vec<u8>, Vec<u8>>;

struct WordHashTarget;
struct WordTreeTarget;
struct ByteHashTarget;
struct ByteTreeTarget;
struct ByteLeavesTarget;

impl WordHashTarget {
    fn open(store: &Store) -> Result<WordHash, Error> {
        store.hash_map("map")
    }
}
impl WordTreeTarget {
    fn open(store: &Store) -> Result<WordTree, Error> {
        store.btree_map("map")
    }
}
impl ByteHashTarget {
    fn open(store: &Store) -> Result<ByteHash, Error> {
        store.hash_map("map")
    }
}
impl ByteTreeTarget {
    fn open(store: &Store) -> Result<ByteTree, Error> {
        store.btree_map("map")
    }
}

target!(WordHashTarget, |k: u64| k + 1, |k: u64| k);
target!(WordTreeTarget, |k: u64| k, |k: u64| k);
target!(ByteHashTarget, byte_key, byte_value);
impl ByteLeavesTarget {
    fn open(store: &Store) -> Result<ByteTree, Error> {
        store.btree_map_with("map", BTreeLayout::leaves())
    }
}

target!(ByteTreeTarget, byte_key, byte_value);
target!(ByteLeavesTarget, byte_key, byte_value);

fn bench_batches(c: &mut Criterion) {
    let dir = default_pool_dir();
    let mut g = c.benchmark_group("batches");
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(3));
    g.sample_size(20);
    g.throughput(Throughput::Elements(BATCH as u64));
    let targets: [(&str, &dyn Target); 5] = [
        ("u64 hash", &WordHashTarget),
        ("u64 ordered", &WordTreeTarget),
        ("bytes hash", &ByteHashTarget),
        ("bytes ordered", &ByteTreeTarget),
        ("bytes leaves", &ByteLeavesTarget),
    ];
    let preload = draws(1, PRELOAD as usize, 2 * PRELOAD);
    let keys = draws(2, DRAWS, 2 * PRELOAD);
    for (map, target) in targets {
        for way in Way::ALL {
            let file = StoreFile::create(&dir, POOL_FILE, POOL_BYTES, Some(Granularity::Emulated))
                .expect("a store file");
            let store = file.store();
            let _held = target.hold(store).expect("the map");
            target.preload(store, &preload).expect("preload");
            // Fences per upsert, once, outside the timing.
            let before = thread_stats().fences;
            target
                .write(store, way, &keys[..BATCH])
                .expect("the first round");
            let fences = thread_stats().fences - before;
            eprintln!(
                "batches {map} {}: {:.2} fences per upsert",
                way.name(),
                fences as f64 / BATCH as f64
            );
            let mut next = BATCH;
            g.bench_function(BenchmarkId::new(way.name(), map), |b| {
                b.iter(|| {
                    let at = next % (DRAWS - BATCH);
                    next += BATCH;
                    target
                        .write(store, way, &keys[at..at + BATCH])
                        .expect("upserts")
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_batches);
criterion_main!(benches);
