//! The exclusive lock a pool holds on its file, so that a second open (by this process or
//! another) is refused instead of mapping the same bytes twice, with two writers each
//! assuming it alone orders the persists.
//!
//! The lock is `flock(LOCK_EX | LOCK_NB)` through [`File::try_lock`]. It belongs to the open
//! file description, so two opens of one file in one process conflict just as two processes
//! do, and it goes away with the description: when the pool drops its `File`, or when the
//! process dies (a crashed holder never leaves a stale lock behind). A forked child shares the
//! description, and so the lock, until it execs (the descriptor is close-on-exec) or exits.

use std::fs::{File, TryLockError};
use std::io::ErrorKind;
use std::path::Path;

use super::PoolError;

/// Take the exclusive lock on `file` (opened from `path`) without waiting.
///
/// A lock held elsewhere is [`PoolError::AlreadyOpen`]. A file system that cannot lock is
/// [`PoolError::LockUnsupported`]: opening without the lock would silently give up the
/// protection, so the caller is told to move the file instead.
pub(crate) fn lock_exclusive(file: &File, path: &Path) -> Result<(), PoolError> {
    match file.try_lock() {
        Ok(()) => Ok(()),
        Err(TryLockError::WouldBlock) => Err(PoolError::AlreadyOpen {
            path: path.to_path_buf(),
        }),
        Err(TryLockError::Error(source)) if is_unsupported(&source) => {
            Err(PoolError::LockUnsupported {
                path: path.to_path_buf(),
                source,
            })
        }
        Err(TryLockError::Error(source)) => Err(PoolError::Io {
            op: "lock",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Whether a lock error means the file system (or platform) has no locks to give: `EOPNOTSUPP`
/// / `ENOTSUP` (std's `Unsupported`), or `ENOLCK`, which an NFS mount without a lock daemon
/// returns.
fn is_unsupported(error: &std::io::Error) -> bool {
    error.kind() == ErrorKind::Unsupported || error.raw_os_error() == Some(libc::ENOLCK)
}
