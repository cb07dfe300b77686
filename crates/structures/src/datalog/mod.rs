//! Datalog: a log-structured object store with copy-on-write and embedded writes, after NOVA
//! (Xu and Swanson, "NOVA: A Log-structured File System for Hybrid Volatile/Non-volatile Main
//! Memories", FAST'16) and its *NOVA-datalog* variant (seed 000 Sec. 5.1 and 5.1.2, Fig. 10 and
//! 11), with per-entry checksums as in NOVA-Fortis (SOSP'17).
//!
//! Seed 000 Sec. 5.1 measures that small random stores are what persistent memory does worst
//! (an effective write ratio of 0.25 for random 64-byte non-temporal stores on Optane), and
//! Sec. 5.1.2 shows the fix for NOVA: instead of copying a whole 4 KB page for every sub-page
//! write, append the written bytes to the file's log, where consecutive writes land next to each
//! other. The paper reports 7x (64 B) and 6.5x (256 B) lower write latency on Optane. This
//! module implements both paths behind one store so they can be compared.
//!
//! # Layout
//!
//! * A **root** of [`ROOT_BYTES`] at an offset the caller chooses: magic, the inode table's
//!   offset, its capacity, the next inode generation.
//! * The **inode table**: `max_files` inodes of 128 bytes: the log *tail* (8 bytes, the commit
//!   word), the log *head*, the inode's *generation* (0: the slot is free), the name's length
//!   and up to [`MAX_NAME`] bytes of name. The table is the namespace: `create`, `rename` and
//!   `remove` change it inside undo-log transactions, so it is always either before or after
//!   the operation.
//! * Each file's **log**: linked 4 KB log pages, a 64-byte header holding the next page's
//!   offset, then 8-byte aligned entries. Entries of three kinds, each with a 32-byte header
//!   (CRC-32C, kind, length, the file size after the entry, the file page):
//!   * *extent*: file pages `[p, p + n)` now live in pages `[i, i + n)` of the data block `b`
//!     (the copy-on-write path: NOVA's write entry);
//!   * *embed*: `len` bytes at offset `o` of file page `p`, carried inline after the header
//!     (NOVA-datalog's embed write entry, seed 000 Fig. 10);
//!   * *set size*: the file's size changes (truncate); pages past it are dropped.
//!
//!   An entry that does not fit the rest of a page goes to the next one; an 8-byte end mark
//!   (when 32 bytes or more are left) says so.
//! * **Data blocks**: runs of 4 KB pages from the pmem-undo-log allocator, one block per
//!   copy-on-write write (at most [`MAX_EXTENT_PAGES`] pages each).
//!
//! # Crash consistency
//!
//! Entries past a log's tail are invisible. An operation writes its entries there (and, for
//! copy-on-write, its data pages with non-temporal stores), makes them durable, and commits by
//! storing the new tail: one failure-atomic 8-byte store. So every write, of any size and
//! offset, is atomic: all of its entries (one per page piece) become part of the log at once.
//!
//! * **Embedded writes** need nothing else: entries flushed, a fence, the tail stored and
//!   persisted (two fences per write).
//! * **Copy-on-write** allocates data blocks and frees the blocks its pages replace, and the
//!   persistent allocator's metadata must change with the tail: the tail store is made inside
//!   the undo-log transaction that allocates and frees, so the allocation, the entries and the
//!   frees commit together (the data and entries are made durable by that transaction's commit
//!   fence, which precedes its commit word).
//! * **New log pages** are allocated and linked from the last page in a transaction before the
//!   entries that need them are written: a crash leaves them linked past the tail, owned by the
//!   log and reused, never leaked.
//! * **Truncate, remove, rename, create** and **log cleaning** are transactions too.
//!
//! Each entry's checksum covers its header and inline bytes, seeded with the inode's generation.
//! Recovery ([`Datalog::open`]) scans each log from head to tail: what lies past the tail (a torn
//! entry) is never read; a committed entry whose checksum fails marks the file damaged, and every
//! operation on it returns [`DatalogError::CorruptEntry`] naming the file and the entry's offset.
//! Reads check embedded entries' checksums again, so bytes corrupted later are reported too.
//!
//! # Write paths
//!
//! A write is cut into page pieces. [`WriteMode::CopyOnWrite`] writes every piece as a new
//! 4 KB page (the old contents merged in for a partial page). [`WriteMode::Embedded`] embeds
//! every sub-page piece of at most [`MAX_EMBED`] bytes; whole pages still go copy-on-write, as
//! in NOVA-datalog, which embeds only sub-page writes. [`WriteMode::Auto`] embeds sub-page
//! pieces of at most [`Policy::auto_embed_max`] bytes (2048 by default: an embedded piece of `s`
//! bytes costs about `s` now and, through the fold it hastens, about `s` later, against 4096
//! for a copy, so the two meet at half a page).
//!
//! A page's embedded entries are merged over its base page on every read (seed 000 Fig. 11's
//! read-path overhead). A page that has collected [`Policy::fold_after_entries`] entries or
//! [`Policy::fold_after_bytes`] inline bytes is *folded*: its next write goes copy-on-write,
//! which writes the merged page and kills all its embedded entries.
//!
//! # DRAM index and log cleaning
//!
//! Per file, DRAM holds page -> (base page, embedded entries over it), the live entries of each
//! log page and the live pages of each data block, rebuilt at open by replaying the log. An
//! entry dies when everything it wrote is replaced (a later extent over its page, a later embed
//! covering all its bytes, a truncate); a data block is freed, in the transaction of the
//! operation that kills its last page. Set-size entries stay live until compaction (dropping
//! one could let an older entry reappear at replay).
//!
//! After each operation, log pages (other than the tail's) with no live entry are unlinked and
//! freed (one transaction), and a log of [`Policy::compact_min_pages`] pages or more whose live
//! bytes fall under [`Policy::compact_live_percent`] of its capacity is *compacted*: a new log
//! holding only the live state (extents, live embeds, the size) is written to fresh pages and
//! swapped in by writing the inode's head and tail in one transaction that also frees the old
//! pages. A file overwritten forever keeps a bounded log.
//!
//! Limits: one transaction's undo log must hold the allocator words it changes (32 bytes per
//! chunk touched). With [`pmem_undo_log::HeapConfig::default`] (64 KiB lanes, 256 KiB chunks)
//! that is roughly 250 MB of log pages or data blocks freed by one compaction or one `remove`;
//! beyond that the transaction fails with [`TxError::LogFull`] and changes nothing (a failed
//! cleaning is counted in [`CleaningStats::failures`]; a file too large to remove at once can
//! be truncated in steps first).
//!
//! # Concurrency
//!
//! One DRAM lock serialises the store's operations: the store is `Sync` and can be shared, but
//! operations do not run in parallel.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use pmem_ordering::{Pool, PoolOptions};
//! use pmem_structures::datalog::{Datalog, Policy, WriteMode};
//! use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
//!
//! let pool = Pool::anonymous("datalog", 8 << 20, &PoolOptions::new())?;
//! let heap: Heap = Heap::create(Arc::new(pool), HeapConfig::default(), FencePolicy::Batched)?;
//! let root = heap.pool().root_offset();
//! let store = Datalog::create(&heap, root, 16, Policy::default())?;
//! let notes = store.create_file("notes")?;
//! store.write_at(notes, 0, &[b'.'; 8192])?; // two whole pages: copy-on-write
//! store.write_at(notes, 100, b"hello")?; // a small piece: embedded in the log
//! store.write_at_with(notes, 4000, b"across a page boundary", WriteMode::Embedded)?;
//! let mut buf = [0u8; 5];
//! store.read_at(notes, 100, &mut buf)?;
//! assert_eq!(&buf, b"hello");
//! store.rename("notes", "journal")?;
//! assert_eq!(store.list(), ["journal"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Deref;
use std::sync::{Mutex, MutexGuard};

use pmem_ordering::{Backend, PPtr, Pending, Pool, PoolError};
use pmem_undo_log::{Heap, TxError};

