//! [`Datalog::verify`]: a read-only walk of the root, the inode table, every file's log chain
//! and entries, and every live copy-on-write data page, listing every violation it finds
//! ([`Verification`]) instead of stopping at the first.
//!
//! Every offset read from the pool is checked before it is followed (the pool's checked reads
//! return errors, never panic); each log is bounded by the pool's page count and by a set of
//! the pages it has walked, and every block is claimed once across all files, so no bytes make
//! the walk panic or loop. Each log is replayed into a fresh index with the code recovery uses
//! ([`FileState::apply`]), which is then checked against the pool (live pages allocated, their
//! CRC-32Cs, the file size) and against the DRAM index the store keeps.

use std::collections::HashMap;

use pmem_ordering::Backend;

use super::entry::{checksum_holds, page_checksum, Entry};
use super::index::FileState;
use super::layout::{
    data_block_bytes, data_page, EntryImage, Inode, InodeRecord, InodeTable, LogPage, Root,
    END_MARK_BYTES, ENTRY_HEADER, PAGE, ROOT_BYTES, ROOT_MAGIC,
};
use super::{Datalog, Policy, MAX_FILES};
use crate::kind::StructureKind;
use crate::verify::{readable_block, Problem, Verification};

/// Log pages and data blocks start on a cache line, as the allocator's blocks do.
const BLOCK_ALIGNMENT: u64 = 64;

/// The walk's state across files: who reached each block first.
struct Walk<'r> {
    report: &'r mut Verification,
    /// Block -> the pool offset of the word or entry that reached it first.
    owners: HashMap<u64, u64>,
}

impl Walk<'_> {
    /// Claim `block`, reached from `from`: false (and reported) if something reached it
    /// before.
    fn claim(&mut self, block: u64, from: u64) -> bool {
        match self.owners.get(&block) {
            Some(&first) => {
                self.report.report(block, Problem::ReachedTwice { first });
                false
            }
            None => {
                self.owners.insert(block, from);
                true
            }
        }
    }
}

/// One inode's walk: its log replayed, and whether the whole log parsed.
struct FileWalk {
    state: FileState,
    complete: bool,
}

impl<B: Backend> Datalog<B> {
    /// Walk the whole store and report every violation found, with the blocks walked and the
    /// files found (as `keys`). Reads only: it changes nothing; it holds the store's lock, so
    /// operations wait for it.
    ///
    /// Checked: the root's magic and policy, and its inode table, inode count and next
    /// generation against those the store opened with; the inode table (an allocated block of
    /// its size); each inode in use (a generation below the next, a valid name, no name twice);
    /// each log from head to tail (each page aligned, inside the pool, an allocated page, in no
    /// other log, no cycle, the chain reaching the tail; each committed entry's header, bounds
    /// and CRC-32C, as recovery checks them (NOVA-Fortis (SOSP'17) checksums log entries), and
    /// the spare pages linked past the tail); the replayed state: no live page past the file's
    /// size, each live data block allocated (large enough for its live pages) and owned once,
    /// each live copy-on-write page's CRC-32C against the one its extent recorded; and the DRAM
    /// index against the replay (size, tail, log pages, pages and their entries, blocks).
    pub fn verify(&self) -> Verification {
        let mut report = Verification::new(StructureKind::Datalog, self.root);
        let pool = self.heap.pool();
        let root = Root::at(self.root);
        match root.read_magic(pool) {
            Ok(ROOT_MAGIC) => {}
            Ok(found) => report.report(self.root, Problem::WrongMagic { found }),
            Err(_) => {
                report.report(self.root, Problem::OutOfPool { len: ROOT_BYTES });
                return report;
            }
        }
        if let Ok(Err(reason)) = root.read_policy(pool).map(Policy::decode) {
            report.report(self.root, Problem::BadPolicy { reason });
        }
        let (Ok(table), Ok(max_files), Ok(next_generation)) = (
            root.read_table(pool),
            root.read_max_files(pool),
            root.read_next_generation(pool),
        ) else {
            report.report(self.root, Problem::OutOfPool { len: ROOT_BYTES });
            return report;
        };
        for (word, found, opened) in [
            ("inode table", table.offset(), self.table.offset()),
            ("inode count", max_files, self.max_files),
        ] {
            if found != opened {
                report.report(
                    self.root,
                    Problem::RootChanged {
                        word,
                        found,
                        opened,
                    },
                );
            }
        }
        if max_files == 0 || max_files > MAX_FILES {
            let max = MAX_FILES;
            report.report(
                self.root,
                Problem::InodeCountInvalid {
                    count: max_files,
                    max,
                },
            );
            return report;
        }
        let table_bytes = InodeTable::bytes(max_files);
        if !readable_block(&self.heap, &mut report, table.offset(), table_bytes, 8) {
            return report;
        }
        report.blocks_walked += 1;
        let mut walk = Walk {
            report: &mut report,
            owners: HashMap::from([(table.offset(), self.root)]),
        };
        self.verify_inodes(&mut walk, table, max_files, next_generation);
        report
    }

