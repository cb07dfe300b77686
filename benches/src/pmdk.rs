//! PMDK side by side (feature `pmdk`): libpmem's `pmem_memcpy_persist` against the pool's
//! durable copies, and libpmemobj transactions against undo-log transactions, measured in one
//! run, interleaved by [`time_side_by_side`], on pool files in the run's pool directory.
//!
//! * copy: for each size of [`NT_SIZES`], `pmem_memcpy_persist` into a `pmem_map_file` mapping
//!   against the pool's `nt_write` + fence (what the undo log uses for its entries) and its
//!   `write` + `persist` (temporal stores, then the detected flush and a fence), each writing the
//!   next slot of a ring of [`RING_LEN`] bytes, as [`crate::primitives`] does;
//! * transactions: for each K of [`PMDK_TX_WORDS`], the K-words transaction of
//!   [`crate::txbench`] (one random word from each of K equal slices of a 64 Ki-word array,
//!   all snapshot, then all written), in libpmemobj (`pmemobj_tx_add_range_direct` of each word,
//!   then the stores) and on an undo-log [`pmem_undo_log::Heap`] under the strict and batched
//!   (default) fence policies, with the same random words.
//!
//! libpmem treats a mapping as persistent memory only if `pmem_is_pmem` says so; on tmpfs it
//! does not, and libpmemobj would then end every persist in `msync` while our pools issue flush
//! instructions. libpmem reads `PMEM_IS_PMEM_FORCE` on the first call to `pmem_is_pmem`, not at
//! load time (libpmem(7), ENVIRONMENT), so [`measure`] sets it to 1 before the first mapping
//! when the environment does not set it, and reports what libpmem decided.

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use pmem_ordering::{FlushKind, Granularity, Isa, PoolError};
use pmem_undo_log::{FencePolicy, TxError, TxStats};

use crate::keys::{below, SplitMix64};
use crate::measure::{time_side_by_side, Plan, Runner};
use crate::poolfile::{PoolFile, SetupError};
use crate::primitives::{Primitive, Variant, NT_SIZES, POOL_SIZE, RING_LEN};
use crate::report::{PmdkCopyRow, PmdkResults, PmdkTxRow, SideTiming, TxMeasurement};
use crate::txbench::{TxRunner, TxVariant, TX_POOL_SIZE, WORDS};

/// The K (words per transaction) compared with libpmemobj.
pub const PMDK_TX_WORDS: [u64; 3] = [1, 8, 32];
/// Our fence policies compared with libpmemobj: the baseline and the default, in the order of
/// [`PmdkTxRow`]'s `strict` and `batched`.
pub const PMDK_POLICIES: [FencePolicy; 2] = [FencePolicy::Strict, FencePolicy::Batched];
/// The PMDK version the binary was built against (from pkg-config, see `build.rs`).
pub const PMDK_VERSION: &str = env!("PMEM_BENCH_PMDK_VERSION");
/// libpmem's default `PMEM_MOVNT_THRESHOLD` (libpmem(7)): copies from this many bytes use
/// non-temporal stores.
const DEFAULT_MOVNT_THRESHOLD: usize = 256;
/// The layout name of the libpmemobj pools.
const LAYOUT: &str = "pmem-bench";

/// Hand-written declarations of the few libpmem and libpmemobj functions used (PMDK 1.x).
mod ffi {
    use std::ffi::{c_char, c_int, c_uint, c_void};

    /// libpmemobj's opaque pool handle.
    #[repr(C)]
    pub struct PmemObjPool {
        _opaque: [u8; 0],
    }

    /// `PMEMoid`: a persistent pointer (pool id, offset).
    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct PmemOid {
        pub pool_uuid_lo: u64,
        pub off: u64,
    }

