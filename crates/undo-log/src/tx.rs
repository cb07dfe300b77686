//! A transaction's own work: snapshot, write, allocate, free, commit and abort.
//!
//! The protocol (Themis, Sec. II-A): before a range is written, its old bytes go to the lane's
//! log as one entry ([`OpenLog::append_with_intents`], non-temporal stores); the data is
//! written with temporal stores; at commit the allocator's metadata is published through the same log, the
//! data is flushed and fenced, then the lane's log is committed ([`OpenLog::commit`]). Abort
//! restores the snapshots through [`OpenLog::roll_back`]. The lane's format and generation are
//! `lane/`'s alone; this file decides *what* is logged and *when* the log is ordered before the
//! data.
//!
//! That ordering, *log entry before the data it protects*, is a non-temporal -> temporal
//! ordering (Themis, Sec. II-D, II-E); the [`FencePolicy`] decides how it is paid for. Running
//! the closure, flattening nested calls and choosing commit or abort is [`crate::Heap`]'s
//! (`heap.rs`).

use std::cell::RefCell;
use std::rc::Rc;

use pmem_ordering::{Backend, NtOrdering, NtPending, PPtr, Pending, Pool};

use crate::alloc::{Allocator, Block, MetaBytes, MetaWrite, Reservation};
use crate::lane::{Intent, Lane, OpenLog};
use crate::policy::FencePolicy;
use crate::TxError;

/// What a transaction needs of its heap, borrowed: three words to copy, where a [`crate::Heap`]
/// handle would cost two reference-count updates per clone.
pub(crate) struct HeapRef<'h, B: Backend> {
    pub pool: &'h Pool<B>,
    pub policy: FencePolicy,
    pub allocator: &'h Allocator,
}

impl<B: Backend> Clone for HeapRef<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for HeapRef<'_, B> {}

/// The DRAM state of one open transaction, shared by nested handles.
pub(crate) struct TxState {
    /// The transaction's undo log, in the lane it holds.
    pub log: OpenLog,
    /// Ranges snapshotted as (start, end), sorted by start, for the coverage check: a
    /// transaction's snapshots are few, so a sorted vector beats a tree.
    pub snapshots: Vec<(u64, u64)>,
    /// Ranges written, to flush at commit.
    pub written: Vec<(u64, u64)>,
    /// The newest log entry's token, not yet ordered before any data write.
    pub unordered_log: Option<NtPending>,
    /// Allocations reserved by this transaction (published at commit).
    pub allocs: Vec<Reservation>,
    /// Intents of allocations not logged yet: they go to the log in the copy of the next
    /// snapshot (or intent) entries, at the latest at commit, before the allocator's words are
    /// written (see [`Tx::alloc`]).
    pending_intents: Vec<(u64, Intent)>,
    /// Blocks freed by this transaction (published at commit).
    pub frees: Vec<Block>,
    /// Allocations this transaction freed again: given back only when it ends, since its log
    /// holds intents about their slots until then.
    pub cancelled: Vec<Reservation>,
    /// A nested transaction failed: the whole transaction must roll back.
    pub doomed: bool,
    /// Log-before-data (nt -> t) orderings that needed a fence under the x86 model, whether
    /// or not the policy issued it.
    pub nt_t_fences: u64,
    /// Scratch of [`Tx::snapshot_many`]: the ranges of the batch being logged.
    batch: Vec<(u64, u64)>,
    /// Scratch of [`Tx::snapshot_many`]: `snapshots` as they were before the batch, put back
    /// if the batch cannot be logged.
    snapshots_before: Vec<(u64, u64)>,
    /// Scratch of the commit: the allocator's metadata writes.
    meta_writes: Vec<MetaWrite>,
}

