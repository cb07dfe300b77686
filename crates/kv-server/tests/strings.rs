//! The string commands beyond GET and SET, through the `redis` client crate: SETNX, APPEND,
//! STRLEN, SETRANGE, GETRANGE/SUBSTR, INCRBYFLOAT, integers read as Redis reads them, and
//! the read-modify-writes staying whole under concurrent clients and across a restart.

mod common;

use common::TestServer;
use pmem_kv_server::Limits;
use redis::{Commands, Value};

fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

fn error_of(c: &mut redis::Connection, args: &[&str]) -> String {
    cmd(args[0])
        .arg(&args[1..])
        .query::<Value>(c)
        .unwrap_err()
        .to_string()
}

#[test]
fn setnx_append_strlen_setrange_and_getrange() {
    let server = TestServer::start();
    let mut c = server.client();
    assert_eq!(
        cmd("SETNX").arg("k").arg("a").query::<i64>(&mut c).unwrap(),
        1
    );
    assert_eq!(
        cmd("SETNX").arg("k").arg("b").query::<i64>(&mut c).unwrap(),
        0
    );
    assert_eq!(c.get::<_, String>("k").unwrap(), "a");

    assert_eq!(c.append::<_, _, i64>("k", "bc").unwrap(), 3);
    assert_eq!(c.append::<_, _, i64>("new", "xyz").unwrap(), 3);
    assert_eq!(c.strlen::<_, i64>("k").unwrap(), 3);
    assert_eq!(c.strlen::<_, i64>("nothing").unwrap(), 0);

    // SETRANGE pads with zero bytes; an empty patch writes nothing, not even a new key.
    assert_eq!(c.setrange::<_, _, i64>("k", 5, "Z").unwrap(), 6);
    assert_eq!(c.get::<_, Vec<u8>>("k").unwrap(), b"abc\0\0Z");
    assert_eq!(c.setrange::<_, _, i64>("k", 1, "BC").unwrap(), 6);
    assert_eq!(c.get::<_, Vec<u8>>("k").unwrap(), b"aBC\0\0Z");
    assert_eq!(c.setrange::<_, _, i64>("pad", 2, "x").unwrap(), 3);
    assert_eq!(c.get::<_, Vec<u8>>("pad").unwrap(), b"\0\0x");
    assert_eq!(c.setrange::<_, _, i64>("absent", 10, "").unwrap(), 0);
    assert!(!c.exists::<_, bool>("absent").unwrap());
    assert_eq!(c.setrange::<_, _, i64>("k", 100, "").unwrap(), 6);

    let _: () = c.set("s", "Hello World").unwrap();
    for (start, end, expected) in [
        (0, 4, "Hello"),
        (-5, -1, "World"),
        (6, 1000, "World"),
        (-1, -5, ""),
        (20, 30, ""),
    ] {
        assert_eq!(c.getrange::<_, String>("s", start, end).unwrap(), expected);
        let substr: String = cmd("SUBSTR")
            .arg("s")
            .arg(start)
            .arg(end)
            .query(&mut c)
            .unwrap();
        assert_eq!(substr, expected);
    }
    assert_eq!(c.getrange::<_, String>("none", 0, -1).unwrap(), "");

    for (args, expected) in [
        (&["SETRANGE", "k", "-1", "x"][..], "offset is out of range"),
        (&["SETRANGE", "k", "01", "x"], "not an integer"),
        (&["GETRANGE", "s", "0", "x"], "not an integer"),
        (
            &["SETNX", "k"],
            "wrong number of arguments for 'setnx' command",
        ),
        (
            &["APPEND", "k"],
            "wrong number of arguments for 'append' command",
        ),
        (
            &["SUBSTR", "s", "0"],
            "wrong number of arguments for 'substr' command",
        ),
    ] {
        let error = error_of(&mut c, args);
        assert!(error.contains(expected), "{args:?}: {error}");
    }
}

#[test]
fn strings_past_the_value_limit_are_refused_and_left_as_they_were() {
    let limits = Limits {
        max_value_bytes: 1000,
        ..Limits::default()
    };
    let server = TestServer::with(64 << 20, limits);
    let mut c = server.client();
    let _: () = c.set("k", vec![b'a'; 900]).unwrap();
    let exceeds = "string exceeds maximum allowed size (proto-max-bulk-len)";
    let error = c.append::<_, _, i64>("k", vec![b'b'; 101]).unwrap_err();
    assert!(error.to_string().contains(exceeds), "{error}");
    let error = c.setrange::<_, _, i64>("k", 1000, "x").unwrap_err();
    assert!(error.to_string().contains(exceeds), "{error}");
    let error = c
        .setrange::<_, _, i64>("fresh", 999_999_999, "x")
        .unwrap_err();
    assert!(error.to_string().contains(exceeds), "{error}");
    assert_eq!(c.strlen::<_, i64>("k").unwrap(), 900);
    assert!(!c.exists::<_, bool>("fresh").unwrap());
    assert_eq!(c.append::<_, _, i64>("k", vec![b'b'; 100]).unwrap(), 1000);
}

