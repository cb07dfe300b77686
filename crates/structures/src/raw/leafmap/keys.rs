//! The DRAM hash index from each key to its slot (after VLDB'21 Viper: a volatile hash index
//! over persistent records, rebuilt at open): a point read hashes its key, finds the slot's
//! offset here and reads that one slot, instead of descending the ordered index to the leaf
//! and matching its fingerprints. Every write, split and unlink keeps it in step with the
//! leaves; open fills it from them.
//!
//! The table holds each key's 64-bit hash and its slot's offset, never the key: a match of
//! the hash is confirmed by reading the slot's key (the read needs the slot anyway). The hash
//! is seeded per map, at random, so keys chosen by a client cannot be made to share a
//! bucket; it is DRAM-only and never stored.

use std::hash::BuildHasher;

/// A free entry's slot word (no slot is at offset 0: slots are inside heap blocks).
const EMPTY: u64 = 0;
/// A removed entry's slot word (slots are 8-byte aligned): a probe goes on past it.
const REMOVED: u64 = 1;
/// Entries of a line.
const PER_LINE: usize = 4;

/// One cache line of the table: four entries, each a key's hash and its slot's offset.
type Line = [u64; 2 * PER_LINE];

/// Lines of a table this large or larger live in a mapping of their own on 2 MiB pages.
const MAPPED_LINES: usize = (2 << 20) / 64;

/// The table's lines, zeroed (every entry free): a large table in an anonymous mapping asked
/// for 2 MiB pages (transparent huge pages), so a lookup's miss needs no walk of 4 KiB page
/// tables; a small one, or one no mapping could be made for, on the heap.
enum Lines {
    Mapped(memmap2::MmapMut),
    Heap(Vec<Line>),
}

impl Lines {
    fn new(count: usize) -> Lines {
        if count >= MAPPED_LINES {
            if let Ok(map) = memmap2::MmapMut::map_anon(count * 64) {
                // A hint: without huge pages the table works the same.
                let _ = map.advise(memmap2::Advice::HugePage);
                return Lines::Mapped(map);
            }
        }
        Lines::Heap(vec![[0; 2 * PER_LINE]; count])
    }
}

impl std::ops::Deref for Lines {
    type Target = [Line];

    #[inline]
    fn deref(&self) -> &[Line] {
        match self {
            // A page-aligned mapping of whole lines: the cast cannot fail.
            Lines::Mapped(map) => bytemuck::cast_slice(&map[..]),
            Lines::Heap(lines) => lines,
        }
    }
}

impl std::ops::DerefMut for Lines {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Line] {
        match self {
            Lines::Mapped(map) => bytemuck::cast_slice_mut(&mut map[..]),
            Lines::Heap(lines) => lines,
        }
    }
}

/// Every live, undamaged slot's key, by hash: open addressing over cache lines of four
/// `(hash, slot)` entries, probed line after line. Not `hashbrown`'s SwissTable: its control
/// bytes lie apart from its entries, so a lookup there misses the cache twice (a control
/// group, then the entry); here a lookup reads one line, nearly always.
pub(crate) struct KeyIndex {
    lines: Lines,
    /// Entries holding a key.
    live: usize,
    /// Entries marked [`REMOVED`].
    removed: usize,
    seed: u64,
}

impl Default for KeyIndex {
    fn default() -> Self {
        KeyIndex {
            lines: Lines::new(0),
            live: 0,
            removed: 0,
            // A process-random seed, as the standard library's hash maps take theirs.
            seed: std::collections::hash_map::RandomState::new().hash_one(0x1eaf_u64),
        }
    }
}

