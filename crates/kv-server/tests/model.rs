//! Random command sequences against a `BTreeMap` model: every reply as Redis would give it.
//! Requests are encoded by the `redis` client crate, fed through the server's framing and
//! commands (offline, on an anonymous store) in random pieces, and the replies parsed by the
//! client crate.

use std::collections::BTreeMap;

use pmem_kv_server::offline::Offline;
use pmem_kv_server::Limits;
use proptest::prelude::*;
use redis::Value;

#[derive(Clone, Debug)]
enum Op {
    Set(usize, Vec<u8>, SetMode),
    Get(usize),
    Del(Vec<usize>),
    Exists(Vec<usize>),
    IncrBy(usize, i64),
    MSet(Vec<(usize, Vec<u8>)>),
    MSetNx(Vec<(usize, Vec<u8>)>),
    MGet(Vec<usize>),
    /// RENAME (false) or RENAMENX (true).
    Rename(usize, usize, bool),
    /// COPY, with REPLACE or not.
    Copy(usize, usize, bool),
    GetSet(usize, Vec<u8>),
    GetDel(usize),
    DbSize,
    /// A full SCAN of a prefix of one of the keys, `COUNT` keys per call.
    Scan(usize, usize, u64),
    FlushDb,
}

#[derive(Clone, Copy, Debug)]
enum SetMode {
    Always,
    IfAbsent,
    IfPresent,
    ReturnOld,
}

/// Keys that share prefixes (so the ordered map grows layers), short and long.
fn keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = ["", "a", "ab", "abc", "b", "user:1", "user:10", "user:2"]
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    for i in 0..8 {
        keys.push(format!("shared-prefix-of-many-bytes:{i}").into_bytes());
    }
    keys.push(vec![0xff; 20]);
    keys.push(b"\x00\x01binary".to_vec());
    keys
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (-1000i64..1000).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..40),
        Just(b"9223372036854775807".to_vec()),
    ]
}

fn op(keys: usize) -> impl Strategy<Value = Op> {
    let key = 0..keys;
    let some_keys = proptest::collection::vec(0..keys, 1..5);
    let mode = prop_oneof![
        Just(SetMode::Always),
        Just(SetMode::IfAbsent),
        Just(SetMode::IfPresent),
        Just(SetMode::ReturnOld)
    ];
    prop_oneof![
        8 => (key.clone(), value(), mode).prop_map(|(k, v, m)| Op::Set(k, v, m)),
        4 => key.clone().prop_map(Op::Get),
        3 => some_keys.clone().prop_map(Op::Del),
        2 => some_keys.clone().prop_map(Op::Exists),
        3 => (key.clone(), -5i64..5).prop_map(|(k, by)| Op::IncrBy(k, by)),
        2 => proptest::collection::vec((0..keys, value()), 1..4).prop_map(Op::MSet),
        2 => proptest::collection::vec((0..keys, value()), 1..4).prop_map(Op::MSetNx),
        2 => (key.clone(), key.clone(), any::<bool>()).prop_map(|(a, b, nx)| Op::Rename(a, b, nx)),
        2 => (key.clone(), key.clone(), any::<bool>()).prop_map(|(a, b, r)| Op::Copy(a, b, r)),
        1 => (key.clone(), value()).prop_map(|(k, v)| Op::GetSet(k, v)),
        1 => key.clone().prop_map(Op::GetDel),
        2 => some_keys.prop_map(Op::MGet),
        1 => Just(Op::DbSize),
        2 => (key, 0usize..12, 1u64..5).prop_map(|(k, len, count)| Op::Scan(k, len, count)),
        1 => Just(Op::FlushDb),
    ]
}

/// A reply in the terms the test compares.
#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Ok,
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    Error(String),
}

fn reply_of(value: Value) -> Reply {
    match value {
        Value::Okay => Reply::Ok,
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply_of).collect()),
        Value::ServerError(error) => Reply::Error(format!("{error:?}")),
        other => panic!("a reply no command gives: {other:?}"),
    }
}

/// Feed `request` in two pieces (cut at `cut` per mille, below 1000) and parse the one reply.
fn roundtrip(server: &mut Offline, request: &[u8], cut: u16) -> Reply {
    let at = request.len() * usize::from(cut) / 1000;
    let (first, closed) = server.feed(&request[..at]);
    assert!(first.is_empty() && !closed, "a reply to part of a request");
    let (bytes, closed) = server.feed(&request[at..]);
    assert!(!closed, "the connection closed on a valid request");
    let mut reader = &bytes[..];
    let value = redis::Parser::new()
        .parse_value(&mut reader)
        .unwrap_or_else(|e| panic!("an unparsable reply {bytes:?}: {e}"));
    assert!(reader.is_empty(), "more than one reply: {bytes:?}");
    reply_of(value)
}