/// Bytes of a data page and of a log page.
pub const PAGE: u64 = 4096;
/// Bytes at the start of a log page before its first entry (the next-page link).
const LOG_HEADER: u64 = 64;
/// Bytes of an entry header.
const ENTRY_HEADER: u64 = 32;
/// Bytes of an extent entry (header + block offset).
const EXTENT_ENTRY: u64 = ENTRY_HEADER + 8;
/// The largest inline payload of an embed entry: one entry per empty log page.
pub const MAX_EMBED: u64 = PAGE - LOG_HEADER - ENTRY_HEADER;
/// The most pages of one data block.
pub const MAX_EXTENT_PAGES: u64 = 64;
/// The end-of-page mark.
const END_MARK: u64 = u64::from_le_bytes(*b"DLOG-END");
const ROOT_MAGIC: u64 = u64::from_le_bytes(*b"DATALOG1");
/// Bytes of the root.
pub const ROOT_BYTES: u64 = 64;
const INODE_BYTES: u64 = 128;
const INODE_NAME: u64 = 32;
/// The longest file name, in bytes.
pub const MAX_NAME: usize = (INODE_BYTES - INODE_NAME) as usize;
/// The largest file size.
pub const MAX_FILE_SIZE: u64 = 1 << 40;
/// The most files a store may be created for.
pub const MAX_FILES: u64 = 1 << 16;

const KIND_EXTENT: u8 = 1;
const KIND_EMBED: u8 = 2;
const KIND_SET_SIZE: u8 = 3;

/// What can go wrong with a datalog store.
#[derive(Debug, thiserror::Error)]
pub enum DatalogError {
    /// A transaction failed (allocation, log space, pool access); nothing changed.
    #[error(transparent)]
    Tx(#[from] TxError),
    /// The root does not hold a datalog store, or its inode table is damaged.
    #[error("not a valid datalog store at offset {root:#x}: {reason}")]
    Corrupt {
        /// The root offset.
        root: u64,
        /// What is wrong.
        reason: String,
    },
    /// A committed log entry of a file fails its checksum or makes no sense: the file's data
    /// cannot be trusted and is not returned.
    #[error("file {file:?}: corrupted log entry at pool offset {entry:#x}: {reason}")]
    CorruptEntry {
        /// The file's name.
        file: String,
        /// Pool offset of the entry.
        entry: u64,
        /// What is wrong.
        reason: String,
    },
    /// No file of that name.
    #[error("no file named {name:?}")]
    NotFound {
        /// The name.
        name: String,
    },
    /// A file of that name exists already.
    #[error("a file named {name:?} exists already")]
    Exists {
        /// The name.
        name: String,
    },
    /// A name that cannot be stored.
    #[error("invalid file name {name:?}: {reason}")]
    InvalidName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// Every inode is in use.
    #[error("the store is full: all {max} inodes are in use")]
    TooManyFiles {
        /// Inodes of the store.
        max: u64,
    },
    /// A handle to a file that has been removed.
    #[error("the file handle is stale: its file was removed")]
    StaleHandle,
    /// An offset or size past [`MAX_FILE_SIZE`].
    #[error("range at {offset} of {len} bytes passes the largest file size ({MAX_FILE_SIZE})")]
    OutOfRange {
        /// Offset asked for.
        offset: u64,
        /// Length asked for.
        len: u64,
    },
    /// A configuration that cannot be used.
    #[error("invalid datalog configuration: {reason}")]
    InvalidConfig {
        /// Why.
        reason: String,
    },
}

impl From<PoolError> for DatalogError {
    fn from(e: PoolError) -> Self {
        DatalogError::Tx(TxError::Pool(e))
    }
}

/// How writes reach the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// Every piece as a new 4 KB page (NOVA).
    CopyOnWrite,
    /// Sub-page pieces inline in the log (NOVA-datalog); whole pages copy-on-write.
    Embedded,
    /// Embedded up to [`Policy::auto_embed_max`] bytes per page piece, copy-on-write above.
    #[default]
    Auto,
}

impl WriteMode {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::CopyOnWrite => "cow",
            WriteMode::Embedded => "embedded",
            WriteMode::Auto => "auto",
        }
    }
}

/// Run-time policy of a store (not persistent: a store may be reopened with another).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The write path of [`Datalog::write_at`].
    pub mode: WriteMode,
    /// Largest page piece [`WriteMode::Auto`] embeds.
    pub auto_embed_max: u64,
    /// Embedded entries over one page before it is folded.
    pub fold_after_entries: usize,
    /// Inline bytes over one page before it is folded.
    pub fold_after_bytes: u64,
    /// A log whose live entries fill less than this share (percent) of its pages is compacted.
    pub compact_live_percent: u64,
    /// Logs shorter than this many pages are never compacted.
    pub compact_min_pages: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            mode: WriteMode::Auto,
            auto_embed_max: 2048,
            fold_after_entries: 64,
            fold_after_bytes: PAGE,
            compact_live_percent: 33,
            compact_min_pages: 4,
        }
    }
}

impl Policy {
    /// The default policy with another write mode.
    pub fn with_mode(mode: WriteMode) -> Policy {
        Policy {
            mode,
            ..Policy::default()
        }
    }

    fn check(&self) -> Result<(), DatalogError> {
        let bad = |reason: String| Err(DatalogError::InvalidConfig { reason });
        if self.fold_after_entries == 0 {
            return bad("fold_after_entries must be at least 1".into());
        }
        if self.compact_live_percent > 100 {
            return bad(format!(
                "compact_live_percent {} is above 100",
                self.compact_live_percent
            ));
        }
        if self.compact_min_pages < 2 {
            return bad("compact_min_pages must be at least 2".into());
        }
        Ok(())
    }
}

/// A handle to an open file: its inode slot and generation, so a handle to a removed file is
/// refused even if its slot is reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileId {
    slot: u32,
    generation: u64,
}

/// What a file's log and index hold (for tests and reports).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStats {
    /// The file's size.
    pub size: u64,
    /// Log pages linked (spares past the tail included).
    pub log_pages: u64,
    /// Bytes of live entries.
    pub live_log_bytes: u64,
    /// Live entries.
    pub live_entries: u64,
    /// Data blocks holding live pages.
    pub data_blocks: u64,
    /// File pages with a base page.
    pub base_pages: u64,
    /// Embedded entries over all pages.
    pub embedded_entries: u64,
}

/// What log cleaning has done since the store was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleaningStats {
    /// Log pages unlinked and freed because none of their entries was live.
    pub pages_reclaimed: u64,
    /// Logs rewritten by compaction.
    pub compactions: u64,
    /// Pages folded: a write that went copy-on-write because the page held too many embeds.
    pub folds: u64,
    /// Cleaning attempts that failed and changed nothing (no room for a compacted log, or a
    /// live entry that fails its checksum); cleaning is tried again after the next operation.
    pub failures: u64,
}

/// A decoded entry (the payload of an embed stays in the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Extent {
        file_page: u64,
        pages: u64,
        block: u64,
        block_page: u64,
        size_after: u64,
    },
    Embed {
        file_page: u64,
        page_off: u64,
        len: u64,
        size_after: u64,
    },
    SetSize {
        size_after: u64,
    },
}

impl Entry {
    fn bytes(&self) -> u64 {
        match self {
            Entry::Extent { .. } => EXTENT_ENTRY,
            Entry::Embed { len, .. } => ENTRY_HEADER + len.next_multiple_of(8),
            Entry::SetSize { .. } => ENTRY_HEADER,
        }
    }

