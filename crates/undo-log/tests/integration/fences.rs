//! Fence counts per policy, asserted exactly: a transaction that snapshots K ranges up front and
//! then writes them issues K + 2 fences under strict, 3 under batched, 2 under themis, whether it
//! snapshots them one by one or as one batch.

use pmem_test_kit::fixture::{anonymous_heap_under, TEST_HEAP_16K_LOGS};
use pmem_undo_log::{FencePolicy, Heap, TxError};

fn heap(policy: FencePolicy) -> Heap {
    anonymous_heap_under("fences", 4 << 20, TEST_HEAP_16K_LOGS, policy)
}

/// Snapshot K words up front, then write them; returns (fences, nt->t fences) of that one
/// transaction.
fn snapshot_then_write(heap: &Heap, k: u64) -> (u64, u64) {
    let base = heap.pool().root_offset();
    let before = heap.tx_stats();
    heap.transaction(|tx| {
        for i in 0..k {
            tx.snapshot(base + 64 * i, 8)?;
        }
        for i in 0..k {
            tx.write_value(base + 64 * i, &(i + 1))?;
        }
        Ok::<_, TxError>(())
    })
    .unwrap();
    let after = heap.tx_stats();
    assert_eq!(after.committed, before.committed + 1);
    (
        after.fences - before.fences,
        after.nt_t_fences - before.nt_t_fences,
    )
}

#[test]
fn strict_issues_k_plus_two_fences() {
    let heap = heap(FencePolicy::Strict);
    for k in [1, 2, 8, 32] {
        assert_eq!(snapshot_then_write(&heap, k), (k + 2, k), "K = {k}");
    }
}

#[test]
fn batched_issues_three_fences_whatever_k() {
    let heap = heap(FencePolicy::Batched);
    for k in [1, 2, 8, 32] {
        assert_eq!(snapshot_then_write(&heap, k), (3, 1), "K = {k}");
    }
}

#[test]
fn themis_issues_two_fences() {
    let heap = heap(FencePolicy::Themis);
    for k in [1, 2, 8, 32] {
        assert_eq!(snapshot_then_write(&heap, k), (2, 1), "K = {k}");
    }
}

#[test]
fn ideal_issues_two_fences() {
    let heap = heap(FencePolicy::Ideal);
    for k in [1, 8] {
        assert_eq!(snapshot_then_write(&heap, k), (2, 1), "K = {k}");
    }
}

#[test]
fn an_empty_transaction_issues_no_fence() {
    for policy in FencePolicy::ALL {
        let heap = heap(policy);
        let before = heap.tx_stats();
        heap.transaction(|_| Ok::<_, TxError>(())).unwrap();
        assert_eq!(heap.tx_stats().fences, before.fences, "{policy:?}");
    }
}

#[test]
fn writes_land_and_commit_under_every_policy() {
    for policy in FencePolicy::ALL {
        let heap = heap(policy);
        snapshot_then_write(&heap, 4);
        let base = heap.pool().root_offset();
        for i in 0..4u64 {
            assert_eq!(heap.pool().read::<u64>(base + 64 * i).unwrap(), i + 1);
        }
    }
}

#[test]
fn objects_update_both_ways() {
    use pmem_undo_log::object;
    for policy in FencePolicy::ALL {
        let heap = heap(policy);
        let slot = heap.pool().root_offset();
        let first = object::create(&heap, slot, &[1u8; 256]).unwrap();
        object::update_in_place(&heap, slot, &[2u8; 256]).unwrap();
        let mut buf = [0u8; 256];
        heap.pool().read_bytes(first.offset(), &mut buf).unwrap();
        assert_eq!(buf, [2u8; 256]);
        let second = object::update_out_of_place(&heap, slot, &[3u8; 256]).unwrap();
        assert_ne!(second, first);
        heap.pool().read_bytes(second.offset(), &mut buf).unwrap();
        assert_eq!(buf, [3u8; 256]);
        let blocks = heap.check_heap().unwrap();
        assert_eq!(
            blocks,
            vec![(second.offset(), 256)],
            "the old object was freed"
        );
    }
}

/// Snapshot K words as one batch, then write them; returns (fences, nt->t fences).
fn batch_then_write(heap: &Heap, k: u64) -> (u64, u64) {
    let base = heap.pool().root_offset();
    let before = heap.tx_stats();
    heap.transaction(|tx| {
        let ranges: Vec<(u64, u64)> = (0..k).map(|i| (base + 64 * i, 8)).collect();
        tx.snapshot_many(&ranges)?;
        for i in 0..k {
            tx.write_value(base + 64 * i, &(i + 1))?;
        }
        Ok::<_, TxError>(())
    })
    .unwrap();
    let after = heap.tx_stats();
    (
        after.fences - before.fences,
        after.nt_t_fences - before.nt_t_fences,
    )
}

#[test]
fn a_batch_costs_the_fences_of_single_snapshots_under_every_policy() {
    for policy in FencePolicy::ALL {
        let heap = heap(policy);
        for k in [1, 8, 32] {
            assert_eq!(
                batch_then_write(&heap, k),
                snapshot_then_write(&heap, k),
                "{policy:?}, K = {k}"
            );
        }
    }
}