impl TxState {
    pub fn new(log: OpenLog) -> TxState {
        TxState {
            log,
            snapshots: Vec::new(),
            written: Vec::new(),
            unordered_log: None,
            allocs: Vec::new(),
            pending_intents: Vec::new(),
            frees: Vec::new(),
            cancelled: Vec::new(),
            doomed: false,
            nt_t_fences: 0,
            batch: Vec::new(),
            snapshots_before: Vec::new(),
            meta_writes: Vec::new(),
        }
    }

    /// Make this state, whose transaction has ended, the state of a new transaction on `lane`,
    /// keeping the capacity of its vectors: the heap reuses one state per thread, so a
    /// transaction allocates nothing once its thread's earlier ones have sized the buffers.
    /// Refused (the lane's header cannot be read), nothing changes.
    pub fn restart<B: Backend>(&mut self, lane: Lane, pool: &Pool<B>) -> Result<(), TxError> {
        lane.begin_in(pool, &mut self.log)?;
        self.snapshots.clear();
        self.written.clear();
        self.unordered_log = None;
        self.allocs.clear();
        self.pending_intents.clear();
        self.frees.clear();
        self.cancelled.clear();
        self.doomed = false;
        self.nt_t_fences = 0;
        self.batch.clear();
        self.snapshots_before.clear();
        self.meta_writes.clear();
        Ok(())
    }

    /// Whether `[offset, offset + len)` is covered (see [`TxState::covered`]); if not, note it
    /// as snapshotted. One search serves both.
    fn cover(&mut self, offset: u64, len: u64) -> bool {
        let end = offset + len;
        let at = self
            .snapshots
            .partition_point(|&(start, _)| start <= offset);
        if at > 0 && end <= self.snapshots[at - 1].1 || self.in_fresh_block(offset, len) {
            return true;
        }
        if at > 0 && self.snapshots[at - 1].0 == offset {
            self.snapshots[at - 1].1 = end;
        } else {
            self.snapshots.insert(at, (offset, end));
        }
        false
    }

    /// Whether `[offset, offset + len)` lies in one block this transaction allocated.
    fn in_fresh_block(&self, offset: u64, len: u64) -> bool {
        let end = offset + len;
        self.allocs
            .iter()
            .any(|r| offset >= r.offset && end <= r.offset + r.size)
    }

    /// Whether `[offset, offset + len)` lies in the one snapshot of this transaction with the
    /// greatest start at or before `offset`. A range covered only by two snapshots together
    /// is logged again, which is harmless.
    fn in_snapshot(&self, offset: u64, len: u64) -> bool {
        let at = self
            .snapshots
            .partition_point(|&(start, _)| start <= offset);
        at > 0 && offset + len <= self.snapshots[at - 1].1
    }

    /// Whether `[offset, offset + len)` is already covered by one snapshot or one fresh
    /// allocation of this transaction.
    fn covered(&self, offset: u64, len: u64) -> bool {
        self.in_snapshot(offset, len) || self.in_fresh_block(offset, len)
    }
}

/// A handle on the open transaction, given to the transaction's closure.
///
/// Every write of persistent data inside a transaction goes through it: [`Tx::write`]
/// snapshots what it overwrites (unless already snapshotted, or freshly allocated by this
/// transaction), so the transaction can be rolled back.
pub struct Tx<'h, B: Backend> {
    pub(crate) heap: HeapRef<'h, B>,
    pub(crate) state: Rc<RefCell<TxState>>,
}

