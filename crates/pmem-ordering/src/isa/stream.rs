//! Non-temporal (streaming) stores.
//!
//! Two kinds. [`nt_store_words`], what pools stream with, writes every whole aligned word with
//! one 8-byte `movnti` from an assembly block: an aligned quadword store is single-copy atomic
//! on x86-64 (Intel SDM Vol. 3A, "Guaranteed Atomic Operations"; AMD APM Vol. 2, "Access
//! Atomicity"), so each is, to Rust's memory model, the relaxed `AtomicU64` store it compiles
//! to with a non-temporal hint, and may race with the pool's safe accesses, which use that size
//! too
//! ([one access size per word](crate::pool#one-access-size-per-word)). [`nt_copy`] and
//! [`movnti_u64`] are ordinary non-atomic writes as far as Rust's memory model goes (vector
//! stores carry no per-word atomicity guarantee, and the intrinsic is a plain store to the
//! compiler): they must not race with any other thread's access to the same bytes, the rule
//! written once in [the pool's module docs](crate::pool#streaming-stores-and-other-threads).

use super::{flush_range, CopyKind, Isa, CACHE_LINE};

/// A non-temporal 8-byte store (`movnti`).
///
/// Under Miri it is a plain non-atomic write, like the instruction it stands for, so Miri's race
/// detector checks callers against the streaming-store rule.
///
/// # Safety
/// `dst` must be valid for an 8-byte write and 8-byte aligned, and no other thread may access
/// those 8 bytes concurrently with the store
/// ([the rule](crate::pool#streaming-stores-and-other-threads)).
#[inline(always)]
pub unsafe fn movnti_u64(dst: *mut u64, value: u64) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the caller guarantees `dst` is valid, aligned and not accessed concurrently.
    unsafe {
        std::arch::x86_64::_mm_stream_si64(dst as *mut i64, value as i64)
    };
    #[cfg(miri)]
    // SAFETY: as above.
    unsafe {
        dst.write(value)
    };
    #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
    // SAFETY: valid and aligned by the caller's contract.
    unsafe {
        std::sync::atomic::AtomicU64::from_ptr(dst)
            .store(value, std::sync::atomic::Ordering::Relaxed)
    };
}

/// Non-temporal 8-byte stores of `words`, in turn, to `dst` and the words after it, each, to
/// Rust's memory model, a relaxed atomic store (see the module docs): `movnti` from an assembly
/// block, which the compiler treats as opaque code that may make atomic accesses, where the
/// intrinsic would be a plain store to it. One block whose loop streams four words a pass: a
/// block per word cost about 13 instructions a word (the loop's state kept across each block),
/// this one about 3. Under Miri and off x86-64, relaxed `AtomicU64` stores.
///
/// # Safety
/// `dst` must be 8-byte aligned and valid for `words.len()` 8-byte writes; every other access
/// to those words must be an atomic one of 8 bytes.
#[inline(always)]
unsafe fn movnti_atomic_words(dst: *mut u64, words: &[[u8; 8]]) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `dst` is aligned and valid for `words.len()` words (the caller's contract) and
    // `words` is readable for as many; the block reads only `words`, writes only those words
    // of `dst` and no register but its operands (the flags are not preserved: not declared).
    unsafe {
        std::arch::asm!(
            "cmp {n}, 4",
            "jb 3f",
            "2:",
            "mov {a}, qword ptr [{src}]",
            "mov {b}, qword ptr [{src} + 8]",
            "movnti qword ptr [{dst}], {a}",
            "movnti qword ptr [{dst} + 8], {b}",
            "mov {a}, qword ptr [{src} + 16]",
            "mov {b}, qword ptr [{src} + 24]",
            "movnti qword ptr [{dst} + 16], {a}",
            "movnti qword ptr [{dst} + 24], {b}",
            "add {src}, 32",
            "add {dst}, 32",
            "sub {n}, 4",
            "cmp {n}, 4",
            "jae 2b",
            "3:",
            "test {n}, {n}",
            "jz 5f",
            "4:",
            "mov {a}, qword ptr [{src}]",
            "movnti qword ptr [{dst}], {a}",
            "add {src}, 8",
            "add {dst}, 8",
            "dec {n}",
            "jnz 4b",
            "5:",
            src = inout(reg) words.as_ptr() => _,
            dst = inout(reg) dst => _,
            n = inout(reg) words.len() => _,
            a = out(reg) _,
            b = out(reg) _,
            options(nostack),
        )
    };
    #[cfg(any(miri, not(target_arch = "x86_64")))]
    for (i, &word) in words.iter().enumerate() {
        // SAFETY: word `i` of `dst` is in range and aligned (the caller's contract).
        unsafe {
            std::sync::atomic::AtomicU64::from_ptr(dst.wrapping_add(i)).store(
                u64::from_ne_bytes(word),
                std::sync::atomic::Ordering::Relaxed,
            )
        };
    }
}

