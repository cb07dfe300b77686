//! Random sequences of hash and keyspace commands against a model of strings and hashes
//! (`BTreeMap`s): every reply as Redis would give it (fields in field order, which is the
//! server's), WRONGTYPE wherever a string meets a hash command or a hash a string one, and
//! hashes large enough (up to 300 fields) that HSCAN pages through them and COPY and the
//! reclaiming of deleted hashes take several steps. After each sequence the maps must agree
//! (every hash's count is its fields', every field entry a live or deleted hash's), and once
//! reclaiming has run, the field entries must be exactly the live hashes' fields.

use std::collections::BTreeMap;

use pmem_kv_server::offline::Offline;
use pmem_kv_server::Limits;
use proptest::prelude::*;
use redis::Value;

/// WRONGTYPE's text (the client crate shows the code by its own name).
const WRONGTYPE: &str = "Operation against a key holding the wrong kind of value";

#[derive(Clone, Debug)]
enum Op {
    HSet(usize, Vec<(u8, Vec<u8>)>),
    /// HSET of fields `f0`..`fN` at once.
    HSetMany(usize, u16),
    HDel(usize, Vec<u8>),
    HGet(usize, u8),
    HMGet(usize, Vec<u8>),
    HGetAll(usize),
    HKeys(usize),
    HVals(usize),
    HLen(usize),
    HExists(usize, u8),
    HStrLen(usize, u8),
    HIncrBy(usize, u8, i64),
    /// A whole HSCAN, `COUNT` fields per call.
    HScan(usize, u64),
    Set(usize, Vec<u8>),
    Get(usize),
    Del(usize),
    Type(usize),
    /// RENAME (false) or RENAMENX (true).
    Rename(usize, usize, bool),
    /// COPY, with REPLACE or not.
    Copy(usize, usize, bool),
    DbSize,
    Reclaim,
    FlushDb,
}

#[derive(Clone, Debug, PartialEq)]
enum Val {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
}

const KEYS: usize = 6;

fn key(k: usize) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

fn field(f: u8) -> Vec<u8> {
    format!("f{f}").into_bytes()
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (-1000i64..1000).prop_map(|n| n.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..20),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..KEYS;
    let f = 0u8..40;
    prop_oneof![
        8 => (k.clone(), proptest::collection::vec((f.clone(), value()), 1..5)).prop_map(|(k, p)| Op::HSet(k, p)),
        1 => (k.clone(), 1u16..300).prop_map(|(k, n)| Op::HSetMany(k, n)),
        4 => (k.clone(), proptest::collection::vec(f.clone(), 1..5)).prop_map(|(k, fs)| Op::HDel(k, fs)),
        4 => (k.clone(), f.clone()).prop_map(|(k, f)| Op::HGet(k, f)),
        2 => (k.clone(), proptest::collection::vec(f.clone(), 1..5)).prop_map(|(k, fs)| Op::HMGet(k, fs)),
        2 => k.clone().prop_map(Op::HGetAll),
        1 => k.clone().prop_map(Op::HKeys),
        1 => k.clone().prop_map(Op::HVals),
        2 => k.clone().prop_map(Op::HLen),
        2 => (k.clone(), f.clone()).prop_map(|(k, f)| Op::HExists(k, f)),
        1 => (k.clone(), f.clone()).prop_map(|(k, f)| Op::HStrLen(k, f)),
        3 => (k.clone(), f, -5i64..5).prop_map(|(k, f, by)| Op::HIncrBy(k, f, by)),
        2 => (k.clone(), 1u64..50).prop_map(|(k, count)| Op::HScan(k, count)),
        3 => (k.clone(), value()).prop_map(|(k, v)| Op::Set(k, v)),
        2 => k.clone().prop_map(Op::Get),
        2 => k.clone().prop_map(Op::Del),
        2 => k.clone().prop_map(Op::Type),
        2 => (k.clone(), k.clone(), any::<bool>()).prop_map(|(a, b, nx)| Op::Rename(a, b, nx)),
        2 => (k.clone(), k, any::<bool>()).prop_map(|(a, b, r)| Op::Copy(a, b, r)),
        1 => Just(Op::DbSize),
        1 => Just(Op::Reclaim),
        1 => Just(Op::FlushDb),
    ]
}

