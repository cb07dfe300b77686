//! Typed errors of pool creation, opening and access.

use std::fmt;
use std::path::PathBuf;

use super::MagicText;

/// Everything that can go wrong with a pool. Each case names what was found, so the message
/// alone tells the user what to fix.
///
/// `Debug` prints the same message as `Display`: `fn main() -> Result<(), Box<dyn Error>>`
/// reports an error with `Debug`, and a user should read a sentence there, not a struct dump.
#[non_exhaustive]
#[derive(thiserror::Error)]
pub enum PoolError {
    /// The pool file does not exist.
    #[error("pool file {path} does not exist")]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// The path names a directory.
    #[error("{path} is a directory, not a pool file")]
    IsDirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The pool file is already open: a pool holds an exclusive lock on its file from `create`
    /// or `open` until it is dropped, and this was a second open, by this process or another.
    #[error("pool file {path} is already open (in this or another process); close it first")]
    AlreadyOpen {
        /// The path given.
        path: PathBuf,
    },
    /// The pool file's file system cannot lock files, so the pool cannot keep a second open
    /// out; the pool is not opened rather than opened unprotected.
    #[error(
        "pool file {path} cannot be locked: its file system does not support file locks \
         ({source}); a pool needs an exclusive lock, so move the file to a file system that \
         supports flock (a local one)"
    )]
    LockUnsupported {
        /// The path given.
        path: PathBuf,
        /// The OS error the lock attempt returned.
        #[source]
        source: std::io::Error,
    },
    /// An operation that needs the pool's file was asked of a pool that has none.
    #[error("{operation} needs a pool file, but this pool is anonymous (made by Pool::anonymous)")]
    NoFile {
        /// What was asked.
        operation: &'static str,
    },
    /// A pool was to be created where a file already exists.
    #[error("cannot create pool {path}: the file already exists (open it, or remove it first)")]
    AlreadyExists {
        /// The path given.
        path: PathBuf,
    },
    /// The file is read-only but the pool needs to write it.
    #[error("pool file {path} is read-only, but a pool is opened for writing: make it writable, or read its header with Pool::inspect")]
    ReadOnly {
        /// The path given.
        path: PathBuf,
    },
    /// The file is too short to hold a pool header.
    #[error(
        "{path} is {len} bytes long, shorter than a pool header ({needed} bytes): not a pool file"
    )]
    TooShort {
        /// The path given.
        path: PathBuf,
        /// The file's length.
        len: u64,
        /// The header's length.
        needed: u64,
    },
    /// The header's magic is all zeros: pool creation was interrupted before it committed.
    #[error("{path} holds an incomplete pool: its creation was interrupted before the header was committed; remove the file and create the pool again")]
    Incomplete {
        /// The path given.
        path: PathBuf,
    },
    /// The file does not start with this library's magic.
    #[error(
        "{path} is not a pool file of this library: it starts with magic {}, not {}",
        MagicText(*.found),
        MagicText(*.expected)
    )]
    BadMagic {
        /// The path given.
        path: PathBuf,
        /// The magic found.
        found: [u8; 8],
        /// The magic expected.
        expected: [u8; 8],
    },
    /// The pool was written by another format version.
    #[error("{path} has pool format version {found}, but this library reads version {supported}: open it with the library version that wrote it")]
    VersionMismatch {
        /// The path given.
        path: PathBuf,
        /// The version found.
        found: u32,
        /// The version this library reads.
        supported: u32,
    },
    /// The header checksum does not match its contents.
    #[error("{path}: pool header checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): the header is corrupted")]
    ChecksumMismatch {
        /// The path given.
        path: PathBuf,
        /// The checksum stored in the header.
        stored: u32,
        /// The checksum of the header's bytes.
        computed: u32,
    },
    /// The pool holds another kind of data.
    #[error("{path} holds layout {found:?}, but layout {expected:?} was asked for: open it as {found:?}, or use another file")]
    LayoutMismatch {
        /// The path given.
        path: PathBuf,
        /// The layout asked for.
        expected: String,
        /// The layout in the header.
        found: String,
    },
    /// The size in the header is not the file's size.
    #[error("{path}: header says the pool is {header} bytes, but the file is {file} bytes (truncated or extended)")]
    SizeMismatch {
        /// The path given.
        path: PathBuf,
        /// The size in the header.
        header: u64,
        /// The file's size.
        file: u64,
    },
    /// The header's checksum holds but its fields contradict each other.
    #[error("{path}: pool header is inconsistent: {reason}")]
    CorruptHeader {
        /// The path given.
        path: PathBuf,
        /// Which fields disagree.
        reason: String,
    },
    /// A layout name that cannot be stored.
    #[error("layout name {name:?} is invalid: {reason}")]
    InvalidLayout {
        /// The name given.
        name: String,
        /// Why it cannot be stored.
        reason: &'static str,
    },
    /// A pool size that cannot be created.
    #[error("pool size {size} is invalid: {reason}")]
    InvalidSize {
        /// The size given.
        size: u64,
        /// Why.
        reason: String,
    },
    /// A forced granularity this file cannot give.
    #[error("{path} cannot be mapped with {requested} granularity: {reason}")]
    GranularityUnavailable {
        /// The path given.
        path: PathBuf,
        /// The granularity asked for.
        requested: &'static str,
        /// Why not.
        reason: String,
    },
    /// The page size asked for cannot back this pool here.
    #[error("the pool cannot be mapped with {requested} pages: {reason}")]
    PageSizeUnavailable {
        /// The page size asked for (`2m`, `4k`).
        requested: &'static str,
        /// Why not.
        reason: String,
    },
    /// An access outside the pool.
    #[error("access of {len} bytes at offset {offset:#x} is outside the pool of {size} bytes ({size:#x})")]
    OutOfBounds {
        /// Offset of the access.
        offset: u64,
        /// Its length.
        len: u64,
        /// The pool's size.
        size: u64,
    },
    /// An 8-byte atomic access at an offset that is not 8-byte aligned.
    #[error("8-byte atomic access at offset {offset:#x}, which is not 8-byte aligned")]
    Misaligned {
        /// Offset of the access.
        offset: u64,
    },
    /// The root object is smaller than the type asked for.
    #[error("the root object is {root_size} bytes, too small for a {needed}-byte type: create the pool with a larger PoolOptions::root_size")]
    RootTooSmall {
        /// Size of the root object.
        root_size: u64,
        /// Size of the type asked for.
        needed: u64,
    },
    /// Any other I/O failure, with the operation that failed.
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path given.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl fmt::Debug for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}
