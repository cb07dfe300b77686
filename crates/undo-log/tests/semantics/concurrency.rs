//! Concurrent transactions: threads on their own lanes, and threads sharing one lane.

use super::*;

fn concurrent_run(lanes: u64, rounds: u64) {
    let heap = Arc::new(anonymous_heap_under(
        LAYOUT,
        8 << 20,
        heap_config(lanes, 8192, 16 << 10),
        FencePolicy::Batched,
    ));
    let root = heap.pool().root_offset();
    let sizes = [
        1u64, 40, 64, 100, 256, 700, 2000, 4096, 5000, 16384, 20000, 50000,
    ];
    let h = heap.clone();
    // Each thread's live blocks: (pointer, requested size, seed of its contents).
    let lives: Vec<Vec<(PPtr<u8>, u64, u64)>> = within("the threads", move || {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..2u64)
                .map(|t| {
                    let h = &h;
                    s.spawn(move || {
                        let mut rng = SplitMix64::new(t + 100);
                        let counter = root + 256 * t;
                        let mut live: Vec<(PPtr<u8>, u64, u64)> = Vec::new();
                        for i in 0..rounds {
                            let free_at = (!live.is_empty()
                                && (rng.below(3) == 0 || live.len() > 24))
                                .then(|| rng.below(live.len() as u64) as usize);
                            let size = sizes[rng.below(sizes.len() as u64) as usize];
                            let seed = t * 1_000_000 + i;
                            let outcome = h
                                .transaction(|tx| {
                                    let c: u64 = tx.read(counter)?;
                                    tx.write_value(counter, &(c + 1))?;
                                    if let Some(k) = free_at {
                                        tx.free(live[k].0)?;
                                        return Ok::<_, TxError>(None);
                                    }
                                    let p = tx.alloc(size)?;
                                    tx.write(p.offset(), &pattern(seed, size.min(64) as usize))?;
                                    if size > 64 {
                                        tx.write(p.offset() + size - 1, &[(seed % 251) as u8])?;
                                    }
                                    Ok(Some(p))
                                })
                                .unwrap();
                            match (outcome, free_at) {
                                (Some(p), _) => live.push((p, size, seed)),
                                (None, Some(k)) => {
                                    live.swap_remove(k);
                                }
                                (None, None) => unreachable!(),
                            }
                        }
                        live
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        })
    });
    for t in 0..2u64 {
        let c: u64 = heap.pool().read(root + 256 * t).unwrap();
        assert_eq!(c, rounds, "thread {t}'s counter");
    }
    let blocks = heap.check_heap().unwrap();
    let all: BTreeSet<u64> = lives.iter().flatten().map(|b| b.0.offset()).collect();
    assert_eq!(
        all.len(),
        lives[0].len() + lives[1].len(),
        "two threads hold the same block"
    );
    assert_eq!(
        offsets(&blocks),
        all,
        "the heap walk is the union of the live blocks"
    );
    let mut sorted = blocks.clone();
    sorted.sort();
    for w in sorted.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
    }
    for &(p, size, seed) in lives.iter().flatten() {
        let len = size.min(64);
        assert_eq!(
            bytes(heap.pool(), p.offset(), len),
            pattern(seed, len as usize)
        );
        if size > 64 {
            assert_eq!(
                bytes(heap.pool(), p.offset() + size - 1, 1),
                [(seed % 251) as u8]
            );
        }
    }
    assert_eq!(heap.alloc_stats().objects, all.len() as u64);
    assert_eq!(heap.tx_stats().committed, 2 * rounds);
}

#[test]
fn two_threads_transact_and_allocate_on_two_lanes() {
    concurrent_run(2, 400);
}

#[test]
fn two_threads_share_one_lane() {
    concurrent_run(1, 200);
}
