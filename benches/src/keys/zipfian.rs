//! The YCSB key choosers: uniform, or YCSB's scrambled Zipfian over popularity ranks.

use pmem_ordering::sim::SplitMix64;

use super::{below, unit};

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
    pub fn next(&self, rng: &mut SplitMix64) -> u64 {
        match self {
            Chooser::Uniform(n) => below(rng, *n),
            Chooser::Zipfian(z) => fnv1a64(z.rank(unit(rng))) % z.items(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmem_ordering::sim::SplitMix64;

    #[test]
    fn zipfian_ranks_are_skewed_and_decreasing() {
        let z = Zipfian::new(1000, ZIPF_THETA).unwrap();
        let mut rng = SplitMix64::new(9);
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
        let mut rng = SplitMix64::new(1);
        for _ in 0..1000 {
            assert_eq!(one.rank(unit(&mut rng)), 0);
            assert!(two.rank(unit(&mut rng)) < 2);
        }
    }

    #[test]
    fn uniform_chooser_stays_in_range() {
        let c = Chooser::Uniform(7);
        let mut rng = SplitMix64::new(3);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            seen[c.next(&mut rng) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
