//! The benchmark pool files: the primitives' shared file ([`PoolFile`]), a fresh heap per raw
//! structure ([`HeapFile`]) and a fresh store per store-path measurement ([`StoreFile`]).
//!
//! Every variant maps its own [`Pool`] on one shared file (so each can have its own
//! instructions and persistency model): another mapping ([`Pool::map_again`]) of the pool made
//! at creation, which holds the file's lock (a second `Pool::open` would be refused). The
//! raw-instruction variant maps the same file with memmap2. The file is created fresh (a stale
//! file of the same name, left by an interrupted run, is removed first) and removed when the
//! [`PoolFile`] is dropped.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use memmap2::{MmapMut, MmapOptions};
use pmem_ordering::isa::IsaError;
use pmem_ordering::{Granularity, Pool, PoolError, PoolOptions};
use pmem_structures::{Store, StoreOptions};

/// The layout name of benchmark pools.
pub const LAYOUT: &str = "pmem-bench";

/// Where benchmark pools go unless told otherwise: `/dev/shm` if it exists (tmpfs, i.e. DRAM on
/// Linux), else the system's temporary directory.
pub fn default_pool_dir() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Why the benchmark pool could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The pool directory does not exist.
    #[error("pool directory {0} does not exist")]
    NoSuchDir(PathBuf),
    /// The pool directory names something else.
    #[error("pool directory {0} is not a directory")]
    NotADir(PathBuf),
    /// A stale pool file could not be removed.
    #[error("cannot remove the stale benchmark pool {path}: {source}")]
    RemoveStale {
        /// The stale file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The pool directory does not accept a new file.
    #[error("cannot create the benchmark pool in {dir}: the directory is not writable ({source})")]
    Unwritable {
        /// The pool directory.
        dir: PathBuf,
        /// What creating the file reported.
        source: PoolError,
    },
    /// The pool could not be created or opened.
    #[error("cannot set up the benchmark pool in {dir}: {source}")]
    Pool {
        /// The pool directory.
        dir: PathBuf,
        /// What went wrong.
        source: PoolError,
    },
    /// A variant asked for an instruction this CPU lacks.
    #[error(transparent)]
    Isa(#[from] IsaError),
    /// The pool is too small for the benchmark's working set.
    #[error("the benchmark pool of {size} bytes has no room for a ring of {ring} bytes after its heap offset {heap}")]
    TooSmall {
        /// The pool's size.
        size: u64,
        /// The ring's length.
        ring: u64,
        /// Where the heap starts.
        heap: u64,
    },
    /// The undo-log heap (or a structure in it) could not be set up in the pool.
    #[error("cannot set up the benchmark heap in {path}: {source}")]
    Heap {
        /// The pool file.
        path: PathBuf,
        /// What went wrong.
        source: pmem_undo_log::TxError,
    },
    /// The store could not be created in its pool file.
    #[error("cannot create the benchmark store in {path}: {source}")]
    Store {
        /// The pool file.
        path: PathBuf,
        /// What went wrong (boxed: the store's error is large).
        source: Box<pmem_structures::Error>,
    },
    /// The store's pool file could not be given its pages up front.
    #[error("cannot allocate the pages of the benchmark store {path}: {source}")]
    Allocate {
        /// The pool file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The pool file's size on disk could not be read.
    #[error("cannot read the resident size of the benchmark pool {path}: {source}")]
    Stat {
        /// The pool file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The raw mapping of the pool file failed.
    #[error("cannot map the benchmark pool {path} for raw access: {source}")]
    Map {
        /// The pool file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// The path of a new file `file_name` in the existing directory `dir`, a stale file of that
/// name (left by an interrupted run) removed.
fn fresh_path(dir: &Path, file_name: &str) -> Result<PathBuf, SetupError> {
    match std::fs::metadata(dir) {
        Err(_) => return Err(SetupError::NoSuchDir(dir.to_path_buf())),
        Ok(m) if !m.is_dir() => return Err(SetupError::NotADir(dir.to_path_buf())),
        Ok(_) => {}
    }
    let path = dir.join(file_name);
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(SetupError::RemoveStale { path, source }),
    }
    Ok(path)
}

/// A benchmark pool file: created by [`PoolFile::create`], removed on drop.
#[derive(Debug)]
pub struct PoolFile {
    path: PathBuf,
    size: u64,
    requested: Option<Granularity>,
    granularity: Granularity,
    heap_offset: u64,
    /// The pool made at creation, kept open for its lock: variants map it again.
    created: Pool,
}

impl PoolFile {
    /// Create a fresh pool of `size` bytes named `file_name` in `dir`. `granularity` is forced on
    /// every pool opened on it, or detected when `None`.
    pub fn create(
        dir: &Path,
        file_name: &str,
        size: u64,
        granularity: Option<Granularity>,
    ) -> Result<PoolFile, SetupError> {
        let path = fresh_path(dir, file_name)?;
        let options = match granularity {
            Some(g) => PoolOptions::new().granularity(g),
            None => PoolOptions::new(),
        };
        let pool = Pool::create(&path, LAYOUT, size, &options).map_err(|source| match source {
            // The directory exists (fresh_path checked), so these mean it refuses new files.
            PoolError::NotFound { .. } | PoolError::ReadOnly { .. } => SetupError::Unwritable {
                dir: dir.to_path_buf(),
                source,
            },
            source => SetupError::Pool {
                dir: dir.to_path_buf(),
                source,
            },
        })?;
        Ok(PoolFile {
            path,
            size,
            requested: granularity,
            granularity: pool.granularity(),
            heap_offset: pool.heap_offset(),
            created: pool,
        })
    }

    /// The pool file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pool's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes of the file backed by memory (on tmpfs: its pages in DRAM), from the blocks the
    /// file system reports: what the pool holds resident, whatever the process maps.
    pub fn resident_bytes(&self) -> Result<u64, SetupError> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.path)
            .map(|m| m.blocks() * 512)
            .map_err(|source| SetupError::Stat {
                path: self.path.clone(),
                source,
            })
    }

    /// The granularity forced on the pools opened on this file (`None`: detected).
    pub fn requested_granularity(&self) -> Option<Granularity> {
        self.requested
    }

    /// The granularity the pools on this file have (forced or detected).
    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// The first byte after the pool's root object.
    pub fn heap_offset(&self) -> u64 {
        self.heap_offset
    }

    fn options(&self, options: PoolOptions) -> PoolOptions {
        match self.requested {
            Some(g) => options.granularity(g),
            None => options,
        }
    }

    /// A pool on the file with `options` (the file's granularity is applied on top).
    pub fn open(&self, options: PoolOptions) -> Result<Pool, SetupError> {
        self.created
            .map_again(&self.options(options))
            .map_err(|source| SetupError::Pool {
                dir: self.path.parent().unwrap_or(Path::new("")).to_path_buf(),
                source,
            })
    }

    /// Map the whole file with memmap2, for the raw-instruction baseline.
    pub fn map_raw(&self) -> Result<MmapMut, SetupError> {
        let map_err = |source| SetupError::Map {
            path: self.path.clone(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(map_err)?;
        let len = usize::try_from(self.size).map_err(|_| {
            map_err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the pool does not fit the address space",
            ))
        })?;
        // The file is this process's own benchmark pool, created by `create`.
        // SAFETY: it is not truncated while the PoolFile lives, and the mapping is only
        // written through raw pointers by one thread at a time.
        unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(map_err)
    }
}

/// A fresh undo-log heap in its own pool file, for one structure under measurement: the file
/// is removed when this is dropped.
pub struct HeapFile {
    // Dropped before the file (fields drop in order).
    heap: pmem_undo_log::Heap,
    file: PoolFile,
}

impl std::fmt::Debug for HeapFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeapFile")
            .field("pool", &self.file.path())
            .finish()
    }
}

