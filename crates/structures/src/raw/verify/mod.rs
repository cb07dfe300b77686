//! What a structure's `verify()` reports: typed findings (which structure, where in the pool,
//! what is wrong, with the values involved), and the totals of the walk.
//!
//! A verification reads and never writes: it walks every reachable block of one structure,
//! checks every invariant it can, and lists each violation instead of stopping at the first.
//! [`crate::cceh::Cceh::verify`], [`crate::fastfair::FastFair::verify`],
//! [`crate::records::RecordHashMap::verify`], [`crate::records::RecordTreeMap::verify`] and
//! [`crate::datalog::Datalog::verify`] produce them; [`crate::store::Store::verify`] gathers
//! them for every structure of a store.

use std::fmt;

use pmem_ordering::Backend;
use pmem_undo_log::Heap;

use crate::kind::StructureKind;

mod problem;

pub use problem::Problem;

/// The outcome of one structure's `verify()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    /// The structure verified.
    pub structure: StructureKind,
    /// The offset of its root (the CCEH root, the FAST&FAIR root object, a map of records'
    /// root object, the datalog root).
    pub root: u64,
    /// Every violation found, in walk order; empty for a healthy structure.
    pub findings: Vec<Finding>,
    /// Blocks reached: the CCEH directory and segments (read whole) and a retired directory
    /// (checked to be allocated); the FAST&FAIR nodes (read whole) and the redo area (checked
    /// to be allocated); for the maps of records, their table's or layers' blocks, each
    /// layer's root object and the intent area (checked to be allocated) and each record (read
    /// whole); the datalog's inode table, log pages and live data blocks. For a healthy
    /// structure, the length of its `blocks()` (for the maps of records, their root block
    /// aside).
    pub blocks_walked: u64,
    /// Live keys seen (for a datalog: files).
    pub keys: u64,
}

impl Verification {
    /// An empty report for the structure at `root`.
    pub(crate) fn new(structure: StructureKind, root: u64) -> Verification {
        Verification {
            structure,
            root,
            findings: Vec::new(),
            blocks_walked: 0,
            keys: 0,
        }
    }

    /// Whether nothing was found.
    pub fn is_healthy(&self) -> bool {
        self.findings.is_empty()
    }

    /// Record that `problem` was found at pool offset `offset`.
    pub(crate) fn report(&mut self, offset: u64, problem: Problem) {
        self.findings.push(Finding {
            structure: self.structure,
            root: self.root,
            offset,
            problem,
        });
    }
}

impl fmt::Display for Verification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {:#x}: {} blocks, {} keys, ",
            self.structure.describe(),
            self.root,
            self.blocks_walked,
            self.keys
        )?;
        if self.findings.is_empty() {
            return write!(f, "no damage found");
        }
        write!(f, "{} findings", self.findings.len())?;
        for finding in &self.findings {
            write!(f, "\n  at {:#x}: {}", finding.offset, finding.problem)?;
        }
        Ok(())
    }
}

/// Whether `offset` names a block a walk can read: aligned to `alignment` and `bytes` long
/// inside the pool (each reported if not, and then `false`). A block the heap did not allocate
/// is reported but still read: its bytes may tell more.
pub(crate) fn readable_block<B: Backend>(
    heap: &Heap<B>,
    report: &mut Verification,
    offset: u64,
    bytes: u64,
    alignment: u64,
) -> bool {
    if !offset.is_multiple_of(alignment) {
        report.report(offset, Problem::Misaligned { alignment });
        return false;
    }
    if heap.pool().check_range(offset, bytes).is_err() {
        report.report(offset, Problem::OutOfPool { len: bytes });
        return false;
    }
    if heap.block_size(offset).is_none_or(|size| size < bytes) {
        report.report(offset, Problem::NotAllocated { bytes });
    }
    true
}

/// One violation: where it is and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The kind of structure it was found in.
    pub structure: StructureKind,
    /// The offset of that structure's root.
    pub root: u64,
    /// The pool offset of the damaged word, slot, entry or block.
    pub offset: u64,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at {:#x}: at {:#x}: {}",
            self.structure.describe(),
            self.root,
            self.offset,
            self.problem
        )
    }
}
