//! Deleted hashes give their space back: a hash of 20,000 fields deleted by DEL, and hashes
//! nobody reads deleted by active expiry, have their fields reclaimed in the background
//! until the pool holds the records it held before them; and the pool's maps agree with its
//! keys afterwards, and across a restart.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use pmem_structures::Granularity;

fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

/// The pool's record count (INFO pool).
fn records(c: &mut redis::Connection) -> u64 {
    let info: String = cmd("INFO").arg("pool").query(c).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("pool_records:"))
        .unwrap_or_else(|| panic!("no pool_records in {info}"))
        .parse()
        .unwrap()
}

/// Wait until the pool holds at most `most` records, failing after 10 s; how long it took.
fn until_records_at_most(c: &mut redis::Connection, most: u64) -> Duration {
    let started = Instant::now();
    loop {
        let now = records(c);
        if now <= most {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{now} records, {most} expected, {:?} after the deletes",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn deleted_and_expired_hashes_give_their_fields_space_back() {
    let mut server = TestServer::start();
    let mut c = server.client();
    cmd("SET")
        .arg("other")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap();
    let before = records(&mut c);

    // One large hash, written in four HSETs (each one batch), deleted by one DEL.
    for part in 0..4 {
        let mut hset = cmd("HSET");
        hset.arg("large");
        for field in part * 5000..(part + 1) * 5000 {
            hset.arg(format!("field:{field}")).arg("x".repeat(40));
        }
        let added: i64 = hset.query(&mut c).unwrap();
        assert_eq!(added, 5000);
    }
    let length: i64 = cmd("HLEN").arg("large").query(&mut c).unwrap();
    assert_eq!(length, 20_000);
    assert!(records(&mut c) >= before + 20_000);
    let deleted: i64 = cmd("DEL").arg("large").query(&mut c).unwrap();
    assert_eq!(deleted, 1);
    let exists: i64 = cmd("EXISTS").arg("large").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    let took = until_records_at_most(&mut c, before + 16);
    println!("20,000 fields of a deleted hash reclaimed within {took:?}");

    // Hashes nobody reads, gone by active expiry.
    let mut pipe = redis::pipe();
    for hash in 0..200 {
        let key = format!("expiring:{hash}");
        let set = pipe.cmd("HSET").arg(&key).ignore();
        for field in 0..50 {
            set.arg(format!("f{field}")).arg("y".repeat(30));
        }
        pipe.cmd("PEXPIRE").arg(&key).arg(100 + hash % 200).ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    let took = until_records_at_most(&mut c, before + 16);
    println!("200 expired hashes of 50 fields reclaimed within {took:?}");
    let size: i64 = cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 1);

    drop(c);
    server.restart();
    let mut c = server.client();
    let kept: Option<String> = cmd("GET").arg("other").query(&mut c).unwrap();
    assert_eq!(kept.as_deref(), Some("v"));
    drop(c);
    server.server.take().unwrap().shutdown();
    let checked =
        pmem_kv_server::offline::check_pool(&server.pool(), Granularity::Emulated).unwrap();
    assert_eq!(checked, (1, 0));
}
