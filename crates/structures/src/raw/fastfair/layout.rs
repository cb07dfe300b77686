//! The on-media format: the only place that knows where a field of the root object, a node or
//! a redo lane lies. Everything else names fields through these offsets, views and encoders.
//!
//! Node words are read one way: through a [`NodeView`], a node's words checked once
//! ([`Pool::words`]). The root object's words are read through [`RootObject`], built on the
//! pool's checked loads (they are read once per descent, not per probe).
//!
//! One file past 600 lines on purpose: the offsets, the node views and the encoders are one
//! concern, the format, kept together so that a change of it is made in one place.

use pmem_ordering::{Backend, Pool, PoolError, Words};

use super::{EMPTY_KEY, LANES, LANE_BYTES, ROOT_BYTES};

/// A cache line: the unit FAST flushes and the redo log logs.
pub(super) const LINE: u64 = 64;
/// A node's header: the first cache line.
pub(super) const HEADER: u64 = 64;
/// One `(key, value)` entry.
pub(super) const ENTRY: u64 = 16;
/// Entries per cache line of the entry area.
pub(super) const ENTRIES_PER_LINE: usize = (LINE / ENTRY) as usize;

/// Words of a node's header: the first key word's index.
pub(super) const HEADER_WORDS: usize = (HEADER / 8) as usize;
const LEFTMOST_WORD: usize = (LEFTMOST / 8) as usize;

/// The root object's first word.
pub(super) const ROOT_MAGIC: u64 = crate::kind::StructureKind::BTreeMap.magic();
/// The format this build reads and writes.
pub(super) const FORMAT_VERSION: u64 = 1;
/// Every node's tag word.
pub(super) const NODE_TAG: u64 = u64::from_le_bytes(*b"FFnode01");

// Root object fields, as byte offsets in it.
const META_MAGIC: u64 = 0;
const META_VERSION: u64 = 8;
const META_NODE_SIZE: u64 = 16;
const META_POLICY: u64 = 24;
const META_ROOT: u64 = 32;
const META_REDO: u64 = 40;
const META_LANES: u64 = 48;

// Node header fields, as byte offsets in the node.
const LEVEL: u64 = 0;
const SIBLING: u64 = 8;
const LEFTMOST: u64 = 16;
const HIGH: u64 = 24;
const TAG: u64 = 32;

/// Bits of a commit word that hold the logged length; the target offset is above them.
const COMMIT_LEN_BITS: u32 = 7;

// ---------------------------------------------------------------------------- root object

/// The root object's fields, as written at create and checked at open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RootFields {
    pub(super) magic: u64,
    pub(super) version: u64,
    pub(super) node_size: u64,
    pub(super) policy: u64,
    pub(super) root_node: u64,
    pub(super) redo: u64,
    pub(super) lanes: u64,
}

impl RootFields {
    /// The 64 bytes of the root object (the last word unused, zero).
    pub(super) fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ROOT_BYTES as usize);
        for word in [
            self.magic,
            self.version,
            self.node_size,
            self.policy,
            self.root_node,
            self.redo,
            self.lanes,
            0,
        ] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        out
    }
}

/// The root object at a given offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RootObject(pub(super) u64);

impl RootObject {
    /// The offset of the root node pointer: the one word of the object that changes (a root
    /// split or collapse swaps it with one 8-byte store).
    #[inline]
    pub(super) fn root_node_field(self) -> u64 {
        self.0 + META_ROOT
    }

    /// The current root node.
    #[inline]
    pub(super) fn root_node<B: Backend>(self, pool: &Pool<B>) -> Result<u64, PoolError> {
        pool.load_u64(self.root_node_field())
    }

    /// The current root node, read from `pool_words`, the whole pool's words from offset 0:
    /// one compare instead of the pool's checked load, for the lock-free descents. `None` if
    /// the field lies past them (never for an object checked at create or open; the field is
    /// a word, since the object is on a cache line).
    #[inline]
    pub(super) fn root_node_in(self, pool_words: Words<'_>) -> Option<u64> {
        pool_words.get(usize::try_from(self.root_node_field() / 8).ok()?)
    }

