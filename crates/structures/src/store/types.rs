//! Typed keys and values: how a map's Rust types become the bytes (or the `u64` words) the
//! structures hold, and the codes the catalog records so a map opened with other types is
//! refused.
//!
//! * Fixed-size types ([`Value::WIDTH`] is `Some`): the integers, `[u8; N]` and any
//!   [`PodValue`] type. A map whose key and value both fit 8 bytes keeps them inline in the
//!   structure's `u64` slots; any other map stores them in out-of-line records.
//! * Byte strings: `Vec<u8>` (passed as `&[u8]`, `Vec<u8>`, `&[u8; N]`...) and `String`
//!   (passed as `&str` or `String`), always in records.
//!
//! Key encodings sort like the keys ([`Key`]): integers big-endian, the signed ones with the
//! sign bit flipped, so an ordered map keeps numeric order (negative numbers first); byte
//! strings and `str` as their bytes (lexicographic order).

use std::fmt;

/// A key's and its value's encodings, lent by
/// [`EncodedRange::next_pair`](super::EncodedRange::next_pair).
pub type LentPair<'a> = (&'a [u8], &'a [u8]);

/// What a map's key or value type is, as the catalog records it: a kind in the low 8 bits, a
/// width (arrays and plain-data types) in the next 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TypeCode(u32);

mod kind {
    pub const U64: u32 = 0;
    pub const U8: u32 = 1;
    pub const U16: u32 = 2;
    pub const U32: u32 = 3;
    pub const U128: u32 = 4;
    pub const I8: u32 = 5;
    pub const I16: u32 = 6;
    pub const I32: u32 = 7;
    pub const I64: u32 = 8;
    pub const I128: u32 = 9;
    pub const BYTES: u32 = 10;
    pub const STRING: u32 = 11;
    pub const ARRAY: u32 = 12;
    pub const POD: u32 = 13;
}

impl TypeCode {
    const fn new(kind: u32, width: usize) -> TypeCode {
        TypeCode(kind | (width as u32) << 8)
    }

    /// The code as the catalog stores it (24 bits). `u64`'s is 0, which is what catalogs
    /// written before typed maps hold.
    pub(crate) fn bits(self) -> u64 {
        u64::from(self.0)
    }

    /// The code stored as `bits`.
    pub(crate) fn from_bits(bits: u64) -> TypeCode {
        TypeCode((bits & 0xff_ffff) as u32)
    }

    fn width(self) -> usize {
        (self.0 >> 8) as usize
    }
}

impl fmt::Display for TypeCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 & 0xff {
            kind::U64 => f.write_str("u64"),
            kind::U8 => f.write_str("u8"),
            kind::U16 => f.write_str("u16"),
            kind::U32 => f.write_str("u32"),
            kind::U128 => f.write_str("u128"),
            kind::I8 => f.write_str("i8"),
            kind::I16 => f.write_str("i16"),
            kind::I32 => f.write_str("i32"),
            kind::I64 => f.write_str("i64"),
            kind::I128 => f.write_str("i128"),
            kind::BYTES => f.write_str("byte string"),
            kind::STRING => f.write_str("String"),
            kind::ARRAY => write!(f, "[u8; {}]", self.width()),
            kind::POD => write!(f, "a {}-byte plain-data type", self.width()),
            other => write!(f, "an unknown type (code {other})"),
        }
    }
}

/// A type a map can hold as a value.
pub trait Value: Sized + 'static {
    /// The catalog's code for the type.
    const CODE: TypeCode;
    /// The name the catalog's type fingerprint records beside the code: a plain-data type's
    /// [`PodValue::NAME`]; empty for the built-in types, which their code names alone.
    const NAME: &'static str = "";
    /// Bytes of every encoding, for a fixed-size type; `None` for byte strings.
    const WIDTH: Option<usize>;
    /// The value the bytes `encoded` stand for, or `None` if they cannot be one (a wrong
    /// length, text that is not UTF-8): the map reports such a record as corrupt.
    fn decode(encoded: &[u8]) -> Option<Self>;

    /// [`Value::decode`] of bytes the caller owns: byte strings and `String`s take them as
    /// they are, without a copy.
    #[inline]
    fn decode_owned(encoded: Vec<u8>) -> Option<Self> {
        Self::decode(&encoded)
    }
}

