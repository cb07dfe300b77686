//! A file's log and its tail commit: where an operation's entries go past the tail, the log
//! pages linked ahead of them, and the one 8-byte tail store (or the transaction around it)
//! that makes them part of the file.
//!
//! Crash safety: entries past the tail are invisible to recovery, so an operation writes them
//! there, makes them durable, and only then stores the tail.
//!
//! * An operation that allocates and frees nothing (embedded writes, most size changes) flushes its
//!   entries, fences, stores the tail and persists it: two fences.
//! * A copy-on-write operation stores the tail inside the undo-log transaction that allocates
//!   its data blocks and frees the blocks it replaces: the data pages (non-temporal stores) and
//!   the entries (flushed) are ordered before the commit word by the transaction's commit
//!   fence, so the allocation, the entries, the tail and the frees commit together.
//! * New log pages are allocated and linked from the chain's last page in a transaction of
//!   their own, before the entries that need them are written: a crash leaves them linked past
//!   the tail, owned by the log and reused, never leaked.

use pmem_ordering::{Backend, PPtr, Pending, PoolError};
use pmem_undo_log::TxError;

use super::entry::{page_checksum, Entry};
use super::index::FileState;
use super::layout::{data_block_bytes, data_page, LogPage, END_MARK_BYTES, ENTRY_HEADER, PAGE};
use super::{Datalog, DatalogError, MAX_EXTENT_PAGES};

/// Where one operation's entries go in the log.
struct Placement {
    /// Per entry: its pool offset and its log page.
    offsets: Vec<(u64, u64)>,
    /// Pool offsets of the end marks of the pages the entries leave.
    end_marks: Vec<u64>,
    /// The tail after the entries.
    tail: u64,
    /// Sequence number of the page holding that tail.
    tail_seq: u64,
    /// Log pages missing after the chain's last page.
    missing: usize,
}

/// What an operation writes: its entries (extents of new copy-on-write pages, set-size,
/// embeds), the pages' contents and the blocks it frees.
pub(super) struct Plan {
    /// The file's size after the operation.
    pub(super) new_size: u64,
    /// Whether a set-size entry goes first (a truncate).
    pub(super) set_size_first: bool,
    /// Copy-on-write pages: file page and its whole new contents, in file page order.
    pub(super) cow: Vec<(u64, Vec<u8>)>,
    /// Embedded pieces: file page, offset in it, bytes.
    pub(super) embeds: Vec<(u64, u64, Vec<u8>)>,
    /// Data blocks the operation leaves with no live page, freed when it commits.
    pub(super) dying: Vec<u64>,
    /// Whether the operation only shrinks the file (a truncate to a smaller size): it may use
    /// the log room kept for it when no log page can be allocated.
    pub(super) shrinks: bool,
}

impl Plan {
    /// A plan that writes nothing yet and leaves the file `new_size` bytes long.
    pub(super) fn new(new_size: u64, set_size_first: bool) -> Plan {
        Plan {
            new_size,
            set_size_first,
            cow: Vec::new(),
            embeds: Vec::new(),
            dying: Vec::new(),
            shrinks: false,
        }
    }

    /// Copy-on-write pages in groups of [`MAX_EXTENT_PAGES`]: one data block per group.
    fn cow_groups(&self) -> std::slice::Chunks<'_, (u64, Vec<u8>)> {
        self.cow.chunks(MAX_EXTENT_PAGES as usize)
    }

    /// The operation's entries in log order (the set-size if first, the extents, the embeds),
    /// the extents' blocks left 0; and per extent, the group of [`Plan::cow_groups`] whose
    /// block it points into.
    fn entries(&self) -> (Vec<Entry>, Vec<usize>) {
        let size = self.new_size;
        let mut entries: Vec<Entry> = Vec::new();
        if self.set_size_first {
            entries.push(Entry::SetSize { size_after: size });
        }
        // An extent per run of consecutive file pages inside a group.
        let mut extent_group = Vec::new();
        for (g, group) in self.cow_groups().enumerate() {
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
        for (p, off, bytes) in &self.embeds {
            entries.push(Entry::Embed {
                file_page: *p,
                page_off: *off,
                len: bytes.len() as u64,
                size_after: size,
            });
        }
        (entries, extent_group)
    }
}

