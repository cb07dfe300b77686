//! In process: the store's byte-key maps against redb, the embedded Rust database, with the
//! same keys (16 random bytes) and values (100 bytes).
//!
//! Inserts of every key, then gets of every key in one random order. Each engine commits
//! either once per insert or once per [`BATCH`] inserts: redb one write transaction with
//! `Durability::Immediate` (the commit returns once the data is fsync'd), ours a single
//! insert (durable when it returns) or one write batch ([`Store::write`]: durable, all its
//! inserts or none, when the commit returns). Gets are measured on the maps loaded one insert
//! at a time; redb's run in one read transaction.
//!
//! [`Store::write`]: pmem_structures::Store::write Every store and database is a fresh file in the pool directory, removed
//! after: on tmpfs an fsync costs about what our emulated flushes do, both without a device.

use std::path::{Path, PathBuf};
use std::time::Instant;

use pmem_ordering::Granularity;
use pmem_structures::{BTreeMap, HashMap, Store, WriteBatch};
use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use serde::Serialize;

use super::ServiceError;
use crate::keys::SplitMix64;
use crate::poolfile::StoreFile;

/// Inserts per redb write transaction in the batched mode.
pub const BATCH: u64 = 1_000;
/// Bytes of every value.
pub const VALUE_BYTES: usize = 100;
/// Seed of the keys and of the lookup order.
const SEED: u64 = 0x5E2F;
/// The table (redb) and map (ours) name.
const NAME: &str = "service";
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new(NAME);

/// One engine's throughput for one operation and commit mode.
#[derive(Clone, Debug, Serialize)]
pub struct EmbeddedRow {
    /// `insert` or `get`.
    pub operation: String,
    /// How inserts are committed (`per insert`, `per 1,000 inserts`); for gets, `-`.
    pub commit: String,
    /// The engine: `ours: hash map`, `ours: ordered map`, `redb`.
    pub engine: String,
    /// What the engine does on this row (durability per insert, the read transaction).
    pub note: String,
    /// Operations per second over the whole run.
    pub ops_per_sec: f64,
    /// Ours over redb's ops/s on the same operation and mode (`None` on redb's rows).
    pub ours_over_redb: Option<f64>,
}

/// Bytes of every key.
pub const KEY_BYTES: usize = 16;

type Key = [u8; KEY_BYTES];

