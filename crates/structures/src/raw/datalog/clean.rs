//! Log cleaning (NOVA (FAST'16)'s log cleaning, simplified): after each operation, log pages
//! before the tail's with no live entry are unlinked and freed, and a log that has become
//! mostly dead is compacted into a new one. Both are transactions: a crash leaves the old log
//! or the new, never a mix, and a failure changes nothing (it is counted and tried again).

use std::collections::HashSet;

use pmem_ordering::{Backend, PPtr, Pool};
use pmem_undo_log::TxError;

use super::entry::Entry;
use super::index::FileState;
use super::layout::{LogPage, LogPageImage, ENTRY_HEADER, LOG_PAGE_CAPACITY, PAGE};
use super::namespace::file;
use super::read::embed_payload;
use super::recovery::replay;
use super::{CleaningStats, Datalog, DatalogError, FileId, MAX_EXTENT_PAGES};

impl<B: Backend> Datalog<B> {
    /// payload that fails its checksum) changes nothing and must not report the committed
    /// operation as failed: it is counted, and cleaning runs again after the next operation.
    pub(super) fn clean_after(
        &self,
        f: &mut FileState,
        scratch: &mut Vec<u8>,
        stats: &mut CleaningStats,
    ) {
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
                < self.policy.compact_live_percent * used_pages * LOG_PAGE_CAPACITY
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
                    None => tx.write_value(inode.head_word(), &after)?,
                    Some(page) => tx.write_value(LogPage::at(page).next_word(), &after)?,
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
        let entries = live_state(self.heap.pool(), f, scratch)?;
        let mut pages = lay_out(&entries, f.generation, scratch);
        let tail_index = pages.len() - 1;
        let tail_fill = pages[tail_index].fill();
        // The room for one set-size entry that every log keeps past its tail (see
        // `Datalog::grow_chain_keeping_room`): a spare page if the tail's has none.
        if !pages[tail_index].fits(ENTRY_HEADER) {
            pages.push(LogPageImage::new());
        }
        let old_chain: Vec<u64> = f.chain.values().copied().collect();
        let inode = f.inode;
        let new_chain = self.heap.transaction(|tx| {
            let chain: Vec<u64> = (0..pages.len())
                .map(|_| tx.alloc(PAGE).map(|p| p.offset()))
                .collect::<Result<_, _>>()?;
            for (k, page) in pages.iter_mut().enumerate() {
                page.set_next(chain.get(k + 1).copied().unwrap_or(0));
                tx.write(chain[k], page.as_bytes())?;
            }
            let tail = LogPage::at(chain[tail_index]).offset_of(tail_fill);
            tx.write_value(inode.head_word(), &chain[0])?;
            tx.write_value(inode.tail_word(), &tail)?;
            for &p in &old_chain {
                tx.free(PPtr::<u8>::new(p))?;
            }
            Ok::<Vec<u64>, TxError>(chain)
        })?;
        let tail = LogPage::at(new_chain[tail_index]).offset_of(tail_fill);
        let rebuilt = replay(
            &self.heap,
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
}

/// An entry of a compacted log, with what its body carries.
struct LiveEntry {
    entry: Entry,
    /// An embed's inline bytes.
    payload: Vec<u8>,
    /// An extent's pages' CRC-32Cs.
    page_crcs: Vec<u32>,
}

/// The file's live state as entries for a new log, with the embeds' payloads (checksums
/// checked): per run of file pages whose bases are consecutive pages of one block an extent,
/// then the embeds over those pages in log order; last, the size.
fn live_state<B: Backend>(
    pool: &Pool<B>,
    f: &FileState,
    scratch: &mut Vec<u8>,
) -> Result<Vec<LiveEntry>, DatalogError> {
    let size = f.size;
    let mut page_numbers: Vec<u64> = f.pages.keys().copied().collect();
    page_numbers.sort_unstable();
    let mut entries: Vec<LiveEntry> = Vec::new();
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
            // The CRCs recorded when the pages were written, carried over: recomputing them
            // from the pages would bless bytes damaged since.
            let page_crcs = page_numbers[i..j]
                .iter()
                .map(|p| f.pages[p].base.expect("a run of base pages").crc)
                .collect();
            entries.push(LiveEntry {
                entry: Entry::Extent {
                    file_page: first,
                    pages: (j - i) as u64,
                    block: b.block,
                    block_page: b.block_page,
                    size_after: size,
                },
                payload: Vec::new(),
                page_crcs,
            });
        }
        for &p in &page_numbers[i..j] {
            for e in &f.pages[&p].embeds {
                let payload = embed_payload(pool, f, e, scratch)?;
                entries.push(LiveEntry {
                    entry: Entry::Embed {
                        file_page: p,
                        page_off: e.page_off,
                        len: e.len,
                        // An embed a truncate left past the size (in a stale last page) is
                        // kept with the size it was written under; the final set-size entry
                        // cuts the size back, as the truncate did.
                        size_after: size.max(p * PAGE + e.page_off + e.len),
                    },
                    payload: payload.to_vec(),
                    page_crcs: Vec::new(),
                });
            }
        }
        i = j;
    }
    entries.push(LiveEntry {
        entry: Entry::SetSize { size_after: size },
        payload: Vec::new(),
        page_crcs: Vec::new(),
    });
    Ok(entries)
}

/// The entries encoded for a file of `generation` on fresh log pages, in order: an entry that
/// does not fit the rest of a page starts the next. The pages' links are left to the caller.
fn lay_out(entries: &[LiveEntry], generation: u64, scratch: &mut Vec<u8>) -> Vec<LogPageImage> {
    let mut pages = vec![LogPageImage::new()];
    for LiveEntry {
        entry,
        payload,
        page_crcs,
    } in entries
    {
        if !pages.last().expect("a page").fits(entry.bytes()) {
            pages.last_mut().expect("a page").close();
            pages.push(LogPageImage::new());
        }
        entry.encode(generation, payload, page_crcs, scratch);
        pages.last_mut().expect("a page").push(scratch);
    }
    pages
}
