//! Mapping a pool into memory, and learning its granularity on the way.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use memmap2::{MmapMut, MmapOptions};

use super::pages::{check_size, map_anonymous_huge, PageSize};
use super::PoolError;
use crate::backend::{Granularity, GranularityChoice};

/// A pool's memory.
pub(crate) enum Mapping {
    /// Made by memmap2: page-cache files and anonymous memory.
    /// `_map` is held only to keep the memory mapped for the pool's lifetime.
    Mapped { _map: MmapMut, base: *mut u8 },
    /// A DAX mapping made with `MAP_SYNC`, which memmap2 cannot request.
    Sync { base: *mut u8, len: usize },
    /// Anonymous memory at a 2 MiB-aligned address advised `MADV_HUGEPAGE` (`pages.rs`).
    Huge { base: *mut u8, len: usize },
}

// SAFETY: the mapping is plain memory owned by this value (unmapped once, on drop), with no
// thread affinity, so it may move to another thread.
unsafe impl Send for Mapping {}
// SAFETY: sharing hands out only the base address. Every access the pool makes through it is
// atomic and of whole words (its streaming stores included: `Pool::nt_write`), and the
// non-atomic streaming primitives of `isa` are `unsafe` under the rule in the pool's module
// docs; so no access through a shared `Mapping` is a data race.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn base(&self) -> *mut u8 {
        match self {
            Mapping::Mapped { base, .. }
            | Mapping::Sync { base, .. }
            | Mapping::Huge { base, .. } => *base,
        }
    }

    /// Length of the mapping in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Mapping::Mapped { _map, .. } => _map.len(),
            Mapping::Sync { len, .. } | Mapping::Huge { len, .. } => *len,
        }
    }

    /// Anonymous memory of `size` bytes on `page_size` pages (2 MiB: see `pages.rs`).
    pub(crate) fn anonymous_paged(size: u64, page_size: PageSize) -> Result<Mapping, PoolError> {
        if page_size == PageSize::Base4K {
            return Mapping::anonymous(size);
        }
        check_size(size, page_size)?;
        let len = usize::try_from(size).map_err(|_| PoolError::InvalidSize {
            size,
            reason: "it does not fit this machine's address space".into(),
        })?;
        let base = map_anonymous_huge(len)?;
        Ok(Mapping::Huge { base, len })
    }

    /// Anonymous memory of `size` bytes.
    pub(crate) fn anonymous(size: u64) -> Result<Mapping, PoolError> {
        let len = usize::try_from(size).map_err(|_| PoolError::InvalidSize {
            size,
            reason: "it does not fit this machine's address space".into(),
        })?;
        let mut map =
            MmapOptions::new()
                .len(len)
                .map_anon()
                .map_err(|e| PoolError::InvalidSize {
                    size,
                    reason: format!("anonymous mapping failed: {e}"),
                })?;
        let base = map.as_mut_ptr();
        Ok(Mapping::Mapped { _map: map, base })
    }

    /// Map `size` bytes of `file`, choosing (or checking a forced) granularity.
    ///
    /// Unforced, a file that accepts `MAP_SYNC` is on persistent memory, and its region's
    /// persistence domain (`domain.rs`) picks byte or cache line; any other file is in the
    /// page cache.
    pub(crate) fn file(
        file: &File,
        path: &Path,
        size: u64,
        forced: Option<Granularity>,
    ) -> Result<(Mapping, GranularityChoice), PoolError> {
        let len = usize::try_from(size).map_err(|_| PoolError::InvalidSize {
            size,
            reason: "it does not fit this machine's address space".into(),
        })?;
        match forced {
            None => match map_sync(file, len) {
                Ok(m) => Ok((m, dax_granularity(file))),
                Err(e) => Ok((
                    map_shared(file, path, len)?,
                    GranularityChoice {
                        granularity: Granularity::Page,
                        basis: format!("MAP_SYNC was refused ({e}): the file is not on DAX"),
                    },
                )),
            },
            Some(Granularity::CacheLine) => match map_sync(file, len) {
                Ok(m) => Ok((m, GranularityChoice::forced(Granularity::CacheLine))),
                Err(e) => Err(PoolError::GranularityUnavailable {
                    path: path.to_path_buf(),
                    requested: "cache-line",
                    reason: format!(
                        "MAP_SYNC was refused ({e}): the file is not on a DAX file system"
                    ),
                }),
            },
            Some(g) => Ok((map_shared(file, path, len)?, GranularityChoice::forced(g))),
        }
    }
}

#[cfg(target_os = "linux")]
fn dax_granularity(file: &File) -> GranularityChoice {
    super::domain::granularity_of_dax_file(file)
}

#[cfg(not(target_os = "linux"))]
fn dax_granularity(_file: &File) -> GranularityChoice {
    GranularityChoice {
        granularity: Granularity::CacheLine,
        basis: "MAP_SYNC was accepted; persistence domains are read from Linux's sysfs only".into(),
    }
}

fn map_shared(file: &File, path: &Path, len: usize) -> Result<Mapping, PoolError> {
    // SAFETY: the pool file is ours to map; another process truncating it under us is the one
    // hazard of any file mapping, documented on `Pool`.
    let mapped = unsafe { MmapOptions::new().len(len).map_mut(file) };
    let mut map = mapped.map_err(|e| PoolError::Io {
        op: "map",
        path: path.to_path_buf(),
        source: e,
    })?;
    let base = map.as_mut_ptr();
    Ok(Mapping::Mapped { _map: map, base })
}

#[cfg(target_os = "linux")]
fn map_sync(file: &File, len: usize) -> std::io::Result<Mapping> {
    // SAFETY: a fresh shared mapping of our own file; on failure nothing is mapped.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Mapping::Sync {
        base: p as *mut u8,
        len,
    })
}

#[cfg(not(target_os = "linux"))]
fn map_sync(_file: &File, _len: usize) -> std::io::Result<Mapping> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if let Mapping::Sync { base, len } | Mapping::Huge { base, len } = *self {
            // SAFETY: base/len are exactly what mmap returned, unmapped once.
            unsafe { libc::munmap(base as *mut libc::c_void, len) };
        }
    }
}
