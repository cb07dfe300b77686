//! The kinds of structure a pool can hold, and what their root magics say.
//!
//! Each structure's root starts with an 8-byte magic. When a root holds another kind than the
//! one asked for, the error names both in words ("a FAST&FAIR B+-tree, not a CCEH hash table"),
//! and a magic no structure writes prints as text ([`MagicText`]).

use std::fmt;

use pmem_ordering::MagicText;

/// A kind of persistent structure.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StructureKind {
    /// A CCEH extendible hash table ([`crate::cceh`]).
    HashMap,
    /// A FAST&FAIR B+-tree ([`crate::fastfair`]).
    BTreeMap,
    /// A NOVA-style datalog store of files ([`crate::datalog`]).
    Datalog,
    /// A CCEH hash table of byte-string keys and values in records ([`crate::records`]).
    RecordHashMap,
    /// An ordered map of byte-string keys and values in records: a trie of FAST&FAIR layers
    /// ([`crate::records`]).
    RecordBTreeMap,
    /// An ordered map of byte-string keys and values inline in persistent leaves, its inner
    /// nodes in DRAM ([`crate::raw::leafmap`]).
    LeafMap,
}

impl StructureKind {
    /// Every kind, in catalog-code order.
    pub const ALL: [StructureKind; 6] = [
        StructureKind::HashMap,
        StructureKind::BTreeMap,
        StructureKind::Datalog,
        StructureKind::RecordHashMap,
        StructureKind::RecordBTreeMap,
        StructureKind::LeafMap,
    ];

    /// The magic its roots start with.
    pub const fn magic(self) -> u64 {
        u64::from_le_bytes(match self {
            StructureKind::HashMap => *b"CCEH\0v01",
            StructureKind::BTreeMap => *b"FASTFAIR",
            StructureKind::Datalog => *b"DATALOG2",
            StructureKind::RecordHashMap => *b"CCEHREC1",
            StructureKind::RecordBTreeMap => *b"FFREC001",
            StructureKind::LeafMap => *b"LEAFMAP1",
        })
    }

    /// The kind whose roots start with `magic`, if any.
    pub fn from_magic(magic: u64) -> Option<StructureKind> {
        StructureKind::ALL.into_iter().find(|k| k.magic() == magic)
    }

    /// The stable code a catalog records for the kind (never reused).
    pub fn code(self) -> u64 {
        match self {
            StructureKind::HashMap => 1,
            StructureKind::BTreeMap => 2,
            StructureKind::Datalog => 3,
            StructureKind::RecordHashMap => 4,
            StructureKind::RecordBTreeMap => 5,
            StructureKind::LeafMap => 6,
        }
    }

    /// The kind a catalog code stands for, if any.
    pub fn from_code(code: u64) -> Option<StructureKind> {
        StructureKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// What it is, in words with an article: "a CCEH hash table".
    pub fn describe(self) -> &'static str {
        match self {
            StructureKind::HashMap => "a CCEH hash table",
            StructureKind::BTreeMap => "a FAST&FAIR B+-tree",
            StructureKind::Datalog => "a datalog file store",
            StructureKind::RecordHashMap => "a CCEH hash table of byte strings",
            StructureKind::RecordBTreeMap => "a FAST&FAIR B+-tree of byte strings",
            StructureKind::LeafMap => "an ordered map of byte strings in inline leaves",
        }
    }
}

impl fmt::Display for StructureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// What a root whose first word is `magic` holds, in words: the kind it names, "nothing (an
/// all-zero root)", or "unknown magic" and the magic as text.
pub fn describe_magic(magic: u64) -> String {
    match StructureKind::from_magic(magic) {
        Some(kind) => kind.describe().to_string(),
        None if magic == 0 => "nothing (an all-zero root)".to_string(),
        None => format!(
            "an unknown structure (magic {})",
            MagicText::from_word(magic)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{describe_magic, StructureKind};

    #[test]
    fn magics_and_codes_round_trip_and_are_distinct() {
        for kind in StructureKind::ALL {
            assert_eq!(StructureKind::from_magic(kind.magic()), Some(kind));
            assert_eq!(StructureKind::from_code(kind.code()), Some(kind));
            assert_eq!(describe_magic(kind.magic()), kind.describe());
        }
        assert_eq!(StructureKind::from_code(0), None);
    }

    #[test]
    fn unknown_magics_print_as_text() {
        assert_eq!(
            describe_magic(u64::from_le_bytes(*b"PMUNDO01")),
            "an unknown structure (magic \"PMUNDO01\")"
        );
        assert_eq!(describe_magic(0), "nothing (an all-zero root)");
    }
}
