//! The on-media format of a datalog store: the root, the inode table, log pages, entries and
//! data blocks. This file is the only one that knows byte offsets; the rest of the module reads
//! and writes persistent words through the typed views below (pool offsets in, pool offsets or
//! decoded values out), and builds or parses entries through [`EntryImage`] and
//! [`EntryImageMut`].
//!
//! Every view is a plain offset: making one costs nothing and checks nothing. The pool checks
//! every access it is used for.

use pmem_ordering::{Backend, Pool, PoolError};

/// Bytes of a data page and of a log page.
pub const PAGE: u64 = 4096;
/// Bytes at the start of a log page before its first entry (the next-page link, then zeros).
pub(super) const LOG_HEADER: u64 = 64;
/// Bytes of a log page that hold entries.
pub(super) const LOG_PAGE_CAPACITY: u64 = PAGE - LOG_HEADER;
/// Bytes of an entry header.
pub(super) const ENTRY_HEADER: u64 = 32;
/// Bytes of an extent entry's fixed part (header + block offset); its pages' CRC-32Cs follow.
pub(super) const EXTENT_ENTRY_FIXED: u64 = ENTRY_HEADER + 8;
/// The largest inline payload of an embed entry: one entry per empty log page.
pub const MAX_EMBED: u64 = PAGE - LOG_HEADER - ENTRY_HEADER;
/// The end-of-page mark: the rest of its log page holds no entry.
pub(super) const END_MARK: u64 = u64::from_le_bytes(*b"DLOG-END");
/// The end-of-page mark as stored.
pub(super) const END_MARK_BYTES: [u8; 8] = END_MARK.to_le_bytes();
/// Bytes of the root.
pub const ROOT_BYTES: u64 = 64;
/// The first word of a store's root (format 2: extents carry their pages' CRC-32Cs).
pub(super) const ROOT_MAGIC: u64 = crate::kind::StructureKind::Datalog.magic();
/// The first word of a format 1 root: extents without page checksums, refused at open.
pub(super) const FORMAT_1_MAGIC: u64 = u64::from_le_bytes(*b"DATALOG1");
/// The on-pool format this build writes and reads; its roots start with [`ROOT_MAGIC`].
pub(super) const FORMAT_VERSION: u64 = 2;
/// Bytes of an inode.
const INODE_BYTES: u64 = 128;
/// Offset in an inode of its name's bytes (after the name's length word).
const INODE_NAME: u64 = 32;
/// The longest file name, in bytes.
pub const MAX_NAME: usize = (INODE_BYTES - INODE_NAME) as usize;

/// Words of the root that record the store's [`super::Policy`] (its encoding is `policy.rs`'s).
pub(super) const POLICY_WORDS: usize = 4;

/// The root, at an offset the store's creator chose: magic, the inode table, its inodes, the
/// next generation, then the [`POLICY_WORDS`] words of the policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Root {
    at: u64,
}

impl Root {
    const MAGIC: u64 = 0;
    const TABLE: u64 = 8;
    const MAX_FILES: u64 = 16;
    const NEXT_GENERATION: u64 = 24;
    const POLICY: u64 = 32;

    #[inline]
    pub(super) const fn at(offset: u64) -> Root {
        Root { at: offset }
    }

    /// The root's bytes for a new store: magic, the inode table, its inodes, the next
    /// generation, the policy's words.
    #[inline]
    pub(super) fn image(
        table: InodeTable,
        max_files: u64,
        next_generation: u64,
        policy: [u64; POLICY_WORDS],
    ) -> [u8; ROOT_BYTES as usize] {
        let mut r = [0u8; ROOT_BYTES as usize];
        put_u64(&mut r, Root::MAGIC, ROOT_MAGIC);
        put_u64(&mut r, Root::TABLE, table.at);
        put_u64(&mut r, Root::MAX_FILES, max_files);
        put_u64(&mut r, Root::NEXT_GENERATION, next_generation);
        for (i, word) in policy.into_iter().enumerate() {
            put_u64(&mut r, Root::POLICY + 8 * i as u64, word);
        }
        r
    }