/// A reply in the terms the test compares.
#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Ok,
    Status(String),
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    Error(String),
}

fn reply_of(value: Value) -> Reply {
    match value {
        Value::Okay => Reply::Ok,
        Value::SimpleString(text) => Reply::Status(text),
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(bytes) => Reply::Bulk(bytes),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply_of).collect()),
        Value::ServerError(error) => Reply::Error(format!("{error:?}")),
        other => panic!("a reply no command gives: {other:?}"),
    }
}

fn send(server: &mut Offline, cmd: &redis::Cmd) -> Reply {
    let (bytes, closed) = server.feed(&cmd.get_packed_command());
    assert!(!closed, "the connection closed on a valid request");
    let mut reader = &bytes[..];
    let value = redis::Parser::new()
        .parse_value(&mut reader)
        .unwrap_or_else(|e| panic!("an unparsable reply {bytes:?}: {e}"));
    assert!(reader.is_empty(), "more than one reply: {bytes:?}");
    reply_of(value)
}

fn bulks<'a>(items: impl Iterator<Item = &'a Vec<u8>>) -> Reply {
    Reply::Array(items.map(|item| Reply::Bulk(item.clone())).collect())
}

/// The reply a hash command gets from the model: WRONGTYPE for a string, else `reply` of the
/// hash's fields (empty for an absent key).
fn on_hash(
    model: &BTreeMap<Vec<u8>, Val>,
    key: &[u8],
    reply: impl FnOnce(&BTreeMap<Vec<u8>, Vec<u8>>) -> Reply,
) -> Reply {
    match model.get(key) {
        Some(Val::Str(_)) => Reply::Error(WRONGTYPE.into()),
        Some(Val::Hash(fields)) => reply(fields),
        None => reply(&BTreeMap::new()),
    }
}

fn assert_reply(got: Reply, expected: Reply, what: &dyn std::fmt::Debug) {
    match (&got, &expected) {
        (Reply::Error(got_text), Reply::Error(text)) => {
            assert!(got_text.contains(text.as_str()), "{what:?}: {got:?}")
        }
        _ => assert_eq!(got, expected, "{what:?}"),
    }
}

/// A canonical decimal integer, as Redis's string2ll reads one.
fn integer(text: &[u8]) -> Option<i64> {
    let n: i64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    (n.to_string().as_bytes() == text).then_some(n)
}

fn live_fields(model: &BTreeMap<Vec<u8>, Val>) -> u64 {
    model
        .values()
        .map(|value| match value {
            Val::Hash(fields) => fields.len() as u64,
            Val::Str(_) => 0,
        })
        .sum()
}

fn run(ops: Vec<Op>) {
    let mut server = Offline::anonymous(64 << 20, Limits::default()).unwrap();
    let mut model: BTreeMap<Vec<u8>, Val> = BTreeMap::new();
    for op in ops {
        let expected = apply(&mut server, &mut model, &op);
        if let Some((got, expected)) = expected {
            assert_reply(got, expected, &op);
        }
    }
    server.check_deadlines().unwrap();
    assert_eq!(server.check().unwrap(), model.len() as u64);
    server.reclaim().unwrap();
    assert_eq!(server.field_entries(), live_fields(&model));
    server.check_deadlines().unwrap();
}

