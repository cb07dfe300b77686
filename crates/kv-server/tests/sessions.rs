//! A connection's own state, byte for byte on a raw socket and through the `redis` crate:
//! `HELLO` and RESP3, `CLIENT`, `COMMAND`, `INFO`'s monitoring fields, and transactions
//! refused so that nothing between `MULTI` and `EXEC` or `DISCARD` runs.

mod common;

use common::{Raw, TestServer};
use redis::{Commands, Value};

#[test]
fn hello_switches_the_protocol_and_replies_take_its_types() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    // RESP2 first: a null bulk string.
    assert_eq!(raw.call_text(&["GET", "missing"]), "$-1\r\n");
    let hello = raw.call_text(&["HELLO", "3"]);
    assert!(
        hello.starts_with("%7\r\n$6\r\nserver\r\n$14\r\npmem-kv-server\r\n$7\r\nversion\r\n$6\r\n7.0.15\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:"),
        "{hello}"
    );
    assert!(
        hello.ends_with("$4\r\nmode\r\n$10\r\nstandalone\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"),
        "{hello}"
    );
    assert_eq!(raw.call_text(&["GET", "missing"]), "_\r\n");
    assert_eq!(raw.call_text(&["SET", "k", "v"]), "+OK\r\n");
    assert_eq!(raw.call_text(&["SET", "k", "v", "NX"]), "_\r\n");
    assert_eq!(
        raw.call_text(&["MGET", "k", "missing"]),
        "*2\r\n$1\r\nv\r\n_\r\n"
    );
    assert_eq!(raw.call_text(&["CONFIG", "GET", "save"]), "%0\r\n");
    assert_eq!(raw.call_text(&["CLIENT", "GETNAME"]), "_\r\n");
    let info = raw.call_text(&["INFO", "server"]);
    assert!(
        info.starts_with('=') && info.contains("\r\ntxt:# Server\r\n"),
        "{info}"
    );
    let command = raw.call_text(&["COMMAND", "INFO", "get"]);
    assert!(
        command.starts_with(
            "*1\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n~3\r\n"
        ),
        "{command}"
    );
    // Back to RESP2: the map is a flat array again.
    let hello = raw.call_text(&["HELLO", "2"]);
    assert!(hello.starts_with("*14\r\n"), "{hello}");
    assert_eq!(raw.call_text(&["GET", "missing"]), "$-1\r\n");
    assert_eq!(raw.call_text(&["CONFIG", "GET", "save"]), "*0\r\n");
}

#[test]
fn hello_refuses_what_redis_refuses_and_takes_auth_and_setname() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    for (args, expected) in [
        (
            &["HELLO", "4"][..],
            "-NOPROTO unsupported protocol version\r\n",
        ),
        (&["HELLO", "1"], "-NOPROTO unsupported protocol version\r\n"),
        (
            &["HELLO", "03"],
            "-ERR Protocol version is not an integer or out of range\r\n",
        ),
        (
            &["HELLO", "3", "FOO"],
            "-ERR Syntax error in HELLO option 'FOO'\r\n",
        ),
        (
            &["HELLO", "3", "SETNAME"],
            "-ERR Syntax error in HELLO option 'SETNAME'\r\n",
        ),
        (
            &["HELLO", "3", "AUTH", "someone", "pw"],
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
        ),
        (
            &["HELLO", "3", "SETNAME", "a b"],
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
        ),
    ] {
        assert_eq!(raw.call_text(args), expected, "{args:?}");
    }
    // Still RESP2 after every refusal.
    assert_eq!(raw.call_text(&["GET", "x"]), "$-1\r\n");
    let hello = raw.call_text(&[
        "HELLO", "3", "AUTH", "default", "anything", "SETNAME", "worker-1",
    ]);
    assert!(hello.starts_with("%7\r\n"), "{hello}");
    assert_eq!(raw.call_text(&["CLIENT", "GETNAME"]), "$8\r\nworker-1\r\n");
    assert_eq!(raw.call_text(&["AUTH", "default", "x"]), "+OK\r\n");
    assert!(raw.call_text(&["AUTH", "x"]).starts_with(
        "-ERR AUTH <password> called without any password configured for the default user"
    ));
}