    /// The word that gives the next file its generation (bumped by every create).
    #[inline]
    pub(super) const fn next_generation_word(self) -> u64 {
        self.at + Root::NEXT_GENERATION
    }

    #[inline]
    pub(super) fn read_magic<B: Backend>(self, pool: &Pool<B>) -> Result<u64, PoolError> {
        pool.read::<u64>(self.at + Root::MAGIC)
    }

    #[inline]
    pub(super) fn read_table<B: Backend>(self, pool: &Pool<B>) -> Result<InodeTable, PoolError> {
        pool.read::<u64>(self.at + Root::TABLE).map(InodeTable::at)
    }

    #[inline]
    pub(super) fn read_max_files<B: Backend>(self, pool: &Pool<B>) -> Result<u64, PoolError> {
        pool.read::<u64>(self.at + Root::MAX_FILES)
    }

    #[inline]
    pub(super) fn read_next_generation<B: Backend>(self, pool: &Pool<B>) -> Result<u64, PoolError> {
        pool.read::<u64>(self.at + Root::NEXT_GENERATION)
    }

    /// The words recording the store's policy.
    #[inline]
    pub(super) fn read_policy<B: Backend>(
        self,
        pool: &Pool<B>,
    ) -> Result<[u64; POLICY_WORDS], PoolError> {
        pool.read::<[u64; POLICY_WORDS]>(self.at + Root::POLICY)
    }
}

/// The inode table: one heap block of inodes, slot `i` at `i * 128` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct InodeTable {
    at: u64,
}

impl InodeTable {
    #[inline]
    pub(super) const fn at(offset: u64) -> InodeTable {
        InodeTable { at: offset }
    }

    /// The table's pool offset (the heap block holding it).
    #[inline]
    pub(super) const fn offset(self) -> u64 {
        self.at
    }

    /// Bytes of a table of `max_files` inodes.
    #[inline]
    pub(super) const fn bytes(max_files: u64) -> u64 {
        max_files * INODE_BYTES
    }

    #[inline]
    pub(super) const fn inode(self, slot: u64) -> Inode {
        Inode {
            at: self.at + slot * INODE_BYTES,
        }
    }
}

/// One inode: the log's tail (the commit word), the log's head, the generation (0: the slot is
/// free), the name's length, the name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Inode {
    at: u64,
}

impl Inode {
    const TAIL: u64 = 0;
    const HEAD: u64 = 8;
    const GENERATION: u64 = 16;
    const NAME_LEN: u64 = 24;

    /// The inode's first byte: where a whole [`Inode::image`] goes.
    #[inline]
    pub(super) const fn offset(self) -> u64 {
        self.at
    }

    /// The tail word: storing it commits every entry before it.
    #[inline]
    pub(super) const fn tail_word(self) -> u64 {
        self.at + Inode::TAIL
    }

    /// The word holding the first log page.
    #[inline]
    pub(super) const fn head_word(self) -> u64 {
        self.at + Inode::HEAD
    }

    /// The word holding the generation: zero frees the inode.
    #[inline]
    pub(super) const fn generation_word(self) -> u64 {
        self.at + Inode::GENERATION
    }

    /// Where a [`NameImage`] goes: the name's length word, then its bytes.
    #[inline]
    pub(super) const fn name_field(self) -> u64 {
        self.at + Inode::NAME_LEN
    }

    /// The inode's bytes for a new file (`name` at most [`MAX_NAME`] bytes).
    #[inline]
    pub(super) fn image(
        tail: u64,
        head: u64,
        generation: u64,
        name: &str,
    ) -> [u8; INODE_BYTES as usize] {
        let mut raw = [0u8; INODE_BYTES as usize];
        put_u64(&mut raw, Inode::TAIL, tail);
        put_u64(&mut raw, Inode::HEAD, head);
        put_u64(&mut raw, Inode::GENERATION, generation);
        put_u64(&mut raw, Inode::NAME_LEN, name.len() as u64);
        raw[INODE_NAME as usize..][..name.len()].copy_from_slice(name.as_bytes());
        raw
    }

