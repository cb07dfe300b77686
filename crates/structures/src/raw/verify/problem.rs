//! [`Problem`]: what a finding says is wrong, per structure, and how it reads.
//!
//! One file past 600 lines on purpose: one enum holds every structure's problems (a store's
//! report lists them together), and its messages follow it in the same order, so that a new
//! variant and its message are written and reviewed side by side.

use std::fmt;

/// What is wrong at a finding's offset. Offsets inside a variant are pool offsets; indices are
/// directory indices (CCEH) or slot indices (FAST&FAIR).
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// `len` bytes at the offset do not lie inside the pool: a pointer to nowhere.
    OutOfPool {
        /// Bytes that were to be read there.
        len: u64,
    },
    /// The offset is not a multiple of `alignment`, as every pointer of its kind is.
    Misaligned {
        /// The alignment required.
        alignment: u64,
    },
    /// No allocated block of at least `bytes` bytes starts at the offset.
    NotAllocated {
        /// The block size required.
        bytes: u64,
    },
    /// The root's magic word is not the structure's.
    WrongMagic {
        /// The word found.
        found: u64,
    },
    /// The structure's DRAM key count disagrees with the keys the walk found.
    CountMismatch {
        /// Live keys found by the walk.
        counted: u64,
        /// What the structure's length says.
        recorded: u64,
    },

    // --------------------------------------------------------------------- CCEH
    /// The directory's global depth is above the largest one.
    DepthTooLarge {
        /// The depth found.
        depth: u64,
        /// The largest valid depth.
        max: u64,
    },
    /// A directory entry names a segment deeper than the directory.
    LocalDepthAboveGlobal {
        /// The directory index.
        index: u64,
        /// The entry's local depth.
        local: u64,
        /// The directory's global depth.
        global: u64,
    },
    /// A segment's run of `span` entries starts at an index that is not a multiple of it.
    MisalignedRun {
        /// The run's first index.
        index: u64,
        /// `2^(global - local)`.
        span: u64,
    },
    /// An entry inside a segment's run names another segment or local depth.
    EntryDisagrees {
        /// The directory index.
        index: u64,
        /// The segment and local depth the entry names.
        found: (u64, u64),
        /// The segment and local depth its run's first entry names.
        expected: (u64, u64),
        /// The run's first index.
        run_start: u64,
    },
    /// A segment that already heads an earlier run of the directory (two runs share it).
    SegmentInTwoRuns {
        /// The segment.
        segment: u64,
        /// The earlier run's first index.
        first_index: u64,
        /// This run's first index.
        index: u64,
    },
    /// A live key (its hash prefix is its segment's) outside its probing window, where no
    /// lookup searches it.
    KeyOutsideWindow {
        /// The key.
        key: u64,
        /// The bucket it sits in.
        bucket: u64,
        /// Its home bucket.
        home: u64,
    },
    /// A live key (or, in a table of hashed key words, key word and value) stored a second
    /// time.
    DuplicateKey {
        /// The key (word).
        key: u64,
        /// The slot of its first copy.
        first: u64,
    },

    // --------------------------------------------------------------------- FAST&FAIR
    /// The block has no node tag: not a node.
    NotANode {
        /// The tag word found.
        tag: u64,
    },
    /// The root node's level is past any possible tree height.
    LevelTooHigh {
        /// The level found.
        level: u64,
    },
    /// A node on one level records another.
    WrongLevel {
        /// The node's level word.
        found: u64,
        /// The level it was reached on.
        expected: u64,
    },
    /// A used slot after a free one: binary searches would miss it.
    GapInNode {
        /// The slot.
        slot: usize,
        /// The key it holds.
        key: u64,
    },
    /// A key not above the key before it in the node.
    UnsortedKeys {
        /// The slot.
        slot: usize,
        /// The previous slot's key.
        previous: u64,
        /// This slot's key.
        key: u64,
    },
    /// Two neighbouring slots with one key: a shift that never finished (open repairs these).
    TransientDuplicate {
        /// The right slot.
        slot: usize,
        /// The key.
        key: u64,
    },
    /// A node's high key not above the previous node's on its level: the level's key ranges
    /// do not increase along the sibling links.
    HighKeyNotIncreasing {
        /// The node's high key.
        high: u64,
        /// The previous node's high key (its low bound).
        low: u64,
    },
    /// A key outside `[low, high)`: the previous sibling's high key and the node's own (FAIR's
    /// B-link bounds, FAST'18 FAST&FAIR, Sec. 4).
    KeyOutOfBounds {
        /// The key.
        key: u64,
        /// The low bound.
        low: u64,
        /// The high bound.
        high: u64,
    },
    /// A key outside the range its parent's separators give its node.
    KeyOutsideParent {
        /// The key.
        key: u64,
        /// The parent's separator before the child (or the parent's low bound).
        low: u64,
        /// The separator after it (or the parent's high key).
        high: u64,
    },
    /// The sibling link leads back to a node already walked: a cycle, or a node linked twice.
    SiblingCycle {
        /// The sibling it names.
        next: u64,
    },
    /// A level's last node does not have the top high key ([`crate::fastfair::EMPTY_KEY`]): the
    /// sibling chain ends early.
    LevelEndsEarly {
        /// The level.
        level: u64,
        /// The last node's high key.
        high: u64,
    },
    /// An internal node with no leftmost child.
    MissingLeftmost {
        /// Its level.
        level: u64,
    },
    /// The children the parents name on a level are not that level's sibling chain: the first
    /// position where they differ.
    ChildNotInChain {
        /// The level of the children.
        level: u64,
        /// The position along the level.
        position: usize,
        /// The child the parents name there (none: the chain is longer).
        child: Option<u64>,
        /// The node the sibling chain has there (none: the chain is shorter).
        chain: Option<u64>,
    },

    // ------------------------------------------------------------------------- datalog
    /// The root's inode count is not between 1 and `max`.
    InodeCountInvalid {
        /// The count found.
        count: u64,
        /// The largest valid count.
        max: u64,
    },
    /// A root word differs from what the store read when it was opened.
    RootChanged {
        /// Which word.
        word: &'static str,
        /// Its value in the pool.
        found: u64,
        /// Its value at open.
        opened: u64,
    },
    /// The root's policy words do not decode.
    BadPolicy {
        /// Why.
        reason: String,
    },
    /// An inode's generation is not below the root's next generation.
    GenerationTooHigh {
        /// The inode slot.
        slot: u64,
        /// Its generation.
        generation: u64,
        /// The root's next generation.
        next: u64,
    },
    /// An inode in use whose name is empty, too long or not UTF-8.
    BadFileName {
        /// The inode slot.
        slot: u64,
    },
    /// Two inodes carry one name.
    DuplicateFileName {
        /// The name.
        name: String,
        /// The slot of the first inode with it.
        first_slot: u64,
    },
    /// A log page links to a page already in the log: a cycle.
    LogCycle {
        /// The page linked to.
        next: u64,
    },
    /// A log longer than the pool has pages: the walk stops there.
    LogTooLong {
        /// Pages walked.
        pages: u64,
    },
    /// The log's chain ends (its last page links nowhere) before the inode's tail.
    LogEndsBeforeTail {
        /// The tail the inode records.
        tail: u64,
    },
    /// A committed log entry whose header makes no sense, or that overlaps its page's end or
    /// the tail; the rest of its log cannot be parsed.
    BadEntry {
        /// What is wrong.
        reason: String,
    },
    /// A committed log entry fails its CRC-32C.
    EntryChecksum,
    /// A live copy-on-write data page fails the CRC-32C its extent entry recorded.
    PageChecksum {
        /// The file's name.
        file: String,
        /// The page's number in the file.
        file_page: u64,
        /// The CRC-32C the extent records.
        recorded: u32,
        /// The CRC-32C of the page's bytes.
        found: u32,
    },
    /// A file page at or past the file's size is still live.
    PagePastSize {
        /// The file's name.
        file: String,
        /// The page's number in the file.
        file_page: u64,
        /// The file's size.
        size: u64,
    },
    /// A block reached a second time (by another log, file or link): two owners.
    ReachedTwice {
        /// The pool offset of the word or entry that reached it first.
        first: u64,
    },
    /// The DRAM index the store keeps disagrees with what its log says now.
    IndexDisagrees {
        /// The file's name.
        file: String,
        /// What differs.
        detail: String,
    },

    // --------------------------------------------------------------------- maps of records
    /// The root's format version is not the one this build reads.
    WrongVersion {
        /// The version found.
        found: u64,
        /// The version this build reads.
        expected: u64,
    },
    /// An intent line of the map's head that no write leaves behind (at the line's offset).
    MalformedIntentLine {
        /// The line's index in the intent area.
        line: u64,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A record whose header's lengths do not fit its block (or pass the limits).
    RecordTooLong {
        /// The key length the header gives.
        key_len: u64,
        /// The value length the header gives.
        value_len: u64,
        /// Bytes of the block.
        block: u64,
    },
    /// A record whose owner field names another structure (by its root offset).
    WrongOwner {
        /// The root offset the owner field names.
        found: u64,
        /// This structure's root offset.
        expected: u64,
    },
    /// A record whose bytes do not match the CRC-32C in its header.
    ChecksumMismatch {
        /// The checksum the header records.
        stored: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// A record reached a second time: two entries point at one record.
    RecordReachedTwice {
        /// The slot or node of the entry that reached it first.
        first: u64,
    },
    /// A hash map's slot whose key word is not the hash of its record's key.
    KeyHashMismatch {
        /// The record.
        record: u64,
        /// The slot's key word.
        word: u64,
        /// The hash of the record's key.
        hash: u64,
    },
    /// An ordered map's record whose key does not belong under the entry that points at it
    /// (its bytes of the layers above, or its slice word at the entry's layer, differ).
    KeyOutsideEntry {
        /// The record.
        record: u64,
        /// The layer's depth in the trie.
        depth: u64,
        /// The entry's slice word.
        word: u64,
    },
    /// An ordered map's record whose key does not sort after the key before it in the trie.
    KeysUnsorted {
        /// The record before it.
        previous: u64,
    },
    /// An ordered map's entry that names a layer under a slice word whose keys end there.
    LayerUnderEndingWord {
        /// The entry's slice word.
        word: u64,
        /// The layer's depth in the trie.
        depth: u64,
    },
    /// An ordered map's entry that names a layer reached before, or one the map did not open.
    UnknownLayer {
        /// The layer's root object.
        layer: u64,
        /// Whether another entry reached it first (else the map does not know it).
        reached_twice: bool,
    },
    /// An ordered map's layer that cannot sit under the entry naming it: not deeper than the
    /// layer of the entry, or skipping key bytes from before that layer's slice ends.
    LayerOutOfPlace {
        /// The layer's block.
        layer: u64,
        /// Its depth in the trie.
        depth: u64,
        /// The first key byte it skips.
        skip_from: u64,
        /// The depth of the layer holding the entry.
        parent_depth: u64,
    },

    // --------------------------------------------------------------------- the leaf map
    /// A leaf whose tag word is not the one of its map's leaves.
    NotALeaf {
        /// The tag word found.
        tag: u64,
    },
    /// A leaf whose bitmap sets bits past its slots.
    BitmapPastSlots {
        /// The bitmap.
        bitmap: u64,
        /// Slots a leaf has.
        slots: u64,
    },
    /// A live slot whose pair cannot be read whole (lengths, checksum, its record's).
    DamagedSlot {
        /// What reading it said.
        reason: String,
    },
    /// A leaf other than the first that holds no pair (an emptied leaf is unlinked).
    EmptyLeaf,
    /// The map's DRAM hash index from keys to slots disagrees with its leaves (a key it does
    /// not name at its slot, or a count of keys other than the leaves').
    KeyIndexDisagrees {
        /// What differs.
        detail: String,
    },
    /// A leaf map's DRAM state of a leaf (its offset, bitmap mirror, key order or key
    /// prefixes) disagrees with the leaf in the pool, or the DRAM index and the chain name
    /// different leaves.
    LeafStateDisagrees {
        /// What differs.
        detail: String,
    },
    /// A root object that cannot be read (its version, checksum or shape).
    BadRoot {
        /// What reading it said.
        reason: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::OutOfPool { len } => write!(f, "{len} bytes here are not inside the pool"),
            Problem::Misaligned { alignment } => {
                write!(f, "not aligned to {alignment} bytes")
            }
            Problem::NotAllocated { bytes } => {
                write!(f, "no allocated block of {bytes} bytes starts here")
            }
            Problem::WrongMagic { found } => write!(f, "magic word {found:#x} is not the root's"),
            Problem::CountMismatch { counted, recorded } => {
                write!(f, "{counted} live keys found, the length says {recorded}")
            }
            Problem::DepthTooLarge { depth, max } => {
                write!(f, "global depth {depth} above the largest, {max}")
            }
            Problem::LocalDepthAboveGlobal {
                index,
                local,
                global,
            } => write!(
                f,
                "entry {index}: local depth {local} above the global depth {global}"
            ),
            Problem::MisalignedRun { index, span } => write!(
                f,
                "entry {index} starts a segment's run of {span} entries, not on a multiple of {span}"
            ),
            Problem::EntryDisagrees {
                index,
                found,
                expected,
                run_start,
            } => write!(
                f,
                "entry {index} names segment {:#x} of local depth {}, but entry {run_start} gives \
                 that span to segment {:#x} of local depth {}",
                found.0, found.1, expected.0, expected.1
            ),
            Problem::SegmentInTwoRuns {
                segment,
                first_index,
                index,
            } => write!(
                f,
                "segment {segment:#x} heads the run at entry {index} and the one at entry \
                 {first_index}"
            ),
            Problem::KeyOutsideWindow { key, bucket, home } => write!(
                f,
                "key {key} sits in bucket {bucket}, outside its probing window from bucket {home}"
            ),
            Problem::DuplicateKey { key, first } => {
                write!(f, "key {key} is stored twice (first at {first:#x})")
            }
            Problem::NotANode { tag } => write!(f, "not a node (tag word {tag:#x})"),
            Problem::LevelTooHigh { level } => write!(f, "root level {level} is impossible"),
            Problem::WrongLevel { found, expected } => {
                write!(f, "node of level {found} on level {expected}")
            }
            Problem::GapInNode { slot, key } => {
                write!(f, "slot {slot} holds key {key} after a free slot")
            }
            Problem::UnsortedKeys {
                slot,
                previous,
                key,
            } => write!(f, "slot {slot} holds key {key}, not above {previous} before it"),
            Problem::TransientDuplicate { slot, key } => {
                write!(f, "slot {slot} repeats key {key} of the slot before it")
            }
            Problem::HighKeyNotIncreasing { high, low } => write!(
                f,
                "high key {high} is not above the previous node's high key {low}"
            ),
            Problem::KeyOutOfBounds { key, low, high } => {
                write!(f, "key {key} outside the node's bounds [{low}, {high})")
            }
            Problem::KeyOutsideParent { key, low, high } => write!(
                f,
                "key {key} outside the range [{low}, {high}) its parent gives the node"
            ),
            Problem::SiblingCycle { next } => {
                write!(f, "sibling link to {next:#x}, a node already walked")
            }
            Problem::LevelEndsEarly { level, high } => write!(
                f,
                "level {level} ends at a node whose high key is {high}, not the top key"
            ),
            Problem::MissingLeftmost { level } => {
                write!(f, "internal node of level {level} has no leftmost child")
            }
            Problem::ChildNotInChain {
                level,
                position,
                child,
                chain,
            } => {
                let name = |node: &Option<u64>| match node {
                    Some(n) => format!("{n:#x}"),
                    None => "nothing".to_string(),
                };
                write!(
                    f,
                    "level {level}, position {position}: the parents name {}, the sibling chain \
                     has {}",
                    name(child),
                    name(chain)
                )
            }
            Problem::InodeCountInvalid { count, max } => {
                write!(f, "{count} inodes, not between 1 and {max}")
            }
            Problem::RootChanged {
                word,
                found,
                opened,
            } => write!(
                f,
                "the root's {word} is {found:#x}, but was {opened:#x} when the store opened"
            ),
            Problem::BadPolicy { reason } => write!(f, "the root's policy is invalid: {reason}"),
            Problem::GenerationTooHigh {
                slot,
                generation,
                next,
            } => write!(
                f,
                "inode {slot} has generation {generation}, not below the next ({next})"
            ),
            Problem::BadFileName { slot } => write!(f, "inode {slot} has an invalid name"),
            Problem::DuplicateFileName { name, first_slot } => {
                write!(f, "name {name:?} is also inode {first_slot}'s")
            }
            Problem::LogCycle { next } => {
                write!(f, "log link to page {next:#x}, already in the log")
            }
            Problem::LogTooLong { pages } => {
                write!(f, "log of {pages} pages, more than the pool holds")
            }
            Problem::LogEndsBeforeTail { tail } => {
                write!(f, "the log ends here, before its tail {tail:#x}")
            }
            Problem::BadEntry { reason } => write!(f, "committed log entry is invalid: {reason}"),
            Problem::EntryChecksum => write!(f, "committed log entry fails its CRC-32C"),
            Problem::PageChecksum {
                file,
                file_page,
                recorded,
                found,
            } => write!(
                f,
                "data page {file_page} of file {file:?} has CRC-32C {found:#010x}, its extent \
                 recorded {recorded:#010x}"
            ),
            Problem::PagePastSize {
                file,
                file_page,
                size,
            } => write!(
                f,
                "page {file_page} of file {file:?} is live past the file's size {size}"
            ),
            Problem::ReachedTwice { first } => {
                write!(f, "block reached twice (first from {first:#x})")
            }
            Problem::IndexDisagrees { file, detail } => {
                write!(f, "file {file:?}: the DRAM index disagrees with the log: {detail}")
            }
            Problem::WrongVersion { found, expected } => {
                write!(f, "format version {found}, this build reads {expected}")
            }
            Problem::MalformedIntentLine { line, reason } => {
                write!(f, "intent line {line} is malformed: {reason}")
            }
            Problem::RecordTooLong {
                key_len,
                value_len,
                block,
            } => write!(
                f,
                "record header gives a {key_len}-byte key and a {value_len}-byte value, which \
                 do not fit its {block}-byte block or pass the limits"
            ),
            Problem::WrongOwner { found, expected } => write!(
                f,
                "record of the structure at {found:#x}, not of this one at {expected:#x}"
            ),
            Problem::ChecksumMismatch { stored, computed } => write!(
                f,
                "record damaged: its checksum is {stored:#010x}, its bytes' is {computed:#010x}"
            ),
            Problem::RecordReachedTwice { first } => {
                write!(f, "record reached a second time (first from {first:#x})")
            }
            Problem::KeyHashMismatch { record, word, hash } => write!(
                f,
                "slot files the record at {record:#x} under key word {word:#x}, its key hashes \
                 to {hash:#x}"
            ),
            Problem::KeyOutsideEntry {
                record,
                depth,
                word,
            } => write!(
                f,
                "the key of the record at {record:#x} does not belong under word {word:#x} of \
                 layer {depth}"
            ),
            Problem::KeysUnsorted { previous } => write!(
                f,
                "record's key does not sort after the key of the record at {previous:#x} before \
                 it"
            ),
            Problem::LayerUnderEndingWord { word, depth } => write!(
                f,
                "word {word:#x} of layer {depth} names a layer, but its keys end there"
            ),
            Problem::UnknownLayer {
                layer,
                reached_twice: true,
            } => write!(f, "entry names layer {layer:#x}, reached before from another entry"),
            Problem::UnknownLayer {
                layer,
                reached_twice: false,
            } => write!(f, "entry names layer {layer:#x}, not a layer of the map"),
            Problem::LayerOutOfPlace {
                layer,
                depth,
                skip_from,
                parent_depth,
            } => write!(
                f,
                "entry of a layer of depth {parent_depth} names layer {layer:#x} of depth \
                 {depth} skipping key bytes from {skip_from}: it cannot sit there"
            ),
            Problem::NotALeaf { tag } => {
                write!(f, "not a leaf of the map (tag word {tag:#x})")
            }
            Problem::BitmapPastSlots { bitmap, slots } => {
                write!(f, "bitmap {bitmap:#x} sets bits past the leaf's {slots} slots")
            }
            Problem::DamagedSlot { reason } => write!(f, "live slot unreadable: {reason}"),
            Problem::EmptyLeaf => write!(f, "a leaf other than the first holds no pair"),
            Problem::KeyIndexDisagrees { detail } => {
                write!(f, "the DRAM hash index disagrees with the leaves: {detail}")
            }
            Problem::LeafStateDisagrees { detail } => {
                write!(f, "the DRAM state of a leaf disagrees with the leaf: {detail}")
            }
            Problem::BadRoot { reason } => write!(f, "root object unreadable: {reason}"),
        }
    }
}
