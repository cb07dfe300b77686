//! Typed persist barriers, non-temporal -> temporal ordering with the per-thread fence epoch,
//! and the statistics they keep, on the hardware backend (anonymous pools, emulated granularity).
//!
//! Every test runs on its own thread (libtest), and the counters are per thread, so each test
//! resets them after making its pool (creating a pool writes and persists its header).

use pmem_ordering::{
    reset_thread_stats, thread_stats, Durable, NtOrdering, Pending, PersistModel, Pool,
    PoolOptions, Stats,
};

use super::barrier_support;
use barrier_support::{nt_write, pool, take, AT, SIZE};

#[test]
fn persist_counts_one_flush_per_touched_line_and_one_fence() {
    let pool = pool(PersistModel::X86);
    // (offset, len, lines touched)
    let cases: [(u64, u64, u64); 9] = [
        (AT, 1, 1),
        (AT, 8, 1),
        (AT, 64, 1),
        (AT + 63, 1, 1),
        (AT, 65, 2),
        (AT + 60, 8, 2),  // starts mid-line, ends mid-next-line
        (AT + 32, 64, 2), // same, a whole line's worth
        (AT + 1, 128, 3),
        (AT, 4096, 64),
    ];
    for (offset, len, lines) in cases {
        let data = vec![0xa5u8; len as usize];
        reset_thread_stats();
        let w = pool.write(offset, &data).unwrap();
        assert_eq!((w.offset(), w.len()), (offset, len));
        let _: Durable = pool.persist(w);
        let expected = Stats {
            stores: 1,
            store_bytes: len,
            flushes: lines,
            flushed_bytes: 64 * lines,
            fences: 1,
            // One 256-byte media write per XPLine the range touches.
            xpline_bytes: 256 * ((offset + len - 1) / 256 - offset / 256 + 1),
            ..Stats::default()
        };
        assert_eq!(take(), expected, "write of {len} bytes at {offset}");
        assert_eq!(expected.bytes_to_media(), 64 * lines);

        // persist_range counts the same lines.
        let _ = pool.persist_range(offset, len).unwrap();
        let s = take();
        assert_eq!((s.flushes, s.fences, s.stores), (lines, 1, 0));
    }
    // An empty write touches no line; its fence has nothing pending.
    reset_thread_stats();
    pool.persist(pool.write(AT + 5, &[]).unwrap());
    let s = take();
    assert_eq!((s.flushes, s.fences, s.redundant_fences), (0, 1, 1));
}

#[test]
fn flush_then_fence_all_is_one_fence_for_a_batch() {
    let pool = pool(PersistModel::X86);
    reset_thread_stats();
    let a = pool.flush(pool.write(AT, &[1; 10]).unwrap());
    let b = pool.flush(pool.write(AT + 128, &[2; 70]).unwrap());
    let c: Pending = nt_write(&pool, AT + 512, &[3; 64]).unwrap().into();
    let s = thread_stats();
    assert_eq!((s.flushes, s.fences, s.nt_stores), (3, 0, 1));
    pool.fence_all([a, b, c]);
    let s = take();
    assert_eq!((s.flushes, s.fences, s.redundant_fences), (3, 1, 0));

    let a = pool.flush(pool.write(AT, &[4; 8]).unwrap());
    let b = pool.flush_range(AT + 64, 64).unwrap();
    pool.fence(a.and(b).and(nt_write(&pool, AT + 256, &[5; 8]).unwrap()));
    let s = take();
    assert_eq!(
        (s.flushes, s.fences, s.nt_stores, s.redundant_fences),
        (2, 1, 1, 0)
    );

    // Merged writes flush their covering range once.
    let w = pool
        .write(AT, &[6; 8])
        .unwrap()
        .merge(pool.write(AT + 120, &[7; 8]).unwrap());
    assert_eq!((w.offset(), w.len()), (AT, 128));
    pool.persist(w);
    assert_eq!(take().flushes, 2);
    let mut back = [0u8; 128];
    pool.read_bytes(AT, &mut back).unwrap();
    assert_eq!(&back[..8], &[6; 8]);
    assert_eq!(&back[120..], &[7; 8]);
}

#[test]
fn x86_write_after_an_nt_write_issues_exactly_one_fence() {
    let pool = pool(PersistModel::X86);
    reset_thread_stats();
    let nt = nt_write(&pool, AT, &[1; 64]).unwrap();
    assert!(!nt.is_fenced());
    let w = pool.write_after(nt, AT + 4096, &[2; 8]).unwrap();
    let s = take();
    assert_eq!(
        s,
        Stats {
            nt_stores: 1,
            nt_bytes: 64,
            stores: 1,
            store_bytes: 8,
            fences: 1,
            xpline_bytes: 256,
            themis_elidable_fences: 1,
            ..Stats::default()
        }
    );
    pool.persist(w);
    let s = take();
    assert_eq!((s.fences, s.themis_elidable_fences), (1, 0));

    // order_after says what it did.
    let nt = nt_write(&pool, AT, &[3; 8]).unwrap();
    assert_eq!(pool.order_after(nt), NtOrdering::Fenced);
    let s = take();
    assert_eq!((s.fences, s.themis_elidable_fences), (1, 1));
}

