//! kill -9 under load, for hashes: clients write each of their hashes whole with one HSET of
//! all its fields (every field one value), alone and several to a pipeline, and delete whole
//! hashes (a DEL; and large hashes of their own, an HSET of 300 fields then a DEL, so reclaiming
//! runs in the background when the kill comes). The server is killed at a random moment; with it
//! down, the pool's maps must agree (every hash's count is its fields', every field entry a
//! live or deleted hash's); after the restart every hash must hold all its fields with one
//! value (never an HSET in part), that value the last acknowledged one or one in flight at the
//! kill, or be absent where the last acknowledged write deleted it.

mod common;

use common::{connect, KilledServer};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pmem_structures::Granularity;
// Seeded per run, the seed printed.
use pmem_test_kit::SplitMix64 as Rng;

const ROUNDS: u64 = 10;
const CLIENTS: usize = 3;
const HASHES: u64 = 30;
const FIELDS: u64 = 8;
const LARGE_FIELDS: u64 = 300;

fn hash_key(client: usize, hash: u64) -> String {
    format!("c{client}:h{hash}")
}

fn large_key(client: usize, hash: u64) -> String {
    format!("c{client}:large{hash}")
}

/// What one client knows: each hash's acknowledged state (`None`: deleted), and the writes
/// sent without an answer.
#[derive(Default)]
struct ClientLog {
    acknowledged: HashMap<u64, Option<String>>,
    in_flight: Vec<(u64, Option<String>)>,
    writes: u64,
}

fn run_client(addr: SocketAddr, id: usize, round: u64, seed: u64, mut log: ClientLog) -> ClientLog {
    let mut rng = Rng::new(seed);
    let Some(mut c) = connect(addr) else {
        return log;
    };
    for seq in 0.. {
        // One write alone, or two to five in one pipeline.
        let count = if rng.below(2) == 0 {
            1
        } else {
            2 + rng.below(4)
        };
        let mut pipe = redis::pipe();
        for n in 0..count {
            let hash = rng.below(HASHES);
            let key = hash_key(id, hash);
            match rng.below(10) {
                0 => {
                    pipe.cmd("DEL").arg(&key).ignore();
                    log.in_flight.push((hash, None));
                }
                1 => {
                    // A large hash of its own, deleted at once: its fields go to the
                    // background.
                    let large = large_key(id, hash);
                    let command = pipe.cmd("HSET").arg(&large).ignore();
                    for field in 0..LARGE_FIELDS {
                        command.arg(format!("f{field}")).arg("large");
                    }
                    pipe.cmd("DEL").arg(&large).ignore();
                }
                _ => {
                    let value = format!(
                        "r{round}-s{seq}-{n}-{}",
                        "x".repeat(rng.below(100) as usize)
                    );
                    let command = pipe.cmd("HSET").arg(&key).ignore();
                    for field in 0..FIELDS {
                        command.arg(format!("f{field}")).arg(&value);
                    }
                    log.in_flight.push((hash, Some(value)));
                }
            }
        }
        if pipe.query::<()>(&mut c).is_err() {
            return log;
        }
        for (hash, state) in log.in_flight.drain(..) {
            log.acknowledged.insert(hash, state);
            log.writes += 1;
        }
    }
    log
}

#[test]
fn hash_writes_and_deletes_stay_whole_across_kill_9() {
    let dir = common::temp_dir();
    let pool = dir.path().join("kill-hashes.pool");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("seed {seed}");
    let mut rng = Rng::new(seed);
    let mut logs: Vec<ClientLog> = (0..CLIENTS).map(|_| ClientLog::default()).collect();
    for round in 0..ROUNDS {
        let (mut server, addr) = KilledServer::spawn(&pool, 64);
        let workers: Vec<_> = logs
            .drain(..)
            .enumerate()
            .map(|(id, log)| {
                let client_seed = rng.next_u64();
                thread::spawn(move || run_client(addr, id, round, client_seed, log))
            })
            .collect();
        thread::sleep(Duration::from_millis(20 + rng.below(150)));
        server.kill();
        logs = workers.into_iter().map(|w| w.join().unwrap()).collect();

        pmem_kv_server::offline::check_pool(&pool, Granularity::Emulated)
            .unwrap_or_else(|error| panic!("round {round}, seed {seed}: {error}"));

        let (mut server, addr) = KilledServer::spawn(&pool, 64);
        let mut c = connect(addr).unwrap();
        for (id, log) in logs.iter_mut().enumerate() {
            for hash in 0..HASHES {
                let key = hash_key(id, hash);
                let found: HashMap<String, String> =
                    redis::cmd("HGETALL").arg(&key).query(&mut c).unwrap();
                let state = if found.is_empty() {
                    None
                } else {
                    let values: Vec<&String> = found.values().collect();
                    assert!(
                        found.len() == FIELDS as usize && values.iter().all(|v| *v == values[0]),
                        "round {round}, seed {seed}: hash {key} holds an HSET in part: {found:?}"
                    );
                    Some(values[0].clone())
                };
                // A large hash: absent, or whole if the kill came between its HSET and DEL.
                let large: HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(large_key(id, hash))
                    .query(&mut c)
                    .unwrap();
                assert!(
                    large.is_empty()
                        || large.len() == LARGE_FIELDS as usize
                            && large.values().all(|v| v == "large"),
                    "round {round}, seed {seed}: a large hash in part: {} fields",
                    large.len()
                );
                let in_flight = log.in_flight.iter().any(|(h, s)| *h == hash && *s == state);
                if in_flight {
                    // An unanswered write happened: it is now the hash's state.
                    log.acknowledged.insert(hash, state);
                } else {
                    assert_eq!(
                        &state,
                        log.acknowledged.get(&hash).unwrap_or(&None),
                        "round {round}, seed {seed}: hash {key} lost its acknowledged write"
                    );
                }
            }
            log.in_flight.clear();
        }
        server.kill();
    }
    let writes: u64 = logs.iter().map(|log| log.writes).sum();
    println!("{writes} acknowledged hash writes over {ROUNDS} kills");
    assert!(
        writes > ROUNDS * CLIENTS as u64,
        "only {writes} writes acknowledged: the kills came before the load"
    );
}
