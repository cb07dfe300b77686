//! redb, driven as [`BenchMap`]: one database file in the pool directory, one table of raw
//! bytes.
//!
//! Durability per operation as ours: each insert and each update is one write transaction,
//! committed before the call returns with redb's default durability (`Durability::Immediate`:
//! durable when `commit` returns; the file is on tmpfs). An insert or update is the table's
//! `insert`, which returns the old value (an insert reports an existing key by it, as our
//! `insert` does). Each get is its own read transaction, each scan one read transaction over
//! the table's `range(key..)`. Every other setting is redb's default (its page cache among
//! them).

use std::path::PathBuf;

use redb::{Database, ReadableDatabase, TableDefinition};

use super::super::bench_map::{check_read, BenchMap, MapFiles, ScanCheck, VALUE_FILL};
use super::super::error::ByteKeyError;
use super::super::keyset::{fill_value, BYTE_KEY_LEN};
use super::RemoveOnDrop;

/// The table of the pairs.
const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bytekeys");

fn redb_error<E: Into<redb::Error>>(what: &'static str) -> impl Fn(E) -> ByteKeyError {
    move |source| ByteKeyError::Redb {
        what,
        source: source.into(),
    }
}

/// A map of 16-byte keys and byte values in one redb table.
struct RedbMap {
    db: Database,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    /// The value being written, refilled per call.
    value: Vec<u8>,
    value_bytes: usize,
}

impl RedbMap {
    /// Write record `record` at `version` in one committed transaction: whether the key was
    /// absent.
    fn write(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        fill_value(&mut self.value, record, version);
        let txn = self.db.begin_write().map_err(redb_error("begin a write"))?;
        let absent = {
            let mut table = txn
                .open_table(TABLE)
                .map_err(redb_error("open the table"))?;
            let old = table
                .insert(&self.keys[record][..], &self.value[..])
                .map_err(redb_error("insert"))?;
            old.is_none()
        };
        txn.commit().map_err(redb_error("commit"))?;
        Ok(absent)
    }
}

impl BenchMap for RedbMap {
    fn insert(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        self.write(record, version)
    }

    fn read(&mut self, record: usize) -> Result<bool, ByteKeyError> {
        let txn = self.db.begin_read().map_err(redb_error("begin a read"))?;
        let table = txn
            .open_table(TABLE)
            .map_err(redb_error("open the table"))?;
        match table
            .get(&self.keys[record][..])
            .map_err(redb_error("get"))?
        {
            Some(value) => check_read(record, value.value(), self.value_bytes).map(|()| true),
            None => Ok(false),
        }
    }

    fn update(&mut self, record: usize, version: u32) -> Result<bool, ByteKeyError> {
        self.write(record, version).map(|absent| !absent)
    }

    fn scan(&mut self, record: usize, len: usize) -> Result<usize, ByteKeyError> {
        let txn = self.db.begin_read().map_err(redb_error("begin a read"))?;
        let table = txn
            .open_table(TABLE)
            .map_err(redb_error("open the table"))?;
        let start = &self.keys[record][..];
        let mut check = ScanCheck::new(record, start, self.keys.len(), self.value_bytes);
        let range = table.range(start..).map_err(redb_error("start a range"))?;
        for pair in range.take(len) {
            let (key, value) = pair.map_err(redb_error("step the range"))?;
            check.pair(key.value(), value.value())?;
        }
        Ok(check.visited())
    }
}

/// Make a fresh redb database of one empty table for `keys` in the file `{stem}.redb` of
/// `files` (removed when `f` returns), and call `f` on it.
pub fn with_map<R>(
    files: MapFiles<'_>,
    keys: Vec<[u8; BYTE_KEY_LEN]>,
    value_bytes: usize,
    f: impl FnOnce(&mut dyn BenchMap) -> Result<R, ByteKeyError>,
) -> Result<R, ByteKeyError> {
    let path: PathBuf = files.dir.join(format!("{}.redb", files.stem));
    let file = RemoveOnDrop::fresh_file(path)?;
    let db = Database::create(file.path()).map_err(redb_error("create the database"))?;
    // The table exists before the first read transaction opens it.
    let txn = db.begin_write().map_err(redb_error("begin a write"))?;
    txn.open_table(TABLE)
        .map_err(redb_error("create the table"))?;
    txn.commit().map_err(redb_error("commit"))?;
    let mut map = RedbMap {
        db,
        keys,
        value: vec![VALUE_FILL; value_bytes],
        value_bytes,
    };
    let result = f(&mut map);
    drop(map);
    drop(file);
    result
}
