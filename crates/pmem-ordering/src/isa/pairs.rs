//! A bulk copy of `(key, value)` pairs out of concurrently written words, noting whether two
//! neighbouring keys are equal: for range scans that copy a leaf's run of slots and then check
//! it whole. On x86-64 one pass of SSE2: a 16-byte load and store per pair and a vector
//! compare with the pair before (about 5 instructions a pair, against 9 for two scalar loads,
//! two stores and a compare); elsewhere, and under Miri, a loop of acquire loads.

use std::mem::{offset_of, size_of, MaybeUninit};
use std::sync::atomic::AtomicU64;

// The vector copy stores a pair as 16 bytes, the key's 8 first: the tuple's layout must be that.
const _: () = assert!(
    size_of::<(u64, u64)>() == 16
        && offset_of!((u64, u64), 0) == 0
        && offset_of!((u64, u64), 1) == 8
);

/// Copy the first `dst.len()` pairs of `src` (word `2i` the key of pair `i`, word `2i + 1` its
/// value) into `dst`, each word read as an acquire load would read it, in order; returns
/// whether two neighbouring pairs of the copy share a key. Every slot of `dst` is written.
///
/// # Panics
///
/// If `src` holds fewer than `2 * dst.len()` words.
#[inline(always)]
pub fn copy_pairs(src: &[AtomicU64], dst: &mut [MaybeUninit<(u64, u64)>]) -> bool {
    assert!(src.len() / 2 >= dst.len(), "copy of pairs past the words");
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        copy_pairs_sse2(src, dst)
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    {
        copy_pairs_portable(src, dst)
    }
}

/// [`copy_pairs`] with acquire loads, one word at a time (on x86-64, for the tests to compare).
#[cfg(any(test, not(target_arch = "x86_64"), miri))]
#[inline(always)]
fn copy_pairs_portable(src: &[AtomicU64], dst: &mut [MaybeUninit<(u64, u64)>]) -> bool {
    let mut duplicate = false;
    let mut previous = None;
    for (slot, pair) in dst.iter_mut().zip(src.chunks_exact(2)) {
        let key = pair[0].load(std::sync::atomic::Ordering::Acquire);
        let value = pair[1].load(std::sync::atomic::Ordering::Acquire);
        slot.write((key, value));
        duplicate |= previous == Some(key);
        previous = Some(key);
    }
    duplicate
}

