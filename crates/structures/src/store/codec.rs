//! Between the handles' typed keys and values and what the structures hold: `u64` words for
//! maps whose types fit 8 bytes, bytes for maps of records.

use std::cell::Cell;

use super::error::Error;
use super::types::{self, Value};

/// The word of an encoded fixed-size key or value of at most 8 bytes.
#[inline]
pub(super) fn encode_word(encoded: &[u8]) -> u64 {
    types::word_of(encoded)
}

/// The `T` a word holds; a word that is none (it cannot happen for words this map's types
/// wrote) is reported as damage of the map `name`.
#[inline]
pub(super) fn decode_word<T: Value>(word: u64, what: &'static str, name: &str) -> Result<T, Error> {
    types::from_word(word).ok_or_else(|| undecodable::<T>(what, name))
}

/// The `T` the bytes of a record's key or value hold (taken without a copy where `T` is bytes).
pub(super) fn decode<T: Value>(bytes: Vec<u8>, what: &'static str, name: &str) -> Result<T, Error> {
    T::decode_owned(bytes).ok_or_else(|| undecodable::<T>(what, name))
}

fn undecodable<T: Value>(what: &'static str, name: &str) -> Error {
    Error::Undecodable {
        name: name.to_string(),
        what,
        type_code: T::CODE,
    }
}

/// Append the encoding of the `T` that `word` holds (its first `T::WIDTH` big-endian bytes,
/// the inverse of [`encode_word`]) to `out`.
pub(super) fn word_encoding<T: Value>(word: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&word.to_be_bytes()[..word_width::<T>()]);
}

/// Bytes of the encoding of a `T` held in a word: its first bytes, big-endian.
#[inline(always)]
pub(super) fn word_width<T: Value>() -> usize {
    T::WIDTH.map_or(8, |w| w.min(8))
}

/// A reused buffer keeps at most this much capacity between calls.
const KEPT_READ_BUFFER: usize = 1 << 20;

thread_local! {
    /// The buffer `get_with` lends values from, one per thread.
    static READ_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Run `f` on this thread's read buffer. Taken out of its cell for the call, so a `get_with`
/// made inside `f` works (on a buffer of its own) instead of borrowing one twice.
pub(super) fn with_read_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut buffer = READ_BUFFER.take();
    let result = f(&mut buffer);
    if buffer.capacity() <= KEPT_READ_BUFFER {
        READ_BUFFER.set(buffer);
    }
    result
}
