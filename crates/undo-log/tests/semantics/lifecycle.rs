//! Opening, reopening and creating heaps: a file pool reopens with its data and blocks;
//! unformatted, damaged or corrupt pools and invalid configurations are refused.

use super::*;

fn file_options() -> PoolOptions {
    PoolOptions::new().granularity(Granularity::Emulated)
}

#[test]
fn a_file_pool_reopens_with_the_same_data_and_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heap.pool");
    let sizes = [1u64, 64, 300, 1000, 5000, 20000, 70000];
    let (root, data, blocks, stats, live) = {
        let pool = Pool::create(&path, "semantics-reopen", 2 << 20, &file_options()).unwrap();
        let heap: Heap = Heap::create(
            Arc::new(pool),
            heap_config(2, 8192, 16 << 10),
            FencePolicy::Strict,
        )
        .unwrap();
        let root = heap.pool().root_offset();
        heap.transaction(|tx| tx.write(root, &pattern(5, 3000)))
            .unwrap();
        let mut live: Vec<(PPtr<u8>, u64)> = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let p = heap
                .transaction(|tx| {
                    let p = tx.alloc(size)?;
                    tx.write(p.offset(), &pattern(100 + i as u64, size as usize))?;
                    tx.write_value(root + 3000 + 8 * i as u64, &p.offset())?;
                    Ok::<_, TxError>(p)
                })
                .unwrap();
            live.push((p, 100 + i as u64));
        }
        // Free two of them.
        for i in [1, 4] {
            free_one(&heap, live[i].0);
        }
        let live: Vec<_> = live
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != 1 && *i != 4)
            .map(|(i, (p, seed))| (p, seed, sizes[i]))
            .collect();
        let data = bytes(heap.pool(), root, 3000 + 8 * sizes.len() as u64);
        (
            root,
            data,
            heap.check_heap().unwrap(),
            heap.alloc_stats(),
            live,
        )
    };

    let pool = Pool::open(&path, "semantics-reopen", &file_options()).unwrap();
    let heap: Heap = Heap::open(pool).unwrap();
    assert_eq!(
        heap.policy(),
        FencePolicy::Strict,
        "the policy recorded at create"
    );
    assert_eq!(heap.layout().lanes, 2);
    assert_eq!(heap.layout().lane_log_bytes, 8192);
    assert_eq!(bytes(heap.pool(), root, data.len() as u64), data);
    assert_eq!(heap.check_heap().unwrap(), blocks);
    assert_eq!(heap.alloc_stats(), stats);
    for &(p, seed, size) in &live {
        assert_eq!(
            bytes(heap.pool(), p.offset(), size),
            pattern(seed, size as usize)
        );
    }
    // The free lists were rebuilt: new blocks land in free space only.
    let mut more = Vec::new();
    for &size in &sizes {
        more.push(alloc_one(&heap, size));
    }
    let now = heap.check_heap().unwrap();
    assert_eq!(now.len(), blocks.len() + sizes.len());
    let mut sorted = now.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
    }
    for &(p, seed, size) in &live {
        assert_eq!(
            bytes(heap.pool(), p.offset(), size),
            pattern(seed, size as usize)
        );
    }
}

#[test]
fn open_and_create_refuse_the_wrong_kind_of_pool() {
    let pool = anonymous_pool(LAYOUT, 1 << 20);
    match Heap::open(pool.clone()) {
        Err(e @ TxError::NotFormatted) => assert!(e.to_string().contains("Heap::create")),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened an unformatted pool"),
    }
    let heap = Heap::create(
        pool.clone(),
        heap_config(2, 4096, 16 << 10),
        FencePolicy::Batched,
    )
    .unwrap();
    drop(heap);
    match Heap::create(
        pool.clone(),
        heap_config(2, 4096, 16 << 10),
        FencePolicy::Batched,
    ) {
        Err(TxError::AlreadyFormatted) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("formatted a pool twice"),
    }
    // Another configuration does not make it formattable either.
    assert!(matches!(
        Heap::create(
            pool.clone(),
            heap_config(4, 1024, 4096),
            FencePolicy::Batched
        ),
        Err(TxError::AlreadyFormatted)
    ));
    assert!(Heap::open(pool.clone()).is_ok());
}

