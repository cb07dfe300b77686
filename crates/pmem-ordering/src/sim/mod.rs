//! The crash simulator: a backend that records every persistence event, and a harness that
//! replays the crashes the x86 persistency model allows.
//!
//! # Semantics
//!
//! The rules are those of the x86 persistency model as the Themis paper (Mahdizadeh Shahri et
//! al., "(Almost) Fence-less Persist Ordering"; the key to cited papers is `docs/papers.md`)
//! states them in Sec. II-C, and of its Themis extension in Sec. III-B (Eq. 1-4):
//!
//! * **Failure atomicity.** Every store is recorded as *chunks*: the bytes it writes inside one
//!   naturally aligned 8-byte word. A chunk persists whole or not at all; nothing larger does.
//!   A 64-byte copy is eight chunks.
//! * **Temporal stores** are pending on their cache line, in program order, until they are
//!   guaranteed persistent: by `clwb`/`clflushopt` of the line followed by a fence *of the
//!   flushing thread* (the flush covers every store on the line made before it, by any thread;
//!   Eq. 1), or by `clflush` of the line (ordered, no fence needed).
//! * **The prefix rule.** A cache line written back carries a prefix of its pending stores
//!   (x86-TSO keeps one line's stores in order), so a crash image includes, per line, any
//!   prefix of that line's pending stores. In *torn-line mode* ([`SimConfig::torn_lines`]) it
//!   includes any subset instead.
//! * **Non-temporal stores** are pending until a fence of the storing thread (Eq. 2); a crash
//!   image includes any subset of them.
//! * **Themis.** Under [`PersistModel::Themis`], an nt-store persists no later than any later
//!   temporal store of its thread (Eq. 3): a crash image that includes a temporal store
//!   includes every older pending nt-store of the same thread, and a temporal store made
//!   persistent by a flush and fence takes those nt-stores with it. [`PersistModel::X86`] and
//!   [`PersistModel::Ideal`] crash under plain x86 rules (the ideal model issues no nt -> t
//!   fence, so its images show what that costs).
//!
//! A crash *after event k* leaves the persisted image of the first k events plus one of the
//! choices above. The harness ([`CrashTest`]) draws images at random from a seed, always adds
//! the two extremes (no pending store persisted; every pending store persisted), and
//! enumerates all of them when there are few enough.
//!
//! The backend also reports what pmemcheck would ([`Finding`]): a store not yet persistent when
//! the operation that made it returns, a flush of a line with nothing pending, a fence with
//! nothing pending.

mod event;
mod harness;
mod report;
mod rng;
mod state;

pub use event::{Chunk, Event};
pub use harness::{CrashPoints, CrashTest, Images};
pub use report::{Crash, CrashFailure, ImageKind, RecoveryCrash, Report};
pub use rng::SplitMix64;
pub use state::LineChoice;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use crate::backend::{Backend, Granularity};
use crate::barrier::PersistModel;
use crate::isa::{self, FlushKind, CACHE_LINE};
use crate::pool::mapping::Mapping;
use crate::pool::{Header, Pool, PoolError};
use crate::stats;
use state::{Observation, PersistState};

/// How a simulated pool behaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// The persistency model: decides which fences the pool issues and which crash images are
    /// legal.
    pub model: PersistModel,
    /// Tear lines at 8-byte granularity: drop the prefix rule (a paranoid mode).
    pub torn_lines: bool,
    /// The flush instruction simulated: `Clflush` persists at once, the others at the next fence.
    pub flush: FlushKind,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            model: PersistModel::X86,
            torn_lines: false,
            flush: FlushKind::Clwb,
        }
    }
}

impl SimConfig {
    /// The x86 model with `clwb`.
    pub fn x86() -> SimConfig {
        SimConfig::default()
    }

    /// The Themis model with `clwb`.
    pub fn themis() -> SimConfig {
        SimConfig {
            model: PersistModel::Themis,
            ..SimConfig::default()
        }
    }

    /// The same configuration in torn-line mode.
    pub fn torn(self) -> SimConfig {
        SimConfig {
            torn_lines: true,
            ..self
        }
    }
}

