//! The keyspace commands through the `redis` client crate: KEYS and SCAN with glob
//! patterns, TYPE, RANDOMKEY, UNLINK, TOUCH, EXISTS and DEL of many keys, and FLUSHDB on a
//! full pool.

mod common;

use std::collections::BTreeSet;

use common::TestServer;
use pmem_kv_server::Limits;
use redis::{Commands, Value};

fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

/// A full SCAN with `MATCH pattern` and `COUNT count`: the keys of every page, in order.
fn scan_all(c: &mut redis::Connection, pattern: &str, count: u64) -> Vec<String> {
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let (next, page): (u64, Vec<String>) = cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count)
            .query(c)
            .unwrap();
        assert!(page.len() as u64 <= count);
        keys.extend(page);
        if next == 0 {
            return keys;
        }
        cursor = next;
    }
}

#[test]
fn keys_and_scan_match_full_glob_patterns() {
    let server = TestServer::start();
    let mut c = server.client();
    let mut all = Vec::new();
    for user in 0..40 {
        for field in ["name", "mail"] {
            all.push(format!("user:{user}:{field}"));
        }
    }
    all.extend(
        [
            "hello", "hallo", "hxllo", "hllo", "heeeello", "a*b", "a?b", "", "[x]",
        ]
        .map(String::from),
    );
    for key in &all {
        let _: () = c.set(key, "v").unwrap();
    }
    let expected = |matching: &dyn Fn(&str) -> bool| -> Vec<String> {
        let mut keys: Vec<String> = all.iter().filter(|k| matching(k)).cloned().collect();
        keys.sort();
        keys
    };
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "user:*:name",
            expected(&|k| k.starts_with("user:") && k.ends_with(":name")),
        ),
        (
            "user:1?:mail",
            expected(&|k| k.len() == 12 && k.starts_with("user:1") && k.ends_with(":mail")),
        ),
        (
            "h?llo",
            expected(&|k| ["hello", "hallo", "hxllo"].contains(&k)),
        ),
        (
            "h*llo",
            expected(&|k| ["hello", "hallo", "hxllo", "hllo", "heeeello"].contains(&k)),
        ),
        ("h[ae]llo", expected(&|k| ["hello", "hallo"].contains(&k))),
        ("h[^e]llo", expected(&|k| ["hallo", "hxllo"].contains(&k))),
        ("h[a-b]llo", expected(&|k| k == "hallo")),
        ("a\\*b", expected(&|k| k == "a*b")),
        ("a\\?b", expected(&|k| k == "a?b")),
        ("\\[x\\]", expected(&|k| k == "[x]")),
        ("*", expected(&|_| true)),
        // Only `*` alone matches the empty key.
        ("**", expected(&|k| !k.is_empty())),
        ("user:*", expected(&|k| k.starts_with("user:"))),
        ("nothing*", Vec::new()),
    ];
    for (pattern, wanted) in cases {
        let keys: Vec<String> = c.keys(pattern).unwrap();
        assert_eq!(keys, wanted, "KEYS {pattern}");
        for count in [1, 7, 1000] {
            assert_eq!(
                scan_all(&mut c, pattern, count),
                wanted,
                "SCAN MATCH {pattern} COUNT {count}"
            );
        }
    }
    // The client crate's own iterator takes glob patterns too.
    let names: BTreeSet<String> = c.scan_match("user:*:name").unwrap().collect();
    assert_eq!(names.len(), 40);
}