impl HeapFile {
    /// Create the pool file `file_name` in `dir` (a stale one is replaced) of `pool_bytes`, with
    /// `granularity` forced (`None`: detected), and format a heap with the default
    /// configuration and `policy` in it.
    ///
    /// Every page past the pool's root is written once first, so the timed phases measure the
    /// structure, not the kernel handing out file pages on first touch (which persistent
    /// memory mapped from a DAX file does not do).
    pub fn create(
        dir: &Path,
        file_name: &str,
        pool_bytes: u64,
        granularity: Option<Granularity>,
        policy: pmem_undo_log::FencePolicy,
    ) -> Result<HeapFile, SetupError> {
        HeapFile::create_touching(dir, file_name, pool_bytes, pool_bytes, granularity, policy)
    }

    /// As [`HeapFile::create`], but only the first `touch_bytes` past the pool's root are
    /// written first: a pool sized generously (the file is sparse) stays resident only where
    /// the structure's blocks are, plus that prefix.
    pub fn create_touching(
        dir: &Path,
        file_name: &str,
        pool_bytes: u64,
        touch_bytes: u64,
        granularity: Option<Granularity>,
        policy: pmem_undo_log::FencePolicy,
    ) -> Result<HeapFile, SetupError> {
        let file = PoolFile::create(dir, file_name, pool_bytes, granularity)?;
        {
            let mut raw = file.map_raw()?;
            let start = file.heap_offset() as usize;
            let end = start.saturating_add(usize::try_from(touch_bytes).unwrap_or(usize::MAX));
            let end = end.min(raw.len());
            raw[start..end].fill(0);
        }
        let pool = file.open(PoolOptions::new())?;
        let heap = pmem_undo_log::Heap::create(
            std::sync::Arc::new(pool),
            pmem_undo_log::HeapConfig::default(),
            policy,
        )
        .map_err(|source| SetupError::Heap {
            path: file.path().to_path_buf(),
            source,
        })?;
        Ok(HeapFile { heap, file })
    }

