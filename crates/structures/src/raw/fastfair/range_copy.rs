//! The bulk read's copy of a leaf's run of slots into the caller's buffer (see
//! `Range::next_into`), with the transient-duplicate rule applied to the copy.

use super::super::layout::NodeView;

/// Append to `out` the entries of the node `view` shows with keys from `from` through `last`
/// (below [`EMPTY_KEY`](super::super::EMPTY_KEY), so the copy also stops at the first free
/// slot), a transient duplicate's right copy kept; of more than `limit` (at least 1) such
/// slots, only the first `limit` are copied.
///
/// Two searches bound the slots to copy (the first skipped when the node's first key is
/// already at or above `from`, as in every leaf of a scan after its first), so the copy is
/// one of known length, noting whether two neighbours share a key ([`copy_slots`]). Only then
/// (rarely: an interrupted shift not yet repaired by an open, or a torn read the caller will
/// discard) are the left copies dropped; if the copy was cut short by `limit`, the whole run
/// is copied again first, so a duplicate cut at the boundary cannot leave its left copy (the
/// caller asks for one pair more than it hands out to see such a cut).
#[inline(always)]
pub(super) fn append_entries(
    view: &NodeView<'_>,
    from: u64,
    last: u64,
    limit: usize,
    out: &mut Vec<(u64, u64)>,
) {
    // A checked load: where the shape is a constant, so is the view's length, and the check
    // folds away.
    let first = if view.key(0) >= from {
        0
    } else {
        view.lower_bound(from)
    };
    // Both at most the capacity (bounds of searches); a torn read may make `end` smaller
    // than `first` (its copy is discarded anyway).
    let end = view.upper_bound(last);
    let all = end.saturating_sub(first);
    let count = all.min(limit);
    let start = out.len();
    if copy_slots(view, first, count, out) {
        if count < all {
            // A duplicate in a copy cut short: its right copy may lie past the cut.
            out.truncate(start);
            copy_slots(view, first, all, out);
        }
        keep_right_copies(out, start);
    }
}

/// Append slots `first..first + count` of the node `view` shows to `out`; returns whether two
/// neighbours among them share a key. On x86-64 one SSE2 pass (`pmem_ordering::isa::copy_pairs`):
/// a 16-byte load and store per slot and a vector compare with the slot before.
#[inline(always)]
fn copy_slots(view: &NodeView<'_>, first: usize, count: usize, out: &mut Vec<(u64, u64)>) -> bool {
    debug_assert!(first + count <= view.capacity());
    // SAFETY: `first + count` is at most the capacity (the callers copy slots between two
    // search bounds, each at most the capacity).
    unsafe { view.append_slots_unchecked(first, count, out) }
}

/// Of each run of equal neighbouring keys in `out`'s pairs from `start` on, keep the
/// rightmost pair only (the transient-duplicate rule).
#[cold]
pub(super) fn keep_right_copies(out: &mut Vec<(u64, u64)>, start: usize) {
    let pairs = &mut out[..];
    let mut kept = start;
    for i in start..pairs.len() {
        let pair = pairs[i];
        if kept > start && pairs[kept - 1].0 == pair.0 {
            pairs[kept - 1] = pair;
        } else {
            pairs[kept] = pair;
            kept += 1;
        }
    }
    out.truncate(kept);
}
