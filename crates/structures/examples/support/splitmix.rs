//! The measurement drivers' keys: splitmix64, a bijection of its state, so a sequence of states
//! gives distinct keys (one source shared by `cceh_ops`, `fastfair_ops` and `fastfair_writers`).

/// The next splitmix64 output, advancing `state`.
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `count` distinct keys from splitmix64 seeded with `seed`, skipping 0 and `u64::MAX` (keys
/// some structures reserve; neither comes up in practice).
#[allow(dead_code)] // `fastfair_writers` derives its keys from `next` alone.
pub fn distinct_keys(count: usize, seed: u64) -> Vec<u64> {
    let mut state = seed;
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let z = next(&mut state);
        if z != 0 && z != u64::MAX {
            out.push(z);
        }
    }
    out
}