#[test]
fn a_batch_that_does_not_fit_logs_nothing() {
    let heap = heap(FencePolicy::Batched);
    let base = heap.pool().root_offset();
    let before = heap.pool().read::<u64>(base).unwrap();
    // 16 KiB logs: 600 entries of 32 bytes do not fit.
    let ranges: Vec<(u64, u64)> = (0..600).map(|i| (base + 8 * i, 8)).collect();
    let err = heap
        .transaction(|tx| {
            let refused = tx.snapshot_many(&ranges).unwrap_err();
            assert!(matches!(refused, TxError::LogFull { .. }), "{refused}");
            // Nothing was logged: 500 of the entries (16,000 bytes) still fit.
            tx.snapshot_many(&ranges[..500])?;
            tx.write_value(base, &7u64)?;
            Err::<(), _>(refused)
        })
        .unwrap_err();
    assert!(matches!(err, TxError::LogFull { .. }));
    assert_eq!(heap.pool().read::<u64>(base).unwrap(), before);
}

/// Fences of one transaction run by `body`.
fn fences_of(
    heap: &Heap,
    body: impl FnOnce(&pmem_undo_log::Tx<'_, pmem_ordering::Hardware>) -> Result<(), TxError>,
) -> u64 {
    let before = heap.tx_stats().fences;
    heap.transaction(body).unwrap();
    heap.tx_stats().fences - before
}

#[test]
fn publishing_allocations_and_frees_costs_no_fence_of_its_own() {
    let heap = heap(FencePolicy::Batched);
    let slot = heap.pool().root_offset();
    // Format the chunk first: a chunk taken from the free pool logs its word at commit, and
    // pays a fence for it.
    let first = fences_of(&heap, |tx| {
        let p = tx.alloc(64)?;
        tx.write(p.offset(), &[1; 64])?;
        tx.write_value(slot, &p.offset())
    });
    assert_eq!(first, 4, "a fresh chunk's word");
    // Allocate, fill, link: the link's fence orders the allocation's intent too.
    let alloc = fences_of(&heap, |tx| {
        let p = tx.alloc(64)?;
        tx.write(p.offset(), &[2; 64])?;
        tx.write_value(slot + 8, &p.offset())
    });
    assert_eq!(alloc, 3, "allocate and link");
    // Free and unlink.
    let free = fences_of(&heap, |tx| {
        let p: u64 = tx.read(slot + 8)?;
        tx.free(pmem_ordering::PPtr::<u8>::new(p))?;
        tx.write_value(slot + 8, &0u64)
    });
    assert_eq!(free, 3, "free and unlink");
    // Out of place: free the old block, allocate, write, swing.
    let before = heap.tx_stats().fences;
    pmem_undo_log::object::update_out_of_place(&heap, slot, &[3; 64]).unwrap();
    assert_eq!(heap.tx_stats().fences - before, 3, "update out of place");
    // A free after the last write: its intents are ordered at commit, by a fence of its own.
    let late = fences_of(&heap, |tx| {
        let p: u64 = tx.read(slot)?;
        tx.write_value(slot, &0u64)?;
        tx.free(pmem_ordering::PPtr::<u8>::new(p))
    });
    assert_eq!(late, 4, "a free after the last write");
}

/// The floor of a one-word transaction under the batched policy, counted on the pool: the log
/// entry (24-byte header and the word, non-temporal), the data line and the lane's header line
/// (the commit), so 3 lines, 2 flushes and 3 fences: the entry before the data, the data before
/// the commit, the commit before returning. K words add K data lines and K 32-byte entries,
/// not fences.
#[test]
fn a_one_word_transaction_costs_three_fences_two_flushes_and_three_lines() {
    let heap = heap(FencePolicy::Batched);
    let word = heap.pool().root_offset();
    for k in [1u64, 8, 32] {
        let ranges: Vec<(u64, u64)> = (0..k).map(|i| (word + 64 * i, 8)).collect();
        pmem_ordering::stats::reset_thread_stats();
        heap.transaction(|tx| {
            tx.snapshot_many(&ranges)?;
            for &(offset, _) in &ranges {
                tx.write_value(offset, &k)?;
            }
            Ok::<_, TxError>(())
        })
        .unwrap();
        let s = pmem_ordering::stats::thread_stats();
        assert_eq!(s.fences, 3, "K = {k}");
        assert_eq!(s.flushes, k + 1, "K = {k}: the data lines and the commit's");
        assert_eq!(s.nt_stores, 1, "K = {k}: one copy of the entries");
        assert_eq!(s.nt_bytes, 32 * k, "K = {k}");
        assert_eq!(s.stores, k + 1, "K = {k}: the words and the commit");
    }
}

/// An allocation's intent is logged in the same non-temporal copy as the snapshots that follow
/// it (batched policy), and still costs no fence of its own: one copy, three fences. Under
/// strict each entry is a copy with its fence: the intent's, then each snapshot's, then the
/// commit's two.
#[test]
fn an_allocation_shares_the_copy_of_the_next_snapshots() {
    for (policy, copies, fences) in [(FencePolicy::Batched, 1, 3), (FencePolicy::Strict, 3, 5)] {
        let heap = heap(policy);
        let slot = heap.pool().root_offset();
        // Format a chunk first: a chunk taken from the free pool logs its word at commit.
        heap.transaction(|tx| {
            let p = tx.alloc(64)?;
            tx.write(p.offset(), &[1; 64])
        })
        .unwrap();
        pmem_ordering::stats::reset_thread_stats();
        heap.transaction(|tx| {
            let p = tx.alloc(64)?;
            tx.write(p.offset(), &[2; 64])?;
            tx.snapshot_many(&[(slot, 8), (slot + 64, 8)])?;
            tx.write_value(slot, &p.offset())?;
            tx.write_value(slot + 64, &1u64)
        })
        .unwrap();
        let s = pmem_ordering::stats::thread_stats();
        assert_eq!(s.nt_stores, copies, "{policy:?}: copies into the log");
        assert_eq!(s.fences, fences, "{policy:?}");
    }
}