/// Copy `src` to `dst` with non-temporal stores that other threads may access concurrently
/// through atomic 8-byte accesses: every whole aligned word with one 8-byte `movnti` (an atomic
/// store to the memory model, see the module docs); a ragged head or tail merged into its word
/// with a compare-exchange (a temporal store, as the pool's writes make them) and flushed with
/// `isa`'s flush instruction. After the next `sfence` the whole range is durable either way.
///
/// On DRAM it streams 4 KiB at about 0.95x and 64 KiB at about 0.8x the speed of [`nt_copy`]'s
/// 64-byte stores (measured on an AMD EPYC); it is what a pool shared with safe code can use.
///
/// # Safety
/// `dst .. dst + src.len()` must be mapped, writable and not overlap `src`, and so must the
/// whole 8-byte words containing its ends; every access of another thread to those words must
/// be an atomic one of 8 bytes (as every access of the pool's safe API is).
pub unsafe fn nt_store_words(isa: Isa, dst: *mut u8, src: &[u8]) {
    let mut d = dst;
    let mut s = src;
    let head = ((8 - d.addr() % 8) % 8).min(s.len());
    if head > 0 {
        // SAFETY: the head's containing word is mapped and writable by the caller's contract.
        unsafe { store_ragged(isa, d, &s[..head]) };
        d = d.wrapping_add(head);
        s = &s[head..];
    }
    let (words, rest) = s.as_chunks::<8>();
    // SAFETY: d is 8-aligned (past the head) and `words.len()` words from it are in range;
    // other threads' accesses to them are 8-byte atomic ones (the caller's contract).
    unsafe { movnti_atomic_words(d.cast::<u64>(), words) };
    d = d.wrapping_add(words.len() * 8);
    if !rest.is_empty() {
        // SAFETY: the tail's containing word is mapped and writable by the caller's contract.
        unsafe { store_ragged(isa, d, rest) };
    }
}

/// Copy `src` to `dst` with non-temporal stores, using the streaming width of `isa`.
///
/// Bytes that do not fill an aligned 8-byte word (a ragged head or tail) cannot be streamed
/// without rewriting their neighbours, so they are merged into their word with an atomic
/// compare-exchange (a temporal store, as the pool's writes make them) and flushed with the
/// `isa`'s flush instruction; after the next `sfence` the whole range is durable either way.
///
/// # Safety
/// `dst .. dst + src.len()` must be mapped, writable, and not overlap `src`, and so must the
/// whole 8-byte words containing its ends; no other thread may access the range concurrently
/// with the copy ([the rule](crate::pool#streaming-stores-and-other-threads)), and every
/// access to the rest of those end words must be an 8-byte atomic one.
pub unsafe fn nt_copy(isa: Isa, dst: *mut u8, src: &[u8]) {
    // Pointer arithmetic rather than integer addresses, so the pointers keep their provenance.
    let mut d = dst;
    let mut s = src;
    // Ragged head up to the next 8-byte boundary.
    let head = ((8 - d.addr() % 8) % 8).min(s.len());
    if head > 0 {
        // SAFETY: the head's containing word is mapped and writable by the caller's contract.
        unsafe { store_ragged(isa, d, &s[..head]) };
        d = d.wrapping_add(head);
        s = &s[head..];
    }
    // 8-byte words up to the next line boundary.
    while s.len() >= 8 && !d.addr().is_multiple_of(CACHE_LINE) {
        // SAFETY: d is 8-aligned, in range and not accessed concurrently (caller's contract).
        unsafe { movnti_u64(d.cast::<u64>(), read_u64(s)) };
        d = d.wrapping_add(8);
        s = &s[8..];
    }
    // Whole lines.
    let lines = s.len() / CACHE_LINE;
    if lines > 0 {
        // SAFETY: d is line aligned, `lines` whole lines are in range, and the caller's contract
        // excludes concurrent access.
        unsafe { stream_lines(isa.copy(), d, &s[..lines * CACHE_LINE]) };
        d = d.wrapping_add(lines * CACHE_LINE);
        s = &s[lines * CACHE_LINE..];
    }
    while s.len() >= 8 {
        // SAFETY: d is 8-aligned, in range and not accessed concurrently (caller's contract).
        unsafe { movnti_u64(d.cast::<u64>(), read_u64(s)) };
        d = d.wrapping_add(8);
        s = &s[8..];
    }
    if !s.is_empty() {
        // SAFETY: the tail's containing word is mapped and writable by the caller's contract.
        unsafe { store_ragged(isa, d, s) };
    }
}

fn read_u64(s: &[u8]) -> u64 {
    u64::from_ne_bytes(s[..8].try_into().expect("slice of at least 8 bytes"))
}