#[test]
fn incrbyfloat_computes_in_long_double_as_redis_does() {
    let server = TestServer::start();
    let mut c = server.client();
    let by = |c: &mut redis::Connection, key: &str, by: &str| -> redis::RedisResult<String> {
        cmd("INCRBYFLOAT").arg(key).arg(by).query(c)
    };
    let _: () = c.set("f", "10.5").unwrap();
    assert_eq!(by(&mut c, "f", "0.1").unwrap(), "10.6");
    assert_eq!(c.get::<_, String>("f").unwrap(), "10.6");
    assert_eq!(by(&mut c, "g", "5.0e3").unwrap(), "5000");
    assert_eq!(by(&mut c, "g", "-5000").unwrap(), "0");
    assert_eq!(by(&mut c, "h", "0x10").unwrap(), "16");
    for (key, increment, expected) in [
        ("f", "abc", "value is not a valid float"),
        ("f", " 1", "value is not a valid float"),
        ("f", "nan", "value is not a valid float"),
        ("f", "1e5000", "value is not a valid float"),
        ("f", "inf", "increment would produce NaN or Infinity"),
    ] {
        let error = by(&mut c, key, increment).unwrap_err().to_string();
        assert!(error.contains(expected), "{increment}: {error}");
    }
    let _: () = c.set("text", "x1").unwrap();
    let error = by(&mut c, "text", "1").unwrap_err().to_string();
    assert!(error.contains("not a valid float"), "{error}");
    assert_eq!(c.get::<_, String>("f").unwrap(), "10.6");
}

#[test]
fn integers_are_read_as_redis_reads_them() {
    let server = TestServer::start();
    let mut c = server.client();
    let _: () = c.set("k", "007").unwrap();
    assert!(error_of(&mut c, &["INCR", "k"]).contains("not an integer"));
    let _: () = c.set("k", "7").unwrap();
    for by in ["01", "-0", "+1", " 1", "1 ", "9223372036854775808"] {
        let error = error_of(&mut c, &["INCRBY", "k", by]);
        assert!(error.contains("not an integer"), "{by}: {error}");
    }
    for index in ["00", "-0", "+0"] {
        let error = error_of(&mut c, &["SELECT", index]);
        assert!(error.contains("not an integer"), "{index}: {error}");
    }
    let error = error_of(&mut c, &["DECRBY", "k", "-9223372036854775808"]);
    assert!(error.contains("decrement would overflow"), "{error}");
    let _: () = c.set("k", "1").unwrap();
    let error = error_of(&mut c, &["DECRBY", "k", "-9223372036854775807"]);
    assert!(
        error.contains("increment or decrement would overflow"),
        "{error}"
    );
    let _: () = c.set("k", "7").unwrap();
    assert_eq!(c.get::<_, i64>("k").unwrap(), 7);
}

/// Read-modify-writes of one key from many connections at once: none is lost or torn.
#[test]
fn read_modify_writes_from_many_connections_never_lose_an_update() {
    let server = TestServer::start();
    const WORKERS: usize = 4;
    const ROUNDS: usize = 300;
    let workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let mut c = server.client();
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let _: i64 = c.append("log", format!("{worker}")).unwrap();
                    let _: String = cmd("INCRBYFLOAT")
                        .arg("float")
                        .arg("0.5")
                        .query(&mut c)
                        .unwrap();
                    let _: i64 = c.setrange("slots", worker as isize, "x").unwrap();
                    let claimed: i64 = cmd("SETNX")
                        .arg(format!("once:{round}"))
                        .arg(worker)
                        .query(&mut c)
                        .unwrap();
                    let _: i64 = c.incr(format!("claims:{round}"), claimed).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let mut c = server.client();
    let log: String = c.get("log").unwrap();
    assert_eq!(log.len(), WORKERS * ROUNDS);
    for worker in 0..WORKERS {
        let mine = log
            .chars()
            .filter(|&ch| ch == char::from(b'0' + worker as u8))
            .count();
        assert_eq!(mine, ROUNDS);
    }
    assert_eq!(
        c.get::<_, String>("float").unwrap(),
        format!("{}", WORKERS * ROUNDS / 2)
    );
    assert_eq!(c.get::<_, String>("slots").unwrap(), "x".repeat(WORKERS));
    for round in 0..ROUNDS {
        assert_eq!(
            c.get::<_, i64>(format!("claims:{round}")).unwrap(),
            1,
            "round {round}"
        );
    }
}

#[test]
fn read_modify_writes_are_durable_across_a_restart() {
    let mut server = TestServer::start();
    let mut c = server.client();
    let _: i64 = c.append("a", "hello").unwrap();
    let _: i64 = c.setrange("a", 5, " world").unwrap();
    let _: String = cmd("INCRBYFLOAT")
        .arg("f")
        .arg("2.25")
        .query(&mut c)
        .unwrap();
    let _: i64 = cmd("SETNX").arg("n").arg("first").query(&mut c).unwrap();
    drop(c);
    server.restart();
    let mut c = server.client();
    assert_eq!(c.get::<_, String>("a").unwrap(), "hello world");
    assert_eq!(c.get::<_, String>("f").unwrap(), "2.25");
    assert_eq!(c.get::<_, String>("n").unwrap(), "first");
}