/// `got` is `expected`, or (an expected error) an error whose text contains the expected's.
fn assert_reply(got: Reply, expected: Reply, what: std::fmt::Arguments) {
    match (&got, &expected) {
        (Reply::Error(got_text), Reply::Error(text)) => {
            assert!(got_text.contains(text.as_str()), "{what}: {got:?}")
        }
        _ => assert_eq!(got, expected, "{what}"),
    }
}

fn bulk_or_nil(value: Option<&Vec<u8>>) -> Reply {
    value.map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
}

fn run(ops: Vec<(Op, u16)>) {
    let keys = keys();
    let mut server = Offline::anonymous(32 << 20, Limits::default()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (op, cut) in ops {
        let mut send = |cmd: &redis::Cmd| roundtrip(&mut server, &cmd.get_packed_command(), cut);
        match op {
            Op::Set(k, v, mode) => {
                let key = &keys[k];
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(&v);
                let old = model.get(key).cloned();
                let (write, expected) = match mode {
                    SetMode::Always => (true, Reply::Ok),
                    SetMode::IfAbsent => {
                        cmd.arg("NX");
                        (
                            old.is_none(),
                            if old.is_none() { Reply::Ok } else { Reply::Nil },
                        )
                    }
                    SetMode::IfPresent => {
                        cmd.arg("XX");
                        (
                            old.is_some(),
                            if old.is_some() { Reply::Ok } else { Reply::Nil },
                        )
                    }
                    SetMode::ReturnOld => {
                        cmd.arg("GET");
                        (true, bulk_or_nil(old.as_ref()))
                    }
                };
                assert_eq!(send(&cmd), expected, "SET {key:?} {mode:?}");
                if write {
                    model.insert(key.clone(), v);
                }
            }
            Op::Get(k) => {
                let key = &keys[k];
                let got = send(redis::cmd("GET").arg(key));
                assert_eq!(got, bulk_or_nil(model.get(key)), "GET {key:?}");
            }
            Op::Del(ks) => {
                let names: Vec<&Vec<u8>> = ks.iter().map(|&k| &keys[k]).collect();
                let got = send(redis::cmd("DEL").arg(&names));
                let removed = names.iter().filter(|k| model.remove(**k).is_some()).count();
                assert_eq!(got, Reply::Int(removed as i64), "DEL {names:?}");
            }
            Op::Exists(ks) => {
                let names: Vec<&Vec<u8>> = ks.iter().map(|&k| &keys[k]).collect();
                let present = names.iter().filter(|k| model.contains_key(**k)).count();
                let got = send(redis::cmd("EXISTS").arg(&names));
                assert_eq!(got, Reply::Int(present as i64), "EXISTS {names:?}");
            }
            Op::IncrBy(k, by) => {
                let key = &keys[k];
                let got = send(redis::cmd("INCRBY").arg(key).arg(by));
                let current = match model.get(key) {
                    None => Some(0),
                    Some(text) => std::str::from_utf8(text)
                        .ok()
                        .filter(|t| !t.starts_with('+'))
                        .and_then(|t| t.parse::<i64>().ok()),
                };
                match current.map(|c| c.checked_add(by)) {
                    Some(Some(next)) => {
                        assert_eq!(got, Reply::Int(next), "INCRBY {key:?} {by}");
                        model.insert(key.clone(), next.to_string().into_bytes());
                    }
                    Some(None) => assert!(
                        matches!(&got, Reply::Error(e) if e.contains("overflow")),
                        "{got:?}"
                    ),
                    None => assert!(
                        matches!(&got, Reply::Error(e) if e.contains("not an integer")),
                        "{got:?}"
                    ),
                }
            }
            Op::MSet(pairs) => {
                let mut cmd = redis::cmd("MSET");
                for (k, v) in &pairs {
                    cmd.arg(&keys[*k]).arg(v);
                }
                assert_eq!(send(&cmd), Reply::Ok);
                for (k, v) in pairs {
                    model.insert(keys[k].clone(), v);
                }
            }
            Op::MSetNx(pairs) => {
                let mut cmd = redis::cmd("MSETNX");
                for (k, v) in &pairs {
                    cmd.arg(&keys[*k]).arg(v);
                }
                let none = pairs.iter().all(|(k, _)| !model.contains_key(&keys[*k]));
                assert_eq!(send(&cmd), Reply::Int(i64::from(none)), "MSETNX {pairs:?}");
                if none {
                    for (k, v) in pairs {
                        model.insert(keys[k].clone(), v);
                    }
                }
            }
            Op::Rename(from, to, nx) => {
                let (from, to) = (&keys[from], &keys[to]);
                let got = send(
                    redis::cmd(if nx { "RENAMENX" } else { "RENAME" })
                        .arg(from)
                        .arg(to),
                );
                let expected = match model.get(from).cloned() {
                    None => Reply::Error("no such key".into()),
                    Some(_) if from == to => {
                        if nx {
                            Reply::Int(0)
                        } else {
                            Reply::Ok
                        }
                    }
                    Some(_) if nx && model.contains_key(to) => Reply::Int(0),
                    Some(value) => {
                        model.remove(from);
                        model.insert(to.clone(), value);
                        if nx {
                            Reply::Int(1)
                        } else {
                            Reply::Ok
                        }
                    }
                };
                assert_reply(
                    got,
                    expected,
                    format_args!("RENAME {from:?} {to:?} (NX {nx})"),
                );
            }
            Op::Copy(from, to, replace) => {
                let (from, to) = (&keys[from], &keys[to]);
                let mut cmd = redis::cmd("COPY");
                cmd.arg(from).arg(to);
                if replace {
                    cmd.arg("REPLACE");
                }
                let got = send(&cmd);
                let expected = match model.get(from).cloned() {
                    _ if from == to => {
                        Reply::Error("source and destination objects are the same".into())
                    }
                    Some(value) if replace || !model.contains_key(to) => {
                        model.insert(to.clone(), value);
                        Reply::Int(1)
                    }
                    _ => Reply::Int(0),
                };
                assert_reply(
                    got,
                    expected,
                    format_args!("COPY {from:?} {to:?} (REPLACE {replace})"),
                );
            }
            Op::GetSet(k, v) => {
                let key = &keys[k];
                let got = send(redis::cmd("GETSET").arg(key).arg(&v));
                assert_eq!(got, bulk_or_nil(model.get(key)), "GETSET {key:?}");
                model.insert(key.clone(), v);
            }
            Op::GetDel(k) => {
                let key = &keys[k];
                let got = send(redis::cmd("GETDEL").arg(key));
                assert_eq!(
                    got,
                    bulk_or_nil(model.remove(key).as_ref()),
                    "GETDEL {key:?}"
                );
            }
            Op::MGet(ks) => {
                let names: Vec<&Vec<u8>> = ks.iter().map(|&k| &keys[k]).collect();
                let got = send(redis::cmd("MGET").arg(&names));
                let expected = names.iter().map(|k| bulk_or_nil(model.get(*k))).collect();
                assert_eq!(got, Reply::Array(expected), "MGET {names:?}");
            }
            Op::DbSize => {
                assert_eq!(send(&redis::cmd("DBSIZE")), Reply::Int(model.len() as i64));
            }
            Op::Scan(k, len, count) => {
                let prefix = &keys[k][..len.min(keys[k].len())];
                // A prefix ending in a wildcard byte would be a glob: escape it.
                let mut pattern = Vec::new();
                for &b in prefix {
                    if matches!(b, b'*' | b'?' | b'[' | b'\\') {
                        pattern.push(b'\\');
                    }
                    pattern.push(b);
                }
                pattern.push(b'*');
                let mut cursor = b"0".to_vec();
                let mut seen = Vec::new();
                loop {
                    let got = send(
                        redis::cmd("SCAN")
                            .arg(&cursor)
                            .arg("MATCH")
                            .arg(&pattern)
                            .arg("COUNT")
                            .arg(count),
                    );
                    let Reply::Array(parts) = got else {
                        panic!("SCAN gave {got:?}")
                    };
                    let [Reply::Bulk(next), Reply::Array(page)] = &parts[..] else {
                        panic!("SCAN gave {parts:?}")
                    };
                    assert!(page.len() as u64 <= count);
                    for key in page {
                        let Reply::Bulk(key) = key else {
                            panic!("a key {key:?}")
                        };
                        seen.push(key.clone());
                    }
                    if next == b"0" {
                        break;
                    }
                    cursor = next.clone();
                }
                let expected: Vec<Vec<u8>> = model
                    .keys()
                    .filter(|key| key.starts_with(prefix))
                    .cloned()
                    .collect();
                assert_eq!(seen, expected, "SCAN MATCH {pattern:?}");
            }
            Op::FlushDb => {
                assert_eq!(send(&redis::cmd("FLUSHDB")), Reply::Ok);
                model.clear();
            }
        }
    }
    assert_eq!(server.check().unwrap(), model.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn replies_match_a_btreemap_model(
        ops in proptest::collection::vec((op(keys().len()), 0u16..1000), 1..120)
    ) {
        run(ops);
    }
}

#[test]
fn garbage_after_a_fatal_request_starts_a_fresh_connection() {
    let mut server = Offline::anonymous(16 << 20, Limits::default()).unwrap();
    let (reply, closed) = server.feed(b"*1\r\n:5\r\n*1\r\n$4\r\nPING\r\n");
    assert!(closed);
    assert!(reply.starts_with(b"-ERR Protocol error"));
    let (reply, closed) = server.feed(b"*1\r\n$4\r\nPING\r\n");
    assert_eq!((reply.as_slice(), closed), (&b"+PONG\r\n"[..], false));
}
