//! Record blocks, allocated outside transactions: reserve, publish, retire, release and cancel;
//! sizes from one byte to runs of more than a MiB; a full pool; refused misuse; record and
//! transaction blocks kept apart; transactions freeing records; reopening; resolution refusing
//! what it must not touch; the statistics and the absence of fences.

use pmem_ordering::thread_stats;
use pmem_test_kit::fixture::reopen;
use pmem_undo_log::{AllocStats, RecordBlock};

use super::*;

/// 128 KiB pool, 4 KiB chunks: classes 64..1024 B, larger records are runs of chunks.
fn record_heap() -> Heap {
    anonymous_heap_under(
        LAYOUT,
        128 << 10,
        heap_config(1, 4096, 4096),
        FencePolicy::Batched,
    )
}

/// The chunk `offset` lies in.
fn chunk_of(heap: &Heap, offset: u64) -> u64 {
    let layout = heap.layout();
    (offset - layout.alloc_offset) / layout.chunk_size
}

/// Reserve, write a pattern into and publish a record of `size` bytes, fenced.
fn publish(heap: &Heap, size: u64) -> RecordBlock {
    let block = heap.reserve_record(size).unwrap();
    assert!(block.size >= size, "{block:?} for {size} bytes");
    let data = pattern(block.offset, size.min(256) as usize);
    let w = heap.pool().write(block.offset, &data).unwrap();
    heap.pool().persist(w);
    let pending = heap.publish_record(block).unwrap();
    heap.pool().fence(pending);
    block
}

/// Retire the record at `offset` and release it, fenced in between.
fn retire_and_release(heap: &Heap, offset: u64) -> RecordBlock {
    let (block, pending) = heap.retire_record(offset).unwrap();
    heap.pool().fence(pending);
    heap.release_record(block).unwrap();
    block
}

fn expect_invalid_record<T: std::fmt::Debug>(result: Result<T, TxError>, offset: u64) -> String {
    match result {
        Err(e @ TxError::InvalidRecord { offset: o, .. }) if o == offset => e.to_string(),
        other => panic!("expected InvalidRecord at {offset:#x}, got {other:?}"),
    }
}

fn expect_invalid_free<T: std::fmt::Debug>(result: Result<T, TxError>, offset: u64) -> String {
    match result {
        Err(e @ TxError::InvalidFree { offset: o, .. }) if o == offset => e.to_string(),
        other => panic!("expected InvalidFree at {offset:#x}, got {other:?}"),
    }
}

#[test]
fn a_record_goes_through_reserve_publish_retire_release() {
    let heap = record_heap();
    let empty = heap.alloc_stats();
    let block = heap.reserve_record(100).unwrap();
    assert_eq!(block.size, 128);
    // Reserved: nothing published, but the chunk is a formatted record chunk.
    assert_eq!(heap.record_block(block.offset), None);
    assert_eq!(heap.block_size(block.offset), None);
    assert!(heap.check_heap().unwrap().is_empty());
    assert_eq!(heap.alloc_stats().record_chunks, 1);
    assert_eq!(heap.alloc_stats().free_chunks, empty.free_chunks - 1);

    let pending = heap.publish_record(block).unwrap();
    heap.pool().fence(pending);
    assert_eq!(heap.record_block(block.offset), Some(block));
    assert_eq!(heap.block_size(block.offset), Some(128));
    assert_eq!(heap.check_heap().unwrap(), vec![(block.offset, 128)]);
    let stats = heap.alloc_stats();
    assert_eq!(
        (stats.objects, stats.record_objects, stats.record_bytes),
        (1, 1, 128)
    );
    assert_eq!((stats.record_publishes, stats.record_retires), (1, 0));

    let (retired, pending) = heap.retire_record(block.offset).unwrap();
    heap.pool().fence(pending);
    assert_eq!(retired, block);
    assert_eq!(heap.record_block(block.offset), None);
    assert!(heap.check_heap().unwrap().is_empty());
    // Retired, not released: readers may still hold it, so it is not handed out again.
    let other = heap.reserve_record(100).unwrap();
    assert_ne!(other.offset, block.offset);
    heap.cancel_record(other).unwrap();

    heap.release_record(retired).unwrap();
    let stats = heap.alloc_stats();
    assert_eq!((stats.record_publishes, stats.record_retires), (1, 1));
    // The chunk's last block is gone: the chunk is back in the free pool.
    assert_eq!(stats.record_chunks, 0);
    assert_eq!(stats.free_chunks, empty.free_chunks);
    assert_eq!(stats.bytes_free, empty.bytes_free);
    // And the block can be reserved again.
    assert_eq!(heap.reserve_record(128).unwrap(), block);
}

