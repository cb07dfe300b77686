//! The server against Debian's `redis-server` (7.0): the same random command sequences sent
//! to both, every reply compared, error texts included, in RESP2 and, after `HELLO 3`, in
//! RESP3. The sequences use every command both servers have, with wrong arities, values
//! that are not integers or floats, integers in the forms Redis refuses, bad options, glob
//! patterns and unknown commands; a second test sends malformed and inline requests byte
//! for byte. Replies are compared as bytes, except where Redis's answer depends on its hash
//! table: KEYS, HKEYS, HVALS (compared sorted), HGETALL (its pairs compared sorted), SCAN and
//! HSCAN (a whole scan's keys, or field-value pairs, compared as sets), RANDOMKEY
//! (both answer a key that exists, or both nil), CLIENT ID and HELLO's server fields, and
//! where it depends on the clock: TTL and its kin (a time within a tolerance; absent keys and
//! keys without a deadline exactly). Expiry times in the sequences are 10 s or more ahead,
//! or already past, so no key expires between the two servers' answers.
//!
//! Left out on purpose: what only one side has or means differently (MULTI/EXEC/WATCH,
//! refused here; SELECT and COPY ... DB of databases
//! 1-15; INFO, CONFIG GET, COMMAND's contents, CLIENT SETINFO of Redis 7.2), and lengths
//! between this server's value limit (64 MiB) and Redis's (512 MiB).
//!
//! `.ci/run` installs redis-server; a run without it says it skipped, and fails under `CI`.

mod common;
#[path = "differential/hash_requests.rs"]
mod hash_requests;
#[path = "differential/requests.rs"]
mod requests;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Raw, TestServer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use requests::{plain_write_strategy, request_strategy, words, Compare, Request};