    /// Every field, read in order (the caller has checked the object's range).
    pub(super) fn read<B: Backend>(self, pool: &Pool<B>) -> Result<RootFields, PoolError> {
        Ok(RootFields {
            magic: pool.load_u64(self.0 + META_MAGIC)?,
            version: pool.load_u64(self.0 + META_VERSION)?,
            node_size: pool.load_u64(self.0 + META_NODE_SIZE)?,
            policy: pool.load_u64(self.0 + META_POLICY)?,
            root_node: pool.load_u64(self.0 + META_ROOT)?,
            redo: pool.load_u64(self.0 + META_REDO)?,
            lanes: pool.load_u64(self.0 + META_LANES)?,
        })
    }
}

// ---------------------------------------------------------------------------- nodes

/// Entries a node of `node_size` bytes holds.
pub(super) const fn capacity(node_size: u64) -> usize {
    ((node_size - HEADER) / ENTRY) as usize
}

/// 8-byte words of a node of `node_size` bytes.
pub(super) const fn node_words(node_size: u64) -> usize {
    (node_size / 8) as usize
}

/// Offset of slot `slot`'s entry (its key; the value follows it) in the node at `node`.
#[inline]
pub(super) fn entry_offset(node: u64, slot: usize) -> u64 {
    node + HEADER + ENTRY * slot as u64
}

/// Offset of slot `slot`'s value in the node at `node`.
#[inline]
pub(super) fn value_offset(node: u64, slot: usize) -> u64 {
    entry_offset(node, slot) + 8
}

/// Offset of the entry area of the node at `node`.
pub(super) fn entries_offset(node: u64) -> u64 {
    node + HEADER
}

/// Offset of the high key of the node at `node`.
pub(super) fn high_offset(node: u64) -> u64 {
    node + HIGH
}

/// Offset of the sibling link of the node at `node`.
pub(super) fn sibling_offset(node: u64) -> u64 {
    node + SIBLING
}

/// Offset of the tag of the node at `node` (the code reads the tag through [`NodeView::tag`];
/// tests damage it here).
#[cfg(test)]
pub(super) fn tag_offset(node: u64) -> u64 {
    node + TAG
}

/// Which of a node's cache lines holds `slot`.
#[inline]
pub(super) fn line_of(slot: usize) -> u64 {
    (HEADER + ENTRY * slot as u64) / LINE
}

/// The first slot of the cache line that holds `slot` (the entry area starts on a line).
#[inline]
pub(super) fn first_slot_of_line(slot: usize) -> usize {
    slot - slot % ENTRIES_PER_LINE
}

/// The level word of the node at `node`, checked as one word: for a node pointer not yet
/// known to be a whole node (the root, at the start of a walk).
pub(super) fn level_word<B: Backend>(pool: &Pool<B>, node: u64) -> Result<u64, PoolError> {
    Ok(pool.words(node, 1)?.load((LEVEL / 8) as usize))
}

/// A node as read into DRAM (structure changes and recovery only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct NodeImage {
    pub(super) level: u64,
    pub(super) sibling: u64,
    pub(super) leftmost: u64,
    pub(super) high: u64,
    pub(super) entries: Vec<(u64, u64)>,
}

impl NodeImage {
    /// A whole node's bytes: header and sorted entries, free slots after them.
    pub(super) fn bytes(&self, node_size: u64) -> Vec<u8> {
        let mut words = Vec::with_capacity(node_words(node_size));
        push_node_words(
            &mut words,
            NodeHeader {
                level: self.level,
                sibling: self.sibling,
                leftmost: self.leftmost,
                high: self.high,
            },
            &self.entries,
            capacity(node_size),
        );
        words_to_bytes(&words)
    }
}

/// The header fields of a node that its writers choose (the tag is always [`NODE_TAG`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NodeHeader {
    pub(super) level: u64,
    pub(super) sibling: u64,
    pub(super) leftmost: u64,
    pub(super) high: u64,
}

