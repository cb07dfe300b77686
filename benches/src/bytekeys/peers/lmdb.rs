//! LMDB through heed, driven as [`BenchMap`]: one environment in a fresh directory of the pool
//! directory, its unnamed database of raw bytes.
//!
//! Durability per operation as ours: each insert and each update is one write transaction,
//! committed before the call returns, with the environment's default flags (no `NO_SYNC`, no
//! `NO_META_SYNC`: the commit writes its pages and syncs the data file, here on tmpfs). An
//! insert is `put` with `NO_OVERWRITE` (an existing key is reported, as our `insert` reports
//! it); an update reads the old value and `put`s the new one in its transaction (our `upsert`
//! returns the old value). Each get is its own read transaction, each scan one read
//! transaction over a cursor placed at the start key (heed's `range(key..)`).

use std::ops::Bound;
use std::path::PathBuf;

use heed::types::Bytes;
use heed::{CommitOrAbort, Database, Env, EnvOpenOptions, MdbError, PutFlags};

use super::super::bench_map::{check_read, BenchMap, MapFiles, ScanCheck, VALUE_FILL};
use super::super::error::ByteKeyError;
use super::super::keyset::{fill_value, BYTE_KEY_LEN};
use super::RemoveOnDrop;

/// heed's version in Cargo.lock (a unit test keeps the two in step).
pub const HEED_VERSION: &str = "0.23.1";

/// Bytes of address space the environment may map per record: a pair takes about 130 bytes
/// in a leaf, leaves of random inserts are about two thirds full, and copy-on-write keeps a
/// few old pages until they are reused; the map is reserved, not used, so it is generous.
const MAP_BYTES_PER_RECORD: usize = 1024;
/// Address space beside the records'.
const MAP_MARGIN: usize = 256 << 20;

/// The LMDB library heed was built with (the bundled source's version string).
pub fn lmdb_version() -> String {
    heed::lmdb_version().string.to_string()
}

fn lmdb_error(what: &'static str) -> impl Fn(heed::Error) -> ByteKeyError {
    move |source| ByteKeyError::Lmdb { what, source }
}

/// A map of 16-byte keys and byte values in one LMDB database.
struct LmdbMap<'e> {
    env: &'e Env,
    db: Database<'e, Bytes, Bytes>,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    /// The value being written, refilled per call.
    value: Vec<u8>,
    value_bytes: usize,
}

impl BenchMap for LmdbMap<'_> {
    fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        fill_value(&mut self.value, record, version);
        let mut txn = self.env.write_txn().map_err(lmdb_error("begin a write"))?;
        let key = &self.keys[record][..];
        match self
            .db
            .put_with_flags(&mut txn, PutFlags::NO_OVERWRITE, key, &self.value)
        {
            Ok(()) => {}
            // Nothing written: the transaction is dropped (aborted).
            Err(heed::Error::Mdb(MdbError::KeyExist)) => return Ok(false),
            Err(e) => return Err(lmdb_error("put")(e)),
        }
        txn.commit().map_err(lmdb_error("commit"))?;
        Ok(true)
    }

    fn read(&mut self, record: usize) -> Result<bool, ByteKeyError> {
        let txn = self.env.read_txn().map_err(lmdb_error("begin a read"))?;
        match self
            .db
            .get(&txn, &self.keys[record][..])
            .map_err(lmdb_error("get"))?
        {
            Some(value) => check_read(record, value, self.value_bytes).map(|()| true),
            None => Ok(false),
        }
    }

    fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        fill_value(&mut self.value, record, version);
        let mut txn = self.env.write_txn().map_err(lmdb_error("begin a write"))?;
        let key = &self.keys[record][..];
        let replaced = self.db.get(&txn, key).map_err(lmdb_error("get"))?.is_some();
        self.db
            .put(&mut txn, key, &self.value)
            .map_err(lmdb_error("put"))?;
        txn.commit().map_err(lmdb_error("commit"))?;
        Ok(replaced)
    }

    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError> {
        let txn = self.env.read_txn().map_err(lmdb_error("begin a read"))?;
        let start = &self.keys[record][..];
        let mut check = ScanCheck::new(record, start, self.keys.len(), self.value_bytes);
        let range = self
            .db
            .range(&txn, &(Bound::Included(start), Bound::Unbounded))
            .map_err(lmdb_error("place a cursor"))?;
        for pair in range.take(len) {
            let (key, value) = pair.map_err(lmdb_error("step the cursor"))?;
            check.pair(key, value)?;
        }
        Ok(check.visited())
    }
}

/// Make a fresh LMDB environment of one empty database for `keys` in the directory
/// `{stem}.lmdb` of `files` (removed when `f` returns), and call `f` on it.
pub fn with_map<R>(
    files: MapFiles<'_>,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    value_bytes: usize,
    f: impl FnOnce(&mut dyn BenchMap) -> Result<R, ByteKeyError>,
) -> Result<R, ByteKeyError> {
    let path: PathBuf = files.dir.join(format!("{}.lmdb", files.stem));
    let dir = RemoveOnDrop::fresh_dir(path)?;
    let map_size = (keys.len() * MAP_BYTES_PER_RECORD + MAP_MARGIN).next_multiple_of(1 << 20);
    let mut options = EnvOpenOptions::new();
    options.map_size(map_size);
    // heed's `open` is unsafe because a memory-mapped file modified behind LMDB's back (in or
    // out of the process) is undefined behaviour.
    // SAFETY: the directory was made empty just now under a name of this run, only this call
    // opens it, and nothing else writes its files until the environment is dropped below.
    let env = unsafe { options.open(dir.path()) }.map_err(lmdb_error("open the environment"))?;
    let write = env.write_txn().map_err(lmdb_error("begin a write"))?;
    let db: Database<'_, Bytes, Bytes> = env
        .create_databases_and_commit(write, |opener, txn| {
            opener
                .create_database::<Bytes, Bytes>(txn, None)
                .map(CommitOrAbort::<_, ()>::Commit)
        })
        .map_err(lmdb_error("create the database"))?
        .unwrap_commit();
    let result = f(&mut LmdbMap {
        env: &env,
        db,
        keys,
        value: vec![VALUE_FILL; value_bytes],
        value_bytes,
    });
    drop(env);
    drop(dir);
    result
}
