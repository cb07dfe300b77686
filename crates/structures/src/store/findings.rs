//! What [`Store::verify`](crate::Store::verify) reports: each structure's [`Verification`],
//! and the store's own findings (its catalog, and the heap's allocated blocks against the
//! blocks the structures reach).

use std::fmt;

use crate::kind::StructureKind;
use crate::verify::Verification;

/// The outcome of [`Store::verify`](crate::Store::verify).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreVerification {
    /// Each structure verified, by name, in catalog order.
    pub structures: Vec<StructureVerification>,
    /// What is wrong with the catalog or the allocator; empty for a healthy store.
    pub findings: Vec<StoreFinding>,
    /// Blocks the heap's metadata marks allocated.
    pub blocks_allocated: u64,
    /// Distinct blocks the catalog and the structures reach (their root blocks included).
    pub blocks_reached: u64,
}

/// One structure's verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StructureVerification {
    /// Its name in the store.
    pub name: String,
    /// What its `verify()` found.
    pub verification: Verification,
}

impl StoreVerification {
    /// Whether nothing was found, in the store or in any structure.
    pub fn is_healthy(&self) -> bool {
        self.findings.is_empty() && self.structures.iter().all(|s| s.verification.is_healthy())
    }

    /// Findings in all: the store's and every structure's.
    pub fn finding_count(&self) -> usize {
        self.findings.len()
            + self
                .structures
                .iter()
                .map(|s| s.verification.findings.len())
                .sum::<usize>()
    }

    /// The verification of the structure named `name`, if it was verified.
    pub fn structure(&self, name: &str) -> Option<&Verification> {
        self.structures
            .iter()
            .find(|s| s.name == name)
            .map(|s| &s.verification)
    }
}

impl fmt::Display for StoreVerification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "store: {} structures, {} blocks allocated, {} reached: ",
            self.structures.len(),
            self.blocks_allocated,
            self.blocks_reached
        )?;
        match self.finding_count() {
            0 => write!(f, "no damage found")?,
            n => write!(f, "{n} findings")?,
        }
        for finding in &self.findings {
            write!(f, "\n  at {:#x}: {}", finding.offset, finding.problem)?;
        }
        for s in &self.structures {
            let text = s.verification.to_string().replace('\n', "\n  ");
            write!(f, "\n{:?}: {text}", s.name)?;
        }
        Ok(())
    }
}

/// One store-level violation: where it is and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreFinding {
    /// The pool offset of the catalog word or entry, or of the block.
    pub offset: u64,
    /// What is wrong.
    pub problem: StoreProblem,
}

impl fmt::Display for StoreFinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "store: at {:#x}: {}", self.offset, self.problem)
    }
}

/// What is wrong at a store finding's offset.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreProblem {
    /// The catalog's header (magic, version, capacity) differs from what the store opened.
    CatalogHeader {
        /// What differs.
        reason: String,
    },
    /// A catalog entry does not decode.
    BadCatalogEntry {
        /// Its index.
        slot: u64,
        /// What is wrong.
        reason: String,
    },
    /// A catalog entry differs from the copy the store read at open.
    CatalogChanged {
        /// Its index.
        slot: u64,
    },
    /// Two catalog entries carry one name.
    DuplicateName {
        /// The name.
        name: String,
        /// The index of the first entry with it.
        first_slot: u64,
    },
    /// A structure's root is not a 64-byte-aligned allocated block of its root's size inside
    /// the pool: the structure is not verified.
    BadRoot {
        /// The structure.
        name: String,
        /// Its kind.
        kind: StructureKind,
        /// The root offset.
        root: u64,
        /// What is wrong.
        reason: String,
    },
    /// The structure could not be opened for the walk, or could not list its blocks.
    Unwalkable {
        /// The structure.
        name: String,
        /// The error.
        error: String,
    },
    /// The heap's own metadata walk failed: allocations cannot be checked.
    HeapCheck {
        /// The error.
        error: String,
    },
    /// Allocated, but reached by no structure nor the catalog: leaked.
    Leaked {
        /// The block's size.
        bytes: u64,
    },
    /// Reached by a structure, but not allocated.
    ReachedNotAllocated {
        /// The structure.
        owner: String,
    },
    /// Reached by two structures.
    ReachedTwice {
        /// The structure that reached it first.
        first: String,
        /// The other one.
        second: String,
    },
}

impl fmt::Display for StoreProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreProblem::CatalogHeader { reason } => write!(f, "catalog header: {reason}"),
            StoreProblem::BadCatalogEntry { slot, reason } => {
                write!(f, "catalog entry {slot} is invalid: {reason}")
            }
            StoreProblem::CatalogChanged { slot } => write!(
                f,
                "catalog entry {slot} differs from the one read when the store opened"
            ),
            StoreProblem::DuplicateName { name, first_slot } => {
                write!(f, "name {name:?} is also catalog entry {first_slot}'s")
            }
            StoreProblem::BadRoot {
                name,
                kind,
                root,
                reason,
            } => write!(
                f,
                "{name:?}, {}, has root {root:#x}: {reason}; not verified",
                kind.describe()
            ),
            StoreProblem::Unwalkable { name, error } => {
                write!(
                    f,
                    "{name:?} cannot be walked ({error}); leaks are not checked"
                )
            }
            StoreProblem::HeapCheck { error } => write!(
                f,
                "the heap's metadata fails its own check ({error}); allocations are not checked"
            ),
            StoreProblem::Leaked { bytes } => write!(
                f,
                "a block of {bytes} bytes is allocated but no structure reaches it: leaked"
            ),
            StoreProblem::ReachedNotAllocated { owner } => {
                write!(f, "{owner:?} reaches this block, which is not allocated")
            }
            StoreProblem::ReachedTwice { first, second } => {
                write!(f, "both {first:?} and {second:?} reach this block")
            }
        }
    }
}