#[test]
fn a_cancelled_reservation_is_free_again_and_cannot_be_used() {
    let heap = record_heap();
    let empty = heap.alloc_stats();
    let kept = publish(&heap, 64);
    let block = heap.reserve_record(64).unwrap();
    heap.cancel_record(block).unwrap();
    assert_eq!(heap.check_heap().unwrap(), vec![(kept.offset, 64)]);
    let message = expect_invalid_record(heap.cancel_record(block), block.offset);
    assert!(message.contains("not a reserved record block"), "{message}");
    expect_invalid_record(heap.publish_record(block), block.offset);
    // The slot is the first free one again.
    assert_eq!(heap.reserve_record(1).unwrap(), block);
    heap.cancel_record(block).unwrap();
    // A run's cancellation gives its chunks back.
    let run = heap.reserve_record(10_000).unwrap();
    assert_eq!(run.size, 3 * 4096);
    heap.cancel_record(run).unwrap();
    retire_and_release(&heap, kept.offset);
    assert_eq!(heap.alloc_stats().free_chunks, empty.free_chunks);
}

#[test]
fn sizes_from_one_byte_to_runs_over_a_mib_keep_their_contents_and_survive_reopen() {
    let heap = anonymous_heap_under(
        LAYOUT,
        8 << 20,
        heap_config(1, 4096, 64 << 10),
        FencePolicy::Batched,
    );
    let chunk = 64 << 10;
    let sizes = [
        1,
        63,
        64,
        65,
        1000,
        4096,
        chunk / 4,
        chunk / 4 + 1,
        chunk,
        chunk + 1,
        1 << 20,
        (1 << 20) + 1,
        3 << 20,
    ];
    let blocks: Vec<(u64, RecordBlock)> = sizes.iter().map(|&s| (s, publish(&heap, s))).collect();
    let expected = |size: u64| {
        if size <= chunk / 4 {
            size.next_power_of_two().max(64)
        } else {
            size.div_ceil(chunk) * chunk
        }
    };
    for &(size, block) in &blocks {
        assert_eq!(block.size, expected(size), "{size} bytes");
    }
    let mut walked: Vec<(u64, u64)> = blocks.iter().map(|(_, b)| (b.offset, b.size)).collect();
    walked.sort();
    let heap = reopen(heap);
    assert_eq!(heap.check_heap().unwrap(), walked);
    for (a, b) in walked.iter().zip(walked.iter().skip(1)) {
        assert!(a.0 + a.1 <= b.0, "{a:?} overlaps {b:?}");
    }
    for &(size, block) in &blocks {
        assert_eq!(heap.record_block(block.offset), Some(block));
        let len = size.min(256);
        assert_eq!(
            bytes(heap.pool(), block.offset, len),
            pattern(block.offset, len as usize),
            "{size} bytes"
        );
    }
    let stats = heap.alloc_stats();
    assert_eq!(stats.record_objects, sizes.len() as u64);
    assert_eq!(stats.record_bytes, walked.iter().map(|b| b.1).sum::<u64>());
    // The counters count this session's calls only.
    assert_eq!(stats.record_publishes, 0);
    for &(_, block) in &blocks {
        retire_and_release(&heap, block.offset);
    }
    assert!(heap.check_heap().unwrap().is_empty());
    assert_eq!(heap.alloc_stats().record_chunks, 0);
}