impl<B: Backend> Datalog<B> {
    /// Append the plan's entries and commit them with one tail store; update the index.
    pub(super) fn commit(
        &self,
        f: &mut FileState,
        plan: Plan,
        scratch: &mut Vec<u8>,
    ) -> Result<(), DatalogError> {
        let pool = self.heap.pool();
        let (mut entries, extent_group) = plan.entries();
        let groups: Vec<&[(u64, Vec<u8>)]> = plan.cow_groups().collect();
        // Over the very bytes the non-temporal stores below persist.
        let cow_crcs: Vec<u32> = plan.cow.iter().map(|(_, p)| page_checksum(p)).collect();
        let page_crcs = per_entry_crcs(&entries, &cow_crcs);
        let sizes: Vec<u64> = entries.iter().map(Entry::bytes).collect();
        self.grow_chain_keeping_room(f, &sizes, plan.shrinks)?;
        let place = place(f, &sizes);
        debug_assert_eq!(place.missing, 0);

        let write_entries = |entries: &[Entry],
                             scratch: &mut Vec<u8>|
         -> Result<Pending, PoolError> {
            let mut pending: Option<Pending> = None;
            let mut add = |p: Pending| {
                pending = Some(match pending.take() {
                    None => p,
                    Some(q) => q.and(p),
                })
            };
            for &at in &place.end_marks {
                add(pool.flush(pool.write(at, &END_MARK_BYTES)?));
            }
            let mut embeds = plan.embeds.iter();
            for ((entry, &(at, _)), crcs) in entries.iter().zip(&place.offsets).zip(&page_crcs) {
                let payload: &[u8] = match entry {
                    Entry::Embed { .. } => &embeds.next().expect("one payload per embed").2,
                    _ => &[],
                };
                entry.encode(f.generation, payload, crcs, scratch);
                add(pool.flush(pool.write(at, scratch)?));
            }
            Ok(pending.expect("an operation writes at least one entry"))
        };

        if plan.cow.is_empty() && plan.dying.is_empty() {
            // Entries durable, then the one tail store that commits them.
            let pending = write_entries(&entries, scratch)?;
            pool.fence(pending);
            let w = pool.store_u64(f.inode.tail_word(), place.tail)?;
            pool.persist(w);
        } else {
            let inode = f.inode;
            entries = self.heap.transaction(|tx| {
                let mut blocks = Vec::with_capacity(groups.len());
                for group in &groups {
                    let block = tx.alloc(data_block_bytes(group.len() as u64))?.offset();
                    for (i, (_, page)) in group.iter().enumerate() {
                        // Ordered before the commit word by the transaction's commit fence.
                        drop(pool.nt_write(data_page(block, i as u64), page)?);
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
                tx.write_value(inode.tail_word(), &place.tail)?;
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
        for ((entry, &(at, page)), crcs) in entries.iter().zip(&place.offsets).zip(&page_crcs) {
            dead.extend(f.apply(at, page, entry, crcs));
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

    /// Make sure the chain has the pages the entries of `sizes` need past the tail, and room
    /// after them for one more set-size entry: the room a later truncate takes when the pool
    /// is full, so that a file can always shrink. An operation that `shrinks` may take that
    /// room itself when no page can be had (the pages it frees let the next operation link
    /// one again); any other operation fails, changing nothing.
    fn grow_chain_keeping_room(
        &self,
        f: &mut FileState,
        sizes: &[u64],
        shrinks: bool,
    ) -> Result<(), DatalogError> {
        let mut with_room = Vec::with_capacity(sizes.len() + 1);
        with_room.extend_from_slice(sizes);
        with_room.push(ENTRY_HEADER);
        match self.grow_chain(f, &with_room) {
            Err(DatalogError::Tx(TxError::PoolFull { .. })) if shrinks => self.grow_chain(f, sizes),
            other => other,
        }
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
                tx.write(page, &LogPage::EMPTY_HEADER)?;
                tx.write_value(LogPage::at(prev).next_word(), &page)?;
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
}

/// Per entry, the CRC-32Cs of the pages it points to: an extent's share of `cow_crcs` (the
/// plan's copy-on-write pages' CRCs, which its extents cover in order), nothing for the others.
fn per_entry_crcs<'c>(entries: &[Entry], cow_crcs: &'c [u32]) -> Vec<&'c [u32]> {
    let mut next = 0usize;
    entries
        .iter()
        .map(|e| match *e {
            Entry::Extent { pages, .. } => {
                let crcs = &cow_crcs[next..next + pages as usize];
                next += pages as usize;
                crcs
            }
            _ => &[],
        })
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
        if !LogPage::at(page).fits(pos, bytes) {
            if LogPage::takes_end_mark(LogPage::at(page).room(pos)) && missing == 0 {
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
            pos = LogPage::at(page).first_entry();
        }
        out.offsets.push((pos, page));
        pos += bytes;
    }
    out.tail = pos;
    out.tail_seq = seq;
    out.missing = missing;
    out
}

#[cfg(test)]
mod tests {
    use super::super::layout::{InodeTable, LOG_HEADER};
    use super::*;

    fn pages(numbers: impl IntoIterator<Item = u64>) -> Vec<(u64, Vec<u8>)> {
        numbers.into_iter().map(|p| (p, Vec::new())).collect()
    }

    #[test]
    fn a_plan_has_one_extent_per_run_of_pages_in_each_block() {
        let mut plan = Plan::new(100 * PAGE, true);
        plan.cow = pages((0..70).chain([80, 81, 90]));
        plan.embeds.push((95, 8, vec![1; 5]));
        let (entries, extent_group) = plan.entries();
        let extent = |file_page, pages, block_page| Entry::Extent {
            file_page,
            pages,
            block: 0,
            block_page,
            size_after: 100 * PAGE,
        };
        assert_eq!(
            entries,
            [
                Entry::SetSize {
                    size_after: 100 * PAGE
                },
                extent(0, 64, 0),
                extent(64, 6, 0),
                extent(80, 2, 6),
                extent(90, 1, 8),
                Entry::Embed {
                    file_page: 95,
                    page_off: 8,
                    len: 5,
                    size_after: 100 * PAGE
                },
            ]
        );
        assert_eq!(extent_group, [0, 1, 1, 1]);
        assert_eq!(plan.cow_groups().count(), 2);
    }

    #[test]
    fn entries_that_pass_a_page_end_go_to_the_spares_then_count_as_missing() {
        let head = 0x10_000;
        let mut f = FileState::new("f".into(), 1, InodeTable::at(0x100).inode(0), head);
        f.push_page(0x20_000);
        // 40 bytes left in the head page: room for an end mark.
        f.tail = head + PAGE - 40;
        let placed = place(&f, &[40, 48, PAGE - LOG_HEADER, 32]);
        assert_eq!(
            placed.offsets,
            [
                (head + PAGE - 40, head),
                (0x20_000 + LOG_HEADER, 0x20_000),
                // Stand-ins in page 0 until the pages exist.
                (LOG_HEADER, 0),
                (LOG_HEADER, 0),
            ]
        );
        // The head page was filled exactly: the spare's end is marked, not the head's.
        assert_eq!(placed.end_marks, [0x20_000 + LOG_HEADER + 48]);
        assert_eq!(placed.missing, 2, "both pages past the spare are missing");

        f.tail = head + PAGE - ENTRY_HEADER;
        let placed = place(&f, &[40]);
        assert_eq!(placed.end_marks, [head + PAGE - ENTRY_HEADER]);
        assert_eq!(placed.offsets, [(0x20_000 + LOG_HEADER, 0x20_000)]);
        assert_eq!(
            (placed.tail, placed.tail_seq),
            (0x20_000 + LOG_HEADER + 40, 1)
        );
        assert_eq!(placed.missing, 0);

        f.tail = head + PAGE - 24;
        let placed = place(&f, &[40]);
        assert!(
            placed.end_marks.is_empty(),
            "no room for a mark: readers skip the rest"
        );
    }
}
