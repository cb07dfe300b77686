//! The one error type of the `Store` and its handles.
//!
//! Every failure a service can meet through the store, a map or a datalog handle is an
//! [`Error`]. The cases a caller acts on have their own variant whatever structure raised them
//! (a full pool is [`Error::PoolFull`] from the hash map, the B+-tree, the datalog and the
//! catalog alike); the rest keep the structure's own error, whose message says what happened.

use std::fmt;
use std::path::PathBuf;

use pmem_ordering::PoolError;
use pmem_undo_log::TxError;

use crate::cceh::CcehError;
use crate::datalog::DatalogError;
use crate::fastfair::FastFairError;
use crate::kind::StructureKind;
use crate::records::RecordMapError;

use super::types::TypeCode;

/// What can go wrong with a store, its catalog or a structure in it.
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum Error {
    /// Creating, opening or reaching the pool file failed (not found, already open, not a
    /// pool, ...).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The pool has no room left for the change; nothing changed.
    #[error("the store is full: no room for an allocation of {requested} bytes ({free} bytes free in all); nothing changed")]
    PoolFull {
        /// Bytes the change asked for.
        requested: u64,
        /// Bytes free in the pool's heap (possibly fragmented).
        free: u64,
    },
    /// The pool file holds a pool of this library, but not a store.
    #[error("{path} holds a pool of layout {layout:?}, not a store (layout {expected:?})")]
    NotAStore {
        /// The file.
        path: PathBuf,
        /// The layout it holds.
        layout: String,
        /// The store's layout.
        expected: &'static str,
    },
    /// The file's creation as a store provably never finished: nothing after its pool header
    /// was written (an earlier build formatted in place, and stopped or was refused).
    #[error(
        "{path} holds a store whose creation never finished (nothing after its pool header was \
         written): Store::open_or_create makes it again, or remove the file"
    )]
    Incomplete {
        /// The file.
        path: PathBuf,
    },
    /// A name of another kind of structure.
    #[error("{name:?} is {found}, not {wanted}")]
    KindMismatch {
        /// The name asked for.
        name: String,
        /// What the store holds under it.
        found: StructureKind,
        /// What was asked for.
        wanted: StructureKind,
    },
    /// A map opened with other key or value types than it was created with: other codes, or
    /// plain-data types of the same sizes under other names ([`PodValue::NAME`], told by the
    /// fingerprints of the types the catalog records).
    ///
    /// [`PodValue::NAME`]: super::types::PodValue::NAME
    #[error("{}", type_mismatch(name, *found_key, *found_value, *wanted_key, *wanted_value, *found_fingerprint, *wanted_fingerprint))]
    TypeMismatch {
        /// The name asked for.
        name: String,
        /// The key type the map was created with.
        found_key: TypeCode,
        /// The value type the map was created with.
        found_value: TypeCode,
        /// The key type asked for.
        wanted_key: TypeCode,
        /// The value type asked for.
        wanted_value: TypeCode,
        /// The fingerprint of the types the map was created with (0: made before the catalog
        /// recorded fingerprints).
        found_fingerprint: u32,
        /// The fingerprint of the types asked for.
        wanted_fingerprint: u32,
    },
    /// A key longer than the maps take ([`crate::records::MAX_KEY_BYTES`]); nothing changed.
    #[error("a key of {len} bytes is longer than the {max}-byte limit; nothing changed")]
    KeyTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value longer than the maps take ([`crate::records::MAX_VALUE_BYTES`]); nothing
    /// changed.
    #[error("a value of {len} bytes is longer than the {max}-byte limit; nothing changed")]
    ValueTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A stored key or value that does not decode as the map's type (text that is not
    /// UTF-8, a wrong length): the record is damaged.
    #[error("{name:?} holds a {what} that is not a valid {type_code}: the map is damaged")]
    Undecodable {
        /// The map.
        name: String,
        /// "key" or "value".
        what: &'static str,
        /// The type it should be.
        type_code: TypeCode,
    },
    /// A stored record whose bytes do not match the checksum written with it: the map is
    /// damaged at that record, whose key and value are not served.
    #[error("the record at pool offset {offset:#x} is damaged ({reason}): its key and value cannot be read")]
    CorruptRecord {
        /// The record's pool offset.
        offset: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// No structure of that name.
    #[error("the store holds no structure named {name:?}")]
    NotFound {
        /// The name asked for.
        name: String,
    },
    /// The catalog has no free entry for a new name.
    #[error("the store's catalog is full: all {capacity} names are in use (StoreOptions::max_structures sets the capacity at create)")]
    CatalogFull {
        /// Names the catalog holds.
        capacity: u64,
    },
    /// A name that cannot be stored.
    #[error("invalid structure name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The structure has open handles, so it cannot be removed.
    #[error("{name:?} is in use: drop its handles before removing it")]
    InUse {
        /// The name.
        name: String,
    },
    /// An option or argument that cannot be used.
    #[error("invalid configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
    /// The catalog is damaged; the store refuses to guess.
    #[error("the store's catalog is damaged: {reason}")]
    CorruptCatalog {
        /// What is wrong.
        reason: String,
    },
    /// A write batch with more changes than a batch takes ([`crate::store::MAX_BATCH_CHANGES`]);
    /// the change was not added, nothing changed.
    #[error("a write batch takes at most {max} changes, and this one has {changes}; the change was not added, nothing changed")]
    BatchTooLarge {
        /// The changes the batch would have.
        changes: usize,
        /// The limit.
        max: usize,
    },
    /// A write batch whose log does not fit the store's write-batch area; nothing changed.
    #[error("a write batch's log of {bytes} bytes does not fit the store's {max}-byte write-batch area (split the batch); nothing changed")]
    BatchLogFull {
        /// Bytes the log needs.
        bytes: u64,
        /// Bytes the area holds.
        max: u64,
    },
    /// A single write (or a second batch) from the thread whose open write batch holds the map
    /// (or the store): it would wait for itself. Write through the batch instead.
    #[error("{name:?} is held by a write batch open on this thread: write through the batch (`insert_in`, `upsert_in`, ...), or commit it first")]
    InBatch {
        /// The map's name, or "the store" for a second batch.
        name: String,
    },
    /// A map handle of another store passed to a write batch.
    #[error("{name:?} belongs to another store than the write batch's")]
    OtherStore {
        /// The map's name.
        name: String,
    },
    /// The undo-log heap failed (log space, a damaged log or allocator); nothing changed.
    #[error(transparent)]
    Heap(TxError),
    /// The hash map failed.
    #[error(transparent)]
    HashMap(CcehError),
    /// The B+-tree failed.
    #[error(transparent)]
    BTreeMap(FastFairError),
    /// The datalog failed.
    #[error(transparent)]
    Datalog(DatalogError),
    /// A map of byte-string records failed.
    #[error(transparent)]
    RecordMap(RecordMapError),
}

