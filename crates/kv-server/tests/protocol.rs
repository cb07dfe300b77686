//! Every command through the `redis` client crate, pipelines, and the error replies.

mod common;

use common::{exchange, TestServer};
use pmem_kv_server::Limits;
use redis::{Commands, RedisResult, Value};

fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

#[test]
fn ping_echo_get_set_and_the_set_options() {
    let server = TestServer::start();
    let mut c = server.client();
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    assert_eq!(cmd("PING").arg("hi").query::<String>(&mut c).unwrap(), "hi");
    assert_eq!(
        cmd("ECHO")
            .arg(b"\x00\xff")
            .query::<Vec<u8>>(&mut c)
            .unwrap(),
        b"\x00\xff"
    );

    assert_eq!(c.get::<_, Option<String>>("k").unwrap(), None);
    let _: () = c.set("k", "v1").unwrap();
    assert_eq!(c.get::<_, String>("k").unwrap(), "v1");
    // NX: only a new key; XX: only an existing one; GET: the old value back.
    let nx: Option<String> = cmd("SET")
        .arg("k")
        .arg("v2")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(nx, None);
    assert_eq!(c.get::<_, String>("k").unwrap(), "v1");
    let xx: Option<String> = cmd("SET")
        .arg("k")
        .arg("v2")
        .arg("xx")
        .query(&mut c)
        .unwrap();
    assert_eq!(xx.as_deref(), Some("OK"));
    let xx_absent: Option<String> = cmd("SET")
        .arg("new")
        .arg("v")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(xx_absent, None);
    assert!(!c.exists::<_, bool>("new").unwrap());
    let got: Option<String> = cmd("SET")
        .arg("k")
        .arg("v3")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(got.as_deref(), Some("v2"));
    let nx_get: Option<String> = cmd("SET")
        .arg("k")
        .arg("v4")
        .arg("NX")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(nx_get.as_deref(), Some("v3"));
    assert_eq!(c.get::<_, String>("k").unwrap(), "v3");
    // Empty keys and values, binary bytes, a value of 1 MiB.
    let _: () = c.set("", "").unwrap();
    assert_eq!(c.get::<_, Vec<u8>>("").unwrap(), b"");
    let big = vec![0xa5u8; 1 << 20];
    let _: () = c.set(b"\x00bin\xff", &big).unwrap();
    assert_eq!(c.get::<_, Vec<u8>>(b"\x00bin\xff").unwrap(), big);
}

#[test]
fn del_exists_mget_mset_and_dbsize() {
    let server = TestServer::start();
    let mut c = server.client();
    let _: () = c.mset(&[("a", "1"), ("b", "2"), ("c", "3")]).unwrap();
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 3);
    let values: Vec<Option<String>> = c.mget(&["a", "x", "c"]).unwrap();
    assert_eq!(values, [Some("1".into()), None, Some("3".into())]);
    // EXISTS counts a key named twice twice, as Redis does.
    assert_eq!(
        cmd("EXISTS")
            .arg("a")
            .arg("a")
            .arg("x")
            .query::<u64>(&mut c)
            .unwrap(),
        2
    );
    assert_eq!(c.del::<_, u64>(&["a", "x", "b"]).unwrap(), 2);
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 1);
    // MSET of one key twice keeps the last value.
    let _: () = cmd("MSET")
        .arg("d")
        .arg("1")
        .arg("d")
        .arg("2")
        .query(&mut c)
        .unwrap();
    assert_eq!(c.get::<_, String>("d").unwrap(), "2");
}

