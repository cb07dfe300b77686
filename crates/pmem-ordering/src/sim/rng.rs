//! The project's one deterministic generator: crash images, sampled crash points, and the keys
//! of tests, fuzz targets and benchmarks.
//!
//! Hand-written rather than taken from a crate so that a seed printed in a failure report
//! replays the same images forever, whatever version of a dependency is installed.

/// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014).
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// A generator for one (seed, crash point, image) triple, independent of every other.
    pub fn for_image(seed: u64, event: u64, image: u64) -> SplitMix64 {
        let mut g = SplitMix64::new(seed ^ event.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mixed = g.next_u64() ^ image.wrapping_mul(0xD1B5_4A32_D192_ED03);
        SplitMix64::new(mixed)
    }

    /// The next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by rejection so every value is equally likely.
    pub fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let v = self.next_u64();
            if v < zone {
                return v % n;
            }
        }
    }
}
