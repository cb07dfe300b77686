//! Pipelines of plain writes, which the server commits together as one write batch: a write
//! that fails (a key past the store's limit, a full pool) fails alone, with the reply it
//! gets alone, and the writes around it stay; and `MGET` never sees an `MSET` half applied.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pmem_kv_server::offline::Offline;
use pmem_kv_server::Limits;
use redis::Value;

/// Every request of `commands` sent in one piece (so one pipeline), the replies parsed.
fn pipeline(server: &mut Offline, commands: &[redis::Cmd]) -> Vec<Value> {
    let bytes: Vec<u8> = commands
        .iter()
        .flat_map(|c| c.get_packed_command())
        .collect();
    let (replies, closed) = server.feed(&bytes);
    assert!(!closed, "the connection closed");
    let mut reader = &replies[..];
    let mut parser = redis::Parser::new();
    let values: Vec<Value> = commands
        .iter()
        .map(|_| parser.parse_value(&mut reader).expect("a reply"))
        .collect();
    assert!(reader.is_empty(), "more replies than requests");
    values
}

fn set(key: &[u8], value: &[u8]) -> redis::Cmd {
    let mut c = redis::cmd("SET");
    c.arg(key).arg(value);
    c
}

fn get(key: &[u8]) -> redis::Cmd {
    let mut c = redis::cmd("GET");
    c.arg(key);
    c
}

fn mset(pairs: &[(&[u8], &[u8])]) -> redis::Cmd {
    let mut c = redis::cmd("MSET");
    for (key, value) in pairs {
        c.arg(*key).arg(*value);
    }
    c
}

fn is_error(value: &Value) -> bool {
    matches!(value, Value::ServerError(_))
}

#[test]
fn a_key_past_the_limit_fails_its_own_write_alone() {
    let mut server = Offline::anonymous(32 << 20, Limits::default()).unwrap();
    let long = vec![b'k'; 70_000];
    // The reply the write gets alone.
    let alone = pipeline(&mut server, &[set(&long, b"x")]);
    assert!(is_error(&alone[0]), "{alone:?}");
    let replies = pipeline(
        &mut server,
        &[
            set(b"a", b"1"),
            set(&long, b"x"),
            mset(&[(b"b", b"2"), (b"c", b"3")]),
            get(b"a"),
            mset(&[(b"d", b"4"), (&long, b"y")]),
            set(b"e", b"5"),
            get(b"d"),
            get(b"e"),
        ],
    );
    let ok = Value::Okay;
    let bulk = |v: &[u8]| Value::BulkString(v.to_vec());
    assert_eq!(
        replies,
        vec![
            ok.clone(),
            alone[0].clone(),
            ok.clone(),
            bulk(b"1"),
            alone[0].clone(),
            ok,
            Value::Nil,
            bulk(b"5"),
        ],
        "the MSET with the long key sets none of its keys; every other write stays"
    );
    let values = pipeline(&mut server, &[get(b"b"), get(b"c")]);
    assert_eq!(values, vec![bulk(b"2"), bulk(b"3")]);
}

#[test]
fn a_full_pool_mid_pipeline_refuses_only_the_writes_that_do_not_fit() {
    let mut server = Offline::anonymous(8 << 20, Limits::default()).unwrap();
    let value = vec![7u8; 64 << 10];
    // Fill the pool, then free two values' room: a pipeline of four such writes cannot be
    // one batch, and its first writes fit one by one.
    let mut filled = 0;
    loop {
        let reply = pipeline(
            &mut server,
            &[set(format!("fill{filled}").as_bytes(), &value)],
        );
        match &reply[0] {
            Value::Okay => filled += 1,
            Value::ServerError(error) => {
                assert_eq!(error.code(), "OOM", "{error:?}");
                break;
            }
            other => panic!("{other:?}"),
        }
        assert!(filled < 1000, "the pool never filled");
    }
    let mut del = redis::cmd("DEL");
    del.arg("fill0").arg("fill1");
    assert_eq!(pipeline(&mut server, &[del]), vec![Value::Int(2)]);
    let keys: Vec<Vec<u8>> = (0..4).map(|i| format!("new{i}").into_bytes()).collect();
    let writes: Vec<redis::Cmd> = keys.iter().map(|k| set(k, &value)).collect();
    let replies = pipeline(&mut server, &writes);
    let written = replies.iter().filter(|r| **r == Value::Okay).count();
    assert!(
        written >= 1 && written < keys.len(),
        "some writes fit and some do not: {replies:?}"
    );
    for (key, reply) in keys.iter().zip(&replies) {
        let stored = &pipeline(&mut server, &[get(key)])[0];
        match reply {
            Value::Okay => assert_eq!(*stored, Value::BulkString(value.clone())),
            Value::ServerError(error) => {
                assert_eq!(error.code(), "OOM", "{error:?}");
                assert_eq!(*stored, Value::Nil);
            }
            other => panic!("{other:?}"),
        }
    }
    // The keys written before are all there.
    assert_eq!(
        pipeline(&mut server, &[redis::cmd("DBSIZE")]),
        vec![Value::Int((filled - 2 + written) as i64)]
    );
    assert_eq!(server.check().unwrap(), (filled - 2 + written) as u64);
}