    /// The whole inode, read in one copy.
    #[inline]
    pub(super) fn read<B: Backend>(self, pool: &Pool<B>) -> Result<InodeRecord, PoolError> {
        let mut raw = [0u8; INODE_BYTES as usize];
        pool.read_bytes(self.at, &mut raw)?;
        Ok(InodeRecord { raw })
    }
}

/// An inode as read from the pool, not yet validated.
pub(super) struct InodeRecord {
    raw: [u8; INODE_BYTES as usize],
}

impl InodeRecord {
    #[inline]
    pub(super) fn tail(&self) -> u64 {
        get_u64(&self.raw, Inode::TAIL)
    }

    #[inline]
    pub(super) fn head(&self) -> u64 {
        get_u64(&self.raw, Inode::HEAD)
    }

    #[inline]
    pub(super) fn generation(&self) -> u64 {
        get_u64(&self.raw, Inode::GENERATION)
    }

    /// The stored name, if its length fits the inode and its bytes are UTF-8.
    #[inline]
    pub(super) fn name(&self) -> Option<&str> {
        let len = get_u64(&self.raw, Inode::NAME_LEN);
        (len <= MAX_NAME as u64)
            .then(|| std::str::from_utf8(&self.raw[INODE_NAME as usize..][..len as usize]).ok())
            .flatten()
    }
}

/// A name's length word and bytes, as [`Inode::name_field`] holds them.
pub(super) struct NameImage {
    raw: [u8; 8 + MAX_NAME],
    len: usize,
}

impl NameImage {
    /// The image of `name` (at most [`MAX_NAME`] bytes).
    #[inline]
    pub(super) fn new(name: &str) -> NameImage {
        let mut raw = [0u8; 8 + MAX_NAME];
        put_u64(&mut raw, 0, name.len() as u64);
        raw[8..8 + name.len()].copy_from_slice(name.as_bytes());
        NameImage {
            raw,
            len: name.len(),
        }
    }

    /// The bytes to write: the length word and the name, nothing past it.
    #[inline]
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.raw[..8 + self.len]
    }
}

/// A 4 KB log page: the next page's offset (0: none), zeros to [`LOG_HEADER`], then entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LogPage {
    at: u64,
}

impl LogPage {
    /// The header of a page with no next page.
    pub(super) const EMPTY_HEADER: [u8; LOG_HEADER as usize] = [0u8; LOG_HEADER as usize];

    #[inline]
    pub(super) const fn at(offset: u64) -> LogPage {
        LogPage { at: offset }
    }

    /// The word linking to the next page.
    #[inline]
    pub(super) const fn next_word(self) -> u64 {
        self.at
    }

    /// Where the page's first entry goes.
    #[inline]
    pub(super) const fn first_entry(self) -> u64 {
        self.at + LOG_HEADER
    }

    /// The pool offset `fill` bytes into the page.
    #[inline]
    pub(super) const fn offset_of(self, fill: u64) -> u64 {
        self.at + fill
    }

    /// Bytes left in the page from pool offset `pos` on.
    #[inline]
    pub(super) const fn room(self, pos: u64) -> u64 {
        self.at + PAGE - pos
    }

    /// Whether `bytes` from pool offset `pos` on stay inside the page.
    #[inline]
    pub(super) const fn fits(self, pos: u64, bytes: u64) -> bool {
        pos + bytes <= self.at + PAGE
    }

    /// Whether the log tail `tail` (the end of the last committed entry) lies in the page:
    /// from its first entry's place through its very end, both included. A tail is never a
    /// page's start, so a tail at the end of one page, where an entry filled it exactly, is not
    /// taken for the start of another page that happens to follow it in the pool.
    #[inline]
    pub(super) const fn holds_tail(self, tail: u64) -> bool {
        self.first_entry() <= tail && tail <= self.at + PAGE
    }

    /// Whether a page whose entries stop with `room` bytes left gets an end mark there. With
    /// less than a header left no entry can start, so readers skip to the next page unmarked.
    #[inline]
    pub(super) const fn takes_end_mark(room: u64) -> bool {
        room >= ENTRY_HEADER
    }
}

/// A log page built in DRAM (compaction writes a whole new log this way).
pub(super) struct LogPageImage {
    bytes: Vec<u8>,
    fill: u64,
}