    /// `pmem_map_file` flag: create the file if it does not exist.
    pub const PMEM_FILE_CREATE: c_int = 1;
    /// `enum pobj_tx_param`: ends `pmemobj_tx_begin`'s parameter list.
    pub const TX_PARAM_NONE: c_int = 0;
    /// `enum pobj_tx_stage`: no transaction on this thread.
    pub const TX_STAGE_NONE: c_int = 0;
    /// `enum pobj_tx_stage`: the transaction's body runs.
    pub const TX_STAGE_WORK: c_int = 1;

    extern "C" {
        pub fn pmem_check_version(major: c_uint, minor: c_uint) -> *const c_char;
        pub fn pmem_errormsg() -> *const c_char;
        pub fn pmem_map_file(
            path: *const c_char,
            len: usize,
            flags: c_int,
            mode: libc::mode_t,
            mapped_len: *mut usize,
            is_pmem: *mut c_int,
        ) -> *mut c_void;
        pub fn pmem_unmap(addr: *mut c_void, len: usize) -> c_int;
        pub fn pmem_is_pmem(addr: *const c_void, len: usize) -> c_int;
        pub fn pmem_has_auto_flush() -> c_int;
        pub fn pmem_memcpy_persist(dst: *mut c_void, src: *const c_void, len: usize)
            -> *mut c_void;
        pub fn pmem_memset_persist(dst: *mut c_void, c: c_int, len: usize) -> *mut c_void;

        pub fn pmemobj_check_version(major: c_uint, minor: c_uint) -> *const c_char;
        pub fn pmemobj_errormsg() -> *const c_char;
        pub fn pmemobj_create(
            path: *const c_char,
            layout: *const c_char,
            size: usize,
            mode: libc::mode_t,
        ) -> *mut PmemObjPool;
        pub fn pmemobj_close(pop: *mut PmemObjPool);
        pub fn pmemobj_root(pop: *mut PmemObjPool, size: usize) -> PmemOid;
        pub fn pmemobj_direct(oid: PmemOid) -> *mut c_void;
        /// Variadic: a list of `enum pobj_tx_param` pairs ended by `TX_PARAM_NONE`. `env` is a
        /// `jmp_buf`, or null for no longjmp on abort.
        pub fn pmemobj_tx_begin(pop: *mut PmemObjPool, env: *mut c_void, ...) -> c_int;
        pub fn pmemobj_tx_stage() -> c_int;
        pub fn pmemobj_tx_process();
        pub fn pmemobj_tx_end() -> c_int;
        pub fn pmemobj_tx_add_range_direct(ptr: *const c_void, size: usize) -> c_int;
    }
}

