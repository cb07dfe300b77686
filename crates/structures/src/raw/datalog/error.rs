//! The store's errors.

use std::fmt;

use pmem_ordering::PoolError;
use pmem_undo_log::TxError;

use super::MAX_FILE_SIZE;
use crate::kind::StructureKind;

/// What can go wrong with a datalog store.
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum DatalogError {
    /// A transaction failed (allocation, log space, pool access); nothing changed.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// [`super::Datalog::create`] on a root that is in use (its magic word is not zero):
    /// nothing was written, the root's contents are intact.
    #[error(
        "root {root:#x} already holds {found}: open it, or create the store at an unused \
         (all-zero) root"
    )]
    AlreadyExists {
        /// The root offset.
        root: u64,
        /// What the root holds, in words ([`crate::kind::describe_magic`]).
        found: String,
    },
    /// [`super::Datalog::open`] on a root that holds something else (another kind of
    /// structure, nothing, or an unknown magic, printed as text).
    #[error("root {root:#x} holds {found}, not {}", StructureKind::Datalog.describe())]
    WrongKind {
        /// The root offset.
        root: u64,
        /// What the root holds, in words ([`crate::kind::describe_magic`]).
        found: String,
    },
    /// The store at the root, or its inode table, is damaged.
    #[error("not a valid datalog store at offset {root:#x}: {reason}")]
    Corrupt {
        /// The root offset.
        root: u64,
        /// What is wrong.
        reason: String,
    },
    /// A committed log entry of a file fails its checksum or makes no sense: the file's data
    /// cannot be trusted and is not returned.
    #[error("file {file:?}: corrupted log entry at pool offset {entry:#x}: {reason}")]
    CorruptEntry {
        /// The file's name.
        file: String,
        /// Pool offset of the entry.
        entry: u64,
        /// What is wrong.
        reason: String,
    },
    /// A copy-on-write data page of a file fails the CRC-32C its extent entry recorded when
    /// the page was written: its bytes are damaged and are not returned (nor merged into a
    /// write). The rest of the file, and every other file, stay usable; overwriting the whole
    /// page or truncating it away replaces it.
    #[error(
        "file {file:?}: the data page at file offset {offset} (pool offset {page:#x}) fails its \
         CRC-32C: its bytes are damaged and not returned"
    )]
    CorruptData {
        /// The file's name.
        file: String,
        /// Offset in the file of the page's first byte.
        offset: u64,
        /// Pool offset of the damaged data page.
        page: u64,
    },
    /// No file of that name.
    #[error("no file named {name:?}")]
    NotFound {
        /// The name.
        name: String,
    },
    /// A file of that name exists already.
    #[error("a file named {name:?} exists already")]
    Exists {
        /// The name.
        name: String,
    },
    /// A name that cannot be stored.
    #[error("invalid file name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// Every inode is in use.
    #[error("the store is full: all {max} inodes are in use")]
    TooManyFiles {
        /// Inodes of the store.
        max: u64,
    },
    /// A handle to a file that has been removed.
    #[error("the file handle is stale: its file was removed")]
    StaleHandle,
    /// An offset or size past [`MAX_FILE_SIZE`].
    #[error("range at {offset} of {len} bytes passes the largest file size ({MAX_FILE_SIZE})")]
    OutOfRange {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
    },
    /// A configuration that cannot be used.
    #[error("invalid datalog configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
}

/// The message, as `Display` prints it: readable where a `Debug` is shown, e.g. the error a
/// `main() -> Result<(), Box<dyn Error>>` returns.
impl fmt::Debug for DatalogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<PoolError> for DatalogError {
    fn from(e: PoolError) -> Self {
        DatalogError::Tx(TxError::Pool(e))
    }
}
