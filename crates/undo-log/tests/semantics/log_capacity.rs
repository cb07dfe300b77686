//! The typed errors of a full lane log: a snapshot larger than the log, snapshots that add up
//! past it, and a log that fills at commit; each rolls the transaction back.

use pmem_ordering::Hardware;
use pmem_undo_log::Tx;

use super::*;

/// Bytes of a log entry's header (the lane format is private to the crate: this is the 24 the
/// capacity below leaves out).
const ENTRY_HEADER: u64 = 24;

/// A heap with one lane of 1024 bytes of log: 1000 snapshot bytes at most (24-byte header).
fn tiny_log_heap(policy: FencePolicy) -> Heap {
    anonymous_heap_under(LAYOUT, 1 << 20, heap_config(1, 1024, 16 << 10), policy)
}

/// Writes `count` 100-byte slots 128 bytes apart from `root`, slot `i` filled with `first + i`:
/// each snapshot takes 24 + 104 = 128 bytes of the log, so eight fill a 1024-byte one.
fn write_slots(tx: &Tx<'_, Hardware>, root: u64, count: u64, first: u8) -> Result<(), TxError> {
    for i in 0..count {
        tx.write(root + 128 * i, &[first + i as u8; 100])?;
    }
    Ok(())
}

#[test]
fn a_snapshot_larger_than_the_lane_log_is_refused_before_anything_is_written() {
    for policy in FencePolicy::ALL {
        let heap = tiny_log_heap(policy);
        let pool = heap.pool();
        let root = pool.root_offset();
        let layout = *heap.layout();
        // A committed transaction first, so the log holds older entries.
        heap.transaction(|tx| tx.write(root, &pattern(3, 600)))
            .unwrap();
        let lane_area = |pool: &Pool| {
            bytes(
                pool,
                layout.lane_header(0),
                ENTRY_HEADER + layout.lane_log_bytes + 40,
            )
        };
        let log_before = lane_area(pool);
        let data_before = bytes(pool, root, 2048);

        for len in [1001u64, 1024, 2000] {
            let result = heap.transaction(|tx| tx.write(root, &vec![0x55; len as usize]));
            match result {
                Err(TxError::SnapshotTooLarge {
                    len: l,
                    capacity: 1000,
                }) if l == len => {}
                other => panic!("{policy:?}, {len} bytes: {other:?}"),
            }
            let result = heap.transaction(|tx| tx.snapshot(root + 8, len));
            assert!(
                matches!(result, Err(TxError::SnapshotTooLarge { .. })),
                "{result:?}"
            );
            assert_eq!(bytes(pool, root, 2048), data_before, "{policy:?}");
            assert_eq!(
                lane_area(pool),
                log_before,
                "{policy:?}: the log was written"
            );
        }
        // Swallowed, the refused write changes nothing and the rest commits.
        heap.transaction(|tx| {
            let refused = tx.write(root + 700, &[0x66; 1500]);
            assert!(matches!(refused, Err(TxError::SnapshotTooLarge { .. })));
            tx.write(root + 2000, &[0x67; 8])
        })
        .unwrap();
        assert_eq!(bytes(pool, root, 2000), data_before[..2000]);
        assert_eq!(bytes(pool, root + 2000, 8), [0x67; 8]);
        // After earlier writes in the same transaction, `?` rolls them back.
        let before = bytes(pool, root, 2048);
        let result = heap.transaction(|tx| {
            tx.write(root, &[1; 100])?;
            tx.write(root + 200, &[2; 1100])
        });
        assert!(matches!(result, Err(TxError::SnapshotTooLarge { .. })));
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");
        // Exactly the capacity fits.
        heap.transaction(|tx| tx.write(root, &[3; 1000])).unwrap();
        assert_eq!(bytes(pool, root, 1000), vec![3; 1000]);
        // A fresh block is not snapshotted, so it can be written whatever its size.
        heap.transaction(|tx| {
            let p = tx.alloc(6000)?;
            tx.write(p.offset(), &[4; 6000])
        })
        .unwrap();
    }
}

#[test]
fn log_full_when_snapshots_add_up_and_the_transaction_rolls_back() {
    for policy in FencePolicy::ALL {
        let heap = tiny_log_heap(policy);
        let pool = heap.pool();
        let root = pool.root_offset();
        let before = bytes(pool, root, 2048);
        // Each 100-byte snapshot takes 24 + 104 = 128 bytes: eight fill the 1024-byte log.
        let result = heap.transaction(|tx| {
            write_slots(tx, root, 9, 1)?;
            Ok::<_, TxError>(())
        });
        match result {
            Err(TxError::LogFull {
                needed: 128,
                free: 0,
            }) => {}
            other => panic!("{policy:?}: {other:?}"),
        }
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");

        let result = heap.transaction(|tx| {
            write_slots(tx, root, 7, 1)?;
            tx.write(root + 1024, &[9; 200])
        });
        match result {
            Err(TxError::LogFull {
                needed: 224,
                free: 128,
            }) => {}
            other => panic!("{policy:?}: {other:?}"),
        }
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");

        // Swallowed, the refused write wrote nothing and the others commit.
        heap.transaction(|tx| {
            write_slots(tx, root, 8, 1)?;
            assert!(matches!(
                tx.write(root + 1024, &[9; 8]),
                Err(TxError::LogFull { .. })
            ));
            Ok::<_, TxError>(())
        })
        .unwrap();
        for i in 0..8u64 {
            assert_eq!(bytes(pool, root + 128 * i, 100), vec![i as u8 + 1; 100]);
        }
        assert_eq!(bytes(pool, root + 1024, 8), before[1024..1032]);
    }
}

#[test]
fn a_log_full_at_commit_rolls_back_data_and_allocations() {
    for policy in FencePolicy::ALL {
        let heap = tiny_log_heap(policy);
        let pool = heap.pool();
        let root = pool.root_offset();
        let before = bytes(pool, root, 2048);
        // The user's snapshots fill the log; the allocator's metadata has no room at commit.
        let result = heap.transaction(|tx| {
            write_slots(tx, root, 8, 0xA0)?;
            let p = tx.alloc(64)?;
            tx.write(p.offset(), &[1; 64])
        });
        assert!(
            matches!(result, Err(TxError::LogFull { .. })),
            "{policy:?}: {result:?}"
        );
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");
        assert!(heap.check_heap().unwrap().is_empty(), "{policy:?}");
        assert_eq!(heap.alloc_stats().objects, 0);

        // Room for the chunk word of a fresh chunk but not for its bitmap word: the commit
        // fails after writing some metadata, which must be rolled back too.
        let result = heap.transaction(|tx| {
            write_slots(tx, root, 7, 0xB0)?;
            tx.write(root + 1024, &[0xBF; 72])?; // 24 + 72 bytes: 992 used, 32 free
            let p = tx.alloc(64)?;
            tx.write(p.offset(), &[2; 64])
        });
        assert!(
            matches!(result, Err(TxError::LogFull { .. })),
            "{policy:?}: {result:?}"
        );
        assert_eq!(bytes(pool, root, 2048), before, "{policy:?}");
        assert!(heap.check_heap().unwrap().is_empty(), "{policy:?}");

        // Nothing leaked: the allocator works as on a new heap.
        let p = alloc_one(&heap, 64);
        assert_eq!(heap.check_heap().unwrap(), vec![(p.offset(), 64)]);
        let q = alloc_one(&heap, 100_000);
        assert_eq!(offsets(&heap.check_heap().unwrap()).len(), 2);
        free_one(&heap, p);
        free_one(&heap, q);
        assert!(heap.check_heap().unwrap().is_empty());
    }
}
