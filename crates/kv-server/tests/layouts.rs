//! The keyspace's layout: a new pool's `db0` is made in the leaf layout, and a pool whose
//! `db0` was made in the tree layout (by an earlier server) keeps it, opens and serves, across
//! a restart; pipelined writes (one write batch each) land in either.

mod common;

use common::{config, temp_dir};
use pmem_kv_server::{Limits, Server};
use pmem_structures::{BTreeLayout, Granularity, Store, StoreOptions};
use redis::Commands;

fn options() -> StoreOptions {
    StoreOptions::new().granularity(Granularity::Emulated)
}

/// The layout of `db0` in the pool at `path` (the server stopped).
fn keyspace_layout(path: &std::path::Path) -> BTreeLayout {
    let store = Store::open_with(path, &options()).unwrap();
    store.btree_map::<Vec<u8>, Vec<u8>>("db0").unwrap().layout()
}

/// SETs one by one and pipelined, GETs, a restart, GETs again.
fn serve(path: &std::path::Path) {
    for round in 0..2 {
        let server = Server::start(config(path.to_path_buf(), 64 << 20, Limits::default()))
            .expect("the server starts");
        let url = format!("redis://{}/", server.local_addr());
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        if round == 0 {
            let _: () = c.set("one", "1").unwrap();
            let mut pipe = redis::pipe();
            for i in 0..200 {
                pipe.set(format!("key:{i:03}"), format!("value {i}"))
                    .ignore();
            }
            let _: () = pipe.query(&mut c).unwrap();
        }
        let one: String = c.get("one").unwrap();
        assert_eq!(one, "1");
        for i in (0..200).step_by(17) {
            let v: String = c.get(format!("key:{i:03}")).unwrap();
            assert_eq!(v, format!("value {i}"));
        }
        let n: u64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
        assert_eq!(n, 201);
        drop(c);
        server.shutdown();
    }
}

#[test]
fn a_new_pool_keeps_its_keyspace_in_leaves() {
    let dir = temp_dir();
    let path = dir.path().join("kv.pool");
    serve(&path);
    assert!(matches!(keyspace_layout(&path), BTreeLayout::Leaves(_)));
}

#[test]
fn a_pool_whose_keyspace_is_in_trees_keeps_them_and_serves() {
    let dir = temp_dir();
    let path = dir.path().join("kv.pool");
    {
        // As a server before the leaf layout made it.
        let store = Store::create(&path, 64 << 20, &options()).unwrap();
        store
            .btree_map::<Vec<u8>, Vec<u8>>("db0")
            .unwrap()
            .insert(b"kept".to_vec(), b"from before".to_vec())
            .unwrap();
    }
    assert!(matches!(keyspace_layout(&path), BTreeLayout::Trees(_)));
    serve_with_kept(&path);
    assert!(matches!(keyspace_layout(&path), BTreeLayout::Trees(_)));
}

/// [`serve`] on a pool holding one key written before the server ran.
fn serve_with_kept(path: &std::path::Path) {
    let server = Server::start(config(path.to_path_buf(), 64 << 20, Limits::default()))
        .expect("the server starts");
    let url = format!("redis://{}/", server.local_addr());
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let kept: String = c.get("kept").unwrap();
    assert_eq!(kept, "from before");
    let _: () = c.del("kept").unwrap();
    drop(c);
    server.shutdown();
    serve(path);
}