/// The message of [`Error::TypeMismatch`]: the codes when they differ, else the fingerprints
/// of the plain-data types' names.
fn type_mismatch(
    name: &str,
    found_key: TypeCode,
    found_value: TypeCode,
    wanted_key: TypeCode,
    wanted_value: TypeCode,
    found_fingerprint: u32,
    wanted_fingerprint: u32,
) -> String {
    if (found_key, found_value) != (wanted_key, wanted_value) {
        return format!(
            "{name:?} maps {found_key} to {found_value}, not {wanted_key} to {wanted_value}"
        );
    }
    format!(
        "{name:?} maps {found_key} to {found_value}, but of other plain-data types than the ones \
         asked for (their names' fingerprint is {found_fingerprint:#010x}, the types asked for \
         give {wanted_fingerprint:#010x}: PodValue::NAME tells types of one size apart)"
    )
}

/// `Debug` prints the message: `main() -> Result<(), Box<dyn Error>>` shows it to the user.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<TxError> for Error {
    fn from(e: TxError) -> Error {
        match e {
            TxError::Pool(e) => Error::Pool(e),
            TxError::PoolFull { requested, free } => Error::PoolFull { requested, free },
            other => Error::Heap(other),
        }
    }
}

impl From<CcehError> for Error {
    fn from(e: CcehError) -> Error {
        match e {
            CcehError::Tx(e) => Error::from(e),
            other => Error::HashMap(other),
        }
    }
}

impl From<FastFairError> for Error {
    fn from(e: FastFairError) -> Error {
        match e {
            FastFairError::Tx(e) => Error::from(e),
            other => Error::BTreeMap(other),
        }
    }
}

impl From<RecordMapError> for Error {
    fn from(e: RecordMapError) -> Error {
        match e {
            RecordMapError::Heap(e) => Error::from(e),
            RecordMapError::Table(e) => Error::from(e),
            RecordMapError::Tree(e) => Error::from(e),
            RecordMapError::KeyTooLarge { len, max } => Error::KeyTooLarge { len, max },
            RecordMapError::ValueTooLarge { len, max } => Error::ValueTooLarge { len, max },
            RecordMapError::CorruptRecord { offset, reason } => {
                Error::CorruptRecord { offset, reason }
            }
            other => Error::RecordMap(other),
        }
    }
}

impl From<DatalogError> for Error {
    fn from(e: DatalogError) -> Error {
        match e {
            DatalogError::Tx(e) => Error::from(e),
            other => Error::Datalog(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use crate::cceh::CcehError;
    use crate::kind::StructureKind;
    use pmem_undo_log::TxError;

    #[test]
    fn a_full_pool_is_one_variant_whatever_raised_it() {
        let full = || TxError::PoolFull {
            requested: 4096,
            free: 100,
        };
        assert!(matches!(Error::from(full()), Error::PoolFull { .. }));
        assert!(matches!(
            Error::from(CcehError::Tx(full())),
            Error::PoolFull {
                requested: 4096,
                free: 100
            }
        ));
    }

    #[test]
    fn a_damaged_record_is_its_own_variant_naming_the_offset() {
        let e = Error::from(crate::records::RecordMapError::CorruptRecord {
            offset: 0x4c40,
            reason: "its checksum is 0x00000001, its bytes' is 0x00000002".into(),
        });
        assert!(matches!(e, Error::CorruptRecord { offset: 0x4c40, .. }));
        assert!(e.to_string().contains("pool offset 0x4c40"), "{e}");
    }

    #[test]
    fn debug_reads_as_the_message() {
        let e = Error::KindMismatch {
            name: "users".into(),
            found: StructureKind::HashMap,
            wanted: StructureKind::BTreeMap,
        };
        assert_eq!(
            format!("{e:?}"),
            "\"users\" is a CCEH hash table, not a FAST&FAIR B+-tree"
        );
    }
}