#[test]
fn open_reads_the_fence_policy_create_recorded() {
    for policy in FencePolicy::ALL {
        let pool = anonymous_pool(LAYOUT, 1 << 20);
        let created = Heap::create(pool.clone(), heap_config(2, 4096, 16 << 10), policy).unwrap();
        assert_eq!(created.policy(), policy);
        drop(created);
        let reopened = Heap::open(pool.clone()).unwrap();
        assert_eq!(
            reopened.policy(),
            policy,
            "reopened without naming a policy"
        );
    }
}

/// Rewrite the superblock's version and its checksum, as a heap of that version would have.
fn set_superblock_version(pool: &Pool, version: u32) {
    let at = pool.heap_offset();
    let mut superblock = [0u8; 128];
    pool.read_bytes(at, &mut superblock).unwrap();
    superblock[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c::crc32c(&superblock[..120]);
    superblock[120..124].copy_from_slice(&crc.to_le_bytes());
    let w = pool.write(at, &superblock).unwrap();
    pool.persist(w);
}

#[test]
fn a_version_1_superblock_without_a_policy_is_refused_as_outdated() {
    let pool = anonymous_pool(LAYOUT, 1 << 20);
    drop(
        Heap::create(
            pool.clone(),
            heap_config(2, 4096, 16 << 10),
            FencePolicy::Strict,
        )
        .unwrap(),
    );
    set_superblock_version(&pool, 1);
    match Heap::open(pool.clone()) {
        Err(
            e @ TxError::OutdatedSuperblock {
                found: 1,
                supported: 4,
            },
        ) => {
            assert!(
                e.to_string().contains("did not record the fence policy"),
                "{e}"
            )
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a version 1 heap under a guessed policy"),
    }
}

#[test]
fn a_version_2_heap_whose_logs_hold_no_intents_is_refused_as_outdated() {
    let pool = anonymous_pool(LAYOUT, 1 << 20);
    drop(
        Heap::create(
            pool.clone(),
            heap_config(2, 4096, 16 << 10),
            FencePolicy::Batched,
        )
        .unwrap(),
    );
    set_superblock_version(&pool, 2);
    match Heap::open(pool.clone()) {
        Err(
            e @ TxError::OutdatedLogFormat {
                found: 2,
                supported: 4,
            },
        ) => assert!(e.to_string().contains("lane logs"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a version 2 heap with this version's log rules"),
    }
}

#[test]
fn a_version_3_heap_whose_entries_carry_their_own_checksums_is_refused_as_outdated() {
    let pool = anonymous_pool(LAYOUT, 1 << 20);
    drop(
        Heap::create(
            pool.clone(),
            heap_config(2, 4096, 16 << 10),
            FencePolicy::Batched,
        )
        .unwrap(),
    );
    set_superblock_version(&pool, 3);
    match Heap::open(pool.clone()) {
        Err(
            e @ TxError::OutdatedLogFormat {
                found: 3,
                supported: 4,
            },
        ) => assert!(e.to_string().contains("checksums each batch"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a version 3 heap with this version's log rules"),
    }
}

#[test]
fn a_superblock_policy_code_that_names_no_policy_is_refused() {
    let pool = anonymous_pool(LAYOUT, 1 << 20);
    drop(
        Heap::create(
            pool.clone(),
            heap_config(2, 4096, 16 << 10),
            FencePolicy::Strict,
        )
        .unwrap(),
    );
    let at = pool.heap_offset();
    let w = pool.write(at + 64, &9u64.to_le_bytes()).unwrap();
    pool.persist(w);
    // A valid checksum over the bad code, so the code itself is what is refused.
    set_superblock_version(&pool, 4);
    match Heap::open(pool.clone()) {
        Err(e @ TxError::BadSuperblock { .. }) => {
            assert!(e.to_string().contains("fence policy code 9"), "{e}")
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("opened a heap with no valid policy"),
    }
}

#[test]
fn a_damaged_superblock_is_refused() {
    // Bytes of the magic, version, lane count, allocator offset, chunk size, policy and checksum.
    for byte in [0u64, 7, 8, 16, 20, 40, 56, 64, 120, 123] {
        let pool = anonymous_pool(LAYOUT, 1 << 20);
        drop(
            Heap::create(
                pool.clone(),
                heap_config(2, 4096, 16 << 10),
                FencePolicy::Batched,
            )
            .unwrap(),
        );
        let at = pool.heap_offset() + byte;
        let old: u8 = pool.read(at).unwrap();
        let w = pool.write(at, &[old ^ 0x5A]).unwrap();
        pool.persist(w);
        match Heap::open(pool.clone()) {
            Err(e @ TxError::BadSuperblock { .. }) => {
                assert!(e.to_string().contains("superblock"), "{e}")
            }
            Err(e) => panic!("byte {byte}: {e}"),
            Ok(_) => panic!("byte {byte}: opened a damaged superblock"),
        }
        // Nor is it formatted over.
        assert!(matches!(
            Heap::create(
                pool.clone(),
                heap_config(2, 4096, 16 << 10),
                FencePolicy::Batched
            ),
            Err(TxError::AlreadyFormatted)
        ));
    }
}

#[test]
fn a_corrupt_chunk_table_is_refused_at_open() {
    let chunk = 16u64 << 10;
    // (what, chunk index relative to the first past the table, word)
    let kind_small = 1u64;
    let kind_head = 2u64;
    let kind_record = 3u64;
    let cases: Vec<(&str, Vec<(u64, u64)>)> = vec![
        ("an unknown kind", vec![(0, 0xFF)]),
        ("a free word with stray bits", vec![(0, 0x100)]),
        (
            "a size class that does not exist",
            vec![(0, kind_small | 60 << 8)],
        ),
        (
            "a small word with stray bits",
            vec![(0, kind_small | 1 << 20)],
        ),
        ("a run of length 0", vec![(0, kind_head)]),
        ("a run past the end", vec![(0, kind_head | 1000 << 16)]),
        (
            "a run over a chunk in use",
            vec![(0, kind_head | 2 << 16), (1, kind_small)],
        ),
        (
            "a record size class that does not exist",
            vec![(3, kind_record | 60 << 8)],
        ),
        (
            "a run head with a flag other than the record one",
            vec![(0, kind_head | 2 << 8 | 1 << 16)],
        ),
        ("a table chunk marked free", vec![(u64::MAX, 0)]),
    ];
    for (what, words) in cases {
        let pool = anonymous_pool(LAYOUT, 1 << 20);
        let layout = *Heap::create(
            pool.clone(),
            heap_config(1, 4096, chunk),
            FencePolicy::Batched,
        )
        .unwrap()
        .layout();
        let first = chunk_table_chunks(&layout);
        for (c, word) in words {
            let c = if c == u64::MAX { 0 } else { first + c };
            let w = pool.store_u64(layout.alloc_offset + 8 * c, word).unwrap();
            pool.persist(w);
        }
        match Heap::open(pool.clone()) {
            Err(e @ TxError::CorruptHeap { .. }) => {
                assert!(e.to_string().contains("corrupted"), "{e}")
            }
            Err(e) => panic!("{what}: {e}"),
            Ok(_) => panic!("{what}: opened a corrupt heap"),
        }
    }
    // A bitmap marking an object past a small chunk's last: 64-byte class in a 16 KiB chunk
    // holds 255 objects (one 64-byte line of bitmap), so bit 255 must be clear.
    let pool = anonymous_pool(LAYOUT, 1 << 20);
    let heap = Heap::create(
        pool.clone(),
        heap_config(1, 4096, chunk),
        FencePolicy::Batched,
    )
    .unwrap();
    let p = heap.transaction(|tx| tx.alloc(64)).unwrap();
    let layout = *heap.layout();
    drop(heap);
    let chunk_start = (p.offset() - layout.alloc_offset) / chunk * chunk + layout.alloc_offset;
    assert_eq!(
        p.offset(),
        chunk_start + 64,
        "the first object follows the bitmap"
    );
    let w = pool.store_u64(chunk_start + 24, 1 << 63).unwrap();
    pool.persist(w);
    assert!(matches!(
        Heap::open(pool.clone()),
        Err(TxError::CorruptHeap { .. })
    ));
}

#[test]
fn invalid_configurations_are_refused() {
    let probe = anonymous_pool(LAYOUT, 1 << 20);
    let heap_offset = probe.heap_offset();
    // A pool with room for exactly one 4 KiB chunk: only the chunk table would fit.
    let one = Layout::plan(heap_offset, 1 << 20, &heap_config(1, 1024, 4096)).unwrap();
    let one_chunk_pool = one.alloc_offset + 4096;
    let cases: Vec<(u64, HeapConfig)> = vec![
        (1 << 20, heap_config(0, 4096, 4096)),
        (1 << 20, heap_config(1025, 256, 4096)),
        (1 << 20, heap_config(1, 0, 4096)),
        (1 << 20, heap_config(1, 192, 4096)),
        (1 << 20, heap_config(1, 1000, 4096)),
        (1 << 20, heap_config(1, 4096, 0)),
        (1 << 20, heap_config(1, 4096, 2048)),
        (1 << 20, heap_config(1, 4096, 5000)),
        (1 << 20, heap_config(1, 4096, 1 << 20)),
        (1 << 20, heap_config(1, u64::MAX / 64 * 64, 4096)),
        (1 << 20, heap_config(1024, 64 << 10, 4096)),
        (one_chunk_pool, heap_config(1, 1024, 4096)),
    ];
    for (size, cfg) in cases {
        let pool = anonymous_pool(LAYOUT, size);
        match Heap::create(pool.clone(), cfg, FencePolicy::Batched) {
            Err(e @ TxError::InvalidConfig { .. }) => {
                assert!(e.to_string().contains("invalid heap configuration"), "{e}")
            }
            Err(e) => panic!("{cfg:?} in {size} bytes: {e}"),
            Ok(_) => panic!("{cfg:?} in {size} bytes was accepted"),
        }
        // Nothing was formatted.
        assert!(
            matches!(Heap::open(pool.clone()), Err(TxError::NotFormatted)),
            "{cfg:?}"
        );
    }
    // The smallest valid values work.
    let pool = anonymous_pool(LAYOUT, 1 << 20);
    let heap = Heap::create(
        pool.clone(),
        heap_config(1, 256, 4096),
        FencePolicy::Batched,
    )
    .unwrap();
    heap.transaction(|tx| tx.write(pool.root_offset(), &[1; 232]))
        .unwrap();
    let two_chunk_pool = anonymous_pool(LAYOUT, one_chunk_pool + 4096);
    assert!(Heap::create(
        two_chunk_pool,
        heap_config(1, 1024, 4096),
        FencePolicy::Batched
    )
    .is_ok());
}

#[test]
fn clones_of_a_heap_share_it_and_only_the_last_one_gives_the_pool_back() {
    let heap = small_heap(FencePolicy::Batched);
    let clone = heap.clone();
    let block = clone.transaction(|tx| tx.alloc(64)).unwrap();
    // One allocator and one set of counters behind both handles.
    assert!(heap
        .block_size(block.offset())
        .is_some_and(|size| size >= 64));
    assert_eq!(heap.tx_stats().committed, 1);
    assert!(std::ptr::eq(heap.pool(), clone.pool()));
    // A clone alive: the pool is refused, the handle given back.
    let heap = match heap.into_pool() {
        Ok(_) => panic!("the pool was given back while a clone of the heap was alive"),
        Err(heap) => heap,
    };
    drop(clone);
    let pool = heap
        .into_pool()
        .unwrap_or_else(|_| panic!("the last handle did not give the pool back"));
    let reopened = Heap::open(pool).unwrap();
    assert!(reopened.block_size(block.offset()).is_some());
}
