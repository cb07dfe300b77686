//! Datalog: a log-structured object store with copy-on-write and embedded writes, after NOVA
//! (FAST'16) and its *NOVA-datalog* variant (Optane guide (FAST'20), Sec. 5.1 and 5.1.2, Fig. 10
//! and 11), with per-entry checksums as in NOVA-Fortis (SOSP'17).
//!
//! The Optane guide (FAST'20), Sec. 5.1, measures that small random stores are what persistent
//! memory does worst (an effective write ratio of 0.25 for random 64-byte non-temporal stores on
//! Optane), and Sec. 5.1.2 shows the fix for NOVA: instead of copying a whole 4 KB page for
//! every sub-page write, append the written bytes to the file's log, where consecutive writes
//! land next to each other. The paper reports 7x (64 B) and 6.5x (256 B) lower write latency on
//! Optane. This module implements both paths behind one store so they can be compared.
//!
//! # Layout
//!
//! * A **root** of [`ROOT_BYTES`] at an offset the caller chooses: magic (`DATALOG2`: on-pool
//!   format 2; a format 1 root, `DATALOG1`, whose extents carry no page checksums, is refused at
//!   open with [`DatalogError::Corrupt`] naming both versions), the inode table's
//!   offset, its capacity, the next inode generation, and four words recording the store's
//!   [`Policy`] (written once at create, read at open).
//! * The **inode table**: `max_files` inodes of 128 bytes: the log *tail* (8 bytes, the commit
//!   word), the log *head*, the inode's *generation* (0: the slot is free), the name's length
//!   and up to [`MAX_NAME`] bytes of name. The table is the namespace: `create`, `rename` and
//!   `remove` change it inside undo-log transactions, so it is always either before or after
//!   the operation.
//! * Each file's **log**: linked 4 KB log pages, a 64-byte header holding the next page's
//!   offset, then 8-byte aligned entries. Entries of three kinds, each with a 32-byte header
//!   (CRC-32C, kind, length, the file size after the entry, the file page):
//!   * *extent*: file pages `[p, p + n)` now live in pages `[i, i + n)` of the data block `b`
//!     (the copy-on-write path: NOVA's write entry), followed by the CRC-32C of each of those
//!     `n` pages (4 bytes each, padded to 8);
//!   * *embed*: `len` bytes at offset `o` of file page `p`, carried inline after the header
//!     (NOVA-datalog's embed write entry, Optane guide (FAST'20), Fig. 10);
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
//! * **A full pool can still shrink a file.** A truncate to a smaller size allocates nothing:
//!   one set-size entry drops the pages past the end (their blocks freed in its transaction)
//!   and keeps a partial last page as it is, its bytes past the size left *stale*; the next
//!   operation that grows the file past them writes that page anew (copy-on-write, zeros past
//!   the old end), and replay marks the same page stale from the same entry. The one thing a
//!   truncate needs is log room for its entry, so every operation links the pages for its own
//!   entries *and* room for one set-size entry after them, or fails changing nothing; a
//!   truncate that finds no page to link takes that room. (Two truncates in a row that free
//!   nothing, on a pool still full, can find the room gone: the second gets `PoolFull`.)
//!   Removing a file frees everything in one transaction and allocates nothing.
//!
//! Each entry's checksum covers its header and inline bytes, seeded with the inode's generation.
//! Recovery ([`Datalog::open`]) scans each log from head to tail: what lies past the tail (a torn
//! entry) is never read; a committed entry whose checksum fails marks the file damaged, and every
//! operation on it returns [`DatalogError::CorruptEntry`] naming the file and the entry's offset.
//! Reads check embedded entries' checksums again, so bytes corrupted later are reported too.
//! The inodes themselves carry no checksum: a damaged head, tail or name is caught by the
//! entries' checksums (seeded with the generation) or the checks of the open, but an inode
//! whose generation word reads zero is a free slot, its file gone without an error; the log
//! pages it owned are then blocks no structure reaches, which `Store::verify()` reports.
//!
//! Copy-on-write data pages are checked too (NOVA-Fortis (SOSP'17) checksums file data the same
//! way): the CRC-32C of each page's bytes is computed from the DRAM copy that the non-temporal
//! stores write, recorded in the extent entry (under the entry's own checksum), kept in the DRAM
//! index, and checked against the page, read whole, whenever a read or a partial write uses it.
//! A mismatch is [`DatalogError::CorruptData`] naming the file and the page's offset in it; the
//! damaged bytes are not returned, and the rest of the file stays readable. Compaction carries
//! the recorded CRCs into the new log rather than recomputing them from the pages, so damage
//! is never blessed. A torn page needs no check of its own: its extent is committed after it.
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
//! A page's embedded entries are merged over its base page on every read (the read-path
//! overhead of Optane guide (FAST'20), Fig. 11). A page that has collected
//! [`Policy::fold_after_entries`] entries or [`Policy::fold_after_bytes`] inline bytes is
//! *folded*: its next write goes copy-on-write, which writes the merged page and kills all its
//! embedded entries.
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
//! beyond that the transaction fails with
//! [`TxError::LogFull`](pmem_undo_log::TxError::LogFull) and changes nothing (a failed cleaning
//! is counted in [`CleaningStats::failures`]; a file too large to remove at once can be
//! truncated in steps first).
//!
//! # Concurrency
//!
//! One DRAM lock (a `std::sync::Mutex`, never in the pool) serialises the store's operations:
//! the store is `Sync` and can be shared, but operations do not run in parallel.
//!
//! # Where things are
//!
//! * `mod.rs`: the [`Datalog`] type, its handles and statistics, and these docs.
//! * `layout.rs`: the on-media format, the only file that knows byte offsets: typed views of
//!   the root, the inode table and its inodes, log pages (and log pages built in DRAM), entry
//!   headers and data block pages.
//! * `entry.rs`: the entry kinds, their encoding and decoding, checksums and the checks that
//!   refuse a torn or corrupted entry.
//! * `index.rs`: one file's DRAM index (page -> base page and embeds, live entries per log
//!   page, live pages per data block) and how each entry changes it.
//! * `namespace.rs`: creating the store; creating, finding, renaming and removing files.
//! * `file.rs`: appending an operation's entries past a log's tail, linking log pages ahead of
//!   them, and the tail commit (with the transaction around it for copy-on-write): where a
//!   write is made crash-safe.
//! * `write.rs`: cutting writes into page pieces, choosing copy-on-write or embedding per
//!   piece, folding; truncate.
//! * `read.rs`: reads, merging embedded bytes over base pages, checksums checked.
//! * `clean.rs`: log cleaning: freeing dead log pages and compacting logs.
//! * `recovery.rs`: [`Datalog::open`]: reading the root and inodes, replaying logs, finding
//!   torn and corrupted entries.
//! * `verify.rs`: [`Datalog::verify`]: a read-only walk of everything, every violation listed.
//! * `policy.rs`, `error.rs`: [`DatalogConfig`] and its [`Policy`] (and their encoding in the
//!   root), and [`DatalogError`].
//!
//! # Example
//!
//! ```
//! use pmem_ordering::{Pool, PoolOptions};
//! use pmem_structures::raw::datalog::{Datalog, DatalogConfig, Policy, WriteMode};
//! use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
//!
//! let pool = Pool::anonymous("datalog", 8 << 20, &PoolOptions::new())?;
//! let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
//! let root = heap.pool().root_offset();
//! let config = DatalogConfig { max_files: 16, policy: Policy::default() };
//! let store = Datalog::create(&heap, root, config)?;
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

