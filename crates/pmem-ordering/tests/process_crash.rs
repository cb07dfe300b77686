//! A process crash: a child process updates a file pool in an unbounded loop and is killed with
//! SIGKILL mid-run; the pool must reopen cleanly with its root intact.
//!
//! The child is this test binary re-executed with an environment variable naming the pool (so no
//! `fork` from inside the multi-threaded libtest harness). Each round it writes a 4 KiB data block
//! for version `v` into slot `v % 2` (alternating temporal and non-temporal writes), persists it,
//! then commits `v` with an 8-byte store to the root counter, persists that, and reports `v` on
//! its stdout. So whatever the moment of the kill:
//!
//! * the counter is the last reported version or the one after it (committed, not yet reported);
//! * the slot of the committed version holds exactly that version's block;
//! * the other slot holds, word by word, the previous version or the next one (a torn write in
//!   progress).

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{assert_detected_granularity, scratch_dir};
use pmem_ordering::{Pool, PoolOptions};

const CHILD_ENV: &str = "PMEM_ORDERING_PROCESS_CRASH_CHILD";
/// This test's name, so the child runs it (and only it) again.
const TEST_NAME: &str = "a_process_killed_mid_write_leaves_a_pool_that_reopens_intact";
const LAYOUT: &str = "process-crash";
const SIZE: u64 = 64 * 1024;
const BLOCK: usize = 4096;
/// Versions the child must have reported before it is killed.
const KILL_AFTER: u64 = 25;
/// Bounds the wait for the child's progress (it needs a few milliseconds), so a stuck child
/// fails the test instead of hanging it.
const DEADLINE: Duration = Duration::from_secs(3);

/// Word `j` of the block of version `v`.
fn word(v: u64, j: u64) -> u64 {
    v.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (j << 32) ^ j
}

fn block(v: u64) -> Vec<u8> {
    (0..(BLOCK / 8) as u64)
        .flat_map(|j| word(v, j).to_le_bytes())
        .collect()
}

fn slot_offset(pool: &Pool, v: u64) -> u64 {
    pool.heap_offset() + (v % 2) * BLOCK as u64
}

/// The child: commit versions forever (until killed).
fn child(path: &Path) -> ! {
    use std::io::Write;
    let pool = Pool::open(path, LAYOUT, &PoolOptions::new()).expect("child: open the pool");
    let counter = pool.root::<u64>().expect("child: root").offset();
    let mut v = pool.load_u64(counter).expect("child: read the counter");
    let mut out = std::io::stdout().lock();
    loop {
        v += 1;
        let data = block(v);
        let at = slot_offset(&pool, v);
        if v.is_multiple_of(2) {
            let nt = pool.nt_write(at, &data).expect("child: nt_write");
            pool.fence(nt);
        } else {
            pool.persist(pool.write(at, &data).expect("child: write"));
        }
        pool.persist(pool.store_u64(counter, v).expect("child: commit"));
        writeln!(out, "persisted {v}").expect("child: report");
        out.flush().expect("child: report");
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "spawns and kills a process on a mapped file, which Miri cannot"
)]
fn a_process_killed_mid_write_leaves_a_pool_that_reopens_intact() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&path));
    }
    let started = Instant::now();
    let dir = scratch_dir();
    let path = dir.path().join("crash.pool");
    let header = {
        let pool = Pool::create(&path, LAYOUT, SIZE, &PoolOptions::new()).unwrap();
        // Page granularity (msync) on a page-cache file, cache line or byte on DAX.
        assert_detected_granularity(&pool, &path);
        pool.header().clone()
    };

    let stderr_path = dir.path().join("child.stderr");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("re-execute the test binary as the child");

    // Read the child's reports on another thread, so the wait for them can time out.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = Vec::new();
        let mut last = 0u64;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            // A line cut short by the kill was not reported.
            let Some(text) = line.strip_suffix(b"\n") else {
                break;
            };
            // libtest's own output may precede a report on its line ("test name ... ").
            let text = String::from_utf8_lossy(text);
            if let Some((_, v)) = text.split_once("persisted ") {
                let v: u64 = v.trim().parse().expect("a version number");
                assert_eq!(v, last + 1, "versions are reported in order");
                last = v;
                let _ = tx.send(v);
            }
        }
        last
    });

    // Wait until the child is well into its loop, then kill it at an arbitrary point of a round.
    let mut seen = 0;
    while seen < KILL_AFTER {
        let left = DEADLINE.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(v) => seen = v,
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the child reported only {seen} versions ({why:?} after {:?}); its stderr:\n{}",
                    started.elapsed(),
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
        }
    }
    let jitter = {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(seen) % 2_000_000
    };
    std::thread::sleep(Duration::from_nanos(jitter));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the child stopped by itself; its stderr:\n{}",
        std::fs::read_to_string(&stderr_path).unwrap_or_default()
    );
    child.kill().expect("SIGKILL the child");
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child was killed, not finished: {status:?}"
    );
    let reported = reader.join().expect("the reader thread");
    assert!(reported >= KILL_AFTER);

    // The header opens cleanly.
    assert_eq!(Pool::inspect(&path, Some(LAYOUT)).unwrap(), header);
    let pool = Pool::open(&path, LAYOUT, &PoolOptions::new()).expect("reopen after the crash");
    assert_eq!(pool.header(), &header);

    // The root is intact: every reported version is committed, at most one more.
    let counter = pool.root::<u64>().unwrap();
    let v = pool.get(counter).unwrap();
    assert!(
        v == reported || v == reported + 1,
        "counter {v}, but the child reported {reported} before it was killed"
    );

    // The committed version's block is whole.
    let mut data = vec![0u8; BLOCK];
    pool.read_bytes(slot_offset(&pool, v), &mut data).unwrap();
    assert!(
        data == block(v),
        "the block of committed version {v} is not intact"
    );

    // The other slot holds the previous version, the next one, or a word-wise mix of both.
    pool.read_bytes(slot_offset(&pool, v + 1), &mut data)
        .unwrap();
    for (j, w) in data.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(w.try_into().unwrap());
        let j = j as u64;
        assert!(
            w == word(v - 1, j) || w == word(v + 1, j),
            "word {j} of the other slot is {w:#x}: neither version {} nor {}",
            v - 1,
            v + 1
        );
    }

    // And the pool goes on working.
    pool.persist(pool.set(counter, &(v + 1)).unwrap());
    drop(pool);
    let pool = Pool::open(&path, LAYOUT, &PoolOptions::new()).unwrap();
    assert_eq!(pool.get(counter).unwrap(), v + 1);
}
