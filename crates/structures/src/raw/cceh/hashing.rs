//! Which segment and bucket a key belongs to: the fixed hash and its prefixes.

/// The hash of a key: MurmurHash3's 64-bit finalizer. Fixed forever: the layout depends on it.
pub fn hash(key: u64) -> u64 {
    let mut h = key;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// The top `depth` bits of `h`: the directory index at global depth `depth`, or a segment's
/// hash pattern at local depth `depth`. For depths up to 63, which is every depth a table
/// holds (a local depth is a 6-bit field, a global depth at most `MAX_DEPTH`); a larger
/// `depth` gives some other bits of `h`, never a panic.
#[inline(always)]
pub(super) fn prefix(h: u64, depth: u64) -> u64 {
    // Two shifts rather than `h >> (64 - depth)`, which overflows at depth 0: no branch.
    (h >> 1) >> (63u64.wrapping_sub(depth) & 63)
}

/// Whether key `k` belongs to a segment of local depth `local` and hash prefix `pattern` (a key
/// that does not is a stale copy a split left behind: its slot counts as free).
pub(super) fn belongs(k: u64, local: u64, pattern: u64) -> bool {
    prefix(hash(k), local) == pattern
}

/// Whether a key of hash `h` in a segment of local depth `local` moves to the new segment when
/// that segment splits: its next hash bit after the segment's prefix is 1.
pub(super) fn moves_at_split(h: u64, local: u64) -> bool {
    (h >> (63 - local)) & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_the_murmur3_finalizer() {
        // Fixed values: a table written today must open tomorrow.
        assert_eq!(hash(0), 0);
        assert_eq!(hash(1), 0xb456_bcfc_34c2_cb2c);
    }

    #[test]
    fn a_prefix_is_the_top_bits() {
        let h = 0b1011 << 60;
        assert_eq!(prefix(h, 0), 0);
        assert_eq!(prefix(h, 1), 1);
        assert_eq!(prefix(h, 4), 0b1011);
        assert_eq!(prefix(u64::MAX, 63), u64::MAX >> 1);
        assert_eq!(prefix(u64::MAX, 0), 0);
        assert!(moves_at_split(h, 0), "bit 63 is 1");
        assert!(!moves_at_split(h, 1), "bit 62 is 0");
        assert!(moves_at_split(h, 2), "bit 61 is 1");
    }
}
