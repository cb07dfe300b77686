//! Threads sharing a pool through its safe API only: no mix of accesses may be a data race or
//! undefined behaviour. Run under Miri (CI does), whose race detector also refuses overlapping
//! atomic accesses of different sizes; natively they check that no byte is lost.

use std::sync::Barrier;
use std::thread;

use pmem_ordering::{Pool, PoolOptions};

/// Rounds per test: Miri interprets every access, and explores interleavings through its
/// scheduler's randomness rather than through repetition.
const ROUNDS: u64 = if cfg!(miri) { 4 } else { 2_000 };

fn pool() -> Pool {
    Pool::anonymous("concurrent-access", 1 << 16, &PoolOptions::new()).expect("anonymous pool")
}

/// Run `a` and `b` on two threads, started together.
fn race(a: impl FnOnce() + Send, b: impl FnOnce() + Send) {
    let start = Barrier::new(2);
    thread::scope(|s| {
        s.spawn(|| {
            start.wait();
            a();
        });
        start.wait();
        b();
    });
}

/// The safe-code race that once failed under Miri ("overlapping unsynchronized atomic accesses
/// must use the same access size"): an unaligned write of a few bytes and an 8-byte load of the
/// word holding them.
#[test]
fn an_unaligned_write_and_a_word_load_of_its_word_do_not_race() {
    let pool = pool();
    let root = pool.root_offset();
    for round in 0..ROUNDS {
        let byte = round as u8;
        race(
            || {
                let _ = pool.write(root + 1, &[byte, byte, byte]).unwrap();
            },
            || {
                let word = pool.load_u64(root).unwrap().to_ne_bytes();
                // Each byte is the old or the new value, never anything else.
                for &b in &word[1..4] {
                    assert!(b == byte || b == byte.wrapping_sub(1));
                }
            },
        );
        let word = pool.load_u64(root).unwrap().to_ne_bytes();
        assert_eq!(&word[1..4], &[byte; 3]);
    }
}

/// An unaligned read whose ends share words with 8-byte stores, compare-exchanges and a words
/// view's loads of another thread.
#[test]
fn unaligned_reads_beside_word_stores_do_not_race() {
    let pool = pool();
    let root = pool.root_offset();
    race(
        || {
            for i in 0..ROUNDS {
                let _ = pool.store_u64(root, i).unwrap();
                let _ = pool.compare_exchange_u64(root + 16, i, i + 1).unwrap();
            }
        },
        || {
            for _ in 0..ROUNDS {
                let mut buf = [0u8; 13];
                pool.read_bytes(root + 5, &mut buf).unwrap();
                let words = pool.words(root, 3).unwrap();
                let _ = words.load(0);
                let _ = words.load(2);
            }
        },
    );
}

/// Two threads writing different bytes of the same words (an unaligned range's ends each):
/// every byte each wrote is there afterwards, none reset by the other's write of its word.
#[test]
fn writes_of_neighbouring_bytes_keep_each_other() {
    let pool = pool();
    let root = pool.root_offset();
    for round in 0..ROUNDS {
        let (a, b) = (round as u8 | 1, (round as u8) << 1);
        race(
            // Bytes 3..11 of the root: the end of word 0 and the start of word 1.
            || {
                let _ = pool.write(root + 3, &[a; 8]).unwrap();
            },
            // Bytes 0..3 and 11..16: the rest of both words.
            || {
                let _ = pool.write(root, &[b; 3]).unwrap();
                let _ = pool.write(root + 11, &[b; 5]).unwrap();
            },
        );
        let mut got = [0u8; 16];
        pool.read_bytes(root, &mut got).unwrap();
        let mut want = [b; 16];
        want[3..11].fill(a);
        assert_eq!(got, want, "round {round}");
    }
}

/// A streaming store racing with every kind of safe access to the words it streams: once the
/// raw tier's hole (a datalog's copy-on-write block or a lane log streamed while a holder of
/// the pool read or wrote it), now race-free because `nt_write` stores whole words atomically.
#[test]
fn a_streaming_store_and_safe_accesses_of_its_words_do_not_race() {
    let pool = pool();
    let root = pool.root_offset();
    // An unaligned range: a ragged head and tail around whole words (and a whole line).
    let at = root + 5;
    const LEN: usize = 83;
    for round in 0..ROUNDS {
        let byte = round as u8;
        race(
            || {
                let nt = pool.nt_write(at, &[byte; LEN]).unwrap();
                pool.fence(nt);
            },
            || {
                let mut seen = [0u8; LEN];
                pool.read_bytes(at, &mut seen).unwrap();
                // Each byte is the old or the new value, never anything else (up to the word
                // this thread also stores to, below).
                for &b in &seen[..43] {
                    assert!(b == byte || b == byte.wrapping_sub(1), "round {round}: {b}");
                }
                let _ = pool.load_u64(root + 16).unwrap();
                let _ = pool.words(root + 8, 4).unwrap().load(1);
                let _ = pool.store_u64(root + 48, round).unwrap();
                let _ = pool.write(root + 88, &[byte; 2]).unwrap();
            },
        );
        let mut back = [0u8; LEN];
        pool.read_bytes(at, &mut back).unwrap();
        assert_eq!(back[..43], [byte; 43], "round {round}: the streamed bytes");
    }
}
