//! The `pmem-kv-cluster` command line: one node of a replicated key-value cluster, serving the
//! Redis protocol (as a Redis Cluster of one shard) until SIGTERM or SIGINT. The binary calls
//! [`run`]; so does `pmem-bench`, which starts its benchmark's nodes as processes of its own
//! binary (one program to find, and the node's code always the bench's build).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use openraft::ReadPolicy;
use pmem_structures::Granularity;
use tokio::signal::unix::{signal, SignalKind};

use crate::{Node, NodeConfig};

/// One node of a key-value cluster replicated with Raft: every write is committed by a
/// majority and durable on it before its reply; reads are linearizable.
#[derive(Debug, Parser)]
#[command(name = "pmem-kv-cluster", version)]
struct Cli {
    /// The cluster's name: every node of a cluster is started with the same one; it is
    /// recorded in the pool and carried (hashed) by every Raft message.
    #[arg(long)]
    cluster: String,

    /// This node's id, unique in the cluster (recorded in the pool).
    #[arg(long)]
    node_id: u64,

    /// Where this node serves its peers' Raft messages (ip:port).
    #[arg(long)]
    raft_addr: SocketAddr,

    /// Where this node serves clients, in the Redis protocol (ip:port).
    #[arg(long)]
    redis_addr: SocketAddr,

    /// The pool file: opened if it exists, created (with --pool-size-mib) if not.
    #[arg(long)]
    pool: PathBuf,

    /// Size of a pool to create, in MiB (an existing pool keeps its size).
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pool_size_mib: u64,

    /// How writes are made durable: detected from the file by default; on tmpfs (/dev/shm)
    /// pass `emulated` (flushes and fences as on persistent memory, no msync).
    #[arg(long, value_enum, default_value_t = GranularityArg::Auto)]
    granularity: GranularityArg,

    /// The leader's heartbeat period, in milliseconds.
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,

    /// The shortest election timeout, in milliseconds (the longest is twice it).
    #[arg(long, default_value_t = 500)]
    election_timeout_ms: u64,

    /// How long `CLUSTER RAFT ADD-LEARNER` waits for the new node to catch up with the log
    /// before it answers an error (the node stays a learner), in milliseconds.
    #[arg(long, default_value_t = 60_000, value_name = "MS")]
    learner_timeout_ms: u64,

    /// Serve reads on the leader's lease instead of a read index per read: faster, weaker
    /// (correct only while clocks drift less than the lease allows).
    #[arg(long)]
    lease_reads: bool,

    /// For tests only: serve `CLUSTER RAFT PARTITION <id>...` (drop Raft traffic to and from
    /// those peers) and `CLUSTER RAFT HEAL`. Never on a cluster that holds data you keep.
    #[arg(long)]
    test_partitions: bool,

    /// Worker threads (default: 2).
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum GranularityArg {
    Auto,
    Emulated,
    Page,
    CacheLine,
    Byte,
}

/// Parse `args` (the program name first) as the `pmem-kv-cluster` command line and run the
/// node until SIGTERM or SIGINT; a usage error prints clap's message and exits as clap does.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    let mut config = NodeConfig::new(
        cli.cluster.clone(),
        cli.node_id,
        cli.raft_addr,
        cli.redis_addr,
        cli.pool.clone(),
    );
    config.pool_size = cli.pool_size_mib.saturating_mul(1 << 20);
    config.granularity = match cli.granularity {
        GranularityArg::Auto => None,
        GranularityArg::Emulated => Some(Granularity::Emulated),
        GranularityArg::Page => Some(Granularity::Page),
        GranularityArg::CacheLine => Some(Granularity::CacheLine),
        GranularityArg::Byte => Some(Granularity::Byte),
    };
    config.heartbeat = Duration::from_millis(cli.heartbeat_ms);
    config.election_timeout = (
        Duration::from_millis(cli.election_timeout_ms),
        Duration::from_millis(cli.election_timeout_ms.saturating_mul(2)),
    );
    config.learner_timeout = Duration::from_millis(cli.learner_timeout_ms);
    config.test_partitions = cli.test_partitions;
    if cli.lease_reads {
        config.read_policy = ReadPolicy::LeaseRead;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads.max(1))
        .thread_name("pmem-kv-cluster")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("pmem-kv-cluster: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let (mut terminate, mut interrupt) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => (t, i),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("pmem-kv-cluster: cannot handle signals: {e}");
                return ExitCode::FAILURE;
            }
        };
        let node = match Node::start(config).await {
            Ok(node) => node,
            Err(e) => {
                eprintln!("pmem-kv-cluster: node {} does not start: {e}", cli.node_id);
                return ExitCode::FAILURE;
            }
        };
        println!(
            "pmem-kv-cluster {} node {} of cluster {:?}: clients on {}, Raft on {}, pool {}",
            env!("CARGO_PKG_VERSION"),
            cli.node_id,
            cli.cluster,
            node.member().client,
            node.member().raft,
            cli.pool.display()
        );
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        node.shutdown().await;
        println!("pmem-kv-cluster node {} stopped", cli.node_id);
        ExitCode::SUCCESS
    })
}