/// Temporal store of fewer than 8 bytes inside one word, then a flush of its line.
///
/// # Safety
/// The 8-byte word containing `dst .. dst + bytes.len()` must be mapped and writable.
unsafe fn store_ragged(isa: Isa, dst: *mut u8, bytes: &[u8]) {
    // SAFETY: the containing word is valid by the caller's contract; the store is one atomic
    // compare-exchange of that word.
    unsafe {
        crate::mem::store_bytes(dst, bytes);
        flush_range(isa, dst, bytes.len());
    }
}

/// Stream whole cache lines.
///
/// # Safety
/// `dst` is 64-byte aligned and `src.len()` is a multiple of 64 bytes, all mapped and writable;
/// `kind` was detected on this CPU; no other thread accesses the range concurrently.
unsafe fn stream_lines(kind: CopyKind, dst: *mut u8, src: &[u8]) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        match kind {
            // SAFETY: the kind was checked against CPUID when the Isa was built; alignment,
            // range and exclusivity hold by the caller's contract.
            CopyKind::Avx512 => unsafe { stream_lines_avx512(dst, src) },
            // SAFETY: as above.
            CopyKind::Avx => unsafe { stream_lines_avx(dst, src) },
            // SAFETY: as above; SSE2 is part of x86-64.
            CopyKind::Sse2 => unsafe { stream_lines_sse2(dst, src) },
            CopyKind::Portable => {
                for (i, word) in src.chunks_exact(8).enumerate() {
                    // SAFETY: dst + 8i is 8-aligned, in range and not accessed concurrently.
                    unsafe { movnti_u64(dst.add(8 * i) as *mut u64, read_u64(word)) };
                }
            }
        }
    }
    #[cfg(miri)]
    {
        // Only `CopyKind::Portable` can be detected under Miri.
        debug_assert_eq!(kind, CopyKind::Portable);
        for (i, word) in src.chunks_exact(8).enumerate() {
            // SAFETY: dst + 8i is 8-aligned, in range and not accessed concurrently.
            unsafe { movnti_u64(dst.add(8 * i) as *mut u64, read_u64(word)) };
        }
    }
    #[cfg(all(not(target_arch = "x86_64"), not(miri)))]
    {
        let _ = kind;
        // SAFETY: in range by the caller's contract.
        unsafe { crate::mem::store_bytes(dst, src) };
    }
}

/// Stream whole lines with 64-byte AVX-512 stores.
///
/// # Safety
/// The CPU supports AVX-512F (the `Isa` was detected with [`CopyKind::Avx512`]); `dst` is
/// 64-byte aligned; `dst .. dst + src.len()` is mapped, writable and accessed by no other thread
/// concurrently; `src.len()` is a multiple of 64.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx512f")]
unsafe fn stream_lines_avx512(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::*;
    for (i, line) in src.chunks_exact(64).enumerate() {
        // SAFETY: unaligned load from a 64-byte slice; dst + 64i is 64-aligned, in range and
        // exclusive to this thread by the caller's contract.
        unsafe {
            let v = _mm512_loadu_si512(line.as_ptr() as *const __m512i);
            _mm512_stream_si512(dst.add(64 * i) as *mut __m512i, v);
        }
    }
}

/// Stream whole lines with 32-byte AVX stores.
///
/// # Safety
/// The CPU supports AVX (the `Isa` was detected with [`CopyKind::Avx`]); `dst` is 32-byte
/// aligned; `dst .. dst + src.len()` is mapped, writable and accessed by no other thread
/// concurrently; `src.len()` is a multiple of 32.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx")]
unsafe fn stream_lines_avx(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::*;
    for (i, half) in src.chunks_exact(32).enumerate() {
        // SAFETY: unaligned load from a 32-byte slice; dst + 32i is 32-aligned, in range and
        // exclusive to this thread by the caller's contract.
        unsafe {
            let v = _mm256_loadu_si256(half.as_ptr() as *const __m256i);
            _mm256_stream_si256(dst.add(32 * i) as *mut __m256i, v);
        }
    }
}

/// Stream whole lines with 16-byte SSE2 stores.
///
/// # Safety
/// `dst` is 16-byte aligned; `dst .. dst + src.len()` is mapped, writable and accessed by no
/// other thread concurrently; `src.len()` is a multiple of 16. (SSE2 is
/// part of x86-64, so the CPU always has it.)
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "sse2")]
unsafe fn stream_lines_sse2(dst: *mut u8, src: &[u8]) {
    use std::arch::x86_64::*;
    for (i, quarter) in src.chunks_exact(16).enumerate() {
        // SAFETY: unaligned load from a 16-byte slice; dst + 16i is 16-aligned, in range and
        // exclusive to this thread by the caller's contract.
        unsafe {
            let v = _mm_loadu_si128(quarter.as_ptr() as *const __m128i);
            _mm_stream_si128(dst.add(16 * i) as *mut __m128i, v);
        }
    }
}