#[test]
fn a_full_pool_refuses_a_record_and_leaves_the_heap_unchanged() {
    let heap = record_heap();
    let mut records = Vec::new();
    let (requested, free) = loop {
        match heap.reserve_record(1024) {
            Ok(b) => {
                heap.pool().fence(heap.publish_record(b).unwrap());
                records.push(b);
            }
            Err(TxError::PoolFull { requested, free }) => break (requested, free),
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!((requested, free), (1024, 0));
    let layout = *heap.layout();
    let usable = layout.alloc_size / layout.chunk_size - chunk_table_chunks(&layout);
    // 1 KiB blocks: three per 4 KiB chunk (the bitmap takes the fourth's room).
    assert_eq!(records.len() as u64, usable * 3);
    // Free a block: a smaller class has no chunk, a run has no room; both fail the same way.
    let freed = retire_and_release(&heap, records.pop().unwrap().offset);
    let stats: AllocStats = heap.alloc_stats();
    let walk = heap.check_heap().unwrap();
    for size in [64, 5000, u64::MAX] {
        match heap.reserve_record(size) {
            Err(e @ TxError::PoolFull { requested, free }) => {
                assert_eq!((requested, free), (size, 1024));
                assert!(e.to_string().contains("pool full"), "{e}");
            }
            other => panic!("{size}: {other:?}"),
        }
        assert_eq!(heap.alloc_stats(), stats);
        assert_eq!(heap.check_heap().unwrap(), walk);
    }
    assert_eq!(heap.reserve_record(1000).unwrap(), freed);
    match heap.reserve_record(0) {
        Err(TxError::InvalidAllocSize { size: 0, .. }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn retiring_anything_but_a_published_record_is_refused() {
    let heap = record_heap();
    let tx_block = alloc_one(&heap, 64);
    let message = expect_invalid_free(heap.retire_record(tx_block.offset()), tx_block.offset());
    assert!(message.contains("Tx::free"), "{message}");
    let tx_run = alloc_one(&heap, 5000);
    expect_invalid_free(heap.retire_record(tx_run.offset()), tx_run.offset());

    let reserved = heap.reserve_record(64).unwrap();
    let message = expect_invalid_free(heap.retire_record(reserved.offset), reserved.offset);
    assert!(message.contains("reserved"), "{message}");
    let published = publish(&heap, 64);
    let (retired, pending) = heap.retire_record(published.offset).unwrap();
    heap.pool().fence(pending);
    let message = expect_invalid_free(heap.retire_record(published.offset), published.offset);
    assert!(message.contains("already retired"), "{message}");
    // Not a block start, outside the heap, the chunk table.
    for offset in [
        published.offset + 8,
        0,
        heap.layout().alloc_offset,
        u64::MAX,
    ] {
        expect_invalid_free(heap.retire_record(offset), offset);
    }
    // Release and publish only take blocks in the right state, of the right size.
    expect_invalid_record(heap.release_record(reserved), reserved.offset);
    expect_invalid_record(heap.publish_record(retired), retired.offset);
    let wrong_size = RecordBlock {
        offset: retired.offset,
        size: 128,
    };
    let message = expect_invalid_record(heap.release_record(wrong_size), retired.offset);
    assert!(message.contains("size"), "{message}");
    heap.release_record(retired).unwrap();
    expect_invalid_record(heap.release_record(retired), retired.offset);
    heap.cancel_record(reserved).unwrap();
    // Nothing refused changed the heap.
    let mut walk = vec![(tx_block.offset(), 64), (tx_run.offset(), 8192)];
    walk.sort();
    assert_eq!(heap.check_heap().unwrap(), walk);
}

#[test]
fn record_and_transaction_blocks_never_share_a_chunk() {
    let heap = anonymous_heap_under(
        LAYOUT,
        1 << 20,
        heap_config(1, 16 << 10, 4096),
        FencePolicy::Batched,
    );
    let (mut most_records, mut most_tx) = (0, 0);
    for round in 0..40u64 {
        let size = [64, 100, 1000, 5000][(round % 4) as usize];
        let r = publish(&heap, size);
        alloc_one(&heap, size);
        // A reservation holds its chunk as a record chunk too.
        let reserved = heap.reserve_record(size).unwrap();
        if round % 3 == 0 {
            // Freed records make room that transactions must still not take while a record
            // lives in the chunk.
            retire_and_release(&heap, r.offset);
        }
        // Every live block, by the chunks it spans: records' and transactions' never meet.
        let mut record_chunks = BTreeSet::new();
        let mut tx_chunks = BTreeSet::new();
        let walk = heap.check_heap().unwrap();
        for &(offset, size) in walk.iter().chain([(reserved.offset, reserved.size)].iter()) {
            let chunks = chunk_of(&heap, offset)..=chunk_of(&heap, offset + size - 1);
            if offset == reserved.offset || heap.record_block(offset).is_some() {
                record_chunks.extend(chunks);
            } else {
                tx_chunks.extend(chunks);
            }
        }
        assert!(
            record_chunks.is_disjoint(&tx_chunks),
            "round {round}: shared chunks {:?}",
            record_chunks.intersection(&tx_chunks).collect::<Vec<_>>()
        );
        most_records = most_records.max(record_chunks.len());
        most_tx = most_tx.max(tx_chunks.len());
        heap.cancel_record(reserved).unwrap();
    }
    assert!(
        most_records > 10 && most_tx > 10,
        "{most_records} {most_tx}"
    );
}

#[test]
fn a_transaction_frees_a_published_record_but_not_a_reserved_one() {
    let heap = record_heap();
    let empty = heap.alloc_stats();
    let small = publish(&heap, 64);
    let run = publish(&heap, 5000);
    let reserved = heap.reserve_record(64).unwrap();
    // Rolled back: the records stay published.
    let result = heap.transaction(|tx| {
        tx.free(PPtr::<u8>::new(small.offset))?;
        tx.free(PPtr::<u8>::new(run.offset))?;
        Err::<(), _>(AppError::Refused(1))
    });
    assert!(matches!(result, Err(AppError::Refused(1))));
    assert_eq!(heap.record_block(small.offset), Some(small));
    assert_eq!(heap.record_block(run.offset), Some(run));
    match heap.transaction(|tx| tx.free(PPtr::<u8>::new(reserved.offset))) {
        Err(TxError::InvalidFree { offset, .. }) => assert_eq!(offset, reserved.offset),
        other => panic!("{other:?}"),
    }
    // While a transaction frees a record, the record cannot be retired.
    heap.transaction(|tx| {
        tx.free(PPtr::<u8>::new(small.offset))?;
        expect_invalid_free(heap.retire_record(small.offset), small.offset);
        tx.free(PPtr::<u8>::new(run.offset))
    })
    .unwrap();
    assert_eq!(heap.record_block(small.offset), None);
    assert_eq!(heap.record_block(run.offset), None);
    assert!(heap.check_heap().unwrap().is_empty());
    heap.cancel_record(reserved).unwrap();
    // The emptied record chunk went back to the free pool (in the transaction, or at the
    // cancel), and so did the run's chunks.
    let stats = heap.alloc_stats();
    assert_eq!(
        (stats.free_chunks, stats.record_chunks),
        (empty.free_chunks, 0)
    );
}

#[test]
fn reopening_keeps_published_records_and_drops_reserved_ones() {
    let heap = record_heap();
    let published = publish(&heap, 200);
    let reserved_here = heap.reserve_record(200).unwrap();
    let reserved_alone = heap.reserve_record(64).unwrap();
    let reserved_run = heap.reserve_record(9000).unwrap();
    let retired = publish(&heap, 300);
    let (_, pending) = heap.retire_record(retired.offset).unwrap();
    heap.pool().fence(pending);
    let heap = reopen(heap);
    assert_eq!(
        heap.check_heap().unwrap(),
        vec![(published.offset, published.size)]
    );
    assert_eq!(heap.record_block(reserved_here.offset), None);
    assert_eq!(heap.record_block(retired.offset), None);
    // Three record chunks (256 B, 64 B, 512 B), two of them empty; the run's chunks are free.
    assert_eq!(heap.alloc_stats().record_chunks, 3);
    // What was reserved, or retired, is free again.
    assert_eq!(heap.reserve_record(200).unwrap(), reserved_here);
    assert_eq!(heap.reserve_record(64).unwrap(), reserved_alone);
    assert_eq!(heap.reserve_record(300).unwrap(), retired);
    assert_eq!(heap.reserve_record(9000).unwrap(), reserved_run);
    for block in [reserved_here, reserved_alone, retired, reserved_run] {
        heap.cancel_record(block).unwrap();
    }
    // Cancelling the last block of a chunk gave the chunk back.
    assert_eq!(heap.alloc_stats().record_chunks, 1);
    assert_eq!(heap.trim_record_chunks().unwrap(), 0);
    heap.check_heap().unwrap();
}

#[test]
fn trimming_gives_back_the_empty_record_chunks_a_restart_leaves() {
    let heap = record_heap();
    let empty = heap.alloc_stats();
    let kept = publish(&heap, 64);
    for size in [100, 200, 400] {
        heap.reserve_record(size).unwrap();
    }
    let retired = publish(&heap, 1000);
    let (_, pending) = heap.retire_record(retired.offset).unwrap();
    heap.pool().fence(pending);
    let heap = reopen(heap);
    assert_eq!(heap.alloc_stats().record_chunks, 5);
    // Resolution first: a block may have to be set in a chunk the crash left empty.
    assert!(heap.resolve_record(retired.offset, 1000, true).unwrap());
    assert_eq!(heap.trim_record_chunks().unwrap(), 3);
    let stats = heap.alloc_stats();
    assert_eq!(
        (stats.record_chunks, stats.free_chunks),
        (2, empty.free_chunks - 2)
    );
    let mut walk = vec![(kept.offset, 64), (retired.offset, 1024)];
    walk.sort();
    assert_eq!(heap.check_heap().unwrap(), walk);
    assert_eq!(heap.trim_record_chunks().unwrap(), 0);
}

#[test]
fn resolution_touches_only_record_blocks_of_the_intents_shape() {
    let heap = record_heap();
    let record = publish(&heap, 128);
    let run = publish(&heap, 5000);
    let tx_block = alloc_one(&heap, 128);
    let walk = heap.check_heap().unwrap();
    let alloc = heap.layout().alloc_offset;
    let untouched = [
        (tx_block.offset(), 128, false),
        (record.offset + 64, 128, false),
        (record.offset, 64, false),
        (record.offset, 256, false),
        (run.offset, 5000 + 8192, false),
        (run.offset, 64, false),
        (run.offset + 4096, 4096, true),
        (alloc, 4096, false),
        (0, 64, true),
        (u64::MAX - 7, 4096, true),
        (record.offset, 0, false),
    ];
    for (offset, size, allocated) in untouched {
        assert!(
            !heap.resolve_record(offset, size, allocated).unwrap(),
            "{offset:#x} {size}"
        );
    }
    assert_eq!(heap.check_heap().unwrap(), walk);
    // Either size names the block: the block's own, or the one it was reserved for.
    assert!(heap.resolve_record(record.offset, 100, true).unwrap());
    assert!(heap.resolve_record(run.offset, 5000, true).unwrap());
    assert_eq!(heap.check_heap().unwrap(), walk);
    assert!(heap.resolve_record(record.offset, 128, false).unwrap());
    assert!(heap.resolve_record(run.offset, 8192, false).unwrap());
    assert_eq!(heap.check_heap().unwrap(), vec![(tx_block.offset(), 128)]);
    // A run over free chunks is made again; a slot of the record chunk is set again.
    assert!(heap.resolve_record(run.offset, 8192, true).unwrap());
    assert!(heap.resolve_record(record.offset, 128, true).unwrap());
    assert_eq!(heap.check_heap().unwrap(), walk);
    // A block this session is using is refused.
    let reserved = heap.reserve_record(128).unwrap();
    let message = expect_invalid_record(
        heap.resolve_record(reserved.offset, 128, true),
        reserved.offset,
    );
    assert!(message.contains("at open"), "{message}");
}

#[test]
fn publishing_and_retiring_flush_one_word_and_never_fence() {
    let heap = record_heap();
    // The chunk is formatted (and fenced) by the first reservation only.
    let first = heap.reserve_record(64).unwrap();
    let block = heap.reserve_record(64).unwrap();
    let before = thread_stats();
    let reserved = heap.reserve_record(64).unwrap();
    let publish_first = heap.publish_record(first).unwrap();
    let publish_second = heap.publish_record(block).unwrap();
    let (_, retire) = heap.retire_record(first.offset).unwrap();
    let delta = thread_stats() - before;
    assert_eq!(delta.fences, 0, "{delta:?}");
    assert_eq!(delta.flushes, 3, "{delta:?}");
    assert_eq!(delta.stores, 3, "{delta:?}");
    let _ = heap
        .pool()
        .fence(publish_first.and(publish_second).and(retire));
    heap.cancel_record(reserved).unwrap();
    let stats = heap.alloc_stats();
    assert_eq!((stats.record_publishes, stats.record_retires), (2, 1));
    assert_eq!(heap.check_heap().unwrap(), vec![(block.offset, 64)]);
}
