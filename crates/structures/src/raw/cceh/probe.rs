//! How an operation recognises its key's slot: [`SlotProbe`], and whether a table's key words
//! are unique ([`KeyWords`]).
//!
//! A `u64` table's key word *is* the key, so a slot whose key word equals it is the key's
//! slot. A byte-key table stores in the key word a 64-bit hash of the key bytes and in the
//! value word the offset of a record holding the key bytes: two keys may share a hash, so a
//! slot is the key's only if its key word is the hash *and* its record holds the key. The
//! table's code is written once over a probe; the `u64` probe's `matches` is `true` and
//! inlines away, so the `u64` operations compile to what they were before probes.

/// How a lookup or write recognises its key's slot.
pub(crate) trait SlotProbe {
    /// The key word (never [`super::EMPTY_KEY`] = 0: an operation with it is refused with
    /// [`super::CcehError::ReservedKey`]).
    fn word(&self) -> u64;

    /// Called only for a slot whose key word equals [`SlotProbe::word`]: does this slot (its
    /// value word) hold the probe's key?
    ///
    /// In a lock-free lookup the value may be stale or garbage (a slot being reused for
    /// another key, a segment being split): the lookup's validation (directory and entry
    /// unchanged, key word re-read) decides afterwards whether what it found counts, so an
    /// implementation must not panic (nor trust the value further than a bounds-checked read)
    /// whatever the value. Under the stripe lock (writes) the value is the slot's own.
    fn matches(&self, value: u64) -> bool;
}

/// A `u64` key is its own key word, and its slot is the one holding it: any value matches.
impl SlotProbe for u64 {
    #[inline(always)]
    fn word(&self) -> u64 {
        *self
    }

    #[inline(always)]
    fn matches(&self, _value: u64) -> bool {
        true
    }
}

/// Whether a table's key words are its keys (unique) or hashes of keys (shared).
///
/// The mode is not recorded in the table's root: the caller says it at create and open (a
/// byte-key map records it in its own root). Opening a `Hashed` table as `Unique` is a bug of
/// the caller: recovery would take entries that share a key word for copies of one key and
/// keep only the first. On a `Hashed` table the `u64` operations (`get`, `insert`, ...) see key
/// words, whose every value matches: the first entry of a key word; its entries are written
/// and read through probes (`get_probe`, `put_probe`, `remove_probe`), and `insert_batch` is
/// refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KeyWords {
    /// Each key word is a key: at most one live slot holds it (the `u64` tables).
    Unique,
    /// Key words are hashes: several live slots may share one, with different values (the
    /// byte-key tables, whose values point at records holding the keys).
    Hashed,
}

impl KeyWords {
    /// What tells two live slots apart as entries: the key word alone (`Unique`), or the key
    /// word and the value (`Hashed`). Two live slots with the same identity are copies of one
    /// entry (a crash in the middle of a displacement leaves such a pair).
    #[inline]
    pub(crate) fn identity(self, key: u64, value: u64) -> (u64, u64) {
        match self {
            KeyWords::Unique => (key, 0),
            KeyWords::Hashed => (key, value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_u64_probe_is_its_own_word_and_matches_any_value() {
        assert_eq!(SlotProbe::word(&42u64), 42);
        assert!(42u64.matches(0));
        assert!(42u64.matches(u64::MAX));
    }

    #[test]
    fn unique_key_words_identify_an_entry_by_key_and_hashed_ones_by_key_and_value() {
        assert_eq!(
            KeyWords::Unique.identity(7, 1),
            KeyWords::Unique.identity(7, 2)
        );
        assert_ne!(
            KeyWords::Hashed.identity(7, 1),
            KeyWords::Hashed.identity(7, 2)
        );
        assert_eq!(KeyWords::Hashed.identity(7, 1), (7, 1));
    }
}
