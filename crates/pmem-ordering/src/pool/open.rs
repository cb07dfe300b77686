//! Making a pool: creating and opening pool files, inspecting their headers, anonymous pools.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::header::{Header, HEADER_LEN};
use super::mapping::Mapping;
use super::{next_pool_id, Pool, PoolError};
use crate::backend::{Granularity, Hardware};
use crate::barrier::PersistModel;
use crate::isa::Isa;

/// How to create or open a pool.
#[derive(Clone, Debug)]
pub struct PoolOptions {
    granularity: Option<Granularity>,
    model: PersistModel,
    isa: Isa,
    root_size: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            granularity: None,
            model: PersistModel::X86,
            isa: Isa::detected(),
            root_size: 4096 - 64,
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
    /// cannot be mapped with `MAP_SYNC`; `Emulated` and `Byte` are taken on trust.
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
}

fn random_identity() -> u64 {
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

fn io_error(op: &'static str, path: &Path, source: std::io::Error) -> PoolError {
    PoolError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// Map an error from opening `path` for writing to its typed form.
fn classify_open_error(path: &Path, e: std::io::Error) -> PoolError {
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
    /// Create a new pool file of `size` bytes at `path` holding `layout`.
    ///
    /// Fails with [`PoolError::AlreadyExists`] rather than overwrite a file. The header is
    /// committed last (its magic is the final 8-byte store), so a crash during creation leaves a
    /// file that `open` reports as [`PoolError::Incomplete`]. If creation fails, the partial file
    /// is removed.
    pub fn create(
        path: impl AsRef<Path>,
        layout: &str,
        size: u64,
        options: &PoolOptions,
    ) -> Result<Pool<Hardware>, PoolError> {
        let path = path.as_ref();
        let header = Header::new(layout, size, options.root_size, random_identity())?;
        if path.is_dir() {
            return Err(PoolError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(PoolError::AlreadyExists {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(classify_open_error(path, e)),
        };
        let result = (|| {
            file.set_len(size)
                .map_err(|e| io_error("set the length of", path, e))?;
            let (map, granularity) = Mapping::file(&file, path, size, options.granularity)?;
            let pool = Pool::from_parts(
                map,
                Hardware::new(options.isa, granularity, options.model),
                header,
                Some(path.to_path_buf()),
                granularity,
            );
            pool.write_header()?;
            Ok(pool)
        })();
        if result.is_err() {
            // Creation failed part-way: leave no half-made pool behind.
            let _ = std::fs::remove_file(path);
        }
        result
    }

    /// Open the pool at `path`, which must hold `layout`.
    pub fn open(
        path: impl AsRef<Path>,
        layout: &str,
        options: &PoolOptions,
    ) -> Result<Pool<Hardware>, PoolError> {
        let path = path.as_ref();
        let (file, header) = Pool::<Hardware>::read_header_of(path, Some(layout), true)?;
        let (map, granularity) = Mapping::file(&file, path, header.size, options.granularity)?;
        Ok(Pool::from_parts(
            map,
            Hardware::new(options.isa, granularity, options.model),
            header,
            Some(path.to_path_buf()),
            granularity,
        ))
    }

    /// Read and check the header of the pool file at `path` without mapping it; `layout`
    /// `None` accepts any layout. Used by `open`, and by tools that want to inspect a file;
    /// it only reads, so it works on a read-only file too.
    pub fn inspect(path: impl AsRef<Path>, layout: Option<&str>) -> Result<Header, PoolError> {
        Pool::<Hardware>::read_header_of(path.as_ref(), layout, false).map(|(_, h)| h)
    }

    fn read_header_of(
        path: &Path,
        layout: Option<&str>,
        write: bool,
    ) -> Result<(File, Header), PoolError> {
        let meta = std::fs::metadata(path).map_err(|e| classify_open_error(path, e))?;
        if meta.is_dir() {
            return Err(PoolError::IsDirectory {
                path: path.to_path_buf(),
            });
        }
        // Root ignores permission bits, so check them ourselves: a file marked read-only is
        // not to be written whoever opens it.
        if write && meta.permissions().readonly() {
            return Err(PoolError::ReadOnly {
                path: path.to_path_buf(),
            });
        }
        let file = OpenOptions::new()
            .read(true)
            .write(write)
            .open(path)
            .map_err(|e| classify_open_error(path, e))?;
        let file_len = file
            .metadata()
            .map_err(|e| io_error("read the metadata of", path, e))?
            .len();
        let mut bytes = [0u8; HEADER_LEN];
        let readable = (file_len as usize).min(HEADER_LEN);
        file.read_exact_at(&mut bytes[..readable], 0)
            .map_err(|e| io_error("read the header of", path, e))?;
        let header = Header::decode(path, &bytes[..readable], file_len, layout)?;
        Ok((file, header))
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
        let map = Mapping::anonymous(size)?;
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
