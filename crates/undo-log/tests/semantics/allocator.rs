//! The allocator's promises: full pools and frees that make room, refused sizes and frees,
//! no overlap, statistics that agree with the heap walk, aborted allocations returned.

use super::*;

/// 128 KiB pool, 4 KiB chunks: classes 64..1024 B, larger sizes are runs of chunks.
fn chunky_heap() -> Heap {
    anonymous_heap_under(
        LAYOUT,
        128 << 10,
        heap_config(1, 4096, 4096),
        FencePolicy::Batched,
    )
}

/// Allocate `size`-byte blocks until the pool is full, `batch` per transaction.
fn fill(heap: &Heap, size: u64, batch: usize) -> Vec<PPtr<u8>> {
    let mut all = Vec::new();
    loop {
        let (got, full) = heap
            .transaction(|tx| {
                let mut got = Vec::new();
                for _ in 0..batch {
                    match tx.alloc(size) {
                        Ok(p) => got.push(p),
                        Err(TxError::PoolFull { requested, .. }) => {
                            assert_eq!(requested, size);
                            return Ok((got, true));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok((got, false))
            })
            .unwrap();
        all.extend(got);
        if full {
            return all;
        }
    }
}

#[test]
fn pool_full_for_small_and_large_sizes_then_frees_make_room() {
    let heap = chunky_heap();
    let layout = *heap.layout();
    let usable = layout.alloc_size / layout.chunk_size - chunk_table_chunks(&layout);
    let total = heap.alloc_stats();
    assert_eq!(total.total_chunks, layout.alloc_size / layout.chunk_size);
    assert_eq!(total.free_chunks, usable);

    // Small blocks until full.
    let small = fill(&heap, 64, 100);
    assert!(small.len() as u64 >= usable * 60, "{} blocks", small.len());
    assert_eq!(heap.alloc_stats().free_chunks, 0);
    for size in [64, 1, 1024] {
        match heap.transaction(|tx| tx.alloc(size)) {
            Err(e @ TxError::PoolFull { requested, .. }) => {
                assert_eq!(requested, size);
                let message = e.to_string();
                assert!(
                    message.contains("pool full") && message.contains(&format!("{size} bytes")),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    match heap.transaction(|tx| tx.alloc(4096 * 3)) {
        Err(TxError::PoolFull {
            requested: 12288, ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Free every block of two chunks' worth: those chunks return to the free pool, so a
    // two-chunk run fits again (if they are adjacent) and a one-chunk run does.
    let (first, rest) = small.split_at(2 * 63);
    free_in_batches(&heap, first, 40);
    assert_eq!(heap.alloc_stats().free_chunks, 2);
    let run = alloc_one(&heap, 5000);
    assert!(matches!(
        heap.transaction(|tx| tx.alloc(64)),
        Err(TxError::PoolFull { .. })
    ));
    free_one(&heap, run);
    free_in_batches(&heap, rest, 100);
    assert!(heap.check_heap().unwrap().is_empty());
    let stats = heap.alloc_stats();
    assert_eq!(stats.free_chunks, usable);
    assert_eq!(stats.bytes_free, usable * layout.chunk_size);

    // Large blocks: the whole region in one run, and not a byte more.
    let max = usable * layout.chunk_size;
    match heap.transaction(|tx| tx.alloc(max + 1)) {
        Err(TxError::PoolFull { requested, free }) => {
            assert_eq!((requested, free), (max + 1, max));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        heap.transaction(|tx| tx.alloc(u64::MAX)),
        Err(TxError::PoolFull { .. })
    ));
    let all = alloc_one(&heap, max);
    assert_eq!(heap.check_heap().unwrap(), vec![(all.offset(), max)]);
    assert!(matches!(
        heap.transaction(|tx| tx.alloc(1)),
        Err(TxError::PoolFull { free: 0, .. })
    ));
    free_one(&heap, all);
    // And runs of every length fill it as well.
    let runs = fill(&heap, 4096 * 3, 4);
    assert_eq!(runs.len() as u64, usable / 3);
}

#[test]
fn zero_sized_allocations_are_refused() {
    let heap = chunky_heap();
    let result = heap.transaction(|tx| tx.alloc(0));
    match result {
        Err(e @ TxError::InvalidAllocSize { size: 0, .. }) => {
            assert!(e.to_string().contains("invalid allocation size 0"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // Swallowed, it leaves the transaction usable.
    let p = heap
        .transaction(|tx| {
            assert!(tx.alloc(0).is_err());
            tx.alloc(1)
        })
        .unwrap();
    assert_eq!(heap.check_heap().unwrap(), vec![(p.offset(), 64)]);
}

#[test]
fn invalid_frees_are_refused() {
    let heap = chunky_heap();
    let layout = *heap.layout();
    let small = alloc_one(&heap, 64);
    let run = alloc_one(&heap, 2 * 4096);
    let freed = alloc_one(&heap, 64);
    free_one(&heap, freed);
    let blocks = heap.check_heap().unwrap();
    assert_eq!(blocks.len(), 2);
    let small_chunk_start = (small.offset() - layout.alloc_offset) / layout.chunk_size
        * layout.chunk_size
        + layout.alloc_offset;
    let last_chunk = layout.alloc_offset + layout.alloc_size - layout.chunk_size;
    let root = heap.pool().root_offset();
    let cases: Vec<(u64, &str)> = vec![
        (small.offset() + 8, "inside a small block"),
        (small.offset() + 64, "a free slot"),
        (small_chunk_start, "the bitmap of a small chunk"),
        (run.offset() + 8, "inside a run"),
        (
            run.offset() + layout.chunk_size,
            "the second chunk of a run",
        ),
        (freed.offset(), "a block freed before"),
        (last_chunk, "a free chunk"),
        (layout.alloc_offset, "the chunk table"),
        (layout.alloc_offset + 8, "inside the chunk table"),
        (root, "the root object, outside the region"),
        (layout.lane_log(0), "a lane log, outside the region"),
        (
            layout.alloc_offset + layout.alloc_size,
            "just past the region",
        ),
        (u64::MAX - 7, "far outside the pool"),
    ];
    let before = heap.check_heap().unwrap();
    for (offset, what) in cases {
        let result = heap.transaction(|tx| {
            tx.write(root, &[1; 8])?;
            tx.free(PPtr::<u8>::new(offset))
        });
        match result {
            Err(e @ TxError::InvalidFree { offset: o, .. }) if o == offset => {
                assert!(e.to_string().contains("invalid free"), "{e}")
            }
            other => panic!("{what} ({offset:#x}): {other:?}"),
        }
        assert_eq!(heap.check_heap().unwrap(), before, "{what}");
    }
    // Twice in one transaction.
    let result = heap.transaction(|tx| {
        tx.free(small)?;
        tx.free(small)
    });
    match result {
        Err(TxError::InvalidFree { offset, reason }) => {
            assert_eq!(offset, small.offset());
            assert!(reason.contains("already freed"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let result = heap.transaction(|tx| {
        tx.free(run)?;
        tx.free(run)
    });
    assert!(
        matches!(result, Err(TxError::InvalidFree { .. })),
        "{result:?}"
    );
    assert_eq!(heap.check_heap().unwrap(), before);
    // The refused transactions released their claims: freeing works.
    heap.transaction(|tx| {
        tx.free(small)?;
        tx.free(run)
    })
    .unwrap();
    assert!(heap.check_heap().unwrap().is_empty());
}

#[test]
fn alloc_and_free_in_one_transaction_leave_nothing_allocated() {
    let heap = chunky_heap();
    let stats_before = heap.alloc_stats();
    heap.transaction(|tx| {
        let a = tx.alloc(100)?;
        tx.write(a.offset(), &[1; 100])?;
        let b = tx.alloc(3 * 4096)?;
        tx.write(b.offset(), &[2; 3 * 4096])?;
        let c = tx.alloc(64)?;
        tx.free(a)?;
        tx.free(b)?;
        // Freed twice: the first free already gave the reservation back.
        assert!(matches!(tx.free(a), Err(TxError::InvalidFree { .. })));
        tx.free(c)
    })
    .unwrap();
    assert!(heap.check_heap().unwrap().is_empty());
    assert_eq!(heap.alloc_stats(), stats_before);
}

#[test]
fn allocations_never_overlap_and_stay_inside_the_region() {
    let heap = anonymous_heap_under(
        LAYOUT,
        4 << 20,
        heap_config(1, 16 << 10, 16 << 10),
        FencePolicy::Batched,
    );
    let layout = *heap.layout();
    let region_start = layout.alloc_offset + chunk_table_chunks(&layout) * layout.chunk_size;
    let region_end = layout.alloc_offset + layout.alloc_size;
    let sizes = [
        1u64, 8, 63, 64, 65, 100, 128, 129, 255, 256, 500, 512, 1000, 1024, 2000, 4096, 4097, 8000,
        16384, 16385, 40000, 70000,
    ];
    let mut rng = SplitMix64::new(7);
    // (pointer, requested size, seed of its contents)
    let mut live: Vec<(PPtr<u8>, u64, u64)> = Vec::new();
    let mut seed = 0;
    let check = |live: &[(PPtr<u8>, u64, u64)]| {
        let blocks = heap.check_heap().unwrap();
        assert_eq!(blocks.len(), live.len());
        let mut by_offset: Vec<(u64, u64)> = blocks.clone();
        by_offset.sort();
        for w in by_offset.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
        }
        for &(p, requested, seed) in live {
            let &(_, size) = blocks
                .iter()
                .find(|b| b.0 == p.offset())
                .expect("every allocation is in the heap walk");
            assert!(size >= requested, "{size} < {requested}");
            if requested > layout.chunk_size / 4 {
                assert_eq!(size % layout.chunk_size, 0, "a run is whole chunks");
                assert_eq!((p.offset() - layout.alloc_offset) % layout.chunk_size, 0);
            } else {
                assert!(size.is_power_of_two() && size < 2 * requested.max(64));
            }
            assert!(p.offset() >= region_start && p.offset() + size <= region_end);
            assert_eq!(
                bytes(heap.pool(), p.offset(), requested),
                pattern(seed, requested as usize),
                "contents of the block at {:#x}",
                p.offset()
            );
        }
    };
    for round in 0..6 {
        // Allocate a batch of every size, in a few transactions.
        for group in sizes.chunks(5) {
            let got = heap
                .transaction(|tx| {
                    let mut got = Vec::new();
                    for &size in group {
                        seed += 1;
                        let p = tx.alloc(size)?;
                        tx.write(p.offset(), &pattern(seed, size as usize))?;
                        got.push((p, size, seed));
                    }
                    Ok::<_, TxError>(got)
                })
                .unwrap();
            live.extend(got);
        }
        check(&live);
        // Free about half of them, at random.
        let mut kept = Vec::new();
        let mut doomed = Vec::new();
        for b in live.drain(..) {
            if rng.below(2) == 0 {
                doomed.push(b);
            } else {
                kept.push(b);
            }
        }
        let doomed: Vec<PPtr<u8>> = doomed.iter().map(|&(p, _, _)| p).collect();
        free_in_batches(&heap, &doomed, 7);
        live = kept;
        check(&live);
        assert!(round < 6);
    }
}

#[test]
fn alloc_stats_agree_with_the_heap_walk() {
    let heap = chunky_heap();
    let layout = *heap.layout();
    let table = chunk_table_chunks(&layout);
    let total = layout.alloc_size / layout.chunk_size;
    let mut rng = SplitMix64::new(11);
    let mut live: Vec<PPtr<u8>> = Vec::new();
    for step in 0..120 {
        if live.len() < 30 && rng.below(3) != 0 {
            let size = [10, 64, 100, 200, 500, 1000, 3000, 5000, 9000][rng.below(9) as usize];
            match heap.transaction(|tx| tx.alloc(size)) {
                Ok(p) => live.push(p),
                Err(TxError::PoolFull { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        } else if !live.is_empty() {
            let p = live.swap_remove(rng.below(live.len() as u64) as usize);
            free_one(&heap, p);
        }
        let blocks = heap.check_heap().unwrap();
        let stats = heap.alloc_stats();
        assert_eq!(stats.objects, blocks.len() as u64, "step {step}");
        assert_eq!(
            stats.bytes_allocated,
            blocks.iter().map(|b| b.1).sum::<u64>(),
            "step {step}"
        );
        assert_eq!(stats.total_chunks, total);
        // Chunks in use: those of runs, and those holding small blocks.
        let mut used = BTreeSet::new();
        for &(offset, size) in &blocks {
            let first = (offset - layout.alloc_offset) / layout.chunk_size;
            let last = (offset + size - 1 - layout.alloc_offset) / layout.chunk_size;
            used.extend(first..=last);
        }
        assert_eq!(
            stats.free_chunks,
            total - table - used.len() as u64,
            "step {step}: {stats:?}"
        );
        assert!(stats.bytes_free >= stats.free_chunks * layout.chunk_size);
        assert!(stats.bytes_free + stats.bytes_allocated <= (total - table) * layout.chunk_size);
        assert_eq!(
            offsets(&blocks),
            live.iter().map(|p| p.offset()).collect::<BTreeSet<_>>()
        );
    }
}

#[test]
fn an_aborted_transactions_allocations_are_returned() {
    for policy in FencePolicy::ALL {
        let heap = anonymous_heap_under(LAYOUT, 128 << 10, heap_config(1, 4096, 4096), policy);
        let keep = alloc_one(&heap, 200);
        let heap_before = heap.check_heap().unwrap();
        let stats_before = heap.alloc_stats();
        let sizes = [64u64, 64, 300, 5000, 1000, 9000];
        let mut aborted = Vec::new();
        let result: Result<(), AppError> = heap.transaction(|tx| {
            for &size in &sizes {
                let p = tx.alloc(size)?;
                tx.write(p.offset(), &[0xAB; 64])?;
                aborted.push(p);
            }
            Err(AppError::Refused(0))
        });
        assert!(matches!(result, Err(AppError::Refused(0))));
        assert_eq!(heap.check_heap().unwrap(), heap_before, "{policy:?}");
        assert_eq!(heap.alloc_stats(), stats_before, "{policy:?}");
        // The same space is handed out again.
        let again: Vec<PPtr<u8>> = sizes.iter().map(|&s| alloc_one(&heap, s)).collect();
        assert_eq!(again, aborted, "{policy:?}");
        for p in again {
            free_one(&heap, p);
        }

        // Filling the heap inside an aborted transaction takes nothing away.
        let mut n_aborted = 0;
        let _ = heap.transaction(|tx| {
            while tx.alloc(64).is_ok() {
                n_aborted += 1;
            }
            Err::<(), _>(AppError::Refused(1))
        });
        assert_eq!(heap.check_heap().unwrap(), heap_before, "{policy:?}");
        let filled = fill(&heap, 64, 200);
        assert_eq!(filled.len(), n_aborted, "{policy:?}");
        free_in_batches(&heap, &filled, 200);
        free_one(&heap, keep);
        assert!(heap.check_heap().unwrap().is_empty());
    }
}

#[test]
fn freed_small_blocks_make_room_for_a_large_one() {
    let heap = anonymous_heap_with("reuse", 1 << 20, heap_config(1, 16 << 10, 16 << 10));
    // Fill the heap with 64-byte blocks, one a transaction.
    let small = fill(&heap, 64, 1);
    assert!(matches!(
        heap.transaction(|tx| tx.alloc(32 << 10)),
        Err(TxError::PoolFull { .. })
    ));
    free_in_batches(&heap, &small, 64);
    assert!(heap.check_heap().unwrap().is_empty());
    let big = heap.transaction(|tx| tx.alloc(32 << 10)).unwrap();
    assert_eq!(heap.check_heap().unwrap(), vec![(big.offset(), 32 << 10)]);
}
