//! Making a pool: creating and opening pool files, inspecting their headers, anonymous pools.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::header::{Header, HEADER_LEN};
use super::lock::lock_exclusive;
use super::mapping::Mapping;
use super::pages::{self, PageSize};
use super::{next_pool_id, Pool, PoolError};
use crate::backend::{Granularity, Hardware};
use crate::barrier::PersistModel;
use crate::isa::Isa;

/// How to create or open a pool.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    pub(super) granularity: Option<Granularity>,
    pub(super) model: PersistModel,
    pub(super) isa: Isa,
    pub(super) root_size: u64,
    pub(super) page_size: PageSize,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            granularity: None,
            model: PersistModel::X86,
            isa: Isa::detected(),
            root_size: 4096 - 64,
            page_size: PageSize::Base4K,
        }
    }
}

impl PoolOptions {
    /// Defaults: detect the granularity, x86 model, the CPU's best instructions, a root object
    /// of 4032 bytes.
    pub fn new() -> PoolOptions {
        PoolOptions::default()
    }

    /// Force a granularity instead of detecting it. `CacheLine` fails to open a file that
    /// cannot be mapped with `MAP_SYNC` (and stays `CacheLine` on an eADR region); `Emulated`
    /// and `Byte` are taken on trust.
    pub fn granularity(mut self, granularity: Granularity) -> PoolOptions {
        self.granularity = Some(granularity);
        self
    }

    /// The persistency model the pool's code is written for.
    pub fn model(mut self, model: PersistModel) -> PoolOptions {
        self.model = model;
        self
    }

    /// The instructions to use (e.g. a weaker flush than the CPU's best, to compare them).
    pub fn isa(mut self, isa: Isa) -> PoolOptions {
        self.isa = isa;
        self
    }

    /// Size of the root object made at creation (ignored by `open`, which reads the header).
    pub fn root_size(mut self, bytes: u64) -> PoolOptions {
        self.root_size = bytes;
        self
    }

    /// The pages to map the pool with (see [`super::pages`]): 2 MiB pages need a size that is
    /// a multiple of 2 MiB and, for a file, hugetlbfs; otherwise creating or opening fails with
    /// [`PoolError::PageSizeUnavailable`].
    pub fn page_size(mut self, page_size: PageSize) -> PoolOptions {
        self.page_size = page_size;
        self
    }
}

pub(super) fn random_identity() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(next_pool_id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

pub(super) fn io_error(op: &'static str, path: &Path, source: std::io::Error) -> PoolError {
    PoolError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// How a pool file is opened.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// To read its header only ([`Pool::inspect`]).
    ReadOnly,
    /// To map and write it ([`Pool::open`]).
    ReadWrite,
}

/// Open the existing pool file at `path`, with typed errors for a missing file, a directory
/// and a read-only file.
pub(super) fn open_pool_file(path: &Path, access: Access) -> Result<File, PoolError> {
    let write = access == Access::ReadWrite;
    let meta = std::fs::metadata(path).map_err(|e| classify_open_error(path, e))?;
    if meta.is_dir() {
        return Err(PoolError::IsDirectory {
            path: path.to_path_buf(),
        });
    }
    // Root ignores permission bits, so check them ourselves: a file marked read-only is not to
    // be written whoever opens it.
    if write && meta.permissions().readonly() {
        return Err(PoolError::ReadOnly {
            path: path.to_path_buf(),
        });
    }
    OpenOptions::new()
        .read(true)
        .write(write)
        .open(path)
        .map_err(|e| classify_open_error(path, e))
}

/// Read and check the header of `file` (opened from `path`).
fn read_header(file: &File, path: &Path, layout: Option<&str>) -> Result<Header, PoolError> {
    let file_len = file
        .metadata()
        .map_err(|e| io_error("read the metadata of", path, e))?
        .len();
    let mut bytes = [0u8; HEADER_LEN];
    let readable = (file_len as usize).min(HEADER_LEN);
    file.read_exact_at(&mut bytes[..readable], 0)
        .map_err(|e| io_error("read the header of", path, e))?;
    Header::decode(path, &bytes[..readable], file_len, layout)
}

/// Map an error from opening `path` for writing to its typed form.
pub(super) fn classify_open_error(path: &Path, e: std::io::Error) -> PoolError {
    match e.kind() {
        std::io::ErrorKind::NotFound => PoolError::NotFound {
            path: path.to_path_buf(),
        },
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            PoolError::ReadOnly {
                path: path.to_path_buf(),
            }
        }
        std::io::ErrorKind::IsADirectory => PoolError::IsDirectory {
            path: path.to_path_buf(),
        },
        _ => io_error("open", path, e),
    }
}