impl<B: Backend> Tx<'_, B> {
    /// The pool this transaction runs on (for reads; write through the transaction).
    pub fn pool(&self) -> &Pool<B> {
        self.heap.pool
    }

    /// Log the current bytes of `[offset, offset + len)` so they can be restored. A range
    /// already covered by an earlier snapshot (or a fresh allocation) of this transaction is not
    /// logged again.
    pub fn snapshot(&self, offset: u64, len: u64) -> Result<(), TxError> {
        snapshot_in(self.heap, &mut self.state.borrow_mut(), offset, len)
    }

    /// Log the current bytes of every `(offset, len)` of `ranges`, as [`Tx::snapshot`] of each
    /// would, but as one batch: one prefetch pass over the old bytes, one non-temporal copy of
    /// all the entries into the log, and (under the strict and batched policies) one fence
    /// before the next write, instead of that work per range. Ranges already covered (by this
    /// transaction or earlier in `ranges`) and empty ones are skipped. All or nothing: if one
    /// range is outside the pool or the entries do not fit in the log, nothing is logged.
    ///
    /// Under [`FencePolicy::Strict`], whose point is a fence per entry, the ranges are logged
    /// one by one.
    pub fn snapshot_many(&self, ranges: &[(u64, u64)]) -> Result<(), TxError> {
        snapshot_many_in(self.heap, &mut self.state.borrow_mut(), ranges)
    }

    /// Write `bytes` at `offset` inside the transaction: snapshot the range if needed, then a
    /// temporal store, flushed at commit.
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<(), TxError> {
        write_in(self.heap, &mut self.state.borrow_mut(), offset, bytes)
    }

    /// Write a plain-data value at `offset` (see [`Tx::write`]).
    pub fn write_value<T: bytemuck::Pod>(&self, offset: u64, value: &T) -> Result<(), TxError> {
        self.write(offset, bytemuck::bytes_of(value))
    }

    /// Store a value where a persistent pointer points (see [`Tx::write`]).
    pub fn set<T: bytemuck::Pod>(&self, ptr: PPtr<T>, value: &T) -> Result<(), TxError> {
        self.write_value(ptr.offset(), value)
    }

    /// Read bytes (what this transaction wrote, if it wrote them).
    pub fn read_bytes(&self, offset: u64, buf: &mut [u8]) -> Result<(), TxError> {
        Ok(self.heap.pool.read_bytes(offset, buf)?)
    }

    /// Read a plain-data value.
    pub fn read<T: bytemuck::Pod>(&self, offset: u64) -> Result<T, TxError> {
        Ok(self.heap.pool.read(offset)?)
    }

    /// Read the value a persistent pointer points to.
    pub fn get<T: bytemuck::Pod>(&self, ptr: PPtr<T>) -> Result<T, TxError> {
        Ok(self.heap.pool.get(ptr)?)
    }

    /// Allocate `size` bytes, visible to other transactions only if this one commits. The
    /// block's contents are undefined: write them with [`Tx::write`] (no snapshot is taken of
    /// a fresh block). The entry that undoes the allocation takes log space when the
    /// transaction next logs (or commits), so a log too full for it refuses that step.
    pub fn alloc(&self, size: u64) -> Result<PPtr<u8>, TxError> {
        let reservation = self.heap.allocator.reserve(size)?;
        let offset = reservation.offset;
        let mut st = self.state.borrow_mut();
        let intent = self.heap.allocator.alloc_intent(&reservation);
        if self.heap.policy == FencePolicy::Strict {
            // A fence per entry, as the policy says.
            if let Err(e) = log_intents(self.heap, &mut st, &[intent]) {
                self.heap.allocator.cancel(reservation);
                return Err(e);
            }
        } else {
            // The intent only has to be in the log, ordered, before the commit writes the
            // allocator's words: it joins the copy of the next entries logged, which the next
            // ordering (a data write's, or the commit's) orders with them.
            st.pending_intents.push(intent);
        }
        st.allocs.push(reservation);
        Ok(PPtr::new(offset))
    }

    /// Allocate a block for a `T` and write `value` into it.
    pub fn alloc_value<T: bytemuck::Pod>(&self, value: &T) -> Result<PPtr<T>, TxError> {
        let p = self.alloc(std::mem::size_of::<T>() as u64)?.cast::<T>();
        self.set(p, value)?;
        Ok(p)
    }

    /// Free the block at `ptr` when this transaction commits.
    ///
    /// A published record block ([`crate::Heap::publish_record`]) may be freed too: a structure
    /// being removed frees its records in the transaction that removes it, and the bitmap change
    /// is logged like any other. A record block reserved or retired (not published) is refused
    /// with [`TxError::InvalidFree`].
    pub fn free<T>(&self, ptr: PPtr<T>) -> Result<(), TxError> {
        let offset = ptr.offset();
        let mut st = self.state.borrow_mut();
        if let Some(i) = st.allocs.iter().position(|r| r.offset == offset) {
            // Allocated and freed by this transaction: it never becomes visible.
            let r = st.allocs.swap_remove(i);
            st.cancelled.push(r);
            return Ok(());
        }
        if st.frees.iter().any(|b| b.offset == offset) {
            return Err(TxError::InvalidFree {
                offset,
                reason: "it was already freed by this transaction",
            });
        }
        let block = self.heap.allocator.live_block(offset)?;
        let logged = self
            .heap
            .allocator
            .free_intents(self.heap.pool, &block)
            .and_then(|intents| log_intents(self.heap, &mut st, &intents));
        if let Err(e) = logged {
            self.heap.allocator.unclaim(&block);
            return Err(e);
        }
        st.frees.push(block);
        Ok(())
    }
}