/// A problem of the kind pmemcheck reports, found while a workload ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// An operation returned while stores its thread made were not yet guaranteed persistent.
    Unpersisted {
        /// Event index of the operation's end.
        event: u64,
        /// Which operation (0-based, in completion order).
        operation: u64,
        /// Offsets of the lines with pending temporal stores of the thread.
        lines: Vec<u64>,
        /// Offsets of the words with pending non-temporal stores of the thread.
        nt_words: Vec<u64>,
    },
    /// A flush of a line with no pending store.
    FlushOfCleanLine {
        /// Event index of the flush.
        event: u64,
        /// Offset of the line.
        line: u64,
    },
    /// A fence with no flush or nt-store of its thread pending.
    FenceWithNothingPending {
        /// Event index of the fence.
        event: u64,
    },
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Unpersisted {
                event,
                operation,
                lines,
                nt_words,
            } => {
                write!(
                    f,
                    "operation {operation} returned (event {event}) with stores not persistent:"
                )?;
                for l in lines {
                    write!(f, " line {l:#x}")?;
                }
                for w in nt_words {
                    write!(f, " nt word {w:#x}")?;
                }
                Ok(())
            }
            Finding::FlushOfCleanLine { event, line } => {
                write!(
                    f,
                    "event {event}: flush of line {line:#x}, which has no pending store"
                )
            }
            Finding::FenceWithNothingPending { event } => {
                write!(
                    f,
                    "event {event}: fence with no flush or nt-store of its thread pending"
                )
            }
        }
    }
}

struct SimState {
    /// The pool's bytes when tracing began: the first crash image.
    initial: Vec<u8>,
    trace: Vec<Event>,
    live: PersistState,
    findings: Vec<Finding>,
}

/// The simulated backend: writes the pool's memory like the hardware, and records every store,
/// flush and fence so the harness can rebuild any crash image.
///
/// Invariant: `base .. base + len` is the mapping of the pool that owns this backend. Only this
/// module's pool constructors make a `SimBackend`, each from its pool's `Mapping`, and the
/// pool never gives its backend away (only `&SimBackend`), so the range stays mapped for as long
/// as the backend can be reached.
pub struct SimBackend {
    /// The mapping's address, its provenance exposed (an integer keeps the backend `Send` and
    /// `Sync`); only [`SimBackend::checkpoint`] turns it back into a pointer.
    base: usize,
    len: usize,
    config: SimConfig,
    /// False for the harness's recovery pools: memory is written, nothing is recorded.
    traced: bool,
    state: Mutex<SimState>,
}

/// A small, stable id per thread for the trace.
fn sim_thread_id() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static ID: u32 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

impl SimBackend {
    /// A tracing backend for the pool that will own `map`, starting from its current bytes.
    fn new(map: &Mapping, config: SimConfig) -> SimBackend {
        let len = map.len();
        let mut initial = vec![0u8; len];
        // SAFETY: `map` is a live mapping of `len` bytes for the duration of the borrow.
        unsafe { crate::mem::load_bytes(map.base(), &mut initial) };
        SimBackend {
            base: map.base().expose_provenance(),
            len,
            config,
            traced: true,
            state: Mutex::new(SimState {
                live: PersistState::new(initial.clone(), config.model, config.torn_lines),
                initial,
                trace: Vec::new(),
                findings: Vec::new(),
            }),
        }
    }