    /// Encode into `out` (cleared first), with the checksum seeded by `generation`.
    fn encode(&self, generation: u64, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.resize(self.bytes() as usize, 0);
        let (kind, count, size_after, file_page, word) = match *self {
            Entry::Extent {
                file_page,
                pages,
                block,
                block_page,
                size_after,
            } => {
                out[32..40].copy_from_slice(&block.to_le_bytes());
                (KIND_EXTENT, pages, size_after, file_page, block_page)
            }
            Entry::Embed {
                file_page,
                page_off,
                len,
                size_after,
            } => {
                out[32..32 + len as usize].copy_from_slice(payload);
                (KIND_EMBED, len, size_after, file_page, page_off)
            }
            Entry::SetSize { size_after } => (KIND_SET_SIZE, 0, size_after, 0, 0),
        };
        out[4] = kind;
        out[6..8].copy_from_slice(&(count as u16).to_le_bytes());
        out[8..16].copy_from_slice(&size_after.to_le_bytes());
        out[16..24].copy_from_slice(&file_page.to_le_bytes());
        out[24..28].copy_from_slice(&(word as u32).to_le_bytes());
        let crc = checksum(generation, &out[4..]);
        out[0..4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Decode a 32-byte header (an extent's block is read separately).
    fn decode_header(h: &[u8]) -> Result<Entry, String> {
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        let count = u16::from_le_bytes([h[6], h[7]]) as u64;
        let word = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes")) as u64;
        let size_after = u64_at(8);
        let file_page = u64_at(16);
        if size_after > MAX_FILE_SIZE || file_page > MAX_FILE_SIZE / PAGE {
            return Err(format!(
                "file size {size_after} or page {file_page} out of range"
            ));
        }
        match h[4] {
            KIND_EXTENT => {
                if count == 0 || word + count > MAX_EXTENT_PAGES {
                    return Err(format!("extent of {count} pages from block page {word}"));
                }
                if (file_page + count - 1) * PAGE >= size_after {
                    return Err(format!(
                        "extent of pages {file_page}.. reaches past size {size_after}"
                    ));
                }
                Ok(Entry::Extent {
                    file_page,
                    pages: count,
                    block: 0,
                    block_page: word,
                    size_after,
                })
            }
            KIND_EMBED => {
                if count == 0 || count > MAX_EMBED || word + count > PAGE {
                    return Err(format!("embed of {count} bytes at page offset {word}"));
                }
                if file_page * PAGE + word + count > size_after {
                    return Err("embed past the file size".into());
                }
                Ok(Entry::Embed {
                    file_page,
                    page_off: word,
                    len: count,
                    size_after,
                })
            }
            KIND_SET_SIZE => Ok(Entry::SetSize { size_after }),
            kind => Err(format!("unknown entry kind {kind}")),
        }
    }
}

fn checksum(generation: u64, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&generation.to_le_bytes()), bytes)
}

/// The hasher of the DRAM index, whose keys are `u64` pool offsets and page numbers made by
/// the store itself: one multiplication with the high half folded into the low bits (which
/// pick the bucket), so page-aligned offsets still spread. The standard SipHash resists keys
/// chosen by an attacker, which these are not, at several times the cost per lookup.
#[derive(Clone, Copy, Debug, Default)]
struct OffsetHasher(u64);

impl Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let h = (self.0.rotate_left(5) ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 29);
    }
}

/// A map keyed by offsets or page numbers (see [`OffsetHasher`]).
type IndexMap<K, V> = HashMap<K, V, BuildHasherDefault<OffsetHasher>>;

/// A file page's base page in a data block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct BaseRef {
    block: u64,
    block_page: u64,
    entry: u64,
}

/// An embedded entry over a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct EmbedRef {
    entry: u64,
    page_off: u64,
    len: u64,
}

#[derive(Clone, Debug, Default)]
struct PageState {
    base: Option<BaseRef>,
    embeds: Vec<EmbedRef>,
    embed_bytes: u64,
}

#[derive(Clone, Copy, Debug)]
struct EntryInfo {
    page: u64,
    bytes: u64,
    refs: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct LogPageInfo {
    live_entries: u64,
    live_bytes: u64,
}

/// One file's DRAM state.
#[derive(Debug)]
struct FileState {
    name: String,
    generation: u64,
    inode: u64,
    size: u64,
    pages: IndexMap<u64, PageState>,
    /// Log pages in order, spares past the tail page included.
    /// Sequence number -> page: a removal from the middle costs a logarithm, not a shift.
    chain: BTreeMap<u64, u64>,
    /// Page -> its sequence number in `chain`.
    seq_of: IndexMap<u64, u64>,
    /// The next sequence number to give a page appended to the chain.
    next_seq: u64,
    /// Sequence number of the page holding the tail.
    tail_seq: u64,
    tail: u64,
    /// Live entries by pool offset.
    entries: IndexMap<u64, EntryInfo>,
    /// Live entries per log page.
    log: IndexMap<u64, LogPageInfo>,
    live_log_bytes: u64,
    /// Live pages per data block.
    blocks: IndexMap<u64, u64>,
    /// Why the file cannot be used: (entry offset, reason).
    damage: Option<(u64, String)>,
    /// Log pages that may have no live entry left (checked by cleaning).
    maybe_dead: Vec<u64>,
}

impl FileState {
    fn new(name: String, generation: u64, inode: u64, head: u64) -> FileState {
        FileState {
            name,
            generation,
            inode,
            size: 0,
            pages: IndexMap::default(),
            chain: BTreeMap::from([(0, head)]),
            seq_of: IndexMap::from_iter([(head, 0)]),
            next_seq: 1,
            tail_seq: 0,
            tail: head + LOG_HEADER,
            entries: IndexMap::default(),
            log: IndexMap::default(),
            live_log_bytes: 0,
            blocks: IndexMap::default(),
            damage: None,
            maybe_dead: Vec::new(),
        }
    }

    /// Append `page` to the chain.
    fn push_page(&mut self, page: u64) {
        self.chain.insert(self.next_seq, page);
        self.seq_of.insert(page, self.next_seq);
        self.next_seq += 1;
    }

    fn tail_page(&self) -> u64 {
        self.chain[&self.tail_seq]
    }

    fn add_entry(&mut self, at: u64, page: u64, bytes: u64, refs: u64) {
        self.entries.insert(at, EntryInfo { page, bytes, refs });
        let info = self.log.entry(page).or_default();
        info.live_entries += 1;
        info.live_bytes += bytes;
        self.live_log_bytes += bytes;
    }

    fn release_entry(&mut self, at: u64) {
        let Some(info) = self.entries.get_mut(&at) else {
            return;
        };
        info.refs -= 1;
        if info.refs > 0 {
            return;
        }
        let info = self.entries.remove(&at).expect("present");
        let page = self.log.get_mut(&info.page).expect("entry's page is known");
        page.live_entries -= 1;
        page.live_bytes -= info.bytes;
        self.live_log_bytes -= info.bytes;
        if page.live_entries == 0 {
            self.maybe_dead.push(info.page);
        }
    }

    /// Forget page `p`'s contents: its entries lose a reference, its block a page; the blocks
    /// left with no live page are pushed to `dead`.
    fn drop_page(&mut self, p: u64, dead: &mut Vec<u64>) {
        let Some(state) = self.pages.remove(&p) else {
            return;
        };
        if let Some(base) = state.base {
            self.release_entry(base.entry);
            let refs = self.blocks.get_mut(&base.block).expect("block is known");
            *refs -= 1;
            if *refs == 0 {
                self.blocks.remove(&base.block);
                dead.push(base.block);
            }
        }
        for e in state.embeds {
            self.release_entry(e.entry);
        }
    }

    /// Apply a committed entry at pool offset `at` in log page `page`; returns the data blocks
    /// it left with no live page.
    fn apply(&mut self, at: u64, page: u64, entry: &Entry) -> Vec<u64> {
        let mut dead = Vec::new();
        match *entry {
            Entry::Extent {
                file_page,
                pages,
                block,
                block_page,
                size_after,
            } => {
                self.add_entry(at, page, entry.bytes(), pages);
                *self.blocks.entry(block).or_default() += pages;
                for i in 0..pages {
                    self.drop_page(file_page + i, &mut dead);
                    self.pages.insert(
                        file_page + i,
                        PageState {
                            base: Some(BaseRef {
                                block,
                                block_page: block_page + i,
                                entry: at,
                            }),
                            embeds: Vec::new(),
                            embed_bytes: 0,
                        },
                    );
                }
                self.size = size_after;
            }
            Entry::Embed {
                file_page,
                page_off,
                len,
                size_after,
            } => {
                self.add_entry(at, page, entry.bytes(), 1);
                let state = self.pages.entry(file_page).or_default();
                // An older embed whose bytes this one covers entirely is dead.
                // Usually nothing is covered: collect without allocating then.
                let mut covered = Vec::new();
                state.embeds.retain(|e| {
                    let dead = e.page_off >= page_off && e.page_off + e.len <= page_off + len;
                    if dead {
                        covered.push(e.entry);
                    }
                    !dead
                });
                state.embeds.push(EmbedRef {
                    entry: at,
                    page_off,
                    len,
                });
                state.embed_bytes = state.embeds.iter().map(|e| e.len).sum();
                for entry in covered {
                    self.release_entry(entry);
                }
                self.size = size_after;
            }
            Entry::SetSize { size_after } => {
                // Live until compaction: replay needs it while older entries remain.
                self.add_entry(at, page, entry.bytes(), 1);
                self.size = size_after;
                let gone: Vec<u64> = self
                    .pages
                    .keys()
                    .copied()
                    .filter(|&p| p * PAGE >= size_after)
                    .collect();
                for p in gone {
                    self.drop_page(p, &mut dead);
                }
            }
        }
        dead
    }

