//! Redis's own tools against the server binary: `redis-cli` (commands, `--scan`, `--pipe`
//! mass insertion, RESP3 with `-3`, `--stat`, a refused `MULTI` typed by hand) and a short
//! `redis-benchmark` run. They come from Debian's
//! `redis-tools`, which `.ci/run` installs; elsewhere the test says it skipped (and fails
//! under `CI=true`, where a skip would hide a missing install).

mod common;

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

fn installed(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn tools_or_skip() -> bool {
    let missing: Vec<&str> = ["redis-cli", "redis-benchmark"]
        .into_iter()
        .filter(|tool| !installed(tool))
        .collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{missing:?} not installed under CI (.ci/run installs redis-tools)"
    );
    println!("skipped: {missing:?} not installed (Debian package redis-tools)");
    false
}

fn cli(addr: SocketAddr, args: &[&str]) -> String {
    cli_with_input(addr, args, b"")
}

/// redis-cli with `input` on its standard input (commands, one a line, when no command is
/// given).
fn cli_with_input(addr: SocketAddr, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("redis-cli")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "redis-cli {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn redis_cli_and_redis_benchmark_drive_the_server() {
    if !tools_or_skip() {
        return;
    }
    let dir = common::temp_dir();
    let (mut server, addr) = common::spawn_binary(&dir.path().join("tools.pool"), 128);

    assert_eq!(cli(addr, &["PING"]), "PONG\n");
    assert_eq!(cli(addr, &["SET", "greeting", "hello world"]), "OK\n");
    assert_eq!(cli(addr, &["GET", "greeting"]), "hello world\n");
    assert_eq!(cli(addr, &["INCRBY", "visits", "5"]), "5\n");
    assert_eq!(
        cli(addr, &["MSET", "user:1", "ann", "user:2", "bob"]),
        "OK\n"
    );
    assert_eq!(cli(addr, &["MGET", "user:1", "nobody"]), "ann\n\n");
    assert_eq!(
        cli(addr, &["--scan", "--pattern", "user:*"]),
        "user:1\nuser:2\n"
    );
    assert_eq!(
        cli(addr, &["NOSUCH"]).trim_end(),
        "ERR unknown command 'NOSUCH', with args beginning with:"
    );
    assert!(cli(addr, &["INFO", "keyspace"]).contains("db0:keys=4"));
    assert_eq!(cli(addr, &["KEYS", "user:[12]"]), "user:1\nuser:2\n");

    // Mass insertion: redis-cli --pipe streams raw RESP and counts the replies.
    let mut pipe = Command::new("redis-cli")
        .args(["-p", &addr.port().to_string(), "--pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = Vec::new();
    for i in 0..10_000 {
        let (key, value) = (format!("bulk:{i:05}"), format!("v{i}"));
        write!(
            input,
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
            key.len(),
            value.len()
        )
        .unwrap();
    }
    pipe.stdin.take().unwrap().write_all(&input).unwrap();
    let output = pipe.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{report}");
    assert!(report.contains("errors: 0, replies: 10000"), "{report}");
    assert_eq!(cli(addr, &["DBSIZE"]), "10004\n");
    assert_eq!(cli(addr, &["GET", "bulk:09999"]), "v9999\n");

    // A short benchmark: 50 clients, pipelines of 16, random keys; every request answered.
    let output = Command::new("redis-benchmark")
        .args(["-p", &addr.port().to_string()])
        .args([
            "-t", "set,get", "-n", "20000", "-c", "50", "-P", "16", "-r", "5000", "--csv",
        ])
        .output()
        .unwrap();
    let csv = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{csv} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    for test in ["\"SET\"", "\"GET\""] {
        let row = csv
            .lines()
            .find(|line| line.starts_with(test))
            .unwrap_or_else(|| panic!("no {test} row in {csv}"));
        let rps: f64 = row
            .split(',')
            .nth(1)
            .unwrap()
            .trim_matches('"')
            .parse()
            .unwrap();
        assert!(rps > 0.0, "{row}");
    }
    let keys: u64 = cli(addr, &["DBSIZE"]).trim().parse().unwrap();
    assert!(keys > 10_004, "the benchmark's SETs left {keys} keys");

    // SIGTERM: the server stops cleanly.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(server.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(server.wait().unwrap().success());
}

#[test]
fn redis_cli_speaks_resp3_reports_stats_and_multi_typed_by_hand_applies_nothing() {
    if !tools_or_skip() {
        return;
    }
    // In process: a failed check stops the server with the test.
    let server = common::TestServer::start();
    let addr = server.addr();

    // -3: redis-cli sends HELLO 3 and prints RESP3's types (--no-raw: as on a terminal).
    assert_eq!(cli(addr, &["-3", "SET", "k", "v"]), "OK\n");
    assert_eq!(
        cli(addr, &["-3", "--no-raw", "MGET", "k", "missing"]),
        "1) \"v\"\n2) (nil)\n"
    );
    let hello = cli(addr, &["-3", "--no-raw", "HELLO", "3"]);
    assert!(
        hello.starts_with("1# \"server\" => \"pmem-kv-server\"\n"),
        "{hello}"
    );
    assert!(hello.contains("\"proto\" => (integer) 3"), "{hello}");
    assert!(cli(addr, &["-3", "CLIENT", "INFO"]).contains(" resp=3 "));
    assert_eq!(cli(addr, &["-3", "INCRBYFLOAT", "f", "1.25"]), "1.25\n");

    // MULTI ... DISCARD typed into one redis-cli session: each line refused, nothing applied.
    let typed = cli_with_input(
        addr,
        &[],
        b"MULTI\nSET hand 1\nINCR hand:n\nDISCARD\nEXISTS hand hand:n\n",
    );
    let lines: Vec<&str> = typed.lines().filter(|line| !line.is_empty()).collect();
    assert!(
        lines[0].starts_with("ERR MULTI is not supported yet"),
        "{typed}"
    );
    assert!(
        lines[1].starts_with("ERR not run") && lines[2].starts_with("ERR not run"),
        "{typed}"
    );
    assert_eq!(&lines[3..], ["OK", "0"], "{typed}");

    // --stat reads INFO every interval: every column a real number (a missing field prints
    // as -9223372036854775808). stdbuf: redis-cli's output to a pipe is otherwise buffered
    // past the moment it is killed.
    let stat = Command::new("timeout")
        .args([
            "2.5",
            "stdbuf",
            "-oL",
            "redis-cli",
            "-p",
            &addr.port().to_string(),
        ])
        .args(["--stat", "-i", "1"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&stat.stdout);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(2)
        .map(|line| line.split_whitespace().collect())
        .filter(|row: &Vec<&str>| !row.is_empty())
        .collect();
    assert!(!rows.is_empty(), "{text}");
    for row in &rows {
        // keys, mem, clients, blocked, requests, (+delta), connections
        assert_eq!(row.len(), 7, "{text}");
        assert_eq!(row[0], "2", "{text}");
        assert!(
            row[1].ends_with(['B', 'K', 'M', 'G']) && !row[1].starts_with('-'),
            "{text}"
        );
        assert_eq!((row[2], row[3]), ("1", "0"), "{text}");
        assert!(row[4].parse::<u64>().unwrap() > 5, "{text}");
        assert!(row[6].parse::<u64>().unwrap() >= 5, "{text}");
    }
    assert!(!text.contains("-9223372036854775808"), "{text}");
}
