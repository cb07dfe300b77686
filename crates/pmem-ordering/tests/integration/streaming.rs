//! Streaming stores shared between threads: ranges streamed by one thread and read by another
//! after synchronising with it, and disjoint ranges streamed by several threads at once (the
//! racing case is in `concurrent_access.rs`). Under Miri a pool's streaming stores are relaxed
//! atomic word stores, as they are to the memory model natively.

use pmem_ordering::{Pool, PoolOptions};

const SIZE: u64 = 64 * 1024;
/// A line-aligned offset in the heap.
const AT: u64 = 8192;
/// Long enough for a ragged head, whole streamed lines and a ragged tail.
const LEN: usize = 3 * 64 + 13;

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN).map(|i| seed.wrapping_add(i as u8) | 1).collect()
}

#[test]
fn a_range_streamed_then_handed_over_reads_back_on_the_other_thread() {
    let pool = Pool::anonymous("streaming", SIZE, &PoolOptions::new()).unwrap();
    let data = pattern(7);
    // Unaligned start: the copy has a ragged head as well as streamed words and lines.
    let at = AT + 3;
    let nt = pool.nt_write(at, &data).unwrap();
    pool.fence(nt);
    let seen = std::thread::scope(|s| {
        s.spawn(|| {
            let mut back = vec![0u8; LEN];
            pool.read_bytes(at, &mut back).unwrap();
            back
        })
        .join()
        .unwrap()
    });
    assert_eq!(seen, data);
}

#[test]
fn threads_stream_into_their_own_ranges_at_once() {
    const THREADS: u64 = 3;
    let pool = Pool::anonymous("streaming", SIZE, &PoolOptions::new()).unwrap();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let pool = &pool;
            s.spawn(move || {
                // Each thread's range, like an undo-log lane, is its own: ranges are 1 KiB
                // apart and `LEN` < 1 KiB, so no other thread touches it.
                let at = AT + 1024 * t;
                let nt = pool.nt_write(at, &pattern(t as u8)).unwrap();
                pool.fence(nt);
            });
        }
    });
    // The scope's join orders every thread's stores before these reads.
    for t in 0..THREADS {
        let mut back = vec![0u8; LEN];
        pool.read_bytes(AT + 1024 * t, &mut back).unwrap();
        assert_eq!(back, pattern(t as u8), "thread {t}'s range");
    }
}
