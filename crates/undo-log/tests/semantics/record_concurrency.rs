//! Record blocks under concurrency: two threads publish and retire records of one size class
//! (so their bits share bitmap words) while a third runs transactions that allocate and free
//! blocks of its own, and now and then frees one of the first threads' records. Afterwards the
//! DRAM state and the media agree (the heap walk checks them against each other, and again
//! after a reopen) and hold exactly the blocks the threads kept.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};

use pmem_test_kit::fixture::reopen;
use pmem_undo_log::RecordBlock;

use super::*;

/// A live block: (offset, seed of its contents).
type Live = Vec<(u64, u64)>;

/// Publish a 64-byte record holding `seed`'s pattern, fenced.
fn publish_record(heap: &Heap, seed: u64) -> RecordBlock {
    let block = heap.reserve_record(64).unwrap();
    let w = heap.pool().write(block.offset, &pattern(seed, 64)).unwrap();
    let data = heap.pool().flush(w);
    let bit = heap.publish_record(block).unwrap();
    heap.pool().fence(data.and(bit));
    block
}

/// The bitmap word (counted from the allocator's start) of a 64-byte block's bit.
fn bitmap_word(heap: &Heap, offset: u64) -> u64 {
    let layout = heap.layout();
    let rel = offset - layout.alloc_offset;
    // 16 KiB chunks of 64-byte blocks: a 64-byte bitmap, then the blocks.
    let slot = (rel % layout.chunk_size - 64) / 64;
    rel / layout.chunk_size * 4 + slot / 64
}

/// One record thread: publish records, retire a random one now and then (or when it holds
/// many); records handed over to the transaction thread through `handoff` are freed there.
/// Both record threads start each round together (`lockstep`), so their reservations come from
/// the same free slots at the same time. Returns the live records, and the bitmap word of the
/// record published in each round (if one was).
fn record_thread(
    heap: &Heap,
    t: u64,
    rounds: u64,
    lockstep: &Barrier,
    handoff: &Mutex<Vec<(u64, u64)>>,
) -> (Live, Vec<Option<u64>>) {
    let mut rng = SplitMix64::new(t + 7);
    let mut live: Live = Vec::new();
    let mut words = vec![None; rounds as usize];
    for i in 0..rounds {
        lockstep.wait();
        let seed = t * 1_000_000 + i;
        if !live.is_empty() && (rng.below(3) == 0 || live.len() > 20) {
            let (offset, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
            let (block, pending) = heap.retire_record(offset).unwrap();
            heap.pool().fence(pending);
            heap.release_record(block).unwrap();
        } else if rng.below(8) == 0 {
            // A reservation given back, between the others.
            let block = heap.reserve_record(64).unwrap();
            heap.cancel_record(block).unwrap();
        } else {
            let block = publish_record(heap, seed);
            words[i as usize] = Some(bitmap_word(heap, block.offset));
            if rng.below(10) == 0 {
                handoff.lock().unwrap().push((block.offset, seed));
            } else {
                live.push((block.offset, seed));
            }
        }
    }
    (live, words)
}

/// The transaction thread: allocate and free blocks of sizes beside and beyond the records',
/// and free the records handed over to it, each in a transaction; after its rounds, until both
/// record threads are `done`, it frees the records handed over.
fn transaction_thread(
    heap: &Heap,
    rounds: u64,
    done: &AtomicUsize,
    handoff: &Mutex<Vec<(u64, u64)>>,
) -> Live {
    let sizes = [64u64, 100, 1000, 5000, 20000];
    let mut rng = SplitMix64::new(99);
    let mut live: Live = Vec::new();
    let mut records_freed = 0;
    for i in 0..rounds {
        let handed = handoff.lock().unwrap().pop();
        if let Some((offset, _)) = handed {
            heap.transaction(|tx| tx.free(PPtr::<u8>::new(offset)))
                .unwrap();
            records_freed += 1;
        } else if !live.is_empty() && (rng.below(3) == 0 || live.len() > 16) {
            let (offset, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
            free_one(heap, PPtr::new(offset));
        } else {
            let size = sizes[rng.below(sizes.len() as u64) as usize];
            let seed = 9_000_000 + i;
            let p = heap
                .transaction(|tx| {
                    let p = tx.alloc(size)?;
                    tx.write(p.offset(), &pattern(seed, 64))?;
                    Ok::<_, TxError>(p)
                })
                .unwrap();
            live.push((p.offset(), seed));
        }
    }
    loop {
        let finished = done.load(Ordering::Acquire) == 2;
        let handed = handoff.lock().unwrap().pop();
        match handed {
            Some((offset, _)) => {
                heap.transaction(|tx| tx.free(PPtr::<u8>::new(offset)))
                    .unwrap();
                records_freed += 1;
            }
            None if finished => break,
            None => std::thread::yield_now(),
        }
    }
    assert!(records_freed > 0, "the transaction thread freed no record");
    live
}

#[test]
fn two_record_threads_share_bitmap_words_while_transactions_run() {
    let heap = Arc::new(small_heap(FencePolicy::Batched));
    let h = heap.clone();
    let rounds = 3000;
    let (records, txs, handed) = within("the threads", move || {
        let handoff = Mutex::new(Vec::new());
        let lockstep = Barrier::new(2);
        let done = AtomicUsize::new(0);
        let (records, txs) = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2u64)
                .map(|t| {
                    let (h, lockstep, handoff, done) = (&h, &lockstep, &handoff, &done);
                    s.spawn(move || {
                        let out = record_thread(h, t, rounds, lockstep, handoff);
                        done.fetch_add(1, Ordering::Release);
                        out
                    })
                })
                .collect();
            let tx_worker = s.spawn(|| transaction_thread(&h, rounds, &done, &handoff));
            let records: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
            (records, tx_worker.join().unwrap())
        });
        (records, txs, handoff.into_inner().unwrap())
    });
    // In many rounds both threads published a record whose bit is in the same bitmap word.
    let shared = records[0]
        .1
        .iter()
        .zip(&records[1].1)
        .filter(|(a, b)| a.is_some() && a == b)
        .count();
    assert!(
        shared as u64 > rounds / 10,
        "the two threads' records shared a bitmap word in {shared} rounds only"
    );
    let records: Vec<Live> = records.into_iter().map(|r| r.0).collect();

    // Exactly the kept blocks are allocated, each with its contents; records are record
    // blocks, transactions' blocks are not.
    let mut expected: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
    for &(offset, seed) in records.iter().flatten().chain(handed.iter()) {
        expected.insert(offset, (seed, true));
    }
    for &(offset, seed) in &txs {
        assert!(
            expected.insert(offset, (seed, false)).is_none(),
            "{offset:#x} twice"
        );
    }
    let verify = |heap: &Heap| {
        let walk = heap.check_heap().unwrap();
        assert_eq!(
            offsets(&walk),
            expected.keys().copied().collect::<BTreeSet<_>>()
        );
        for (&offset, &(seed, record)) in &expected {
            assert_eq!(heap.record_block(offset).is_some(), record, "{offset:#x}");
            assert_eq!(bytes(heap.pool(), offset, 64), pattern(seed, 64));
        }
    };
    let heap = Arc::into_inner(heap).expect("the threads are done");
    verify(&heap);
    verify(&reopen(heap));
}
