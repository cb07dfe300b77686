//! The head both maps of records start their root object with: magic, format version and the
//! intent area's offset (then each map's own structure root, at 64). The checks of a root a
//! map is made at, the head's write inside the making transaction, and its read at open.
//!
//! Format versions: 1, records with a 12-byte header; 2, a 16-byte header ending in the
//! record's CRC-32C (the hash map's format in this build); 3, the ordered map with
//! path-compressed layers (`tree/layout.rs`), which opens version 2 maps and upgrades them. A
//! version 1 map is refused at open with [`RecordMapError::Corrupt`] naming both versions.

use pmem_ordering::{Backend, Pool};
use pmem_undo_log::{Heap, Tx};

use super::error::RecordMapError;
use super::{intent, layout};
use crate::kind::{describe_magic, StructureKind};

/// The format the hash map of records writes: 2, records with a CRC-32C in their header
/// (`layout.rs`).
pub(crate) const VERSION: u64 = 2;
/// The format before it: 12-byte record headers without a checksum. Refused at open.
const VERSION_WITHOUT_CHECKSUMS: u64 = 1;

/// The format version the ordered map of records writes (`tree/layout.rs`): 3, path-compressed
/// layers.
pub(crate) const TREE_VERSION: u64 = 3;
/// The ordered map's format before path compression, opened and upgraded in place.
pub(crate) const TREE_VERSION_WITHOUT_COMPRESSION: u64 = 2;

/// The format version a map of `kind` writes.
pub(crate) fn version_of(kind: StructureKind) -> u64 {
    match kind {
        StructureKind::RecordBTreeMap => TREE_VERSION,
        _ => VERSION,
    }
}

/// The versions a map of `kind` opens: its own, and for the ordered map the one before path
/// compression (upgraded at open).
pub(crate) fn opens_version(kind: StructureKind, version: u64) -> bool {
    version == version_of(kind)
        || (kind == StructureKind::RecordBTreeMap && version == TREE_VERSION_WITHOUT_COMPRESSION)
}

/// Refuse a root a new map of `bytes` cannot be made at: misaligned, past the owner field's
/// reach, outside the pool, or in use (its first word not zero).
pub(crate) fn check_new<B: Backend>(
    pool: &Pool<B>,
    root: u64,
    bytes: u64,
) -> Result<(), RecordMapError> {
    if !root.is_multiple_of(64) || root >= layout::MAX_OWNER_ROOT {
        return Err(RecordMapError::InvalidConfig {
            reason: format!(
                "root offset {root:#x} must be 64-byte aligned and below {:#x}",
                layout::MAX_OWNER_ROOT
            ),
        });
    }
    pool.check_range(root, bytes)?;
    let magic = pool.read::<u64>(root)?;
    if magic != 0 {
        return Err(RecordMapError::AlreadyExists {
            root,
            found: describe_magic(magic),
        });
    }
    Ok(())
}

/// Inside the transaction that makes a map of `kind` at `root`: allocate and zero its intent
/// area and write the head. Returns the area's offset.
pub(crate) fn write_head<B: Backend>(
    tx: &Tx<'_, B>,
    root: u64,
    kind: StructureKind,
) -> Result<u64, RecordMapError> {
    let area = tx.alloc(intent::AREA_BYTES)?.offset();
    tx.write(area, &[0u8; intent::AREA_BYTES as usize])?;
    let mut head = [0u8; 24];
    head[0..8].copy_from_slice(&kind.magic().to_le_bytes());
    head[8..16].copy_from_slice(&version_of(kind).to_le_bytes());
    head[16..24].copy_from_slice(&area.to_le_bytes());
    tx.write(root, &head)?;
    Ok(area)
}

/// Check the head of the map of `kind` at `root`; the intent area's offset and the format
/// version found (one [`opens_version`] accepts).
pub(crate) fn read_head<B: Backend>(
    heap: &Heap<B>,
    root: u64,
    kind: StructureKind,
) -> Result<(u64, u64), RecordMapError> {
    let pool = heap.pool();
    let magic = pool.read::<u64>(root)?;
    if magic != kind.magic() {
        return Err(RecordMapError::WrongKind {
            root,
            found: describe_magic(magic),
            wanted: kind,
        });
    }
    let corrupt = |reason: String| RecordMapError::Corrupt { root, reason };
    let version = pool.read::<u64>(root + 8)?;
    let reads = version_of(kind);
    if version == VERSION_WITHOUT_CHECKSUMS {
        return Err(corrupt(format!(
            "format version {version} (records without checksums), this build reads \
             {reads}: copy the keys out with a build that reads version {version}"
        )));
    }
    if !opens_version(kind, version) {
        return Err(corrupt(format!(
            "format version {version}, this build reads {reads}"
        )));
    }
    let area = pool.read::<u64>(root + 16)?;
    if heap.block_size(area).is_none_or(|s| s < intent::AREA_BYTES) {
        return Err(corrupt(format!(
            "its intent area {area:#x} is not an allocated block of {} bytes",
            intent::AREA_BYTES
        )));
    }
    Ok((area, version))
}

/// Set the format version of the map at `root` to `version`, persisted (an older format this
/// build reads as it is, and writes the newer one into from now on).
pub(crate) fn upgrade_version<B: Backend>(
    pool: &Pool<B>,
    root: u64,
    version: u64,
) -> Result<(), RecordMapError> {
    let w = pool.store_u64(root + 8, version)?;
    pool.persist(w);
    Ok(())
}
