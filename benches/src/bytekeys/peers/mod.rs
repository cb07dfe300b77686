//! The peers the byte-key maps are measured beside, in the same run with the same keys,
//! values, operations, durability per operation and result checks: LMDB through heed
//! ([`lmdb`]) and redb ([`redb`]), crates.io dependencies of this crate (a peer that does not
//! build fails the build, so never a run without it). Each is a fresh database in the pool
//! directory, removed after its workloads; [`describe`] says how each is set up, for the
//! report.

pub mod lmdb;
pub mod redb;

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::bench_map::MapKind;
use super::error::ByteKeyError;

/// The redb version in Cargo.lock (a unit test keeps the two in step).
pub const REDB_VERSION: &str = "4.1.0";

/// How a peer was built and driven, for the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PeerInfo {
    /// The map's name in the rows (`LMDB`, `redb`).
    pub engine: String,
    /// The crate and its version (and the C library's, for LMDB).
    pub version: String,
    /// How its inserts and updates are made durable.
    pub writes: String,
    /// How its gets and scans read.
    pub reads: String,
}

/// How the peer `kind` is built and driven (`None` for our own maps).
pub fn describe(kind: MapKind) -> Option<PeerInfo> {
    let (version, writes, reads) = match kind {
        MapKind::Hash | MapKind::Ordered | MapKind::Leaf | MapKind::StoreLeaf => return None,
        MapKind::Lmdb => (
            format!("heed {} ({})", lmdb::HEED_VERSION, lmdb::lmdb_version()),
            "one write transaction + commit per insert or update, default environment flags \
             (the commit syncs the data file); insert: put NO_OVERWRITE; update: get + put",
            "a read transaction per get; per scan one read transaction, a cursor from the key",
        ),
        MapKind::Redb => (
            format!("redb {REDB_VERSION}"),
            "one write transaction + commit per insert or update, default durability \
             (Durability::Immediate), default settings; insert and update: table insert",
            "a read transaction per get; per scan one read transaction, range(key..)",
        ),
    };
    Some(PeerInfo {
        engine: kind.name().to_string(),
        version,
        writes: writes.to_string(),
        reads: reads.to_string(),
    })
}

/// A file or directory of a peer's database, made fresh and removed when dropped.
struct RemoveOnDrop {
    path: PathBuf,
    dir: bool,
}

impl RemoveOnDrop {
    /// `path`, with whatever an interrupted run left there removed (the file is made by the
    /// database).
    fn fresh_file(path: PathBuf) -> Result<RemoveOnDrop, ByteKeyError> {
        remove(&path, false).map_err(|source| ByteKeyError::PeerFile {
            path: path.clone(),
            source,
        })?;
        Ok(RemoveOnDrop { path, dir: false })
    }

    /// `path` as a new empty directory, whatever an interrupted run left there removed.
    fn fresh_dir(path: PathBuf) -> Result<RemoveOnDrop, ByteKeyError> {
        remove(&path, true)
            .and_then(|()| std::fs::create_dir(&path))
            .map_err(|source| ByteKeyError::PeerFile {
                path: path.clone(),
                source,
            })?;
        Ok(RemoveOnDrop { path, dir: true })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// Remove the file or directory at `path`; nothing there is no error.
fn remove(path: &Path, dir: bool) -> std::io::Result<()> {
    let removed = if dir {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        // Best effort: a failure here leaves a file in the pool directory, which the next run
        // removes before it starts.
        let _ = remove(&self.path, self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heed_version_is_the_locked_one() {
        let lock = include_str!("../../../../Cargo.lock");
        let locked = format!("name = \"heed\"\nversion = \"{}\"", lmdb::HEED_VERSION);
        assert!(lock.contains(&locked), "Cargo.lock has no {locked}");
    }

    #[test]
    fn peers_are_described_and_ours_are_not() {
        assert!(describe(MapKind::Hash).is_none());
        let lmdb = describe(MapKind::Lmdb).unwrap();
        assert!(lmdb.version.contains("LMDB 0."), "{lmdb:?}");
        assert!(describe(MapKind::Redb).unwrap().version.contains("redb 4."));
    }
}