/// Append a whole node's words to `out`: the header, then `capacity` slots holding `entries`
/// (sorted) and free slots after them. Each word is pushed little-endian, so the words cast to
/// bytes ([`words_to_bytes`], `bytemuck::cast_slice`) are the node's bytes.
pub(super) fn push_node_words(
    out: &mut Vec<u64>,
    header: NodeHeader,
    entries: &[(u64, u64)],
    capacity: usize,
) {
    let mut words = [0u64; HEADER_WORDS];
    words[(LEVEL / 8) as usize] = header.level;
    words[(SIBLING / 8) as usize] = header.sibling;
    words[(LEFTMOST / 8) as usize] = header.leftmost;
    words[(HIGH / 8) as usize] = header.high;
    words[(TAG / 8) as usize] = NODE_TAG;
    out.extend(words.iter().map(|w| w.to_le()));
    push_entry_words(out, entries, 0..capacity);
}

/// Append the words of slots `slots` of a node holding `entries` to `out` (slots past them
/// free), little-endian as [`push_node_words`] pushes them.
pub(super) fn push_entry_words(
    out: &mut Vec<u64>,
    entries: &[(u64, u64)],
    slots: std::ops::Range<usize>,
) {
    let start = out.len();
    out.resize(start + 2 * slots.len(), 0);
    let present = &entries[slots.start.min(entries.len())..slots.end.min(entries.len())];
    let (full, free) = out[start..].split_at_mut(2 * present.len());
    // Two loops without a branch a slot: the entries, then the free slots (value 0).
    for (words, &(k, v)) in full.chunks_exact_mut(2).zip(present) {
        words[0] = k.to_le();
        words[1] = v.to_le();
    }
    for words in free.chunks_exact_mut(2) {
        words[0] = EMPTY_KEY.to_le();
    }
}

/// Little-endian words (as the `push_*_words` functions push them) as bytes.
fn words_to_bytes(words: &[u64]) -> Vec<u8> {
    bytemuck::cast_slice(words).to_vec()
}

/// The entry area of a node of `node_size` bytes holding `entries`.
pub(super) fn entry_bytes(node_size: u64, entries: &[(u64, u64)]) -> Vec<u8> {
    entry_range_bytes(entries, 0..capacity(node_size))
}

/// The bytes of slots `slots` of a node holding `entries`, slots past them free.
pub(super) fn entry_range_bytes(entries: &[(u64, u64)], slots: std::ops::Range<usize>) -> Vec<u8> {
    let mut words = Vec::with_capacity(2 * slots.len());
    push_entry_words(&mut words, entries, slots);
    words_to_bytes(&words)
}

/// The `(key, value)` of each entry of raw entry-area bytes, in slot order (the tests decode
/// node images with it; readers read entries in place through a [`NodeView`]).
#[cfg(test)]
pub(super) fn decode_entries(raw: &[u8]) -> impl Iterator<Item = (u64, u64)> + '_ {
    raw.chunks_exact(ENTRY as usize).map(|chunk| {
        let k = u64::from_le_bytes(chunk[0..8].try_into().expect("8"));
        let v = u64::from_le_bytes(chunk[8..16].try_into().expect("8"));
        (k, v)
    })
}

/// Store `key` (and `value`) into the entry at `at` of a DRAM copy of a line.
#[inline]
pub(super) fn encode_entry(bytes: &mut [u8], at: usize, key: u64, value: Option<u64>) {
    let at = at * ENTRY as usize;
    bytes[at..at + 8].copy_from_slice(&key.to_le_bytes());
    if let Some(v) = value {
        bytes[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
    }
}

/// The sizes a node view needs, computed once per tree from its node size (the hot paths
/// then load them instead of recomputing them per node). Made only by [`NodeShape::of`], so
/// `words` always holds the header and `capacity` entries: [`NodeView::key_unchecked`]
/// relies on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct NodeShape {
    /// 8-byte words per node.
    words: usize,
    /// Entries per node.
    capacity: usize,
}

impl NodeShape {
    pub(super) const fn of(node_size: u64) -> NodeShape {
        NodeShape {
            words: node_words(node_size),
            capacity: capacity(node_size),
        }
    }
}

/// A node's words, bounds-checked once ([`Pool::words`]): the searches of the hot paths read
/// through it instead of paying a pool bounds check per load.
#[derive(Clone, Copy)]
pub(super) struct NodeView<'a> {
    /// Exactly the node's words: the header, then `capacity` entries.
    words: Words<'a>,
    capacity: usize,
}