mod clean;
mod entry;
mod error;
mod file;
mod index;
mod layout;
mod namespace;
mod policy;
mod read;
mod recovery;
mod verify;
mod write;

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

pub use error::DatalogError;
pub use layout::{MAX_EMBED, MAX_NAME, PAGE, ROOT_BYTES};
pub use policy::{DatalogConfig, Policy, WriteMode};

use index::FileState;
use layout::InodeTable;
use namespace::file;

/// The most pages of one data block.
pub const MAX_EXTENT_PAGES: u64 = 64;
/// The largest file size.
pub const MAX_FILE_SIZE: u64 = 1 << 40;
/// The most files a store may be created for.
pub const MAX_FILES: u64 = 1 << 16;

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

/// The DRAM side of the store.
struct Inner {
    /// Per inode slot, its file's index (`None`: the slot is free).
    slots: Vec<Option<FileState>>,
    /// Name -> slot.
    names: HashMap<String, u32>,
    next_generation: u64,
    /// A buffer for encoding and reading entries, kept between operations.
    scratch: Vec<u8>,
    /// A buffer for a data page read whole to check its CRC when only part of it is asked for.
    page: Vec<u8>,
    cleaning: CleaningStats,
}

impl Inner {
    /// No file yet in `max_files` slots.
    fn new(max_files: u64, next_generation: u64) -> Inner {
        Inner {
            slots: (0..max_files).map(|_| None).collect(),
            names: HashMap::new(),
            next_generation,
            scratch: Vec::new(),
            page: Vec::new(),
            cleaning: CleaningStats::default(),
        }
    }
}

/// A datalog store in a heap.
///
/// The handle holds its own clone of the heap (a [`Heap`] is a shared handle), so it is
/// `Send + Sync + 'static` and can live beside the heap or go to another thread.
pub struct Datalog<B: Backend> {
    heap: Heap<B>,
    root: u64,
    table: InodeTable,
    max_files: u64,
    policy: Policy,
    inner: Mutex<Inner>,
}

impl<B: Backend> Datalog<B> {
    /// The heap the store lives in (through whatever holder it was given: a borrow, an
    /// `Arc`, ...).
    pub fn heap(&self) -> &Heap<B> {
        &self.heap
    }

    /// The store's policy, as its root records it.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The store's configuration, as its root records it.
    pub fn config(&self) -> DatalogConfig {
        DatalogConfig {
            max_files: self.max_files,
            policy: self.policy,
        }
    }

    /// The root offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The DRAM state, locked for one operation (a lock poisoned by a panicking operation is
    /// taken over rather than failing every later call).
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
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

    /// What log cleaning and folding have done since the store was opened.
    pub fn cleaning_stats(&self) -> CleaningStats {
        self.lock().cleaning
    }

    /// Every block the store owns (inode table, log pages, live data blocks), sorted: for
    /// heap-walk checks.
    pub fn blocks(&self) -> Vec<u64> {
        let inner = self.lock();
        let mut out = vec![self.table.offset()];
        for f in inner.slots.iter().flatten() {
            out.extend(f.chain.values());
            out.extend(f.blocks.keys());
        }
        out.sort_unstable();
        out
    }
}
