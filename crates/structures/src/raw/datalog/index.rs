//! The DRAM index of one file, rebuilt at open by replaying its log: file page -> (base page,
//! embedded entries over it), the live entries of each log page and the live pages of each
//! data block, so that writes know what they kill and cleaning knows what it may free.
//!
//! An entry dies when everything it wrote is replaced (a later extent over its page, a later
//! embed covering all its bytes, a truncate); a data block dies with its last live page.
//! Set-size entries stay live until compaction: dropping one could let an older entry reappear
//! at replay.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::entry::Entry;
use super::layout::{Inode, LogPage, PAGE};
use super::{DatalogError, FileStats};

/// The hasher of the DRAM index, whose keys are `u64` pool offsets and page numbers made by
/// the store itself: one multiplication with the high half folded into the low bits (which
/// pick the bucket), so page-aligned offsets still spread. The standard SipHash resists keys
/// chosen by an attacker, which these are not, at several times the cost per lookup.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct OffsetHasher(u64);

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
pub(super) type IndexMap<K, V> = HashMap<K, V, BuildHasherDefault<OffsetHasher>>;

/// A file page's base page in a data block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BaseRef {
    pub(super) block: u64,
    pub(super) block_page: u64,
    /// The extent entry that put it there.
    pub(super) entry: u64,
    /// The page's CRC-32C, as that entry records it.
    pub(super) crc: u32,
}

/// An embedded entry over a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct EmbedRef {
    /// Pool offset of the entry.
    pub(super) entry: u64,
    pub(super) page_off: u64,
    pub(super) len: u64,
}

/// What one file page is made of.
#[derive(Clone, Debug, Default)]
pub(super) struct PageState {
    pub(super) base: Option<BaseRef>,
    /// In log order: a later one wins where two overlap.
    pub(super) embeds: Vec<EmbedRef>,
    pub(super) embed_bytes: u64,
}

/// A live entry: its log page, its size, and how many file pages still use it.
#[derive(Clone, Copy, Debug)]
struct EntryInfo {
    page: u64,
    bytes: u64,
    refs: u64,
}

/// The live entries of one log page.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct LogPageInfo {
    pub(super) live_entries: u64,
    live_bytes: u64,
}

/// One file's DRAM state.
#[derive(Debug)]
pub(super) struct FileState {
    pub(super) name: String,
    pub(super) generation: u64,
    pub(super) inode: Inode,
    pub(super) size: u64,
    pub(super) pages: IndexMap<u64, PageState>,
    /// Log pages in order, spares past the tail page included.
    /// Sequence number -> page: a removal from the middle costs a logarithm, not a shift.
    pub(super) chain: BTreeMap<u64, u64>,
    /// Page -> its sequence number in `chain`.
    pub(super) seq_of: IndexMap<u64, u64>,
    /// The next sequence number to give a page appended to the chain.
    pub(super) next_seq: u64,
    /// Sequence number of the page holding the tail.
    pub(super) tail_seq: u64,
    pub(super) tail: u64,
    /// Live entries by pool offset.
    entries: IndexMap<u64, EntryInfo>,
    /// Live entries per log page.
    pub(super) log: IndexMap<u64, LogPageInfo>,
    pub(super) live_log_bytes: u64,
    /// Live pages per data block.
    pub(super) blocks: IndexMap<u64, u64>,
    /// The last page, cut by a truncate that kept it (see [`FileState::stale_page`]).
    stale: Option<u64>,
    /// Why the file cannot be used: (entry offset, reason).
    pub(super) damage: Option<(u64, String)>,
    /// Log pages that may have no live entry left (checked by cleaning).
    pub(super) maybe_dead: Vec<u64>,
}

