//! Run K-word transactions (the `tx_words` variant, batched fences) for profiling one
//! transaction's instructions under callgrind:
//!
//! ```sh
//! cargo build --release -p pmem-bench --example tx_profile
//! valgrind --tool=callgrind --toggle-collect='tx_profile::measured' \
//!     target/release/examples/tx_profile 8 1000
//! ```
//!
//! Arguments: K (default 8) and transactions measured (default 1000), after 1000 warm-up ones.
//! The pool is a file in the default pool directory, forced to emulated granularity (flushes and
//! fences really issued), like `benches/instructions_tx.rs`.

use std::hint::black_box;

use pmem_bench::txbench::{TxRunner, TxVariant};
use pmem_ordering::Granularity;
use pmem_undo_log::FencePolicy;

#[inline(never)]
fn measured(runner: &mut TxRunner, txs: u64) {
    for _ in 0..txs {
        runner.step().expect("transaction");
    }
    black_box(txs);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let k: u64 = args.next().map_or(8, |a| a.parse().expect("K: a number"));
    let txs: u64 = args
        .next()
        .map_or(1000, |a| a.parse().expect("transactions: a number"));
    let dir = tempfile::Builder::new()
        .prefix("pmem-tx-profile-")
        .tempdir_in("/dev/shm")
        .expect("a directory for the pool");
    let variant = TxVariant::Words {
        k,
        policy: FencePolicy::Batched,
    };
    let mut runner = TxRunner::new(dir.path(), "tx", variant, Some(Granularity::Emulated))
        .expect("transaction runner");
    for _ in 0..1000 {
        runner.step().expect("warm-up transaction");
    }
    measured(&mut runner, txs);
    println!(
        "{txs} transactions of K = {k}: {:?}",
        runner.heap().tx_stats()
    );
}
