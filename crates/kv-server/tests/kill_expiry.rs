//! kill -9 under load, for expiry times: clients set their keys with long and short times to
//! live (`SET EX`, `SET PX`, `SETEX`), without one, change them (`EXPIRE`, `PERSIST`) and
//! delete them, one command at a time, each remembering what was acknowledged and what was in
//! flight. The server is killed at a random moment; with it down, the pool's deadline maps
//! are checked against its keys (every deadline's key exists and is indexed, every index
//! entry is a deadline); then it is restarted and every key read: a key whose deadline passed
//! is absent, one whose deadline is ahead holds its value with the time to live it was given
//! (within the time the command took), one without a deadline holds its value, and keys no
//! client touches (with and without a deadline) are all there.

mod common;

use common::{connect, KilledServer};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pmem_structures::Granularity;

const ROUNDS: u64 = 10;
const CLIENTS: usize = 3;
const KEYS: u64 = 30;
const STEADY: u64 = 100;
/// The long time to live, in seconds: never reached during the test.
const LONG: u64 = 3600;
/// Milliseconds of leeway for clock readings on either side of a deadline.
const SLACK: u64 = 5;

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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// What a key holds as a client knows it: a value (or none) and the bounds of its deadline.
#[derive(Clone, Debug, PartialEq)]
struct State {
    value: Option<String>,
    deadline: Option<(u64, u64)>,
}

const ABSENT: State = State {
    value: None,
    deadline: None,
};

impl State {
    /// Whether it is surely alive at `at` (present, and no deadline before it).
    fn alive_at(&self, at: u64) -> bool {
        self.value.is_some() && self.deadline.is_none_or(|(low, _)| low > at + SLACK)
    }

    /// Whether a read of `found` and `pttl` between `before` and `after` agrees with it.
    fn matches(&self, found: &Option<String>, pttl: i64, before: u64, after: u64) -> bool {
        let Some(value) = &self.value else {
            return found.is_none();
        };
        match self.deadline {
            None => found.as_ref() == Some(value) && pttl == -1,
            Some((low, high)) => {
                let present = found.as_ref() == Some(value)
                    && pttl >= 0
                    && (pttl as u64) + after + SLACK >= low
                    && (pttl as u64) + before <= high + SLACK;
                if high + SLACK < before {
                    found.is_none()
                } else if low > after + SLACK {
                    present
                } else {
                    // The deadline falls inside the read, between its GET and its PTTL: the
                    // value may be read and then be gone.
                    let expired_between = found.as_ref() == Some(value) && pttl == -2;
                    present || found.is_none() || expired_between
                }
            }
        }
    }
}

fn key_name(client: usize, key: u64) -> String {
    format!("c{client}:k{key}")
}

#[derive(Default)]
struct ClientLog {
    acknowledged: HashMap<u64, State>,
    /// The command sent without an answer: its key and the state it would leave, its
    /// deadline's bounds as if it applied at once (widened to the kill once known).
    in_flight: Option<(u64, State)>,
    /// When the command in flight was sent.
    sent: u64,
    commands: u64,
}

fn run_client(addr: SocketAddr, id: usize, round: u64, seed: u64, mut log: ClientLog) -> ClientLog {
    let mut rng = Rng(seed);
    let Some(mut c) = connect(addr) else {
        return log;
    };
    for seq in 0.. {
        let key = rng.below(KEYS);
        let name = key_name(id, key);
        let value = format!("r{round}-s{seq}");
        let old = log.acknowledged.get(&key).cloned().unwrap_or(ABSENT);
        let sent = now_ms();
        let short = 20 + rng.below(300);
        let (command, next): (redis::Cmd, Box<dyn Fn(u64, u64) -> State>) = match rng.below(7) {
            0 => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(&name).arg(&value).arg("EX").arg(LONG);
                let v = value.clone();
                (
                    cmd,
                    Box::new(move |lo, hi| State {
                        value: Some(v.clone()),
                        deadline: Some((lo + LONG * 1000, hi + LONG * 1000)),
                    }),
                )
            }
            1 => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(&name).arg(&value).arg("PX").arg(short);
                let v = value.clone();
                (
                    cmd,
                    Box::new(move |lo, hi| State {
                        value: Some(v.clone()),
                        deadline: Some((lo + short, hi + short)),
                    }),
                )
            }
            2 => {
                let mut cmd = redis::cmd("PSETEX");
                cmd.arg(&name).arg(short).arg(&value);
                let v = value.clone();
                (
                    cmd,
                    Box::new(move |lo, hi| State {
                        value: Some(v.clone()),
                        deadline: Some((lo + short, hi + short)),
                    }),
                )
            }
            3 => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(&name).arg(&value);
                let v = value.clone();
                (
                    cmd,
                    Box::new(move |_, _| State {
                        value: Some(v.clone()),
                        deadline: None,
                    }),
                )
            }
            // EXPIRE and PERSIST only on a key surely alive, so what they leave is known.
            4 if old.alive_at(sent + 1000) => {
                let mut cmd = redis::cmd("EXPIRE");
                cmd.arg(&name).arg(LONG);
                let value = old.value.clone();
                (
                    cmd,
                    Box::new(move |lo, hi| State {
                        value: value.clone(),
                        deadline: Some((lo + LONG * 1000, hi + LONG * 1000)),
                    }),
                )
            }
            5 if old.alive_at(sent + 1000) => {
                let mut cmd = redis::cmd("PERSIST");
                cmd.arg(&name);
                let value = old.value.clone();
                (
                    cmd,
                    Box::new(move |_, _| State {
                        value: value.clone(),
                        deadline: None,
                    }),
                )
            }
            _ => {
                let mut cmd = redis::cmd("DEL");
                cmd.arg(&name);
                (cmd, Box::new(|_, _| ABSENT))
            }
        };
        log.in_flight = Some((key, next(sent, sent)));
        log.sent = sent;
        if command.query::<redis::Value>(&mut c).is_err() {
            return log;
        }
        let acked = now_ms();
        log.acknowledged.insert(key, next(sent, acked));
        log.in_flight = None;
        log.commands += 1;
    }
    log
}

