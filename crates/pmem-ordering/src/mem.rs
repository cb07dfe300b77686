//! Race-free byte copies into and out of shared persistent memory.
//!
//! A pool is shared between threads, and a reader may look at bytes a writer of another thread
//! is changing (FAIR's lock-free readers do exactly that). Plain `memcpy` on such bytes would be
//! a data race, so every copy here is made of relaxed atomic accesses: 8-byte words where the
//! destination is aligned, single bytes at the ragged edges. On x86-64 these compile to ordinary
//! moves.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Store `src` at `dst` with relaxed atomic stores.
///
/// # Safety
/// `dst .. dst + src.len()` must be valid for writes for the duration of the call.
#[inline]
pub(crate) unsafe fn store_bytes(dst: *mut u8, src: &[u8]) {
    // Pointer arithmetic rather than integer addresses, so the pointers keep their provenance.
    let mut d = dst;
    let mut s = src;
    while !s.is_empty() && (!d.addr().is_multiple_of(8) || s.len() < 8) {
        // SAFETY: d is in range by the caller's contract; AtomicU8 has alignment 1.
        unsafe { AtomicU8::from_ptr(d).store(s[0], Ordering::Relaxed) };
        d = d.wrapping_add(1);
        s = &s[1..];
    }
    // Whole words, as one loop over exact chunks (no bounds check a word).
    let (words, rest) = s.as_chunks::<8>();
    for &chunk in words {
        // SAFETY: d is 8-aligned and in range.
        unsafe {
            AtomicU64::from_ptr(d.cast::<u64>()).store(u64::from_ne_bytes(chunk), Ordering::Relaxed)
        };
        d = d.wrapping_add(8);
    }
    s = rest;
    for &b in s {
        // SAFETY: in range.
        unsafe { AtomicU8::from_ptr(d).store(b, Ordering::Relaxed) };
        d = d.wrapping_add(1);
    }
}

/// Load `dst.len()` bytes from `src` with relaxed atomic loads.
///
/// # Safety
/// `src .. src + dst.len()` must be valid for reads for the duration of the call.
#[inline]
pub(crate) unsafe fn load_bytes(src: *const u8, dst: &mut [u8]) {
    let mut p = src.cast_mut();
    let mut i = 0;
    while i < dst.len() && (!p.addr().is_multiple_of(8) || dst.len() - i < 8) {
        // SAFETY: in range by the caller's contract.
        dst[i] = unsafe { AtomicU8::from_ptr(p).load(Ordering::Relaxed) };
        p = p.wrapping_add(1);
        i += 1;
    }
    // Whole words, as one loop over exact chunks (no bounds check a word).
    let (words, _) = dst[i..].as_chunks_mut::<8>();
    for chunk in words.iter_mut() {
        // SAFETY: p is 8-aligned and in range.
        let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>()).load(Ordering::Relaxed) };
        *chunk = word.to_ne_bytes();
        p = p.wrapping_add(8);
    }
    i += words.len() * 8;
    while i < dst.len() {
        // SAFETY: in range.
        dst[i] = unsafe { AtomicU8::from_ptr(p).load(Ordering::Relaxed) };
        p = p.wrapping_add(1);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        // Miri interprets every access: a few cases keep its run short.
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

        #[test]
        fn store_then_load_round_trips(offset in 0usize..64, data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut buf = vec![0u64; 64];
            let base = buf.as_mut_ptr() as *mut u8;
            // SAFETY: offset + 300 < 512 bytes of buf.
            unsafe { store_bytes(base.add(offset), &data) };
            let mut back = vec![0u8; data.len()];
            // SAFETY: as above.
            unsafe { load_bytes(base.add(offset), &mut back) };
            prop_assert_eq!(back, data);
        }
    }
}