    fn corrupt(&self, entry: u64, reason: String) -> DatalogError {
        DatalogError::CorruptEntry {
            file: self.name.clone(),
            entry,
            reason,
        }
    }

    fn stats(&self) -> FileStats {
        FileStats {
            size: self.size,
            log_pages: self.chain.len() as u64,
            live_log_bytes: self.live_log_bytes,
            live_entries: self.entries.len() as u64,
            data_blocks: self.blocks.len() as u64,
            base_pages: self.pages.values().filter(|p| p.base.is_some()).count() as u64,
            embedded_entries: self.pages.values().map(|p| p.embeds.len() as u64).sum(),
        }
    }
}

/// The DRAM side of the store.
struct Inner {
    slots: Vec<Option<FileState>>,
    names: HashMap<String, u32>,
    next_generation: u64,
    scratch: Vec<u8>,
    cleaning: CleaningStats,
}

/// Where one operation's entries go in the log.
struct Placement {
    offsets: Vec<(u64, u64)>,
    end_marks: Vec<u64>,
    tail: u64,
    tail_seq: u64,
    /// Log pages missing after the chain's last page.
    missing: usize,
}

/// What an operation writes: its entries (extents of new copy-on-write pages, set-size,
/// embeds), the pages' contents and the blocks it frees.
struct Plan {
    new_size: u64,
    set_size_first: bool,
    cow: Vec<(u64, Vec<u8>)>,
    embeds: Vec<(u64, u64, Vec<u8>)>,
    dying: Vec<u64>,
}

/// A datalog store in a heap.
pub struct Datalog<'h, B: Backend, P: Deref<Target = Pool<B>>> {
    heap: &'h Heap<B, P>,
    root: u64,
    table: u64,
    max_files: u64,
    policy: Policy,
    inner: Mutex<Inner>,
}

impl<'h, B: Backend, P: Deref<Target = Pool<B>>> Datalog<'h, B, P> {
    /// Make an empty store for up to `max_files` files, with its root at `root` (8-byte
    /// aligned, [`ROOT_BYTES`], e.g. the pool's root object). One transaction.
    pub fn create(
        heap: &'h Heap<B, P>,
        root: u64,
        max_files: u64,
        policy: Policy,
    ) -> Result<Self, DatalogError> {
        policy.check()?;
        if max_files == 0 || max_files > MAX_FILES {
            return Err(DatalogError::InvalidConfig {
                reason: format!("{max_files} files: between 1 and {MAX_FILES} are allowed"),
            });
        }
        if !root.is_multiple_of(8) {
            return Err(DatalogError::InvalidConfig {
                reason: format!("root offset {root:#x} is not 8-byte aligned"),
            });
        }
        heap.pool().check_range(root, ROOT_BYTES)?;
        let table = heap.transaction(|tx| {
            let table = tx.alloc(max_files * INODE_BYTES)?.offset();
            tx.write(table, &vec![0u8; (max_files * INODE_BYTES) as usize])?;
            let mut r = [0u8; ROOT_BYTES as usize];
            r[0..8].copy_from_slice(&ROOT_MAGIC.to_le_bytes());
            r[8..16].copy_from_slice(&table.to_le_bytes());
            r[16..24].copy_from_slice(&max_files.to_le_bytes());
            r[24..32].copy_from_slice(&1u64.to_le_bytes());
            tx.write(root, &r)?;
            Ok::<u64, TxError>(table)
        })?;
        Ok(Datalog {
            heap,
            root,
            table,
            max_files,
            policy,
            inner: Mutex::new(Inner {
                slots: (0..max_files).map(|_| None).collect(),
                names: HashMap::new(),
                next_generation: 1,
                scratch: Vec::new(),
                cleaning: CleaningStats::default(),
            }),
        })
    }

    /// Open the store whose root is at `root`: the heap has already rolled back any
    /// transaction a crash interrupted; this reads the inode table and replays every file's
    /// log into the DRAM index. A file whose log holds a corrupted committed entry opens as
    /// *damaged*: it is listed, and every operation on it returns
    /// [`DatalogError::CorruptEntry`].
    pub fn open(heap: &'h Heap<B, P>, root: u64, policy: Policy) -> Result<Self, DatalogError> {
        policy.check()?;
        let pool = heap.pool();
        let corrupt = |reason: String| DatalogError::Corrupt { root, reason };
        pool.check_range(root, ROOT_BYTES)?;
        let magic = pool.read::<u64>(root)?;
        if magic != ROOT_MAGIC {
            return Err(corrupt(format!("magic {magic:#x}")));
        }
        let table = pool.read::<u64>(root + 8)?;
        let max_files = pool.read::<u64>(root + 16)?;
        let next_generation = pool.read::<u64>(root + 24)?;
        if max_files == 0 || max_files > MAX_FILES {
            return Err(corrupt(format!("{max_files} inodes")));
        }
        if heap
            .block_size(table)
            .is_none_or(|size| size < max_files * INODE_BYTES)
        {
            return Err(corrupt(format!(
                "inode table {table:#x} is not an allocated block for {max_files} inodes"
            )));
        }
        let mut inner = Inner {
            slots: (0..max_files).map(|_| None).collect(),
            names: HashMap::new(),
            next_generation,
            scratch: Vec::new(),
            cleaning: CleaningStats::default(),
        };
        let mut raw = [0u8; INODE_BYTES as usize];
        for slot in 0..max_files {
            let inode = table + slot * INODE_BYTES;
            pool.read_bytes(inode, &mut raw)?;
            let word = |at: usize| u64::from_le_bytes(raw[at..at + 8].try_into().expect("8"));
            let (tail, head, generation, name_len) = (word(0), word(8), word(16), word(24));
            if generation == 0 {
                continue;
            }
            if generation >= next_generation {
                return Err(corrupt(format!(
                    "inode {slot} has generation {generation}, not below the next ({next_generation})"
                )));
            }
            let name = (name_len as usize <= MAX_NAME)
                .then(|| std::str::from_utf8(&raw[INODE_NAME as usize..][..name_len as usize]).ok())
                .flatten()
                .filter(|n| !n.is_empty())
                .ok_or_else(|| corrupt(format!("inode {slot} has an invalid name")))?
                .to_string();
            if inner.names.insert(name.clone(), slot as u32).is_some() {
                return Err(corrupt(format!("two files are named {name:?}")));
            }
            let state = replay(heap, name, generation, inode, head, tail)?;
            inner.slots[slot as usize] = Some(state);
        }
        Ok(Datalog {
            heap,
            root,
            table,
            max_files,
            policy,
            inner: Mutex::new(inner),
        })
    }

    /// The store's policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The root offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Create an empty file. One transaction: its first log page and its inode.
    pub fn create_file(&self, name: &str) -> Result<FileId, DatalogError> {
        check_name(name)?;
        let mut inner = self.lock();
        if inner.names.contains_key(name) {
            return Err(DatalogError::Exists { name: name.into() });
        }
        let slot =
            inner
                .slots
                .iter()
                .position(Option::is_none)
                .ok_or(DatalogError::TooManyFiles {
                    max: self.max_files,
                })?;
        let generation = inner.next_generation;
        let inode = self.table + slot as u64 * INODE_BYTES;
        let head = self.heap.transaction(|tx| {
            let head = tx.alloc(PAGE)?.offset();
            tx.write(head, &[0u8; LOG_HEADER as usize])?;
            let mut raw = [0u8; INODE_BYTES as usize];
            raw[0..8].copy_from_slice(&(head + LOG_HEADER).to_le_bytes());
            raw[8..16].copy_from_slice(&head.to_le_bytes());
            raw[16..24].copy_from_slice(&generation.to_le_bytes());
            raw[24..32].copy_from_slice(&(name.len() as u64).to_le_bytes());
            raw[INODE_NAME as usize..][..name.len()].copy_from_slice(name.as_bytes());
            tx.write(inode, &raw)?;
            tx.write_value(self.root + 24, &(generation + 1))?;
            Ok::<u64, TxError>(head)
        })?;
        inner.next_generation = generation + 1;
        inner.names.insert(name.to_string(), slot as u32);
        inner.slots[slot] = Some(FileState::new(name.to_string(), generation, inode, head));
        Ok(FileId {
            slot: slot as u32,
            generation,
        })
    }