#[test]
fn x86_a_batch_of_nt_writes_shares_one_fence() {
    let pool = pool(PersistModel::X86);
    reset_thread_stats();
    let a = nt_write(&pool, AT, &[1; 64]).unwrap();
    let b = nt_write(&pool, AT + 64, &[2; 64]).unwrap();
    let wa = pool.write_after(a, AT + 4096, &[3; 8]).unwrap();
    assert!(
        b.is_fenced(),
        "the first write_after advanced the fence epoch"
    );
    let wb = pool.write_after(b, AT + 4096 + 64, &[4; 8]).unwrap();
    let s = take();
    assert_eq!(
        s,
        Stats {
            nt_stores: 2,
            nt_bytes: 128,
            // Both lines in one XPLine: the XPBuffer combines them into one media write.
            xpline_bytes: 256,
            stores: 2,
            store_bytes: 16,
            fences: 1,
            themis_elidable_fences: 1,
            fences_saved_by_epoch: 1,
            ..Stats::default()
        }
    );
    pool.persist(wa.merge(wb));

    // The same through order_after.
    let a = nt_write(&pool, AT, &[5; 8]).unwrap();
    let b = nt_write(&pool, AT + 8, &[6; 8]).unwrap();
    reset_thread_stats();
    assert_eq!(pool.order_after(a), NtOrdering::Fenced);
    assert_eq!(pool.order_after(b), NtOrdering::AlreadyFenced);
    let s = take();
    assert_eq!(
        (s.fences, s.themis_elidable_fences, s.fences_saved_by_epoch),
        (1, 1, 1)
    );
}

#[test]
fn x86_an_explicit_fence_makes_write_after_free() {
    let pool = pool(PersistModel::X86);
    reset_thread_stats();
    let nt = nt_write(&pool, AT, &[1; 24]).unwrap();
    pool.sfence();
    assert!(nt.is_fenced());
    let w = pool.write_after(nt, AT + 4096, &[2; 8]).unwrap();
    let s = take();
    assert_eq!(
        (s.fences, s.themis_elidable_fences, s.fences_saved_by_epoch),
        (1, 0, 1),
        "only the explicit fence was issued"
    );
    pool.persist(w);
    take();

    let nt = nt_write(&pool, AT, &[1; 8]).unwrap();
    pool.persist(pool.write(AT + 64, &[1]).unwrap()); // any fence advances the epoch
    reset_thread_stats();
    assert_eq!(pool.order_after(nt), NtOrdering::AlreadyFenced);
    assert_eq!(take().fences, 0);
}

#[test]
fn the_fence_epoch_is_per_thread() {
    let pool = pool(PersistModel::X86);
    reset_thread_stats();
    let nt = nt_write(&pool, AT, &[1; 8]).unwrap();
    // Another thread fencing does not order this thread's nt-store.
    std::thread::scope(|s| {
        s.spawn(|| {
            pool.sfence();
        });
    });
    assert!(!nt.is_fenced());
    assert_eq!(pool.order_after(nt), NtOrdering::Fenced);
    let s = take();
    assert_eq!(
        (s.fences, s.themis_elidable_fences),
        (1, 1),
        "the other thread's fence is not counted here"
    );
}