/// A type a map can use as a key: its encoding sorts as the keys do, so an ordered map walks
/// keys in the type's order.
pub trait Key: Value {}

/// An argument a map of `T` takes as a key or value: `T` itself, and borrowed forms (`&str`
/// for `String`, `&[u8]` or `&[u8; N]` for `Vec<u8>`, references of any of them).
pub trait Encode<T: Value> {
    /// The encoding, borrowed where the argument already is bytes.
    fn encode(&self) -> Encoded<'_>;
}

/// An encoded key or value: borrowed bytes, or up to 16 bytes held inline.
pub enum Encoded<'a> {
    /// The argument's own bytes.
    Borrowed(&'a [u8]),
    /// A fixed-size encoding.
    Inline([u8; 16], u8),
}

impl Encoded<'_> {
    /// The bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        match self {
            Encoded::Borrowed(b) => b,
            Encoded::Inline(buf, len) => &buf[..*len as usize],
        }
    }

    /// The `u64` word of a fixed-size encoding of at most 8 bytes ([`word_of`] of
    /// [`Self::bytes`]). An inline encoding is read as its buffer's first 8 bytes (zero past
    /// its length), a copy of constant size: the typed word maps' keys and values then cost a
    /// byte swap each way, not two copies of a length known only at run time.
    #[inline(always)]
    pub(crate) fn word(&self) -> u64 {
        match self {
            Encoded::Inline(buf, len) => {
                debug_assert!(*len as usize <= 8, "a word holds at most 8 bytes");
                let mut word = [0u8; 8];
                word.copy_from_slice(&buf[..8]);
                u64::from_be_bytes(word)
            }
            Encoded::Borrowed(bytes) => word_of(bytes),
        }
    }

    #[inline]
    fn inline(bytes: &[u8]) -> Encoded<'static> {
        let mut buf = [0u8; 16];
        buf[..bytes.len()].copy_from_slice(bytes);
        Encoded::Inline(buf, bytes.len() as u8)
    }
}

impl<T: Value, A: Encode<T> + ?Sized> Encode<T> for &A {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        (**self).encode()
    }
}

/// The `u64` word of a fixed-size encoding of at most 8 bytes, in an order-preserving way
/// (big-endian, padded with zeros on the right: all encodings of one type have one length).
#[inline]
pub(crate) fn word_of(encoded: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    buf[..encoded.len()].copy_from_slice(encoded);
    u64::from_be_bytes(buf)
}

macro_rules! unsigned {
    ($($t:ty => $kind:expr),*) => {$(
        impl Value for $t {
            const CODE: TypeCode = TypeCode::new($kind, 0);
            const WIDTH: Option<usize> = Some(std::mem::size_of::<$t>());
            #[inline]
            fn decode(encoded: &[u8]) -> Option<Self> {
                Some(<$t>::from_be_bytes(encoded.try_into().ok()?))
            }
        }
        impl Key for $t {}
        impl Encode<$t> for $t {
            #[inline]
            fn encode(&self) -> Encoded<'_> {
                Encoded::inline(&self.to_be_bytes())
            }
        }
    )*};
}

unsigned!(u8 => kind::U8, u16 => kind::U16, u32 => kind::U32, u64 => kind::U64, u128 => kind::U128);

macro_rules! signed {
    ($($t:ty, $u:ty => $kind:expr),*) => {$(
        impl Value for $t {
            const CODE: TypeCode = TypeCode::new($kind, 0);
            const WIDTH: Option<usize> = Some(std::mem::size_of::<$t>());
            #[inline]
            fn decode(encoded: &[u8]) -> Option<Self> {
                let flipped = <$u>::from_be_bytes(encoded.try_into().ok()?);
                Some((flipped ^ (1 << (<$u>::BITS - 1))) as $t)
            }
        }
        impl Key for $t {}
        impl Encode<$t> for $t {
            #[inline]
            fn encode(&self) -> Encoded<'_> {
                // The sign bit flipped: negative numbers sort before positive ones.
                let flipped = (*self as $u) ^ (1 << (<$u>::BITS - 1));
                Encoded::inline(&flipped.to_be_bytes())
            }
        }
    )*};
}