impl Pool<Hardware> {
    /// Create a new pool file of `size` bytes at `path` holding `layout`: made and given its
    /// header unpublished, then published ([`Pool::create_unpublished`], [`Pool::publish`]),
    /// so the path names the pool only once its header is whole, and a failed create leaves
    /// nothing behind.
    ///
    /// Fails with [`PoolError::AlreadyExists`] rather than overwrite a file, also when another
    /// creator publishes its pool at the path first. The file is locked from the moment it is
    /// made until the pool drops (see [`Pool`]): an open of the path after the pool is
    /// published gets [`PoolError::AlreadyOpen`].
    pub fn create(
        path: impl AsRef<Path>,
        layout: &str,
        size: u64,
        options: &PoolOptions,
    ) -> Result<Pool<Hardware>, PoolError> {
        let pool = Pool::create_unpublished(path, layout, size, options)?;
        pool.publish()?;
        Ok(pool)
    }

    /// Open the pool at `path`, which must hold `layout`.
    ///
    /// The file is locked before its header is read, and stays locked until the pool drops:
    /// while it is open, another `open` of the file, from this process or another, fails with
    /// [`PoolError::AlreadyOpen`] and changes nothing. A file system without file locks is
    /// refused with [`PoolError::LockUnsupported`] rather than opened unprotected.
    pub fn open(
        path: impl AsRef<Path>,
        layout: &str,
        options: &PoolOptions,
    ) -> Result<Pool<Hardware>, PoolError> {
        let path = path.as_ref();
        let file = open_pool_file(path, Access::ReadWrite)?;
        lock_exclusive(&file, path)?;
        let header = read_header(&file, path, Some(layout))?;
        pages::check_file(&file, path, header.size, options.page_size)?;
        let (map, choice) = Mapping::file(&file, path, header.size, options.granularity)?;
        let mut pool = Pool::from_parts(
            map,
            Hardware::new(options.isa, choice.granularity, options.model),
            header,
            Some(path.to_path_buf()),
            choice.granularity,
        );
        pool.granularity_basis = Some(choice.basis);
        pool.file = Some(file);
        Ok(pool)
    }

    /// Another mapping of this pool's file, with other `options` (granularity, persistency
    /// model, instructions): for measuring instruction choices side by side on one file, which
    /// [`Pool::open`] refuses while this pool holds the file's lock.
    ///
    /// The new pool shares this pool's lock (it holds a duplicate of the same open file), so
    /// the file stays locked until both are dropped. Both see the same bytes; persist tokens
    /// of one are not accepted by the other, and ordering writes made through both is the
    /// caller's business, as it is between threads. An anonymous pool has no file to map:
    /// [`PoolError::NoFile`].
    pub fn map_again(&self, options: &PoolOptions) -> Result<Pool<Hardware>, PoolError> {
        let (Some(file), Some(path)) = (&self.file, &self.path) else {
            return Err(PoolError::NoFile {
                operation: "mapping a pool again",
            });
        };
        let file = file
            .try_clone()
            .map_err(|e| io_error("duplicate the descriptor of", path, e))?;
        pages::check_file(&file, path, self.header.size, options.page_size)?;
        let (map, choice) = Mapping::file(&file, path, self.header.size, options.granularity)?;
        let mut pool = Pool::from_parts(
            map,
            Hardware::new(options.isa, choice.granularity, options.model),
            self.header.clone(),
            Some(path.clone()),
            choice.granularity,
        );
        pool.granularity_basis = Some(choice.basis);
        pool.file = Some(file);
        Ok(pool)
    }

    /// Read and check the header of the pool file at `path` without mapping it; `layout`
    /// `None` accepts any layout. For tools that want to inspect a file: it only reads, so it
    /// works on a read-only file too, and it takes no lock, so it also reads the header of a
    /// pool that is open (the header does not change after creation).
    pub fn inspect(path: impl AsRef<Path>, layout: Option<&str>) -> Result<Header, PoolError> {
        let path = path.as_ref();
        let file = open_pool_file(path, Access::ReadOnly)?;
        read_header(&file, path, layout)
    }

    /// An anonymous pool of `size` bytes: not backed by any file, gone when dropped. Flushes
    /// and fences are issued as on persistent memory (emulated granularity), so code under test
    /// runs the same instructions it would on a device. Only `Emulated` and `Byte` can be
    /// forced; the others need a file.
    pub fn anonymous(
        layout: &str,
        size: u64,
        options: &PoolOptions,
    ) -> Result<Pool<Hardware>, PoolError> {
        let header = Header::new(layout, size, options.root_size, random_identity())?;
        let granularity = match options.granularity {
            None | Some(Granularity::Emulated) => Granularity::Emulated,
            Some(Granularity::Byte) => Granularity::Byte,
            Some(other) => {
                return Err(PoolError::GranularityUnavailable {
                    path: PathBuf::from("<anonymous pool>"),
                    requested: other.name(),
                    reason: "anonymous memory has no file to map with MAP_SYNC or to msync; \
                             use emulated or byte granularity"
                        .into(),
                })
            }
        };
        let map = Mapping::anonymous_paged(size, options.page_size)?;
        let pool = Pool::from_parts(
            map,
            Hardware::new(options.isa, granularity, options.model),
            header,
            None,
            granularity,
        );
        pool.write_header()?;
        Ok(pool)
    }

    /// The instructions this pool uses.
    pub fn isa(&self) -> Isa {
        self.backend.isa()
    }
}
