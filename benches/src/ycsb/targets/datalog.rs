//! The datalog as a YCSB target ([`DatalogTarget`]): one file of fixed-size records, each
//! field a checkable pattern of its key and value.

use pmem_ordering::Hardware;
use pmem_structures::raw::datalog::{Datalog, FileId};

use super::{Structure, Target, TargetError};
use crate::keys::records::{record_of, value_matches, version_of};

/// Bytes of one datalog record (a YCSB record of a few fields).
pub const RECORD_BYTES: u64 = 256;
/// Bytes of one field of a datalog record: an update rewrites one.
pub const FIELD_BYTES: u64 = 64;
/// Fields per datalog record.
pub const FIELDS: u64 = RECORD_BYTES / FIELD_BYTES;
/// Words per field.
const FIELD_WORDS: usize = (FIELD_BYTES / 8) as usize;

/// The datalog: one file of fixed-size records.
pub(super) struct DatalogTarget {
    pub(super) store: Datalog<Hardware>,
    pub(super) file: FileId,
}

/// The words of a field holding `value` for `key`: the key, the value, then words derived from
/// both, so a field mixing two writes or two records is caught.
fn field_words(key: u64, value: u64) -> [u64; FIELD_WORDS] {
    let mut w = [0u64; FIELD_WORDS];
    w[0] = key;
    w[1] = value;
    for (i, word) in w.iter_mut().enumerate().skip(2) {
        *word = crate::keys::zipfian::fnv1a64(key ^ value.rotate_left(i as u32 * 8));
    }
    w
}

fn field_bytes(key: u64, value: u64) -> [u8; FIELD_BYTES as usize] {
    let mut out = [0u8; FIELD_BYTES as usize];
    for (chunk, w) in out.chunks_exact_mut(8).zip(field_words(key, value)) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    out
}

impl DatalogTarget {
    /// The record of `key` and its byte offset.
    fn locate(key: u64) -> Result<(u64, u64), TargetError> {
        let record = record_of(key).ok_or(TargetError::BadKey { key })?;
        let offset = record
            .checked_mul(RECORD_BYTES)
            .filter(|&o| o < pmem_structures::raw::datalog::MAX_FILE_SIZE)
            .ok_or(TargetError::BadKey { key })?;
        Ok((record, offset))
    }
}

impl Target for DatalogTarget {
    /// The whole record at once; the store tells nothing of whether it was there, so this
    /// reports every insert new (a read of it checks what landed).
    fn insert(&self, key: u64, value: u64) -> Result<bool, TargetError> {
        let (_, offset) = Self::locate(key)?;
        let mut record = [0u8; RECORD_BYTES as usize];
        for field in record.chunks_exact_mut(FIELD_BYTES as usize) {
            field.copy_from_slice(&field_bytes(key, value));
        }
        self.store.write_at(self.file, offset, &record)?;
        Ok(true)
    }

    /// The value of field 0, after every field is checked to hold a value written with the key.
    fn read(&self, key: u64) -> Result<Option<u64>, TargetError> {
        let (record, offset) = Self::locate(key)?;
        let mut buf = [0u8; RECORD_BYTES as usize];
        let n = self.store.read_at(self.file, offset, &mut buf)?;
        let bad = |reason: String| TargetError::BadRecord {
            record,
            key,
            reason,
        };
        if n == 0 || (n == buf.len() && buf.iter().all(|&b| b == 0)) {
            // Past the end, or a gap another thread's later insert left: no record.
            return Ok(None);
        }
        if n < buf.len() {
            return Err(bad(format!(
                "only {n} of its {RECORD_BYTES} bytes are in the file"
            )));
        }
        let mut first = None;
        for (f, field) in buf.chunks_exact(FIELD_BYTES as usize).enumerate() {
            let word = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&field[i * 8..i * 8 + 8]);
                u64::from_le_bytes(b)
            };
            let (k, v) = (word(0), word(1));
            if k != key || !value_matches(key, v) {
                return Err(bad(format!("field {f} holds key {k:#x} value {v:#x}")));
            }
            if field != field_bytes(key, v).as_slice() {
                return Err(bad(format!("field {f} is not one write of value {v:#x}")));
            }
            first.get_or_insert(v);
        }
        Ok(first)
    }

    /// One field: the value's version picks which.
    fn update(&self, key: u64, value: u64) -> Result<bool, TargetError> {
        let (_, offset) = Self::locate(key)?;
        if offset + RECORD_BYTES > self.store.len(self.file)? {
            return Ok(false);
        }
        let field = u64::from(version_of(value)) % FIELDS;
        self.store.write_at(
            self.file,
            offset + field * FIELD_BYTES,
            &field_bytes(key, value),
        )?;
        Ok(true)
    }

    fn scan(&self, _start: u64, _len: usize) -> Result<usize, TargetError> {
        Err(TargetError::ScanUnsupported {
            structure: Structure::Datalog.name(),
        })
    }
}