impl KeyIndex {
    /// The hash of `key` in this index.
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        xxhash_rust::xxh3::xxh3_64_with_seed(key, self.seed)
    }

    /// The entries in probe order for `hash`: `(line, entry)` pairs, every entry once.
    #[inline]
    fn probe(&self, hash: u64) -> impl Iterator<Item = (usize, usize)> {
        let mask = self.lines.len().wrapping_sub(1);
        let first = hash as usize & mask;
        (0..self.lines.len()).flat_map(move |i| {
            let line = (first + i) & mask;
            (0..PER_LINE).map(move |e| (line, e))
        })
    }

    /// The entry holding `hash` for which `matches` of its slot holds, if any.
    #[inline]
    fn position(&self, hash: u64, mut matches: impl FnMut(u64) -> bool) -> Option<(usize, usize)> {
        let mask = self.lines.len().wrapping_sub(1);
        let mut line = hash as usize & mask;
        for _ in 0..self.lines.len() {
            let words = &self.lines[line];
            for e in 0..PER_LINE {
                let slot = words[2 * e + 1];
                if slot == EMPTY {
                    return None;
                }
                if words[2 * e] == hash && slot != REMOVED && matches(slot) {
                    return Some((line, e));
                }
            }
            line = (line + 1) & mask;
        }
        None
    }

    /// The first slot among those whose key has hash `hash` for which `is_key` holds (it
    /// reads the slot and compares its key), if any.
    #[inline]
    pub fn find(&self, hash: u64, is_key: impl FnMut(u64) -> bool) -> Option<u64> {
        let (line, e) = self.position(hash, is_key)?;
        Some(self.lines[line][2 * e + 1])
    }

    /// Record a key of hash `hash`, absent from the index, in the slot at `slot`.
    pub fn insert(&mut self, hash: u64, slot: u64) {
        debug_assert!(slot > REMOVED && slot.is_multiple_of(8), "slot {slot:#x}");
        // At most three entries in four used, removed ones counted: probes stay short and
        // always meet a free entry.
        if (self.live + self.removed + 1) * 4 > self.lines.len() * PER_LINE * 3 {
            self.rebuild(self.live + 1);
        }
        let (line, e) = self
            .probe(hash)
            .find(|&(line, e)| self.lines[line][2 * e + 1] <= REMOVED)
            .expect("a table at most three quarters full has a free entry");
        let words = &mut self.lines[line];
        if words[2 * e + 1] == REMOVED {
            self.removed -= 1;
        }
        words[2 * e] = hash;
        words[2 * e + 1] = slot;
        self.live += 1;
    }

    /// Record every `(hash, slot)` of `entries` (keys absent from the index), the table sized
    /// for them once (open fills the index so, without growing it step by step).
    pub fn extend(&mut self, entries: &[(u64, u64)]) {
        let needed = (self.live + entries.len()) * 4;
        if needed > self.lines.len() * PER_LINE * 3 {
            self.rebuild(self.live + entries.len());
        }
        for &(hash, slot) in entries {
            self.insert(hash, slot);
        }
    }

    /// Lay the live entries out afresh in a table sized for `keys` keys (about 60% full).
    fn rebuild(&mut self, keys: usize) {
        let entries = (keys * 5 / 3).max(4 * PER_LINE);
        let lines = entries.div_ceil(PER_LINE).next_power_of_two();
        let old = std::mem::replace(&mut self.lines, Lines::new(lines));
        self.live = 0;
        self.removed = 0;
        for line in old.iter() {
            for e in 0..PER_LINE {
                let slot = line[2 * e + 1];
                if slot > REMOVED {
                    self.insert(line[2 * e], slot);
                }
            }
        }
    }

    /// The key of hash `hash` in the slot at `from` moved to the slot at `to` (an overwrite,
    /// a split); recorded afresh if it was missing.
    pub fn relocate(&mut self, hash: u64, from: u64, to: u64) {
        match self.position(hash, |slot| slot == from) {
            Some((line, e)) => self.lines[line][2 * e + 1] = to,
            None => self.insert(hash, to),
        }
    }

    /// The key of hash `hash` in the slot at `slot` is gone.
    pub fn remove(&mut self, hash: u64, slot: u64) {
        let Some((line, e)) = self.position(hash, |s| s == slot) else {
            return;
        };
        // A free entry next in probe order ends every probe that reaches this one: this one
        // may be free too, not merely removed.
        let (next_line, next_e) = if e + 1 < PER_LINE {
            (line, e + 1)
        } else {
            ((line + 1) & (self.lines.len() - 1), 0)
        };
        let next_free = self.lines[next_line][2 * next_e + 1] == EMPTY;
        let words = &mut self.lines[line];
        words[2 * e] = 0;
        words[2 * e + 1] = if next_free { EMPTY } else { REMOVED };
        self.removed += usize::from(!next_free);
        self.live -= 1;
    }

    /// Whether the key of hash `hash` is recorded in the slot at `slot`.
    pub fn holds(&self, hash: u64, slot: u64) -> bool {
        self.position(hash, |s| s == slot).is_some()
    }

    /// Number of keys recorded.
    pub fn len(&self) -> usize {
        self.live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_moved_and_removed_by_hash_and_slot() {
        let mut index = KeyIndex::default();
        let (a, b) = (index.hash(b"apple"), index.hash(b"banana"));
        assert_ne!(a, b);
        assert_eq!(
            index.find(a, |_| true),
            None,
            "an empty index finds nothing"
        );
        index.insert(a, 0x1040);
        index.insert(b, 0x10c0);
        // Two keys of one hash (as a collision would be): told apart by their slots.
        index.insert(a, 0x2040);
        assert_eq!(index.len(), 3);
        assert_eq!(index.find(a, |slot| slot == 0x2040), Some(0x2040));
        assert_eq!(index.find(a, |slot| slot == 0x1040), Some(0x1040));
        assert_eq!(index.find(a, |_| false), None);
        index.relocate(a, 0x1040, 0x3040);
        assert!(index.holds(a, 0x3040) && !index.holds(a, 0x1040));
        index.remove(b, 0x10c0);
        assert_eq!(index.find(b, |_| true), None);
        // A relocation of a key it lacks records it.
        index.relocate(b, 0x9999, 0x4040);
        assert!(index.holds(b, 0x4040));
        assert_eq!(index.len(), 3);
        let other = KeyIndex::default();
        assert_eq!(other.hash(b"apple"), other.hash(b"apple"));
    }

    #[test]
    fn a_table_of_two_mib_or_more_lives_in_a_mapping_and_works_alike() {
        let mut index = KeyIndex::default();
        let keys = 100_000u64;
        let entries: Vec<(u64, u64)> = (0..keys)
            .map(|i| (index.hash(&i.to_le_bytes()), 64 + 8 * i))
            .collect();
        index.extend(&entries);
        assert!(
            matches!(index.lines, Lines::Mapped(_)),
            "{} lines",
            index.lines.len()
        );
        assert!(index.lines.len() >= MAPPED_LINES);
        for &(hash, slot) in entries.iter().step_by(2) {
            index.remove(hash, slot);
        }
        for (i, &(hash, slot)) in entries.iter().enumerate() {
            assert_eq!(index.holds(hash, slot), i % 2 == 1, "entry {i}");
        }
        assert_eq!(index.len(), (keys / 2) as usize);
    }

    #[test]
    fn growth_removal_and_crowded_lines_agree_with_a_model() {
        let mut index = KeyIndex::default();
        let mut model = std::collections::HashMap::new();
        let mut rng = pmem_ordering::sim::SplitMix64::new(5);
        for round in 0..20_000u64 {
            // Hashes from a small set crowd a few lines: long probes, wrapping at the end.
            let hash = if round % 3 == 0 {
                rng.below(16) << 40
            } else {
                rng.below(4_000)
            };
            let slot = 64 + 8 * rng.below(3_000);
            match rng.below(3) {
                0 if !model.contains_key(&(hash, slot)) => {
                    index.insert(hash, slot);
                    model.insert((hash, slot), ());
                }
                1 => {
                    index.remove(hash, slot);
                    model.remove(&(hash, slot));
                }
                _ => {
                    let to = 64 + 8 * rng.below(3_000);
                    if model.remove(&(hash, slot)).is_some() && !model.contains_key(&(hash, to)) {
                        index.relocate(hash, slot, to);
                        model.insert((hash, to), ());
                    } else {
                        model.remove(&(hash, slot));
                        index.remove(hash, slot);
                    }
                }
            }
            assert_eq!(index.len(), model.len());
        }
        for &(hash, slot) in model.keys() {
            assert!(index.holds(hash, slot), "{hash:#x} at {slot:#x}");
        }
        let entries: usize = index
            .lines
            .iter()
            .flat_map(|l| (0..PER_LINE).map(move |e| l[2 * e + 1]))
            .filter(|&s| s > REMOVED)
            .count();
        assert_eq!(entries, model.len(), "no entry left behind");
    }
}
