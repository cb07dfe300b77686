//! A service's life with a store: open or create it, fill two named maps from two spawned
//! threads, drop everything (the file closes and unlocks), reopen and read it all back.
//! `cargo run --release -p pmem-structures --example service [-- PATH]`: by default on tmpfs
//! (emulated granularity); a PATH, e.g. on a DAX mount, gets the granularity detected there.
use pmem_structures::{Granularity, Store, StoreOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (path, options) = match std::env::args().nth(1) {
        Some(path) => (path, StoreOptions::new()),
        None => (
            "/dev/shm/pmem-example-service.pool".to_string(),
            StoreOptions::new().granularity(Granularity::Emulated), // tmpfs: StoreOptions
        ),
    };
    let path = path.as_str();
    let store = Store::open_or_create(path, 64 << 20, &options)?;
    let users = store.hash_map::<u64, u64>("users")?;
    let orders = store.btree_map::<u64, u64>("orders")?;
    let workers = [0, 1].map(|t| {
        let (users, orders) = (users.clone(), orders.clone());
        std::thread::spawn(move || {
            (t..100_000).step_by(2).try_for_each(|k| {
                users.upsert(k, k * 10)?;
                orders.upsert(k, k + 1).map(drop)
            })
        })
    });
    for worker in workers {
        worker.join().expect("a worker panicked")?;
    }
    drop((store, users, orders)); // the last handle closes the file and releases its lock
    let store = Store::open_with(path, &options)?;
    let users = store.hash_map::<u64, u64>("users")?;
    let orders = store.btree_map::<u64, u64>("orders")?;
    for k in 0..100_000 {
        assert_eq!((users.get(k)?, orders.get(k)?), (Some(k * 10), Some(k + 1)));
    }
    println!(
        "read back {} users and {} orders",
        users.len(),
        orders.len()
    );
    Ok(())
}