/// Run `op` on the server and the model: the server's reply and the model's, to compare.
fn apply(
    server: &mut Offline,
    model: &mut BTreeMap<Vec<u8>, Val>,
    op: &Op,
) -> Option<(Reply, Reply)> {
    let mut send = |cmd: &mut redis::Cmd| send(server, cmd);
    let is_hash =
        |model: &BTreeMap<Vec<u8>, Val>, k: &[u8]| matches!(model.get(k), Some(Val::Hash(_)));
    Some(match op {
        Op::HSet(k, pairs) => {
            let key = key(*k);
            let mut cmd = redis::cmd("HSET");
            cmd.arg(&key);
            for (f, v) in pairs {
                cmd.arg(field(*f)).arg(v);
            }
            let got = send(&mut cmd);
            let expected = hset(
                model,
                &key,
                pairs.iter().map(|(f, v)| (field(*f), v.clone())),
            );
            (got, expected)
        }
        Op::HSetMany(k, n) => {
            let key = key(*k);
            let mut cmd = redis::cmd("HSET");
            cmd.arg(&key);
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..*n)
                .map(|i| (format!("f{i}").into_bytes(), format!("v{i}").into_bytes()))
                .collect();
            for (f, v) in &pairs {
                cmd.arg(f).arg(v);
            }
            let got = send(&mut cmd);
            (got, hset(model, &key, pairs.into_iter()))
        }
        Op::HDel(k, fields) => {
            let key = key(*k);
            let mut cmd = redis::cmd("HDEL");
            cmd.arg(&key);
            for f in fields {
                cmd.arg(field(*f));
            }
            let got = send(&mut cmd);
            let expected = match model.get_mut(&key) {
                Some(Val::Str(_)) => Reply::Error(WRONGTYPE.into()),
                Some(Val::Hash(hash)) => {
                    let removed = fields
                        .iter()
                        .filter(|f| hash.remove(&field(**f)).is_some())
                        .count();
                    if hash.is_empty() {
                        model.remove(&key);
                    }
                    Reply::Int(removed as i64)
                }
                None => Reply::Int(0),
            };
            (got, expected)
        }
        Op::HGet(k, f) => {
            let key = key(*k);
            let got = send(redis::cmd("HGET").arg(&key).arg(field(*f)));
            (
                got,
                on_hash(model, &key, |h| {
                    h.get(&field(*f))
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                }),
            )
        }
        Op::HMGet(k, fields) => {
            let key = key(*k);
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&key);
            for f in fields {
                cmd.arg(field(*f));
            }
            let got = send(&mut cmd);
            let expected = on_hash(model, &key, |h| {
                Reply::Array(
                    fields
                        .iter()
                        .map(|f| {
                            h.get(&field(*f))
                                .map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
                        })
                        .collect(),
                )
            });
            (got, expected)
        }
        Op::HGetAll(k) => {
            let key = key(*k);
            let got = send(redis::cmd("HGETALL").arg(&key));
            (
                got,
                on_hash(model, &key, |h| bulks(h.iter().flat_map(|(f, v)| [f, v]))),
            )
        }
        Op::HKeys(k) => {
            let key = key(*k);
            let got = send(redis::cmd("HKEYS").arg(&key));
            (got, on_hash(model, &key, |h| bulks(h.keys())))
        }
        Op::HVals(k) => {
            let key = key(*k);
            let got = send(redis::cmd("HVALS").arg(&key));
            (got, on_hash(model, &key, |h| bulks(h.values())))
        }
        Op::HLen(k) => {
            let key = key(*k);
            let got = send(redis::cmd("HLEN").arg(&key));
            (got, on_hash(model, &key, |h| Reply::Int(h.len() as i64)))
        }
        Op::HExists(k, f) => {
            let key = key(*k);
            let got = send(redis::cmd("HEXISTS").arg(&key).arg(field(*f)));
            (
                got,
                on_hash(model, &key, |h| {
                    Reply::Int(i64::from(h.contains_key(&field(*f))))
                }),
            )
        }
        Op::HStrLen(k, f) => {
            let key = key(*k);
            let got = send(redis::cmd("HSTRLEN").arg(&key).arg(field(*f)));
            (
                got,
                on_hash(model, &key, |h| {
                    Reply::Int(h.get(&field(*f)).map_or(0, |v| v.len() as i64))
                }),
            )
        }
        Op::HIncrBy(k, f, by) => {
            let key = key(*k);
            let got = send(redis::cmd("HINCRBY").arg(&key).arg(field(*f)).arg(by));
            let current = match model.get(&key) {
                Some(Val::Str(_)) => return Some((got, Reply::Error(WRONGTYPE.into()))),
                Some(Val::Hash(h)) => h.get(&field(*f)).cloned(),
                None => None,
            };
            let expected = match current.map(|v| integer(&v)) {
                Some(None) => Reply::Error("hash value is not an integer".into()),
                current => {
                    let next = current.flatten().unwrap_or(0) + by;
                    hset(
                        model,
                        &key,
                        std::iter::once((field(*f), next.to_string().into_bytes())),
                    );
                    Reply::Int(next)
                }
            };
            (got, expected)
        }
        Op::HScan(k, count) => {
            let key = key(*k);
            let mut cursor = b"0".to_vec();
            let mut seen = Vec::new();
            loop {
                let got = send(
                    redis::cmd("HSCAN")
                        .arg(&key)
                        .arg(&cursor)
                        .arg("COUNT")
                        .arg(count),
                );
                if is_hash(model, &key) || !model.contains_key(&key) {
                    let Reply::Array(parts) = got else {
                        panic!("HSCAN gave {got:?}")
                    };
                    let [Reply::Bulk(next), Reply::Array(page)] = &parts[..] else {
                        panic!("HSCAN gave {parts:?}")
                    };
                    assert!(page.len() as u64 <= 2 * count, "{op:?}");
                    seen.extend(page.iter().cloned());
                    if next == b"0" {
                        break;
                    }
                    cursor = next.clone();
                } else {
                    return Some((got, Reply::Error(WRONGTYPE.into())));
                }
            }
            (
                Reply::Array(seen),
                on_hash(model, &key, |h| bulks(h.iter().flat_map(|(f, v)| [f, v]))),
            )
        }
        Op::Set(k, v) => {
            let key = key(*k);
            let got = send(redis::cmd("SET").arg(&key).arg(v));
            model.insert(key, Val::Str(v.clone()));
            (got, Reply::Ok)
        }
        Op::Get(k) => {
            let key = key(*k);
            let got = send(redis::cmd("GET").arg(&key));
            let expected = match model.get(&key) {
                Some(Val::Str(v)) => Reply::Bulk(v.clone()),
                Some(Val::Hash(_)) => Reply::Error(WRONGTYPE.into()),
                None => Reply::Nil,
            };
            (got, expected)
        }
        Op::Del(k) => {
            let key = key(*k);
            let got = send(redis::cmd("DEL").arg(&key));
            (got, Reply::Int(i64::from(model.remove(&key).is_some())))
        }
        Op::Type(k) => {
            let key = key(*k);
            let got = send(redis::cmd("TYPE").arg(&key));
            let name = match model.get(&key) {
                Some(Val::Str(_)) => "string",
                Some(Val::Hash(_)) => "hash",
                None => "none",
            };
            (got, Reply::Status(name.into()))
        }
        Op::Rename(from, to, nx) => {
            let (from, to) = (key(*from), key(*to));
            let got = send(
                redis::cmd(if *nx { "RENAMENX" } else { "RENAME" })
                    .arg(&from)
                    .arg(&to),
            );
            let expected = match model.get(&from).cloned() {
                None => Reply::Error("no such key".into()),
                Some(_) if from == to => {
                    if *nx {
                        Reply::Int(0)
                    } else {
                        Reply::Ok
                    }
                }
                Some(_) if *nx && model.contains_key(&to) => Reply::Int(0),
                Some(value) => {
                    model.remove(&from);
                    model.insert(to, value);
                    if *nx {
                        Reply::Int(1)
                    } else {
                        Reply::Ok
                    }
                }
            };
            (got, expected)
        }
        Op::Copy(from, to, replace) => {
            let (from, to) = (key(*from), key(*to));
            let mut cmd = redis::cmd("COPY");
            cmd.arg(&from).arg(&to);
            if *replace {
                cmd.arg("REPLACE");
            }
            let got = send(&mut cmd);
            let expected = match model.get(&from).cloned() {
                _ if from == to => {
                    Reply::Error("source and destination objects are the same".into())
                }
                None => Reply::Int(0),
                Some(_) if !replace && model.contains_key(&to) => Reply::Int(0),
                Some(value) => {
                    model.insert(to, value);
                    Reply::Int(1)
                }
            };
            (got, expected)
        }
        Op::DbSize => (
            send(&mut redis::cmd("DBSIZE")),
            Reply::Int(model.len() as i64),
        ),
        Op::Reclaim => {
            server.reclaim().unwrap();
            (
                Reply::Int(server.field_entries() as i64),
                Reply::Int(live_fields(model) as i64),
            )
        }
        Op::FlushDb => {
            model.clear();
            (send(&mut redis::cmd("FLUSHDB")), Reply::Ok)
        }
    })
}