impl<'a> NodeView<'a> {
    /// The view of the node at `node`, of the given shape.
    #[inline]
    pub(super) fn new<B: Backend>(
        pool: &'a Pool<B>,
        node: u64,
        shape: NodeShape,
    ) -> Result<Self, PoolError> {
        Ok(NodeView {
            words: pool.words(node, shape.words)?,
            capacity: shape.capacity,
        })
    }

    /// The view of the node at `node`, of the given shape, cut from `pool_words` (a view of
    /// the whole pool from offset 0, checked once by the caller), or `None` if the node is
    /// misaligned or runs past it: for the lock-free walks, which check each node they reach
    /// with one compare instead of the pool's checked call (that call, made again on a
    /// `None`, names the error: [`NodeView::new`] accepts exactly the same nodes).
    #[inline(always)]
    pub(super) fn within(pool_words: Words<'a>, node: u64, shape: NodeShape) -> Option<Self> {
        // The node's first word, if aligned; a misaligned offset rotates its low bits to the
        // top, past the end of any pool, so the range check below refuses it too.
        let start = usize::try_from(node.rotate_right(3)).ok()?;
        // One compare against the last start a whole node fits at (loop-invariant in a walk):
        // it implies both of `sub`'s checks, which the compiler then drops.
        if start > pool_words.len().checked_sub(shape.words)? {
            return None;
        }
        Some(NodeView {
            words: pool_words.sub(start, shape.words)?,
            capacity: shape.capacity,
        })
    }

    /// Entries the node holds.
    #[inline]
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Words of the node (header and entries).
    #[inline]
    pub(super) fn words(&self) -> usize {
        self.words.len()
    }

    /// Hint the CPU to fetch every entry line of the node: a search then waits for one miss,
    /// not one per probe. The header line is left out: the reader loads it at once anyway.
    #[inline]
    pub(super) fn prefetch(&self) {
        let mut word = HEADER_WORDS;
        // A plain loop (not `step_by`): the bound `word < len` lets the view's own range check
        // fold away.
        while word < self.words.len() {
            self.words.prefetch(word);
            word += (LINE / 8) as usize;
        }
    }

    #[inline]
    pub(super) fn level(&self) -> u64 {
        self.words.load((LEVEL / 8) as usize)
    }

    #[inline]
    pub(super) fn sibling(&self) -> u64 {
        self.words.load((SIBLING / 8) as usize)
    }

    #[inline]
    pub(super) fn leftmost(&self) -> u64 {
        self.words.load((LEFTMOST / 8) as usize)
    }

    #[inline]
    pub(super) fn high(&self) -> u64 {
        self.words.load((HIGH / 8) as usize)
    }

    #[inline]
    pub(super) fn tag(&self) -> u64 {
        self.words.load((TAG / 8) as usize)
    }

    #[inline]
    pub(super) fn key(&self, slot: usize) -> u64 {
        self.words.load(key_word(slot))
    }

    #[inline]
    pub(super) fn value(&self, slot: usize) -> u64 {
        self.words.load(key_word(slot) + 1)
    }

    /// The key of slot `slot`, read without a range check: for the in-node binary search,
    /// whose probes are below the capacity by construction.
    ///
    /// # Safety
    ///
    /// `slot < self.capacity()`.
    #[inline]
    pub(super) unsafe fn key_unchecked(&self, slot: usize) -> u64 {
        // The view holds exactly the header and `capacity` two-word entries (`NodeShape::of`,
        // the only maker of a shape).
        // SAFETY: `slot < capacity` (the caller's promise), so
        // `key_word(slot) < key_word(capacity) == words.len()`.
        unsafe { self.words.load_unchecked(key_word(slot)) }
    }

    /// The value of slot `slot`, read without a range check: for scans reading a node's
    /// entries in place.
    ///
    /// # Safety
    ///
    /// `slot < self.capacity()`.
    #[inline]
    pub(super) unsafe fn value_unchecked(&self, slot: usize) -> u64 {
        // SAFETY: as for `key_unchecked`: the value word, `key_word(slot) + 1`, is at most
        // `key_word(capacity) - 1 < words.len()`.
        unsafe { self.words.load_unchecked(key_word(slot) + 1) }
    }

