//! Between the handles' typed keys and values and what the structures hold: `u64` words for
//! maps whose types fit 8 bytes, bytes for maps of records.

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