#[test]
fn incr_family_counts_and_refuses_what_is_not_an_integer() {
    let server = TestServer::start();
    let mut c = server.client();
    assert_eq!(c.incr::<_, _, i64>("n", 1).unwrap(), 1);
    assert_eq!(cmd("INCR").arg("n").query::<i64>(&mut c).unwrap(), 2);
    assert_eq!(
        cmd("INCRBY").arg("n").arg(40).query::<i64>(&mut c).unwrap(),
        42
    );
    assert_eq!(cmd("DECR").arg("n").query::<i64>(&mut c).unwrap(), 41);
    assert_eq!(
        cmd("DECRBY").arg("n").arg(50).query::<i64>(&mut c).unwrap(),
        -9
    );
    assert_eq!(c.get::<_, String>("n").unwrap(), "-9");

    let _: () = c.set("s", "abc").unwrap();
    let error = cmd("INCR").arg("s").query::<i64>(&mut c).unwrap_err();
    assert!(error.to_string().contains("not an integer"), "{error}");
    let error = cmd("INCRBY")
        .arg("n")
        .arg("+1")
        .query::<i64>(&mut c)
        .unwrap_err();
    assert!(error.to_string().contains("not an integer"), "{error}");
    let _: () = c.set("max", i64::MAX).unwrap();
    let error = cmd("INCR").arg("max").query::<i64>(&mut c).unwrap_err();
    assert!(error.to_string().contains("overflow"), "{error}");
    assert_eq!(c.get::<_, i64>("max").unwrap(), i64::MAX);
}

#[test]
fn increments_from_many_connections_are_never_lost() {
    let server = TestServer::start();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let mut c = server.client();
            std::thread::spawn(move || {
                for _ in 0..500 {
                    let _: i64 = c.incr("counter", 1).unwrap();
                    let _: () = c.set("other", "x").unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(server.client().get::<_, i64>("counter").unwrap(), 2000);
}

#[test]
fn scan_walks_keys_in_order_with_prefix_patterns_and_counts() {
    let server = TestServer::start();
    let mut c = server.client();
    let mut expected: Vec<String> = (0..300).map(|i| format!("user:{i:04}")).collect();
    for key in &expected {
        let _: () = c.set(key, "v").unwrap();
    }
    for i in 0..50 {
        let _: () = c.set(format!("order:{i}"), "v").unwrap();
    }
    // One call at a time: each page in order, the cursor 0 at the end.
    let mut cursor = 0u64;
    let mut seen = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("user:*")
            .arg("COUNT")
            .arg(64)
            .query(&mut c)
            .unwrap();
        assert!(keys.len() <= 64);
        seen.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen, expected);
    // The client's own iterator, and a pattern without wildcards.
    let mut all: Vec<String> = c.scan().unwrap().collect();
    assert_eq!(all.len(), 350);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    let exact: Vec<String> = c.scan_match("user:0007").unwrap().collect();
    assert_eq!(exact, ["user:0007"]);
    // TYPE string is every key; another type none.
    let (_, none): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("TYPE")
        .arg("hash")
        .query(&mut c)
        .unwrap();
    assert!(none.is_empty());
    // Keys deleted and added mid-scan: every key present throughout is seen exactly once.
    let (cursor, first): (u64, Vec<String>) = cmd("SCAN")
        .arg(0)
        .arg("MATCH")
        .arg("user:*")
        .arg("COUNT")
        .arg(100)
        .query(&mut c)
        .unwrap();
    let _: () = c.del(&first[..10]).unwrap();
    let _: () = c.set("user:0150x", "v").unwrap();
    let mut rest = Vec::new();
    let mut cursor = cursor;
    while cursor != 0 {
        let (next, keys): (u64, Vec<String>) = cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("user:*")
            .query(&mut c)
            .unwrap();
        rest.extend(keys);
        cursor = next;
    }
    expected.push("user:0150x".into());
    expected.sort();
    all = first.into_iter().chain(rest).collect();
    assert_eq!(all, expected);
}

#[test]
fn scan_refuses_unknown_cursors_and_bad_options() {
    let server = TestServer::start();
    let mut c = server.client();
    for (args, expected) in [
        (vec!["12345"], "invalid cursor"),
        (vec!["x"], "invalid cursor"),
        (vec!["0", "COUNT", "0"], "syntax error"),
        (vec!["0", "COUNT", "01"], "not an integer"),
        (vec!["0", "COUNT"], "syntax error"),
        (vec!["0", "BOGUS", "1"], "syntax error"),
    ] {
        let error = cmd("SCAN").arg(&args).query::<Value>(&mut c).unwrap_err();
        assert!(error.to_string().contains(expected), "{args:?}: {error}");
    }
    // The connection is still usable after each.
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
}

#[test]
fn flushdb_empties_the_keyspace_and_frees_its_space() {
    let server = TestServer::start();
    let mut c = server.client();
    for i in 0..2000 {
        let _: () = c.set(format!("k{i}"), vec![7u8; 500]).unwrap();
    }
    let used = |c: &mut redis::Connection| -> u64 {
        let info: String = cmd("INFO").arg("pool").query(c).unwrap();
        field(&info, "pool_used_bytes").parse().unwrap()
    };
    let full = used(&mut c);
    let (cursor, _): (u64, Vec<String>) = cmd("SCAN").arg(0).query(&mut c).unwrap();
    let _: () = cmd("FLUSHDB").query(&mut c).unwrap();
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 0);
    assert_eq!(c.get::<_, Option<String>>("k1").unwrap(), None);
    assert!(
        used(&mut c) < full / 4,
        "{} of {full} bytes still used",
        used(&mut c)
    );
    // Cursors of the old keyspace are forgotten.
    let error = cmd("SCAN").arg(cursor).query::<Value>(&mut c).unwrap_err();
    assert!(error.to_string().contains("invalid cursor"), "{error}");
    let _: () = c.set("after", "1").unwrap();
    let _: () = cmd("FLUSHALL").arg("ASYNC").query(&mut c).unwrap();
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 0);
}