    /// Append slots `first..first + count` to `out` as [`Words::append_pairs_unchecked`] reads
    /// them (16 bytes at a time on x86-64), without a range check; returns whether two
    /// neighbours among them share a key.
    ///
    /// # Safety
    ///
    /// `first + count <= self.capacity()`.
    #[inline(always)]
    pub(super) unsafe fn append_slots_unchecked(
        &self,
        first: usize,
        count: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> bool {
        // SAFETY: `first + count <= capacity` (the caller's promise), so the slots' words end at
        // `key_word(first + count) <= key_word(capacity) == words.len()`.
        unsafe {
            self.words
                .append_pairs_unchecked(key_word(first), count, out)
        }
    }

    /// Word `word` of the node, read without a range check: for the in-node search, which
    /// walks key words (a key word's index fits an addressing mode, a slot's does not).
    ///
    /// # Safety
    ///
    /// `word < self.words()`.
    #[inline]
    pub(super) unsafe fn word_unchecked(&self, word: usize) -> u64 {
        // SAFETY: `word < words.len()` (the caller's promise).
        unsafe { self.words.load_unchecked(word) }
    }

    /// The child of an internal node left of the slot whose key word is `bound_word`: the
    /// leftmost child for slot 0, else the value of the slot before. One load from a selected
    /// word, no branch: for the lock-free descent, where `bound_word` is an upper bound's.
    ///
    /// # Safety
    ///
    /// `bound_word` is `key_word(slot)` for some `slot <= self.capacity()`.
    #[inline(always)]
    pub(super) unsafe fn child_left_of_key_word_unchecked(&self, bound_word: usize) -> u64 {
        // `bound_word - 1` is the value word of the slot before when there is one.
        let word = std::hint::select_unpredictable(
            bound_word == HEADER_WORDS,
            LEFTMOST_WORD,
            bound_word - 1,
        );
        // SAFETY: `word` is the leftmost word (in the header) or, for `1 <= slot <= capacity`,
        // at most `key_word(capacity) - 1`, the view's last value word (`NodeShape::of`).
        unsafe { self.words.load_unchecked(word) }
    }

    /// The node's entries as stored into `out` (cleared first), a transient duplicate
    /// dropped (the right copy kept).
    pub(super) fn entries_into(&self, out: &mut Vec<(u64, u64)>) {
        // Filled by index, then cut to length: no capacity check a slot, and no branch for a
        // duplicate (its right copy lands where its left one did).
        out.clear();
        out.resize(self.capacity, (EMPTY_KEY, 0));
        // A slice of its own: its address and length stay in registers across the loads
        // (each an acquire, after which the vector's fields would be read again).
        let slots = out.as_mut_slice();
        let mut len = 0;
        // The previous slot's key: never `EMPTY_KEY` past the first slot, so the first entry
        // is always kept.
        let mut previous = EMPTY_KEY;
        for slot in 0..self.capacity {
            // SAFETY: `slot < self.capacity` (the loop's bound).
            let k = unsafe { self.key_unchecked(slot) };
            if k == EMPTY_KEY {
                break;
            }
            // SAFETY: as above.
            let v = unsafe { self.value_unchecked(slot) };
            len += usize::from(k != previous);
            // `1 <= len <= slot + 1 <= capacity`: always a slot of `out`.
            if let Some(entry) = slots.get_mut(len - 1) {
                *entry = (k, v);
            }
            previous = k;
        }
        out.truncate(len);
    }

    /// [`NodeView::entries_into`] for a node whose stripe the caller holds: such a node holds
    /// no transient duplicate (a writer ends its shift before it lets the stripe go, and
    /// recovery repairs those a crash left), so its used slots are copied as they are, with
    /// no per-slot duplicate test. A split relies on this anyway: it rewrites only the slots
    /// that change, counted from these entries.
    pub(super) fn entries_locked_into(&self, out: &mut Vec<(u64, u64)>) {
        let used = self.count();
        out.clear();
        out.extend(
            // SAFETY: `slot < used <= self.capacity` (a count is at most the capacity).
            (0..used).map(|slot| unsafe { (self.key_unchecked(slot), self.value_unchecked(slot)) }),
        );
        debug_assert!(
            out.windows(2).all(|pair| pair[0].0 < pair[1].0),
            "a locked node's keys ascend"
        );
    }

    /// Whether every slot is used: its last slot is (used slots come first). One load, where
    /// [`NodeView::count`] searches.
    #[inline]
    pub(super) fn is_full(&self) -> bool {
        self.capacity
            .checked_sub(1)
            .is_none_or(|last| self.key(last) != EMPTY_KEY)
    }

    /// The node as stored, a transient duplicate dropped (the right copy kept).
    pub(super) fn image(&self) -> NodeImage {
        let mut entries: Vec<(u64, u64)> = Vec::with_capacity(self.capacity);
        self.entries_into(&mut entries);
        NodeImage {
            level: self.level(),
            sibling: self.sibling(),
            leftmost: self.leftmost(),
            high: self.high(),
            entries,
        }
    }
}

/// Index of slot `slot`'s key among a node's words (its value is the next word).
#[inline]
pub(super) const fn key_word(slot: usize) -> usize {
    HEADER_WORDS + 2 * slot
}

// ---------------------------------------------------------------------------- redo lanes

/// The redo-log area: [`LANES`] lanes of [`LANE_BYTES`], each two slots of a data line
/// followed by its commit line (whose first word is the commit word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RedoArea(pub(super) u64);

impl RedoArea {
    /// Bytes of the whole area.
    pub(super) const BYTES: u64 = LANES as u64 * LANE_BYTES;