#[test]
fn client_ids_names_and_library_info() {
    let server = TestServer::start();
    let mut first = Raw::connect(server.addr());
    let mut second = Raw::connect(server.addr());
    let id = |raw: &mut Raw| -> i64 {
        let reply = raw.call_text(&["CLIENT", "ID"]);
        reply.trim_start_matches(':').trim_end().parse().unwrap()
    };
    let (a, b) = (id(&mut first), id(&mut second));
    assert!(a >= 1 && b > a, "{a} {b}");
    assert_eq!(id(&mut first), a);
    assert_eq!(first.call_text(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(first.call_text(&["CLIENT", "SETNAME", "cache"]), "+OK\r\n");
    assert_eq!(first.call_text(&["CLIENT", "GETNAME"]), "$5\r\ncache\r\n");
    assert_eq!(second.call_text(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(first.call_text(&["CLIENT", "SETNAME", ""]), "+OK\r\n");
    assert_eq!(first.call_text(&["CLIENT", "GETNAME"]), "$-1\r\n");
    assert_eq!(
        first.call_text(&["CLIENT", "SETINFO", "LIB-NAME", "mylib"]),
        "+OK\r\n"
    );
    assert_eq!(
        first.call_text(&["CLIENT", "SETINFO", "lib-ver", "1.2"]),
        "+OK\r\n"
    );
    for (args, expected) in [
        (
            &["CLIENT", "SETNAME", "a\nb"][..],
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n",
        ),
        (
            &["CLIENT", "SETINFO", "lib-name", "a b"],
            "-ERR lib-name cannot contain spaces, newlines or special characters.\r\n",
        ),
        (
            &["CLIENT", "SETINFO", "color", "red"],
            "-ERR Unrecognized option 'color'\r\n",
        ),
        (
            &["CLIENT", "NOPE"],
            "-ERR unknown subcommand 'NOPE'. Try CLIENT HELP.\r\n",
        ),
        (
            &["client", "setname"],
            "-ERR wrong number of arguments for 'client|setname' command\r\n",
        ),
        (
            &["CLIENT"],
            "-ERR wrong number of arguments for 'client' command\r\n",
        ),
    ] {
        assert_eq!(first.call_text(args), expected, "{args:?}");
    }
    let info = first.call_text(&["CLIENT", "INFO"]);
    assert!(
        info.contains(&format!("id={a} ")) && info.contains(" lib-name=mylib lib-ver=1.2"),
        "{info}"
    );
    let help = first.call_text(&["CLIENT", "HELP"]);
    assert!(help.contains("+SETNAME\r\n"), "{help}");

    // The redis crate over RESP3 names its library on connect, and every command works.
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    let mut c = client.get_connection().unwrap();
    let info: String = redis::cmd("CLIENT").arg("INFO").query(&mut c).unwrap();
    assert!(
        info.contains(" resp=3 ") && info.contains("lib-name=redis-rs"),
        "{info}"
    );
    let _: () = c.set("r3", "v").unwrap();
    let values: Vec<Option<String>> = c.mget(&["r3", "nope"]).unwrap();
    assert_eq!(values, [Some("v".to_string()), None]);
    assert_eq!(c.get::<_, Option<String>>("nope").unwrap(), None);
    let (cursor, keys): (u64, Vec<String>) = redis::cmd("SCAN").arg(0).query(&mut c).unwrap();
    assert_eq!((cursor, keys), (0, vec!["r3".to_string()]));
    let hello: Value = redis::cmd("HELLO").query(&mut c).unwrap();
    assert!(matches!(hello, Value::Map(_)), "{hello:?}");
}

#[test]
fn command_describes_the_command_table() {
    let server = TestServer::start();
    let mut c = server.client();
    let count: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    let all: Vec<Value> = redis::cmd("COMMAND").query(&mut c).unwrap();
    assert_eq!(all.len() as i64, count);
    assert!(count >= 40, "{count} commands");
    let list: Vec<String> = redis::cmd("COMMAND").arg("LIST").query(&mut c).unwrap();
    assert_eq!(list.len() as i64, count);
    assert!(list.iter().all(|name| !name.contains('|')));
    let incrs: Vec<String> = redis::cmd("COMMAND")
        .arg(&["LIST", "FILTERBY", "PATTERN", "incr*"])
        .query(&mut c)
        .unwrap();
    assert_eq!(incrs, ["incr", "incrby", "incrbyfloat"]);
    let strings: Vec<String> = redis::cmd("COMMAND")
        .arg(&["LIST", "FILTERBY", "ACLCAT", "string"])
        .query(&mut c)
        .unwrap();
    assert!(strings.contains(&"append".to_string()) && !strings.contains(&"del".to_string()));
    // COMMAND INFO: MSET's keys are every second argument from the first.
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg(&["INFO", "mset", "nosuch", "client|setname"])
        .query(&mut c)
        .unwrap();
    let Value::Array(mset) = &info[0] else {
        panic!("{info:?}")
    };
    assert_eq!(mset[0], Value::BulkString(b"mset".to_vec()));
    assert_eq!(&mset[3..6], &[Value::Int(1), Value::Int(-1), Value::Int(2)]);
    assert_eq!(info[1], Value::Nil);
    assert!(matches!(&info[2], Value::Array(sub) if sub[1] == Value::Int(3)));
    let docs: Value = redis::cmd("COMMAND")
        .arg(&["DOCS", "incrbyfloat", "client"])
        .query(&mut c)
        .unwrap();
    let text = format!("{docs:?}");
    assert!(text.contains("Increments the floating point value") && text.contains("2.6.0"));
    assert!(text.contains("client|setname"), "{text}");
    let error = redis::cmd("COMMAND")
        .arg("NOPE")
        .query::<Value>(&mut c)
        .unwrap_err();
    assert!(error
        .to_string()
        .contains("unknown subcommand 'NOPE'. Try COMMAND HELP."));
}

#[test]
fn info_has_the_fields_monitoring_tools_read() {
    let server = TestServer::start();
    let mut c = server.client();
    for i in 0..50 {
        let _: () = c.set(format!("k{i}"), "v").unwrap();
    }
    let _: Option<String> = c.get("k1").unwrap();
    let _ = redis::cmd("GET").query::<Value>(&mut c);
    let _ = redis::cmd("INCR").arg("k1").query::<Value>(&mut c);
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    let field = |name: &str| -> String {
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("INFO has no {name}: {info}"))
            .to_string()
    };
    assert_eq!(field("redis_version"), "7.0.15");
    assert!(field("used_memory").parse::<u64>().unwrap() > 50 * 2);
    assert!(field("used_memory_rss").parse::<u64>().unwrap() > 0);
    assert!(field("used_memory_human").ends_with(['B', 'K', 'M', 'G']));
    let cpu: f64 = field("used_cpu_user").parse::<f64>().unwrap()
        + field("used_cpu_sys").parse::<f64>().unwrap();
    assert!(cpu > 0.0, "{cpu}");
    assert_eq!(field("connected_clients"), "1");
    assert_eq!(field("blocked_clients"), "0");
    assert!(field("total_connections_received").parse::<u64>().unwrap() >= 1);
    // 50 SETs, a GET, a wrong-arity GET, a failing INCR, this INFO (and the client's own).
    assert!(field("total_commands_processed").parse::<u64>().unwrap() >= 54);
    assert!(field("total_error_replies").parse::<u64>().unwrap() >= 2);
    assert_eq!(field("db0"), "keys=50,expires=0,avg_ttl=0");
    assert!(
        !info.contains("cmdstat_"),
        "commandstats is not a default section"
    );
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let line = |name: &str| {
        stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {stats}"))
            .to_string()
    };
    assert!(
        line("set").starts_with("cmdstat_set:calls=50,usec="),
        "{stats}"
    );
    assert!(line("set").ends_with(",rejected_calls=0,failed_calls=0"));
    assert!(
        line("get").contains("calls=1,")
            && line("get").ends_with("rejected_calls=1,failed_calls=0")
    );
    assert!(line("incr").ends_with("rejected_calls=0,failed_calls=1"));
    let all: String = redis::cmd("INFO").arg("all").query(&mut c).unwrap();
    assert!(all.contains("# Commandstats") && all.contains("# CPU") && all.contains("# Pool"));
}

#[test]
fn multi_is_refused_and_nothing_up_to_exec_or_discard_runs() {
    let server = TestServer::start();
    let mut raw = Raw::connect(server.addr());
    // A transaction sent in one go, as clients pipeline it.
    raw.send_bytes(b"MULTI\r\nSET a 1\r\nINCR n\r\nPING\r\nEXEC\r\nGET a\r\n");
    let multi = raw.reply_text();
    assert!(
        multi.starts_with("-ERR MULTI is not supported yet"),
        "{multi}"
    );
    for _ in 0..3 {
        let queued = raw.reply_text();
        assert!(
            queued.starts_with("-ERR not run: this connection is inside a MULTI"),
            "{queued}"
        );
    }
    assert_eq!(
        raw.reply_text(),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(raw.reply_text(), "$-1\r\n");
    // By hand: MULTI, a write, DISCARD.
    assert!(raw.call_text(&["MULTI"]).starts_with("-ERR MULTI"));
    assert_eq!(
        raw.call_text(&["MULTI"]),
        "-ERR MULTI calls can not be nested\r\n"
    );
    assert_eq!(
        raw.call_text(&["WATCH", "a"]),
        "-ERR WATCH inside MULTI is not allowed\r\n"
    );
    assert!(raw
        .call_text(&["SET", "a", "1"])
        .starts_with("-ERR not run"));
    assert_eq!(raw.call_text(&["DISCARD"]), "+OK\r\n");
    assert_eq!(raw.call_text(&["EXISTS", "a", "n"]), ":0\r\n");
    assert_eq!(raw.call_text(&["EXEC"]), "-ERR EXEC without MULTI\r\n");
    assert_eq!(
        raw.call_text(&["DISCARD"]),
        "-ERR DISCARD without MULTI\r\n"
    );
    assert!(raw
        .call_text(&["WATCH", "a"])
        .starts_with("-ERR WATCH is not supported yet"));
    assert_eq!(raw.call_text(&["UNWATCH"]), "+OK\r\n");
    // RESET also leaves a refused MULTI.
    assert!(raw.call_text(&["MULTI"]).starts_with("-ERR MULTI"));
    assert_eq!(raw.call_text(&["RESET"]), "+RESET\r\n");
    assert_eq!(raw.call_text(&["SET", "a", "1"]), "+OK\r\n");

    // The redis crate's atomic pipeline fails and applies nothing.
    let mut c = server.client();
    let result: redis::RedisResult<(String, i64)> = redis::pipe()
        .atomic()
        .set("b", "1")
        .incr("m", 1)
        .query(&mut c);
    assert!(result.is_err(), "{result:?}");
    assert_eq!(c.exists::<_, i64>(&["b", "m"]).unwrap(), 0);
    assert_eq!(c.get::<_, String>("a").unwrap(), "1");
}