/// Why a PMDK call failed, with libpmem's or libpmemobj's own message.
#[derive(Debug, thiserror::Error)]
pub enum PmdkError {
    /// The installed library is older than the API used here.
    #[error("{library} is too old: {message}")]
    Version {
        /// `libpmem` or `libpmemobj`.
        library: &'static str,
        /// The library's reason.
        message: String,
    },
    /// A path cannot be passed to C.
    #[error("{0} contains a NUL byte")]
    Path(PathBuf),
    /// A stale file of a previous run could not be removed.
    #[error("cannot remove the stale PMDK pool {path}: {source}")]
    RemoveStale {
        /// The stale file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// `pmem_map_file` failed.
    #[error("pmem_map_file {path}: {message}")]
    Map {
        /// The file.
        path: PathBuf,
        /// `pmem_errormsg()`.
        message: String,
    },
    /// `pmemobj_create` failed.
    #[error("pmemobj_create {path}: {message}")]
    Create {
        /// The pool file.
        path: PathBuf,
        /// `pmemobj_errormsg()`.
        message: String,
    },
    /// `pmemobj_root` could not allocate the root object.
    #[error("pmemobj_root of {bytes} bytes in {path}: {message}")]
    Root {
        /// The pool file.
        path: PathBuf,
        /// The root object's size.
        bytes: usize,
        /// `pmemobj_errormsg()`.
        message: String,
    },
    /// A copy or a word lies outside its mapping or root object.
    #[error("{what} at {offset} (+{len}) is outside the {size}-byte {target}")]
    OutOfRange {
        /// `copy` or `word`.
        what: &'static str,
        /// Where it starts, in bytes.
        offset: u64,
        /// Its length in bytes.
        len: u64,
        /// The mapping's or root object's size.
        size: u64,
        /// `mapping` or `root object`.
        target: &'static str,
    },
    /// A libpmemobj transaction aborted.
    #[error("a libpmemobj transaction aborted (error {code}): {message}")]
    Tx {
        /// The error number `pmemobj_tx_end` returned.
        code: i32,
        /// `pmemobj_errormsg()`.
        message: String,
    },
}

/// A C string returned by PMDK as an owned string (empty for null).
fn message(text: *const c_char) -> String {
    if text.is_null() {
        return String::new();
    }
    // SAFETY: PMDK returns NUL-terminated strings that stay valid until the thread's next call
    // into the library; this copies it at once.
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

fn pmem_message() -> String {
    // SAFETY: no arguments; returns this thread's last libpmem error message.
    message(unsafe { ffi::pmem_errormsg() })
}

fn pmemobj_message() -> String {
    // SAFETY: no arguments; returns this thread's last libpmemobj error message.
    message(unsafe { ffi::pmemobj_errormsg() })
}

/// Check that the libraries loaded provide the API version used here (libpmem 1.0,
/// libpmemobj 2.0).
pub fn check_versions() -> Result<(), PmdkError> {
    // SAFETY: plain integers in; a static string or null out.
    let pmem = message(unsafe { ffi::pmem_check_version(1, 0) });
    if !pmem.is_empty() {
        return Err(PmdkError::Version {
            library: "libpmem",
            message: pmem,
        });
    }
    // SAFETY: as above.
    let obj = message(unsafe { ffi::pmemobj_check_version(2, 0) });
    if !obj.is_empty() {
        return Err(PmdkError::Version {
            library: "libpmemobj",
            message: obj,
        });
    }
    Ok(())
}

fn c_path(path: &Path) -> Result<CString, PmdkError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| PmdkError::Path(path.to_path_buf()))
}