/// Read `key`'s value and time to live, with the clock before and after.
fn read(c: &mut redis::Connection, key: &str) -> (Option<String>, i64, u64, u64) {
    let before = now_ms();
    let found: Option<String> = redis::cmd("GET").arg(key).query(c).unwrap();
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(c).unwrap();
    (found, pttl, before, now_ms())
}

#[test]
fn deadlines_survive_kill_9_and_passed_ones_stay_passed() {
    let dir = common::temp_dir();
    let pool = dir.path().join("kill-expiry.pool");
    let seed = now_ms() ^ u64::from(std::process::id());
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let mut logs: Vec<ClientLog> = (0..CLIENTS).map(|_| ClientLog::default()).collect();
    let steady_deadline;
    {
        let (mut server, addr) = KilledServer::spawn(&pool, 64);
        let mut c = connect(addr).unwrap();
        let sent = now_ms();
        for i in 0..STEADY {
            let mut cmd = redis::cmd("SET");
            cmd.arg(format!("steady:{i}")).arg(i);
            if i % 2 == 1 {
                cmd.arg("EX").arg(LONG);
            }
            cmd.query::<()>(&mut c).unwrap();
        }
        steady_deadline = (sent + LONG * 1000, now_ms() + LONG * 1000);
        server.kill();
    }
    let mut expired_seen = 0;
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
        thread::sleep(Duration::from_millis(30 + rng.below(200)));
        server.kill();
        let killed = now_ms();
        logs = workers.into_iter().map(|w| w.join().unwrap()).collect();
        // Down for a while: some short deadlines pass meanwhile.
        thread::sleep(Duration::from_millis(rng.below(300)));
        // A command in flight applied, if at all, between its sending and the kill.
        for log in &mut logs {
            let sent = log.sent;
            if let Some((
                _,
                State {
                    deadline: Some((_, high)),
                    ..
                },
            )) = &mut log.in_flight
            {
                *high += killed - sent;
            }
        }

        let (keys, deadlines) = pmem_kv_server::offline::check_pool(&pool, Granularity::Emulated)
            .unwrap_or_else(|error| panic!("round {round}, seed {seed}: {error}"));
        assert!(
            keys >= STEADY && deadlines >= STEADY / 2,
            "{keys} keys, {deadlines} deadlines"
        );

        let (mut server, addr) = KilledServer::spawn(&pool, 64);
        let mut c = connect(addr).unwrap();
        for (id, log) in logs.iter_mut().enumerate() {
            for key in 0..KEYS {
                let (found, pttl, before, after) = read(&mut c, &key_name(id, key));
                let acknowledged = log.acknowledged.get(&key).cloned().unwrap_or(ABSENT);
                let in_flight = log
                    .in_flight
                    .as_ref()
                    .filter(|(k, _)| *k == key)
                    .map(|(_, s)| s.clone());
                let matched = in_flight
                    .into_iter()
                    .chain([acknowledged.clone()])
                    .find(|state| state.matches(&found, pttl, before, after));
                let Some(state) = matched else {
                    panic!(
                        "round {round}, seed {seed}: key {key} of client {id} reads {found:?} with PTTL {pttl} \
                         between {before} and {after}; acknowledged {acknowledged:?}, in flight {:?}",
                        log.in_flight
                    );
                };
                if found.is_none() && state.value.is_some() {
                    expired_seen += 1;
                }
                let state = if found.is_none() { ABSENT } else { state };
                log.acknowledged.insert(key, state);
            }
            log.in_flight = None;
        }
        for i in 0..STEADY {
            let (found, pttl, before, after) = read(&mut c, &format!("steady:{i}"));
            let state = State {
                value: Some(i.to_string()),
                deadline: (i % 2 == 1).then_some(steady_deadline),
            };
            assert!(
                state.matches(&found, pttl, before, after),
                "round {round}, seed {seed}: steady:{i} reads {found:?} with PTTL {pttl}"
            );
        }
        server.kill();
    }
    let commands: u64 = logs.iter().map(|log| log.commands).sum();
    println!(
        "{commands} acknowledged commands, {expired_seen} keys found expired over {ROUNDS} kills"
    );
    assert!(
        commands > ROUNDS * CLIENTS as u64 && expired_seen > 0,
        "only {commands} commands acknowledged and {expired_seen} keys expired: the test checked little"
    );
}
