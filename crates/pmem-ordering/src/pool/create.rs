//! Creating a pool file so that its path names it only once it is whole.
//!
//! A pool is created *unpublished* ([`Pool::create_unpublished`]): its file is made without a
//! name (Linux `O_TMPFILE`) or under a random hidden name in the same directory, locked, sized,
//! mapped and given its header there. The caller formats whatever it keeps in the pool, then
//! [`Pool::publish`] links the file to its path with no-replace semantics (`linkat`, which
//! fails if the path exists) after an `fsync`, and syncs the directory. So a path never names a
//! half-made pool: two processes creating one path at once each make their own file, one link
//! wins and the other gets [`PoolError::AlreadyExists`] (and opens the winner's, which it finds
//! whole, or locked while the winner holds it). A creation that fails or is dropped before
//! publishing leaves nothing behind (an unnamed file vanishes with its descriptor, a named one
//! is removed; a crash in between can leave a hidden `.<name>.<random>.creating` file only
//! where the file system has no `O_TMPFILE`).
//!
//! A file an earlier build left at a path whose creation never finished (it wrote the file in
//! place) can be replaced: [`Pool::claim_unfinished`] locks it and proves it unfinished (empty,
//! or a header of the layout and nothing but zeros after it), and [`Pool::publish_over`] renames
//! the new pool over it while the claim holds its lock.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::header::{Header, HEADER_LEN, HEADER_PAGE, MAGIC};
use super::lock::lock_exclusive;
use super::mapping::Mapping;
use super::open::{classify_open_error, io_error, random_identity, PoolOptions};
use super::pages;
use super::{Pool, PoolError};
use crate::backend::Hardware;

/// Where an unpublished pool's file is until [`Pool::publish`]: the hidden name it has, if the
/// file system gave it none of its own.
#[derive(Debug)]
pub(crate) struct Staging {
    /// The hidden name (`None`: an `O_TMPFILE` file, which has no name).
    temporary: Option<PathBuf>,
    published: AtomicBool,
}

impl Drop for Staging {
    /// A pool dropped unpublished takes its file with it.
    fn drop(&mut self) {
        if let (Some(temporary), false) = (&self.temporary, *self.published.get_mut()) {
            let _ = std::fs::remove_file(temporary);
        }
    }
}

/// A file at a path that provably never finished creation, held locked: see
/// [`Pool::claim_unfinished`].
#[derive(Debug)]
pub struct UnfinishedFile {
    file: File,
    path: PathBuf,
}

/// The directory a file at `path` goes in.
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A new file in `dir` for a pool to be published at `path`: unnamed where the platform and
/// file system allow (and `unnamed` asks for it), else under a hidden random name (returned).
fn staged_file(
    path: &Path,
    dir: &Path,
    unnamed: bool,
) -> Result<(File, Option<PathBuf>), PoolError> {
    #[cfg(target_os = "linux")]
    if unnamed && Path::new("/proc/self/fd").is_dir() {
        use std::os::unix::fs::OpenOptionsExt;
        match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
        {
            Ok(file) => return Ok((file, None)),
            // No unnamed files on this file system: a hidden name instead.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
                ) => {}
            Err(e) => return Err(classify_open_error(path, e)),
        }
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let temporary = dir.join(format!(".{name}.{:016x}.creating", random_identity()));
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&temporary)
        {
            Ok(file) => return Ok((file, Some(temporary))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(classify_open_error(path, e)),
        }
    }
}

