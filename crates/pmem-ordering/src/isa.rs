//! The persist instructions: cache-line flushes, fences, non-temporal stores and streaming copies.
//!
//! The instruction set is chosen once at start-up from CPUID and cached ([`Isa::detected`]), with
//! the fallback chains libpmem2 uses: `clwb` -> `clflushopt` -> `clflush` for flushes and
//! AVX-512 -> AVX -> SSE2 for streaming copies. Stable Rust has no `clwb`/`clflushopt` intrinsic
//! and `is_x86_feature_detected!` knows neither, so both are detected from CPUID leaf 7
//! (EBX bit 24 = clwb, bit 23 = clflushopt) and emitted with `asm!`.
//!
//! A pool keeps its own [`Isa`] value, so a test or benchmark can force a weaker choice
//! ([`Isa::with_flush`], [`Isa::with_copy`]) for one pool without touching any other.
//!
//! On targets other than x86-64 every flush is a no-op, fences are `SeqCst` atomic fences and
//! streaming copies are plain copies: persistence there relies on `msync` (page granularity).

use std::fmt;
use std::sync::OnceLock;

/// Size of a cache line in bytes; the unit of flushing and of the simulator's bookkeeping.
pub const CACHE_LINE: usize = 64;

/// Which instruction writes a cache line back to the persistence domain.
///
/// Ordered from weakest to strongest, so `a < b` means `b` is the preferred choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FlushKind {
    /// No flush instruction: non-x86 targets, where persistence relies on `msync`.
    Portable,
    /// `clflush`: evicts the line; ordered with other stores, so it needs no fence.
    Clflush,
    /// `clflushopt`: evicts the line; weakly ordered, needs a following `sfence`.
    ClflushOpt,
    /// `clwb`: writes the line back and may keep it cached; needs a following `sfence`.
    Clwb,
}

impl FlushKind {
    /// Every flush kind, weakest first.
    pub const ALL: [FlushKind; 4] = [
        FlushKind::Portable,
        FlushKind::Clflush,
        FlushKind::ClflushOpt,
        FlushKind::Clwb,
    ];

    /// The instruction's mnemonic, as reports print it.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Portable => "none",
            FlushKind::Clflush => "clflush",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clwb => "clwb",
        }
    }

    /// Whether a flush of this kind is ordered by itself (no fence needed for its durability).
    pub fn is_self_ordered(self) -> bool {
        matches!(self, FlushKind::Clflush)
    }
}

/// Which streaming (non-temporal) stores copy bulk data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CopyKind {
    /// Plain copies (non-x86 targets) or `movnti` 8 bytes at a time (x86-64 without SSE2 use).
    Portable,
    /// 16-byte `movntdq` (SSE2, present on every x86-64).
    Sse2,
    /// 32-byte `vmovntdq` (AVX).
    Avx,
    /// 64-byte `vmovntdq` (AVX-512F): one store per cache line.
    Avx512,
}

impl CopyKind {
    /// Every copy kind, weakest first.
    pub const ALL: [CopyKind; 4] = [
        CopyKind::Portable,
        CopyKind::Sse2,
        CopyKind::Avx,
        CopyKind::Avx512,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            CopyKind::Portable => "movnti",
            CopyKind::Sse2 => "sse2",
            CopyKind::Avx => "avx",
            CopyKind::Avx512 => "avx512",
        }
    }
}

/// Asked for an instruction this CPU does not have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    /// The CPU lacks the requested flush instruction.
    #[error("this CPU does not support the {} flush instruction", .0.name())]
    FlushUnsupported(FlushKind),
    /// The CPU lacks the requested streaming-store width.
    #[error("this CPU does not support {} streaming stores", .0.name())]
    CopyUnsupported(CopyKind),
}

/// What the CPU offers, read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuFeatures {
    clwb: bool,
    clflushopt: bool,
    clflush: bool,
    sse2: bool,
    avx: bool,
    avx512f: bool,
}

fn cpu_features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(read_cpu_features)
}

