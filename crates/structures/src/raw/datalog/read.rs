//! Reads: a file page is its base page (if any) with its embedded entries merged over it in log
//! order, zeros where nothing was written. Embedded bytes are read from the log and their
//! checksums checked on every read (the read-path cost of embedding, Optane guide (FAST'20),
//! Sec. 5.1.2, Fig. 11), and a base page is read whole and checked against the CRC-32C its
//! extent recorded, even for a read of a few of its bytes: bytes corrupted after they were
//! written are reported ([`DatalogError::CorruptData`], [`DatalogError::CorruptEntry`]), never
//! returned.

use pmem_ordering::{Backend, Pool};

use super::entry::{checksum_holds, page_checksum};
use super::index::{BaseRef, EmbedRef, FileState};
use super::layout::{data_page, embed_entry_bytes, EntryImage, PAGE};
use super::namespace::file;
use super::{Datalog, DatalogError, FileId};

impl<B: Backend> Datalog<B> {
    /// Read up to `buf.len()` bytes at `offset`; returns how many were read (0 at or past the
    /// end). Embedded bytes are merged over their base page, their checksums and the base
    /// page's checked; after an error `buf` may hold part of the file, but never bytes of an
    /// entry or a data page that failed its checksum.
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
                        // A whole page goes straight to the caller's buffer, checked there.
                        Some(b) if len as u64 == PAGE => checked_base_page(pool, f, p, &b, out)?,
                        Some(b) => {
                            inner.page.resize(PAGE as usize, 0);
                            checked_base_page(pool, f, p, &b, &mut inner.page)?;
                            out.copy_from_slice(&inner.page[start as usize..start as usize + len]);
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

/// Read file page `p`'s base page `b` into `page` (a whole page) and check it against the
/// CRC-32C its extent recorded; on a mismatch `page` is zeroed (the damaged bytes go nowhere)
/// and [`DatalogError::CorruptData`] returned.
fn checked_base_page<B: Backend>(
    pool: &Pool<B>,
    f: &FileState,
    p: u64,
    b: &BaseRef,
    page: &mut [u8],
) -> Result<(), DatalogError> {
    let at = data_page(b.block, b.block_page);
    pool.read_bytes(at, page)?;
    if page_checksum(page) != b.crc {
        page.fill(0);
        return Err(f.corrupt_data(p, at));
    }
    Ok(())
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
            checked_base_page(pool, f, p, &b, &mut page)?;
        }
        for e in &state.embeds {
            let payload = embed_payload(pool, f, e, scratch)?;
            page[e.page_off as usize..(e.page_off + e.len) as usize].copy_from_slice(payload);
        }
    }
    Ok(page)
}
