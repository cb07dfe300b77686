//! The hardware backend: real instructions on the mapping.

use std::sync::atomic::{AtomicU64, Ordering};

use super::{Backend, Granularity};
use crate::barrier::PersistModel;
use crate::isa::{self, FlushKind, Isa};

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
    /// What a flush does, from `granularity` and `isa`: chosen once here so that a flush
    /// dispatches once, not on the granularity and then on the instruction.
    flush_mode: FlushMode,
}

/// The one dispatch of [`Hardware`]'s flush: the granularity and flush instruction combined,
/// as one flat enum (a nested one would match twice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlushMode {
    /// eADR ([`Granularity::Byte`]): nothing to write back.
    Skip,
    /// [`Granularity::Page`]: `msync` the range.
    Msync,
    /// Cache-line write-backs with `clwb` (this and the next three are the pool's [`Isa`]'s
    /// flush instruction, which the CPU has: the mode was read from it).
    Clwb,
    /// ... with `clflushopt`.
    ClflushOpt,
    /// ... with `clflush`.
    Clflush,
    /// ... with none ([`FlushKind::Portable`]).
    Portable,
}

impl FlushMode {
    fn of(granularity: Granularity, isa: Isa) -> FlushMode {
        match granularity {
            Granularity::Byte => FlushMode::Skip,
            Granularity::Page => FlushMode::Msync,
            Granularity::CacheLine | Granularity::Emulated => match isa.flush() {
                FlushKind::Clwb => FlushMode::Clwb,
                FlushKind::ClflushOpt => FlushMode::ClflushOpt,
                FlushKind::Clflush => FlushMode::Clflush,
                FlushKind::Portable => FlushMode::Portable,
            },
        }
    }
}

impl Hardware {
    /// A backend for memory of the given granularity, using `isa` and `model`.
    pub fn new(isa: Isa, granularity: Granularity, model: PersistModel) -> Hardware {
        Hardware {
            isa,
            granularity,
            model,
            flush_mode: FlushMode::of(granularity, isa),
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
        // SAFETY: in the mapping by the trait's contract, and so are the words containing the
        // range's ends (the mapping is a whole number of aligned words).
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
                // SAFETY: in the mapping by the trait's contract, with its ends' words (as for
                // `store`).
                unsafe { crate::mem::store_bytes(dst, src) };
                Hardware::msync(dst, src.len());
            }
            // SAFETY: in range, with its ends' words, by the trait's contract; pool memory never
            // overlaps `src`; every access of other threads is a whole-word atomic one (the
            // pool's); `self.isa` was detected on this CPU.
            _ => unsafe { isa::nt_store_words(self.isa, dst, src) },
        }
    }

    // Always inlined: the pool's persist paths then make this one dispatch in place.
    #[inline(always)]
    unsafe fn flush(&self, addr: *const u8, len: usize) -> usize {
        // One match over every mode, each arm with its instruction as a constant, so the
        // per-line loop has no dispatch left.
        match self.flush_mode {
            // SAFETY: in range by the trait's contract; the CPU has `clwb`: the mode was made
            // from `self.isa`, which only detection on this CPU makes.
            FlushMode::Clwb => unsafe { isa::flush_lines_of(FlushKind::Clwb, addr, len) },
            // SAFETY: in range by the trait's contract; the CPU has `clflushopt` (as for clwb).
            FlushMode::ClflushOpt => unsafe {
                isa::flush_lines_of(FlushKind::ClflushOpt, addr, len)
            },
            // SAFETY: in range by the trait's contract; the CPU has `clflush` (as for clwb).
            FlushMode::Clflush => unsafe { isa::flush_lines_of(FlushKind::Clflush, addr, len) },
            // SAFETY: in range by the trait's contract; the portable kind runs anywhere.
            FlushMode::Portable => unsafe { isa::flush_lines_of(FlushKind::Portable, addr, len) },
            FlushMode::Msync => {
                if len > 0 {
                    Hardware::msync(addr, len);
                }
                isa::cache_line_count(addr as usize, len)
            }
            FlushMode::Skip => 0,
        }
    }

    #[inline]
    fn fence(&self) {
        isa::sfence();
    }
}