#[test]
fn type_randomkey_unlink_touch_exists_and_del_of_many_keys() {
    let server = TestServer::start();
    let mut c = server.client();
    assert_eq!(
        cmd("RANDOMKEY").query::<Option<String>>(&mut c).unwrap(),
        None
    );
    let keys: Vec<String> = (0..500).map(|i| format!("key:{i:03}")).collect();
    let pairs: Vec<(&str, &str)> = keys.iter().map(|k| (k.as_str(), "v")).collect();
    let _: () = c.mset(&pairs).unwrap();
    assert_eq!(
        cmd("TYPE").arg("key:001").query::<String>(&mut c).unwrap(),
        "string"
    );
    assert_eq!(
        cmd("TYPE").arg("nope").query::<String>(&mut c).unwrap(),
        "none"
    );

    // RANDOMKEY returns keys that exist, and not always the same one.
    let mut seen = BTreeSet::new();
    for _ in 0..200 {
        let key: String = cmd("RANDOMKEY").query(&mut c).unwrap();
        assert!(keys.contains(&key), "{key}");
        seen.insert(key);
    }
    assert!(seen.len() > 1, "RANDOMKEY gave {seen:?} only");

    // EXISTS and TOUCH count a key named twice twice; DEL and UNLINK remove it once.
    let mut many: Vec<String> = keys[..300].to_vec();
    many.push("absent".into());
    many.push(keys[0].clone());
    for name in ["EXISTS", "TOUCH"] {
        assert_eq!(
            cmd(name).arg(&many).query::<i64>(&mut c).unwrap(),
            301,
            "{name}"
        );
    }
    assert_eq!(
        cmd("UNLINK")
            .arg(&many[..150])
            .query::<i64>(&mut c)
            .unwrap(),
        150
    );
    assert_eq!(c.del::<_, i64>(&many).unwrap(), 150);
    assert_eq!(cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 200);
    assert_eq!(cmd("EXISTS").arg(&keys).query::<i64>(&mut c).unwrap(), 200);
    let key: String = cmd("RANDOMKEY").query(&mut c).unwrap();
    assert!(keys[300..].contains(&key), "{key}");
    let error = cmd("TYPE").query::<Value>(&mut c).unwrap_err();
    assert!(error
        .to_string()
        .contains("wrong number of arguments for 'type' command"));
}

/// Fill a small pool until the store refuses, as a user filling a cache would.
fn fill(c: &mut redis::Connection, value: &[u8]) -> u64 {
    let mut written = 0u64;
    loop {
        match c.set::<_, _, ()>(format!("fill{written}"), value) {
            Ok(()) => written += 1,
            Err(error) => {
                assert_eq!(error.code(), Some("OOM"), "{error}");
                return written;
            }
        }
        assert!(written < 100_000, "the pool never filled");
    }
}

#[test]
fn flushdb_on_a_full_pool_empties_it_and_the_keyspace_stays_usable() {
    for (pool, value) in [(8u64 << 20, 4096usize), (32 << 20, 1000)] {
        let mut server = TestServer::with(pool, Limits::default());
        let mut c = server.client();
        let value = vec![7u8; value];
        let written = fill(&mut c, &value);
        assert!(written > 100, "{written} keys filled the pool");
        let _: () = cmd("FLUSHDB").query(&mut c).unwrap();
        assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 0);
        assert_eq!(c.get::<_, Option<Vec<u8>>>("fill0").unwrap(), None);
        // A second flush finds nothing left behind.
        let _: () = cmd("FLUSHALL").query(&mut c).unwrap();
        assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 0);
        // The freed space takes as many keys again; deletes free space for more writes.
        let again = fill(&mut c, &value);
        assert!(
            again * 10 >= written * 9,
            "{again} keys after the flush, {written} before"
        );
        let removed: u64 = c
            .del(
                (0..again / 2)
                    .map(|i| format!("fill{i}"))
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        assert_eq!(removed, again / 2);
        for i in 0..10 {
            let _: () = c.set(format!("after{i}"), &value).unwrap();
        }
        let size = cmd("DBSIZE").query::<u64>(&mut c).unwrap();
        assert_eq!(size, again - again / 2 + 10);
        // And the keyspace is what it was after a restart.
        drop(c);
        server.restart();
        let mut c = server.client();
        assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), size);
        assert_eq!(c.get::<_, Vec<u8>>("after9").unwrap(), value);
        assert_eq!(c.get::<_, Option<Vec<u8>>>("fill0").unwrap(), None);
        let _: () = cmd("FLUSHDB").query(&mut c).unwrap();
        assert_eq!(cmd("DBSIZE").query::<u64>(&mut c).unwrap(), 0);
    }
}