/// [`copy_pairs`] in SSE2, `src.len() >= 2 * dst.len()` (checked by the caller).
///
/// Each pair is compared whole with the one before it (`pcmpeqd`, four 32-bit lanes) and the
/// results are ORed together: a nonzero low lane and a nonzero second lane then show that some
/// neighbours' keys agree in their low halves and some (perhaps others) in their high halves,
/// which every duplicate makes true and few increasing keys do. Only then is the copy checked
/// exactly, word by word; that check, in the caller's own buffer, costs nothing otherwise.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
fn copy_pairs_sse2(src: &[AtomicU64], dst: &mut [MaybeUninit<(u64, u64)>]) -> bool {
    let count = dst.len();
    let lanes: u32;
    // The reads are inline assembly, as in `keys.rs`: a 16-byte read of a pair reads each of
    // its two aligned 8-byte words at once, as `keys.rs` relies on too (x86-64 reads an aligned
    // 8-byte word at once; a wider SSE read may be made as several accesses, Intel SDM vol. 3A
    // "Guaranteed Atomic Operations"), in program order as every x86-64 read is, so it reads
    // what acquire loads of the words would, with no data race in the language's sense.
    // `movdqu`: the words are 8-byte aligned, no more is promised (a node's pairs are 16-byte
    // aligned in practice).
    // The block reads the `2 * count` words of `src` (at most its length, the caller's check)
    // and writes the `count` 16-byte slots of `dst` (each a `(u64, u64)`: key, then value, the
    // layout asserted above), and no other memory.
    // SAFETY: in bounds as above; it clobbers only its declared registers and the flags.
    unsafe {
        std::arch::asm!(
            "pxor {acc}, {acc}",
            "test {n}, {n}",
            "jz 4f",
            // The first pair: none before it to compare with.
            "movdqu {prev}, xmmword ptr [{src}]",
            "movdqu xmmword ptr [{dst}], {prev}",
            "add {src}, 16",
            "add {dst}, 16",
            "dec {n}",
            // The rest: groups of four, then the last `rem` one by one.
            "mov {rem:e}, {n:e}",
            "and {rem:e}, 3",
            "shr {n}, 2",
            "jz 3f",
            // One offset, from minus the groups' bytes up to 0, indexes both ends.
            "shl {n}, 6",
            "add {src}, {n}",
            "add {dst}, {n}",
            "neg {n}",
            "2:",
            "movdqu {a}, xmmword ptr [{src} + {n}]",
            "movdqu {b}, xmmword ptr [{src} + {n} + 16]",
            "movdqu {c}, xmmword ptr [{src} + {n} + 32]",
            "movdqu {d}, xmmword ptr [{src} + {n} + 48]",
            "movdqu xmmword ptr [{dst} + {n}], {a}",
            "movdqu xmmword ptr [{dst} + {n} + 16], {b}",
            "movdqu xmmword ptr [{dst} + {n} + 32], {c}",
            "movdqu xmmword ptr [{dst} + {n} + 48], {d}",
            "pcmpeqd {prev}, {a}",
            "por {acc}, {prev}",
            "pcmpeqd {a}, {b}",
            "por {acc}, {a}",
            "pcmpeqd {b}, {c}",
            "por {acc}, {b}",
            "movdqa {prev}, {d}",
            "pcmpeqd {c}, {d}",
            "por {acc}, {c}",
            "add {n}, 64",
            "jnz 2b",
            // `src` and `dst` now stand past the groups.
            "3:",
            "test {rem:e}, {rem:e}",
            "jz 4f",
            "5:",
            "movdqu {a}, xmmword ptr [{src}]",
            "movdqu xmmword ptr [{dst}], {a}",
            "pcmpeqd {prev}, {a}",
            "por {acc}, {prev}",
            "movdqa {prev}, {a}",
            "add {src}, 16",
            "add {dst}, 16",
            "dec {rem:e}",
            "jnz 5b",
            "4:",
            "pmovmskb {lanes:e}, {acc}",
            src = inout(reg) src.as_ptr() => _,
            dst = inout(reg) dst.as_mut_ptr() => _,
            n = inout(reg) count => _,
            rem = out(reg) _,
            lanes = lateout(reg) lanes,
            acc = out(xmm_reg) _,
            prev = out(xmm_reg) _,
            a = out(xmm_reg) _,
            b = out(xmm_reg) _,
            c = out(xmm_reg) _,
            d = out(xmm_reg) _,
            // Not `readonly` (it stores) and not `nomem`: the compiler moves no load of the
            // caller across the block (a scan's validating loads must follow its reads).
            options(nostack),
        );
    }
    // Byte 0 of the OR is all ones if some neighbours' keys agree in their low halves, byte 4
    // if some agree in their high halves.
    if lanes & 0x11 != 0x11 {
        return false;
    }
    // SAFETY: the block wrote every slot of `dst`.
    let copied = unsafe { &*(dst as *const [MaybeUninit<(u64, u64)>] as *const [(u64, u64)]) };
    copied.windows(2).any(|w| w[0].0 == w[1].0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pair copy: [`copy_pairs`] or [`copy_pairs_portable`].
    type Copy = fn(&[AtomicU64], &mut [MaybeUninit<(u64, u64)>]) -> bool;

    fn words(pairs: &[(u64, u64)]) -> Vec<AtomicU64> {
        pairs
            .iter()
            .flat_map(|&(k, v)| [AtomicU64::new(k), AtomicU64::new(v)])
            .collect()
    }

    /// The pairs `copy` writes for `src`, and what it returns; `dst` is one longer than the
    /// copy, and its last slot must stay as it was.
    fn run(copy: Copy, src: &[AtomicU64], count: usize) -> (Vec<(u64, u64)>, bool) {
        let sentinel = (0xdead, 0xbeef);
        let mut dst = vec![MaybeUninit::new(sentinel); count + 1];
        let duplicate = copy(src, &mut dst[..count]);
        // SAFETY: every slot was initialized above (and the copy writes only initialized values).
        let out: Vec<(u64, u64)> = dst.iter().map(|s| unsafe { s.assume_init() }).collect();
        assert_eq!(out[count], sentinel, "wrote past the copy");
        (out[..count].to_vec(), duplicate)
    }

    fn expected(pairs: &[(u64, u64)]) -> bool {
        pairs.windows(2).any(|w| w[0].0 == w[1].0)
    }

    /// Small random keys in increasing order, some neighbours with equal low or high halves.
    fn increasing(count: usize, next: &mut impl FnMut() -> u64) -> Vec<(u64, u64)> {
        let mut key = next() % 4;
        (0..count)
            .map(|_| {
                key += match next() % 4 {
                    0 => 1 << 32,
                    1 => (1 << 32) + 1,
                    _ => 1 + next() % 5,
                };
                (key, next())
            })
            .collect()
    }

    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut state = seed;
        move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        }
    }

    #[test]
    fn copies_every_pair_and_sees_a_duplicate_at_every_position() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let counts = if cfg!(miri) { 0..=5 } else { 0..=40 };
        for count in counts {
            let pairs = increasing(count, &mut next);
            let src = words(&pairs);
            for copy in [copy_pairs as Copy, copy_pairs_portable] {
                assert_eq!(run(copy, &src, count), (pairs.clone(), false), "{count}");
            }
            // A duplicate of each pair right after it (the left copy of a shift).
            for at in 0..count {
                let mut dup = pairs.clone();
                dup.insert(at + 1, (pairs[at].0, next()));
                let src = words(&dup);
                for n in [dup.len(), at + 2] {
                    for copy in [copy_pairs as Copy, copy_pairs_portable] {
                        assert_eq!(run(copy, &src, n), (dup[..n].to_vec(), true), "{at} {n}");
                    }
                }
                // Cut just before the duplicate's right copy: none in the copy.
                for copy in [copy_pairs as Copy, copy_pairs_portable] {
                    assert_eq!(run(copy, &src, at + 1), (dup[..=at].to_vec(), false));
                }
            }
        }
    }

    #[test]
    fn a_key_equal_in_one_half_only_is_no_duplicate() {
        let key = 0x1234_5678_9abc_def0u64;
        let low_only = (key & 0xffff_ffff) | (0x1111_1111 << 32);
        let high_only = (key & !0xffff_ffff) | 0x2222_2222;
        // Halves agree with neighbours on both sides, and the values agree too.
        let pairs = [(key, 7), (low_only, 7), (key, 7), (high_only, 7), (key, 7)];
        let src = words(&pairs);
        for copy in [copy_pairs as Copy, copy_pairs_portable] {
            assert_eq!(run(copy, &src, pairs.len()), (pairs.to_vec(), false));
        }
        let src = words(&[(3, 1), (3, 2)]);
        for copy in [copy_pairs as Copy, copy_pairs_portable] {
            assert_eq!(run(copy, &src, 2), (vec![(3, 1), (3, 2)], true));
        }
    }

    #[test]
    fn matches_the_scalar_copy_on_random_runs() {
        // Keys drawn from a small set so that neighbours repeat, whole or in one half.
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let rounds = if cfg!(miri) { 20 } else { 20_000 };
        for _ in 0..rounds {
            let count = (next() % 37) as usize;
            let pairs: Vec<(u64, u64)> = (0..count)
                .map(|_| {
                    let pick = [1u64, 2, 1 << 32, (1 << 32) | 1, u64::MAX, next()];
                    (pick[(next() % 6) as usize], next())
                })
                .collect();
            // One word more than the copy needs, which it must not read into the copy.
            let mut src = words(&pairs);
            src.push(AtomicU64::new(pairs.last().map_or(0, |p| p.0)));
            let fast = run(copy_pairs, &src, count);
            assert_eq!(fast, run(copy_pairs_portable, &src, count));
            assert_eq!(fast, (pairs.clone(), expected(&pairs)));
        }
    }

    #[test]
    #[should_panic(expected = "past the words")]
    fn a_copy_past_the_words_panics() {
        let src = words(&[(1, 2)]);
        let mut dst = [MaybeUninit::uninit(); 2];
        copy_pairs(&src, &mut dst);
    }
}
