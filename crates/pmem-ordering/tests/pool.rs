//! Pools on the hardware backend: accesses outside the pool or misaligned return typed errors
//! (never a panic), and the good paths round-trip their data. Opening errors are in
//! `pool_open.rs`.

mod common;

use std::fs;

use common::*;
use pmem_ordering::pool::header::HEADER_PAGE;
use pmem_ordering::{Granularity, Isa, PPtr, Pool, PoolError};

// ------------------------------------------------------------------------- accesses

fn assert_oob<T: std::fmt::Debug>(r: Result<T, PoolError>, offset: u64, len: u64, what: &str) {
    match r {
        Err(e @ PoolError::OutOfBounds { .. }) => {
            let PoolError::OutOfBounds {
                offset: o,
                len: l,
                size,
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((*o, *l, *size), (offset, len, SIZE), "{what}");
            assert_message_names(
                &e,
                &[
                    &format!("{len} bytes"),
                    &format!("offset {offset:#x}"),
                    &format!("{SIZE} bytes"),
                ],
            );
        }
        other => panic!("{what} at {offset}+{len}: expected OutOfBounds, got {other:?}"),
    }
}

#[test]
fn out_of_bounds_accesses_are_errors() {
    let pool = Pool::anonymous(LAYOUT, SIZE, &opts()).unwrap();
    let cases: [(u64, u64); 5] = [
        (SIZE, 1),
        (SIZE - 1, 2),
        (SIZE + 4096, 8),
        (u64::MAX, 1),
        (u64::MAX - 3, 16),
    ];
    for (offset, len) in cases {
        let mut buf = vec![0u8; len as usize];
        assert_oob(pool.read_bytes(offset, &mut buf), offset, len, "read_bytes");
        assert_oob(pool.write(offset, &buf), offset, len, "write");
        let nt = pool.nt_write(offset, &buf);
        assert_oob(nt, offset, len, "nt_write");
        assert_oob(pool.flush_range(offset, len), offset, len, "flush_range");
        assert_oob(
            pool.persist_range(offset, len),
            offset,
            len,
            "persist_range",
        );
        assert_oob(pool.check_range(offset, len), offset, len, "check_range");
    }
    assert_oob(pool.read::<u64>(SIZE - 4), SIZE - 4, 8, "read");
    // Lengths whose end overflows u64.
    assert_oob(pool.flush_range(1, u64::MAX), 1, u64::MAX, "flush_range");
    assert_oob(
        pool.flush_range(8, u64::MAX - 7),
        8,
        u64::MAX - 7,
        "flush_range",
    );
    assert_oob(
        pool.check_range(4096, u64::MAX),
        4096,
        u64::MAX,
        "check_range",
    );
    // Aligned 8-byte accesses past the end, including one whose end overflows.
    for offset in [SIZE, u64::MAX - 7] {
        assert_oob(pool.store_u64(offset, 1), offset, 8, "store_u64");
        assert_oob(pool.load_u64(offset), offset, 8, "load_u64");
        assert_oob(
            pool.compare_exchange_u64(offset, 0, 1),
            offset,
            8,
            "compare_exchange_u64",
        );
    }
    // The last bytes of the pool are fine.
    let w = pool.store_u64(SIZE - 8, 7).unwrap();
    pool.persist(w);
    assert_eq!(pool.load_u64(SIZE - 8).unwrap(), 7);
    pool.check_range(SIZE, 0).unwrap();
    let _ = pool.persist_range(0, SIZE).unwrap();
}

#[test]
fn misaligned_atomic_accesses_are_errors() {
    let pool = Pool::anonymous(LAYOUT, SIZE, &opts()).unwrap();
    for offset in [4097u64, 4100, 4103, SIZE - 9, u64::MAX] {
        for (what, r) in [
            ("store_u64", pool.store_u64(offset, 1).map(|_| ())),
            ("load_u64", pool.load_u64(offset).map(|_| ())),
            (
                "compare_exchange_u64",
                pool.compare_exchange_u64(offset, 0, 1).map(|_| ()),
            ),
        ] {
            match r {
                Err(e @ PoolError::Misaligned { .. }) => {
                    let PoolError::Misaligned { offset: o } = &e else {
                        unreachable!()
                    };
                    assert_eq!(*o, offset, "{what}");
                    assert_message_names(&e, &[&format!("offset {offset:#x}")]);
                }
                other => panic!("{what} at {offset}: expected Misaligned, got {other:?}"),
            }
        }
    }
    // Nothing was written by the failed stores.
    let mut buf = [0xffu8; 16];
    pool.read_bytes(4096, &mut buf).unwrap();
    assert_eq!(buf, [0u8; 16]);
}

#[test]
fn a_root_type_larger_than_the_root_is_root_too_small() {
    let pool = Pool::anonymous(LAYOUT, SIZE, &opts().root_size(64)).unwrap();
    assert_eq!(pool.root_size(), 64);
    match pool.root::<[u64; 9]>() {
        Err(e @ PoolError::RootTooSmall { .. }) => {
            let PoolError::RootTooSmall { root_size, needed } = &e else {
                unreachable!()
            };
            assert_eq!((*root_size, *needed), (64, 72));
            assert_message_names(&e, &["64 bytes", "72-byte"]);
        }
        other => panic!("expected RootTooSmall, got {other:?}"),
    }
    let root = pool.root::<[u64; 8]>().unwrap();
    assert_eq!(root.offset(), pool.root_offset());
}

// ------------------------------------------------------------------------- good paths

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_root_object_survives_close_and_reopen() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let value: [u64; 6] = [1, 2, 3, u64::MAX, 0xdead_beef, 42];
    let heap_bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let header = {
        let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
        assert_eq!(pool.path(), Some(path.as_path()));
        assert_eq!(pool.size(), SIZE);
        assert_eq!(pool.layout(), LAYOUT);
        let root = pool.root::<[u64; 6]>().unwrap();
        assert_eq!(pool.get(root).unwrap(), [0; 6], "a new root is zeroed");
        pool.persist(pool.set(root, &value).unwrap());
        let w = pool.write(pool.heap_offset() + 13, &heap_bytes).unwrap();
        pool.persist(w);
        pool.header().clone()
    };
    assert_eq!(fs::metadata(&path).unwrap().len(), SIZE);
    let inspected = Pool::inspect(&path, Some(LAYOUT)).unwrap();
    assert_eq!(inspected, header);
    assert_eq!(inspected.layout, LAYOUT);
    assert_eq!(inspected.size, SIZE);
    assert_eq!(inspected.root_offset, HEADER_PAGE);
    assert_eq!(inspected.heap_offset, 2 * HEADER_PAGE);

    let pool = Pool::open(&path, LAYOUT, &opts()).unwrap();
    assert_eq!(pool.header(), &header);
    let root = pool.root::<[u64; 6]>().unwrap();
    assert_eq!(pool.get(root).unwrap(), value);
    let mut back = vec![0u8; heap_bytes.len()];
    pool.read_bytes(pool.heap_offset() + 13, &mut back).unwrap();
    assert_eq!(back, heap_bytes);
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn a_pool_file_gets_the_granularity_of_its_file_system() {
    let dir = scratch_dir();
    let path = make_pool(dir.path(), "p.pool");
    let pool = Pool::open(&path, LAYOUT, &opts()).unwrap();
    assert_detected_granularity(&pool, &path);
    drop(pool);

    // Forcing cache-line granularity needs MAP_SYNC: refused on open and create where the file
    // is not on DAX; on DAX it holds, whatever the region's persistence domain.
    let forced = opts().granularity(Granularity::CacheLine);
    let new = dir.path().join("forced.pool");
    if is_dax_file(&path) {
        let pool = Pool::open(&path, LAYOUT, &forced).unwrap();
        assert_eq!(pool.granularity(), Granularity::CacheLine);
        assert_eq!(pool.granularity_basis(), Some("forced by the caller"));
        drop(pool);
        let pool = Pool::create(&new, LAYOUT, SIZE, &forced).unwrap();
        assert_eq!(pool.granularity(), Granularity::CacheLine);
    } else {
        match Pool::open(&path, LAYOUT, &forced) {
            Err(e @ PoolError::GranularityUnavailable { .. }) => {
                let PoolError::GranularityUnavailable { requested, .. } = &e else {
                    unreachable!()
                };
                assert_eq!(*requested, "cache-line");
                assert_message_names(&e, &[&show(&path), "MAP_SYNC"]);
            }
            other => panic!("expected GranularityUnavailable, got {other:?}"),
        }
        assert!(matches!(
            Pool::create(&new, LAYOUT, SIZE, &forced),
            Err(PoolError::GranularityUnavailable { .. })
        ));
        assert!(!new.exists(), "a failed create left its file behind");
    }

    for g in [Granularity::Emulated, Granularity::Byte, Granularity::Page] {
        let pool = Pool::open(&path, LAYOUT, &opts().granularity(g)).unwrap();
        assert_eq!(pool.granularity(), g);
        assert_eq!(pool.granularity_basis(), Some("forced by the caller"));
        let root = pool.root::<u64>().unwrap();
        pool.persist(pool.set(root, &(g as u64 + 10)).unwrap());
    }
    let pool = Pool::open(&path, LAYOUT, &opts()).unwrap();
    assert_eq!(
        pool.get(pool.root::<u64>().unwrap()).unwrap(),
        Granularity::Page as u64 + 10
    );
}

#[test]
fn anonymous_pools_refuse_granularities_that_need_a_file() {
    for g in [Granularity::CacheLine, Granularity::Page] {
        match Pool::anonymous(LAYOUT, SIZE, &opts().granularity(g)) {
            Err(PoolError::GranularityUnavailable { requested, .. }) => {
                assert_eq!(requested, g.name())
            }
            other => panic!("forcing {g:?} on an anonymous pool gave {other:?}"),
        }
    }
    for g in [Granularity::Emulated, Granularity::Byte] {
        let pool = Pool::anonymous(LAYOUT, SIZE, &opts().granularity(g)).unwrap();
        assert_eq!(pool.granularity(), g);
        assert_eq!(pool.granularity_basis(), None);
    }
}

#[test]
fn an_overflowing_pointer_fails_the_bounds_check() {
    let pool = Pool::anonymous(LAYOUT, SIZE, &opts()).unwrap();
    let far = PPtr::<u64>::new(u64::MAX - 2).byte_add(16);
    assert_eq!(far.offset(), u64::MAX);
    assert!(matches!(pool.get(far), Err(PoolError::OutOfBounds { .. })));
}

#[test]
fn anonymous_pools_work_and_are_emulated() {
    let pool = Pool::anonymous(LAYOUT, SIZE, &opts()).unwrap();
    assert_eq!(pool.granularity(), Granularity::Emulated);
    assert_eq!(pool.path(), None);
    assert_eq!(pool.size(), SIZE);
    assert_eq!(pool.layout(), LAYOUT);
    assert_eq!(pool.header().size, SIZE);
    let root = pool.root::<[u64; 4]>().unwrap();
    pool.persist(pool.set(root, &[9, 8, 7, 6]).unwrap());
    assert_eq!(pool.get(root).unwrap(), [9, 8, 7, 6]);
    let w = pool
        .compare_exchange_u64(root.offset(), 9, 10)
        .unwrap()
        .unwrap();
    pool.persist(w);
    assert_eq!(
        pool.compare_exchange_u64(root.offset(), 9, 11)
            .unwrap()
            .unwrap_err(),
        10
    );
    assert_eq!(pool.load_u64(root.offset()).unwrap(), 10);
    // Two anonymous pools do not share memory.
    let other = Pool::anonymous(LAYOUT, SIZE, &opts()).unwrap();
    assert_eq!(
        other.get(other.root::<[u64; 4]>().unwrap()).unwrap(),
        [0; 4]
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn persistent_pointers_round_trip_through_a_pool() {
    let dir = scratch_dir();
    let path = dir.path().join("p.pool");
    let target = {
        let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
        let root = pool.root::<PPtr<[u64; 2]>>().unwrap();
        assert!(pool.get(root).unwrap().is_null());
        let target: PPtr<[u64; 2]> = PPtr::new(pool.heap_offset() + 64);
        pool.persist(pool.set(target, &[11, 22]).unwrap());
        pool.persist(pool.set(root, &target).unwrap());
        target
    };
    let pool = Pool::open(&path, LAYOUT, &opts()).unwrap();
    let root = pool.root::<PPtr<[u64; 2]>>().unwrap();
    let back = pool.get(root).unwrap();
    assert_eq!(back, target);
    assert!(!back.is_null());
    assert_eq!(pool.get(back).unwrap(), [11, 22]);
    let second: PPtr<u64> = back.cast::<u64>().byte_add(8);
    assert_eq!(pool.get(second).unwrap(), 22);
    assert_eq!(pool.read::<u64>(root.offset()).unwrap(), target.offset());
    assert!(PPtr::<u64>::null().is_null());
}

/// Writes, nt-writes and persists through one pool, then reads the bytes back.
fn exercise(pool: &Pool, seed: u64) {
    let base = pool.heap_offset();
    let mut expect = vec![0u8; 8192];
    // (offset, len, non-temporal?) chosen to hit ragged heads and tails, partial and whole lines.
    let cases = [
        (0usize, 64usize, false),
        (3, 1, true),
        (5, 200, true),
        (64, 64, true),
        (130, 7, false),
        (256, 1024, true),
        (1283, 4001, true),
        (1300, 13, false),
        (5400, 2000, false),
        (7500, 8, true),
        (7601, 591, true),
    ];
    for (i, &(off, len, nt)) in cases.iter().enumerate() {
        let data = noise(len, seed + i as u64 + 1);
        expect[off..off + len].copy_from_slice(&data);
        if nt {
            let t = pool.nt_write(base + off as u64, &data).unwrap();
            pool.fence(t);
        } else {
            let w = pool.write(base + off as u64, &data).unwrap();
            pool.persist(w);
        }
    }
    let mut back = vec![0u8; expect.len()];
    pool.read_bytes(base, &mut back).unwrap();
    assert_eq!(
        back,
        expect,
        "isa {} granularity {:?}",
        pool.isa(),
        pool.granularity()
    );
}

#[test]
#[cfg_attr(miri, ignore = "maps a file, which Miri cannot")]
fn every_supported_flush_kind_writes_the_right_bytes() {
    // (The streaming-copy kind of an `Isa` is not a pool's: pools stream whole words with
    // `movnti`, see `isa::nt_store_words`; `isa::nt_copy`'s kinds have their own test.)
    let flushes = Isa::supported_flushes();
    assert!(!flushes.is_empty());
    let dir = scratch_dir();
    let mut seed = 1000;
    for &flush in &flushes {
        let isa = Isa::detected().with_flush(flush).unwrap();
        assert_eq!(isa.flush(), flush);
        let o = opts().isa(isa);
        seed += 100;

        let anon = Pool::anonymous(LAYOUT, SIZE, &o).unwrap();
        assert_eq!(anon.isa(), isa);
        exercise(&anon, seed);

        // A file pool written with flush instructions (emulated), then reopened.
        let path = dir.path().join(format!("{}.pool", flush.name()));
        let pool = Pool::create(
            &path,
            LAYOUT,
            SIZE,
            &o.clone().granularity(Granularity::Emulated),
        )
        .unwrap();
        assert_eq!(pool.isa(), isa);
        exercise(&pool, seed);
        drop(pool);
        let reopened = Pool::open(&path, LAYOUT, &o).unwrap();
        let mut expect = vec![0u8; 8192];
        anon.read_bytes(anon.heap_offset(), &mut expect).unwrap();
        let mut back = vec![0u8; 8192];
        reopened
            .read_bytes(reopened.heap_offset(), &mut back)
            .unwrap();
        assert_eq!(back, expect, "{isa}: reopened bytes differ");
    }
    // The msync path (page granularity, forced: on DAX the file would get cache line), and
    // the granularity the file system gives, once each.
    let path = dir.path().join("page.pool");
    let pool = Pool::create(&path, LAYOUT, SIZE, &opts().granularity(Granularity::Page)).unwrap();
    assert_eq!(pool.granularity(), Granularity::Page);
    exercise(&pool, 7);
    let path = dir.path().join("detected.pool");
    let pool = Pool::create(&path, LAYOUT, SIZE, &opts()).unwrap();
    assert_detected_granularity(&pool, &path);
    exercise(&pool, 8);
}

#[test]
fn a_words_view_loads_what_the_pool_stored_and_refuses_bad_ranges() {
    let pool = Pool::anonymous("words", 1 << 20, &opts()).unwrap();
    let base = pool.heap_offset();
    for i in 0..16u64 {
        let _ = pool.store_u64(base + 8 * i, i * 3 + 1).unwrap();
    }
    let words = pool.words(base, 16).unwrap();
    assert_eq!(words.len(), 16);
    assert!((0..16).all(|i| words.load(i) == i as u64 * 3 + 1));
    // SAFETY: every index is below `words.len()` (16).
    assert!((0..16).all(|i| unsafe { words.load_unchecked(i) } == i as u64 * 3 + 1));
    assert!(matches!(
        pool.words(base + 4, 2),
        Err(PoolError::Misaligned { .. })
    ));
    assert!(matches!(
        pool.words(pool.size() - 8, 2),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert!(matches!(
        pool.words(base, usize::MAX),
        Err(PoolError::OutOfBounds { .. })
    ));
    assert!(pool.words(pool.size() - 8, 1).is_ok());
    // The checked accessors: None past the end, never a panic; prefetches past it are ignored.
    assert_eq!(words.get(3), Some(10));
    assert_eq!(words.get(16), None);
    assert_eq!(words.line(8).map(|l| l[0]), Some(25));
    assert_eq!(words.line(9), None);
    assert_eq!(words.keys_of_line(0), Some([1, 7, 13, 19]));
    assert_eq!(words.keys_of_line(usize::MAX), None);
    // SAFETY: lines at words 0 and 8 end at 8 and 16, within the 16 words.
    let unchecked = unsafe {
        [
            words.keys_of_line_unchecked(0),
            words.keys_of_line_unchecked(8),
        ]
    };
    assert_eq!(unchecked, [[1, 7, 13, 19], [25, 31, 37, 43]]);
    let tail = words.sub(12, 4).unwrap();
    assert_eq!((tail.len(), tail.load(0)), (4, 37));
    assert!(words.sub(12, 5).is_none() && words.sub(usize::MAX, 2).is_none());
    words.prefetch(0);
    words.prefetch(usize::MAX);
}

#[test]
fn a_words_view_appends_its_pairs_and_tells_a_duplicate_key() {
    let pool = Pool::anonymous("pairs", 1 << 20, &opts()).unwrap();
    let base = pool.heap_offset();
    // Pairs (key, value): keys 10, 20, 20, 30, 40 (a duplicate at pairs 1 and 2).
    let pairs = [(10u64, 1u64), (20, 2), (20, 3), (30, 4), (40, 5)];
    for (i, &(k, v)) in pairs.iter().enumerate() {
        let _ = pool.store_u64(base + 16 * i as u64, k).unwrap();
        let _ = pool.store_u64(base + 16 * i as u64 + 8, v).unwrap();
    }
    let words = pool.words(base, 10).unwrap();
    let mut out = vec![(99, 99)];
    // SAFETY: words 0..4 and 4..10 lie within the 10 words.
    let (first, rest) = unsafe {
        (
            words.append_pairs_unchecked(0, 2, &mut out),
            words.append_pairs_unchecked(4, 3, &mut out),
        )
    };
    // The duplicate spans the two copies: neither sees it; each appends after what was there.
    assert!(!first && !rest);
    assert_eq!(out, [(99, 99), (10, 1), (20, 2), (20, 3), (30, 4), (40, 5)]);
    let mut out = Vec::new();
    // SAFETY: words 2..10 lie within the 10 words; a copy of none reads none.
    let (across, none) = unsafe {
        (
            words.append_pairs_unchecked(2, 4, &mut out),
            words.append_pairs_unchecked(10, 0, &mut out),
        )
    };
    assert!(across && !none);
    assert_eq!(out, pairs[1..].to_vec());
}

#[test]
fn a_word_stores_view_stores_flushes_and_counts_as_the_pool_does() {
    use pmem_ordering::stats::thread_stats;
    let pool = Pool::anonymous("word-stores", 1 << 20, &opts()).unwrap();
    let base = pool.heap_offset();
    let stores = pool.word_stores(base, 16).unwrap();
    assert_eq!(stores.len(), 16);

    // Two stores in one call and one alone: all land, counted as three 8-byte stores by the
    // view's next persist, with its flushes and fence.
    let before = thread_stats();
    stores.store_two(5, 50, 4, 40);
    stores.store(6, 60);
    let words = pool.words(base, 16).unwrap();
    assert_eq!((words.load(4), words.load(5), words.load(6)), (40, 50, 60));

    // The view's persist counts what the pool's persist of the same words' token counts:
    // the same lines flushed and one fence. Words 2 .. 12 span two or three lines.
    stores.persist(2, 12);
    let by_view = thread_stats() - before;
    assert_eq!((by_view.stores, by_view.store_bytes), (3, 24));
    let before = thread_stats();
    pool.persist(stores.written(2, 12));
    let by_pool = thread_stats() - before;
    assert_eq!(by_view.flushes, by_pool.flushes);
    assert_eq!(by_view.fences, 1);
    assert_eq!((by_pool.fences, by_pool.stores), (1, 0));
    let lines = pmem_ordering::isa::cache_line_count((base + 16) as usize, 80) as u64;
    assert_eq!(by_view.flushes, lines);
    // The split form: a flush (counting the store before it) whose pending token one fence
    // consumes.
    let before = thread_stats();
    stores.store(0, 1);
    let pending = stores.flush(0, 1);
    pool.fence(pending);
    let split = thread_stats() - before;
    assert_eq!(
        (
            split.stores,
            split.flushes,
            split.fences,
            split.redundant_fences
        ),
        (1, 1, 1, 0)
    );
    // Stores no flush followed are counted when the view is dropped.
    let before = thread_stats();
    stores.store_two(7, 70, 8, 80);
    drop(stores);
    let dropped = thread_stats() - before;
    assert_eq!(
        (dropped.stores, dropped.store_bytes, dropped.flushes),
        (2, 16, 0)
    );
}

#[test]
#[should_panic(expected = "past a view of 4")]
fn a_word_stores_pair_past_the_view_panics_before_storing() {
    let pool = Pool::anonymous("word-stores", 1 << 20, &opts()).unwrap();
    let stores = pool.word_stores(pool.heap_offset(), 4).unwrap();
    stores.store_two(3, 1, 4, 2);
}
