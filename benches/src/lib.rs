//! Benchmarks and the workload driver of the pmem workspace.
//!
//! The library half of `pmem-bench` holds what the `pmem-bench` binary and the criterion benches
//! in `benches/benches/` share, so both measure exactly the same operations:
//!
//! * [`poolfile`]: the benchmark pool file (created fresh, removed when dropped) and where it
//!   lives by default;
//! * [`primitives`]: the primitive variants compared (flush kinds, non-temporal vs temporal
//!   writes, non-temporal -> temporal ordering, the pool's persist vs raw instructions);
//! * [`measure`]: side-by-side timing of a group of variants, with per-operation statistics;
//! * [`machine`]: a description of the machine for report headers;
//! * [`keys`]: every key, offset and random choice, from one seeded generator
//!   (`pmem_ordering::sim::SplitMix64`);
//! * [`txbench`]: the transaction variants (K words per transaction, the Themis workloads of
//!   Themis, Table II, in-place vs out-of-place object updates) under each fence policy;
//! * [`ccehbench`]: the CCEH table of `pmem-structures`: loads of random keys with and without
//!   the speculative helper thread, lookups and removals, with latency percentiles;
//! * [`datalogbench`]: the datalog store of `pmem-structures`: random overwrites of a 64 MB
//!   file under copy-on-write and embedded writes, and reads after them;
//! * [`fastfairbench`]: the FAST&FAIR B+-tree of `pmem-structures` under its three shift
//!   policies (per-shift, FAST, redo-logged): inserts, lookups and range scans;
//! * `pmdk` (feature `pmdk`): PMDK's libpmem and libpmemobj side by side with the pool's copies
//!   and the undo-log transactions;
//! * [`storebench`]: CCEH and FAST&FAIR through a `Store`'s handles against the raw
//!   structures, paired in one run (store/raw ratio per operation);
//! * [`bytekeys`]: byte keys through the `Store` (16-byte keys, 100 B and 1 KiB values, a
//!   layered `user:%011d` map) beside the `u64` path and beside LMDB and redb (same keys,
//!   operations and durability per write): YCSB load, A, B, C (and E on ordered maps), ours
//!   over each peer, with the speed targets checked;
//! * [`phase`]: what the structure benchmarks accumulate per operation, and their timing
//!   helpers;
//! * [`report`]: the results as text tables, JSON and markdown;
//! * [`ycsb`]: YCSB-style workloads (load, A, B, C, E, insert-only; uniform and Zipfian keys;
//!   1..T threads) over every structure and variant, with latency histograms;
//! * [`plot`]: PNG charts of the results;
//! * [`pagesize`]: CCEH and FAST&FAIR lookups and YCSB C on 4 KiB against 2 MiB pages, with the
//!   pages obtained read back and dTLB misses where counters exist;
//! * [`allocbench`]: alloc/free throughput of ours, libpmemobj, the system allocator and
//!   jemalloc, 64 B to 4 KiB, one and two threads;
//! * [`flushlat`]: single loads after a persist (read-after-persist) and PERC's flush and fence
//!   micro-benchmarks, on the CPU's real instructions over DRAM;
//! * [`service`]: our RESP2 server against redis-server (AOF fsync always, and no persistence)
//!   under redis-benchmark, and the store's byte-key maps against redb in process;
//! * [`cluster`]: the server replicated on three nodes against the standalone server and
//!   redis-server under redis-benchmark, and leader failover.
#![deny(missing_docs)]

pub mod allocbench;
pub mod bytekeys;
pub mod ccehbench;
pub mod cluster;
pub mod datalogbench;
pub mod fastfairbench;
pub mod flushlat;
pub mod keys;
pub mod machine;
pub mod measure;
pub mod pagesize;
pub mod phase;
pub mod plot;
#[cfg(feature = "pmdk")]
pub mod pmdk;
pub mod poolfile;
pub mod primitives;
pub mod report;
pub mod service;
pub mod storebench;
pub mod txbench;
pub mod ycsb;