fn field<'a>(info: &'a str, name: &str) -> &'a str {
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}:")))
        .unwrap_or_else(|| panic!("INFO has no {name}: {info}"))
}

#[test]
fn info_reports_keys_pool_use_and_persists_per_write() {
    let server = TestServer::start();
    let mut c = server.client();
    for i in 0..100 {
        let _: () = c.set(format!("key{i}"), "value").unwrap();
    }
    let info: String = cmd("INFO").query(&mut c).unwrap();
    assert_eq!(field(&info, "db0"), "keys=100,expires=0,avg_ttl=0");
    assert_eq!(field(&info, "keys_written"), "100");
    let fences: f64 = field(&info, "fences_per_write").parse().unwrap();
    let flushes: f64 = field(&info, "flushes_per_write").parse().unwrap();
    assert!((1.0..10.0).contains(&fences), "{fences} fences per write");
    assert!(flushes >= fences, "{flushes} flushes per write");
    assert!(field(&info, "pool_used_bytes").parse::<u64>().unwrap() > 100 * 10);
    assert!(field(&info, "pool_granularity").starts_with("emulated"));
    assert_eq!(field(&info, "connected_clients"), "1");
    let only: String = cmd("INFO").arg("keyspace").query(&mut c).unwrap();
    assert!(
        only.starts_with("# Keyspace") && !only.contains("# Pool"),
        "{only}"
    );
}

#[test]
fn select_config_and_quit() {
    let server = TestServer::start();
    let mut c = server.client();
    let _: () = cmd("SELECT").arg(0).query(&mut c).unwrap();
    let error = cmd("SELECT").arg(1).query::<()>(&mut c).unwrap_err();
    assert!(error.to_string().contains("out of range"), "{error}");
    let none: Vec<String> = cmd("CONFIG").arg("GET").arg("save").query(&mut c).unwrap();
    assert!(none.is_empty());
    let error = cmd("CONFIG")
        .arg("SET")
        .arg("save")
        .arg("")
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(error.to_string().contains("not supported"), "{error}");
    let mut raw = server.raw();
    assert_eq!(
        exchange(&mut raw, b"*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n"),
        "+OK\r\n"
    );
}