#[test]
fn themis_and_ideal_write_after_issues_no_fence_but_counts_it() {
    for (model, ordering) in [
        (PersistModel::Themis, NtOrdering::ThemisProgramOrder),
        (PersistModel::Ideal, NtOrdering::Unordered),
    ] {
        let pool = pool(model);
        reset_thread_stats();
        let nt = nt_write(&pool, AT, &[1; 64]).unwrap();
        let w = pool.write_after(nt, AT + 4096, &[2; 8]).unwrap();
        let s = take();
        assert_eq!(
            s,
            Stats {
                nt_stores: 1,
                nt_bytes: 64,
                stores: 1,
                store_bytes: 8,
                fences: 0,
                xpline_bytes: 256,
                themis_elidable_fences: 1,
                ..Stats::default()
            },
            "{model:?}"
        );
        pool.persist(w);
        take();

        let nt = nt_write(&pool, AT, &[3; 8]).unwrap();
        assert_eq!(pool.order_after(nt), ordering, "{model:?}");
        let s = take();
        assert_eq!((s.fences, s.themis_elidable_fences), (0, 1), "{model:?}");

        // A batch: x86 would fence once, so one fence is elidable and one saved by the epoch.
        let a = nt_write(&pool, AT, &[1; 64]).unwrap();
        let b = nt_write(&pool, AT + 64, &[2; 64]).unwrap();
        assert_eq!(pool.order_after(a), ordering, "{model:?}");
        assert!(!b.is_fenced(), "{model:?}: no fence was really issued");
        assert_eq!(pool.order_after(b), ordering, "{model:?}");
        let s = take();
        assert_eq!(
            (s.fences, s.themis_elidable_fences, s.fences_saved_by_epoch),
            (0, 1, 1),
            "{model:?}"
        );

        // A token fenced explicitly is AlreadyFenced under every model.
        let nt = nt_write(&pool, AT, &[4; 8]).unwrap();
        pool.sfence();
        assert_eq!(pool.order_after(nt), NtOrdering::AlreadyFenced, "{model:?}");
        let s = take();
        assert_eq!(
            (s.fences, s.themis_elidable_fences, s.fences_saved_by_epoch),
            (1, 0, 1),
            "{model:?}"
        );
        let mut back = [0u8; 8];
        pool.read_bytes(AT + 4096, &mut back).unwrap();
        assert_eq!(back, [2; 8]);
    }
}

/// One workload of nt-writes and dependent temporal writes: single tokens, batches, tokens
/// fenced explicitly.
fn nt_then_t_workload(pool: &Pool) {
    for round in 0..5u64 {
        let base = AT + round * 1024;
        // A batch of three log entries, then the three writes they protect.
        let a = nt_write(pool, base, &[1; 64]).unwrap();
        let b = nt_write(pool, base + 64, &[2; 64]).unwrap();
        let c = nt_write(pool, base + 128, &[3; 64]).unwrap();
        let wa = pool.write_after(a, base + 512, &[4; 8]).unwrap();
        let wb = pool.write_after(b, base + 520, &[5; 8]).unwrap();
        let wc = pool.write_after(c, base + 528, &[6; 8]).unwrap();
        pool.persist(wa.merge(wb).merge(wc));
        // A single entry.
        let d = nt_write(pool, base + 192, &[7; 8]).unwrap();
        pool.persist(pool.write_after(d, base + 536, &[8; 8]).unwrap());
        // An entry fenced before its write.
        let e = nt_write(pool, base + 200, &[9; 8]).unwrap();
        pool.sfence();
        pool.persist(pool.write_after(e, base + 544, &[10; 8]).unwrap());
    }
}

#[test]
fn elidable_fences_are_counted_the_same_under_every_model() {
    let mut runs = Vec::new();
    for model in [PersistModel::X86, PersistModel::Themis, PersistModel::Ideal] {
        let pool = pool(model);
        reset_thread_stats();
        nt_then_t_workload(&pool);
        runs.push((model, take()));
    }
    let (_, x86) = runs[0];
    // Per round: one fence for the batch (two saved), one for the single entry; the fenced
    // entry needs none.
    assert_eq!(x86.themis_elidable_fences, 5 * 2);
    assert_eq!(x86.fences_saved_by_epoch, 5 * 3);
    // Per round: 3 persists and 1 sfence, plus the 2 nt -> t fences.
    assert_eq!(x86.fences, 5 * (4 + 2));
    for (model, s) in &runs[1..] {
        assert_eq!(
            s.themis_elidable_fences, x86.themis_elidable_fences,
            "{model:?}"
        );
        assert_eq!(
            s.fences_saved_by_epoch, x86.fences_saved_by_epoch,
            "{model:?}"
        );
        assert_eq!(
            s.fences + s.themis_elidable_fences,
            x86.fences,
            "{model:?}: it issues exactly the fences it elides fewer"
        );
        assert_eq!(
            Stats {
                fences: x86.fences,
                ..*s
            },
            x86,
            "{model:?}: every other counter is the same"
        );
    }
}

#[test]
fn redundant_fences_are_fences_with_nothing_pending() {
    let pool = pool(PersistModel::X86);
    pool.sfence();
    reset_thread_stats();
    pool.sfence();
    let s = take();
    assert_eq!(
        (s.fences, s.redundant_fences),
        (1, 1),
        "fence after a fence"
    );
    pool.sfence();
    pool.sfence();
    assert_eq!(take().redundant_fences, 2);

    pool.persist(pool.write(AT, &[1; 8]).unwrap());
    let s = take();
    assert_eq!(
        (s.fences, s.redundant_fences),
        (1, 0),
        "fence after a flush"
    );

    pool.fence(nt_write(&pool, AT, &[1; 8]).unwrap());
    let s = take();
    assert_eq!(
        (s.fences, s.redundant_fences),
        (1, 0),
        "fence after an nt-store"
    );

    // A plain store is not something a fence orders: the fence after it is redundant.
    let _w = pool.write(AT, &[1; 8]).unwrap();
    pool.sfence();
    let s = take();
    assert_eq!(
        (s.fences, s.redundant_fences),
        (1, 1),
        "fence after an unflushed store"
    );

    // Flush, fence, fence: the second is redundant.
    let _ = pool.persist_range(AT, 64).unwrap();
    pool.sfence();
    let s = take();
    assert_eq!((s.fences, s.redundant_fences), (2, 1));
    // The hardware cannot see redundant flushes.
    assert_eq!(s.redundant_flushes, 0);
}