    /// The heap.
    pub fn heap(&self) -> &pmem_undo_log::Heap {
        &self.heap
    }

    /// The pool file.
    pub fn file(&self) -> &PoolFile {
        &self.file
    }

    /// Bytes the heap has allocated (the structure's blocks).
    pub fn bytes_allocated(&self) -> u64 {
        self.heap.alloc_stats().bytes_allocated
    }
}

/// A fresh [`Store`] in its own pool file, for the measurements of the store path: the file
/// is removed when this is dropped (a handle still open then keeps its mapping; Linux frees
/// the pages when the last one closes).
pub struct StoreFile {
    store: Store,
    path: PathBuf,
}

impl StoreFile {
    /// Create a store of `size` bytes in the file `file_name` in `dir` (a stale one is
    /// replaced) with [`Store::create`], `granularity` forced (`None`: detected), and the
    /// store's defaults otherwise (batched fences, as the raw structures' heaps).
    ///
    /// Every page of the file is then written once with its own bytes, as [`HeapFile::create`]
    /// zeroes the raw structures' pages: the store path pays no first-touch page allocation the
    /// raw path does not pay.
    pub fn create(
        dir: &Path,
        file_name: &str,
        size: u64,
        granularity: Option<Granularity>,
    ) -> Result<StoreFile, SetupError> {
        let path = fresh_path(dir, file_name)?;
        let options = match granularity {
            Some(g) => StoreOptions::new().granularity(g),
            None => StoreOptions::new(),
        };
        let store = Store::create(&path, size, &options).map_err(|source| SetupError::Store {
            path: path.clone(),
            source: Box::new(source),
        })?;
        // The file is removed if anything below fails.
        let made = StoreFile { store, path };
        allocate_pages(&made.path, size)?;
        Ok(made)
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

impl Drop for StoreFile {
    fn drop(&mut self) {
        // Best effort: a file that is already gone needs no removal.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Write every page of the first `len` bytes of the file at `path` once, its contents
/// unchanged (each chunk read, then written back): the pages the store path later touches are
/// then allocated and zeroed already, as [`HeapFile::create`]'s zeroing leaves the raw side's.
/// (`posix_fallocate` is not enough on tmpfs: its pages are still cleared on first touch.)
fn allocate_pages(path: &Path, len: u64) -> Result<(), SetupError> {
    use std::os::unix::fs::FileExt;
    let fail = |source| SetupError::Allocate {
        path: path.to_path_buf(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(fail)?;
    let mut chunk = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    while offset < len {
        let n = chunk.len().min((len - offset) as usize);
        file.read_exact_at(&mut chunk[..n], offset).map_err(fail)?;
        file.write_all_at(&chunk[..n], offset).map_err(fail)?;
        offset += n as u64;
    }
    Ok(())
}

impl Drop for PoolFile {
    fn drop(&mut self) {
        // Best effort: a file that is already gone needs no removal.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether `dir` is on tmpfs (so a pool there lives in DRAM). `None` where this cannot be told.
pub fn is_tmpfs(dir: &Path) -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        const TMPFS_MAGIC: i64 = 0x0102_1994;
        let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: c_path is a NUL-terminated string and buf is valid for one statfs record.
        let rc = unsafe { libc::statfs(c_path.as_ptr(), buf.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: statfs returned 0, so it filled the record.
        let fs = unsafe { buf.assume_init() };
        // The field's type differs between targets (i64 on x86-64, narrower elsewhere).
        #[allow(clippy::unnecessary_cast)]
        let f_type = fs.f_type as i64;
        Some(f_type == TMPFS_MAGIC)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        None
    }
}