impl LogPageImage {
    /// An empty page: no next page, no entry.
    #[inline]
    pub(super) fn new() -> LogPageImage {
        LogPageImage {
            bytes: vec![0u8; PAGE as usize],
            fill: LOG_HEADER,
        }
    }

    /// Bytes used, header included: the tail's place in the page if it is the last.
    #[inline]
    pub(super) fn fill(&self) -> u64 {
        self.fill
    }

    /// Whether an entry of `bytes` fits after the entries already in.
    #[inline]
    pub(super) fn fits(&self, bytes: u64) -> bool {
        self.fill + bytes <= PAGE
    }

    /// Append an encoded entry (which must fit).
    #[inline]
    pub(super) fn push(&mut self, entry: &[u8]) {
        let at = self.fill as usize;
        self.bytes[at..at + entry.len()].copy_from_slice(entry);
        self.fill += entry.len() as u64;
    }

    /// End the page's entries: an end mark, if there is room for one.
    #[inline]
    pub(super) fn close(&mut self) {
        if LogPage::takes_end_mark(PAGE - self.fill) {
            put_u64(&mut self.bytes, self.fill, END_MARK);
        }
    }

    #[inline]
    pub(super) fn set_next(&mut self, next: u64) {
        put_u64(&mut self.bytes, 0, next);
    }

    #[inline]
    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Pool offset of page `block_page` of the data block at `block`.
#[inline]
pub(super) const fn data_page(block: u64, block_page: u64) -> u64 {
    block + block_page * PAGE
}

/// Bytes of a data block of `pages` pages.
#[inline]
pub(super) const fn data_block_bytes(pages: u64) -> u64 {
    pages * PAGE
}

/// Bytes of an extent entry of `pages` pages: the fixed part, then one CRC-32C per page
/// (padded to 8).
#[inline]
pub(super) const fn extent_entry_bytes(pages: u64) -> u64 {
    EXTENT_ENTRY_FIXED + (4 * pages).next_multiple_of(8)
}

/// Bytes of an embed entry carrying `len` inline bytes (padded to 8).
#[inline]
pub(super) const fn embed_entry_bytes(len: u64) -> u64 {
    ENTRY_HEADER + len.next_multiple_of(8)
}

/// An entry header's fields as stored, before any check (see the `entry` module for what they
/// mean per kind): a CRC-32C, the kind, a 16-bit count, the file size after the entry, the
/// file page, a 32-bit word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct HeaderFields {
    pub(super) kind: u8,
    /// Stored in 16 bits.
    pub(super) count: u64,
    pub(super) size_after: u64,
    pub(super) file_page: u64,
    /// Stored in 32 bits.
    pub(super) word: u64,
}

/// Where the fields of an entry sit: `[0, 4)` checksum of everything after it, `4` kind, `5`
/// zero, `[6, 8)` count, `[8, 16)` size after, `[16, 24)` file page, `[24, 28)` word, `[28,
/// 32)` zero, then the body (an extent's block offset, an embed's padded payload).
mod field {
    pub(super) const CHECKSUM: usize = 0;
    pub(super) const CHECKSUMMED: usize = 4;
    pub(super) const KIND: usize = 4;
    pub(super) const COUNT: usize = 6;
    pub(super) const SIZE_AFTER: usize = 8;
    pub(super) const FILE_PAGE: usize = 16;
    pub(super) const WORD: usize = 24;
    pub(super) const BODY: usize = super::ENTRY_HEADER as usize;
    pub(super) const PAGE_CRCS: usize = super::EXTENT_ENTRY_FIXED as usize;
}

/// An encoded entry (header, then body) in a buffer: a header alone, or the whole entry.
#[derive(Clone, Copy)]
pub(super) struct EntryImage<'a> {
    bytes: &'a [u8],
}