/// Snapshot `[offset, offset + len)` into the transaction's log (see [`Tx::snapshot`]).
fn snapshot_in<B: Backend>(
    heap: HeapRef<'_, B>,
    st: &mut TxState,
    offset: u64,
    len: u64,
) -> Result<(), TxError> {
    let pool = heap.pool;
    pool.check_range(offset, len)?;
    if len == 0 || st.covered(offset, len) {
        return Ok(());
    }
    let token = st
        .log
        .append_with_intents(pool, &st.pending_intents, &[(offset, len)])?;
    st.pending_intents.clear();
    // Noted only once logged: a refused entry leaves the range uncovered.
    st.cover(offset, len);
    match heap.policy {
        FencePolicy::Strict => {
            pool.fence(token);
            st.nt_t_fences += 1;
        }
        // Keep only the newest token: ordering it orders every older entry too (the fence
        // epoch covers them; under Themis, program order does).
        _ => st.unordered_log = Some(token),
    }
    Ok(())
}

/// Snapshot every range of `ranges` as one batch (see [`Tx::snapshot_many`]).
fn snapshot_many_in<B: Backend>(
    heap: HeapRef<'_, B>,
    st: &mut TxState,
    ranges: &[(u64, u64)],
) -> Result<(), TxError> {
    let pool = heap.pool;
    for &(offset, len) in ranges {
        pool.check_range(offset, len)?;
    }
    if heap.policy == FencePolicy::Strict {
        return ranges
            .iter()
            .try_for_each(|&(offset, len)| snapshot_in(heap, st, offset, len));
    }
    // Each range is noted as snapshotted as it joins the batch, so a later range of the batch
    // that an earlier one covers is left out by the same search; if the batch is refused, the
    // notes are put back as they were.
    st.snapshots_before.clear();
    st.snapshots_before.extend_from_slice(&st.snapshots);
    st.batch.clear();
    for &(offset, len) in ranges {
        if len != 0 && !st.cover(offset, len) {
            st.batch.push((offset, len));
        }
    }
    if st.batch.is_empty() {
        return Ok(());
    }
    match st
        .log
        .append_with_intents(pool, &st.pending_intents, &st.batch)
    {
        Ok(token) => {
            st.pending_intents.clear();
            // Ordered, like a single entry's, at the next data write (the batch is one token).
            st.unordered_log = Some(token);
            Ok(())
        }
        Err(e) => {
            std::mem::swap(&mut st.snapshots, &mut st.snapshots_before);
            Err(e)
        }
    }
}