    /// Every inode of the table, each file's log and pages, against the DRAM index.
    fn verify_inodes(
        &self,
        walk: &mut Walk<'_>,
        table: InodeTable,
        max_files: u64,
        next_generation: u64,
    ) {
        let pool = self.heap.pool();
        let inner = self.lock();
        let mut names: HashMap<String, u64> = HashMap::new();
        for slot in 0..max_files {
            let inode = table.inode(slot);
            let Ok(record) = inode.read(pool) else {
                walk.report
                    .report(inode.offset(), Problem::OutOfPool { len: 128 });
                continue;
            };
            let indexed = inner.slots.get(slot as usize).and_then(Option::as_ref);
            let generation = record.generation();
            if generation == 0 {
                if let Some(f) = indexed {
                    let detail = format!("the index holds it in inode {slot}, which is free");
                    let problem = Problem::IndexDisagrees {
                        file: f.name.clone(),
                        detail,
                    };
                    walk.report.report(inode.offset(), problem);
                }
                continue;
            }
            walk.report.keys += 1;
            if generation >= next_generation {
                walk.report.report(
                    inode.generation_word(),
                    Problem::GenerationTooHigh {
                        slot,
                        generation,
                        next: next_generation,
                    },
                );
            }
            let name = match record.name().filter(|n| !n.is_empty()) {
                Some(name) => name.to_string(),
                None => {
                    walk.report
                        .report(inode.name_field(), Problem::BadFileName { slot });
                    format!("<inode {slot}>")
                }
            };
            if let Some(&first_slot) = names.get(&name) {
                let problem = Problem::DuplicateFileName {
                    name: name.clone(),
                    first_slot,
                };
                walk.report.report(inode.name_field(), problem);
            } else {
                names.insert(name.clone(), slot);
            }
            let findings_before = walk.report.findings.len();
            let file = self.walk_log(walk, name, generation, inode, &record);
            if let Some(file) = &file {
                if file.complete {
                    self.verify_pages(walk, &file.state);
                }
            }
            let clean = walk.report.findings.len() == findings_before;
            compare_index(walk.report, inode, indexed, file.as_ref(), clean);
        }
    }

