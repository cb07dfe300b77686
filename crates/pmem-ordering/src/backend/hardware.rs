//! The hardware backend: real instructions on the mapping.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Backend, Granularity};
use crate::barrier::PersistModel;
use crate::isa::{self, Isa};

/// Runs the real persist instructions of the chosen [`Isa`] on the pool's mapping.
///
/// What a flush does depends on the pool's [`Granularity`]: cache-line write-backs for
/// `CacheLine` and `Emulated`, nothing for `Byte` (eADR), and `msync` for `Page`.
/// At page granularity a non-temporal store is a plain store followed at once by `msync`, since
/// the page cache has no other path to the file.
#[derive(Clone, Copy, Debug)]
pub struct Hardware {
    isa: Isa,
    granularity: Granularity,
    model: PersistModel,
}

impl Hardware {
    /// A backend for memory of the given granularity, using `isa` and `model`.
    pub fn new(isa: Isa, granularity: Granularity, model: PersistModel) -> Hardware {
        Hardware {
            isa,
            granularity,
            model,
        }
    }

    /// The instructions in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The granularity in use.
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// `msync` the pages covering `[addr, addr + len)`.
    fn msync(addr: *const u8, len: usize) {
        let page = page_size();
        let start = addr as usize & !(page - 1);
        let end = addr as usize + len;
        // SAFETY: the range lies in the pool's file mapping (caller's contract of `flush`);
        // msync only writes back pages, it does not change the mapping.
        let rc = unsafe { libc::msync(start as *mut libc::c_void, end - start, libc::MS_SYNC) };
        // msync on a valid shared file mapping only fails on I/O errors, which would mean the
        // device lost data: there is no way to continue correctly.
        assert_eq!(rc, 0, "msync failed: {}", std::io::Error::last_os_error());
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl Backend for Hardware {
    #[inline]
    fn model(&self) -> PersistModel {
        self.model
    }

    #[inline]
    unsafe fn store(&self, dst: *mut u8, src: &[u8]) {
        // SAFETY: in range by the trait's contract.
        unsafe { crate::mem::store_bytes(dst, src) }
    }

    #[inline]
    unsafe fn store_u64(&self, dst: *mut u64, value: u64) {
        // SAFETY: aligned and in range by the trait's contract.
        unsafe { AtomicU64::from_ptr(dst).store(value, Ordering::Release) }
    }

    #[inline]
    unsafe fn compare_exchange_u64(
        &self,
        dst: *mut u64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        // SAFETY: aligned and in range by the trait's contract.
        unsafe {
            AtomicU64::from_ptr(dst).compare_exchange(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
        }
    }

    #[inline]
    unsafe fn nt_store(&self, dst: *mut u8, src: &[u8]) {
        match self.granularity {
            Granularity::Page => {
                // SAFETY: in range by the trait's contract.
                unsafe { crate::mem::store_bytes(dst, src) };
                Hardware::msync(dst, src.len());
            }
            // SAFETY: in range and not accessed by other threads by the trait's contract; pool
            // memory never overlaps `src`; `self.isa` was detected on this CPU.
            _ => unsafe { isa::nt_copy(self.isa, dst, src) },
        }
    }

    #[inline]
    unsafe fn flush(&self, addr: *const u8, len: usize) -> usize {
        match self.granularity {
            Granularity::CacheLine | Granularity::Emulated => {
                // SAFETY: in range by the trait's contract.
                unsafe { isa::flush_lines(self.isa, addr, len) }
            }
            Granularity::Page => {
                if len > 0 {
                    Hardware::msync(addr, len);
                }
                isa::cache_line_count(addr as usize, len)
            }
            Granularity::Byte => 0,
        }
    }

    #[inline]
    fn fence(&self) {
        isa::sfence();
    }
}