#[test]
fn byte_counters_and_stats_arithmetic() {
    let pool = pool(PersistModel::X86);
    let before = thread_stats();
    let mut store_bytes = 0;
    let mut nt_bytes = 0;
    for (i, len) in [1usize, 7, 8, 64, 100, 1000].into_iter().enumerate() {
        let off = AT + 2048 * i as u64 + 3;
        pool.persist(pool.write(off, &vec![i as u8; len]).unwrap());
        store_bytes += len as u64;
        pool.fence(nt_write(&pool, off + 1024, &vec![i as u8; len]).unwrap());
        nt_bytes += len as u64;
    }
    let w = pool.store_u64(AT, 5).unwrap();
    pool.persist(w);
    store_bytes += 8;
    let w = pool.compare_exchange_u64(AT, 5, 6).unwrap().unwrap();
    pool.persist(w);
    store_bytes += 8;
    // A failed CAS stores nothing.
    assert_eq!(pool.compare_exchange_u64(AT, 5, 7).unwrap().unwrap_err(), 6);
    let after = thread_stats();
    let delta = after - before;
    assert_eq!(delta.stores, 8);
    assert_eq!(delta.store_bytes, store_bytes);
    assert_eq!(delta.nt_stores, 6);
    assert_eq!(delta.nt_bytes, nt_bytes);
    assert_eq!(delta.fences, 14);
    assert_eq!(delta.flushed_bytes, 64 * delta.flushes);
    assert_eq!(delta.bytes_to_media(), delta.flushed_bytes + nt_bytes);
    assert_eq!(before + delta, after);
    assert_eq!(delta - delta, Stats::default());

    reset_thread_stats();
    assert_eq!(thread_stats(), Stats::default());
}

#[test]
fn failed_accesses_count_nothing() {
    let pool = pool(PersistModel::X86);
    reset_thread_stats();
    assert!(pool.write(SIZE, &[1]).is_err());
    assert!(nt_write(&pool, SIZE - 1, &[1, 2]).is_err());
    assert!(pool.store_u64(AT + 1, 1).is_err());
    assert!(pool.flush_range(SIZE, 1).is_err());
    let nt = nt_write(&pool, AT, &[1; 8]).unwrap();
    reset_thread_stats();
    // write_after checks its range before ordering: no fence for a write that fails.
    assert!(pool.write_after(nt, SIZE, &[1]).is_err());
    assert_eq!(take(), Stats::default());
}

#[test]
fn the_xpbuffer_model_charges_whole_xplines_and_combines_nearby_lines() {
    let pool = Pool::anonymous("xpbuffer", 4 << 20, &PoolOptions::new()).unwrap();
    let line = [7u8; 64];
    let persist_line = |offset: u64| {
        let w = pool.write(offset, &line).unwrap();
        pool.persist(w);
    };
    // 64-byte persists to XPLines far apart: each costs a whole 256-byte media write, the
    // effective write ratio of 0.25 that the Optane guide (FAST'20), Sec. 5.1, measured for small random stores.
    reset_thread_stats();
    for i in 0..256u64 {
        persist_line(AT + i * 4096);
    }
    let s = take();
    assert_eq!(s.xpline_bytes, 256 * 256);
    assert_eq!(s.effective_write_ratio(), Some(0.25));
    // The same lines in order: four lines share an XPLine, so the ratio is 1.
    for i in 0..256u64 {
        persist_line(AT + 64 * i);
    }
    let s = take();
    assert_eq!(s.xpline_bytes, 64 * 256);
    assert_eq!(s.effective_write_ratio(), Some(1.0));
    // One line over and over stays in the buffer: written to the media once.
    for _ in 0..100 {
        persist_line(AT);
    }
    let s = take();
    assert_eq!(s.xpline_bytes, 256);
    assert_eq!(s.effective_write_ratio(), Some(100.0 * 64.0 / 256.0));
    // Non-temporal stores count the same way.
    let _ = nt_write(&pool, AT + 1024, &[1u8; 1024]).unwrap();
    pool.sfence();
    assert_eq!(take().xpline_bytes, 1024);
    assert_eq!(Stats::default().effective_write_ratio(), None);
}
