//! kill -9 under load, for the writes of several keys: clients send MSETs of a group's keys,
//! all carrying one value, alone and several to a pipeline (which the server commits as one
//! write batch), and a mover RENAMEs one token key back and forth between two names. The
//! server is killed at a random moment and restarted on the same pool: every group's keys
//! must all hold one value (never some keys of an MSET and not others), that value the last
//! acknowledged one or one in flight at the kill, and the token must be under exactly one of
//! its names.

mod common;

use common::{connect, KilledServer};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const ROUNDS: u64 = 16;
const CLIENTS: usize = 3;
const GROUPS: u64 = 40;
const KEYS_PER_GROUP: u64 = 8;
const TOKEN: [&str; 2] = ["token:a", "token:b"];

/// SplitMix64, seeded per run and printed.
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

fn group_keys(client: usize, group: u64) -> Vec<String> {
    (0..KEYS_PER_GROUP)
        .map(|i| format!("c{client}:g{group}:{i}"))
        .collect()
}

/// What one client knows: each group's acknowledged value, and the MSETs sent without an
/// answer (group, value).
#[derive(Default)]
struct ClientLog {
    acknowledged: HashMap<u64, String>,
    in_flight: Vec<(u64, String)>,
    msets: u64,
}

fn run_client(addr: SocketAddr, id: usize, round: u64, seed: u64, mut log: ClientLog) -> ClientLog {
    let mut rng = Rng(seed);
    let Some(mut c) = connect(addr) else {
        return log;
    };
    for seq in 0.. {
        // One MSET alone, or two to five in one pipeline.
        let count = if rng.below(2) == 0 {
            1
        } else {
            2 + rng.below(4)
        };
        let mut pipe = redis::pipe();
        for n in 0..count {
            let group = rng.below(GROUPS);
            let value = format!(
                "r{round}-s{seq}-{n}-{}",
                "x".repeat(rng.below(200) as usize)
            );
            let command = pipe.cmd("MSET");
            for key in group_keys(id, group) {
                command.arg(key).arg(&value);
            }
            log.in_flight.push((group, value));
        }
        if pipe.query::<()>(&mut c).is_err() {
            return log;
        }
        for (group, value) in log.in_flight.drain(..) {
            log.acknowledged.insert(group, value);
            log.msets += 1;
        }
    }
    log
}

/// RENAMEs the token from one name to the other until the server goes; how many it made.
fn run_mover(addr: SocketAddr) -> u64 {
    let Some(mut c) = connect(addr) else {
        return 0;
    };
    let mut moves = 0;
    loop {
        let from: Result<bool, _> = redis::cmd("EXISTS").arg(TOKEN[0]).query(&mut c);
        let Ok(at_a) = from else {
            return moves;
        };
        let (from, to) = if at_a {
            (TOKEN[0], TOKEN[1])
        } else {
            (TOKEN[1], TOKEN[0])
        };
        match redis::cmd("RENAME").arg(from).arg(to).query::<()>(&mut c) {
            Ok(()) => moves += 1,
            Err(error) if error.kind() == redis::ErrorKind::ResponseError => {
                panic!("the token is under neither name: {error}")
            }
            Err(_) => return moves,
        }
    }
}

#[test]
fn msets_and_renames_stay_whole_across_kill_9() {
    let dir = common::temp_dir();
    let pool = dir.path().join("kill-batches.pool");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let mut logs: Vec<ClientLog> = (0..CLIENTS).map(|_| ClientLog::default()).collect();
    let mut moves = 0;
    {
        let (mut server, addr) = KilledServer::spawn(&pool, 64);
        let mut c = connect(addr).unwrap();
        redis::cmd("SET")
            .arg(TOKEN[0])
            .arg("the token")
            .query::<()>(&mut c)
            .unwrap();
        server.kill();
    }
    for round in 0..ROUNDS {
        let (mut server, addr) = KilledServer::spawn(&pool, 64);
        let workers: Vec<_> = logs
            .drain(..)
            .enumerate()
            .map(|(id, log)| {
                let client_seed = rng.next();
                thread::spawn(move || run_client(addr, id, round, client_seed, log))
            })
            .collect();
        let mover = thread::spawn(move || run_mover(addr));
        thread::sleep(Duration::from_millis(20 + rng.below(150)));
        server.kill();
        logs = workers.into_iter().map(|w| w.join().unwrap()).collect();
        moves += mover.join().unwrap();

        let (mut server, addr) = KilledServer::spawn(&pool, 64);
        let mut c = connect(addr).unwrap();
        for (id, log) in logs.iter_mut().enumerate() {
            for group in 0..GROUPS {
                let keys = group_keys(id, group);
                let found: Vec<Option<String>> =
                    redis::cmd("MGET").arg(&keys).query(&mut c).unwrap();
                assert!(
                    found.iter().all(|value| *value == found[0]),
                    "round {round}, seed {seed}: group {group} of client {id} holds an MSET in part: {found:?}"
                );
                let found = found[0].clone();
                let in_flight = log
                    .in_flight
                    .iter()
                    .any(|(g, value)| *g == group && Some(value) == found.as_ref());
                if in_flight {
                    // An unanswered MSET happened: it is now the group's state.
                    log.acknowledged.insert(group, found.unwrap());
                } else {
                    assert_eq!(
                        found.as_ref(),
                        log.acknowledged.get(&group),
                        "round {round}, seed {seed}: group {group} of client {id} lost its acknowledged MSET"
                    );
                }
            }
            log.in_flight.clear();
        }
        let token: Vec<Option<String>> = redis::cmd("MGET").arg(&TOKEN).query(&mut c).unwrap();
        let held: Vec<&String> = token.iter().flatten().collect();
        assert_eq!(
            held,
            ["the token"],
            "round {round}, seed {seed}: the token after a RENAME cut short: {token:?}"
        );
        server.kill();
    }
    let msets: u64 = logs.iter().map(|log| log.msets).sum();
    println!("{msets} acknowledged MSETs and {moves} RENAMEs over {ROUNDS} kills");
    assert!(
        msets > ROUNDS * CLIENTS as u64 && moves > ROUNDS,
        "only {msets} MSETs and {moves} RENAMEs acknowledged: the kills came before the load"
    );
}