#[test]
fn a_pipeline_of_every_kind_of_command_replies_in_order() {
    let server = TestServer::start();
    let mut c = server.client();
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.set(format!("p{i:04}"), i).ignore();
    }
    pipe.get("p0007")
        .incr("p0007", 3)
        .del("p0008")
        .exists("p0008")
        .cmd("DBSIZE")
        .mget(&["p0001", "p0002"]);
    let (seven, ten, deleted, exists, size, pair): (u64, u64, u64, bool, u64, Vec<u64>) =
        pipe.query(&mut c).unwrap();
    assert_eq!((seven, ten, deleted, exists, size), (7, 10, 1, false, 999));
    assert_eq!(pair, [1, 2]);
    // An error inside a pipeline answers that command alone (the client crate stops at the
    // first error, so the raw bytes tell).
    let reply = exchange(
        &mut server.raw(),
        b"*1\r\n$3\r\nGET\r\n*1\r\n$6\r\nNOSUCH\r\n*1\r\n$6\r\nDBSIZE\r\n",
    );
    assert_eq!(
        reply,
        "-ERR wrong number of arguments for 'get' command\r\n\
         -ERR unknown command 'NOSUCH', with args beginning with: \r\n:999\r\n"
    );
    let results: RedisResult<(String, u64)> = redis::pipe().cmd("GET").cmd("DBSIZE").query(&mut c);
    assert!(results
        .unwrap_err()
        .to_string()
        .contains("wrong number of arguments"));
}

#[test]
fn unknown_commands_and_wrong_arity_keep_the_connection() {
    let server = TestServer::start();
    let mut c = server.client();
    for (args, expected) in [
        (
            vec!["NOSUCH", "a"],
            "unknown command 'NOSUCH', with args beginning with: 'a'",
        ),
        (vec!["GET"], "wrong number of arguments for 'get' command"),
        (
            vec!["GET", "a", "b"],
            "wrong number of arguments for 'get' command",
        ),
        (
            vec!["MSET", "a"],
            "wrong number of arguments for 'mset' command",
        ),
        (
            vec!["MSET", "a", "1", "b"],
            "wrong number of arguments for 'mset' command",
        ),
        (vec!["SET", "a", "1", "NX", "XX"], "syntax error"),
        (
            vec!["SET", "a", "1", "EX", "0"],
            "invalid expire time in 'set' command",
        ),
        (vec!["FLUSHDB", "NOW"], "syntax error"),
    ] {
        let error = cmd(args[0])
            .arg(&args[1..])
            .query::<Value>(&mut c)
            .unwrap_err();
        assert!(error.to_string().contains(expected), "{args:?}: {error}");
    }
    assert!(!c.exists::<_, bool>("a").unwrap());
    assert_eq!(cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
}

#[test]
fn keys_and_values_over_the_limits_are_refused_and_nothing_changes() {
    let limits = Limits {
        max_value_bytes: 100 << 10,
        ..Limits::default()
    };
    let server = TestServer::with(64 << 20, limits);
    let mut c = server.client();
    // A key over the store's 64 KiB: an error reply, the connection kept.
    let long_key = vec![b'k'; (64 << 10) + 1];
    let error = c.set::<_, _, ()>(&long_key, "v").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("longer than the 65536-byte limit"),
        "{error}"
    );
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 0);
    // A bulk string over --max-value-bytes: refused from its header, the connection closed
    // (the rest of the request cannot be told from the next one).
    let mut raw = server.raw();
    // Redis's words for a length over the limit.
    let reply = exchange(&mut raw, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$102401\r\n");
    assert_eq!(reply, "-ERR Protocol error: invalid bulk length\r\n");
    let reply = exchange(&mut server.raw(), b"*2000000\r\n");
    assert_eq!(reply, "-ERR Protocol error: invalid multibulk length\r\n");
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 0);
}

