//! The few libpmem and libpmemobj calls the PMDK comparison makes (PMDK 1.x), declared by
//! hand, behind safe types: [`PmemMap`] (a `pmem_map_file` mapping) and [`ObjPool`] (a
//! libpmemobj pool with one root array of words), with PMDK's own error messages.
//!
//! One file on purpose: every `extern` declaration here must match PMDK's headers, and keeping
//! them beside the safe wrappers that uphold their contracts (and in one place to check against
//! a new PMDK release) is worth more than splitting the 650 lines.

use std::ffi::{c_char, c_int, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

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
        pub fn pmemobj_alloc(
            pop: *mut PmemObjPool,
            oidp: *mut PmemOid,
            size: usize,
            type_num: u64,
            constructor: *const c_void,
            arg: *mut c_void,
        ) -> c_int;
        pub fn pmemobj_free(oidp: *mut PmemOid);
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
    /// `pmemobj_alloc` failed.
    #[error("pmemobj_alloc of {size} bytes failed: {message}")]
    Alloc {
        /// The size asked for.
        size: usize,
        /// `pmemobj_errormsg()`.
        message: String,
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

/// `pmem_has_auto_flush()`: whether the platform flushes caches on power loss (eADR).
pub fn has_auto_flush() -> bool {
    // SAFETY: no arguments; reads the platform's persistence domain.
    unsafe { ffi::pmem_has_auto_flush() == 1 }
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

/// `pmemobj_create` of a fresh pool file `path` (a stale one is replaced) of `size` bytes with
/// this module's layout.
fn create_obj_pool(path: &Path, size: usize) -> Result<NonNull<ffi::PmemObjPool>, PmdkError> {
    remove_stale(path)?;
    let c = c_path(path)?;
    let layout = CString::new(LAYOUT).map_err(|_| PmdkError::Path(path.to_path_buf()))?;
    // SAFETY: both strings are NUL-terminated and outlive the call.
    let pop = unsafe { ffi::pmemobj_create(c.as_ptr(), layout.as_ptr(), size, 0o600) };
    NonNull::new(pop).ok_or_else(|| PmdkError::Create {
        path: path.to_path_buf(),
        message: pmemobj_message(),
    })
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
        let pop = create_obj_pool(path, size)?;
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

/// A fresh libpmemobj pool used only to allocate and free objects (`pmemobj_alloc`,
/// `pmemobj_free`), from any number of threads: closed and its file removed on drop.
#[derive(Debug)]
pub struct ObjAllocPool {
    pop: NonNull<ffi::PmemObjPool>,
    path: PathBuf,
}

// SAFETY: the handle is only passed to pmemobj_alloc and pmemobj_free, which libpmemobj makes
// safe to call from many threads at once on one pool (its allocator locks internally,
// libpmemobj(7)); this type touches no object memory itself, and closes the pool once, on drop.
unsafe impl Send for ObjAllocPool {}
// SAFETY: as for `Send`: shared use is concurrent pmemobj_alloc / pmemobj_free calls only.
unsafe impl Sync for ObjAllocPool {}

/// An object `pmemobj_alloc` made, to be given back with [`ObjAllocPool::free`].
pub struct ObjBlock {
    oid: ffi::PmemOid,
}

impl std::fmt::Debug for ObjBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjBlock")
            .field("offset", &self.oid.off)
            .finish()
    }
}

impl ObjAllocPool {
    /// Create the pool file `path` (a stale one is replaced) of `size` bytes.
    pub fn create(path: &Path, size: usize) -> Result<ObjAllocPool, PmdkError> {
        let pop = create_obj_pool(path, size)?;
        Ok(ObjAllocPool {
            pop,
            path: path.to_path_buf(),
        })
    }

    /// Allocate `size` bytes durably (`pmemobj_alloc`, no constructor: libpmemobj persists
    /// its own metadata before returning).
    pub fn alloc(&self, size: usize) -> Result<ObjBlock, PmdkError> {
        let mut oid = ffi::PmemOid {
            pool_uuid_lo: 0,
            off: 0,
        };
        // SAFETY: an open pool; `oid` is a valid PMEMoid to fill; no constructor or argument.
        let rc = unsafe {
            ffi::pmemobj_alloc(
                self.pop.as_ptr(),
                &mut oid,
                size,
                0,
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        };
        if rc != 0 {
            return Err(PmdkError::Alloc {
                size,
                message: pmemobj_message(),
            });
        }
        Ok(ObjBlock { oid })
    }

    /// Free `block` durably (`pmemobj_free`).
    pub fn free(&self, mut block: ObjBlock) {
        // SAFETY: `block` holds an object this pool allocated and nothing freed since (it is
        // consumed here, so it cannot be freed twice).
        unsafe { ffi::pmemobj_free(&mut block.oid) };
    }
}

impl Drop for ObjAllocPool {
    fn drop(&mut self) {
        // SAFETY: the pool pmemobj_create returned, closed once, here.
        unsafe { ffi::pmemobj_close(self.pop.as_ptr()) };
        // Best effort: a file that is already gone needs no removal.
        let _ = std::fs::remove_file(&self.path);
    }
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
    fn objects_are_allocated_apart_and_an_impossible_size_is_an_error() {
        let path = scratch("alloc");
        let pool = ObjAllocPool::create(&path, 16 << 20).expect("create a scratch pool");
        let a = pool.alloc(64).expect("allocate 64 bytes");
        let b = pool.alloc(64).expect("allocate 64 bytes");
        assert_ne!(a.oid.off, 0);
        assert!(
            a.oid.off.abs_diff(b.oid.off) >= 64,
            "{a:?} and {b:?} overlap"
        );
        pool.free(a);
        pool.free(b);
        let err = pool.alloc(1 << 30).expect_err("larger than the pool");
        assert!(
            matches!(err, PmdkError::Alloc { size, .. } if size == 1 << 30),
            "{err}"
        );
        drop(pool);
        assert!(!path.exists(), "the pool file was not removed");
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