/// HSET on the model: how many fields are new, or WRONGTYPE.
fn hset(
    model: &mut BTreeMap<Vec<u8>, Val>,
    key: &[u8],
    pairs: impl Iterator<Item = (Vec<u8>, Vec<u8>)>,
) -> Reply {
    let entry = model
        .entry(key.to_vec())
        .or_insert_with(|| Val::Hash(BTreeMap::new()));
    let Val::Hash(hash) = entry else {
        return Reply::Error(WRONGTYPE.into());
    };
    let mut added = 0;
    for (f, v) in pairs {
        if hash.insert(f, v).is_none() {
            added += 1;
        }
    }
    Reply::Int(added)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn replies_match_a_model_of_strings_and_hashes(ops in proptest::collection::vec(op(), 1..100)) {
        run(ops);
    }
}

/// A string whose bytes are the hash marker's is still a string: the marker is a hash's only
/// with the hash's metadata beside it.
#[test]
fn a_string_holding_the_hash_markers_bytes_stays_a_string() {
    let mut server = Offline::anonymous(16 << 20, Limits::default()).unwrap();
    let marker = b"\0pmem-kv-server:hash\0";
    let wrongtype = Reply::Error(WRONGTYPE.into());
    let steps: Vec<(redis::Cmd, Reply)> = vec![
        (
            redis::cmd("SET").arg("s").arg(&marker[..]).clone(),
            Reply::Ok,
        ),
        (
            redis::cmd("GET").arg("s").clone(),
            Reply::Bulk(marker.to_vec()),
        ),
        (
            redis::cmd("TYPE").arg("s").clone(),
            Reply::Status("string".into()),
        ),
        (
            redis::cmd("HGET").arg("s").arg("f").clone(),
            wrongtype.clone(),
        ),
        (
            redis::cmd("HSET").arg("s").arg("f").arg("v").clone(),
            wrongtype.clone(),
        ),
        (
            redis::cmd("APPEND").arg("s").arg("!").clone(),
            Reply::Int(marker.len() as i64 + 1),
        ),
        (
            redis::cmd("HSET").arg("h").arg("f").arg("v").clone(),
            Reply::Int(1),
        ),
        (redis::cmd("GET").arg("h").clone(), wrongtype),
        (
            redis::cmd("MGET").arg("h").arg("s").clone(),
            Reply::Array(vec![Reply::Nil, Reply::Bulk([&marker[..], b"!"].concat())]),
        ),
        (
            redis::cmd("SET").arg("h").arg(&marker[..]).clone(),
            Reply::Ok,
        ),
        (
            redis::cmd("TYPE").arg("h").clone(),
            Reply::Status("string".into()),
        ),
        (
            redis::cmd("HLEN").arg("h").clone(),
            Reply::Error(WRONGTYPE.into()),
        ),
    ];
    for (cmd, expected) in steps {
        let got = send(&mut server, &cmd);
        let sent = String::from_utf8_lossy(&cmd.get_packed_command()).into_owned();
        assert_reply(got, expected, &sent);
    }
    server.check_deadlines().unwrap();
    server.reclaim().unwrap();
    assert_eq!(server.field_entries(), 0);
}
