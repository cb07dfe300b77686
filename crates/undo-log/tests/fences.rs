//! Fence counts per policy, asserted exactly: a transaction that snapshots K ranges up front and
//! then writes them issues K + 2 fences under strict, 3 under batched, 2 under themis.

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
