//! The heap: a pool formatted with transaction lanes and an allocator.
//!
//! This file creates and opens a heap (opening recovers every lane a crash left
//! mid-transaction, through `lane/`, then rebuilds the allocator), hands lanes to transactions,
//! and runs a transaction: it begins the lane's log, flattens nested calls, and chooses commit
//! or abort (whose steps are `tx.rs`'s), counting [`TxStats`].

mod records;

use std::cell::RefCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use pmem_ordering::{thread_stats, Backend, Hardware, Pool};

use crate::alloc::{AllocStats, Allocator};
use crate::lane::Lane;
use crate::layout::{HeapConfig, Layout};
use crate::policy::FencePolicy;
use crate::tx::{self, HeapRef, Tx, TxState};
use crate::TxError;

/// Totals over the transactions of one heap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Transactions committed.
    pub committed: u64,
    /// Transactions rolled back (an `Err`, a panic, or a failed nested transaction).
    pub aborted: u64,
    /// Fences the transactions issued.
    pub fences: u64,
    /// Of the fences a transaction needs under the x86 model, those that only order a log
    /// entry before data (nt -> t): the ones Themis removes (Themis, Sec. II-D).
    pub nt_t_fences: u64,
}

impl TxStats {
    /// Fences per committed or aborted transaction.
    pub fn fences_per_tx(&self) -> f64 {
        self.fences as f64 / (self.committed + self.aborted).max(1) as f64
    }
}

#[derive(Default)]
struct Counters {
    committed: AtomicU64,
    aborted: AtomicU64,
    fences: AtomicU64,
    nt_t_fences: AtomicU64,
}

thread_local! {
    /// The open transaction of each heap on this thread, for flattening nested calls.
    static ACTIVE: RefCell<Vec<(u64, Rc<RefCell<TxState>>)>> = const { RefCell::new(Vec::new()) };
    /// The state of this thread's last ended transaction, kept for the next one: its buffers
    /// (log encoding, snapshot and write lists) keep their capacity, so a transaction allocates
    /// nothing once the thread's earlier ones have sized them.
    static SPARE: RefCell<Option<Rc<RefCell<TxState>>>> = const { RefCell::new(None) };
}

/// A state for a new transaction on `lane`: this thread's spare one if it has one.
fn fresh_state<B: Backend>(lane: Lane, pool: &Pool<B>) -> Result<Rc<RefCell<TxState>>, TxError> {
    match SPARE.with(|s| s.borrow_mut().take()) {
        Some(state) => {
            let restarted = state.borrow_mut().restart(lane, pool);
            match restarted {
                Ok(()) => Ok(state),
                Err(e) => {
                    // Unchanged by the refused restart: still good for the next transaction.
                    keep_spare(state);
                    Err(e)
                }
            }
        }
        None => Ok(Rc::new(RefCell::new(TxState::new(lane.begin(pool)?)))),
    }
}

/// Keep the state of an ended transaction as this thread's spare, if no handle holds it still.
fn keep_spare(state: Rc<RefCell<TxState>>) {
    if Rc::strong_count(&state) == 1 {
        SPARE.with(|s| *s.borrow_mut() = Some(state));
    }
}

fn next_heap_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A pool formatted for undo-log transactions and allocation.
///
/// ```
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig, TxError};
/// use pmem_ordering::{Pool, PoolOptions};
///
/// let pool = Pool::anonymous("bank", 4 << 20, &PoolOptions::new())?;
/// let config = HeapConfig { lanes: 2, lane_log_bytes: 4096, chunk_size: 64 << 10 };
/// let heap: Heap = Heap::create(pool, config, FencePolicy::Batched)?;
/// let accounts = heap.pool().root_offset();
/// heap.transaction(|tx| {
///     tx.write_value(accounts, &100u64)?;
///     tx.write_value(accounts + 8, &0u64)
/// })?;
/// // Move 30 from the first account to the second: all or nothing.
/// heap.transaction(|tx| {
///     let a: u64 = tx.read(accounts)?;
///     let b: u64 = tx.read(accounts + 8)?;
///     tx.write_value(accounts, &(a - 30))?;
///     tx.write_value(accounts + 8, &(b + 30))
/// })?;
/// assert_eq!(heap.pool().read::<[u64; 2]>(accounts)?, [70, 30]);
/// # Ok::<(), TxError>(())
/// ```
///
/// A `Heap` is a handle: cloning it is cheap and gives another handle to the same heap (one
/// allocator, one set of lanes, one pool), so structures each hold their own clone, with no
/// lifetime tying them to the first handle. The pool lives until the last handle (and the
/// last other owner of the pool) is dropped.
pub struct Heap<B: Backend = Hardware> {
    /// Inline beside the shared part: every access to the heap's data goes through it.
    pool: Arc<Pool<B>>,
    shared: Arc<HeapShared>,
}

