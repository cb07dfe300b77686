//! Record numbers, keys, values and the key choosers of the YCSB driver.
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

use crate::txbench::Rng;

/// Salt xored into a record number before mixing (any constant would do: it only keeps the
/// keys from looking like the record numbers' own hash elsewhere).
const KEY_SALT: u64 = 0x243F_6A88_85A3_08D3;
/// Salt of the value tags, so a tag is not a function of the key's own bits we already use.
const TAG_SALT: u64 = 0x1319_8A2E_0370_7344;
/// The two odd multipliers of the splitmix64 finalizer (Steele, Lea and Flood, OOPSLA'14).
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

/// A permutation of `u64`: the splitmix64 finalizer over the salted input.
fn permute(x: u64) -> u64 {
    let mut z = x ^ KEY_SALT;
    z = (z ^ (z >> 30)).wrapping_mul(MUL1);
    z = (z ^ (z >> 27)).wrapping_mul(MUL2);
    z ^ (z >> 31)
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

/// A uniform float in `[0, 1)` from the top 53 bits of the generator.
pub fn unit(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The Zipfian skew YCSB uses ("zipfian constant" 0.99).
pub const ZIPF_THETA: f64 = 0.99;

/// Why a Zipfian generator cannot be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ZipfianError {
    /// No items to choose from.
    #[error("a Zipfian distribution needs at least one item")]
    NoItems,
    /// The skew is outside `(0, 1)`, where the generator's formula holds.
    #[error("Zipfian theta {0} is outside (0, 1)")]
    Theta(f64),
}

/// Ranks `0..items` drawn with probability proportional to `1 / (rank + 1)^theta`, by the
/// constant-time method of Gray et al., "Quickly Generating Billion-Record Synthetic
/// Databases", SIGMOD'94 (Sec. 4), which YCSB's `ZipfianGenerator` implements: after the
/// `O(items)` sum `zeta(items)` is computed once, each draw takes one uniform number.
#[derive(Clone, Debug, PartialEq)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    second: f64,
}

impl Zipfian {
    /// The generator over `items` ranks with skew `theta` (`0 < theta < 1`).
    pub fn new(items: u64, theta: f64) -> Result<Zipfian, ZipfianError> {
        if items == 0 {
            return Err(ZipfianError::NoItems);
        }
        if !(theta > 0.0 && theta < 1.0) {
            return Err(ZipfianError::Theta(theta));
        }
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(items);
        let zeta2 = zeta(2);
        let eta = if items <= 2 {
            // The formula divides 0 by 0 for two items; ranks 0 and 1 are handled before it.
            0.0
        } else {
            (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan)
        };
        Ok(Zipfian {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
            second: 1.0 + 0.5f64.powf(theta),
        })
    }

    /// The number of ranks.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// The skew.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// The rank for the uniform draw `u` in `[0, 1)`: 0 is the most frequent.
    pub fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 || self.items == 1 {
            return 0;
        }
        if uz < self.second {
            return 1;
        }
        let r = self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha);
        (r as u64).min(self.items - 1)
    }
}

/// FNV-1a, 64 bits, over the eight little-endian bytes of `x`: the hash YCSB's
/// `ScrambledZipfianGenerator` spreads its ranks with.
pub fn fnv1a64(x: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in x.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01B3);
    }
    h
}

/// Chooses existing records: uniformly, or by scrambled Zipfian popularity.
#[derive(Clone, Debug, PartialEq)]
pub enum Chooser {
    /// Every record of `0..n` equally likely.
    Uniform(u64),
    /// Zipfian ranks, each mapped to record `fnv1a64(rank) % n` as YCSB's scrambled Zipfian
    /// does, so the popular records are scattered over the key space rather than the first
    /// ones (two ranks may share a record, as in YCSB).
    Zipfian(Zipfian),
}

impl Chooser {
    /// The next record, in `0..n`.
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            Chooser::Uniform(n) => rng.below(*n),
            Chooser::Zipfian(z) => fnv1a64(z.rank(unit(rng))) % z.items(),
        }
    }
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
    fn zipfian_ranks_are_skewed_and_decreasing() {
        let z = Zipfian::new(1000, ZIPF_THETA).unwrap();
        let mut rng = Rng::new(9);
        let draws = 200_000;
        let mut freq = vec![0u64; 1000];
        for _ in 0..draws {
            let r = z.rank(unit(&mut rng));
            freq[r as usize] += 1;
        }
        let uniform = draws / 1000;
        // Rank 0 has probability 1/zeta(1000) (about 0.13 for theta 0.99): far above 1/1000.
        assert!(freq[0] > 50 * uniform, "rank 0 drawn {} times", freq[0]);
        assert!(freq[0] > freq[1] && freq[1] > freq[2] && freq[2] > freq[5]);
        // The mean frequency per rank falls from decade to decade.
        let mean =
            |lo: usize, hi: usize| freq[lo..hi].iter().sum::<u64>() as f64 / (hi - lo) as f64;
        assert!(mean(1, 10) > mean(10, 100));
        assert!(mean(10, 100) > mean(100, 1000));
        let chooser = Chooser::Zipfian(z);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..draws {
            let r = chooser.next(&mut rng);
            assert!(r < 1000);
            *counts.entry(r).or_insert(0u64) += 1;
        }
        // Scrambled: the hottest record is hot, and it is not record 0.
        let (&hot, &n) = counts.iter().max_by_key(|&(_, &n)| n).unwrap();
        assert!(n > 50 * uniform);
        assert_eq!(hot, fnv1a64(0) % 1000);
    }

    #[test]
    fn zipfian_rejects_bad_parameters_and_handles_tiny_sets() {
        assert_eq!(Zipfian::new(0, 0.99), Err(ZipfianError::NoItems));
        assert!(matches!(Zipfian::new(10, 1.0), Err(ZipfianError::Theta(_))));
        assert!(matches!(
            Zipfian::new(10, f64::NAN),
            Err(ZipfianError::Theta(_))
        ));
        let one = Zipfian::new(1, 0.99).unwrap();
        let two = Zipfian::new(2, 0.99).unwrap();
        let mut rng = Rng::new(1);
        for _ in 0..1000 {
            assert_eq!(one.rank(unit(&mut rng)), 0);
            assert!(two.rank(unit(&mut rng)) < 2);
        }
    }

    #[test]
    fn uniform_chooser_stays_in_range() {
        let c = Chooser::Uniform(7);
        let mut rng = Rng::new(3);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            seen[c.next(&mut rng) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
