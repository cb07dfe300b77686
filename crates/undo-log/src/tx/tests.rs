//! The commit's joining of written ranges into flush ranges.

use std::collections::BTreeSet;

use super::note_written;

/// The cache lines of `ranges`.
fn lines(ranges: &[(u64, u64)]) -> BTreeSet<u64> {
    ranges
        .iter()
        .filter(|&&(_, len)| len > 0)
        .flat_map(|&(start, len)| start / 64..=(start + len - 1) / 64)
        .collect()
}

#[test]
fn writes_on_shared_or_adjoining_lines_are_flushed_as_one_range() {
    let mut written = Vec::new();
    note_written(&mut written, 24, 8); // line 0
    note_written(&mut written, 8, 8); // line 0 again, before it: joins
    note_written(&mut written, 64, 16); // line 1: adjoins
    note_written(&mut written, 256, 8); // line 4: a gap, apart
    note_written(&mut written, 192, 8); // line 3, adjoining line 4 from below: joins
    note_written(&mut written, 200, 0); // empty: nothing to flush
    note_written(&mut written, 1000, 8); // line 15: apart
    assert_eq!(written, [(8, 72), (192, 72), (1000, 8)]);
}

#[test]
fn joined_ranges_flush_exactly_the_lines_written() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |bound: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % bound
    };
    for _ in 0..2_000 {
        let mut writes = Vec::new();
        let mut written = Vec::new();
        for _ in 0..next(8) + 1 {
            let (offset, len) = (next(1024), next(200));
            writes.push((offset, len));
            note_written(&mut written, offset, len);
        }
        assert_eq!(lines(&written), lines(&writes), "{writes:?} -> {written:?}");
        assert!(written.iter().all(|&(_, len)| len > 0), "{written:?}");
    }
}