    /// Walk one file's log from its head to its tail and past it, replaying its committed
    /// entries; `None` if its head cannot be read.
    fn walk_log(
        &self,
        walk: &mut Walk<'_>,
        name: String,
        generation: u64,
        inode: Inode,
        record: &InodeRecord,
    ) -> Option<FileWalk> {
        let (head, tail) = (record.head(), record.tail());
        if !readable_block(&self.heap, walk.report, head, PAGE, BLOCK_ALIGNMENT)
            || !walk.claim(head, inode.head_word())
        {
            return None;
        }
        walk.report.blocks_walked += 1;
        let mut file = FileWalk {
            state: FileState::new(name, generation, inode, head),
            complete: true,
        };
        let mut page = head;
        let mut pos = LogPage::at(head).first_entry();
        let mut buf = vec![0u8; PAGE as usize];
        let mut page_crcs: Vec<u32> = Vec::new();
        while pos != tail {
            let left = LogPage::at(page).room(pos);
            let mut mark = [0u8; 8];
            let at_end = !LogPage::takes_end_mark(left)
                || (self.heap.pool().read_bytes(pos, &mut mark).is_ok() && mark == END_MARK_BYTES);
            if at_end {
                match self.next_page(walk, &mut file.state, page) {
                    Some(next) => {
                        page = next;
                        pos = LogPage::at(page).first_entry();
                        continue;
                    }
                    None => {
                        walk.report
                            .report(page, Problem::LogEndsBeforeTail { tail });
                        file.complete = false;
                        return Some(file);
                    }
                }
            }
            match self.read_entry(&file.state, page, pos, tail, &mut buf, &mut page_crcs) {
                Ok(entry) => {
                    // The blocks an entry killed were freed when it committed.
                    let _ = file.state.apply(pos, page, &entry, &page_crcs);
                    pos += entry.bytes();
                }
                Err(problem) => {
                    walk.report.report(pos, problem);
                    file.complete = false;
                    break;
                }
            }
        }
        file.state.tail = tail;
        file.state.tail_seq = file.state.next_seq - 1;
        // The pages linked past the tail's (or past a bad entry's) belong to the log too.
        while let Some(next) = self.next_page(walk, &mut file.state, page) {
            page = next;
        }
        Some(file)
    }

    /// The page `page` links to, appended to the file's chain, if there is one the log may
    /// own (what is wrong with the link is reported).
    fn next_page(&self, walk: &mut Walk<'_>, f: &mut FileState, page: u64) -> Option<u64> {
        let next_word = LogPage::at(page).next_word();
        let next = self.heap.pool().load_u64(next_word).ok()?;
        if next == 0 {
            return None;
        }
        if f.seq_of.contains_key(&next) {
            walk.report.report(page, Problem::LogCycle { next });
            return None;
        }
        let pages = f.chain.len() as u64;
        if pages >= self.heap.pool().size() / PAGE {
            walk.report.report(page, Problem::LogTooLong { pages });
            return None;
        }
        if !readable_block(&self.heap, walk.report, next, PAGE, BLOCK_ALIGNMENT)
            || !walk.claim(next, next_word)
        {
            return None;
        }
        walk.report.blocks_walked += 1;
        f.push_page(next);
        Some(next)
    }

    /// The committed entry at `pos` of log page `page`, checked as recovery checks it (an
    /// extent's pages' CRC-32Cs left in `page_crcs`), or what is wrong with it.
    fn read_entry(
        &self,
        f: &FileState,
        page: u64,
        pos: u64,
        tail: u64,
        buf: &mut [u8],
        page_crcs: &mut Vec<u32>,
    ) -> Result<Entry, Problem> {
        let pool = self.heap.pool();
        let unreadable = |_| Problem::OutOfPool { len: ENTRY_HEADER };
        let header = &mut buf[..ENTRY_HEADER as usize];
        pool.read_bytes(pos, header).map_err(unreadable)?;
        let mut entry =
            Entry::decode_header(header).map_err(|reason| Problem::BadEntry { reason })?;
        let bytes = entry.bytes();
        let log_page = LogPage::at(page);
        if bytes > log_page.room(pos) || (log_page.holds_tail(tail) && pos + bytes > tail) {
            let reason = "it overlaps its page's end or the tail".to_string();
            return Err(Problem::BadEntry { reason });
        }
        let whole = &mut buf[..bytes as usize];
        pool.read_bytes(pos, whole).map_err(unreadable)?;
        if !checksum_holds(f.generation, whole) {
            return Err(Problem::EntryChecksum);
        }
        page_crcs.clear();
        if let Entry::Extent { block, pages, .. } = &mut entry {
            let image = EntryImage::new(whole);
            *block = image.extent_block();
            page_crcs.extend(image.extent_page_crcs(*pages));
        }
        Ok(entry)
    }