#[test]
fn mget_never_sees_an_mset_half_applied() {
    // Many keys, so an MSET's apply (key by key) takes long enough for a read to land in it.
    let keys: Arc<Vec<String>> = Arc::new((0..64).map(|i| format!("key:{i}")).collect());
    let server = common::TestServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let mut c = server.client();
            let stop = stop.clone();
            let keys = keys.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let value = format!("{writer}-{n}");
                    // Alone, and two to a pipeline (one batch for both).
                    let mut pipe = redis::pipe();
                    for reversed in [false, true] {
                        let command = pipe.cmd("MSET");
                        let mut order: Vec<&String> = keys.iter().collect();
                        if reversed {
                            order.reverse();
                        }
                        for key in order {
                            command.arg(key).arg(&value);
                        }
                    }
                    pipe.query::<()>(&mut c).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut c = server.client();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..3000 {
        let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys[..]).query(&mut c).unwrap();
        assert!(
            values.iter().all(|v| *v == values[0]),
            "MGET saw an MSET in part: {values:?}"
        );
        seen.insert(values[0].clone());
    }
    stop.store(true, Ordering::Relaxed);
    let msets: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    assert!(
        seen.len() > 2,
        "MGET saw {} values over {msets} MSET pipelines: it did not run beside them",
        seen.len()
    );
}

#[test]
fn an_mset_past_the_batch_limit_is_refused_whole() {
    let mut server = Offline::anonymous(64 << 20, Limits::default()).unwrap();
    let keys: Vec<Vec<u8>> = (0..=pmem_structures::MAX_BATCH_CHANGES)
        .map(|i| format!("k{i}").into_bytes())
        .collect();
    let pairs: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
    let replies = pipeline(&mut server, &[set(b"before", b"1"), mset(&pairs)]);
    assert_eq!(replies[0], Value::Okay);
    let Value::ServerError(error) = &replies[1] else {
        panic!("{:?}", replies[1]);
    };
    assert!(
        format!("{error:?}").contains("16384"),
        "the error names the limit: {error:?}"
    );
    assert_eq!(
        pipeline(&mut server, &[redis::cmd("DBSIZE")]),
        vec![Value::Int(1)]
    );
    // One key fewer fits.
    let replies = pipeline(&mut server, &[mset(&pairs[1..])]);
    assert_eq!(replies, vec![Value::Okay]);
}

/// `SET ... EX` and its kin are deferred with the plain writes: each key ends with the
/// deadline of its last write (none after a plain SET), the maps agree, and a time Redis
/// refuses fails that write alone.
#[test]
fn pipelined_sets_with_expiry_times_leave_each_key_its_last_deadline() {
    let mut server = Offline::anonymous(32 << 20, Limits::default()).unwrap();
    let expiring = |key: &[u8], value: &[u8], option: &str, time: &str| {
        let mut c = set(key, value);
        c.arg(option).arg(time);
        c
    };
    let replies = pipeline(
        &mut server,
        &[
            expiring(b"a", b"1", "EX", "100"),
            set(b"a", b"2"),
            expiring(b"b", b"1", "PX", "100000"),
            expiring(b"b", b"2", "exat", "4102444800"),
            expiring(b"c", b"1", "EX", "100"),
            mset(&[(b"d", b"1")]),
            expiring(b"e", b"1", "EX", "0"),
            expiring(b"c", b"2", "PX", "200000"),
        ],
    );
    for (at, reply) in replies.iter().enumerate() {
        assert_eq!(is_error(reply), at == 6, "{at}: {reply:?}");
    }
    let read = |name: &str, key: &[u8]| {
        let mut c = redis::cmd(name);
        c.arg(key);
        c
    };
    let replies = pipeline(
        &mut server,
        &[
            read("TTL", b"a"),
            read("PEXPIRETIME", b"b"),
            read("PTTL", b"c"),
            read("TTL", b"d"),
            get(b"e"),
            get(b"a"),
        ],
    );
    assert_eq!(replies[0], Value::Int(-1));
    assert_eq!(replies[1], Value::Int(4_102_444_800_000));
    let Value::Int(left) = replies[2] else {
        panic!("{:?}", replies[2]);
    };
    assert!((190_000..=200_000).contains(&left), "{left}");
    assert_eq!(
        replies[3..],
        [Value::Int(-1), Value::Nil, Value::BulkString(b"2".to_vec())]
    );
    assert_eq!(server.check_deadlines(), Ok((4, 2)));
}

/// On a keyspace where no key ever had a deadline, plain writes of a pipeline skip the
/// deadline bookkeeping: a deadline a later write of the same pipeline gives a key is still
/// set, and a plain write after it still clears it.
#[test]
fn plain_sets_before_and_after_a_deadline_in_one_pipeline_leave_the_last_one() {
    let mut server = Offline::anonymous(32 << 20, Limits::default()).unwrap();
    let expiring = |key: &[u8], value: &[u8]| {
        let mut c = set(key, value);
        c.arg("EX").arg("100");
        c
    };
    let replies = pipeline(
        &mut server,
        &[
            set(b"x", b"1"),
            set(b"y", b"1"),
            expiring(b"x", b"2"),
            expiring(b"y", b"2"),
            set(b"y", b"3"),
            set(b"z", b"1"),
        ],
    );
    assert!(replies.iter().all(|r| *r == Value::Okay), "{replies:?}");
    let ttl = |key: &[u8]| {
        let mut c = redis::cmd("TTL");
        c.arg(key);
        c
    };
    let replies = pipeline(
        &mut server,
        &[ttl(b"x"), ttl(b"y"), ttl(b"z"), get(b"x"), get(b"y")],
    );
    let Value::Int(left) = replies[0] else {
        panic!("{:?}", replies[0]);
    };
    assert!((99..=100).contains(&left), "{left}");
    assert_eq!(
        replies[1..],
        [
            Value::Int(-1),
            Value::Int(-1),
            Value::BulkString(b"2".to_vec()),
            Value::BulkString(b"3".to_vec()),
        ]
    );
    assert_eq!(server.check_deadlines(), Ok((3, 1)));
}
