//! The atomics, fences and backoff the locks and versions of this module are built on:
//! std's, or under `--cfg loom` the `loom` crate's, so that the loom models in
//! [`super::model`] explore the real protocol code rather than a copy of it.

#[cfg(not(loom))]
pub(super) use crossbeam_utils::Backoff;
#[cfg(not(loom))]
pub(super) use std::sync::atomic::{fence, AtomicU64, Ordering};

#[cfg(loom)]
pub(super) use loom::sync::atomic::{fence, AtomicU64, Ordering};

/// Under loom, a wait must hand the turn to loom's scheduler, which crossbeam's backoff
/// (a spin, then an OS yield) does not.
#[cfg(loom)]
pub(super) struct Backoff;

#[cfg(loom)]
impl Backoff {
    pub(super) fn new() -> Backoff {
        Backoff
    }

    pub(super) fn snooze(&self) {
        loom::thread::yield_now();
    }
}