signed!(i8, u8 => kind::I8, i16, u16 => kind::I16, i32, u32 => kind::I32, i64, u64 => kind::I64, i128, u128 => kind::I128);

impl Value for Vec<u8> {
    const CODE: TypeCode = TypeCode::new(kind::BYTES, 0);
    const WIDTH: Option<usize> = None;
    #[inline]
    fn decode(encoded: &[u8]) -> Option<Self> {
        Some(encoded.to_vec())
    }
    #[inline]
    fn decode_owned(encoded: Vec<u8>) -> Option<Self> {
        Some(encoded)
    }
}
impl Key for Vec<u8> {}

impl Encode<Vec<u8>> for [u8] {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(self)
    }
}
impl Encode<Vec<u8>> for Vec<u8> {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(self)
    }
}
impl<const N: usize> Encode<Vec<u8>> for [u8; N] {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(self)
    }
}
impl Encode<Vec<u8>> for str {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(self.as_bytes())
    }
}

impl Value for String {
    const CODE: TypeCode = TypeCode::new(kind::STRING, 0);
    const WIDTH: Option<usize> = None;
    #[inline]
    fn decode(encoded: &[u8]) -> Option<Self> {
        String::from_utf8(encoded.to_vec()).ok()
    }
    #[inline]
    fn decode_owned(encoded: Vec<u8>) -> Option<Self> {
        String::from_utf8(encoded).ok()
    }
}
impl Key for String {}

impl Encode<String> for str {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(self.as_bytes())
    }
}
impl Encode<String> for String {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(self.as_bytes())
    }
}

impl<const N: usize> Value for [u8; N] {
    const CODE: TypeCode = TypeCode::new(kind::ARRAY, N);
    const WIDTH: Option<usize> = Some(N);
    #[inline]
    fn decode(encoded: &[u8]) -> Option<Self> {
        encoded.try_into().ok()
    }
}
impl<const N: usize> Key for [u8; N] {}

impl<const N: usize> Encode<[u8; N]> for [u8; N] {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(self)
    }
}

/// A plain-data type stored as its bytes: implement this for a `bytemuck::Pod` type to use it
/// as a key or value through [`Pod`]. As a key, it sorts by its bytes in memory order, which is
/// its numeric order only for big-endian fields.
///
/// ```
/// # use pmem_structures::types::PodValue;
/// #[derive(Clone, Copy)]
/// #[repr(C)]
/// struct Reading {
///     celsius: f32,
///     sensor: u32,
/// }
/// // SAFETY: two 4-byte fields, `repr(C)`, no padding: every bit pattern is a `Reading`.
/// unsafe impl bytemuck::Zeroable for Reading {}
/// // SAFETY: as above; `Copy` and `'static`.
/// unsafe impl bytemuck::Pod for Reading {}
/// impl PodValue for Reading {
///     const NAME: &'static str = "sensors::Reading";
/// }
/// ```
pub trait PodValue: bytemuck::Pod + 'static {
    /// The type's name as the store records it: a map made with this type refuses to open
    /// with another plain-data type of the same size ([`crate::Error::TypeMismatch`]) by
    /// this name. Give each type its own, and keep it for as long as stores hold maps of it
    /// (renaming or moving the type in code changes nothing, changing this does).
    const NAME: &'static str;
}

/// A [`PodValue`] as a map key or value: `HashMap<u64, Pod<Point>>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pod<T>(pub T);

impl<T: PodValue> Value for Pod<T> {
    const CODE: TypeCode = TypeCode::new(kind::POD, std::mem::size_of::<T>());
    const NAME: &'static str = T::NAME;
    const WIDTH: Option<usize> = Some(std::mem::size_of::<T>());
    #[inline]
    fn decode(encoded: &[u8]) -> Option<Self> {
        bytemuck::try_pod_read_unaligned(encoded).ok().map(Pod)
    }
}
impl<T: PodValue> Key for Pod<T> {}

impl<T: PodValue> Encode<Pod<T>> for Pod<T> {
    #[inline]
    fn encode(&self) -> Encoded<'_> {
        Encoded::Borrowed(bytemuck::bytes_of(&self.0))
    }
}

/// A map's key and value types as the catalog records them: their codes and the fingerprint
/// of their codes and names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MapTypes {
    /// The key's and the value's [`Value::CODE`].
    pub codes: (TypeCode, TypeCode),
    /// [`fingerprint`] of both.
    pub fingerprint: u32,
}

