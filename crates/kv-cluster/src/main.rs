//! `pmem-kv-cluster`: one node of a replicated key-value cluster, serving the Redis protocol
//! (as a Redis Cluster of one shard) until SIGTERM or SIGINT. See the README for starting a
//! cluster and the `CLUSTER RAFT` commands; the command line is [`pmem_kv_cluster::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    pmem_kv_cluster::cli::run(std::env::args_os())
}
