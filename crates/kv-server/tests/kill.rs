//! kill -9 under load: clients write and record every acknowledged SET and DEL, the server
//! process is killed at a random moment, restarted on the same pool, and must hold every
//! acknowledged write with its value and nothing else (a write in flight at the kill may
//! or may not have happened). Then SIGTERM stops it cleanly.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use redis::Commands;

const ROUNDS: u64 = 24;
const CLIENTS: usize = 3;
const KEYS_PER_CLIENT: u64 = 300;

/// A small deterministic generator (SplitMix64), seeded per run and printed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What one client knows: the acknowledged value of each of its keys (`None`: deleted or
/// never written), and the write it sent without an answer.
struct ClientLog {
    acknowledged: HashMap<String, Option<String>>,
    in_flight: Option<(String, Option<String>)>,
    /// Writes acknowledged so far, over every round.
    writes: u64,
}

fn run_client(addr: SocketAddr, id: usize, round: u64, seed: u64, mut log: ClientLog) -> ClientLog {
    let mut rng = Rng(seed);
    let Ok(mut c) =
        redis::Client::open(format!("redis://{addr}/")).and_then(|c| c.get_connection())
    else {
        return log;
    };
    for seq in 0.. {
        let key = format!("c{id}:{}", rng.below(KEYS_PER_CLIENT));
        let value = (rng.below(4) != 0)
            .then(|| format!("r{round}-s{seq}-{}", "x".repeat(rng.below(300) as usize)));
        log.in_flight = Some((key.clone(), value.clone()));
        let result = match &value {
            Some(value) => c.set::<_, _, ()>(&key, value),
            None => c.del::<_, ()>(&key),
        };
        if result.is_err() {
            return log;
        }
        log.acknowledged.insert(key, value);
        log.in_flight = None;
        log.writes += 1;
    }
    log
}

#[test]
fn every_acknowledged_write_survives_kill_9_under_load() {
    let dir = common::temp_dir();
    let pool = dir.path().join("kill.pool");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let mut logs: Vec<ClientLog> = (0..CLIENTS)
        .map(|_| ClientLog {
            acknowledged: HashMap::new(),
            in_flight: None,
            writes: 0,
        })
        .collect();
    for round in 0..ROUNDS {
        let (mut child, addr) = common::spawn_binary(&pool, 64);
        let workers: Vec<_> = logs
            .drain(..)
            .enumerate()
            .map(|(id, log)| {
                let client_seed = rng.next();
                thread::spawn(move || run_client(addr, id, round, client_seed, log))
            })
            .collect();
        thread::sleep(Duration::from_millis(20 + rng.below(150)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        logs = workers.into_iter().map(|w| w.join().unwrap()).collect();

        let (mut child, addr) = common::spawn_binary(&pool, 64);
        let mut c = redis::Client::open(format!("redis://{addr}/"))
            .unwrap()
            .get_connection()
            .unwrap();
        let mut present = 0;
        for (id, log) in logs.iter_mut().enumerate() {
            for k in 0..KEYS_PER_CLIENT {
                let key = format!("c{id}:{k}");
                let found: Option<String> = c.get(&key).unwrap();
                let expected = log.acknowledged.get(&key).cloned().flatten();
                let in_flight = log.in_flight.as_ref().filter(|(k, _)| *k == key);
                match in_flight {
                    Some((_, maybe)) if found == *maybe => {
                        // The unanswered write happened: it is now the key's state.
                        log.acknowledged.insert(key.clone(), maybe.clone());
                    }
                    _ => assert_eq!(
                        found, expected,
                        "round {round}, seed {seed}: {key} lost its acknowledged write"
                    ),
                }
                present += u64::from(found.is_some());
            }
            log.in_flight = None;
        }
        // Nothing else: no key outside the clients' keys.
        assert_eq!(
            redis::cmd("DBSIZE").query::<u64>(&mut c).unwrap(),
            present,
            "round {round}, seed {seed}: keys no client wrote"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let writes: u64 = logs.iter().map(|log| log.writes).sum();
    println!("{writes} acknowledged writes over {ROUNDS} kills");
    assert!(
        writes > ROUNDS * CLIENTS as u64,
        "only {writes} writes acknowledged: the kills came before the load"
    );

    // SIGTERM: a clean stop, exit status 0, the store closed (a new server opens it at once).
    let (child, _) = common::spawn_binary(&pool, 64);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let output = child.wait_with_output().unwrap();
    assert!(Instant::now() < deadline);
    assert!(output.status.success(), "{:?}", output.status);
    assert!(String::from_utf8_lossy(&output.stdout).contains("the store is closed"));
    let (mut child, _) = common::spawn_binary(&pool, 64);
    child.kill().unwrap();
    child.wait().unwrap();
}