#[cfg(target_arch = "x86_64")]
fn read_cpu_features() -> CpuFeatures {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is present on every x86-64 CPU; leaf 0 gives the highest standard leaf.
    let max_leaf = __cpuid(0).eax;
    let leaf1 = __cpuid(1);
    let (clwb, clflushopt) = if max_leaf >= 7 {
        let leaf7 = __cpuid_count(7, 0);
        (leaf7.ebx & (1 << 24) != 0, leaf7.ebx & (1 << 23) != 0)
    } else {
        (false, false)
    };
    CpuFeatures {
        clwb,
        clflushopt,
        // CPUID.1:EDX bit 19 = CLFSH.
        clflush: leaf1.edx & (1 << 19) != 0,
        sse2: std::arch::is_x86_feature_detected!("sse2"),
        avx: std::arch::is_x86_feature_detected!("avx"),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn read_cpu_features() -> CpuFeatures {
    CpuFeatures {
        clwb: false,
        clflushopt: false,
        clflush: false,
        sse2: false,
        avx: false,
        avx512f: false,
    }
}

/// The instruction choice of one pool: a flush kind and a streaming-copy kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Isa {
    flush: FlushKind,
    copy: CopyKind,
}

impl Isa {
    /// The strongest instructions this CPU supports, detected once and cached.
    pub fn detected() -> Isa {
        static CHOSEN: OnceLock<Isa> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let best_flush = FlushKind::ALL
                .into_iter()
                .rev()
                .find(|&k| Isa::cpu_has_flush(k))
                .unwrap_or(FlushKind::Portable);
            let best_copy = CopyKind::ALL
                .into_iter()
                .rev()
                .find(|&k| Isa::cpu_has_copy(k))
                .unwrap_or(CopyKind::Portable);
            Isa {
                flush: best_flush,
                copy: best_copy,
            }
        })
    }

    /// The flush instruction in use.
    pub fn flush(self) -> FlushKind {
        self.flush
    }

    /// The streaming-copy kind in use.
    pub fn copy(self) -> CopyKind {
        self.copy
    }

    /// Whether this CPU can execute the given flush kind.
    pub fn cpu_has_flush(kind: FlushKind) -> bool {
        let f = cpu_features();
        match kind {
            FlushKind::Portable => true,
            FlushKind::Clflush => f.clflush,
            FlushKind::ClflushOpt => f.clflushopt,
            FlushKind::Clwb => f.clwb,
        }
    }

    /// Whether this CPU can execute the given streaming-copy kind.
    pub fn cpu_has_copy(kind: CopyKind) -> bool {
        let f = cpu_features();
        match kind {
            CopyKind::Portable => true,
            CopyKind::Sse2 => f.sse2,
            CopyKind::Avx => f.avx,
            CopyKind::Avx512 => f.avx512f,
        }
    }

    /// Every flush kind this CPU can run (so tests can cover each path).
    pub fn supported_flushes() -> Vec<FlushKind> {
        FlushKind::ALL
            .into_iter()
            .filter(|&k| Isa::cpu_has_flush(k))
            .collect()
    }

    /// Every streaming-copy kind this CPU can run.
    pub fn supported_copies() -> Vec<CopyKind> {
        CopyKind::ALL
            .into_iter()
            .filter(|&k| Isa::cpu_has_copy(k))
            .collect()
    }

    /// The same choice with another flush kind; an error if the CPU lacks it.
    pub fn with_flush(self, kind: FlushKind) -> Result<Isa, IsaError> {
        if Isa::cpu_has_flush(kind) {
            Ok(Isa {
                flush: kind,
                ..self
            })
        } else {
            Err(IsaError::FlushUnsupported(kind))
        }
    }

    /// The same choice with another streaming-copy kind; an error if the CPU lacks it.
    pub fn with_copy(self, kind: CopyKind) -> Result<Isa, IsaError> {
        if Isa::cpu_has_copy(kind) {
            Ok(Isa { copy: kind, ..self })
        } else {
            Err(IsaError::CopyUnsupported(kind))
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} + {} streaming stores",
            self.flush.name(),
            self.copy.name()
        )
    }
}

/// The start address of every cache line that `[addr, addr + len)` touches, in order.
///
/// The start is aligned *down* to its line and the end is computed from the unaligned
/// `addr + len`, so a range that begins mid-line and ends mid-line includes both partial lines.
/// An empty range touches no line.
#[inline]
pub fn cache_lines(addr: usize, len: usize) -> impl Iterator<Item = usize> {
    let first = addr & !(CACHE_LINE - 1);
    let end = if len == 0 { first } else { addr + len };
    (first..end).step_by(CACHE_LINE)
}