impl<'a> EntryImage<'a> {
    #[inline]
    pub(super) fn new(bytes: &'a [u8]) -> EntryImage<'a> {
        EntryImage { bytes }
    }

    /// The header's fields (the buffer holds at least the header).
    #[inline]
    pub(super) fn header(self) -> HeaderFields {
        let h = self.bytes;
        HeaderFields {
            kind: h[field::KIND],
            count: u16::from_le_bytes([h[field::COUNT], h[field::COUNT + 1]]) as u64,
            size_after: get_u64(h, field::SIZE_AFTER as u64),
            file_page: get_u64(h, field::FILE_PAGE as u64),
            word: u32::from_le_bytes(h[field::WORD..field::WORD + 4].try_into().expect("4 bytes"))
                as u64,
        }
    }

    #[inline]
    pub(super) fn stored_checksum(self) -> u32 {
        u32::from_le_bytes(
            self.bytes[field::CHECKSUM..field::CHECKSUM + 4]
                .try_into()
                .expect("4 bytes"),
        )
    }

    /// The bytes the checksum covers: all of the entry after the checksum.
    #[inline]
    pub(super) fn checksummed(self) -> &'a [u8] {
        &self.bytes[field::CHECKSUMMED..]
    }

    /// An extent's data block (the buffer holds the whole entry).
    #[inline]
    pub(super) fn extent_block(self) -> u64 {
        get_u64(self.bytes, field::BODY as u64)
    }

    /// An extent's `pages` page CRC-32Cs, in page order (the buffer holds the whole entry).
    #[inline]
    pub(super) fn extent_page_crcs(self, pages: u64) -> impl Iterator<Item = u32> + 'a {
        self.bytes[field::PAGE_CRCS..field::PAGE_CRCS + 4 * pages as usize]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
    }

    /// An embed's `len` inline bytes (the buffer holds the whole entry).
    #[inline]
    pub(super) fn embed_payload(self, len: u64) -> &'a [u8] {
        &self.bytes[field::BODY..field::BODY + len as usize]
    }
}

/// An entry being encoded in a buffer of its full size, zeroed.
pub(super) struct EntryImageMut<'a> {
    bytes: &'a mut [u8],
}

impl<'a> EntryImageMut<'a> {
    #[inline]
    pub(super) fn new(bytes: &'a mut [u8]) -> EntryImageMut<'a> {
        EntryImageMut { bytes }
    }

    /// Store the header's fields (the count truncated to 16 bits, the word to 32).
    #[inline]
    pub(super) fn set_header(&mut self, h: HeaderFields) {
        let out = &mut *self.bytes;
        out[field::KIND] = h.kind;
        out[field::COUNT..field::COUNT + 2].copy_from_slice(&(h.count as u16).to_le_bytes());
        put_u64(out, field::SIZE_AFTER as u64, h.size_after);
        put_u64(out, field::FILE_PAGE as u64, h.file_page);
        out[field::WORD..field::WORD + 4].copy_from_slice(&(h.word as u32).to_le_bytes());
    }

    #[inline]
    pub(super) fn set_extent_block(&mut self, block: u64) {
        put_u64(self.bytes, field::BODY as u64, block);
    }

    /// Store an extent's page CRC-32Cs, one per page in page order.
    #[inline]
    pub(super) fn set_extent_page_crcs(&mut self, crcs: &[u32]) {
        for (i, crc) in crcs.iter().enumerate() {
            let at = field::PAGE_CRCS + 4 * i;
            self.bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        }
    }

    #[inline]
    pub(super) fn set_embed_payload(&mut self, payload: &[u8]) {
        self.bytes[field::BODY..field::BODY + payload.len()].copy_from_slice(payload);
    }

    /// The bytes the checksum covers (set everything else first).
    #[inline]
    pub(super) fn checksummed(&self) -> &[u8] {
        &self.bytes[field::CHECKSUMMED..]
    }

    #[inline]
    pub(super) fn set_checksum(&mut self, crc: u32) {
        self.bytes[field::CHECKSUM..field::CHECKSUM + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The little-endian word at byte `at` of `bytes`.
#[inline]
fn get_u64(bytes: &[u8], at: u64) -> u64 {
    let at = at as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

#[inline]
fn put_u64(bytes: &mut [u8], at: u64, value: u64) {
    let at = at as usize;
    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

#[cfg(test)]
mod tests;
