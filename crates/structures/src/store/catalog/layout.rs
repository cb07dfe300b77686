//! Where the catalog's bytes are: a 64-byte header and fixed-size entries, in the pool's root
//! object. Nothing else in the store knows these offsets.

use crate::kind::StructureKind;
use crate::store::types::TypeCode;

/// The header's magic: the root object holds a store catalog.
pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"PMCATLG1");
/// The catalog format this code writes: 2, each map's entry records a fingerprint of its key
/// and value types' names (`entry::KIND`).
pub(super) const VERSION: u64 = 2;
/// The format before fingerprints, which this code reads: its maps' fingerprints are unknown,
/// and the first one recorded (by a map's first open or a new structure) makes the catalog
/// version 2, in the same transaction.
pub(super) const VERSION_WITHOUT_FINGERPRINTS: u64 = 1;
/// The catalog format of a store with a write-batch area (header word
/// [`header::BATCH_AREA`]), its entries as in [`VERSION`]'s: a build that reads only versions 1
/// and 2 refuses it, so it never opens a store whose last batch it would not finish. The
/// store's first batch makes it version 3 (from 1 or 2), in the transaction that makes the
/// area.
pub(super) const VERSION_WITH_BATCHES: u64 = 3;
/// Bytes of the header.
pub(super) const HEADER_BYTES: u64 = 64;
/// Bytes of one entry: a line of fields and a line of name.
pub(super) const ENTRY_BYTES: u64 = 128;
/// The longest name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Header words.
pub(super) mod header {
    pub const MAGIC: u64 = 0;
    pub const VERSION: u64 = 8;
    pub const CAPACITY: u64 = 16;
    /// The write-batch area's block (0 for none; the store's batch log,
    /// `crate::store::batch`).
    pub const BATCH_AREA: u64 = 24;
}

/// Entry words, from the entry's start.
pub(super) mod entry {
    /// Bits 0..8: the structure's kind code (0 marks a free entry); bits 32..64 (version 2):
    /// the fingerprint of a map's key and value types ([`crate::store::types`]), 0 if unknown.
    pub const KIND: u64 = 0;
    /// [`super::State`] code.
    pub const STATE: u64 = 8;
    /// The structure's root block.
    pub const ROOT: u64 = 16;
    /// While removing: the block listing what is left to free (`removal.rs` has its format).
    pub const REMOVAL_LIST: u64 = 24;
    /// While removing: how many blocks of that list are freed already.
    pub const REMOVAL_CURSOR: u64 = 32;
    /// Bits 0..8: bytes of the name; bits 8..32 and 32..56: a map's key and value type codes
    /// ([`crate::store::types::TypeCode`]; 0 is `u64`, so entries written before typed maps
    /// read as `u64 -> u64`).
    pub const NAME_LEN: u64 = 40;
    /// Maps: 1 if the key the structure reserves for itself holds a value (kept here).
    pub const SIDE_PRESENT: u64 = 48;
    /// Maps: that key's value.
    pub const SIDE_VALUE: u64 = 56;
    /// The name's bytes.
    pub const NAME: u64 = 64;
}

/// The bytes of the root object a catalog of `capacity` entries needs.
pub fn root_bytes(capacity: u64) -> u64 {
    HEADER_BYTES + capacity * ENTRY_BYTES
}

/// The capacity a root object of `root_bytes` holds.
pub(super) fn capacity_of(root_bytes: u64) -> u64 {
    root_bytes.saturating_sub(HEADER_BYTES) / ENTRY_BYTES
}

/// The lifecycle of an entry in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// The structure is live.
    Live,
    /// The structure is being freed, batch by batch; open finishes the job.
    Removing,
    /// The structure is being emptied by its own crash-safe removes, to be removed once it
    /// is small (its removal on a full pool found no room for the list of its blocks); the
    /// store's open finishes the job, opening it. Its name is taken, but no handle reaches
    /// it. (A build that predates this state refuses the catalog, naming the state code.)
    Draining,
}

impl State {
    pub(super) fn code(self) -> u64 {
        match self {
            State::Live => 1,
            State::Removing => 2,
            State::Draining => 3,
        }
    }

    pub(super) fn from_code(code: u64) -> Option<State> {
        match code {
            1 => Some(State::Live),
            2 => Some(State::Removing),
            3 => Some(State::Draining),
            _ => None,
        }
    }
}

/// One decoded entry in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EntryImage {
    pub kind: StructureKind,
    pub state: State,
    pub root: u64,
    pub removal_list: u64,
    pub removal_cursor: u64,
    pub name: String,
    pub side: Option<u64>,
    /// A map's key and value types (`u64` for other structures).
    pub types: (TypeCode, TypeCode),
    /// The fingerprint of the types' names; 0: unknown (an entry of a version 1 catalog).
    pub fingerprint: u32,
}