    /// Offsets of slot `slot`'s data line and commit word in lane `lane`.
    #[inline]
    pub(super) fn slot(self, lane: usize, slot: usize) -> (u64, u64) {
        let data = self.0 + lane as u64 * LANE_BYTES + slot as u64 * 2 * LINE;
        (data, data + LINE)
    }
}

/// The commit word of `len` bytes logged for `target` (never 0: `len` is at least 1).
#[inline]
pub(super) fn commit_word(target: u64, len: usize) -> u64 {
    (target << COMMIT_LEN_BITS) | len as u64
}

/// The `(target, len)` a commit word names.
pub(super) fn commit_target(word: u64) -> (u64, u64) {
    (word >> COMMIT_LEN_BITS, word & ((1 << COMMIT_LEN_BITS) - 1))
}

#[cfg(test)]
mod tests {
    //! Pure offset arithmetic: no pool, so these run under Miri.

    use super::*;

    #[test]
    fn entries_follow_the_header_two_words_each() {
        assert_eq!(entry_offset(0x1000, 0), 0x1040);
        assert_eq!(entry_offset(0x1000, 3), 0x1040 + 48);
        assert_eq!(value_offset(0x1000, 3), 0x1040 + 56);
        assert_eq!(entries_offset(0x1000), 0x1040);
        assert_eq!(key_word(0) as u64 * 8, HEADER);
        assert_eq!(key_word(5) as u64 * 8, entry_offset(0, 5));
    }

    #[test]
    fn header_fields_are_distinct_words_of_the_first_line() {
        let fields = [LEVEL, SIBLING, LEFTMOST, HIGH, TAG];
        for (i, a) in fields.iter().enumerate() {
            assert!(a % 8 == 0 && a + 8 <= HEADER);
            assert!(fields[i + 1..].iter().all(|b| b != a));
        }
        assert_eq!(high_offset(0x200), 0x200 + HIGH);
        assert_eq!(sibling_offset(0x200), 0x200 + SIBLING);
        assert_eq!(tag_offset(0x200), 0x200 + TAG);
    }

    #[test]
    fn capacity_fills_a_node_after_its_header() {
        assert_eq!(capacity(128), 4);
        assert_eq!(capacity(512), 28);
        assert_eq!(capacity(4096), 252);
        assert_eq!(node_words(512), 64);
        for size in [128u64, 512, 4096] {
            let last = capacity(size) - 1;
            assert_eq!(entry_offset(0, last) + ENTRY, size);
        }
    }

    #[test]
    fn a_shape_holds_the_sizes_of_its_node_size() {
        assert_eq!(
            NodeShape::of(512),
            NodeShape {
                words: 64,
                capacity: 28
            }
        );
    }

