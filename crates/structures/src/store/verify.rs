//! [`Store::verify`]: the catalog, every structure's own `verify()`, and the heap's allocated
//! blocks against the blocks the structures reach; and [`verify_pool`], the same for a pool
//! file, which the `verify_pool` example prints.

use std::collections::HashMap;
use std::path::Path;

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use super::catalog::Listed;
use super::error::Error;
use super::findings::{StoreFinding, StoreProblem, StoreVerification, StructureVerification};
use super::Store;
use crate::kind::StructureKind;
use crate::records::{hash as record_hash, tree as record_tree};
use crate::{cceh, datalog, fastfair};

/// Open the store in the pool file at `path` and verify it ([`Store::verify`]). The errors are
/// those of [`Store::open`]: not a store, locked by another open, truncated, damaged past
/// opening.
pub fn verify_pool(path: impl AsRef<Path>) -> Result<StoreVerification, Error> {
    Ok(Store::open(path)?.verify())
}

impl<B: Backend> Store<B> {
    /// Walk the whole store and report every violation found. Reads only, though a structure
    /// no handle has open is opened for the walk (its open runs its recovery, as any open
    /// does); the store's lock is held throughout, so names cannot be added or removed
    /// meanwhile. Call it with no writers: a write in progress can look like damage.
    ///
    /// Checked: the catalog in the pool against the copy read at open (header, entries, no
    /// name twice); each structure's root (a 64-byte-aligned allocated block of its root's
    /// size, inside the pool); each structure's own `verify()` (CCEH, FAST&FAIR, datalog;
    /// a map of records has each of its blocks checked to be allocated); then every block the
    /// heap's metadata marks allocated against the blocks the structures reach, their root
    /// blocks included: each must be reached by exactly one structure. Leaks are reported
    /// only when every structure could list its blocks.
    pub fn verify(&self) -> StoreVerification {
        let shared = &self.shared;
        let state = shared.lock();
        let mut findings = state.catalog.verify(shared.heap.pool());
        let mut structures = Vec::new();
        let mut owned: Vec<(String, Vec<u64>)> = Vec::new();
        let mut complete = true;
        for (name, listed) in state.catalog.listed() {
            if let Err(reason) = check_root(&shared.heap, &listed) {
                let (kind, root) = (listed.kind, listed.root);
                let name = name.clone();
                let problem = StoreProblem::BadRoot {
                    name,
                    kind,
                    root,
                    reason,
                };
                findings.push(StoreFinding {
                    offset: listed.entry,
                    problem,
                });
                complete = false;
                continue;
            }
            let mut unwalkable = |error: Error| {
                let problem = StoreProblem::Unwalkable {
                    name: name.clone(),
                    error: error.to_string(),
                };
                findings.push(StoreFinding {
                    offset: listed.root,
                    problem,
                });
                complete = false;
            };
            let mut blocks = vec![listed.root];
            match shared.walk_listed(&state, &listed) {
                Ok((verification, walked)) => {
                    match walked {
                        Ok(walked) => blocks.extend(walked),
                        Err(e) => unwalkable(e),
                    }
                    let name = name.clone();
                    structures.push(StructureVerification { name, verification });
                }
                Err(e) => unwalkable(e),
            }
            owned.push((name, blocks));
        }
        drop(state);
        owned.extend(self.store_blocks());
        let mut report = StoreVerification {
            structures,
            findings,
            blocks_allocated: 0,
            blocks_reached: 0,
        };
        match shared.heap.check_heap() {
            Ok(allocated) => {
                let (found, reached) = reachability(&allocated, &owned, complete);
                report.findings.extend(found);
                report.blocks_allocated = allocated.len() as u64;
                report.blocks_reached = reached;
            }
            Err(e) => report.findings.push(StoreFinding {
                offset: shared.heap.pool().root_offset(),
                problem: StoreProblem::HeapCheck {
                    error: e.to_string(),
                },
            }),
        }
        report
    }
}

/// Whether the root of `listed` is a 64-byte-aligned allocated block of its kind's root size
/// inside the pool, or what is wrong with it.
fn check_root<B: Backend>(heap: &Heap<B>, listed: &Listed) -> Result<(), String> {
    let bytes = match listed.kind {
        StructureKind::HashMap => cceh::ROOT_BYTES,
        StructureKind::BTreeMap => fastfair::ROOT_BYTES,
        StructureKind::Datalog => datalog::ROOT_BYTES,
        StructureKind::RecordHashMap => record_hash::ROOT_BYTES,
        StructureKind::RecordBTreeMap => record_tree::ROOT_BYTES,
        StructureKind::LeafMap => crate::leafmap::ROOT_BYTES,
    };
    let root = listed.root;
    if heap.pool().check_range(root, bytes).is_err() {
        return Err(format!("{bytes} bytes there are not inside the pool"));
    }
    if !root.is_multiple_of(64) {
        return Err("not aligned to 64 bytes".to_string());
    }
    if heap.block_size(root).is_none_or(|size| size < bytes) {
        return Err(format!("no allocated block of {bytes} bytes starts there"));
    }
    Ok(())
}

/// The heap's `allocated` blocks (offset, size) against the blocks each owner reaches: blocks
/// reached twice, reached but not allocated, and, if `complete` (every owner's blocks are
/// known), allocated but reached by none; with the number of distinct blocks reached.
pub(crate) fn reachability(
    allocated: &[(u64, u64)],
    owned: &[(String, Vec<u64>)],
    complete: bool,
) -> (Vec<StoreFinding>, u64) {
    let mut findings = Vec::new();
    let sizes: HashMap<u64, u64> = allocated.iter().copied().collect();
    let mut reached: HashMap<u64, &str> = HashMap::new();
    for (owner, blocks) in owned {
        for &block in blocks {
            if let Some(first) = reached.insert(block, owner) {
                let problem = StoreProblem::ReachedTwice {
                    first: first.to_string(),
                    second: owner.clone(),
                };
                findings.push(StoreFinding {
                    offset: block,
                    problem,
                });
            } else if !sizes.contains_key(&block) {
                let owner = owner.clone();
                let problem = StoreProblem::ReachedNotAllocated { owner };
                findings.push(StoreFinding {
                    offset: block,
                    problem,
                });
            }
        }
    }
    if complete {
        for &(block, bytes) in allocated {
            if !reached.contains_key(&block) {
                let problem = StoreProblem::Leaked { bytes };
                findings.push(StoreFinding {
                    offset: block,
                    problem,
                });
            }
        }
    }
    findings.sort_by_key(|f| f.offset);
    (findings, reached.len() as u64)
}