/// Give `file` (unnamed, made by `O_TMPFILE`) the name `to`, failing if `to` exists.
#[cfg(target_os = "linux")]
fn link_unnamed(file: &File, to: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::AsRawFd;
    let from = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL");
    let to = CString::new(to.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: both arguments are NUL-terminated strings that live across the call; `linkat`
    // reads them and touches no other memory of ours.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn link_unnamed(_file: &File, _to: &Path) -> std::io::Result<()> {
    unreachable!("unnamed pool files are made only on Linux")
}

/// Rename `from` to `to`, failing if `to` exists: for a file system without hard links.
#[cfg(target_os = "linux")]
fn rename_no_replace(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let invalid = || std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let from = CString::new(from.as_os_str().as_bytes()).map_err(|_| invalid())?;
    let to = CString::new(to.as_os_str().as_bytes()).map_err(|_| invalid())?;
    // SAFETY: both paths are NUL-terminated strings that live across the call; `renameat2`
    // reads them and touches no other memory of ours.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn rename_no_replace(_from: &Path, _to: &Path) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

/// Make the directory entries in `dir` durable.
fn sync_directory(dir: &Path, path: &Path) -> Result<(), PoolError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync the directory of", path, e))
}

impl Pool<Hardware> {
    /// Create a pool of `size` bytes holding `layout`, to be published at `path` by
    /// [`Pool::publish`] once the caller has formatted it: until then no other open can see
    /// it, and dropping it leaves nothing behind (see the module docs). Fails with
    /// [`PoolError::AlreadyExists`] if `path` names a file already (as `publish` does, should
    /// one appear meanwhile).
    pub fn create_unpublished(
        path: impl AsRef<Path>,
        layout: &str,
        size: u64,
        options: &PoolOptions,
    ) -> Result<Pool<Hardware>, PoolError> {
        let path = path.as_ref();
        if path.is_dir() {
            return Err(PoolError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        if path.symlink_metadata().is_ok() {
            return Err(PoolError::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        Pool::create_replacement(path, layout, size, options)
    }

    /// [`Pool::create_unpublished`] without the check that `path` is free: for a pool that is
    /// to replace, by [`Pool::publish_over`], the unfinished file there.
    pub fn create_replacement(
        path: &Path,
        layout: &str,
        size: u64,
        options: &PoolOptions,
    ) -> Result<Pool<Hardware>, PoolError> {
        Pool::create_staged(path, layout, size, options, true)
    }

    /// The pool of [`Pool::create_replacement`], its file unnamed only if `unnamed` allows.
    fn create_staged(
        path: &Path,
        layout: &str,
        size: u64,
        options: &PoolOptions,
        unnamed: bool,
    ) -> Result<Pool<Hardware>, PoolError> {
        let header = Header::new(layout, size, options.root_size, random_identity())?;
        let (file, temporary) = staged_file(path, directory_of(path), unnamed)?;
        let staging = Staging {
            temporary,
            published: AtomicBool::new(false),
        };
        // Nobody else can name the file, so the lock is uncontended; it is taken before
        // anything is written and travels with the file to its path.
        lock_exclusive(&file, path)?;
        pages::check_file(&file, path, size, options.page_size)?;
        file.set_len(size)
            .map_err(|e| io_error("set the length of", path, e))?;
        let (map, choice) = Mapping::file(&file, path, size, options.granularity)?;
        let mut pool = Pool::from_parts(
            map,
            Hardware::new(options.isa, choice.granularity, options.model),
            header,
            Some(path.to_path_buf()),
            choice.granularity,
        );
        pool.granularity_basis = Some(choice.basis);
        pool.write_header()?;
        pool.file = Some(file);
        pool.staging = Some(staging);
        Ok(pool)
    }

    /// Link this pool's file to its path (see the module docs): its data and length synced
    /// first, the directory after. [`PoolError::AlreadyExists`] if a file appeared at the path
    /// meanwhile (this pool stays unpublished, and is removed when dropped). Does nothing for
    /// a pool that is published already, or was opened.
    pub fn publish(&self) -> Result<(), PoolError> {
        let (Some(staging), Some(file), Some(path)) = (&self.staging, &self.file, &self.path)
        else {
            return Ok(());
        };
        if staging.published.load(Ordering::Acquire) {
            return Ok(());
        }
        file.sync_all()
            .map_err(|e| io_error("sync the new pool file for", path, e))?;
        let linked = match &staging.temporary {
            None => link_unnamed(file, path),
            Some(temporary) => match std::fs::hard_link(temporary, path) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP)) => {
                    // A file system without hard links: rename instead, still never replacing.
                    rename_no_replace(temporary, path)
                }
                Ok(()) => {
                    // Published under its path; the hidden name is only a second link.
                    let _ = std::fs::remove_file(temporary);
                    Ok(())
                }
                other => other,
            },
        };
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(PoolError::AlreadyExists {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(io_error("publish the new pool file as", path, e)),
        }
        staging.published.store(true, Ordering::Release);
        sync_directory(directory_of(path), path)
    }

    /// Publish this pool in place of `unfinished` (see [`Pool::claim_unfinished`]), replacing
    /// it with one rename, if the path still names that file; [`PoolError::AlreadyExists`] if
    /// another file took its place meanwhile. The pool must be unpublished, for that path.
    pub fn publish_over(&self, unfinished: UnfinishedFile) -> Result<(), PoolError> {
        let (Some(staging), Some(file), Some(path)) = (&self.staging, &self.file, &self.path)
        else {
            return Err(PoolError::NoFile {
                operation: "publishing a pool over an unfinished file",
            });
        };
        if staging.published.load(Ordering::Acquire) || *path != unfinished.path {
            return Err(PoolError::AlreadyExists {
                path: unfinished.path.clone(),
            });
        }
        let still_there = |at: &Path| {
            let (Ok(ours), Ok(now)) = (unfinished.file.metadata(), std::fs::metadata(at)) else {
                return false;
            };
            ours.dev() == now.dev() && ours.ino() == now.ino()
        };
        // Whoever replaces the unfinished file holds its lock, as the claim does: the path
        // cannot change between this check and the rename.
        if !still_there(path) {
            return Err(PoolError::AlreadyExists { path: path.clone() });
        }
        file.sync_all()
            .map_err(|e| io_error("sync the new pool file for", path, e))?;
        let renamed = match &staging.temporary {
            Some(temporary) => std::fs::rename(temporary, path),
            None => {
                // An unnamed file needs a name to be renamed from.
                let temporary = directory_of(path).join(format!(
                    ".{}.{:016x}.creating",
                    path.file_name().unwrap_or_default().to_string_lossy(),
                    random_identity()
                ));
                link_unnamed(file, &temporary).and_then(|()| {
                    std::fs::rename(&temporary, path).inspect_err(|_| {
                        let _ = std::fs::remove_file(&temporary);
                    })
                })
            }
        };
        renamed.map_err(|e| io_error("publish the new pool file as", path, e))?;
        staging.published.store(true, Ordering::Release);
        drop(unfinished);
        sync_directory(directory_of(path), path)
    }

    /// Lock the file at `path` and prove that it never finished creation as a pool of
    /// `layout`: it is empty, or it is as long as its header says and holds, after the header's
    /// page, nothing but zeros, under a header of `layout` that is whole (its magic may be
    /// zero: the header's last write). `None` for any other file, which must not be replaced.
    /// Fails as an open does ([`PoolError::AlreadyOpen`] while a pool holds the file).
    pub fn claim_unfinished(
        path: impl AsRef<Path>,
        layout: &str,
    ) -> Result<Option<UnfinishedFile>, PoolError> {
        let path = path.as_ref();
        let file = super::open::open_pool_file(path, super::open::Access::ReadWrite)?;
        lock_exclusive(&file, path)?;
        let len = file
            .metadata()
            .map_err(|e| io_error("read the metadata of", path, e))?
            .len();
        let claimed = UnfinishedFile {
            file,
            path: path.to_path_buf(),
        };
        if len == 0 {
            return Ok(Some(claimed));
        }
        if len < HEADER_PAGE {
            return Ok(None);
        }
        let mut header = [0u8; HEADER_LEN];
        claimed
            .file
            .read_exact_at(&mut header, 0)
            .map_err(|e| io_error("read the header of", path, e))?;
        if header[..8] == [0u8; 8] {
            header[..8].copy_from_slice(&MAGIC);
        }
        if Header::decode(path, &header, len, Some(layout)).is_err() {
            return Ok(None);
        }
        // Creation writes the header's bytes and nothing else before it is done.
        let mut chunk = vec![0u8; 1 << 20];
        let mut at = HEADER_LEN as u64;
        while at < len {
            let n = chunk.len().min((len - at) as usize);
            claimed
                .file
                .read_exact_at(&mut chunk[..n], at)
                .map_err(|e| io_error("read", path, e))?;
            if chunk[..n].iter().any(|&b| b != 0) {
                return Ok(None);
            }
            at += n as u64;
        }
        Ok(Some(claimed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: &str = "staging-tests";
    const SIZE: u64 = 64 << 10;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A pool staged under a hidden name, as on a file system without `O_TMPFILE`.
    fn named(path: &Path) -> Pool<Hardware> {
        Pool::create_staged(path, LAYOUT, SIZE, &PoolOptions::new(), false).unwrap()
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
    fn a_pool_staged_under_a_hidden_name_is_published_or_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.pool");
        let dropped = named(&path);
        let hidden = names(dir.path());
        assert_eq!(hidden.len(), 1);
        assert!(hidden[0].starts_with(".a.pool.") && hidden[0].ends_with(".creating"));
        drop(dropped);
        assert!(
            names(dir.path()).is_empty(),
            "the dropped pool left its file"
        );

        let first = named(&path);
        let second = named(&path);
        let stored = first.store_u64(first.root_offset(), 1).unwrap();
        first.persist(stored);
        first.publish().unwrap();
        assert!(matches!(
            second.publish(),
            Err(PoolError::AlreadyExists { .. })
        ));
        drop((first, second));
        assert_eq!(names(dir.path()), ["a.pool"]);
        let reopened = Pool::open(&path, LAYOUT, &PoolOptions::new()).unwrap();
        assert_eq!(reopened.load_u64(reopened.root_offset()).unwrap(), 1);
    }

    #[test]
    #[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
    fn a_pool_staged_under_a_hidden_name_replaces_a_claimed_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.pool");
        std::fs::File::create(&path).unwrap();
        let claim = Pool::claim_unfinished(&path, LAYOUT).unwrap().unwrap();
        let pool = named(&path);
        let stored = pool.store_u64(pool.root_offset(), 9).unwrap();
        pool.persist(stored);
        pool.publish_over(claim).unwrap();
        drop(pool);
        assert_eq!(names(dir.path()), ["b.pool"]);
        let reopened = Pool::open(&path, LAYOUT, &PoolOptions::new()).unwrap();
        assert_eq!(reopened.load_u64(reopened.root_offset()).unwrap(), 9);
    }
}