    #[test]
    fn four_entries_share_each_line() {
        assert_eq!(line_of(0), 1, "line 0 is the header");
        assert_eq!(line_of(ENTRIES_PER_LINE - 1), 1);
        assert_eq!(line_of(ENTRIES_PER_LINE), 2);
        assert_eq!(line_of(27), 7);
        for slot in 0..64 {
            let first = first_slot_of_line(slot);
            assert_eq!(line_of(first), line_of(slot));
            assert!(first == 0 || line_of(first - 1) < line_of(slot));
        }
    }

    #[test]
    fn a_node_image_encodes_header_entries_and_free_slots() {
        let image = NodeImage {
            level: 2,
            sibling: 0x400,
            leftmost: 0x600,
            high: 99,
            entries: vec![(5, 50), (7, 70)],
        };
        let bytes = image.bytes(128);
        assert_eq!(bytes.len(), 128);
        let word = |at: u64| u64::from_le_bytes(bytes[at as usize..][..8].try_into().unwrap());
        assert_eq!(
            [
                word(LEVEL),
                word(SIBLING),
                word(LEFTMOST),
                word(HIGH),
                word(TAG)
            ],
            [2, 0x400, 0x600, 99, NODE_TAG]
        );
        let entries: Vec<_> = decode_entries(&bytes[HEADER as usize..]).collect();
        assert_eq!(entries, [(5, 50), (7, 70), (EMPTY_KEY, 0), (EMPTY_KEY, 0)]);
        let tail = entry_range_bytes(&image.entries, 1..3);
        assert_eq!(
            decode_entries(&tail).collect::<Vec<_>>(),
            [(7, 70), (EMPTY_KEY, 0)]
        );
    }

    #[test]
    fn encode_entry_keeps_the_value_it_is_not_given() {
        let mut line = [0u8; LINE as usize];
        encode_entry(&mut line, 1, 3, Some(30));
        encode_entry(&mut line, 1, 4, None);
        assert_eq!(decode_entries(&line).nth(1), Some((4, 30)));
    }

    #[test]
    fn root_fields_encode_in_declared_order() {
        let fields = RootFields {
            magic: ROOT_MAGIC,
            version: FORMAT_VERSION,
            node_size: 512,
            policy: 2,
            root_node: 0x1000,
            redo: 0x2000,
            lanes: 16,
        };
        let bytes = fields.bytes();
        assert_eq!(bytes.len() as u64, ROOT_BYTES);
        let word = |at: u64| u64::from_le_bytes(bytes[at as usize..][..8].try_into().unwrap());
        assert_eq!(word(META_MAGIC), ROOT_MAGIC);
        assert_eq!(word(META_VERSION), FORMAT_VERSION);
        assert_eq!(word(META_NODE_SIZE), 512);
        assert_eq!(word(META_POLICY), 2);
        assert_eq!(word(META_ROOT), 0x1000);
        assert_eq!(word(META_REDO), 0x2000);
        assert_eq!(word(META_LANES), 16);
        assert_eq!(word(56), 0);
        assert_eq!(RootObject(0x40).root_node_field(), 0x40 + META_ROOT);
    }

    #[test]
    fn redo_slots_pair_a_data_line_with_its_commit_line() {
        let area = RedoArea(0x8000);
        assert_eq!(area.slot(0, 0), (0x8000, 0x8040));
        assert_eq!(area.slot(0, 1), (0x8080, 0x80c0));
        assert_eq!(
            area.slot(3, 1),
            (0x8000 + 3 * LANE_BYTES + 0x80, 0x8000 + 3 * 256 + 0xc0)
        );
        let (_, last_commit) = area.slot(LANES - 1, 1);
        assert_eq!(last_commit + LINE, area.0 + RedoArea::BYTES);
    }

    #[test]
    fn a_commit_word_names_its_target_and_length() {
        let word = commit_word(0x1_2340, 48);
        assert_ne!(word, 0);
        assert_eq!(word, (0x1_2340 << 7) | 48);
        assert_eq!(commit_target(word), (0x1_2340, 48));
        assert_eq!(commit_target(commit_word(64, 64)), (64, 64));
    }
}
