//! Expiry times through the `redis` client crate: keys nobody reads go by active expiry
//! within a bounded time, their space returned; lazy expiry hides and deletes a key as soon
//! as its deadline passes; deadlines survive a restart; FLUSHDB drops them; and the pool's
//! deadline maps agree with its keys afterwards.

mod common;

use std::time::{Duration, Instant};

use common::TestServer;
use pmem_structures::Granularity;

fn cmd(name: &str) -> redis::Cmd {
    redis::cmd(name)
}

/// A field of `INFO section`.
fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = cmd("INFO").arg(section).query(c).unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .to_string()
}

fn records(c: &mut redis::Connection) -> u64 {
    info_field(c, "pool", "pool_records").parse().unwrap()
}

#[test]
fn keys_nobody_reads_are_deleted_by_active_expiry_and_their_space_returned() {
    const EXPIRING: u64 = 5000;
    let mut server = TestServer::start();
    let mut c = server.client();
    for i in 0..10 {
        cmd("SET")
            .arg(format!("kept:{i}"))
            .arg("v")
            .query::<()>(&mut c)
            .unwrap();
        cmd("SET")
            .arg(format!("later:{i}"))
            .arg("v")
            .arg("EX")
            .arg(3600)
            .query::<()>(&mut c)
            .unwrap();
    }
    let before = records(&mut c);
    let mut pipe = redis::pipe();
    for i in 0..EXPIRING {
        pipe.cmd("SET")
            .arg(format!("gone:{i}"))
            .arg("x".repeat(100))
            .arg("PX")
            .arg(100 + i % 200)
            .ignore();
    }
    pipe.query::<()>(&mut c).unwrap();
    let written = Instant::now();
    // DBSIZE reads no key: only active expiry deletes them.
    loop {
        let size: u64 = cmd("DBSIZE").query(&mut c).unwrap();
        if size == 20 {
            break;
        }
        assert!(
            written.elapsed() < Duration::from_secs(10),
            "{size} keys left {:?} after the writes",
            written.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("{EXPIRING} keys expired within {:?}", written.elapsed());
    // avg_ttl: the ten keys' hour less the time since (the 5,000 expired keys' deadlines
    // left the sum as they went).
    let keyspace = info_field(&mut c, "keyspace", "db0");
    let average: u64 = keyspace
        .strip_prefix("keys=20,expires=10,avg_ttl=")
        .unwrap_or_else(|| panic!("{keyspace}"))
        .parse()
        .unwrap();
    assert!((3_590_000..=3_600_000).contains(&average), "{keyspace}");
    let after = records(&mut c);
    assert!(
        after <= before + 16,
        "{before} records before the expiring keys, {after} after they went"
    );
    for i in 0..10 {
        let ttl: i64 = cmd("TTL").arg(format!("later:{i}")).query(&mut c).unwrap();
        assert!((3590..=3600).contains(&ttl), "{ttl}");
    }
    // The sum of deadlines is made again at open.
    drop(c);
    server.restart();
    let mut c = server.client();
    let keyspace = info_field(&mut c, "keyspace", "db0");
    let again: u64 = keyspace
        .strip_prefix("keys=20,expires=10,avg_ttl=")
        .unwrap_or_else(|| panic!("{keyspace}"))
        .parse()
        .unwrap();
    assert!(again <= average && again >= 3_580_000, "{keyspace}");
    drop(c);
    server.server.take().unwrap().shutdown();
    let (keys, deadlines) =
        pmem_kv_server::offline::check_pool(&server.pool(), Granularity::Emulated).unwrap();
    assert_eq!((keys, deadlines), (20, 10));
}

#[test]
fn a_key_past_its_deadline_reads_absent_and_is_deleted_at_once() {
    let server = TestServer::start();
    let mut c = server.client();
    cmd("SET")
        .arg("k")
        .arg("v")
        .arg("PX")
        .arg(50)
        .query::<()>(&mut c)
        .unwrap();
    cmd("SET")
        .arg("other")
        .arg("v")
        .query::<()>(&mut c)
        .unwrap();
    let value: Option<String> = cmd("GET").arg("k").query(&mut c).unwrap();
    assert_eq!(value.as_deref(), Some("v"));
    std::thread::sleep(Duration::from_millis(80));
    // KEYS leaves it out whether or not active expiry has found it yet; EXISTS (or any
    // command naming it) deletes it.
    let keys: Vec<String> = cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert_eq!(keys, ["other"]);
    let exists: i64 = cmd("EXISTS").arg("k").query(&mut c).unwrap();
    assert_eq!(exists, 0);
    let size: i64 = cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(size, 1);
    assert_eq!(
        info_field(&mut c, "keyspace", "db0"),
        "keys=1,expires=0,avg_ttl=0"
    );
    // An INCR of an expired key starts from nothing, with no deadline.
    cmd("SET")
        .arg("n")
        .arg(41)
        .arg("PX")
        .arg(30)
        .query::<()>(&mut c)
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let n: i64 = cmd("INCR").arg("n").query(&mut c).unwrap();
    assert_eq!(n, 1);
    let ttl: i64 = cmd("TTL").arg("n").query(&mut c).unwrap();
    assert_eq!(ttl, -1);
}

#[test]
fn deadlines_survive_a_restart_and_flushdb_drops_them() {
    let mut server = TestServer::start();
    let mut c = server.client();
    cmd("SET")
        .arg("long")
        .arg("v")
        .arg("EX")
        .arg(1000)
        .query::<()>(&mut c)
        .unwrap();
    cmd("SET")
        .arg("short")
        .arg("v")
        .arg("PX")
        .arg(100)
        .query::<()>(&mut c)
        .unwrap();
    cmd("SET")
        .arg("at")
        .arg("v")
        .arg("EXAT")
        .arg(4_102_444_800u64)
        .query::<()>(&mut c)
        .unwrap();
    drop(c);
    server.restart();
    std::thread::sleep(Duration::from_millis(150));
    let mut c = server.client();
    let ttl: i64 = cmd("TTL").arg("long").query(&mut c).unwrap();
    assert!((998..=1000).contains(&ttl), "{ttl}");
    let at: i64 = cmd("EXPIRETIME").arg("at").query(&mut c).unwrap();
    assert_eq!(at, 4_102_444_800);
    let short: Option<String> = cmd("GET").arg("short").query(&mut c).unwrap();
    assert_eq!(short, None);
    cmd("FLUSHDB").query::<()>(&mut c).unwrap();
    cmd("SET")
        .arg("long")
        .arg("again")
        .query::<()>(&mut c)
        .unwrap();
    let ttl: i64 = cmd("TTL").arg("long").query(&mut c).unwrap();
    assert_eq!(ttl, -1);
    assert_eq!(
        info_field(&mut c, "keyspace", "db0"),
        "keys=1,expires=0,avg_ttl=0"
    );
    drop(c);
    server.server.take().unwrap().shutdown();
    let checked =
        pmem_kv_server::offline::check_pool(&server.pool(), Granularity::Emulated).unwrap();
    assert_eq!(checked, (1, 0));
}