    /// The handle of the file named `name`.
    pub fn open_file(&self, name: &str) -> Result<FileId, DatalogError> {
        let inner = self.lock();
        let slot = *inner
            .names
            .get(name)
            .ok_or_else(|| DatalogError::NotFound { name: name.into() })?;
        let state = inner.slots[slot as usize].as_ref().expect("named slot");
        Ok(FileId {
            slot,
            generation: state.generation,
        })
    }

    /// Every file's name, sorted.
    pub fn list(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lock().names.keys().cloned().collect();
        names.sort();
        names
    }

    /// Rename a file (one transaction on its inode). `to` must not exist.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), DatalogError> {
        check_name(to)?;
        let mut inner = self.lock();
        let slot = *inner
            .names
            .get(from)
            .ok_or_else(|| DatalogError::NotFound { name: from.into() })?;
        if from == to {
            return Ok(());
        }
        if inner.names.contains_key(to) {
            return Err(DatalogError::Exists { name: to.into() });
        }
        let inode = self.table + slot as u64 * INODE_BYTES;
        let mut raw = [0u8; 8 + MAX_NAME];
        raw[0..8].copy_from_slice(&(to.len() as u64).to_le_bytes());
        raw[8..8 + to.len()].copy_from_slice(to.as_bytes());
        self.heap
            .transaction(|tx| tx.write(inode + 24, &raw[..8 + to.len()]))?;
        inner.names.remove(from);
        inner.names.insert(to.to_string(), slot);
        inner.slots[slot as usize]
            .as_mut()
            .expect("named slot")
            .name = to.to_string();
        Ok(())
    }

    /// Remove a file: one transaction frees its log pages and data blocks and its inode. A
    /// damaged file (see [`Datalog::open`]) is refused with [`DatalogError::CorruptEntry`]: which
    /// blocks it owns cannot be known for sure from a damaged log, and freeing a block that is
    /// not its own would corrupt another file, so nothing is freed and the file stays listed.
    pub fn remove(&self, name: &str) -> Result<(), DatalogError> {
        let mut inner = self.lock();
        let slot = *inner
            .names
            .get(name)
            .ok_or_else(|| DatalogError::NotFound { name: name.into() })?;
        let state = inner.slots[slot as usize].as_ref().expect("named slot");
        if let Some((entry, reason)) = &state.damage {
            // Its data blocks cannot be known: freeing only part of them would be wrong.
            return Err(state.corrupt(*entry, reason.clone()));
        }
        self.heap.transaction(|tx| {
            tx.write_value(state.inode + 16, &0u64)?;
            for &page in state.chain.values() {
                tx.free(PPtr::<u8>::new(page))?;
            }
            for &block in state.blocks.keys() {
                tx.free(PPtr::<u8>::new(block))?;
            }
            Ok::<(), TxError>(())
        })?;
        inner.names.remove(name);
        inner.slots[slot as usize] = None;
        Ok(())
    }

    /// The file's size.
    pub fn len(&self, id: FileId) -> Result<u64, DatalogError> {
        let mut inner = self.lock();
        Ok(file(&mut inner.slots, id)?.size)
    }

    /// What the file's log and index hold.
    pub fn file_stats(&self, id: FileId) -> Result<FileStats, DatalogError> {
        let mut inner = self.lock();
        Ok(file(&mut inner.slots, id)?.stats())
    }

    /// Read up to `buf.len()` bytes at `offset`; returns how many were read (0 at or past the
    /// end). Embedded bytes are merged over their base page, their checksums checked; after an
    /// error `buf` may hold part of the file, but never bytes of an entry that failed its
    /// checksum.
    pub fn read_at(&self, id: FileId, offset: u64, buf: &mut [u8]) -> Result<usize, DatalogError> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let f = file(&mut inner.slots, id)?;
        if offset >= f.size {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(f.size - offset) as usize;
        let pool = self.heap.pool();
        let mut done = 0usize;
        while done < n {
            let at = offset + done as u64;
            let p = at / PAGE;
            let start = at % PAGE;
            let len = ((PAGE - start) as usize).min(n - done);
            let out = &mut buf[done..done + len];
            match f.pages.get(&p) {
                None => out.fill(0),
                Some(state) => {
                    match state.base {
                        Some(b) => pool.read_bytes(b.block + b.block_page * PAGE + start, out)?,
                        None => out.fill(0),
                    }
                    for e in &state.embeds {
                        let lo = e.page_off.max(start);
                        let hi = (e.page_off + e.len).min(start + len as u64);
                        if lo >= hi {
                            continue;
                        }
                        let payload = embed_payload(pool, f, e, &mut inner.scratch)?;
                        out[(lo - start) as usize..(hi - start) as usize].copy_from_slice(
                            &payload[(lo - e.page_off) as usize..(hi - e.page_off) as usize],
                        );
                    }
                }
            }
            done += len;
        }
        Ok(n)
    }

    /// Write `data` at `offset` with the store's write mode. Atomic and durable when it
    /// returns; writing past the end extends the file (with zeros in any gap).
    pub fn write_at(&self, id: FileId, offset: u64, data: &[u8]) -> Result<(), DatalogError> {
        self.write_at_with(id, offset, data, self.policy.mode)
    }

    /// [`Datalog::write_at`] with a given write mode.
    pub fn write_at_with(
        &self,
        id: FileId,
        offset: u64,
        data: &[u8],
        mode: WriteMode,
    ) -> Result<(), DatalogError> {
        let len = data.len() as u64;
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(DatalogError::OutOfRange { offset, len })?;
        if data.is_empty() {
            return Ok(());
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let f = file(&mut inner.slots, id)?;
        let pool = self.heap.pool();
        let mut plan = Plan {
            new_size: f.size.max(end),
            set_size_first: false,
            cow: Vec::new(),
            embeds: Vec::new(),
            dying: Vec::new(),
        };
        let mut replaced: Vec<u64> = Vec::new();
        let mut done = 0u64;
        while done < len {
            let at = offset + done;
            let p = at / PAGE;
            let start = at % PAGE;
            let piece = (PAGE - start).min(len - done);
            let bytes = &data[done as usize..(done + piece) as usize];
            if self.embeds(f, p, piece, mode) {
                plan.embeds.push((p, start, bytes.to_vec()));
            } else {
                if self.folds(f, p, piece, mode) {
                    inner.cleaning.folds += 1;
                }
                let mut page = if piece == PAGE {
                    Vec::new()
                } else {
                    materialize(pool, f, p, &mut inner.scratch)?
                };
                if piece == PAGE {
                    page.extend_from_slice(bytes);
                } else {
                    page[start as usize..(start + piece) as usize].copy_from_slice(bytes);
                }
                plan.cow.push((p, page));
                replaced.push(p);
            }
            done += piece;
        }
        plan.dying = dying_blocks(f, &replaced);
        self.commit(f, plan, &mut inner.scratch)?;
        self.clean_after(f, &mut inner.scratch, &mut inner.cleaning);
        Ok(())
    }

    /// Whether a piece of `len` bytes of page `p` is embedded under `mode`.
    fn embeds(&self, f: &FileState, p: u64, len: u64, mode: WriteMode) -> bool {
        Datalog::<B, P>::embeds_under(&self.policy, f, p, len, mode)
    }

    fn embeds_under(policy: &Policy, f: &FileState, p: u64, len: u64, mode: WriteMode) -> bool {
        let limit = match mode {
            WriteMode::CopyOnWrite => return false,
            WriteMode::Embedded => MAX_EMBED,
            WriteMode::Auto => policy.auto_embed_max.min(MAX_EMBED),
        };
        if len >= PAGE || len > limit {
            return false;
        }
        match f.pages.get(&p) {
            None => true,
            // Too many embeds on the page: fold it (this write goes copy-on-write).
            Some(s) => {
                s.embeds.len() < policy.fold_after_entries
                    && s.embed_bytes.saturating_add(len) <= policy.fold_after_bytes
            }
        }
    }

    /// Whether a piece that is not embedded would have been, but for its page's embeds.
    fn folds(&self, f: &FileState, p: u64, len: u64, mode: WriteMode) -> bool {
        let unfolded = Policy {
            fold_after_entries: usize::MAX,
            fold_after_bytes: u64::MAX,
            ..self.policy
        };
        let no_fold = Datalog::<B, P>::embeds_under(&unfolded, f, p, len, mode);
        no_fold && !self.embeds(f, p, len, mode)
    }

    /// Set the file's size. Shrinking drops the pages past the end and rewrites a partial
    /// last page with zeros past the end (so growing again reads zeros), in one transaction
    /// that also frees the blocks left unused.
    pub fn truncate(&self, id: FileId, size: u64) -> Result<(), DatalogError> {
        if size > MAX_FILE_SIZE {
            return Err(DatalogError::OutOfRange {
                offset: size,
                len: 0,
            });
        }
        let mut inner = self.lock();
        let inner = &mut *inner;
        let f = file(&mut inner.slots, id)?;
        let mut plan = Plan {
            new_size: size,
            set_size_first: true,
            cow: Vec::new(),
            embeds: Vec::new(),
            dying: Vec::new(),
        };
        if size < f.size {
            let mut replaced: Vec<u64> = f
                .pages
                .keys()
                .copied()
                .filter(|&p| p * PAGE >= size)
                .collect();
            let last = size / PAGE;
            let cut = size % PAGE;
            if cut > 0 && f.pages.contains_key(&last) {
                let mut page = materialize(self.heap.pool(), f, last, &mut inner.scratch)?;
                page[cut as usize..].fill(0);
                plan.cow.push((last, page));
                replaced.push(last);
            }
            plan.dying = dying_blocks(f, &replaced);
        }
        self.commit(f, plan, &mut inner.scratch)?;
        self.clean_after(f, &mut inner.scratch, &mut inner.cleaning);
        Ok(())
    }

    /// Append the plan's entries and commit them with one tail store; update the index.
    fn commit(
        &self,
        f: &mut FileState,
        plan: Plan,
        scratch: &mut Vec<u8>,
    ) -> Result<(), DatalogError> {
        let pool = self.heap.pool();
        let size = plan.new_size;
        // The entries, with block offsets to fill in for extents.
        let mut entries: Vec<Entry> = Vec::new();
        if plan.set_size_first {
            entries.push(Entry::SetSize { size_after: size });
        }
        // Copy-on-write pages: one block per group of MAX_EXTENT_PAGES, an extent per run of
        // consecutive file pages inside a group.
        let groups: Vec<&[(u64, Vec<u8>)]> = plan.cow.chunks(MAX_EXTENT_PAGES as usize).collect();
        let mut extent_group = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            let mut i = 0;
            while i < group.len() {
                let mut j = i + 1;
                while j < group.len() && group[j].0 == group[j - 1].0 + 1 {
                    j += 1;
                }
                entries.push(Entry::Extent {
                    file_page: group[i].0,
                    pages: (j - i) as u64,
                    block: 0,
                    block_page: i as u64,
                    size_after: size,
                });
                extent_group.push(g);
                i = j;
            }
        }
        for (p, off, bytes) in &plan.embeds {
            entries.push(Entry::Embed {
                file_page: *p,
                page_off: *off,
                len: bytes.len() as u64,
                size_after: size,
            });
        }
        let sizes: Vec<u64> = entries.iter().map(Entry::bytes).collect();
        self.grow_chain(f, &sizes)?;
        let place = place(f, &sizes);
        debug_assert_eq!(place.missing, 0);

        let write_entries =
            |entries: &[Entry], scratch: &mut Vec<u8>| -> Result<Pending, PoolError> {
                let mut pending: Option<Pending> = None;
                let mut add = |p: Pending| {
                    pending = Some(match pending.take() {
                        None => p,
                        Some(q) => q.and(p),
                    })
                };
                for &at in &place.end_marks {
                    add(pool.flush(pool.write(at, &END_MARK.to_le_bytes())?));
                }
                let mut embeds = plan.embeds.iter();
                for (entry, &(at, _)) in entries.iter().zip(&place.offsets) {
                    let payload: &[u8] = match entry {
                        Entry::Embed { .. } => &embeds.next().expect("one payload per embed").2,
                        _ => &[],
                    };
                    entry.encode(f.generation, payload, scratch);
                    add(pool.flush(pool.write(at, scratch)?));
                }
                Ok(pending.expect("an operation writes at least one entry"))
            };

        if plan.cow.is_empty() && plan.dying.is_empty() {
            // Entries durable, then the one tail store that commits them.
            let pending = write_entries(&entries, scratch)?;
            let _ = pool.fence(pending);
            let w = pool.store_u64(f.inode, place.tail)?;
            let _ = pool.persist(w);
        } else {
            let inode = f.inode;
            entries = self.heap.transaction(|tx| {
                let mut blocks = Vec::with_capacity(groups.len());
                for group in &groups {
                    let block = tx.alloc(group.len() as u64 * PAGE)?.offset();
                    for (i, (_, page)) in group.iter().enumerate() {
                        // Ordered before the commit word by the transaction's commit fence.
                        // SAFETY: `block` was just allocated by this transaction and is not yet
                        // published: no entry, inode or other thread refers to it before the
                        // commit, so no other thread accesses it concurrently.
                        drop(unsafe { pool.nt_write(block + i as u64 * PAGE, page) }?);
                    }
                    blocks.push(block);
                }
                let mut filled = entries.clone();
                let mut k = 0;
                for e in filled.iter_mut() {
                    if let Entry::Extent { block, .. } = e {
                        *block = blocks[extent_group[k]];
                        k += 1;
                    }
                }
                // The entries' flushes, too, are ordered by the commit fence.
                drop(write_entries(&filled, scratch)?);
                tx.write_value(inode, &place.tail)?;
                for &b in &plan.dying {
                    tx.free(PPtr::<u8>::new(b))?;
                }
                Ok::<Vec<Entry>, TxError>(filled)
            })?;
        }
        // The pages the tail left behind may hold no live entry.
        let passed: Vec<u64> = f
            .chain
            .range(f.tail_seq..place.tail_seq)
            .map(|(_, &p)| p)
            .collect();
        f.maybe_dead.extend(passed);
        f.tail = place.tail;
        f.tail_seq = place.tail_seq;
        let mut dead = Vec::new();
        for (entry, &(at, page)) in entries.iter().zip(&place.offsets) {
            dead.extend(f.apply(at, page, entry));
        }
        dead.sort_unstable();
        let mut dying = plan.dying;
        dying.sort_unstable();
        debug_assert_eq!(
            dead, dying,
            "the blocks freed are the blocks the entries killed"
        );
        Ok(())
    }

    /// Make sure the chain has the pages the entries of `sizes` need past the tail, linking
    /// new ones in one transaction.
    fn grow_chain(&self, f: &mut FileState, sizes: &[u64]) -> Result<(), DatalogError> {
        let missing = place(f, sizes).missing;
        if missing == 0 {
            return Ok(());
        }
        let (_, &last) = f.chain.last_key_value().expect("a log has a page");
        let added = self.heap.transaction(|tx| {
            let mut added = Vec::with_capacity(missing);
            let mut prev = last;
            for _ in 0..missing {
                let page = tx.alloc(PAGE)?.offset();
                tx.write(page, &[0u8; LOG_HEADER as usize])?;
                tx.write_value(prev, &page)?;
                added.push(page);
                prev = page;
            }
            Ok::<Vec<u64>, TxError>(added)
        })?;
        for page in added {
            f.push_page(page);
        }
        Ok(())
    }

    /// Log cleaning after a committed operation. A failure (no room for a compacted log, a
    /// payload that fails its checksum) changes nothing and must not report the committed
    /// operation as failed: it is counted, and cleaning runs again after the next operation.
    fn clean_after(&self, f: &mut FileState, scratch: &mut Vec<u8>, stats: &mut CleaningStats) {
        if self.clean(f, scratch, stats).is_err() {
            stats.failures += 1;
        }
    }

    /// Log cleaning: free log pages with no live entry, then compact the
    /// log if its live share is low.
    fn clean(
        &self,
        f: &mut FileState,
        scratch: &mut Vec<u8>,
        stats: &mut CleaningStats,
    ) -> Result<(), DatalogError> {
        if !f.maybe_dead.is_empty() {
            // Pages before the tail page with no live entry (spares past it are kept).
            let mut dead: Vec<(u64, u64)> = f
                .maybe_dead
                .drain(..)
                .filter_map(|p| f.seq_of.get(&p).map(|&seq| (seq, p)))
                .filter(|&(seq, p)| {
                    seq < f.tail_seq && f.log.get(&p).is_none_or(|l| l.live_entries == 0)
                })
                .collect();
            dead.sort_unstable();
            dead.dedup();
            if !dead.is_empty() {
                if let Err(e) = self.unlink(f, &dead) {
                    // Still dead: try again next time.
                    f.maybe_dead.extend(dead.iter().map(|&(_, p)| p));
                    return Err(e);
                }
                stats.pages_reclaimed += dead.len() as u64;
            }
        }
        // Spares past the tail page are few: count them, not the pages before it.
        let spares = f.chain.range(f.tail_seq + 1..).count();
        let used_pages = (f.chain.len() - spares) as u64;
        if used_pages >= self.policy.compact_min_pages as u64
            && f.live_log_bytes * 100
                < self.policy.compact_live_percent * used_pages * (PAGE - LOG_HEADER)
        {
            self.compact(f, scratch)?;
            stats.compactions += 1;
        }
        Ok(())
    }

    /// Unlink and free the `dead` chain pages, `(sequence number, page)` sorted, all before
    /// the tail page, in one transaction.
    fn unlink(&self, f: &mut FileState, dead: &[(u64, u64)]) -> Result<(), DatalogError> {
        let is_dead: HashSet<u64> = dead.iter().map(|&(_, p)| p).collect();
        // Each run of dead pages: the kept page before it (or the inode's head) now links to
        // the kept page after it.
        let mut links: Vec<(Option<u64>, u64)> = Vec::new();
        for &(seq, _) in dead {
            let before = f
                .chain
                .range(..seq)
                .rev()
                .map(|(_, &p)| p)
                .find(|p| !is_dead.contains(p));
            let after = f
                .chain
                .range(seq + 1..)
                .map(|(_, &p)| p)
                .find(|p| !is_dead.contains(p))
                .expect("the tail page follows and is kept");
            if links.last() != Some(&(before, after)) {
                links.push((before, after));
            }
        }
        let inode = f.inode;
        self.heap.transaction(|tx| {
            for &(before, after) in &links {
                match before {
                    None => tx.write_value(inode + 8, &after)?,
                    Some(page) => tx.write_value(page, &after)?,
                }
            }
            for &(_, p) in dead {
                tx.free(PPtr::<u8>::new(p))?;
            }
            Ok::<(), TxError>(())
        })?;
        for &(seq, p) in dead {
            f.chain.remove(&seq);
            f.seq_of.remove(&p);
            f.log.remove(&p);
        }
        Ok(())
    }

    /// Write the file's live state as a new log and swap it in (one transaction that also frees
    /// the old log's pages), then rebuild the index from it.
    fn compact(&self, f: &mut FileState, scratch: &mut Vec<u8>) -> Result<(), DatalogError> {
        let pool = self.heap.pool();
        let size = f.size;
        let mut page_numbers: Vec<u64> = f.pages.keys().copied().collect();
        page_numbers.sort_unstable();
        let mut entries: Vec<(Entry, Vec<u8>)> = Vec::new();
        let mut i = 0;
        while i < page_numbers.len() {
            // A run of pages whose bases are consecutive pages of one block.
            let first = page_numbers[i];
            let mut j = i + 1;
            if let Some(b) = f.pages[&first].base {
                while j < page_numbers.len() && j - i < MAX_EXTENT_PAGES as usize {
                    let p = page_numbers[j];
                    let next = f.pages[&p].base;
                    if p == first + (j - i) as u64
                        && next.is_some_and(|n| {
                            n.block == b.block && n.block_page == b.block_page + (j - i) as u64
                        })
                    {
                        j += 1;
                    } else {
                        break;
                    }
                }
                entries.push((
                    Entry::Extent {
                        file_page: first,
                        pages: (j - i) as u64,
                        block: b.block,
                        block_page: b.block_page,
                        size_after: size,
                    },
                    Vec::new(),
                ));
            }
            for &p in &page_numbers[i..j] {
                for e in &f.pages[&p].embeds {
                    let payload = embed_payload(pool, f, e, scratch)?;
                    entries.push((
                        Entry::Embed {
                            file_page: p,
                            page_off: e.page_off,
                            len: e.len,
                            size_after: size,
                        },
                        payload.to_vec(),
                    ));
                }
            }
            i = j;
        }
        entries.push((Entry::SetSize { size_after: size }, Vec::new()));

        // Lay the entries out on fresh pages.
        let mut pages: Vec<Vec<u8>> = vec![vec![0u8; PAGE as usize]];
        let mut pos = LOG_HEADER;
        let mut offsets = Vec::with_capacity(entries.len());
        for (entry, payload) in &entries {
            let bytes = entry.bytes();
            if pos + bytes > PAGE {
                if PAGE - pos >= ENTRY_HEADER {
                    let last = pages.last_mut().expect("a page");
                    last[pos as usize..pos as usize + 8].copy_from_slice(&END_MARK.to_le_bytes());
                }
                pages.push(vec![0u8; PAGE as usize]);
                pos = LOG_HEADER;
            }
            entry.encode(f.generation, payload, scratch);
            let last = pages.last_mut().expect("a page");
            last[pos as usize..(pos + bytes) as usize].copy_from_slice(scratch);
            offsets.push((pages.len() - 1, pos));
            pos += bytes;
        }
        let old_chain: Vec<u64> = f.chain.values().copied().collect();
        let inode = f.inode;
        let new_chain = self.heap.transaction(|tx| {
            let chain: Vec<u64> = (0..pages.len())
                .map(|_| tx.alloc(PAGE).map(|p| p.offset()))
                .collect::<Result<_, _>>()?;
            for (k, page) in pages.iter_mut().enumerate() {
                let next = chain.get(k + 1).copied().unwrap_or(0);
                page[0..8].copy_from_slice(&next.to_le_bytes());
                tx.write(chain[k], page)?;
            }
            let tail = chain[pages.len() - 1] + pos;
            tx.write_value(inode + 8, &chain[0])?;
            tx.write_value(inode, &tail)?;
            for &p in &old_chain {
                tx.free(PPtr::<u8>::new(p))?;
            }
            Ok::<Vec<u64>, TxError>(chain)
        })?;
        let tail = new_chain[pages.len() - 1] + pos;
        let rebuilt = replay(
            self.heap,
            f.name.clone(),
            f.generation,
            inode,
            new_chain[0],
            tail,
        )?;
        debug_assert_eq!(rebuilt.size, f.size);
        debug_assert_eq!(rebuilt.blocks, f.blocks);
        *f = rebuilt;
        match &f.damage {
            Some((entry, reason)) => Err(f.corrupt(*entry, reason.clone())),
            None => Ok(()),
        }
    }

    /// Compact the file's log now, whatever its live share (cleaning after each operation
    /// compacts only a log with little live in it).
    pub fn compact_file(&self, id: FileId) -> Result<(), DatalogError> {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let f = file(&mut inner.slots, id)?;
        self.compact(f, &mut inner.scratch)?;
        inner.cleaning.compactions += 1;
        Ok(())
    }

    /// What log cleaning and folding have done since the store was opened.
    pub fn cleaning_stats(&self) -> CleaningStats {
        self.lock().cleaning
    }

    /// Every block the store owns (inode table, log pages, live data blocks), sorted: for
    /// heap-walk checks.
    pub fn blocks(&self) -> Vec<u64> {
        let inner = self.lock();
        let mut out = vec![self.table];
        for f in inner.slots.iter().flatten() {
            out.extend(f.chain.values());
            out.extend(f.blocks.keys());
        }
        out.sort_unstable();
        out
    }
}