/// Write back one cache line with the given instruction.
///
/// # Safety
/// `line` must point into memory mapped in this process (a flush of an unmapped address faults).
#[inline(always)]
pub unsafe fn flush_line(kind: FlushKind, line: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        // The asm blocks below are not `nomem`: the compiler must treat them as touching memory,
        // so no store to the line is moved after its flush.
        match kind {
            // SAFETY: the caller guarantees `line` is mapped; the CPU was checked to support the
            // instruction when this `Isa` was built.
            FlushKind::Clwb => unsafe {
                std::arch::asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
            },
            // SAFETY: as above.
            FlushKind::ClflushOpt => unsafe {
                std::arch::asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
            },
            // SAFETY: as above; clflush exists on every x86-64 CPU.
            FlushKind::Clflush => unsafe { std::arch::x86_64::_mm_clflush(line) },
            FlushKind::Portable => {
                std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst)
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, line);
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// Write back every cache line `[addr, addr + len)` touches.
///
/// # Safety
/// The whole range must be mapped in this process.
#[inline]
pub unsafe fn flush_range(kind: FlushKind, addr: *const u8, len: usize) {
    for line in cache_lines(addr as usize, len) {
        // SAFETY: every line of a mapped range is mapped (mappings are page granular).
        unsafe { flush_line(kind, line as *const u8) };
    }
}

/// Prefetch the cache line holding `addr` into all cache levels. A prefetch never faults, so
/// any address is allowed.
#[inline(always)]
pub fn prefetch_line(addr: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetcht0 is a hint: it cannot fault or change memory, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// A store fence: orders earlier flushes and non-temporal stores before later stores.
#[inline(always)]
pub fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions and exists on every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A full fence (`mfence`): orders loads as well as stores.
#[inline(always)]
pub fn mfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: mfence has no preconditions and exists on every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_mfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// A non-temporal 8-byte store (`movnti`).
///
/// # Safety
/// `dst` must be valid for an 8-byte write and 8-byte aligned.
#[inline(always)]
pub unsafe fn movnti_u64(dst: *mut u64, value: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller guarantees `dst` is valid and aligned.
    unsafe {
        std::arch::x86_64::_mm_stream_si64(dst as *mut i64, value as i64)
    };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: as above.
    unsafe {
        (*(dst as *const std::sync::atomic::AtomicU64))
            .store(value, std::sync::atomic::Ordering::Relaxed)
    };
}

/// Copy `src` to `dst` with non-temporal stores, using the streaming width of `isa`.
///
/// Bytes that do not fill an aligned 8-byte word (a ragged head or tail) cannot be streamed
/// without rewriting their neighbours, so they are stored temporally and flushed with the
/// `isa`'s flush instruction; after the next `sfence` the whole range is durable either way.
///
/// # Safety
/// `dst .. dst + src.len()` must be mapped, writable, and not overlap `src`.
pub unsafe fn nt_copy(isa: Isa, dst: *mut u8, src: &[u8]) {
    let mut d = dst as usize;
    let mut s = src;
    // Ragged head up to the next 8-byte boundary.
    let head = ((8 - d % 8) % 8).min(s.len());
    if head > 0 {
        // SAFETY: in range by the caller's contract.
        unsafe { store_ragged(isa, d as *mut u8, &s[..head]) };
        d += head;
        s = &s[head..];
    }
    // 8-byte words up to the next line boundary.
    while s.len() >= 8 && !d.is_multiple_of(CACHE_LINE) {
        // SAFETY: d is 8-aligned and in range.
        unsafe { movnti_u64(d as *mut u64, read_u64(s)) };
        d += 8;
        s = &s[8..];
    }
    // Whole lines.
    let lines = s.len() / CACHE_LINE;
    if lines > 0 {
        // SAFETY: d is line aligned and `lines` whole lines are in range.
        unsafe { stream_lines(isa.copy(), d as *mut u8, &s[..lines * CACHE_LINE]) };
        d += lines * CACHE_LINE;
        s = &s[lines * CACHE_LINE..];
    }
    while s.len() >= 8 {
        // SAFETY: d is 8-aligned and in range.
        unsafe { movnti_u64(d as *mut u64, read_u64(s)) };
        d += 8;
        s = &s[8..];
    }
    if !s.is_empty() {
        // SAFETY: in range by the caller's contract.
        unsafe { store_ragged(isa, d as *mut u8, s) };
    }
}

fn read_u64(s: &[u8]) -> u64 {
    u64::from_ne_bytes(s[..8].try_into().expect("slice of at least 8 bytes"))
}

/// Temporal store of fewer than 8 bytes inside one word, then a flush of its line.
///
/// # Safety
/// `dst .. dst + bytes.len()` must be mapped and writable.
unsafe fn store_ragged(isa: Isa, dst: *mut u8, bytes: &[u8]) {
    // SAFETY: in range by the caller's contract.
    unsafe {
        crate::mem::store_bytes(dst, bytes);
        flush_range(isa.flush(), dst, bytes.len());
    }
}

/// Stream whole cache lines.
///
/// # Safety
/// `dst` is 64-byte aligned and `src.len()` is a multiple of 64 bytes, all mapped and writable.
unsafe fn stream_lines(kind: CopyKind, dst: *mut u8, src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        match kind {
            // SAFETY: the kind was checked against CPUID when the Isa was built; alignment and
            // range hold by the caller's contract.
            CopyKind::Avx512 => unsafe { stream_lines_avx512(dst, src) },
            // SAFETY: as above.
            CopyKind::Avx => unsafe { stream_lines_avx(dst, src) },
            // SAFETY: as above; SSE2 is part of x86-64.
            CopyKind::Sse2 => unsafe { stream_lines_sse2(dst, src) },
            CopyKind::Portable => {
                for (i, word) in src.chunks_exact(8).enumerate() {
                    // SAFETY: dst + 8i is 8-aligned and in range.
                    unsafe { movnti_u64(dst.add(8 * i) as *mut u64, read_u64(word)) };
                }
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = kind;
        // SAFETY: in range by the caller's contract.
        unsafe { crate::mem::store_bytes(dst, src) };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_lines_avx512(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::*;
    for (i, line) in src.chunks_exact(64).enumerate() {
        // SAFETY: unaligned load from a 64-byte slice; dst + 64i is 64-aligned and in range.
        unsafe {
            let v = _mm512_loadu_si512(line.as_ptr() as *const __m512i);
            _mm512_stream_si512(dst.add(64 * i) as *mut __m512i, v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn stream_lines_avx(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::*;
    for (i, half) in src.chunks_exact(32).enumerate() {
        // SAFETY: unaligned load from a 32-byte slice; dst + 32i is 32-aligned and in range.
        unsafe {
            let v = _mm256_loadu_si256(half.as_ptr() as *const __m256i);
            _mm256_stream_si256(dst.add(32 * i) as *mut __m256i, v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
unsafe fn stream_lines_sse2(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::*;
    for (i, quarter) in src.chunks_exact(16).enumerate() {
        // SAFETY: unaligned load from a 16-byte slice; dst + 16i is 16-aligned and in range.
        unsafe {
            let v = _mm_loadu_si128(quarter.as_ptr() as *const __m128i);
            _mm_stream_si128(dst.add(16 * i) as *mut __m128i, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Every line a byte of the range falls in is flushed, and no other line.
        #[test]
        fn flushed_lines_are_exactly_the_touched_lines(addr in 0usize..1 << 20, len in 0usize..4096) {
            let flushed: Vec<usize> = cache_lines(addr, len).collect();
            let expected: BTreeSet<usize> =
                (addr..addr + len).map(|b| b / CACHE_LINE * CACHE_LINE).collect();
            let flushed_set: BTreeSet<usize> = flushed.iter().copied().collect();
            prop_assert_eq!(flushed.len(), flushed_set.len(), "a line was flushed twice");
            prop_assert_eq!(flushed_set, expected);
        }

        /// Streaming copies land every byte, whatever the alignment, with every copy kind.
        #[test]
        fn nt_copy_copies_exactly(offset in 0usize..128, data in proptest::collection::vec(any::<u8>(), 0..700)) {
            for flush in Isa::supported_flushes() {
                for copy in Isa::supported_copies() {
                    let isa = Isa::detected().with_flush(flush).unwrap().with_copy(copy).unwrap();
                    let mut buf = vec![0xAAu8; 1024];
                    // SAFETY: offset + data.len() < 1024 and buf does not overlap data.
                    unsafe { nt_copy(isa, buf.as_mut_ptr().add(offset), &data) };
                    sfence();
                    prop_assert!(buf[..offset].iter().all(|&b| b == 0xAA));
                    prop_assert_eq!(&buf[offset..offset + data.len()], &data[..]);
                    prop_assert!(buf[offset + data.len()..].iter().all(|&b| b == 0xAA));
                }
            }
        }
    }

    #[test]
    fn detection_picks_the_strongest_supported_instruction() {
        let isa = Isa::detected();
        for k in FlushKind::ALL {
            if k > isa.flush() {
                assert!(
                    !Isa::cpu_has_flush(k),
                    "{k:?} is supported but weaker {:?} chosen",
                    isa.flush()
                );
            }
        }
        for k in CopyKind::ALL {
            if k > isa.copy() {
                assert!(!Isa::cpu_has_copy(k));
            }
        }
    }

    #[test]
    fn forcing_a_weaker_instruction_is_honoured() {
        let isa = Isa::detected().with_flush(FlushKind::Portable).unwrap();
        assert_eq!(isa.flush(), FlushKind::Portable);
        for k in Isa::supported_flushes() {
            assert_eq!(Isa::detected().with_flush(k).unwrap().flush(), k);
        }
    }

    #[test]
    fn every_supported_flush_runs_on_real_memory() {
        let buf = vec![1u8; 4096];
        for k in Isa::supported_flushes() {
            // SAFETY: buf is mapped for its whole length.
            unsafe { flush_range(k, buf.as_ptr().add(3), 4000) };
        }
        sfence();
        mfence();
    }
}
