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
//! Under Miri, which cannot run `cpuid` or `asm!`, detection finds only the same portable
//! instructions (see `detect`).

mod crc;
mod detect;
mod flush;
mod keys;
mod pairs;
mod stream;

pub use crc::{crc32c, crc32c_append};
pub(crate) use flush::flush_lines_of;
pub use flush::{flush_line, flush_lines, flush_range, mfence, prefetch_line, sfence};
pub use keys::{key_hits_of_line, KeySplat};
pub use pairs::copy_pairs;
pub use stream::{movnti_u64, nt_copy, nt_store_words};

use std::fmt;
use std::sync::OnceLock;

use detect::cpu_features;

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

/// Asked for an instruction this CPU does not have. `Debug` prints the `Display` message.
#[derive(Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IsaError {
    /// The CPU lacks the requested flush instruction.
    #[error(
        "this CPU does not support the {} flush instruction: use one that Isa::detected() allows",
        .0.name()
    )]
    FlushUnsupported(FlushKind),
    /// The CPU lacks the requested streaming-store width.
    #[error(
        "this CPU does not support {} streaming stores: use a width that Isa::detected() allows",
        .0.name()
    )]
    CopyUnsupported(CopyKind),
}

impl std::fmt::Debug for IsaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// The instruction choice of one pool: a flush kind and a streaming-copy kind.
///
/// An `Isa` is a capability: it can only be made by run-time detection ([`Isa::detected`]) or
/// from one by a checked change ([`Isa::with_flush`], [`Isa::with_copy`]), so every instruction
/// it names runs on this CPU. [`flush_line`], [`flush_range`] and [`nt_copy`] take one for that
/// reason.
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
    CacheLines { next: first, end }
}

/// The iterator of [`cache_lines`]: a plain loop over line starts (a `step_by` range cost more
/// than the flush it drives on paths that flush a line or two).
struct CacheLines {
    next: usize,
    end: usize,
}

impl Iterator for CacheLines {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.next >= self.end {
            return None;
        }
        let line = self.next;
        self.next += CACHE_LINE;
        Some(line)
    }
}

/// How many lines [`cache_lines`] yields for `[addr, addr + len)`, without walking them.
#[inline]
pub fn cache_line_count(addr: usize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (addr + len - 1) / CACHE_LINE - addr / CACHE_LINE + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        // Miri interprets every instruction: a few cases keep its run short.
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 3 } else { 256 }))]

        /// Every line a byte of the range falls in is flushed, and no other line. Integer
        /// arithmetic only, so nothing for Miri to check, and slow there.
        #[test]
        #[cfg_attr(miri, ignore)]
        fn flushed_lines_are_exactly_the_touched_lines(addr in 0usize..1 << 20, len in 0usize..4096) {
            let flushed: Vec<usize> = cache_lines(addr, len).collect();
            let expected: BTreeSet<usize> =
                (addr..addr + len).map(|b| b / CACHE_LINE * CACHE_LINE).collect();
            let flushed_set: BTreeSet<usize> = flushed.iter().copied().collect();
            prop_assert_eq!(flushed.len(), flushed_set.len(), "a line was flushed twice");
            prop_assert_eq!(flushed_set, expected);
            prop_assert_eq!(cache_line_count(addr, len), flushed.len());
        }

        /// Streaming copies land every byte, whatever the alignment, with every copy kind.
        #[test]
        fn nt_copy_copies_exactly(offset in 0usize..128, data in proptest::collection::vec(any::<u8>(), 0..700)) {
            for flush in Isa::supported_flushes() {
                for copy in Isa::supported_copies() {
                    let isa = Isa::detected().with_flush(flush).unwrap().with_copy(copy).unwrap();
                    // Words, so the words holding the range's ends are in the buffer.
                    let mut words = vec![u64::from_ne_bytes([0xAA; 8]); 128];
                    // SAFETY: offset + data.len() < 1024 bytes of whole words, which do not
                    // overlap data.
                    unsafe { nt_copy(isa, words.as_mut_ptr().cast::<u8>().add(offset), &data) };
                    sfence();
                    let buf: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
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
        let kinds = Isa::supported_flushes();
        assert!(kinds.contains(&FlushKind::Portable));
        for k in kinds {
            let isa = Isa::detected().with_flush(k).unwrap();
            // SAFETY: buf is mapped for its whole length.
            unsafe { flush_range(isa, buf.as_ptr().add(3), 4000) };
        }
        sfence();
        mfence();
        assert!(buf.iter().all(|&b| b == 1), "a flush changed no byte");
    }

    #[test]
    fn an_isa_refuses_instructions_the_cpu_lacks() {
        for k in FlushKind::ALL {
            assert_eq!(
                Isa::detected().with_flush(k).is_ok(),
                Isa::cpu_has_flush(k),
                "{k:?}"
            );
        }
        for k in CopyKind::ALL {
            assert_eq!(
                Isa::detected().with_copy(k).is_ok(),
                Isa::cpu_has_copy(k),
                "{k:?}"
            );
        }
    }

    /// Miri cannot run `cpuid` or the flush and streaming instructions: detection must fall
    /// back to the portable ones there.
    #[cfg(miri)]
    #[test]
    fn miri_detects_only_the_portable_instructions() {
        assert_eq!(Isa::detected().flush(), FlushKind::Portable);
        assert_eq!(Isa::detected().copy(), CopyKind::Portable);
    }
}