fn check_name(name: &str) -> Result<(), DatalogError> {
    let bad = |reason| {
        Err(DatalogError::InvalidName {
            name: name.into(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME {
        return bad("it is longer than 96 bytes");
    }
    Ok(())
}

/// The live, undamaged file behind `id`.
fn file(slots: &mut [Option<FileState>], id: FileId) -> Result<&mut FileState, DatalogError> {
    let f = slots
        .get_mut(id.slot as usize)
        .and_then(Option::as_mut)
        .filter(|f| f.generation == id.generation)
        .ok_or(DatalogError::StaleHandle)?;
    if let Some((entry, reason)) = &f.damage {
        return Err(f.corrupt(*entry, reason.clone()));
    }
    Ok(f)
}

/// The blocks that lose their last live page when `replaced` pages are dropped or replaced.
fn dying_blocks(f: &FileState, replaced: &[u64]) -> Vec<u64> {
    let mut lost: HashMap<u64, u64> = HashMap::new();
    for p in replaced {
        if let Some(b) = f.pages.get(p).and_then(|s| s.base) {
            *lost.entry(b.block).or_default() += 1;
        }
    }
    lost.into_iter()
        .filter(|(b, n)| f.blocks[b] == *n)
        .map(|(b, _)| b)
        .collect()
}

/// Where entries of `sizes` go after the tail.
fn place(f: &FileState, sizes: &[u64]) -> Placement {
    let mut seq = f.tail_seq;
    let mut page = f.tail_page();
    let mut spares = f.chain.range(f.tail_seq + 1..);
    let mut pos = f.tail;
    let mut missing = 0;
    let mut out = Placement {
        offsets: Vec::with_capacity(sizes.len()),
        end_marks: Vec::new(),
        tail: 0,
        tail_seq: 0,
        missing: 0,
    };
    for &bytes in sizes {
        if pos + bytes > page + PAGE {
            if page + PAGE - pos >= ENTRY_HEADER && missing == 0 {
                out.end_marks.push(pos);
            }
            match spares.next() {
                Some((&s, &next)) if missing == 0 => {
                    seq = s;
                    page = next;
                }
                _ => {
                    missing += 1;
                    // A stand-in: the placement is made again once the page exists.
                    page = 0;
                }
            }
            pos = page + LOG_HEADER;
        }
        out.offsets.push((pos, page));
        pos += bytes;
    }
    out.tail = pos;
    out.tail_seq = seq;
    out.missing = missing;
    out
}

/// The payload of an embedded entry, its checksum checked.
fn embed_payload<'s, B: Backend>(
    pool: &Pool<B>,
    f: &FileState,
    e: &EmbedRef,
    scratch: &'s mut Vec<u8>,
) -> Result<&'s [u8], DatalogError> {
    let total = ENTRY_HEADER + e.len.next_multiple_of(8);
    scratch.resize(total as usize, 0);
    pool.read_bytes(e.entry, scratch)?;
    let stored = u32::from_le_bytes(scratch[0..4].try_into().expect("4 bytes"));
    if stored != checksum(f.generation, &scratch[4..]) {
        return Err(f.corrupt(e.entry, "embedded entry fails its checksum".into()));
    }
    Ok(&scratch[ENTRY_HEADER as usize..(ENTRY_HEADER + e.len) as usize])
}

/// Page `p` with its embedded entries merged in (zeros where nothing was written).
fn materialize<B: Backend>(
    pool: &Pool<B>,
    f: &FileState,
    p: u64,
    scratch: &mut Vec<u8>,
) -> Result<Vec<u8>, DatalogError> {
    let mut page = vec![0u8; PAGE as usize];
    if let Some(state) = f.pages.get(&p) {
        if let Some(b) = state.base {
            pool.read_bytes(b.block + b.block_page * PAGE, &mut page)?;
        }
        for e in &state.embeds {
            let payload = embed_payload(pool, f, e, scratch)?;
            page[e.page_off as usize..(e.page_off + e.len) as usize].copy_from_slice(payload);
        }
    }
    Ok(page)
}

/// Rebuild a file's DRAM state by scanning its log from `head` to `tail`. A bad chain or a bad
/// committed entry leaves the file damaged (returned as such); only an unreadable pool fails.
fn replay<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
    name: String,
    generation: u64,
    inode: u64,
    head: u64,
    tail: u64,
) -> Result<FileState, DatalogError> {
    let mut f = FileState::new(name, generation, inode, head);
    f.tail = tail;
    if let Err((entry, reason)) = scan(heap, &mut f, head, tail) {
        f.damage = Some((entry, reason));
    }
    Ok(f)
}

fn scan<B: Backend, P: Deref<Target = Pool<B>>>(
    heap: &Heap<B, P>,
    f: &mut FileState,
    head: u64,
    tail: u64,
) -> Result<(), (u64, String)> {
    let pool = heap.pool();
    let is_log_page = |p: u64| heap.block_size(p).is_some_and(|s| s >= PAGE);
    if !is_log_page(head) {
        return Err((head, format!("log head {head:#x} is not an allocated page")));
    }
    let max_pages = pool.size() / PAGE;
    let mut page = head;
    let mut pos = head + LOG_HEADER;
    let mut buf = vec![0u8; PAGE as usize];
    let read = |at: u64, buf: &mut [u8]| {
        pool.read_bytes(at, buf)
            .map_err(|e| (at, format!("unreadable: {e}")))
    };
    loop {
        if pos == tail {
            break;
        }
        let left = page + PAGE - pos;
        let at_end = left < ENTRY_HEADER || {
            read(pos, &mut buf[..8])?;
            u64::from_le_bytes(buf[..8].try_into().expect("8 bytes")) == END_MARK
        };
        if at_end {
            let mut next = [0u8; 8];
            read(page, &mut next)?;
            let next = u64::from_le_bytes(next);
            if next == 0
                || !is_log_page(next)
                || f.seq_of.contains_key(&next)
                || f.chain.len() as u64 >= max_pages
            {
                return Err((
                    page,
                    format!("the log ends (next page {next:#x}) before its tail {tail:#x}"),
                ));
            }
            f.push_page(next);
            page = next;
            pos = page + LOG_HEADER;
            continue;
        }
        read(pos, &mut buf[..ENTRY_HEADER as usize])?;
        let mut entry =
            Entry::decode_header(&buf[..ENTRY_HEADER as usize]).map_err(|r| (pos, r))?;
        let bytes = entry.bytes();
        if bytes > left || (page <= tail && tail < page + PAGE && pos + bytes > tail) {
            return Err((pos, "the entry overlaps its page's end or the tail".into()));
        }
        read(pos, &mut buf[..bytes as usize])?;
        let stored = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        if stored != checksum(f.generation, &buf[4..bytes as usize]) {
            return Err((pos, "the entry fails its checksum".into()));
        }
        if let Entry::Extent { block, .. } = &mut entry {
            *block = u64::from_le_bytes(buf[32..40].try_into().expect("8 bytes"));
        }
        // Blocks the entry killed were freed when it committed: nothing to do with them.
        let _ = f.apply(pos, page, &entry);
        pos += bytes;
    }
    f.tail_seq = f.next_seq - 1;
    // Spare pages linked past the tail page belong to the log too.
    loop {
        let mut next = [0u8; 8];
        read(page, &mut next)?;
        let next = u64::from_le_bytes(next);
        if next == 0 {
            break;
        }
        if !is_log_page(next) || f.seq_of.contains_key(&next) || f.chain.len() as u64 >= max_pages {
            return Err((page, format!("bad spare log page {next:#x}")));
        }
        f.push_page(next);
        page = next;
    }
    // Every live base page must lie in a block the heap allocated.
    for (p, s) in &f.pages {
        if let Some(b) = s.base {
            if heap
                .block_size(b.block)
                .is_none_or(|size| size < (b.block_page + 1) * PAGE)
            {
                return Err((
                    b.entry,
                    format!(
                        "file page {p} points to {:#x}, not an allocated block",
                        b.block
                    ),
                ));
            }
        }
    }
    Ok(())
}
