//! Record numbers, keys and values of the YCSB driver.
//!
//! Record `i` has the key [`key_of`]`(i)`: a bijective mix of `i`, so keys are distinct,
//! random-looking and spread over the whole `u64` range (a B+-tree's range scan from one of
//! them still walks keys of other records), and [`record_of`] turns a key back into its record
//! number (the datalog keeps record `i` at offset `i * 256`). Keys are never 0 (CCEH's empty
//! slot) nor `u64::MAX` (FAST&FAIR's).
//!
//! A value carries a tag of its key in its high half and a version in its low half
//! ([`value_for`]), so any read, even one racing an update of another thread, can be checked:
//! a value read for a key must carry that key's tag ([`value_matches`]).

use pmem_ordering::sim::SplitMix64;

/// Salt xored into a record number before mixing (any constant would do: it only keeps the
/// keys from looking like the record numbers' own hash elsewhere).
const KEY_SALT: u64 = 0x243F_6A88_85A3_08D3;
/// Salt of the value tags, so a tag is not a function of the key's own bits we already use.
const TAG_SALT: u64 = 0x1319_8A2E_0370_7344;
/// What [`SplitMix64`] adds to its state before each output (its "golden gamma").
const SPLITMIX64_INCREMENT: u64 = 0x9E37_79B9_7F4A_7C15;
/// The two odd multipliers of the splitmix64 finalizer (Steele, Lea and Flood, OOPSLA'14), for
/// its inverse.
const MUL1: u64 = 0xBF58_476D_1CE4_E5B9;
const MUL2: u64 = 0x94D0_49BB_1331_11EB;
const INV1: u64 = inverse_odd(MUL1);
const INV2: u64 = inverse_odd(MUL2);

/// The largest record count a key space may hold: records `0..MAX_RECORDS` have keys.
pub const MAX_RECORDS: u64 = u64::MAX - 2;

/// The multiplicative inverse of odd `c` modulo 2^64, by Newton's iteration (each step doubles
/// the correct low bits; `c * c = 1 mod 8` gives the first 3).
const fn inverse_odd(c: u64) -> u64 {
    let mut inv = c;
    let mut i = 0;
    while i < 5 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(c.wrapping_mul(inv)));
        i += 1;
    }
    inv
}

/// Undo `x ^= x >> s`.
fn unxorshift(y: u64, s: u32) -> u64 {
    let mut x = y;
    let mut shift = s;
    while shift < 64 {
        x ^= y >> shift;
        shift += s;
    }
    x
}

/// A permutation of `u64`: the splitmix64 finalizer over the salted input. One step of
/// [`SplitMix64`] adds its increment to the state and returns the finalizer of the sum, so
/// starting it at the salted input minus the increment yields exactly the finalizer.
fn permute(x: u64) -> u64 {
    SplitMix64::new((x ^ KEY_SALT).wrapping_sub(SPLITMIX64_INCREMENT)).next_u64()
}

/// The inverse of [`permute`].
fn unpermute(z: u64) -> u64 {
    let mut x = unxorshift(z, 31);
    x = unxorshift(x.wrapping_mul(INV2), 27);
    x = unxorshift(x.wrapping_mul(INV1), 30);
    x ^ KEY_SALT
}

/// Whether `x` may be a key (neither reserved value).
fn is_key(x: u64) -> bool {
    x != 0 && x != u64::MAX
}

/// The key of record `record` (`record < MAX_RECORDS`, else `None`).
///
/// Cycle walking keeps the permutation inside the allowed keys: `record + 1` is one of them,
/// and the permutation is applied until it lands on one again, which gives a bijection of the
/// allowed keys onto themselves (Black and Rogaway's construction for format-preserving maps).
pub fn key_of(record: u64) -> Option<u64> {
    if record >= MAX_RECORDS {
        return None;
    }
    let mut x = permute(record + 1);
    while !is_key(x) {
        x = permute(x);
    }
    Some(x)
}

/// The record whose key is `key` (`None` for the reserved 0 and `u64::MAX`).
pub fn record_of(key: u64) -> Option<u64> {
    if !is_key(key) {
        return None;
    }
    let mut x = unpermute(key);
    while !is_key(x) {
        x = unpermute(x);
    }
    Some(x - 1)
}

/// The tag of `key` carried in the high half of its values.
fn tag(key: u64) -> u64 {
    permute(key ^ TAG_SALT) >> 32
}

/// The value written with `key` at `version` (the load writes version 0).
pub fn value_for(key: u64, version: u32) -> u64 {
    (tag(key) << 32) | u64::from(version)
}

/// Whether `value` was written with `key` (carries its tag).
pub fn value_matches(key: u64, value: u64) -> bool {
    value >> 32 == tag(key)
}

/// The version `value` was written at.
pub fn version_of(value: u64) -> u32 {
    value as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct_allowed_and_invert() {
        let mut keys: Vec<u64> = (0..50_000).map(|i| key_of(i).unwrap()).collect();
        for (i, &k) in keys.iter().enumerate() {
            assert!(is_key(k));
            assert_eq!(record_of(k), Some(i as u64));
        }
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(keys.len(), 50_000);
        // Spread over the range: about half the keys in each half of u64.
        let high = keys.iter().filter(|&&k| k > u64::MAX / 2).count();
        assert!((20_000..30_000).contains(&high), "{high}");
        assert_eq!(key_of(MAX_RECORDS), None);
        assert_eq!(record_of(0), None);
        assert_eq!(record_of(u64::MAX), None);
        for r in [MAX_RECORDS - 1, MAX_RECORDS - 2, 1 << 40] {
            assert_eq!(record_of(key_of(r).unwrap()), Some(r));
        }
    }

    #[test]
    fn values_carry_their_key() {
        let (a, b) = (key_of(1).unwrap(), key_of(2).unwrap());
        let v = value_for(a, 77);
        assert!(value_matches(a, v));
        assert!(!value_matches(b, v));
        assert_eq!(version_of(v), 77);
    }

    #[test]
    fn keys_are_those_of_earlier_runs() {
        // Computed by the driver before the generator became pmem_ordering's SplitMix64: the
        // same record numbers must keep the same keys so results stay comparable.
        let keys: Vec<u64> = (0..4).map(|i| key_of(i).unwrap()).collect();
        assert_eq!(
            keys,
            [
                0x8204_7734_2d9c_40c0,
                0x1c47_0028_35a5_3ba6,
                0xafec_9db4_e027_0757,
                0xa7a6_b1d4_8c74_1004
            ]
        );
    }
}