    /// The replayed file's live pages: within its size, in allocated data blocks owned once,
    /// each copy-on-write page matching the CRC-32C its extent recorded.
    fn verify_pages(&self, walk: &mut Walk<'_>, f: &FileState) {
        let mut pages: Vec<(&u64, &super::index::PageState)> = f.pages.iter().collect();
        pages.sort_unstable_by_key(|(p, _)| **p);
        // Per live block: the entry that first reached it and its highest live page.
        let mut blocks: Vec<(u64, u64, u64)> = Vec::new();
        for &(&file_page, state) in &pages {
            if file_page.saturating_mul(PAGE) >= f.size {
                let at = state
                    .base
                    .map(|b| b.entry)
                    .or(state.embeds.first().map(|e| e.entry))
                    .unwrap_or(f.inode.offset());
                let problem = Problem::PagePastSize {
                    file: f.name.clone(),
                    file_page,
                    size: f.size,
                };
                walk.report.report(at, problem);
            }
            if let Some(b) = state.base {
                match blocks.iter_mut().find(|(block, _, _)| *block == b.block) {
                    Some(known) => known.2 = known.2.max(b.block_page),
                    None => blocks.push((b.block, b.entry, b.block_page)),
                }
            }
        }
        let mut readable = HashMap::new();
        for &(block, entry, last_page) in &blocks {
            let bytes = data_block_bytes(last_page + 1);
            let ok = readable_block(&self.heap, walk.report, block, bytes, BLOCK_ALIGNMENT)
                && walk.claim(block, entry);
            if ok {
                walk.report.blocks_walked += 1;
            }
            readable.insert(block, ok);
        }
        let mut bytes = vec![0u8; PAGE as usize];
        for &(&file_page, state) in &pages {
            let Some(b) = state.base else { continue };
            let at = data_page(b.block, b.block_page);
            if readable.get(&b.block) != Some(&true)
                || self.heap.pool().read_bytes(at, &mut bytes).is_err()
            {
                continue;
            }
            let found = page_checksum(&bytes);
            if found != b.crc {
                let problem = Problem::PageChecksum {
                    file: f.name.clone(),
                    file_page,
                    recorded: b.crc,
                    found,
                };
                walk.report.report(at, problem);
            }
        }
    }
}

/// The DRAM index's file in the inode's slot (`indexed`) against the walk of its log (`file`,
/// `clean` if the walk found nothing wrong): what differs is reported at the inode.
fn compare_index(
    report: &mut Verification,
    inode: Inode,
    indexed: Option<&FileState>,
    file: Option<&FileWalk>,
    clean: bool,
) {
    let at = inode.offset();
    let Some(file) = file else { return };
    let walked = &file.state;
    let Some(indexed) = indexed else {
        let detail = "the index has no file in its inode".to_string();
        let file = walked.name.clone();
        report.report(at, Problem::IndexDisagrees { file, detail });
        return;
    };
    let mut differ = |detail: String| {
        let file = walked.name.clone();
        report.report(at, Problem::IndexDisagrees { file, detail });
    };
    if let Some((entry, reason)) = &indexed.damage {
        if clean {
            differ(format!(
                "the index marks it damaged at {entry:#x} ({reason})"
            ));
        }
        return;
    }
    if !file.complete {
        return;
    }
    if indexed.name != walked.name || indexed.generation != walked.generation {
        differ(format!(
            "the index holds {:?} of generation {}, the inode {:?} of generation {}",
            indexed.name, indexed.generation, walked.name, walked.generation
        ));
        return;
    }
    if indexed.size != walked.size {
        differ(format!(
            "size {} in the index, {} in the log",
            indexed.size, walked.size
        ));
    }
    if indexed.tail != walked.tail {
        differ(format!(
            "tail {:#x} in the index, {:#x} in the inode",
            indexed.tail, walked.tail
        ));
    }
    let chain = |f: &FileState| f.chain.values().copied().collect::<Vec<u64>>();
    if chain(indexed) != chain(walked) {
        differ("the log pages differ".to_string());
    }
    if indexed.blocks != walked.blocks {
        differ("the live data blocks differ".to_string());
    }
    let mut pages: Vec<u64> = indexed
        .pages
        .keys()
        .chain(walked.pages.keys())
        .copied()
        .collect();
    pages.sort_unstable();
    pages.dedup();
    let differing = pages
        .into_iter()
        .find(|p| match (indexed.pages.get(p), walked.pages.get(p)) {
            (Some(a), Some(b)) => a.base != b.base || a.embeds != b.embeds,
            _ => true,
        });
    if let Some(p) = differing {
        differ(format!("file page {p} differs"));
    }
}