/// Remove a file left by an interrupted run (PMDK refuses to create over it).
fn remove_stale(path: &Path) -> Result<(), PmdkError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(PmdkError::RemoveStale {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A fresh file mapped with `pmem_map_file`: unmapped and removed on drop.
#[derive(Debug)]
pub struct PmemMap {
    addr: NonNull<u8>,
    len: usize,
    is_pmem: bool,
    path: PathBuf,
}

impl PmemMap {
    /// Create `path` (a stale file is replaced) of `len` bytes, map it and write it once with
    /// zeros, so the timed copies do not pay for the first touch of its pages.
    pub fn create(path: &Path, len: usize) -> Result<PmemMap, PmdkError> {
        remove_stale(path)?;
        let c = c_path(path)?;
        let mut mapped = 0usize;
        let mut is_pmem: c_int = 0;
        // SAFETY: `c` is NUL-terminated and both out-pointers are valid for one write.
        let addr = unsafe {
            ffi::pmem_map_file(
                c.as_ptr(),
                len,
                ffi::PMEM_FILE_CREATE,
                0o600,
                &mut mapped,
                &mut is_pmem,
            )
        };
        let Some(addr) = NonNull::new(addr.cast::<u8>()) else {
            return Err(PmdkError::Map {
                path: path.to_path_buf(),
                message: pmem_message(),
            });
        };
        let map = PmemMap {
            addr,
            len: mapped,
            is_pmem: is_pmem != 0,
            path: path.to_path_buf(),
        };
        // SAFETY: the whole mapping, which `map` owns.
        unsafe { ffi::pmem_memset_persist(map.addr.as_ptr().cast(), 0, map.len) };
        Ok(map)
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What `pmem_map_file` said: whether libpmem treats the mapping as persistent memory.
    pub fn is_pmem(&self) -> bool {
        self.is_pmem
    }

    /// `pmem_memcpy_persist` of `src` to `offset`.
    pub fn memcpy_persist(&self, offset: usize, src: &[u8]) -> Result<(), PmdkError> {
        if offset
            .checked_add(src.len())
            .is_none_or(|end| end > self.len)
        {
            return Err(PmdkError::OutOfRange {
                what: "copy",
                offset: offset as u64,
                len: src.len() as u64,
                size: self.len as u64,
                target: "mapping",
            });
        }
        // SAFETY: [offset, offset + len) lies in the mapping (checked above), which lives as
        // long as `self`; `src` is a separate Rust allocation, so they do not overlap.
        unsafe {
            ffi::pmem_memcpy_persist(
                self.addr.as_ptr().add(offset).cast(),
                src.as_ptr().cast(),
                src.len(),
            )
        };
        Ok(())
    }
}

impl Drop for PmemMap {
    fn drop(&mut self) {
        // SAFETY: the mapping pmem_map_file returned, unmapped once, here.
        unsafe { ffi::pmem_unmap(self.addr.as_ptr().cast(), self.len) };
        // Best effort: a file that is already gone needs no removal.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A fresh libpmemobj pool with a root object of `words` 8-byte words: closed and its file
/// removed on drop.
#[derive(Debug)]
pub struct ObjPool {
    pop: NonNull<ffi::PmemObjPool>,
    root: NonNull<u64>,
    words: usize,
    path: PathBuf,
}

impl ObjPool {
    /// Create the pool file `path` (a stale one is replaced) of `size` bytes and allocate its
    /// root object of `words` words (zeroed by libpmemobj).
    pub fn create(path: &Path, size: usize, words: usize) -> Result<ObjPool, PmdkError> {
        remove_stale(path)?;
        let c = c_path(path)?;
        let layout = CString::new(LAYOUT).map_err(|_| PmdkError::Path(path.to_path_buf()))?;
        // SAFETY: both strings are NUL-terminated and outlive the call.
        let pop = unsafe { ffi::pmemobj_create(c.as_ptr(), layout.as_ptr(), size, 0o600) };
        let Some(pop) = NonNull::new(pop) else {
            return Err(PmdkError::Create {
                path: path.to_path_buf(),
                message: pmemobj_message(),
            });
        };
        let bytes = words * 8;
        // Closes the pool (and removes the file) if the root cannot be had.
        let mut pool = ObjPool {
            pop,
            root: NonNull::dangling(),
            words: 0,
            path: path.to_path_buf(),
        };
        // SAFETY: `pop` is the open pool `pool` owns.
        let oid = unsafe { ffi::pmemobj_root(pop.as_ptr(), bytes) };
        let root = match oid.off {
            0 => None,
            // SAFETY: a non-null PMEMoid of this open pool.
            _ => NonNull::new(unsafe { ffi::pmemobj_direct(oid) }.cast::<u64>()),
        };
        let Some(root) = root else {
            return Err(PmdkError::Root {
                path: path.to_path_buf(),
                bytes,
                message: pmemobj_message(),
            });
        };
        pool.root = root;
        pool.words = words;
        Ok(pool)
    }

    /// Words in the root object.
    pub fn words(&self) -> usize {
        self.words
    }

    /// The root object's word `index`.
    pub fn word(&self, index: u64) -> Result<u64, PmdkError> {
        self.check(index)?;
        // SAFETY: index < words (checked), so the word lies in the root object, which is only
        // accessed through raw pointers by this thread.
        Ok(unsafe { self.root.as_ptr().add(index as usize).read() })
    }

    fn check(&self, index: u64) -> Result<(), PmdkError> {
        match index < self.words as u64 {
            true => Ok(()),
            false => Err(PmdkError::OutOfRange {
                what: "word",
                offset: index.saturating_mul(8),
                len: 8,
                size: self.words as u64 * 8,
                target: "root object",
            }),
        }
    }

    /// Whether libpmem treats the pool's mapping as persistent memory, and so whether
    /// libpmemobj persists with flush instructions (true) or with msync (false).
    pub fn is_pmem(&self) -> bool {
        // SAFETY: the root object lies in the pool's mapping, which lives as long as `self`.
        unsafe { ffi::pmem_is_pmem(self.root.as_ptr().cast(), self.words * 8) != 0 }
    }

    /// One transaction that snapshots the root's words at `indices` one by one
    /// (`pmemobj_tx_add_range_direct` of 8 bytes each), then stores `value` in each: what
    /// `TX_BEGIN(pop) { ... } TX_END` does, through the function API with no `jmp_buf`, so an
    /// abort returns here instead of jumping across Rust frames.
    pub fn tx_set_words(&self, indices: &[u64], value: u64) -> Result<(), PmdkError> {
        indices.iter().try_for_each(|&i| self.check(i))?;
        // Its result is not needed: a failed begin leaves the stage at ONABORT, and
        // pmemobj_tx_end below returns the error, as in TX_BEGIN/TX_END.
        // SAFETY: an open pool; with a null env and TX_PARAM_NONE ending the list, a failure is
        // returned (the stage becomes ONABORT), never longjmp'd.
        unsafe {
            ffi::pmemobj_tx_begin(self.pop.as_ptr(), std::ptr::null_mut(), ffi::TX_PARAM_NONE)
        };
        // The stage machine of TX_BEGIN/TX_END: run the body in WORK, let pmemobj_tx_process
        // move every stage on (WORK commits), until none is left.
        loop {
            // SAFETY: reads this thread's transaction state.
            let stage = unsafe { ffi::pmemobj_tx_stage() };
            if stage == ffi::TX_STAGE_NONE {
                break;
            }
            if stage == ffi::TX_STAGE_WORK {
                self.tx_body(indices, value);
            }
            // SAFETY: called in a transaction stage other than NONE, as TX_END does.
            unsafe { ffi::pmemobj_tx_process() };
        }
        // SAFETY: after the stages ran out, as TX_END does.
        let code = unsafe { ffi::pmemobj_tx_end() };
        match code {
            0 => Ok(()),
            code => Err(PmdkError::Tx {
                code,
                message: pmemobj_message(),
            }),
        }
    }

    /// The transaction's body: every snapshot, then every store. A failed snapshot has already
    /// aborted the transaction (libpmemobj's default failure behaviour), so nothing is stored.
    fn tx_body(&self, indices: &[u64], value: u64) {
        for &i in indices {
            // SAFETY: i < words (checked by the caller), so the word lies in the root object.
            let word = unsafe { self.root.as_ptr().add(i as usize) };
            // SAFETY: an 8-byte range of this pool, in a transaction in its WORK stage.
            let rc = unsafe { ffi::pmemobj_tx_add_range_direct(word.cast(), 8) };
            if rc != 0 {
                return;
            }
        }
        for &i in indices {
            // SAFETY: as above; the root object is only accessed through raw pointers, by this
            // thread, and libpmemobj snapshot the word, so the store is undone on abort.
            unsafe { self.root.as_ptr().add(i as usize).write(value) };
        }
    }
}

impl Drop for ObjPool {
    fn drop(&mut self) {
        // SAFETY: the pool pmemobj_create returned, closed once, here.
        unsafe { ffi::pmemobj_close(self.pop.as_ptr()) };
        // Best effort: a file that is already gone needs no removal.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Why the PMDK section could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum PmdkBenchError {
    /// A PMDK call failed.
    #[error("PMDK: {0}")]
    Pmdk(#[from] PmdkError),
    /// Our side's pool could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// Our side's copy failed.
    #[error("a benchmark operation failed: {0}")]
    Pool(#[from] PoolError),
    /// Our side's transaction failed.
    #[error("a benchmark transaction failed: {0}")]
    Tx(#[from] TxError),
}

/// `pmem_memcpy_persist` of one size into the next slot of a ring.
struct PmdkCopy {
    map: PmemMap,
    bytes: usize,
    slot: usize,
    cursor: usize,
    data: Vec<u8>,
}

impl PmdkCopy {
    fn step(&mut self) -> Result<(), PmdkError> {
        let offset = self.cursor;
        self.cursor += self.slot;
        if self.cursor + self.slot > self.map.len() {
            self.cursor = 0;
        }
        self.map.memcpy_persist(offset, &self.data[..self.bytes])
    }
}

/// The K-words transaction on a libpmemobj pool, with the same random words as
/// [`TxRunner`]'s.
struct PmdkTx {
    pool: ObjPool,
    k: u64,
    rng: SplitMix64,
    picks: Vec<u64>,
    value: u64,
}

impl PmdkTx {
    fn step(&mut self) -> Result<(), PmdkError> {
        // One word from each of K equal slices, drawn as TxRunner draws them.
        let slice = WORDS / self.k;
        let rng = &mut self.rng;
        self.picks.clear();
        self.picks
            .extend((0..self.k).map(|i| i * slice + below(rng, slice)));
        self.value += 1;
        self.pool.tx_set_words(&self.picks, self.value)
    }
}

/// One side of a comparison, so both run in one [`time_side_by_side`] group.
enum Side {
    PmdkCopy(PmdkCopy),
    OursCopy(Primitive),
    PmdkTx(PmdkTx),
    // Boxed: a runner is far larger than the other sides, and there are only three per group.
    OursTx(Box<TxRunner>),
}

impl Runner for Side {
    type Error = PmdkBenchError;

    fn run(&mut self, n: u64) -> Result<(), PmdkBenchError> {
        match self {
            Side::PmdkCopy(c) => (0..n).try_for_each(|_| c.step())?,
            Side::OursCopy(p) => p.run(n)?,
            Side::PmdkTx(t) => (0..n).try_for_each(|_| t.step())?,
            Side::OursTx(r) => r.run(n)?,
        }
        Ok(())
    }

    fn tx_stats(&self) -> Option<TxStats> {
        match self {
            Side::OursTx(r) => r.tx_stats(),
            _ => None,
        }
    }
}

/// The flush instruction libpmem uses here, by its documented rules (libpmem(7)): none if the
/// platform flushes caches on power loss (`pmem_has_auto_flush`) or `PMEM_NO_FLUSH=1`, else
/// clwb, clflushopt, clflush, the first the CPU has and `PMEM_NO_CLWB` / `PMEM_NO_CLFLUSHOPT`
/// do not rule out.
fn libpmem_flush(auto_flush: bool) -> String {
    let env_is = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v == value);
    if env_is("PMEM_NO_FLUSH", "1") {
        return "none (PMEM_NO_FLUSH=1)".to_string();
    }
    if auto_flush && !env_is("PMEM_NO_FLUSH", "0") {
        return "none (pmem_has_auto_flush: eADR)".to_string();
    }
    let usable = |kind: FlushKind, off: &str| Isa::cpu_has_flush(kind) && !env_is(off, "1");
    let kind = if usable(FlushKind::Clwb, "PMEM_NO_CLWB") {
        FlushKind::Clwb
    } else if usable(FlushKind::ClflushOpt, "PMEM_NO_CLFLUSHOPT") {
        FlushKind::ClflushOpt
    } else {
        FlushKind::Clflush
    };
    kind.name().to_string()
}

/// From how many bytes libpmem copies with non-temporal stores.
fn libpmem_movnt() -> String {
    if std::env::var("PMEM_NO_MOVNT").is_ok_and(|v| v == "1") {
        return "never (PMEM_NO_MOVNT=1)".to_string();
    }
    match std::env::var("PMEM_MOVNT_THRESHOLD")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(t) => format!("from {t} B (PMEM_MOVNT_THRESHOLD)"),
        None => format!("from {DEFAULT_MOVNT_THRESHOLD} B (default threshold)"),
    }
}

/// Measure the PMDK section: the copies, then the transactions, each size and each K a group
/// of its sides interleaved. Pool files go to `dir` (named `{prefix}-...`, removed at the end);
/// our pools get `granularity` (`None`: detected). `progress(round, rounds)` is called after
/// each round of each group.
///
/// Sets `PMEM_IS_PMEM_FORCE=1` in the process environment when it is unset (see the module's
/// documentation): call it before the process starts other threads.
pub fn measure(
    dir: &Path,
    prefix: &str,
    granularity: Option<Granularity>,
    plan: &Plan,
    mut progress: impl FnMut(usize, usize),
) -> Result<PmdkResults, PmdkBenchError> {
    let env_force = std::env::var("PMEM_IS_PMEM_FORCE").ok();
    if env_force.is_none() {
        // libpmem reads it on its first pmem_is_pmem call, which the mapping below makes.
        std::env::set_var("PMEM_IS_PMEM_FORCE", "1");
    }
    check_versions()?;

    let ours_file = PoolFile::create(
        dir,
        &format!("{prefix}-pmdk-ours.pool"),
        POOL_SIZE,
        granularity,
    )?;
    {
        // Every page of our ring written once, as PmemMap::create does for libpmem's.
        let mut raw = ours_file.map_raw()?;
        raw[ours_file.heap_offset() as usize..].fill(0);
    }
    let ring_path = dir.join(format!("{prefix}-pmdk-copy.pmem"));
    let mut copy = Vec::new();
    let mut copy_is_pmem = false;
    for bytes in NT_SIZES {
        let map = PmemMap::create(&ring_path, RING_LEN as usize)?;
        copy_is_pmem = map.is_pmem();
        let mut sides = vec![
            Side::PmdkCopy(PmdkCopy {
                map,
                bytes,
                slot: bytes.next_multiple_of(64),
                cursor: 0,
                // The same pattern as the primitives' source data.
                data: (0..bytes).map(|i| (i % 251) as u8 + 1).collect(),
            }),
            Side::OursCopy(Primitive::new(&ours_file, Variant::NtWrite(bytes))?),
            Side::OursCopy(Primitive::new(&ours_file, Variant::WritePersist(bytes))?),
        ];
        let t = time_side_by_side(&mut sides, plan, &mut progress)?;
        let (pmdk, nt, persist) = (
            SideTiming::new(&t[0]),
            SideTiming::new(&t[1]),
            SideTiming::new(&t[2]),
        );
        copy.push(PmdkCopyRow {
            bytes: bytes as u64,
            nt_over_pmdk: nt.ns_per_op / pmdk.ns_per_op,
            persist_over_pmdk: persist.ns_per_op / pmdk.ns_per_op,
            pmdk,
            ours_nt: nt,
            ours_persist: persist,
        });
    }
    drop(ours_file);

    let mut tx = Vec::new();
    let mut obj_is_pmem = false;
    for k in PMDK_TX_WORDS {
        let pool = ObjPool::create(
            &dir.join(format!("{prefix}-pmdk-k{k}.obj")),
            TX_POOL_SIZE as usize,
            WORDS as usize,
        )?;
        obj_is_pmem = pool.is_pmem();
        let mut sides = vec![Side::PmdkTx(PmdkTx {
            pool,
            k,
            // The seed TxRunner uses: both sides write the same words.
            rng: SplitMix64::new(0x5EED),
            picks: Vec::with_capacity(k as usize),
            value: 0,
        })];
        for policy in PMDK_POLICIES {
            let variant = TxVariant::Words { k, policy };
            sides.push(Side::OursTx(Box::new(TxRunner::new(
                dir,
                &format!("{prefix}-pmdk"),
                variant,
                granularity,
            )?)));
        }
        let t = time_side_by_side(&mut sides, plan, &mut progress)?;
        let cell = |i: usize, policy| {
            TxMeasurement {
                variant: TxVariant::Words { k, policy },
                timing: t[i].clone(),
            }
            .cell()
        };
        let pmdk = SideTiming::new(&t[0]);
        let [strict, batched] = PMDK_POLICIES;
        let (strict, batched) = (cell(1, strict), cell(2, batched));
        tx.push(PmdkTxRow {
            words: k,
            strict_over_pmdk: strict.ns_per_op / pmdk.ns_per_op,
            batched_over_pmdk: batched.ns_per_op / pmdk.ns_per_op,
            pmdk,
            strict,
            batched,
        });
    }

    // SAFETY: no arguments; reads the platform's persistence domain once.
    let auto_flush = unsafe { ffi::pmem_has_auto_flush() } == 1;
    let isa = Isa::detected();
    let our_granularity = granularity.map_or_else(
        || "detected".to_string(),
        |g: Granularity| g.name().to_string(),
    );
    Ok(PmdkResults {
        pmdk_version: PMDK_VERSION.to_string(),
        pmem_is_pmem_force_env: env_force,
        copy_is_pmem,
        obj_is_pmem,
        auto_flush,
        libpmem_flush: libpmem_flush(auto_flush),
        libpmem_movnt: libpmem_movnt(),
        our_flush: isa.flush().name().to_string(),
        our_copy: isa.copy().name().to_string(),
        our_granularity,
        reps: plan.reps,
        batch_ms: plan.batch.as_secs_f64() * 1e3,
        copy,
        tx,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        crate::poolfile::default_pool_dir().join(format!(
            "pmem-bench-pmdk-unit-{}-{name}",
            std::process::id()
        ))
    }

    #[test]
    fn a_copy_outside_the_mapping_is_an_error() {
        let map = PmemMap::create(&scratch("map"), 4096).expect("map a scratch file");
        assert!(map.memcpy_persist(4032, &[1u8; 64]).is_ok());
        assert!(matches!(
            map.memcpy_persist(4033, &[1u8; 64]),
            Err(PmdkError::OutOfRange { .. })
        ));
        assert!(matches!(
            map.memcpy_persist(usize::MAX, &[1u8; 2]),
            Err(PmdkError::OutOfRange { .. })
        ));
    }

    #[test]
    fn transactions_write_the_words_and_reject_bad_ones() {
        let path = scratch("obj");
        let pool = ObjPool::create(&path, 16 << 20, 64).expect("create a scratch pool");
        pool.tx_set_words(&[0, 5, 63], 7).expect("a transaction");
        for i in [0, 5, 63] {
            assert_eq!(pool.word(i).unwrap(), 7);
        }
        assert_eq!(pool.word(1).unwrap(), 0, "the root object starts zeroed");
        assert!(matches!(
            pool.tx_set_words(&[1, 64], 9),
            Err(PmdkError::OutOfRange { .. })
        ));
        // A second transaction after the rejected one still works.
        pool.tx_set_words(&[1], 9).expect("a transaction");
        assert_eq!(pool.word(1).unwrap(), 9);
        assert!(pool.word(64).is_err());
        drop(pool);
        assert!(!path.exists(), "the pool file is removed on drop");
    }

    #[test]
    fn a_pool_in_a_missing_directory_is_an_error_with_libpmemobjs_message() {
        let err = ObjPool::create(Path::new("/nonexistent-dir/x.obj"), 16 << 20, 8)
            .expect_err("no such directory");
        match err {
            PmdkError::Create { message, .. } => assert!(!message.is_empty()),
            other => panic!("unexpected error {other}"),
        }
    }
}