/// `n` keys of 16 random bytes (two draws of the generator each; a repeat, about `n^2 / 2^129`
/// likely, would show as a duplicate insert).
fn random_keys(n: u64) -> Vec<Key> {
    let mut rng = SplitMix64::new(SEED);
    (0..n)
        .map(|_| {
            let mut key = [0u8; KEY_BYTES];
            key[..8].copy_from_slice(&rng.next_u64().to_be_bytes());
            key[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
            key
        })
        .collect()
}

/// The value of record `i`: its number, then a fill byte.
fn value_of(i: usize) -> [u8; VALUE_BYTES] {
    let mut value = [0xA5u8; VALUE_BYTES];
    value[..8].copy_from_slice(&(i as u64).to_le_bytes());
    value
}

/// Record numbers `0..n` in one random order.
fn lookup_order(n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = SplitMix64::new(SEED ^ 0xFFFF);
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// Insert and get rates of one side.
struct Rates {
    insert: f64,
    get: f64,
}

/// Gets per second of every key in `order`; `matches(i, key)` looks key `i` up and says
/// whether it found record `i`'s value. A miss is an error (a bug, not a measurement).
fn time_gets(
    engine: &str,
    keys: &[Key],
    order: &[usize],
    mut matches: impl FnMut(usize, &Key) -> Result<bool, ServiceError>,
) -> Result<f64, ServiceError> {
    let start = Instant::now();
    let mut hits = 0usize;
    for &i in order {
        if matches(i, &keys[i])? {
            hits += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if hits != order.len() {
        return Err(ServiceError::Lookups {
            engine: engine.to_string(),
            hits,
            expected: order.len(),
        });
    }
    Ok(order.len() as f64 / secs)
}

/// Inserts per second of every key into one of our maps, `per_commit` keys a commit:
/// `insert_chunk(keys, first)` inserts `keys` (record numbers from `first`) and returns how
/// many were new.
fn time_our_load(
    engine: &str,
    keys: &[Key],
    per_commit: usize,
    mut insert_chunk: impl FnMut(&[Key], usize) -> Result<usize, pmem_structures::Error>,
) -> Result<f64, ServiceError> {
    let start = Instant::now();
    for (n, chunk) in keys.chunks(per_commit).enumerate() {
        if insert_chunk(chunk, n * per_commit)? != chunk.len() {
            return Err(ServiceError::Duplicate {
                engine: engine.to_string(),
            });
        }
    }
    Ok(keys.len() as f64 / start.elapsed().as_secs_f64())
}

/// What the measurement needs of one of our byte-key maps.
trait OurMap: Sized {
    fn open(store: &Store) -> Result<Self, pmem_structures::Error>;
    fn insert(&self, key: &Key, value: &[u8]) -> Result<bool, pmem_structures::Error>;
    fn insert_in(
        &self,
        batch: &mut WriteBatch,
        key: &Key,
        value: &[u8],
    ) -> Result<bool, pmem_structures::Error>;
    fn get(&self, key: &Key) -> Result<Option<Vec<u8>>, pmem_structures::Error>;
}

/// Implements [`OurMap`] for a map type by its methods of the same names.
macro_rules! our_map {
    ($map:ty, $open:ident) => {
        impl OurMap for $map {
            fn open(store: &Store) -> Result<Self, pmem_structures::Error> {
                store.$open(NAME)
            }
            fn insert(&self, key: &Key, value: &[u8]) -> Result<bool, pmem_structures::Error> {
                <$map>::insert(self, key, value)
            }
            fn insert_in(
                &self,
                batch: &mut WriteBatch,
                key: &Key,
                value: &[u8],
            ) -> Result<bool, pmem_structures::Error> {
                <$map>::insert_in(self, batch, key, value)
            }
            fn get(&self, key: &Key) -> Result<Option<Vec<u8>>, pmem_structures::Error> {
                <$map>::get(self, key)
            }
        }
    };
}
our_map!(HashMap<Vec<u8>, Vec<u8>>, hash_map);
our_map!(BTreeMap<Vec<u8>, Vec<u8>>, btree_map);

/// Our rates for one map kind: a load one insert a commit (then the gets, on that map) and
/// one of [`BATCH`] inserts a write batch, each into a fresh store from `new_store(mode)`.
fn time_ours<M: OurMap>(
    engine: &str,
    keys: &[Key],
    order: &[usize],
    new_store: impl Fn(&str) -> Result<StoreFile, ServiceError>,
) -> Result<(Rates, f64), ServiceError> {
    let each = {
        let file = new_store("each")?;
        let map = M::open(file.store())?;
        let insert = time_our_load(engine, keys, 1, |chunk, first| {
            let mut new = 0;
            for (j, key) in chunk.iter().enumerate() {
                new += usize::from(map.insert(key, &value_of(first + j))?);
            }
            Ok(new)
        })?;
        let get = time_gets(engine, keys, order, |i, key| {
            Ok(map.get(key)?.is_some_and(|v| v[..] == value_of(i)[..]))
        })?;
        Rates { insert, get }
    };
    let batched = {
        let file = new_store("batch")?;
        let store = file.store();
        let map = M::open(store)?;
        time_our_load(engine, keys, BATCH as usize, |chunk, first| {
            store.write(|batch| {
                let mut new = 0;
                for (j, key) in chunk.iter().enumerate() {
                    new += usize::from(map.insert_in(batch, key, &value_of(first + j))?);
                }
                Ok::<_, pmem_structures::Error>(new)
            })
        })?
    };
    Ok((each, batched))
}

/// Pool bytes for `records` records: each record's block (header, key and value, rounded up
/// to a power of two), the index, and a margin.
fn pool_bytes(records: u64) -> u64 {
    let block = (12 + KEY_BYTES as u64 + VALUE_BYTES as u64).next_power_of_two();
    (records * (block + 256) + (64 << 20)).next_multiple_of(1 << 20)
}

/// A redb database file, removed when dropped.
struct RedbFile {
    db: Database,
    path: PathBuf,
}

impl RedbFile {
    fn create(dir: &Path, name: &str) -> Result<RedbFile, ServiceError> {
        let path = dir.join(name);
        // A stale file of an interrupted run would make this no fresh database.
        let _ = std::fs::remove_file(&path);
        let db = Database::create(&path).map_err(redb::Error::from)?;
        Ok(RedbFile { db, path })
    }
}

impl Drop for RedbFile {
    fn drop(&mut self) {
        // Best effort: a file already gone needs no removal. (Unix lets an open file go.)
        let _ = std::fs::remove_file(&self.path);
    }
}

/// redb loaded with a durable commit every `per_commit` inserts (the last, partial batch
/// committed inside the timed load), then read back in one read transaction.
fn time_redb(
    dir: &Path,
    file: &str,
    keys: &[Key],
    order: &[usize],
    per_commit: usize,
) -> Result<Rates, ServiceError> {
    let redb = RedbFile::create(dir, file)?;
    let start = Instant::now();
    for (batch, chunk) in keys.chunks(per_commit).enumerate() {
        let mut write = redb.db.begin_write().map_err(redb::Error::from)?;
        write
            .set_durability(Durability::Immediate)
            .map_err(redb::Error::from)?;
        {
            let mut table = write.open_table(TABLE).map_err(redb::Error::from)?;
            for (j, key) in chunk.iter().enumerate() {
                let value = value_of(batch * per_commit + j);
                let old = table
                    .insert(&key[..], &value[..])
                    .map_err(redb::Error::from)?;
                if old.is_some() {
                    return Err(ServiceError::Duplicate {
                        engine: "redb".to_string(),
                    });
                }
            }
        }
        write.commit().map_err(redb::Error::from)?;
    }
    let insert = keys.len() as f64 / start.elapsed().as_secs_f64();
    let read = redb.db.begin_read().map_err(redb::Error::from)?;
    let table = read.open_table(TABLE).map_err(redb::Error::from)?;
    let get = time_gets("redb", keys, order, |i, key| {
        let found = table.get(&key[..]).map_err(redb::Error::from)?;
        Ok(found.is_some_and(|v| v.value() == &value_of(i)[..]))
    })?;
    Ok(Rates { insert, get })
}

/// Measure (see the module's documentation) with `records` keys, files in `dir` named
/// `{prefix}-service-*`. Rows: inserts committed per insert, inserts committed per
/// [`BATCH`], gets; in each, our hash map, our ordered map, redb.
pub fn measure(dir: &Path, prefix: &str, records: u64) -> Result<Vec<EmbeddedRow>, ServiceError> {
    let keys = random_keys(records);
    let order = lookup_order(keys.len());
    let size = pool_bytes(records);
    let granularity = Some(Granularity::Emulated);
    let new_store = |kind: &str, mode: &str| {
        StoreFile::create(
            dir,
            &format!("{prefix}-service-{kind}-{mode}.pool"),
            size,
            granularity,
        )
    };
    let (hash, hash_batched) =
        time_ours::<HashMap<Vec<u8>, Vec<u8>>>("ours: hash map", &keys, &order, |mode| {
            Ok(new_store("hash", mode)?)
        })?;
    let (ordered, ordered_batched) =
        time_ours::<BTreeMap<Vec<u8>, Vec<u8>>>("ours: ordered map", &keys, &order, |mode| {
            Ok(new_store("ordered", mode)?)
        })?;
    let redb_each = time_redb(
        dir,
        &format!("{prefix}-service-each.redb"),
        &keys,
        &order,
        1,
    )?;
    let redb_batch = time_redb(
        dir,
        &format!("{prefix}-service-batch.redb"),
        &keys,
        &order,
        BATCH as usize,
    )?;

    let ours_each_note = "durable when insert returns";
    let ours_batch_note = format!("one write batch per {BATCH} inserts, durable when committed");
    let row =
        |operation: &str, commit: &str, engine: &str, note: &str, rate: f64, redb: Option<f64>| {
            EmbeddedRow {
                operation: operation.to_string(),
                commit: commit.to_string(),
                engine: engine.to_string(),
                note: note.to_string(),
                ops_per_sec: rate,
                ours_over_redb: redb.map(|r| rate / r),
            }
        };
    let per_batch = format!("per {BATCH} inserts");
    let batch_note = format!("one write transaction per {BATCH} inserts, Durability::Immediate");
    let mut rows = Vec::new();
    for (commit, redb, redb_note, ours_note, [hash_insert, ordered_insert]) in [
        (
            "per insert",
            &redb_each,
            "one write transaction per insert, Durability::Immediate",
            ours_each_note,
            [hash.insert, ordered.insert],
        ),
        (
            per_batch.as_str(),
            &redb_batch,
            batch_note.as_str(),
            ours_batch_note.as_str(),
            [hash_batched, ordered_batched],
        ),
    ] {
        rows.push(row(
            "insert",
            commit,
            "ours: hash map",
            ours_note,
            hash_insert,
            Some(redb.insert),
        ));
        rows.push(row(
            "insert",
            commit,
            "ours: ordered map",
            ours_note,
            ordered_insert,
            Some(redb.insert),
        ));
        rows.push(row("insert", commit, "redb", redb_note, redb.insert, None));
    }
    let get_note = "every key once, in one random order";
    rows.push(row(
        "get",
        "-",
        "ours: hash map",
        get_note,
        hash.get,
        Some(redb_each.get),
    ));
    rows.push(row(
        "get",
        "-",
        "ours: ordered map",
        get_note,
        ordered.get,
        Some(redb_each.get),
    ));
    rows.push(row(
        "get",
        "-",
        "redb",
        "every key once, in one random order, in one read transaction",
        redb_each.get,
        None,
    ));
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_gives_every_row_and_removes_its_files() {
        let dir = crate::poolfile::default_pool_dir();
        let prefix = format!("pmem-bench-service-unit-{}", std::process::id());
        let rows = measure(&dir, &prefix, 2_500).unwrap();
        assert_eq!(rows.len(), 9);
        assert!(rows.iter().all(|r| r.ops_per_sec > 0.0));
        assert!(rows
            .iter()
            .all(|r| r.ours_over_redb.is_some() == r.engine.starts_with("ours")));
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .collect();
        assert!(left.is_empty(), "files left behind: {left:?}");
    }

    #[test]
    fn the_lookup_order_is_a_permutation() {
        let mut order = lookup_order(1_000);
        order.sort_unstable();
        assert_eq!(order, (0..1_000).collect::<Vec<_>>());
    }
}