impl FileState {
    pub(super) fn new(name: String, generation: u64, inode: Inode, head: u64) -> FileState {
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
            tail: LogPage::at(head).first_entry(),
            entries: IndexMap::default(),
            log: IndexMap::default(),
            live_log_bytes: 0,
            blocks: IndexMap::default(),
            stale: None,
            damage: None,
            maybe_dead: Vec::new(),
        }
    }

    /// The file's last page, if it may hold bytes past the file's size: a truncate into the
    /// middle of a page keeps the page as it is (allocating nothing, so that it succeeds on a
    /// full pool) and only records the size. Reads stop at the size; an operation that grows
    /// the file, or rewrites the page, must zero those bytes by writing the page anew
    /// (copy-on-write), whose extent ends the staleness. Set by every set-size entry whose
    /// size cuts a page the file holds (at replay too), so it may be set where nothing stale
    /// is left (one copy more on the next growth), never the other way round.
    pub(super) fn stale_page(&self) -> Option<u64> {
        self.stale
    }

    /// Append `page` to the chain.
    pub(super) fn push_page(&mut self, page: u64) {
        self.chain.insert(self.next_seq, page);
        self.seq_of.insert(page, self.next_seq);
        self.next_seq += 1;
    }

    pub(super) fn tail_page(&self) -> u64 {
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

    /// Apply a committed entry at pool offset `at` in log page `page` (an extent with its
    /// pages' CRC-32Cs in `page_crcs`, other kinds with none); returns the data blocks it left
    /// with no live page.
    pub(super) fn apply(
        &mut self,
        at: u64,
        page: u64,
        entry: &Entry,
        page_crcs: &[u32],
    ) -> Vec<u64> {
        let mut dead = Vec::new();
        match *entry {
            Entry::Extent {
                file_page,
                pages,
                block,
                block_page,
                size_after,
            } => {
                debug_assert_eq!(page_crcs.len() as u64, pages, "one CRC per page");
                self.add_entry(at, page, entry.bytes(), pages);
                *self.blocks.entry(block).or_default() += pages;
                if self
                    .stale
                    .is_some_and(|p| (file_page..file_page + pages).contains(&p))
                {
                    self.stale = None;
                }
                for i in 0..pages {
                    self.drop_page(file_page + i, &mut dead);
                    self.pages.insert(
                        file_page + i,
                        PageState {
                            base: Some(BaseRef {
                                block,
                                block_page: block_page + i,
                                entry: at,
                                crc: page_crcs[i as usize],
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
                let cut = size_after / PAGE;
                self.stale =
                    (size_after % PAGE != 0 && self.pages.contains_key(&cut)).then_some(cut);
            }
        }
        dead
    }

    /// The blocks that lose their last live page when `replaced` pages are dropped or
    /// replaced.
    pub(super) fn dying_blocks(&self, replaced: &[u64]) -> Vec<u64> {
        let mut lost: HashMap<u64, u64> = HashMap::new();
        for p in replaced {
            if let Some(b) = self.pages.get(p).and_then(|s| s.base) {
                *lost.entry(b.block).or_default() += 1;
            }
        }
        lost.into_iter()
            .filter(|(b, n)| self.blocks[b] == *n)
            .map(|(b, _)| b)
            .collect()
    }

    pub(super) fn corrupt(&self, entry: u64, reason: String) -> DatalogError {
        DatalogError::CorruptEntry {
            file: self.name.clone(),
            entry,
            reason,
        }
    }

    /// The error for file page `file_page`, whose base page at pool offset `page` fails its
    /// CRC-32C.
    pub(super) fn corrupt_data(&self, file_page: u64, page: u64) -> DatalogError {
        DatalogError::CorruptData {
            file: self.name.clone(),
            offset: file_page * PAGE,
            page,
        }
    }

    pub(super) fn stats(&self) -> FileStats {
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

#[cfg(test)]
mod tests {
    use super::super::layout::InodeTable;
    use super::*;

    const LOG_PAGE: u64 = 0x1000;

    fn file() -> FileState {
        FileState::new("f".into(), 1, InodeTable::at(0x100).inode(0), LOG_PAGE)
    }

    fn extent(file_page: u64, pages: u64, block: u64) -> Entry {
        Entry::Extent {
            file_page,
            pages,
            block,
            block_page: 0,
            size_after: 4 * PAGE,
        }
    }

    fn embed(page_off: u64, len: u64) -> Entry {
        Entry::Embed {
            file_page: 0,
            page_off,
            len,
            size_after: 4 * PAGE,
        }
    }

    #[test]
    fn a_block_dies_with_its_last_live_page_and_is_predicted() {
        let mut f = file();
        assert!(f
            .apply(0x1040, LOG_PAGE, &extent(0, 2, 0xa000), &[0; 2])
            .is_empty());
        assert_eq!(f.dying_blocks(&[0]), Vec::<u64>::new());
        assert!(f
            .apply(0x1068, LOG_PAGE, &extent(0, 1, 0xb000), &[0; 1])
            .is_empty());
        assert_eq!(f.dying_blocks(&[1]), vec![0xa000]);
        assert_eq!(
            f.apply(0x1090, LOG_PAGE, &extent(1, 1, 0xc000), &[0; 1]),
            vec![0xa000]
        );
        assert!(!f.blocks.contains_key(&0xa000));
        assert_eq!(f.blocks.len(), 2);
        let stats = f.stats();
        assert_eq!(
            stats.live_entries, 2,
            "the first extent lost both its pages"
        );
        assert_eq!(stats.base_pages, 2);
    }

    #[test]
    fn an_embed_kills_the_older_embeds_it_covers_entirely_only() {
        let mut f = file();
        f.apply(0x1040, LOG_PAGE, &embed(0, 8), &[]);
        f.apply(0x1068, LOG_PAGE, &embed(0, 16), &[]);
        assert_eq!(f.stats().live_entries, 1, "the 8 bytes were covered");
        f.apply(0x1098, LOG_PAGE, &embed(4, 16), &[]);
        let page = &f.pages[&0];
        assert_eq!(page.embeds.len(), 2, "a partial overlap keeps both");
        assert_eq!(page.embed_bytes, 32);
        assert_eq!(page.embeds.last().map(|e| e.entry), Some(0x1098));
        assert_eq!(f.stats().live_entries, 2);
    }

    #[test]
    fn a_smaller_size_drops_the_pages_past_it_and_stays_live_itself() {
        let mut f = file();
        f.apply(0x1040, LOG_PAGE, &extent(0, 1, 0xa000), &[0; 1]);
        f.apply(0x1068, LOG_PAGE, &extent(2, 1, 0xb000), &[0; 1]);
        let dead = f.apply(0x1090, LOG_PAGE, &Entry::SetSize { size_after: PAGE }, &[]);
        assert_eq!(dead, vec![0xb000]);
        assert_eq!(f.size, PAGE);
        assert!(f.pages.contains_key(&0) && !f.pages.contains_key(&2));
        assert_eq!(
            f.stats().live_entries,
            2,
            "the first extent and the set-size"
        );
    }

    #[test]
    fn a_size_inside_a_kept_page_marks_it_stale_until_an_extent_replaces_it() {
        let mut f = file();
        f.apply(0x1040, LOG_PAGE, &extent(0, 2, 0xa000), &[0; 2]);
        f.apply(
            0x1068,
            LOG_PAGE,
            &Entry::SetSize {
                size_after: PAGE + 9,
            },
            &[],
        );
        assert_eq!(f.stale_page(), Some(1));
        f.apply(0x1090, LOG_PAGE, &embed(0, 8), &[]);
        assert_eq!(
            f.stale_page(),
            Some(1),
            "an embed does not rewrite the page"
        );
        f.apply(0x10b8, LOG_PAGE, &extent(1, 1, 0xb000), &[0]);
        assert_eq!(f.stale_page(), None);
        f.apply(
            0x10e0,
            LOG_PAGE,
            &Entry::SetSize {
                size_after: 3 * PAGE + 1,
            },
            &[],
        );
        assert_eq!(f.stale_page(), None, "no page holds the size's page");
        f.apply(0x1108, LOG_PAGE, &Entry::SetSize { size_after: PAGE }, &[]);
        assert_eq!(f.stale_page(), None, "a page boundary cuts no page");
    }

    #[test]
    fn a_log_page_whose_entries_all_die_is_reported_maybe_dead() {
        let mut f = file();
        f.push_page(0x2000);
        f.apply(0x1040, LOG_PAGE, &embed(0, 8), &[]);
        assert!(f.maybe_dead.is_empty());
        f.apply(0x2040, 0x2000, &embed(0, 8), &[]);
        assert_eq!(f.maybe_dead, vec![LOG_PAGE]);
        assert_eq!(f.log[&LOG_PAGE].live_entries, 0);
        assert_eq!(
            f.chain.values().copied().collect::<Vec<_>>(),
            [LOG_PAGE, 0x2000]
        );
        assert_eq!(f.seq_of[&0x2000], 1);
    }
}
