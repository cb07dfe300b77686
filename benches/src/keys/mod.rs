//! Every key, offset and random choice of the benchmarks, from one seeded generator:
//! [`SplitMix64`] of `pmem-ordering`.
//!
//! The same seed gives the same sequence as in earlier runs of the driver, so results stay
//! comparable across versions: the structure sections' keys ([`random_keys`],
//! [`random_keys_except_max`]), orders ([`shuffled`]) and offsets ([`random_offsets`]), the
//! transaction workloads' choices, and the YCSB records ([`records`]) and key choosers
//! ([`zipfian`]). Bounded draws use [`below`], the modulo the driver has always used, not
//! [`SplitMix64::below`]: that one rejects the top `u64::MAX % n` outputs, which would change
//! a sequence whenever such an output comes up.

pub mod records;
pub mod zipfian;

pub use pmem_ordering::sim::SplitMix64;

/// A number in `0..n` (`n > 0`): the next output modulo `n`. The bias, at most `n / 2^64`, is
/// negligible for the counts drawn here.
pub fn below(rng: &mut SplitMix64, n: u64) -> u64 {
    rng.next_u64() % n
}

/// A uniform float in `[0, 1)` from the top 53 bits of the next output.
pub fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `n` distinct, nonzero (CCEH's empty slot), uniformly random keys, from `seed`.
pub fn random_keys(n: u64, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    let mut seen = std::collections::HashSet::with_capacity(n as usize);
    let mut keys = Vec::with_capacity(n as usize);
    while keys.len() < n as usize {
        let k = rng.next_u64();
        if k != 0 && seen.insert(k) {
            keys.push(k);
        }
    }
    keys
}

/// [`random_keys`] without `u64::MAX` (FAST&FAIR's reserved key): the same keys from the same
/// seed, the reserved one skipped.
pub fn random_keys_except_max(n: u64, seed: u64) -> Vec<u64> {
    let mut keys = random_keys(n + 1, seed);
    keys.retain(|&k| k != u64::MAX);
    keys.truncate(n as usize);
    keys
}

/// A copy of `keys` in a random order (Fisher-Yates, from `seed`).
pub fn shuffled(keys: &[u64], seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    let mut out = keys.to_vec();
    for i in (1..out.len()).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        out.swap(i, j);
    }
    out
}

/// `n` uniformly random offsets aligned to `size` inside a file of `file_bytes`, from `seed`.
pub fn random_offsets(n: usize, file_bytes: u64, size: u64, seed: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    (0..n)
        .map(|_| below(&mut rng, file_bytes / size) * size)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The expected values were computed by the driver's own generator before it became
    // pmem_ordering's SplitMix64: the same seeds must keep giving them.

    #[test]
    fn sequences_are_those_of_earlier_runs() {
        assert_eq!(
            random_keys(4, 0xCCE4),
            [
                0xfc39_4493_ab94_19b4,
                0xa312_3248_ee9c_265c,
                0x21fc_ae6c_0c55_739f,
                0x342c_41d3_2992_6c22
            ]
        );
        assert_eq!(
            random_keys_except_max(3, 0xFA57),
            [
                0xc034_6792_104f_a1f8,
                0xe782_160a_25e0_2656,
                0x7016_967f_0aa3_af0a
            ]
        );
        assert_eq!(
            shuffled(&[1, 2, 3, 4, 5, 6, 7, 8], 0x6E7),
            [5, 8, 6, 7, 1, 2, 3, 4]
        );
        assert_eq!(
            random_offsets(5, 1 << 20, 256, 0x2EAD),
            [787_712, 272_384, 647_936, 1_047_552, 26_112]
        );
        let mut rng = SplitMix64::new(0x5EED);
        let draws: Vec<u64> = (0..6).map(|_| below(&mut rng, 1000)).collect();
        assert_eq!(draws, [52, 5, 891, 197, 693, 130]);
        let mut rng = SplitMix64::new(9);
        let units: Vec<f64> = (0..3).map(|_| unit(&mut rng)).collect();
        assert_eq!(
            units,
            [
                0.682_362_734_978_995_8,
                0.750_694_892_958_278_7,
                0.265_322_440_599_183_3
            ]
        );
    }

    #[test]
    fn keys_are_distinct_nonzero_and_shuffles_are_permutations() {
        let keys = random_keys(10_000, 1);
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 10_000);
        assert!(!sorted.contains(&0));
        let mut again = shuffled(&keys, 2);
        assert_ne!(again, keys);
        again.sort_unstable();
        assert_eq!(again, sorted);
        assert!(!random_keys_except_max(10_000, 3).contains(&u64::MAX));
        let offsets = random_offsets(1000, 1 << 20, 256, 3);
        assert!(offsets.iter().all(|&o| o % 256 == 0 && o + 256 <= 1 << 20));
        assert!(offsets.iter().any(|&o| o != offsets[0]));
    }
}
