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
    debug_assert!(at + bytes.len() <= 8 && !bytes.is_empty());
    // The bytes and their mask as the word's little-endian value, shifted into place, then
    // taken to the machine's order: no call to memcpy/memset for a few bytes.
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate() {
        value |= u64::from(b) << (8 * (at + i));
    }
    let mask = (u64::MAX >> (64 - 8 * bytes.len())) << (8 * at);
    let (value, mask) = (u64::from_le(value), u64::from_le(mask));
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
    let (words, rest) = src.as_chunks::<8>();
    if dst.addr().is_multiple_of(8) && rest.is_empty() {
        // Whole aligned words (a word, a slot, a log entry): the common case, small enough to
        // inline into the callers; ragged ranges take the call below.
        // SAFETY: dst is 8-aligned and the range valid (this function's contract).
        unsafe { store_words(dst, words) };
    } else {
        // SAFETY: this function's contract.
        unsafe { store_ragged(dst, src) };
    }
}

/// Store whole words at the 8-aligned `dst`.
///
/// # Safety
/// `dst` is 8-aligned and `dst .. dst + 8 * words.len()` valid for writes.
#[inline(always)]
unsafe fn store_words(dst: *mut u8, words: &[[u8; 8]]) {
    let mut d = dst;
    for &chunk in words {
        // SAFETY: d is 8-aligned and in range (the caller's contract).
        unsafe {
            AtomicU64::from_ptr(d.cast::<u64>()).store(u64::from_ne_bytes(chunk), Ordering::Relaxed)
        };
        d = d.wrapping_add(8);
    }
}

/// [`store_bytes`] of a range that starts or ends inside a word: its ends are merged into
/// their words.
///
/// # Safety
/// As [`store_bytes`].
#[inline(never)]
unsafe fn store_ragged(dst: *mut u8, src: &[u8]) {
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
    let (words, rest) = s.as_chunks::<8>();
    // SAFETY: d is 8-aligned (past the head) and the words in range.
    unsafe { store_words(d, words) };
    if !rest.is_empty() {
        // SAFETY: past the words d is 8-aligned; its word holds the range's last bytes, so it
        // is valid by this function's contract.
        unsafe { merge_into_word(d.wrapping_add(8 * words.len()).cast::<u64>(), 0, rest) };
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
    if src.addr().is_multiple_of(8) && dst.len().is_multiple_of(8) {
        // Whole aligned words: inlined (see `store_bytes`).
        // SAFETY: src is 8-aligned and the range valid (this function's contract).
        unsafe { load_words(src, dst.as_chunks_mut::<8>().0) };
    } else {
        // SAFETY: this function's contract.
        unsafe { load_ragged(src, dst) };
    }
}

/// Load whole words from the 8-aligned `src`.
///
/// # Safety
/// `src` is 8-aligned and `src .. src + 8 * words.len()` valid for reads.
#[inline(always)]
unsafe fn load_words(src: *const u8, words: &mut [[u8; 8]]) {
    let mut p = src.cast_mut();
    for chunk in words.iter_mut() {
        // SAFETY: p is 8-aligned and in range (the caller's contract).
        let word = unsafe { AtomicU64::from_ptr(p.cast::<u64>()).load(Ordering::Relaxed) };
        *chunk = word.to_ne_bytes();
        p = p.wrapping_add(8);
    }
}

/// [`load_bytes`] of a range that starts or ends inside a word: its ends are loaded as their
/// whole words.
///
/// # Safety
/// As [`load_bytes`].
#[inline(never)]
unsafe fn load_ragged(src: *const u8, dst: &mut [u8]) {
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
    let (words, rest) = dst[i..].as_chunks_mut::<8>();
    let whole = words.len();
    // SAFETY: p is 8-aligned (past the head) and the words in range.
    unsafe { load_words(p, words) };
    if !rest.is_empty() {
        let p = p.wrapping_add(8 * whole);
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
