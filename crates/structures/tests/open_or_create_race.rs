//! Two instances of a service starting at once: two processes, two threads each, all calling
//! `Store::open_or_create` on the same new path in the same instant, round after round. Every
//! round must end with one store at the path that every caller that got one wrote into, and
//! every caller must get the store or `AlreadyOpen` (the store is held by another), never a
//! broken file, an "interrupted creation" or a file that is not a pool; nothing but the store
//! is left in the directory.
//!
//! The second process is this test binary re-executed with an environment variable naming the
//! directory (no `fork` inside the multi-threaded libtest harness). The parent starts each round
//! by writing its number to the child's stdin and starts its own two threads; the child starts
//! its two on reading it and reports their outcomes on its stdout. Each caller waits a seeded
//! random few microseconds first, so the four starts fall at every relative offset.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use pmem_ordering::{Granularity, PoolError};
use pmem_structures::{Error, HeapConfig, Store, StoreOptions};
use pmem_test_kit::fixture::scratch_dir;
use pmem_test_kit::SplitMix64;

/// Names the directory of the rounds, in the child.
const CHILD_ENV: &str = "PMEM_STRUCTURES_CREATE_RACE_CHILD";
/// The test the child runs again (its child mode is the same for both tests).
const TEST_NAME: &str = "racing_open_or_create_ends_with_one_store";
/// Rounds of the normal tier: a few seconds.
const ROUNDS: u64 = 2_000;
/// Rounds of the long sweep (`--ignored`).
const SWEEP_ROUNDS: u64 = 30_000;
/// The longest seeded wait before a caller starts, in microseconds.
const MAX_STAGGER_US: u64 = 60;
/// Bounds each wait for the child, so a stuck child fails the test instead of hanging it.
const DEADLINE: Duration = Duration::from_secs(30);
/// The map each caller that gets the store writes its number into.
const STARTERS: &str = "starters";
const SIZE: u64 = 1 << 20;

/// A small store, quick to format.
fn options() -> StoreOptions {
    StoreOptions::new()
        .granularity(Granularity::Emulated)
        .heap(HeapConfig {
            lanes: 2,
            lane_log_bytes: 4096,
            chunk_size: 64 << 10,
        })
        .max_structures(4)
}

fn round_path(dir: &Path, round: u64) -> PathBuf {
    dir.join(format!("round-{round}.pool"))
}

/// What one caller got, as one word: `ok`, `busy` (`AlreadyOpen`) or the error.
fn start(path: &Path, round: u64, caller: u64) -> String {
    let mut rng = SplitMix64::new(round << 8 | caller);
    let until = Instant::now() + Duration::from_micros(rng.below(MAX_STAGGER_US));
    while Instant::now() < until {
        std::hint::spin_loop();
    }
    match Store::open_or_create(path, SIZE, &options()) {
        Ok(store) => {
            let written = store
                .hash_map::<u64, u64>(STARTERS)
                .and_then(|starters| starters.insert(caller, round));
            match written {
                Ok(true) => "ok".to_string(),
                Ok(false) => format!("ok-but-{caller}-was-there"),
                Err(e) => format!("write-failed:{e}").replace(' ', "_"),
            }
        }
        Err(Error::Pool(PoolError::AlreadyOpen { .. })) => "busy".to_string(),
        Err(e) => format!("failed:{e}").replace(' ', "_"),
    }
}

/// Two threads starting at once on `path`, callers `first` and `first + 1`.
fn start_two(path: &Path, round: u64, first: u64) -> [String; 2] {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let threads = [first, first + 1].map(|caller| {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                start(path, round, caller)
            })
        });
        threads.map(|t| t.join().expect("a starting thread panicked"))
    })
}

/// The child: a round per line of stdin, its two callers' outcomes on stdout.
fn run_child(dir: &Path) {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let line = line.expect("read the parent's line");
        let Some(round) = line.strip_prefix("go ") else {
            break;
        };
        let round: u64 = round.parse().expect("a round number");
        let [a, b] = start_two(&round_path(dir, round), round, 2);
        writeln!(out, "race-round {round} {a} {b}").expect("write to the parent");
        out.flush().expect("flush to the parent");
    }
}

struct ChildRunner {
    child: Child,
    stdin: ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildRunner {
    fn spawn(dir: &Path) -> ChildRunner {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new(exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the child");
        let stdin = child.stdin.take().expect("the child's stdin");
        let stdout: ChildStdout = child.stdout.take().expect("the child's stdout");
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // libtest's "test ... " has no line end of its own: the first answer follows it.
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = line.find("race-round ") {
                    if send.send(line[at..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        ChildRunner {
            child,
            stdin,
            lines,
        }
    }
}

impl Drop for ChildRunner {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "end");
        let _ = self.stdin.flush();
        if self.child.wait().is_err() {
            let _ = self.child.kill();
        }
    }
}

/// Runs `rounds` rounds and checks each.
fn race(rounds: u64) {
    let dir = scratch_dir("pmem-create-race");
    let mut child = ChildRunner::spawn(dir.path());
    let (mut both_got_it, mut one_waited) = (0u64, 0u64);
    for round in 0..rounds {
        let path = round_path(dir.path(), round);
        writeln!(child.stdin, "go {round}").expect("write to the child");
        child.stdin.flush().expect("flush to the child");
        let mine = start_two(&path, round, 0);
        let line = child
            .lines
            .recv_timeout(DEADLINE)
            .unwrap_or_else(|_| panic!("round {round}: the child did not answer"));
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(
            words[1],
            round.to_string(),
            "the child answered another round"
        );
        let outcomes = [mine[0].as_str(), mine[1].as_str(), words[2], words[3]];
        for (caller, outcome) in outcomes.iter().enumerate() {
            assert!(
                *outcome == "ok" || *outcome == "busy",
                "round {round}: caller {caller} got {outcome} ({outcomes:?})"
            );
        }
        let got: Vec<u64> = (0..4u64)
            .filter(|&c| outcomes[c as usize] == "ok")
            .collect();
        assert!(!got.is_empty(), "round {round}: nobody got the store");
        if got.len() > 1 {
            both_got_it += 1;
        } else {
            one_waited += 1;
        }
        let store = Store::open_with(&path, &options())
            .unwrap_or_else(|e| panic!("round {round}: the store left behind: {e}"));
        let starters = store.hash_map::<u64, u64>(STARTERS).unwrap();
        let wrote: Vec<u64> = (0..4u64)
            .filter(|&c| starters.get(c).unwrap() == Some(round))
            .collect();
        assert_eq!(
            wrote, got,
            "round {round}: the callers that got a store did not all get this one"
        );
        drop((starters, store));
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            [path.file_name().unwrap()],
            "round {round}: the directory holds more than the store"
        );
        std::fs::remove_file(&path).unwrap();
    }
    println!(
        "{rounds} rounds: {one_waited} with one caller holding the store, {both_got_it} where \
         more than one got it in turn"
    );
}

#[test]
fn racing_open_or_create_ends_with_one_store() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        run_child(Path::new(&dir));
        return;
    }
    race(ROUNDS);
}

#[test]
#[ignore = "the long sweep: 30,000 rounds, a few minutes"]
fn racing_open_or_create_long_sweep() {
    race(SWEEP_ROUNDS);
}