    /// A backend that writes memory but records nothing: the harness runs recovery on one per
    /// crash image, where copying the image into a shadow state would dominate the cost.
    fn untraced(map: &Mapping, config: SimConfig) -> SimBackend {
        SimBackend {
            base: map.base().expose_provenance(),
            len: map.len(),
            config,
            traced: false,
            state: Mutex::new(SimState {
                live: PersistState::new(Vec::new(), config.model, config.torn_lines),
                initial: Vec::new(),
                trace: Vec::new(),
                findings: Vec::new(),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> SimConfig {
        self.config
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        // A panic in a workload thread must not hide the trace from the harness.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn offset_of(&self, p: *const u8) -> u64 {
        let off = (p as usize).wrapping_sub(self.base);
        debug_assert!(off <= self.len, "address outside the simulated pool");
        off as u64
    }

    fn record(&self, state: &mut SimState, event: Event) {
        let index = state.live.applied;
        match state.live.apply(&event) {
            Observation::Nothing => {}
            Observation::FlushOfCleanLine(line) => {
                stats::count_redundant_flush();
                state.findings.push(Finding::FlushOfCleanLine {
                    event: index,
                    line: line * CACHE_LINE as u64,
                });
            }
            Observation::FenceWithNothingPending => state
                .findings
                .push(Finding::FenceWithNothingPending { event: index }),
            Observation::Unpersisted { lines, nt_words } => {
                state.findings.push(Finding::Unpersisted {
                    event: index,
                    operation: state.live.operations - 1,
                    lines: lines.into_iter().map(|l| l * CACHE_LINE as u64).collect(),
                    nt_words,
                })
            }
        }
        state.trace.push(event);
    }

    fn record_stores(&self, state: &mut SimState, dst: *const u8, src: &[u8], nt: bool) {
        let thread = sim_thread_id();
        for chunk in Chunk::split(self.offset_of(dst), src) {
            let event = if nt {
                Event::NtStore { thread, chunk }
            } else {
                Event::Store { thread, chunk }
            };
            self.record(state, event);
        }
    }

    /// Write `src` at `dst` and, when tracing, record it as (non-)temporal stores. The write and
    /// the record happen under the state lock, so the trace's order is the memory's order.
    ///
    /// # Safety
    /// `dst .. dst + src.len()` lies inside the pool's mapping.
    unsafe fn write_and_record(&self, dst: *mut u8, src: &[u8], nt: bool) {
        let mut st = self.traced.then(|| self.lock());
        // SAFETY: in range by the caller's contract.
        unsafe { crate::mem::store_bytes(dst, src) };
        if let Some(st) = st.as_mut() {
            self.record_stores(st, dst, src, nt);
        }
    }

    /// Record an event of the calling thread, when tracing.
    fn record_own(&self, event: impl FnOnce(u32) -> Event) {
        if self.traced {
            let mut st = self.lock();
            self.record(&mut st, event(sim_thread_id()));
        }
    }

    /// Events recorded so far (always 0 for the harness's recovery pools, which record
    /// nothing).
    pub fn event_count(&self) -> u64 {
        self.lock().trace.len() as u64
    }

    /// A copy of the trace.
    pub fn trace(&self) -> Vec<Event> {
        self.lock().trace.clone()
    }

    /// What the simulator has found so far.
    pub fn findings(&self) -> Vec<Finding> {
        self.lock().findings.clone()
    }

    /// The image a crash right now would leave if nothing pending persisted.
    pub fn persisted_image(&self) -> Vec<u8> {
        self.lock().live.persisted.clone()
    }

    /// Treat everything written so far as persistent and start a new trace from here (e.g.
    /// after a workload's set-up, whose crashes are not under test).
    pub fn checkpoint(&self) {
        let mut st = self.lock();
        let mut now = vec![0u8; self.len];
        // SAFETY: base..base+len is the mapping of the pool that owns this backend (the type's
        // invariant), alive while `self` is borrowed.
        unsafe { crate::mem::load_bytes(std::ptr::with_exposed_provenance(self.base), &mut now) };
        st.live = PersistState::new(now.clone(), self.config.model, self.config.torn_lines);
        st.initial = now;
        st.trace.clear();
        st.findings.clear();
    }

    /// The initial image and the trace, for the harness.
    fn recording(&self) -> (Vec<u8>, Vec<Event>, Vec<Finding>) {
        let st = self.lock();
        (st.initial.clone(), st.trace.clone(), st.findings.clone())
    }
}

impl crate::backend::sealed::Sealed for SimBackend {}

impl Backend for SimBackend {
    fn model(&self) -> PersistModel {
        self.config.model
    }

    unsafe fn store(&self, dst: *mut u8, src: &[u8]) {
        // SAFETY: in range by the trait's contract.
        unsafe { self.write_and_record(dst, src, false) }
    }

    unsafe fn store_u64(&self, dst: *mut u64, value: u64) {
        let mut st = self.traced.then(|| self.lock());
        // SAFETY: aligned and in range by the trait's contract.
        let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(dst) };
        word.store(value, std::sync::atomic::Ordering::Release);
        if let Some(st) = st.as_mut() {
            self.record_stores(st, dst as *const u8, &value.to_ne_bytes(), false);
        }
    }

    unsafe fn compare_exchange_u64(
        &self,
        dst: *mut u64,
        current: u64,
        new: u64,
    ) -> Result<u64, u64> {
        let mut st = self.lock();
        // SAFETY: aligned and in range by the trait's contract.
        let outcome = unsafe {
            std::sync::atomic::AtomicU64::from_ptr(dst).compare_exchange(
                current,
                new,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
            )
        };
        if outcome.is_ok() && self.traced {
            self.record_stores(&mut st, dst as *const u8, &new.to_ne_bytes(), false);
        }
        outcome
    }

    unsafe fn nt_store(&self, dst: *mut u8, src: &[u8]) {
        // SAFETY: in range by the trait's contract.
        unsafe { self.write_and_record(dst, src, true) }
    }

    unsafe fn flush(&self, addr: *const u8, len: usize) -> usize {
        if !self.traced {
            return isa::cache_lines(addr as usize, len).count();
        }
        let mut st = self.lock();
        let thread = sim_thread_id();
        let first = self.offset_of(addr) as usize;
        let mut count = 0;
        for line in isa::cache_lines(first, len) {
            let line = (line / CACHE_LINE) as u64;
            let event = if self.config.flush.is_self_ordered() {
                Event::FlushOrdered { thread, line }
            } else {
                Event::Flush { thread, line }
            };
            self.record(&mut st, event);
            count += 1;
        }
        count
    }

    fn fence(&self) {
        self.record_own(|thread| Event::Fence { thread });
    }

    fn operation_completed(&self) {
        self.record_own(|thread| Event::OperationEnd { thread });
    }
}

impl Pool<SimBackend> {
    /// A simulated pool of `size` bytes with a root object of `root_size` bytes. Its header is
    /// written before tracing starts, so the trace holds only what the caller does.
    pub fn simulated(
        layout: &str,
        size: u64,
        root_size: u64,
        config: SimConfig,
    ) -> Result<Pool<SimBackend>, PoolError> {
        let header = Header::new(layout, size, root_size, 0x5EED)?;
        let map = Mapping::anonymous(size)?;
        let bytes = header.encode();
        // SAFETY: the mapping is `size` bytes long, larger than a header, and not yet shared.
        unsafe { crate::mem::store_bytes(map.base(), &bytes) };
        let backend = SimBackend::new(&map, config);
        Ok(Pool::from_parts(
            map,
            backend,
            header,
            None,
            Granularity::CacheLine,
        ))
    }

    /// A simulated pool holding a crash image, for recovery to run on. The header is checked
    /// like a file's (`layout` `None` accepts any layout).
    pub fn from_image(
        image: &[u8],
        layout: Option<&str>,
        config: SimConfig,
    ) -> Result<Pool<SimBackend>, PoolError> {
        let header = Header::decode(
            Path::new("<crash image>"),
            image,
            image.len() as u64,
            layout,
        )?;
        let map = Mapping::anonymous(header.size)?;
        // SAFETY: the mapping is exactly `image.len()` bytes (size == len was checked) and not
        // yet shared.
        unsafe { crate::mem::store_bytes(map.base(), image) };
        let backend = SimBackend::new(&map, config);
        Ok(Pool::from_parts(
            map,
            backend,
            header,
            None,
            Granularity::CacheLine,
        ))
    }

    /// An untraced pool holding a crash image, for the harness's recovery runs.
    pub(crate) fn for_recovery(
        image: &[u8],
        layout: &str,
        config: SimConfig,
    ) -> Result<Pool<SimBackend>, PoolError> {
        let header = Header::decode(
            Path::new("<crash image>"),
            image,
            image.len() as u64,
            Some(layout),
        )?;
        let map = Mapping::anonymous(header.size)?;
        // SAFETY: the fresh mapping is exactly `image.len()` bytes (decode checked size == len)
        // and no other thread can see it yet, so a plain copy races with nothing.
        unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), map.base(), image.len()) };
        let backend = SimBackend::untraced(&map, config);
        Ok(Pool::from_parts(
            map,
            backend,
            header,
            None,
            Granularity::CacheLine,
        ))
    }

    /// The simulated backend.
    pub fn sim(&self) -> &SimBackend {
        self.backend()
    }
}
