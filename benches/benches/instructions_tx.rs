//! Instructions per undo-log transaction of K = 1, 8 and 32 words (batched fences), under
//! callgrind. The set-up and how to read the counts: `instructions/fixtures.rs`.

use std::hint::black_box;

use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use pmem_bench::txbench::TxRunner;

#[path = "instructions/fixtures.rs"]
mod fixtures;
#[path = "instructions/pools.rs"]
mod pools;

use fixtures::{tx_words, TXS};

#[library_benchmark]
#[bench::k1_txs_1000(args = (1), setup = tx_words)]
#[bench::k8_txs_1000(args = (8), setup = tx_words)]
#[bench::k32_txs_1000(args = (32), setup = tx_words)]
fn tx_words_batch(runner: &'static mut TxRunner) -> usize {
    for _ in 0..TXS {
        runner.step().expect("transaction");
    }
    black_box(TXS)
}

library_benchmark_group!(name = tx; benchmarks = tx_words_batch);

main!(library_benchmark_groups = tx);
