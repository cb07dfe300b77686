//! Reads: a file page is its base page (if any) with its embedded entries merged over it in log
//! order, zeros where nothing was written. Embedded bytes are read from the log and their
//! checksums checked on every read, so bytes corrupted after open are reported, never returned
//! (the read-path cost of embedding, Optane guide (FAST'20), Sec. 5.1.2, Fig. 11).

use std::ops::Deref;

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::Heap;

use super::entry::checksum_holds;
use super::index::{EmbedRef, FileState};
use super::layout::{data_page, embed_entry_bytes, EntryImage, PAGE};
use super::namespace::file;
use super::{Datalog, DatalogError, FileId};

impl<B: Backend, P: Deref<Target = Pool<B>>, H: Deref<Target = Heap<B, P>>> Datalog<B, P, H> {
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
                        Some(b) => {
                            pool.read_bytes(data_page(b.block, b.block_page) + start, out)?
                        }
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
}

/// The payload of an embedded entry, its checksum checked.
pub(super) fn embed_payload<'s, B: Backend>(
    pool: &Pool<B>,
    f: &FileState,
    e: &EmbedRef,
    scratch: &'s mut Vec<u8>,
) -> Result<&'s [u8], DatalogError> {
    scratch.resize(embed_entry_bytes(e.len) as usize, 0);
    pool.read_bytes(e.entry, scratch)?;
    if !checksum_holds(f.generation, scratch) {
        return Err(f.corrupt(e.entry, "embedded entry fails its checksum".into()));
    }
    Ok(EntryImage::new(scratch).embed_payload(e.len))
}

/// Page `p` with its embedded entries merged in (zeros where nothing was written).
pub(super) fn materialize<B: Backend>(
    pool: &Pool<B>,
    f: &FileState,
    p: u64,
    scratch: &mut Vec<u8>,
) -> Result<Vec<u8>, DatalogError> {
    let mut page = vec![0u8; PAGE as usize];
    if let Some(state) = f.pages.get(&p) {
        if let Some(b) = state.base {
            pool.read_bytes(data_page(b.block, b.block_page), &mut page)?;
        }
        for e in &state.embeds {
            let payload = embed_payload(pool, f, e, scratch)?;
            page[e.page_off as usize..(e.page_off + e.len) as usize].copy_from_slice(payload);
        }
    }
    Ok(page)
}