/// Log the intents that undo an allocation's or a free's metadata writes (made at commit), as
/// one batch ordered like a snapshot.
fn log_intents<B: Backend>(
    heap: HeapRef<'_, B>,
    st: &mut TxState,
    intents: &[(u64, Intent)],
) -> Result<(), TxError> {
    let token = if st.pending_intents.is_empty() {
        st.log.append_intents(heap.pool, intents)?
    } else {
        let pending = st.pending_intents.len();
        st.pending_intents.extend_from_slice(intents);
        let logged = st.log.append_intents(heap.pool, &st.pending_intents);
        // Refused, the pending intents stay pending and the new ones are the caller's.
        st.pending_intents.truncate(pending);
        let token = logged?;
        st.pending_intents.clear();
        token
    };
    match heap.policy {
        FencePolicy::Strict => {
            heap.pool.fence(token);
            st.nt_t_fences += 1;
        }
        _ => st.unordered_log = Some(token),
    }
    Ok(())
}

/// Order the pending log entries before the data write about to happen.
fn order_log_before_data<B: Backend>(heap: HeapRef<'_, B>, st: &mut TxState) {
    if let Some(token) = st.unordered_log.take() {
        match heap.pool.order_after_as(token, heap.policy.persist_model()) {
            NtOrdering::AlreadyFenced => {}
            NtOrdering::Fenced | NtOrdering::ThemisProgramOrder | NtOrdering::Unordered => {
                st.nt_t_fences += 1
            }
        }
    }
}

/// Snapshot if needed, order the log before the data, write (see [`Tx::write`]).
fn write_in<B: Backend>(
    heap: HeapRef<'_, B>,
    st: &mut TxState,
    offset: u64,
    bytes: &[u8],
) -> Result<(), TxError> {
    let len = bytes.len() as u64;
    // A block this transaction allocated needs neither a snapshot nor the log ordered before
    // it: if the transaction rolls back the block is free, and what it holds means nothing.
    if !st.in_fresh_block(offset, len) {
        // A range a snapshot covers lies in the pool (it was checked when logged), so the
        // common case, writing what was snapshotted, skips the range check and the append.
        if !st.in_snapshot(offset, len) {
            snapshot_in(heap, st, offset, len)?;
        }
        order_log_before_data(heap, st);
    }
    let _ = heap.pool.write(offset, bytes)?;
    note_written(&mut st.written, offset, len);
    Ok(())
}

/// Note `[offset, offset + len)` as written, to flush at commit (an empty write needs no
/// flush). A write that continues the previous one, or whose cache lines overlap or adjoin the
/// previous write's, joins it, so the commit flushes them as one range: each line once, and no
/// line that neither write touched (the union of two runs of lines that overlap or adjoin is
/// one run).
#[inline]
fn note_written(written: &mut Vec<(u64, u64)>, offset: u64, len: u64) {
    const LINE_SHIFT: u32 = 6;
    if len == 0 {
        return;
    }
    let end = offset + len;
    // Every noted range is non-empty.
    if let Some((start, length)) = written.last_mut() {
        let prev_end = *start + *length;
        if prev_end == offset {
            *length += len;
            return;
        }
        let touching = offset >> LINE_SHIFT <= ((prev_end - 1) >> LINE_SHIFT) + 1
            && *start >> LINE_SHIFT <= ((end - 1) >> LINE_SHIFT) + 1;
        if touching {
            let union_start = (*start).min(offset);
            *length = prev_end.max(end) - union_start;
            *start = union_start;
            return;
        }
    }
    written.push((offset, len));
}

