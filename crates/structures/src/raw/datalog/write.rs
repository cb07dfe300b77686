//! Writes and truncation: cutting a write into page pieces and choosing, piece by piece,
//! between copy-on-write (a new 4 KB page, NOVA's write entry) and embedding (the bytes inline
//! in the log, NOVA-datalog's embed write entry, Optane guide (FAST'20), Sec. 5.1.2, Fig. 10),
//! with folding: a page that has collected too many embedded entries goes copy-on-write again.
//! The resulting [`Plan`] is committed by the `file` module.

use pmem_ordering::{Backend, Pool};

use super::file::Plan;
use super::index::FileState;
use super::layout::{MAX_EMBED, PAGE};
use super::namespace::file;
use super::read::materialize;
use super::{Datalog, DatalogError, FileId, Policy, WriteMode, MAX_FILE_SIZE};

impl<B: Backend> Datalog<B> {
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
        let mut plan = Plan::new(f.size.max(end), false);
        let mut replaced: Vec<u64> = Vec::new();
        // Growing over a stale last page: it is written anew with zeros past the old size
        // (here if the write does not reach it, else as the write's piece of it).
        let stale = f.stale_page().filter(|_| end > f.size);
        if let Some(sp) = stale.filter(|&sp| offset / PAGE > sp) {
            plan.cow
                .push((sp, fresh_page(pool, f, sp, &mut inner.scratch)?));
            replaced.push(sp);
        }
        let mut done = 0u64;
        while done < len {
            let at = offset + done;
            let p = at / PAGE;
            let start = at % PAGE;
            let piece = (PAGE - start).min(len - done);
            let bytes = &data[done as usize..(done + piece) as usize];
            if stale != Some(p) && self.embeds(f, p, piece, mode) {
                plan.embeds.push((p, start, bytes.to_vec()));
            } else {
                if self.folds(f, p, piece, mode) {
                    inner.cleaning.folds += 1;
                }
                let mut page = if piece == PAGE {
                    Vec::new()
                } else {
                    fresh_page(pool, f, p, &mut inner.scratch)?
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
        plan.dying = f.dying_blocks(&replaced);
        self.commit(f, plan, &mut inner.scratch)?;
        self.clean_after(f, &mut inner.scratch, &mut inner.cleaning);
        Ok(())
    }

    /// Whether a piece of `len` bytes of page `p` is embedded under `mode`.
    fn embeds(&self, f: &FileState, p: u64, len: u64, mode: WriteMode) -> bool {
        Datalog::<B>::embeds_under(&self.policy, f, p, len, mode)
    }

    /// Whether such a piece is embedded under `policy` (its folding thresholds included).
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
        let no_fold = Datalog::<B>::embeds_under(&unfolded, f, p, len, mode);
        no_fold && !self.embeds(f, p, len, mode)
    }

    /// Set the file's size, atomically. Shrinking drops the pages past the end, frees the
    /// blocks left unused, and keeps a partial last page as it is: it allocates nothing, so a
    /// store whose pool is full can always shrink a file (given the log room every operation
    /// keeps ahead for it, see `Datalog::grow_chain_keeping_room`). Growing again reads zeros
    /// past the old end: the growth writes the kept page anew.
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
        let mut plan = Plan::new(size, true);
        if size < f.size {
            let replaced: Vec<u64> = f
                .pages
                .keys()
                .copied()
                .filter(|&p| p * PAGE >= size)
                .collect();
            plan.dying = f.dying_blocks(&replaced);
            plan.shrinks = true;
        } else if let Some(sp) = f.stale_page().filter(|_| size > f.size) {
            plan.cow
                .push((sp, fresh_page(self.heap.pool(), f, sp, &mut inner.scratch)?));
            plan.dying = f.dying_blocks(&[sp]);
        }
        self.commit(f, plan, &mut inner.scratch)?;
        self.clean_after(f, &mut inner.scratch, &mut inner.cleaning);
        Ok(())
    }
}

/// Page `p` as a copy-on-write of it starts from: its contents, with zeros past the file's
/// size if it is the stale last page (bytes a truncate left there).
fn fresh_page<B: Backend>(
    pool: &Pool<B>,
    f: &FileState,
    p: u64,
    scratch: &mut Vec<u8>,
) -> Result<Vec<u8>, DatalogError> {
    let mut page = materialize(pool, f, p, scratch)?;
    if f.stale_page() == Some(p) {
        page[(f.size % PAGE) as usize..].fill(0);
    }
    Ok(page)
}
