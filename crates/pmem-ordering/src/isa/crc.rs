//! CRC-32C (Castagnoli) of the short runs the formats check on every read: a record's header,
//! key and value, a log entry. On x86-64 with SSE4.2 the bytes go through the `crc32`
//! instruction eight at a time from unaligned loads, the tail one byte at a time; elsewhere
//! (and under Miri) the `crc32c` crate computes the same value.
//!
//! Why not the crate everywhere: it splits each call's bytes at 8-byte alignment and sets up
//! its three-way interleave, which is what makes it fast on kilobytes but costs about 150
//! instructions a call on the 12-, 16- and 100-byte runs a record read checks (three calls a
//! record: about 450 instructions, a third of a byte-key hash map's get under callgrind; this
//! path takes about 60 for the three). The values are the crate's, bit for bit (the tests
//! compare them), so nothing on the media changes.

/// The CRC-32C of `bytes`.
#[inline]
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// Runs this long or longer go to the crate: one chain of `crc32` instructions waits out the
/// instruction's latency (3 cycles) for every 8 bytes, where the crate's three chains overlap.
#[cfg(all(target_arch = "x86_64", not(miri)))]
const SHORT_RUN: usize = 256;

/// The CRC-32C of the bytes `crc` was computed over followed by `bytes` (`crc` 0 for none):
/// `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`, as the `crc32c` crate's function of that
/// name.
#[inline]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    if bytes.len() < SHORT_RUN && std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above (the check is a cached load after
        // the first call), which is all `crc32c_sse42` requires.
        return unsafe { crc32c_sse42(crc, bytes) };
    }
    crc32c::crc32c_append(crc, bytes)
}

/// [`crc32c_append`] with the `crc32` instruction: words of eight bytes from unaligned
/// loads, then the remaining bytes one at a time.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "sse4.2")]
fn crc32c_sse42(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut state = u64::from(!crc);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let word: [u8; 8] = word.try_into().expect("chunks_exact yields 8 bytes");
        state = _mm_crc32_u64(state, u64::from_le_bytes(word));
    }
    // `_mm_crc32_u64` keeps the CRC in the low 32 bits.
    let mut state = state as u32;
    for &byte in words.remainder() {
        state = _mm_crc32_u8(state, byte);
    }
    !state
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        // The check value of CRC-32C (RFC 3720's iSCSI polynomial) and the empty input.
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c_append(0xE306_9283, b""), 0xE306_9283);
    }

    proptest! {
        // Under Miri both sides are the crate's code (no SSE4.2 path) and every byte is
        // interpreted: a few cases keep its run short.
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

        /// The crate's values for every length (short runs and long, which go to the crate)
        /// and every split of the input into two runs, at every alignment of the slice.
        #[test]
        fn matches_the_crate(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                             start in 0usize..8, split in 0usize..600) {
            let bytes = &bytes[start.min(bytes.len())..];
            let split = split.min(bytes.len());
            prop_assert_eq!(crc32c(bytes), crc32c::crc32c(bytes));
            let (a, b) = bytes.split_at(split);
            prop_assert_eq!(crc32c_append(crc32c(a), b), crc32c::crc32c(bytes));
            prop_assert_eq!(crc32c_append(crc32c::crc32c(a), b), crc32c::crc32c_append(crc32c::crc32c(a), b));
        }
    }
}