#[test]
fn malformed_resp_gets_a_protocol_error_and_the_server_goes_on() {
    let server = TestServer::start();
    for (input, expected) in [
        (
            &b"*1\r\n:12\r\n"[..],
            "-ERR Protocol error: expected '$', got ':'",
        ),
        (b"*x\r\n", "-ERR Protocol error: invalid multibulk length"),
        (
            b"*1\r\n$3\r\nGETXX\r\n",
            "-ERR Protocol error: a bulk string not ended by CRLF",
        ),
        (b"*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length"),
        (
            b"*1\r\n*1\r\n*1\r\n$1\r\na\r\n",
            "-ERR Protocol error: expected '$', got '*'",
        ),
    ] {
        let reply = exchange(&mut server.raw(), input);
        assert!(reply.starts_with(expected), "{input:?}: {reply:?}");
    }
    // Nested arrays deep enough to overflow a recursive decoder.
    let deep = b"*1\r\n".repeat(200_000);
    let reply = exchange(&mut server.raw(), &deep);
    assert!(reply.starts_with("-ERR Protocol error"), "{reply:?}");
    // Inline commands, as telnet sends them, quoted as Redis reads them.
    let reply = exchange(
        &mut server.raw(),
        b"SET inline  yes\r\nGET inline\nSET \"two words\" 'it\\'s'\nGET \"two\\x20words\"\nQUIT\r\n",
    );
    assert_eq!(reply, "+OK\r\n$3\r\nyes\r\n+OK\r\n$4\r\nit's\r\n+OK\r\n");
    assert_eq!(server.client().get::<_, String>("inline").unwrap(), "yes");
    let reply = exchange(&mut server.raw(), b"SET a \"b\r\nGET a\r\n");
    assert_eq!(
        reply,
        "-ERR Protocol error: unbalanced quotes in request\r\n"
    );
    assert!(!server.client().exists::<_, bool>("a").unwrap());
}

#[test]
fn connections_past_the_limit_are_refused_with_a_reply() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = TestServer::with(64 << 20, limits);
    let mut first = server.client();
    let mut second = server.client();
    let reply = exchange(&mut server.raw(), b"PING\r\n");
    assert_eq!(reply, "-ERR max number of clients reached\r\n");
    assert_eq!(cmd("PING").query::<String>(&mut first).unwrap(), "PONG");
    drop(first);
    let _: String = cmd("PING").query(&mut second).unwrap();
    // The slot is free again once the first connection has closed.
    let mut third = None;
    for _ in 0..100 {
        let mut raw = server.raw();
        if exchange(&mut raw, b"PING\r\n") == "+PONG\r\n" {
            third = Some(raw);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(third.is_some(), "a freed connection slot was never reused");
}

#[test]
fn a_full_pool_refuses_writes_and_still_deletes() {
    let server = TestServer::with(8 << 20, Limits::default());
    let mut c = server.client();
    let value = vec![3u8; 4096];
    let mut written = 0u64;
    let error = loop {
        match c.set::<_, _, ()>(format!("fill{written}"), &value) {
            Ok(()) => written += 1,
            Err(error) => break error,
        }
        assert!(written < 10_000, "an 8 MiB pool took 40 MiB");
    };
    assert_eq!(error.code(), Some("OOM"), "{error}");
    assert!(error.to_string().contains("the store is full"), "{error}");
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), written);
    // Every key written before the refusal is intact; deletes and FLUSHDB free space.
    for i in (0..written).step_by(97) {
        assert_eq!(c.get::<_, Vec<u8>>(format!("fill{i}")).unwrap(), value);
    }
    let removed: u64 = c
        .del(
            (0..written / 2)
                .map(|i| format!("fill{i}"))
                .collect::<Vec<_>>(),
        )
        .unwrap();
    assert_eq!(removed, written / 2);
    let _: () = c.set("after", &value).unwrap();
    let _: () = cmd("FLUSHDB").query(&mut c).unwrap();
    let _: () = c.set("after", &value).unwrap();
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 1);
}

#[test]
fn writes_survive_a_restart_and_a_second_server_on_the_pool_is_refused() {
    let mut server = TestServer::start();
    let mut c = server.client();
    let _: () = c.mset(&[("a", "1"), ("b", "2")]).unwrap();
    let _: () = c.del("a").unwrap();
    let second =
        pmem_kv_server::Server::start(common::config(server.pool(), 64 << 20, Limits::default()));
    let error = second.err().expect("a second server on an open pool");
    assert!(
        error.to_string().contains("cannot open the store"),
        "{error}"
    );
    drop(c);
    server.restart();
    let mut c = server.client();
    assert_eq!(c.get::<_, Option<String>>("a").unwrap(), None);
    assert_eq!(c.get::<_, String>("b").unwrap(), "2");
    assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 1);
}