/// What every handle of one heap shares.
struct HeapShared {
    layout: Layout,
    policy: FencePolicy,
    allocator: Allocator,
    lanes: Mutex<LanePool>,
    lane_freed: Condvar,
    counters: Counters,
    id: u64,
}

impl<B: Backend> Clone for Heap<B> {
    fn clone(&self) -> Self {
        Heap {
            pool: self.pool.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<B: Backend> Heap<B> {
    /// Format `pool` (from its heap offset on) with `config`, record `policy` in its superblock,
    /// and open it. Fails with [`TxError::AlreadyFormatted`] rather than format a pool twice.
    /// `pool` is a pool or a shared one (`Arc<Pool<B>>`).
    pub fn create(
        pool: impl Into<Arc<Pool<B>>>,
        config: HeapConfig,
        policy: FencePolicy,
    ) -> Result<Heap<B>, TxError> {
        let pool = pool.into();
        let layout = Layout::plan(pool.heap_offset(), pool.size(), &config)?;
        match Layout::read(&pool, layout.superblock) {
            Err(TxError::NotFormatted) => {}
            Ok(_) | Err(TxError::BadSuperblock { .. }) => return Err(TxError::AlreadyFormatted),
            Err(e) => return Err(e),
        }
        // The allocator's table first, the superblock (magic last) after: a crash in between
        // leaves a pool that reads as not formatted.
        Allocator::format(&pool, &layout)?;
        layout.format(&pool, policy)?;
        Heap::open(pool.clone())
    }

    /// Open the heap in `pool` under the fence policy its superblock records: roll back every
    /// lane's unfinished transaction, then rebuild the allocator's DRAM state from its
    /// persistent metadata. `pool` is a pool or a shared one (`Arc<Pool<B>>`).
    pub fn open(pool: impl Into<Arc<Pool<B>>>) -> Result<Heap<B>, TxError> {
        let pool = pool.into();
        let (layout, policy) = Layout::read(&pool, pool.heap_offset())?;
        for lane in 0..layout.lanes as usize {
            layout.lane(lane).recover(&pool)?;
        }
        let allocator = Allocator::open(&pool, layout)?;
        Ok(Heap {
            pool,
            shared: Arc::new(HeapShared {
                lanes: Mutex::new(LanePool {
                    free: (0..layout.lanes as usize).rev().collect(),
                    waiting: 0,
                }),
                lane_freed: Condvar::new(),
                layout,
                policy,
                allocator,
                counters: Counters::default(),
                id: next_heap_id(),
            }),
        })
    }

    /// The pool.
    ///
    /// Every access through it is race-free, the lane logs' streaming stores included (whole
    /// words, atomic: [`Pool::nt_write`]); but the heap's metadata and lane logs belong to the
    /// heap: a write there voids its crash consistency, and a lane log read while a transaction
    /// of another thread writes it shows a log in the making.
    pub fn pool(&self) -> &Pool<B> {
        &self.pool
    }

    /// Give the pool back (e.g. to reopen it) if this is the heap's last handle, else this
    /// handle back: a structure still holding a clone would go on using this heap's DRAM state
    /// (allocator, lanes) beside the reopened one's.
    pub fn into_pool(self) -> Result<Arc<Pool<B>>, Heap<B>> {
        if Arc::strong_count(&self.shared) == 1 {
            Ok(self.pool)
        } else {
            Err(self)
        }
    }

    /// The parts a transaction needs.
    pub(crate) fn parts(&self) -> HeapRef<'_, B> {
        HeapRef {
            pool: &self.pool,
            policy: self.shared.policy,
            allocator: &self.shared.allocator,
        }
    }

    /// Where the heap's parts are.
    pub fn layout(&self) -> &Layout {
        &self.shared.layout
    }

    /// The fence policy the heap's superblock records.
    pub fn policy(&self) -> FencePolicy {
        self.shared.policy
    }

    /// Allocator usage.
    pub fn alloc_stats(&self) -> AllocStats {
        self.shared.allocator.stats()
    }

    /// Walk the heap and check its metadata against itself and the DRAM state; returns every
    /// committed block (published record blocks included) as `(offset, size)`.
    pub fn check_heap(&self) -> Result<Vec<(u64, u64)>, TxError> {
        self.shared.allocator.check(&self.pool)
    }

    /// The size of the block a committed transaction allocated (or the published record
    /// block) at `offset`, or `None` if no block starts there: lets a structure check, at open,
    /// that the offsets it reads from the pool name blocks it owns.
    pub fn block_size(&self, offset: u64) -> Option<u64> {
        self.shared.allocator.block_size(offset)
    }

    /// Totals over this heap's transactions (those of every handle to it).
    pub fn tx_stats(&self) -> TxStats {
        let c = &self.shared.counters;
        TxStats {
            committed: c.committed.load(Ordering::Relaxed),
            aborted: c.aborted.load(Ordering::Relaxed),
            fences: c.fences.load(Ordering::Relaxed),
            nt_t_fences: c.nt_t_fences.load(Ordering::Relaxed),
        }
    }

    fn acquire_lane(&self) -> usize {
        let mut lanes = self.shared.lanes.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(lane) = lanes.free.pop() {
                return lane;
            }
            lanes.waiting += 1;
            lanes = self
                .shared
                .lane_freed
                .wait(lanes)
                .unwrap_or_else(|p| p.into_inner());
            lanes.waiting -= 1;
        }
    }

    fn release_lane(&self, lane: usize) {
        let mut lanes = self.shared.lanes.lock().unwrap_or_else(|p| p.into_inner());
        lanes.free.push(lane);
        // Waking costs a system call: only when a thread waits for a lane.
        if lanes.waiting > 0 {
            self.shared.lane_freed.notify_one();
        }
    }

    /// Run `f` as one transaction: all its writes persist together, or none does.
    ///
    /// `f` returning `Err`, or panicking, rolls every write back (the panic then continues).
    /// A call made inside `f` on the same heap joins this transaction instead of starting
    /// another (nested transactions flatten); if that inner call fails, the whole transaction
    /// rolls back and the outer call returns [`TxError::NestedAborted`] even if `f` recovered
    /// from the error. When a transaction with writes returns `Ok`, they are durable.
    pub fn transaction<R, E: From<TxError>>(
        &self,
        f: impl FnOnce(&Tx<'_, B>) -> Result<R, E>,
    ) -> Result<R, E> {
        let nested = ACTIVE.with(|a| {
            a.borrow()
                .iter()
                .find(|(id, _)| *id == self.shared.id)
                .map(|(_, s)| s.clone())
        });
        if let Some(state) = nested {
            let tx = Tx {
                heap: self.parts(),
                state,
            };
            // A nested failure dooms the whole transaction, even if the outer closure
            // swallows it: an `Err`, or a panic it catches.
            let result = catch_unwind(AssertUnwindSafe(|| f(&tx)));
            if !matches!(result, Ok(Ok(_))) {
                tx.state.borrow_mut().doomed = true;
            }
            return result.unwrap_or_else(|panic| resume_unwind(panic));
        }

        let lane = self.acquire_lane();
        let state = match fresh_state(self.shared.layout.lane(lane), &self.pool) {
            Ok(state) => state,
            Err(e) => {
                self.release_lane(lane);
                return Err(E::from(e));
            }
        };
        let before = thread_stats();
        ACTIVE.with(|a| a.borrow_mut().push((self.shared.id, state.clone())));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            f(&Tx {
                heap: self.parts(),
                state: state.clone(),
            })
        }));
        ACTIVE.with(|a| a.borrow_mut().retain(|(id, _)| *id != self.shared.id));
        let mut st = state.borrow_mut();
        let result = match outcome {
            Ok(Ok(value)) if !st.doomed => match tx::commit(self.parts(), &mut st) {
                Ok(()) => Ok(value),
                Err(commit_error) => Err(match tx::abort(self.parts(), &mut st) {
                    Ok(()) => commit_error,
                    Err(abort_error) => abort_error,
                }),
            },
            Ok(Ok(_)) => tx::abort(self.parts(), &mut st).and(Err(TxError::NestedAborted)),
            Ok(Err(user_error)) => {
                let rolled_back = tx::abort(self.parts(), &mut st);
                self.finish(lane, before, st.nt_t_fences, false);
                drop(st);
                keep_spare(state);
                return match rolled_back {
                    Ok(()) => Err(user_error),
                    Err(e) => Err(E::from(e)),
                };
            }
            Err(panic) => {
                // Roll back before the panic goes on; if that fails too, recovery at the next
                // open rolls the lane back.
                let _ = tx::abort(self.parts(), &mut st);
                let nt_t = st.nt_t_fences;
                drop(st);
                self.finish(lane, before, nt_t, false);
                resume_unwind(panic);
            }
        };
        self.finish(lane, before, st.nt_t_fences, result.is_ok());
        drop(st);
        keep_spare(state);
        result.map_err(E::from)
    }

    fn finish(&self, lane: usize, before: pmem_ordering::Stats, nt_t_fences: u64, committed: bool) {
        let delta = thread_stats() - before;
        let c = &self.shared.counters;
        if committed {
            c.committed.fetch_add(1, Ordering::Relaxed);
        } else {
            c.aborted.fetch_add(1, Ordering::Relaxed);
        }
        c.fences.fetch_add(delta.fences, Ordering::Relaxed);
        c.nt_t_fences.fetch_add(nt_t_fences, Ordering::Relaxed);
        self.release_lane(lane);
    }
}

/// The lanes no transaction holds, and how many threads wait for one.
struct LanePool {
    free: Vec<usize>,
    waiting: usize,
}