/// A `redis-server` on a free port, killed when dropped.
struct RedisServer {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// `None` when there is no redis-server to run.
    fn start() -> Option<RedisServer> {
        let installed = Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        // A port the system just handed out and took back; a clash only retries.
        for _ in 0..5 {
            let port = TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts");
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if let Ok(socket) = TcpStream::connect(addr) {
                    drop(socket);
                    // The child itself: the port, freed before it was handed to the child,
                    // may have gone to another test's server meanwhile.
                    let info = Raw::connect(addr).call_text(&["INFO", "server"]);
                    if info.contains(&format!("process_id:{}\r\n", child.id())) {
                        return Some(RedisServer {
                            child,
                            addr,
                            _dir: dir,
                        });
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("redis-server did not start on a free port in 5 tries");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Both servers, or the reason to skip.
fn servers_or_skip() -> Option<(RedisServer, TestServer)> {
    match RedisServer::start() {
        Some(redis) => Some((redis, TestServer::start())),
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "redis-server is not installed under CI (.ci/run installs it)"
            );
            println!("skipped: redis-server is not installed (Debian package redis-server)");
            None
        }
    }
}

/// A reply read back: what the comparisons need of RESP2 and RESP3.
#[derive(Debug, PartialEq)]
enum Resp {
    /// A bulk string (`$`), or null in either protocol.
    Blob(Option<Vec<u8>>),
    /// An array or a set (`*`, `~`).
    Items(Vec<Resp>),
    /// A map (`%`): its keys and values in turn.
    Pairs(Vec<Resp>),
    /// Any other line (`+`, `-`, `:`).
    Line(Vec<u8>),
}

fn parse(bytes: &[u8]) -> Resp {
    let (resp, used) = parse_at(bytes, 0);
    assert_eq!(used, bytes.len(), "{}", String::from_utf8_lossy(bytes));
    resp
}

fn parse_at(bytes: &[u8], at: usize) -> (Resp, usize) {
    let end = at
        + bytes[at..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a line end");
    let line = &bytes[at..end];
    let next = end + 2;
    let count = || -> i64 { std::str::from_utf8(&line[1..]).unwrap().parse().unwrap() };
    match line[0] {
        b'$' if count() < 0 => (Resp::Blob(None), next),
        b'_' => (Resp::Blob(None), next),
        b'$' => {
            let n = count() as usize;
            (
                Resp::Blob(Some(bytes[next..next + n].to_vec())),
                next + n + 2,
            )
        }
        b'*' | b'~' | b'%' => {
            let n = count() * if line[0] == b'%' { 2 } else { 1 };
            let mut items = Vec::new();
            let mut at = next;
            for _ in 0..n.max(0) {
                let (item, after) = parse_at(bytes, at);
                items.push(item);
                at = after;
            }
            let resp = if line[0] == b'%' {
                Resp::Pairs(items)
            } else {
                Resp::Items(items)
            };
            (resp, at)
        }
        _ => (Resp::Line(line.to_vec()), next),
    }
}

/// The bulk strings of an array reply.
fn blobs(reply: &Resp) -> Vec<Vec<u8>> {
    match reply {
        Resp::Items(items) => items
            .iter()
            .map(|item| match item {
                Resp::Blob(Some(data)) => data.clone(),
                other => panic!("not a bulk string: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn is_error(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-')
}

/// Every key a whole SCAN with `args`'s options gives (every field and value, as pairs, of
/// an HSCAN, whose cursor is at `cursor_at`), sorted, or its first error.
fn full_scan(raw: &mut Raw, args: &[Vec<u8>], cursor_at: usize) -> Result<Vec<Vec<u8>>, Vec<u8>> {
    let mut args = args.to_vec();
    let mut keys = Vec::new();
    for _ in 0..10_000 {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let reply = raw.call(&refs);
        if is_error(&reply) {
            return Err(reply);
        }
        let Resp::Items(parts) = parse(&reply) else {
            panic!("SCAN answered {}", String::from_utf8_lossy(&reply));
        };
        let Resp::Blob(Some(cursor)) = &parts[0] else {
            panic!("a SCAN cursor: {:?}", parts[0]);
        };
        let found = blobs(&parts[1]);
        if cursor_at == 2 {
            // HSCAN: field and value as one item, so pairs compare whole.
            keys.extend(
                found
                    .chunks(2)
                    .map(|pair| [pair[0].clone(), b"=>".to_vec(), pair[1].clone()].concat()),
            );
        } else {
            keys.extend(found);
        }
        if cursor == b"0" {
            keys.sort();
            return Ok(keys);
        }
        args[cursor_at] = cursor.clone();
    }
    panic!("a SCAN that never ended");
}

/// Send `request` to both and compare the replies; `Err` describes a difference.
fn compare(ours: &mut Raw, redis: &mut Raw, request: &Request) -> Result<(), String> {
    let refs: Vec<&[u8]> = request.args.iter().map(Vec::as_slice).collect();
    let shown = |reply: &[u8]| String::from_utf8_lossy(&reply[..reply.len().min(400)]).into_owned();
    if let Compare::Scan | Compare::HScan = request.compare {
        let cursor_at = if let Compare::HScan = request.compare {
            2
        } else {
            1
        };
        let (a, b) = (
            full_scan(ours, &request.args, cursor_at),
            full_scan(redis, &request.args, cursor_at),
        );
        return if a == b {
            Ok(())
        } else {
            Err(format!("SCAN: ours {a:?}, redis {b:?}"))
        };
    }
    let (a, b) = (ours.call(&refs), redis.call(&refs));
    let same = match request.compare {
        Compare::Bytes | Compare::Scan | Compare::HScan => a == b,
        _ if is_error(&a) || is_error(&b) => a == b,
        Compare::Unordered => {
            let (mut x, mut y) = (blobs(&parse(&a)), blobs(&parse(&b)));
            x.sort();
            y.sort();
            x == y
        }
        Compare::UnorderedPairs => match (parse(&a), parse(&b)) {
            (Resp::Items(x), Resp::Items(y)) | (Resp::Pairs(x), Resp::Pairs(y)) => {
                let sorted = |items: Vec<Resp>| {
                    let mut pairs: Vec<_> = items
                        .chunks(2)
                        .map(|pair| format!("{:?} => {:?}", pair[0], pair[1]))
                        .collect();
                    pairs.sort();
                    pairs
                };
                sorted(x) == sorted(y)
            }
            _ => false,
        },
        Compare::RandomKey => match (parse(&a), parse(&b)) {
            (Resp::Blob(Some(x)), Resp::Blob(Some(y))) => {
                let (x, y) = (ours.call(&[b"EXISTS", &x]), redis.call(&[b"EXISTS", &y]));
                if (x.as_slice(), y.as_slice()) != (b":1\r\n", b":1\r\n") {
                    return Err(format!(
                        "RANDOMKEY's keys exist? ours {}, redis {}",
                        shown(&x),
                        shown(&y)
                    ));
                }
                true
            }
            (x, y) => x == y,
        },
        Compare::AnyInteger => a.first() == Some(&b':') && b.first() == Some(&b':'),
        Compare::Within(tolerance) => {
            let number = |reply: &[u8]| {
                std::str::from_utf8(reply.strip_prefix(b":")?.strip_suffix(b"\r\n")?)
                    .ok()?
                    .parse::<i64>()
                    .ok()
            };
            match (number(&a), number(&b)) {
                (Some(x), Some(y)) if x < 0 || y < 0 => x == y,
                (Some(x), Some(y)) => (x - y).abs() <= tolerance,
                _ => false,
            }
        }
        Compare::Shape => match (parse(&a), parse(&b)) {
            (Resp::Pairs(x), Resp::Pairs(y)) | (Resp::Items(x), Resp::Items(y)) => {
                x.len() == y.len()
            }
            _ => false,
        },
    };
    if same {
        Ok(())
    } else {
        Err(format!("ours {:?}, redis {:?}", shown(&a), shown(&b)))
    }
}

#[test]
fn random_command_sequences_get_redis_replies() {
    let Some((redis_server, ours_server)) = servers_or_skip() else {
        return;
    };
    let started = Instant::now();
    let commands = std::cell::Cell::new(0usize);
    let sequences = 128;
    let mut runner = TestRunner::new(Config {
        cases: sequences,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        any::<bool>(),
        proptest::collection::vec(request_strategy(), 1..120),
    );
    let result = runner.run(&strategy, |(resp3, requests)| {
        let mut ours = Raw::connect(ours_server.addr());
        let mut redis = Raw::connect(redis_server.addr);
        for raw in [&mut ours, &mut redis] {
            assert_eq!(raw.call_text(&["FLUSHALL"]), "+OK\r\n");
            if resp3 {
                assert!(raw.call_text(&["HELLO", "3"]).starts_with('%'));
            }
        }
        for (at, request) in requests.iter().enumerate() {
            commands.set(commands.get() + 1);
            if let Err(difference) = compare(&mut ours, &mut redis, request) {
                let shown: Vec<String> = request
                    .args
                    .iter()
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                return Err(TestCaseError::fail(format!(
                    "request {at} {shown:?} (RESP{}): {difference}",
                    if resp3 { 3 } else { 2 }
                )));
            }
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
    println!(
        "{} requests in {sequences} sequences, both servers, in {:.1} s",
        commands.get(),
        started.elapsed().as_secs_f64()
    );
}

/// The same sequences sent as one pipeline (every request written before any reply is read),
/// with runs of plain writes, which the server commits together as one write batch: every
/// reply, in order, must still be Redis's (each command seeing the writes before it, each
/// failing one failing alone). Requests whose replies are compared other than as bytes are
/// left out.
#[test]
fn pipelined_sequences_get_redis_replies() {
    let Some((redis_server, ours_server)) = servers_or_skip() else {
        return;
    };
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    let pipelined = prop_oneof![
        3 => request_strategy().prop_filter("compared as bytes", |r| matches!(r.compare, Compare::Bytes)),
        2 => plain_write_strategy(),
    ];
    let strategy = (any::<bool>(), proptest::collection::vec(pipelined, 1..80));
    let result = runner.run(&strategy, |(resp3, requests)| {
        let mut replies = Vec::new();
        for addr in [ours_server.addr(), redis_server.addr] {
            let mut raw = Raw::connect(addr);
            assert_eq!(raw.call_text(&["FLUSHALL"]), "+OK\r\n");
            if resp3 {
                assert!(raw.call_text(&["HELLO", "3"]).starts_with('%'));
            }
            let mut bytes = Vec::new();
            for request in &requests {
                let refs: Vec<&[u8]> = request.args.iter().map(Vec::as_slice).collect();
                bytes.extend(common::encode_request(&refs));
            }
            raw.send_bytes(&bytes);
            replies.push(requests.iter().map(|_| raw.reply()).collect::<Vec<_>>());
        }
        for (at, (ours, redis)) in replies[0].iter().zip(&replies[1]).enumerate() {
            prop_assert_eq!(
                String::from_utf8_lossy(ours),
                String::from_utf8_lossy(redis),
                "request {} {:?} of {:?} (RESP{})",
                at,
                requests[at],
                requests,
                if resp3 { 3 } else { 2 }
            );
        }
        Ok(())
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

/// Malformed requests and inline commands, byte for byte: each sent on a fresh connection
/// to both servers (followed by a QUIT line, so both close), and everything each answers
/// before closing compared.
#[test]
fn malformed_and_inline_requests_get_redis_replies() {
    let Some((redis_server, ours_server)) = servers_or_skip() else {
        return;
    };
    let inputs: &[&[u8]] = &[
        b"*01\r\n$4\r\nPING\r\n",
        b"*+1\r\n$4\r\nPING\r\n",
        b"*-0\r\n",
        b"*1\r\n$04\r\nPING\r\n",
        b"*1\r\n$+4\r\nPING\r\n",
        b"*1\r\n$-1\r\n",
        b"*3000000000\r\n",
        b"*1\r\n$600000000\r\n",
        b"*1\r\n:5\r\n",
        b"*1\r\n*1\r\n",
        b"*x\r\n",
        b"*1\r\n$x\r\n",
        b"*0\r\n*-1\r\nPING\r\n",
        b"SET a \"b\r\n",
        b"SET a 'b'c\r\n",
        b"SET a \"b\"c\r\n",
        b"ECHO \"\\x41\\n\\t\\\\\\q\"\r\n",
        b"ECHO 'it\\'s' \"\"\r\n",
        b"ECHO a\"b c\"d\r\n",
        b"  \r\nPING\r\n\r\n",
        b"SET k \"two words\"\r\nGET k\r\n",
        b"ECHO \"\\xZZ\"\r\n",
        b"GET\r\n",
        b"PING\nPING\r\n",
    ];
    for input in inputs {
        let mut replies = Vec::new();
        for addr in [ours_server.addr(), redis_server.addr] {
            let mut socket = TcpStream::connect(addr).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut bytes = input.to_vec();
            bytes.extend_from_slice(b"QUIT\r\n");
            replies.push(common::exchange(&mut socket, &bytes));
        }
        assert_eq!(
            replies[0],
            replies[1],
            "{:?}: ours first, redis second",
            String::from_utf8_lossy(input)
        );
    }
}

/// Deadlines given as absolute times read back exactly as Redis gives them (EXPIRETIME and
/// PEXPIRETIME, rounded the same way), and relative ones within a tolerance.
#[test]
fn absolute_deadlines_read_back_as_redis_gives_them() {
    let Some((redis_server, ours_server)) = servers_or_skip() else {
        return;
    };
    let mut ours = Raw::connect(ours_server.addr());
    let mut redis = Raw::connect(redis_server.addr);
    let requests: &[&[&str]] = &[
        &["FLUSHALL"],
        &["SET", "a", "1", "EXAT", "4102444800"],
        &["EXPIRETIME", "a"],
        &["PEXPIRETIME", "a"],
        &["SET", "b", "1", "PXAT", "4102444800499"],
        &["EXPIRETIME", "b"],
        &["PEXPIREAT", "b", "4102444800500"],
        &["EXPIRETIME", "b"],
        &["PEXPIRETIME", "b"],
        &["EXPIREAT", "b", "4102444700", "GT"],
        &["EXPIREAT", "b", "4102444700", "LT"],
        &["PEXPIRETIME", "b"],
        &["PEXPIREAT", "c", "9223372036854775807"],
        &["SET", "c", "1"],
        &["PEXPIREAT", "c", "9223372036854775807"],
        &["EXPIRETIME", "c"],
        &["RENAME", "b", "d"],
        &["PEXPIRETIME", "d"],
        &["COPY", "d", "e"],
        &["PEXPIRETIME", "e"],
        &["GETEX", "e", "PXAT", "4102444800001"],
        &["PEXPIRETIME", "e"],
        &["GETEX", "e", "PERSIST"],
        &["PEXPIRETIME", "e"],
        &["SET", "a", "2", "KEEPTTL"],
        &["EXPIRETIME", "a"],
        &["SET", "a", "3"],
        &["EXPIRETIME", "a"],
        &["EXPIREAT", "d", "1"],
        &["EXISTS", "d"],
        &["SET", "f", "1", "PXAT", "1"],
        &["GET", "f"],
        &["DBSIZE"],
    ];
    for request in requests {
        let (a, b) = (ours.call_text(request), redis.call_text(request));
        assert_eq!(a, b, "{request:?}");
    }
}

/// Hashes past Redis's small encoding (over 128 fields, values over 64 bytes), which Redis
/// keeps in hash order and pages by COUNT: the same fields, values, counts and whole scans,
/// through HDEL, HINCRBY, RENAME, COPY and DEL.
#[test]
fn large_hashes_read_back_as_redis_gives_them() {
    let Some((redis_server, ours_server)) = servers_or_skip() else {
        return;
    };
    let mut ours = Raw::connect(ours_server.addr());
    let mut redis = Raw::connect(redis_server.addr);
    let mut hset = words(&["HSET", "big"]);
    for i in 0..300 {
        hset.push(format!("field:{i}").into_bytes());
        hset.push(
            i.to_string()
                .repeat(if i % 10 == 0 { 40 } else { 1 })
                .into_bytes(),
        );
    }
    let mut requests = vec![
        Request {
            args: words(&["FLUSHALL"]),
            compare: Compare::Bytes,
        },
        Request {
            args: hset,
            compare: Compare::Bytes,
        },
    ];
    let read: &[(&[&str], Compare)] = &[
        (&["HLEN", "big"], Compare::Bytes),
        (&["HGETALL", "big"], Compare::UnorderedPairs),
        (&["HKEYS", "big"], Compare::Unordered),
        (&["HVALS", "big"], Compare::Unordered),
        (&["HSCAN", "big", "0", "COUNT", "7"], Compare::HScan),
        (
            &["HSCAN", "big", "0", "MATCH", "field:1*", "COUNT", "3"],
            Compare::HScan,
        ),
        (&["HSTRLEN", "big", "field:10"], Compare::Bytes),
        (
            &["HDEL", "big", "field:1", "field:2", "nope", "field:1"],
            Compare::Bytes,
        ),
        (&["HLEN", "big"], Compare::Bytes),
        (&["HINCRBY", "big", "field:3", "5"], Compare::Bytes),
        (&["HINCRBY", "big", "field:30", "5"], Compare::Bytes),
        (
            &["HMGET", "big", "field:3", "field:2", "field:299"],
            Compare::Bytes,
        ),
        (&["RENAME", "big", "b2"], Compare::Bytes),
        (&["COPY", "b2", "b3"], Compare::Bytes),
        (&["HGETALL", "b3"], Compare::UnorderedPairs),
        (&["DEL", "b2"], Compare::Bytes),
        (&["EXISTS", "big", "b2", "b3"], Compare::Bytes),
        (&["TYPE", "b3"], Compare::Bytes),
        (&["SCAN", "0", "TYPE", "hash"], Compare::Scan),
        (&["GET", "b3"], Compare::Bytes),
    ];
    requests.extend(read.iter().map(|(args, compare)| Request {
        args: words(args),
        compare: *compare,
    }));
    for request in &requests {
        if let Err(difference) = compare(&mut ours, &mut redis, request) {
            panic!("{request:?}: {difference}");
        }
    }
}
