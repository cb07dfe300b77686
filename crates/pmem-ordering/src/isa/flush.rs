//! Cache-line write-backs, prefetches and fences.
//!
//! A write-back takes the pool's [`Isa`], not a bare [`super::FlushKind`]: an `Isa` can only be
//! made by run-time detection ([`Isa::detected`], [`Isa::with_flush`]), so holding one proves the
//! CPU has its instruction, and no caller can issue `clwb` on a CPU without it.

use super::{cache_lines, FlushKind, Isa};

/// Write back one cache line with the flush instruction of `isa`.
///
/// # Safety
/// `line` must point into memory mapped in this process (a flush of an unmapped address faults).
#[inline(always)]
pub unsafe fn flush_line(isa: Isa, line: *const u8) {
    // SAFETY: the caller guarantees `line` is mapped; `isa` exists only if detection found its
    // flush instruction on this CPU.
    unsafe { flush_line_of(isa.flush(), line) }
}

/// Write back one cache line with the instruction `kind`: [`flush_line`] for callers that
/// dispatched on the kind already (a constant `kind` folds the match away).
///
/// # Safety
/// `line` must point into memory mapped in this process, and this CPU must have `kind`'s
/// instruction: `kind` was read from an [`Isa`] (which only detection makes).
#[inline(always)]
pub(crate) unsafe fn flush_line_of(kind: FlushKind, line: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // The asm blocks below are not `nomem`: the compiler must treat them as touching memory,
        // so no store to the line is moved after its flush.
        match kind {
            // SAFETY: the caller guarantees `line` is mapped and that the CPU has `kind`.
            FlushKind::Clwb => unsafe {
                std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
            },
            // SAFETY: as above.
            FlushKind::ClflushOpt => unsafe {
                std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
            },
            // SAFETY: as above (detection checked CPUID's CLFSH bit).
            FlushKind::Clflush => unsafe { std::arch::x86_64::_mm_clflush(line) },
            FlushKind::Portable => {
                std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst)
            }
        }
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    {
        // Only `FlushKind::Portable` can be detected here.
        debug_assert_eq!(kind, FlushKind::Portable);
        let _ = line;
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// Write back every cache line `[addr, addr + len)` touches, with the flush instruction of `isa`.
///
/// # Safety
/// The whole range must be mapped in this process.
#[inline]
pub unsafe fn flush_range(isa: Isa, addr: *const u8, len: usize) {
    // SAFETY: the caller's contract.
    let _ = unsafe { flush_lines(isa, addr, len) };
}

/// [`flush_range`], returning the number of lines written back (what
/// [`super::cache_line_count`] says), counted by the loop itself.
///
/// # Safety
/// The whole range must be mapped in this process.
#[inline]
pub unsafe fn flush_lines(isa: Isa, addr: *const u8, len: usize) -> usize {
    // SAFETY: the caller's contract; `isa` proves the CPU has its flush instruction.
    unsafe { flush_lines_of(isa.flush(), addr, len) }
}

/// [`flush_lines`] with the instruction `kind`, for callers that dispatched on it already.
///
/// # Safety
/// The whole range must be mapped in this process, and `kind` was read from an [`Isa`].
#[inline(always)]
pub(crate) unsafe fn flush_lines_of(kind: FlushKind, addr: *const u8, len: usize) -> usize {
    let mut lines = 0;
    for line in cache_lines(addr.addr(), len) {
        // SAFETY: every line of a mapped range is mapped (mappings are page granular); `kind`
        // runs on this CPU (the caller's contract).
        unsafe { flush_line_of(kind, addr.with_addr(line)) };
        lines += 1;
    }
    lines
}

/// Prefetch the cache line holding `addr` into all cache levels. A prefetch never faults, so
/// any address is allowed.
#[inline(always)]
pub fn prefetch_line(addr: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: prefetcht0 is a hint: it cannot fault or change memory, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = addr;
}

/// A store fence: orders earlier flushes and non-temporal stores before later stores.
#[inline(always)]
pub fn sfence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: sfence has no preconditions and exists on every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A full fence (`mfence`): orders loads as well as stores.
#[inline(always)]
pub fn mfence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: mfence has no preconditions and exists on every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_mfence()
    };
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}