/// Commit the transaction: publish allocator metadata, persist the data, invalidate the log.
pub(crate) fn commit<B: Backend>(heap: HeapRef<'_, B>, st: &mut TxState) -> Result<(), TxError> {
    let pool = heap.pool;
    // Allocator metadata changes are logged and written now, under the allocator's lock, which
    // is held until the commit below is durable, so no other transaction touches those words
    // in between.
    if !st.pending_intents.is_empty() {
        // Allocations since the last entries logged: their intents go first, ordered below
        // with the rest before the allocator's words are written.
        log_intents(heap, st, &[])?;
    }
    let mut meta = std::mem::take(&mut st.meta_writes);
    let publish = heap.allocator.publish(&st.allocs, &st.frees, &mut meta)?;
    if !meta.is_empty() {
        // The intents that undo these writes are in the log: order them before the writes (no
        // fence if one was issued since they were logged; see `alloc/publish.rs`).
        order_log_before_data(heap, st);
    }
    for w in &meta {
        if let Err(e) = write_meta(heap, st, w) {
            // The log is full (say): restore the metadata words already written while the
            // lock is still held. Once it is released, another transaction may log and change
            // the same words, and restoring them after that would undo its change.
            undo(heap, st, true)?;
            return Err(e);
        }
    }
    st.meta_writes = meta;
    // A batched transaction that writes pays three fences, and none can go under the x86
    // model (`tests/integration/fences.rs` counts them): the log before the data (nt stores and later
    // temporal stores reach persistence in any order, `order_log_before_data`), this one, the
    // data before the commit word (`clwb`s of the data and the store of the commit word are
    // unordered without it, and a commit that persists before the data would keep torn data),
    // and the commit's own (a transaction that returns `Ok` is durable: `Heap::transaction`).
    // Only Themis's program order drops the first.
    let mut pending: Option<Pending> = st.unordered_log.take().map(Pending::from);
    for &(offset, len) in &st.written {
        let p = pool.flush_range(offset, len)?;
        pending = Some(match pending {
            None => p,
            Some(prev) => prev.and(p),
        });
    }
    if let Some(p) = pending {
        pool.fence(p);
    }
    st.log.commit(pool)?;
    publish.committed(&st.allocs, &st.frees);
    st.allocs.clear();
    for r in st.cancelled.drain(..) {
        heap.allocator.cancel(r);
    }
    Ok(())
}

/// Make one of the commit's allocator metadata writes.
fn write_meta<B: Backend>(
    heap: HeapRef<'_, B>,
    st: &mut TxState,
    w: &MetaWrite,
) -> Result<(), TxError> {
    let word;
    let zeros;
    let bytes: &[u8] = match w.bytes {
        MetaBytes::Word(value) => {
            word = value.to_le_bytes();
            &word
        }
        MetaBytes::Zeros(len) => {
            zeros = vec![0u8; len as usize];
            &zeros
        }
    };
    if w.logged {
        write_in(heap, st, w.offset, bytes)
    } else {
        // Metadata of a chunk this transaction takes from the free pool, or a word an intent
        // logged earlier undoes: no snapshot. (If the transaction rolls back, a fresh chunk is
        // free again and its bytes mean nothing.)
        let _ = heap.pool.write(w.offset, bytes)?;
        note_written(&mut st.written, w.offset, bytes.len() as u64);
        Ok(())
    }
}

/// Roll the transaction back: restore every snapshot and clean the lane, then give back
/// reserved allocations.
pub(crate) fn abort<B: Backend>(heap: HeapRef<'_, B>, st: &mut TxState) -> Result<(), TxError> {
    undo(heap, st, false)?;
    for r in st.allocs.drain(..).chain(st.cancelled.drain(..)) {
        heap.allocator.cancel(r);
    }
    for b in st.frees.drain(..) {
        heap.allocator.unclaim(&b);
    }
    Ok(())
}

/// Restore every snapshot of the transaction and clean its lane: the persistent half of an
/// abort. Once it has succeeded the transaction has no log entries left, so a second call (the
/// abort after a commit that failed and undid itself) does nothing.
/// `published`: the commit has written the allocator's words (and holds its lock), so the
/// intents are undone too; before that, those words are not this transaction's to write.
fn undo<B: Backend>(
    heap: HeapRef<'_, B>,
    st: &mut TxState,
    published: bool,
) -> Result<(), TxError> {
    let pool = heap.pool;
    // Make the entries durable before restoring over them (only matters if we crash mid-abort:
    // recovery then needs them).
    if let Some(token) = st.unordered_log.take() {
        pool.fence(token);
    }
    st.log.roll_back(pool, published)
}

#[cfg(test)]
mod tests;
