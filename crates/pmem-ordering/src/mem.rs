//! Race-free byte copies into and out of shared persistent memory.
//!
//! A pool is shared between threads, and a reader may look at bytes a writer of another thread
//! is changing (FAIR's lock-free readers do exactly that). Plain `memcpy` on such bytes would be
//! a data race, so every copy here is made of relaxed atomic accesses.
//!
//! # One access size per word
//!
//! Every access is to a whole, aligned 8-byte word, never to a part of one: Rust's memory model
//! (and Miri) makes overlapping atomic accesses of different sizes undefined behaviour when they
//! race, and the pool's safe API also loads and stores whole words (`Pool::load_u64`, the word
//! views). So the ragged ends of a range are not stored byte by byte: their bytes are merged
//! into the containing word with a compare-exchange loop, which keeps whatever another thread
//! stores to the word's other bytes meanwhile; and they are loaded as their whole word. The
//! containing words of a range reach past it (up to 7 bytes each side), so callers hand ranges
//! whose containing words are valid: a pool's mapping is page-aligned and its size a multiple
//! of 8 (checked when its header is made or read), so every byte's word lies in it.
//!
//! On x86-64 the loads and stores compile to ordinary moves, the merge to `lock cmpxchg`.

use std::sync::atomic::{AtomicU64, Ordering};

/// The 8-byte word containing `p`, and `p`'s index in it.
#[inline(always)]
fn containing_word(p: *mut u8) -> (*mut u64, usize) {
    let at = p.addr() % 8;
    // Pointer arithmetic rather than integer addresses, so the pointer keeps its provenance.
    (p.wrapping_sub(at).cast::<u64>(), at)
}

/// Store `bytes` (at most `8 - at` of them) at index `at` of the word at `word`, leaving its
/// other bytes as they are even if another thread changes them meanwhile.
///
/// # Safety
/// `word` is 8-aligned and valid for reads and writes.
#[inline(always)]
unsafe fn merge_into_word(word: *mut u64, at: usize, bytes: &[u8]) {
    debug_assert!(at + bytes.len() <= 8);
    let mut value = [0u8; 8];
    let mut mask = [0u8; 8];
    value[at..at + bytes.len()].copy_from_slice(bytes);
    mask[at..at + bytes.len()].fill(0xFF);
    let (value, mask) = (u64::from_ne_bytes(value), u64::from_ne_bytes(mask));
    // SAFETY: aligned and valid by the caller's contract.
    let word = unsafe { AtomicU64::from_ptr(word) };
    let mut current = word.load(Ordering::Relaxed);
    loop {
        let merged = (current & !mask) | value;
        match word.compare_exchange_weak(current, merged, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(seen) => current = seen,
        }
    }
}

/// Store `src` at `dst` with relaxed atomic accesses of whole words (see the module docs).
///
/// # Safety
/// `dst .. dst + src.len()` must be valid for writes for the duration of the call, and so must
/// the rest of the 8-byte words containing its ends (read and rewritten unchanged).
#[inline]
pub(crate) unsafe fn store_bytes(dst: *mut u8, src: &[u8]) {
    if src.is_empty() {
        return;
    }
    let mut d = dst;
    let mut s = src;
    let (word, at) = containing_word(d);
    if at != 0 || s.len() < 8 {
        let head = (8 - at).min(s.len());
        // SAFETY: the word containing `dst` is aligned and valid (this function's contract).
        unsafe { merge_into_word(word, at, &s[..head]) };
        d = d.wrapping_add(head);
        s = &s[head..];
    }
    // Whole words, as one loop over exact chunks (no bounds check a word).
    let (words, rest) = s.as_chunks::<8>();
    for &chunk in words {
        // SAFETY: d is 8-aligned (past the head) and in range.
        unsafe {
            AtomicU64::from_ptr(d.cast::<u64>()).store(u64::from_ne_bytes(chunk), Ordering::Relaxed)
        };
        d = d.wrapping_add(8);
    }
    if !rest.is_empty() {
        // SAFETY: d is 8-aligned; its word holds the range's last bytes, so it is valid by this
        // function's contract.
        unsafe { merge_into_word(d.cast::<u64>(), 0, rest) };
    }
}

/// Load `dst.len()` bytes from `src` with relaxed atomic loads of whole words (see the module
/// docs).
///
/// # Safety
/// `src .. src + dst.len()` must be valid for reads for the duration of the call, and so must
/// the rest of the 8-byte words containing its ends.
#[inline]
pub(crate) unsafe fn load_bytes(src: *const u8, dst: &mut [u8]) {
    if dst.is_empty() {
        return;
    }
    let mut p = src.cast_mut();
    let mut i = 0;
    let (word, at) = containing_word(p);
    if at != 0 || dst.len() < 8 {
        let head = (8 - at).min(dst.len());
        // SAFETY: the word containing `src` is aligned and valid (this function's contract).
        let value = unsafe { AtomicU64::from_ptr(word).load(Ordering::Relaxed) };
        dst[..head].copy_from_slice(&value.to_ne_bytes()[at..at + head]);
        p = p.wrapping_add(head);
        i = head;
    }
    // Whole words, as one loop over exact chunks (no bounds check a word).
    let (words, rest) = dst[i..].as_chunks_mut::<8>();
    for chunk in words.iter_mut() {
        // SAFETY: p is 8-aligned (past the head) and in range.
        let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>()).load(Ordering::Relaxed) };
        *chunk = word.to_ne_bytes();
        p = p.wrapping_add(8);
    }
    if !rest.is_empty() {
        // SAFETY: p is 8-aligned; its word holds the range's last bytes, so it is valid by this
        // function's contract.
        let value = unsafe { AtomicU64::from_ptr(p.cast::<u64>()).load(Ordering::Relaxed) };
        let n = rest.len();
        rest.copy_from_slice(&value.to_ne_bytes()[..n]);
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
        fn store_then_load_round_trips_and_keeps_the_neighbours(
            offset in 0usize..64,
            data in proptest::collection::vec(any::<u8>(), 0..300),
            fill in any::<u8>(),
        ) {
            let mut buf = vec![u64::from_ne_bytes([fill; 8]); 64];
            let base = buf.as_mut_ptr() as *mut u8;
            // SAFETY: offset + 300 < 512 bytes of buf, whose words are aligned and in it.
            unsafe { store_bytes(base.add(offset), &data) };
            let mut back = vec![0u8; data.len()];
            // SAFETY: as above.
            unsafe { load_bytes(base.add(offset), &mut back) };
            prop_assert_eq!(&back, &data);
            let mut want = vec![fill; 512];
            want[offset..offset + data.len()].copy_from_slice(&data);
            let mut whole = vec![0u8; 512];
            // SAFETY: the whole of buf.
            unsafe { load_bytes(base, &mut whole) };
            prop_assert_eq!(whole, want);
        }
    }
}