impl MapTypes {
    /// The types of a map of `K -> V`.
    pub(crate) fn of<K: Value, V: Value>() -> MapTypes {
        MapTypes {
            codes: (K::CODE, V::CODE),
            fingerprint: fingerprint::<K, V>(),
        }
    }
}

/// The fingerprint the catalog records for a map of `K -> V`: the CRC-32C of both types'
/// codes and names, never 0 (which marks an entry made before fingerprints).
fn fingerprint<K: Value, V: Value>() -> u32 {
    let mut bytes = Vec::new();
    for (code, name) in [(K::CODE, K::NAME), (V::CODE, V::NAME)] {
        bytes.extend_from_slice(&code.0.to_le_bytes());
        bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
        bytes.extend_from_slice(name.as_bytes());
    }
    match crc32c::crc32c(&bytes) {
        0 => 1,
        crc => crc,
    }
}

/// Whether a map of `K -> V` keeps both inline in `u64` slots.
pub(crate) fn inline<K: Value, V: Value>() -> bool {
    matches!(K::WIDTH, Some(w) if w <= 8) && matches!(V::WIDTH, Some(w) if w <= 8)
}

/// Decode the inline `word` of a `T` (a fixed-size type of at most 8 bytes).
#[inline]
pub(crate) fn from_word<T: Value>(word: u64) -> Option<T> {
    let width = T::WIDTH.filter(|&w| w <= 8)?;
    T::decode(&word.to_be_bytes()[..width])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc<T: Value>(v: impl Encode<T>) -> Vec<u8> {
        v.encode().bytes().to_vec()
    }

    #[test]
    fn signed_keys_encode_in_numeric_order_and_decode_back() {
        let values = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        let encoded: Vec<Vec<u8>> = values.iter().map(enc::<i64>).collect();
        assert!(encoded.windows(2).all(|w| w[0] < w[1]));
        for (v, e) in values.iter().zip(&encoded) {
            assert_eq!(i64::decode(e), Some(*v));
        }
        assert!(enc::<i8>(-1i8) < enc::<i8>(0i8));
        assert_eq!(i128::decode(&enc::<i128>(-3i128)), Some(-3));
    }

    #[test]
    fn inline_words_keep_the_order_of_their_encodings() {
        let small: Vec<u64> = [0u16, 1, 255, 256, u16::MAX]
            .iter()
            .map(|v| word_of(enc::<u16>(v).as_slice()))
            .collect();
        assert!(small.windows(2).all(|w| w[0] < w[1]));
        for v in [0u16, 300, u16::MAX] {
            assert_eq!(from_word::<u16>(word_of(&enc::<u16>(v))), Some(v));
        }
        assert_eq!(from_word::<i32>(word_of(&enc::<i32>(-9i32))), Some(-9));
        assert_eq!(from_word::<[u8; 3]>(word_of(b"abc")), Some(*b"abc"));
        assert_eq!(from_word::<u64>(42), Some(42), "u64 words are the numbers");
    }

    #[test]
    fn strings_and_byte_strings_take_their_borrowed_forms() {
        assert_eq!(enc::<String>("abc"), b"abc");
        assert_eq!(enc::<String>(String::from("é")), "é".as_bytes());
        assert_eq!(enc::<Vec<u8>>(b"xy"), b"xy");
        assert_eq!(enc::<Vec<u8>>(&b"xy"[..]), b"xy");
        assert_eq!(enc::<Vec<u8>>(vec![1u8, 2]), [1, 2]);
        assert_eq!(String::decode(&[0xff]), None, "not UTF-8");
    }

    #[test]
    fn codes_name_their_types() {
        assert_eq!(
            u64::CODE.bits(),
            0,
            "catalogs before typed maps hold u64 maps"
        );
        assert_eq!(<[u8; 16]>::CODE.to_string(), "[u8; 16]");
        assert_eq!(String::CODE.to_string(), "String");
        assert_eq!(
            TypeCode::from_bits(<[u8; 16]>::CODE.bits()),
            <[u8; 16]>::CODE
        );
        assert!(inline::<u64, i32>());
        assert!(!inline::<u128, u64>());
        assert!(!inline::<u64, String>());
    }
}
