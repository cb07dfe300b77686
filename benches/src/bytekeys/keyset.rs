//! The keys and values of the byte-key section: which keys a map holds ([`KeyKind`], made
//! once per run by [`Keys::new`]) and the value written for a record at a version
//! ([`value_tag`], [`fill_value`]), which reads check ([`tag_matches`]).

use serde::Serialize;

use crate::keys::{random_keys_except_max, shuffled, SplitMix64};

/// Bytes of a byte key (both kinds).
pub const BYTE_KEY_LEN: usize = 16;

/// Bits of a value tag that hold the record number; the version sits above them.
const RECORD_BITS: u32 = 40;

/// How a map's keys are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum KeyKind {
    /// Distinct random `u64`s (never `u64::MAX`, FAST&FAIR's reserved key): the inline path.
    U64,
    /// 16 random bytes: distinct 7-byte prefixes, so an ordered map stays one layer.
    Random16,
    /// `user:%011d` of the record numbers in a random order: every key shares its first 8
    /// bytes (`user:000` below 10^8 records), so an ordered map of them is layered.
    User,
}

impl KeyKind {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            KeyKind::U64 => "u64",
            KeyKind::Random16 => "16 random bytes",
            KeyKind::User => "user:%011d",
        }
    }

    /// Bytes of one key.
    pub fn key_bytes(self) -> usize {
        match self {
            KeyKind::U64 => 8,
            KeyKind::Random16 | KeyKind::User => BYTE_KEY_LEN,
        }
    }
}

/// Every key of a map, indexed by record number.
pub enum Keys {
    /// `u64` keys.
    Words(Vec<u64>),
    /// 16-byte keys.
    Bytes(Vec<[u8; BYTE_KEY_LEN]>),
}

impl Keys {
    /// The keys of records `0..records` of `kind`, from `seed` (the same seed, the same keys).
    pub fn new(kind: KeyKind, records: u64, seed: u64) -> Keys {
        match kind {
            KeyKind::U64 => Keys::Words(random_keys_except_max(records, seed)),
            KeyKind::Random16 => {
                let mut rng = SplitMix64::new(seed);
                let keys = (0..records)
                    .map(|_| {
                        let mut key = [0u8; BYTE_KEY_LEN];
                        key[..8].copy_from_slice(&rng.next_u64().to_be_bytes());
                        key[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
                        key
                    })
                    .collect();
                Keys::Bytes(keys)
            }
            KeyKind::User => {
                let numbers: Vec<u64> = (0..records).collect();
                let keys = shuffled(&numbers, seed)
                    .into_iter()
                    .map(|n| {
                        let mut key = [0u8; BYTE_KEY_LEN];
                        // At most 11 digits: a record count is far below 10^11.
                        let text = format!("user:{:011}", n % 100_000_000_000);
                        key.copy_from_slice(text.as_bytes());
                        key
                    })
                    .collect();
                Keys::Bytes(keys)
            }
        }
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        match self {
            Keys::Words(k) => k.len(),
            Keys::Bytes(k) => k.len(),
        }
    }

    /// Whether there is no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The 8-byte tag of record `record`'s value at `version`: the record number in the low
/// 40 bits, the version above. A `u64` map stores the tag as its value.
pub fn value_tag(record: usize, version: u32) -> u64 {
    (record as u64 & ((1 << RECORD_BITS) - 1)) | (u64::from(version) << RECORD_BITS)
}

/// The record number a tag names.
pub fn record_of_tag(tag: u64) -> u64 {
    tag & ((1 << RECORD_BITS) - 1)
}

/// Whether `tag` is a tag of record `record` (at any version).
pub fn tag_matches(tag: u64, record: usize) -> bool {
    record_of_tag(tag) == record_of_tag(record as u64)
}

/// Write the value of `record` at `version` into `value` (its length is the value size): the
/// tag, little-endian, then the fill bytes left as they are.
pub fn fill_value(value: &mut [u8], record: usize, version: u32) {
    value[..8].copy_from_slice(&value_tag(record, version).to_le_bytes());
}

/// The tag at the front of a value read back (`None` if shorter than a tag).
pub fn tag_of(value: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(value.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_keys_are_distinct_sixteen_bytes_and_user_keys_share_a_prefix() {
        let Keys::Bytes(random) = Keys::new(KeyKind::Random16, 5_000, 3) else {
            panic!("random keys are bytes")
        };
        let prefixes: std::collections::HashSet<[u8; 7]> =
            random.iter().map(|k| k[..7].try_into().unwrap()).collect();
        assert_eq!(prefixes.len(), 5_000, "7-byte prefixes are distinct");
        let Keys::Bytes(user) = Keys::new(KeyKind::User, 5_000, 3) else {
            panic!("user keys are bytes")
        };
        assert!(user.iter().all(|k| k.starts_with(b"user:000000")));
        let distinct: std::collections::HashSet<_> = user.iter().collect();
        assert_eq!(distinct.len(), 5_000);
        assert_ne!(
            &user[0], b"user:00000000000",
            "records come in a random order"
        );
        let Keys::Words(words) = Keys::new(KeyKind::U64, 5_000, 3) else {
            panic!("u64 keys are words")
        };
        assert!(!words.contains(&u64::MAX));
        assert_eq!(Keys::new(KeyKind::U64, 5_000, 3).len(), 5_000);
    }

    #[test]
    fn a_value_carries_its_record_at_every_version() {
        let mut value = vec![0xA5; 100];
        fill_value(&mut value, 12_345, 7);
        let tag = tag_of(&value).unwrap();
        assert!(tag_matches(tag, 12_345));
        assert!(!tag_matches(tag, 12_346));
        assert_eq!(tag, value_tag(12_345, 7));
        assert_ne!(value_tag(12_345, 7), value_tag(12_345, 8));
        assert_eq!(value[8..], [0xA5; 92]);
        assert_eq!(tag_of(&value[..7]), None);
    }
}