impl EntryImage {
    /// The entry's bytes.
    pub(super) fn bytes(&self) -> [u8; ENTRY_BYTES as usize] {
        let mut b = [0u8; ENTRY_BYTES as usize];
        let mut put = |at: u64, v: u64| {
            b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
        };
        put(
            entry::KIND,
            self.kind.code() | u64::from(self.fingerprint) << 32,
        );
        put(entry::STATE, self.state.code());
        put(entry::ROOT, self.root);
        put(entry::REMOVAL_LIST, self.removal_list);
        put(entry::REMOVAL_CURSOR, self.removal_cursor);
        put(
            entry::NAME_LEN,
            self.name.len() as u64 | self.types.0.bits() << 8 | self.types.1.bits() << 32,
        );
        put(entry::SIDE_PRESENT, u64::from(self.side.is_some()));
        put(entry::SIDE_VALUE, self.side.unwrap_or(0));
        let name = entry::NAME as usize;
        b[name..name + self.name.len()].copy_from_slice(self.name.as_bytes());
        b
    }

    /// Decode an entry's bytes, read from a catalog of format `version`: `Ok(None)` for a
    /// free entry, `Err` naming what is wrong.
    pub(super) fn decode(
        b: &[u8; ENTRY_BYTES as usize],
        version: u64,
    ) -> Result<Option<EntryImage>, String> {
        let word =
            |at: u64| u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap());
        let kind_word = word(entry::KIND);
        if kind_word == 0 {
            return Ok(None);
        }
        let (code, fingerprint) = (kind_word & 0xffff_ffff, (kind_word >> 32) as u32);
        if fingerprint != 0 && version == VERSION_WITHOUT_FINGERPRINTS {
            return Err(format!(
                "a type fingerprint in the kind word {kind_word:#x} of a version 1 catalog"
            ));
        }
        let kind = StructureKind::from_code(code).ok_or(format!("unknown kind code {code}"))?;
        let state = State::from_code(word(entry::STATE))
            .ok_or(format!("unknown state code {}", word(entry::STATE)))?;
        let packed = word(entry::NAME_LEN);
        if packed >> 56 != 0 {
            return Err(format!("stray bits in the name-length word {packed:#x}"));
        }
        let types = (
            TypeCode::from_bits(packed >> 8),
            TypeCode::from_bits(packed >> 32),
        );
        let len = packed & 0xff;
        if len == 0 || len > MAX_NAME_BYTES as u64 {
            return Err(format!("name length {len}"));
        }
        let name = &b[entry::NAME as usize..(entry::NAME + len) as usize];
        let name = std::str::from_utf8(name)
            .map_err(|_| "the name is not UTF-8".to_string())?
            .to_string();
        let side = match word(entry::SIDE_PRESENT) {
            0 => None,
            1 => Some(word(entry::SIDE_VALUE)),
            other => return Err(format!("reserved-key flag {other}")),
        };
        Ok(Some(EntryImage {
            kind,
            state,
            root: word(entry::ROOT),
            removal_list: word(entry::REMOVAL_LIST),
            removal_cursor: word(entry::REMOVAL_CURSOR),
            name,
            side,
            types,
            fingerprint,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_through_its_bytes() {
        let image = EntryImage {
            kind: StructureKind::BTreeMap,
            state: State::Removing,
            root: 0x4_0040,
            removal_list: 0x9_0000,
            removal_cursor: 17,
            name: "orders".into(),
            side: Some(u64::MAX - 3),
            types: (
                <[u8; 16] as crate::store::types::Value>::CODE,
                <String as crate::store::types::Value>::CODE,
            ),
            fingerprint: 0xdead_beef,
        };
        assert_eq!(
            EntryImage::decode(&image.bytes(), VERSION),
            Ok(Some(image.clone()))
        );
        assert_eq!(
            EntryImage::decode(&[0; ENTRY_BYTES as usize], VERSION),
            Ok(None)
        );
        // A version 1 entry has no fingerprint: one there is damage.
        assert!(EntryImage::decode(&image.bytes(), VERSION_WITHOUT_FINGERPRINTS).is_err());
        let unknown = EntryImage {
            fingerprint: 0,
            ..image
        };
        assert_eq!(
            EntryImage::decode(&unknown.bytes(), VERSION_WITHOUT_FINGERPRINTS),
            Ok(Some(unknown))
        );
    }

    #[test]
    fn damaged_entries_are_named() {
        let mut b = EntryImage {
            kind: StructureKind::HashMap,
            state: State::Live,
            root: 64,
            removal_list: 0,
            removal_cursor: 0,
            name: "x".repeat(MAX_NAME_BYTES),
            side: None,
            types: (TypeCode::from_bits(0), TypeCode::from_bits(0)),
            fingerprint: 7,
        }
        .bytes();
        assert!(EntryImage::decode(&b, VERSION).unwrap().is_some());
        b[entry::NAME_LEN as usize] = 65;
        assert_eq!(
            EntryImage::decode(&b, VERSION),
            Err("name length 65".to_string())
        );
        b[0] = 9;
        assert_eq!(
            EntryImage::decode(&b, VERSION),
            Err("unknown kind code 9".to_string())
        );
        b[0] = 1;
        b[1] = 1;
        assert_eq!(
            EntryImage::decode(&b, VERSION),
            Err("unknown kind code 257".to_string())
        );
    }
}
