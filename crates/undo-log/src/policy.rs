//! Fence policies: how a transaction pays for ordering its log entries before its data.
//!
//! The one ordering undo logging needs for correctness is *log entry before the data it
//! protects*, a non-temporal -> temporal ordering; the fences that only order that are the ones
//! the Themis model removes (Themis, Sec. II-D, II-E, III-B). Where the policy takes effect is
//! in `tx.rs` (snapshot and write).

use pmem_ordering::PersistModel;

/// How a transaction orders its log entries before its data (Themis, Sec. II-D, III-B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum FencePolicy {
    /// A fence after every log entry: the baseline that PMDK-style libraries pay. A
    /// transaction that snapshots K ranges issues K + 2 fences.
    Strict,
    /// Log entries share one fence: the first data write after a group of entries fences once
    /// (skipped if the thread already fenced since), through the nt -> t tokens. 3 fences for
    /// K up-front snapshots, whatever K is.
    #[default]
    Batched,
    /// No nt -> t fence: correct only where the Themis model holds (the simulator's Themis
    /// model; no shipping CPU). 2 fences per transaction.
    Themis,
    /// No nt -> t fence at all and no claim of safety: the performance upper bound.
    Ideal,
}

impl FencePolicy {
    /// Every policy.
    pub const ALL: [FencePolicy; 4] = [
        FencePolicy::Strict,
        FencePolicy::Batched,
        FencePolicy::Themis,
        FencePolicy::Ideal,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            FencePolicy::Strict => "strict",
            FencePolicy::Batched => "batched",
            FencePolicy::Themis => "themis",
            FencePolicy::Ideal => "ideal",
        }
    }

    /// The policy's code in the heap's superblock (0 is never a code: a zero word is no
    /// policy).
    pub(crate) fn code(self) -> u64 {
        match self {
            FencePolicy::Strict => 1,
            FencePolicy::Batched => 2,
            FencePolicy::Themis => 3,
            FencePolicy::Ideal => 4,
        }
    }

    /// The policy whose code is `code`, if any.
    pub(crate) fn from_code(code: u64) -> Option<FencePolicy> {
        FencePolicy::ALL.into_iter().find(|p| p.code() == code)
    }

    /// The persistency model under which the policy orders a log entry before a data write.
    pub(crate) fn persist_model(self) -> PersistModel {
        match self {
            FencePolicy::Strict | FencePolicy::Batched => PersistModel::X86,
            FencePolicy::Themis => PersistModel::Themis,
            FencePolicy::Ideal => PersistModel::Ideal,
        }
    }
}
