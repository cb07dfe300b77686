//! Which of a line's four keys equal a key: one pass of SSE2 over the line on x86-64 (which
//! every x86-64 CPU has), four compares elsewhere. For hash lookups that scan buckets of four
//! `(key, value)` slots: the vector compare takes about half the instructions of four scalar
//! compares and selects, and the instructions a lookup executes bound how many lookups' cache
//! misses the CPU overlaps.

use std::sync::atomic::AtomicU64;

/// A key made ready for [`key_hits_of_line`] (on x86-64, in both halves of a vector register),
/// once per lookup rather than once per line.
#[derive(Clone, Copy, Debug)]
pub struct KeySplat {
    key: u64,
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    splat: std::arch::x86_64::__m128i,
}

impl KeySplat {
    /// `key`, ready to be compared.
    #[inline(always)]
    pub fn new(key: u64) -> KeySplat {
        KeySplat {
            key,
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            // SAFETY: SSE2 is part of x86-64; the intrinsic touches no memory.
            splat: unsafe { std::arch::x86_64::_mm_set1_epi64x(key as i64) },
        }
    }

    /// The key.
    pub fn key(self) -> u64 {
        self.key
    }
}

/// Bit `4 * s` set for each slot `s` (0..4) of the line of four `(key, value)` pairs at `line`
/// whose key (word `2 * s`) equals `key`'s; no other bit. The keys are read in order (with the
/// values between them, which are ignored), each as one 8-byte read, as acquire loads would
/// read them on x86-64.
///
/// # Safety
///
/// `line` points at 8 words (64 bytes) readable for the call, 16-byte aligned.
#[inline(always)]
pub unsafe fn key_hits_of_line(line: *const AtomicU64, key: KeySplat) -> u32 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        let lanes: u32;
        // The reads are inline assembly: each 16-byte read of an aligned pair of words reads
        // each word as one 8-byte access (x86-64 reads an aligned 8-byte word at once, in a
        // read of any size inside one cache line), in program order as every x86-64 read is,
        // so it reads what acquire loads of the words would, with no data race in the
        // language's sense (an assembly block is outside its memory model, like a foreign
        // function). `movdqa` and SSE2's memory operands need 16-byte alignment.
        // SAFETY: the caller promises 64 readable bytes at `line`, 16-byte aligned; the block
        // reads only those and writes only its declared registers.
        unsafe {
            std::arch::asm!(
                // Keys 0 and 1, then 2 and 3, each in a 128-bit lane pair.
                "movdqa {a}, xmmword ptr [{line}]",
                "punpcklqdq {a}, xmmword ptr [{line} + 16]",
                "movdqa {b}, xmmword ptr [{line} + 32]",
                "punpcklqdq {b}, xmmword ptr [{line} + 48]",
                // SSE2 compares 32-bit halves: a key is equal where both of its halves are.
                "pcmpeqd {a}, {k}",
                "pcmpeqd {b}, {k}",
                // Eight halves to eight 16-bit lanes, then two bits per lane.
                "packssdw {a}, {b}",
                "pmovmskb {lanes:e}, {a}",
                line = in(reg) line,
                k = in(xmm_reg) key.splat,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                lanes = out(reg) lanes,
                // Not `readonly`: the compiler then moves no load of the caller across the
                // block (a lookup's validating loads must follow its reads of the keys).
                options(nostack, preserves_flags),
            );
        }
        // Key `s` owns bits `4s..4s+4`: its low half's two bits, then its high half's.
        lanes & (lanes >> 2) & 0x1111
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    {
        (0..4).fold(0u32, |hits, s| {
            // SAFETY: word `2s < 8` of the line (the caller's promise).
            let word = unsafe { &*line.add(2 * s) }.load(std::sync::atomic::Ordering::Acquire);
            hits | (u32::from(word == key.key) << (4 * s))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-byte aligned line of four `(key, value)` pairs.
    #[repr(C, align(64))]
    struct Line([AtomicU64; 8]);

    fn line(words: [u64; 8]) -> Line {
        Line(words.map(AtomicU64::new))
    }

    fn hits(words: [u64; 8], key: u64) -> u32 {
        let line = line(words);
        // SAFETY: 64 bytes, 64-byte aligned, alive for the call.
        unsafe { key_hits_of_line(line.0.as_ptr(), KeySplat::new(key)) }
    }

    #[test]
    fn each_slot_whose_key_equals_sets_its_bit_and_values_never_do() {
        let words = [5, 6, 7, 8, 9, 6, 11, 12];
        assert_eq!(hits(words, 5), 0b0001);
        assert_eq!(hits(words, 7), 0b0001 << 4);
        assert_eq!(hits(words, 9), 0b0001 << 8);
        assert_eq!(hits(words, 11), 0b0001 << 12);
        assert_eq!(hits(words, 6), 0, "6 is a value only");
        assert_eq!(hits([3, 0, 3, 0, 1, 3, 3, 3], 3), 0x1011);
        assert_eq!(hits([0; 8], 0), 0x1111);
    }

    #[test]
    fn a_key_equal_in_one_half_only_does_not_match() {
        let key = 0x1234_5678_9abc_def0u64;
        let low_only = (key & 0xffff_ffff) | (0x1111_1111 << 32);
        let high_only = (key & !0xffff_ffff) | 0x2222_2222;
        let words = [low_only, key, high_only, key, key, 0, u64::MAX, key];
        assert_eq!(hits(words, key), 0b0001 << 8);
        assert_eq!(hits(words, u64::MAX), 0b0001 << 12);
    }

    #[test]
    fn matches_four_scalar_compares_on_many_lines() {
        // A few keys drawn from a small set so that lines hold repeats and near misses.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let pick = [1u64, 2, 1 << 32, (1 << 32) | 1, u64::MAX, state];
            pick[(state % 6) as usize]
        };
        for _ in 0..10_000 {
            let words: [u64; 8] = std::array::from_fn(|_| next());
            let key = next();
            let expected =
                (0..4).fold(0u32, |h, s| h | (u32::from(words[2 * s] == key) << (4 * s)));
            assert_eq!(hits(words, key), expected, "{words:x?} {key:x}");
        }
    }
}
