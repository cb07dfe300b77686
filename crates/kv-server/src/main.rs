//! `pmem-kv-server`: serve a store over RESP2 on 127.0.0.1 until SIGTERM or SIGINT.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use pmem_kv_server::{Limits, Server, ServerConfig};
use pmem_structures::Granularity;

/// A durable key-value server speaking the Redis protocol (RESP2) over a persistent-memory
/// store. Every write is durable before its reply is sent.
#[derive(Debug, Parser)]
#[command(name = "pmem-kv-server", version)]
struct Cli {
    /// The pool file: opened if it exists, created (with --pool-size) if not.
    #[arg(long, default_value = "/dev/shm/pmem-kv.pool")]
    pool: PathBuf,

    /// Size of a pool to create, in MiB (an existing pool keeps its size).
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    pool_size_mib: u64,

    /// How writes are made durable: detected from the file by default (a DAX file on
    /// persistent memory: cache line; any other file: page, with msync). On tmpfs
    /// (/dev/shm) pass `emulated`: flushes and fences run as on persistent memory.
    #[arg(long, value_enum, default_value_t = GranularityArg::Auto)]
    granularity: GranularityArg,

    /// The port to listen on, on 127.0.0.1 (0: any free port, printed at start).
    #[arg(long, default_value_t = 6379)]
    port: u16,

    /// The address to listen on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    bind: IpAddr,

    /// Worker threads serving connections (default: one per core).
    #[arg(long)]
    threads: Option<usize>,

    /// The longest bulk string (so value) a request may carry, in bytes.
    #[arg(long, default_value_t = Limits::default().max_value_bytes)]
    max_value_bytes: usize,

    /// The most connections served at once.
    #[arg(long, default_value_t = Limits::default().max_connections)]
    max_connections: usize,

    /// The most arguments one request may have.
    #[arg(long, default_value_t = Limits::default().max_args)]
    max_args: usize,

    /// Commit the plain writes (SET, SET EX|PX|EXAT|PXAT, MSET) a connection pipelines
    /// together as one write batch (each reply sent once the batch is durable) instead of
    /// each on its own.
    #[arg(long)]
    pipeline_batches: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum GranularityArg {
    Auto,
    Emulated,
    Page,
    CacheLine,
    Byte,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut config = ServerConfig::new(&cli.pool);
    config.bind = SocketAddr::new(cli.bind, cli.port);
    config.pool_size = cli.pool_size_mib.saturating_mul(1 << 20);
    config.granularity = match cli.granularity {
        GranularityArg::Auto => None,
        GranularityArg::Emulated => Some(Granularity::Emulated),
        GranularityArg::Page => Some(Granularity::Page),
        GranularityArg::CacheLine => Some(Granularity::CacheLine),
        GranularityArg::Byte => Some(Granularity::Byte),
    };
    if let Some(threads) = cli.threads {
        config.threads = threads;
    }
    config.limits = Limits {
        max_value_bytes: cli.max_value_bytes,
        max_connections: cli.max_connections,
        max_args: cli.max_args,
        ..Limits::default()
    };
    config.pipeline_batches = cli.pipeline_batches;
    config.stop_on_signals = true;
    match Server::start(config) {
        Ok(server) => {
            println!(
                "pmem-kv-server {} listening on {}, pool {}",
                env!("CARGO_PKG_VERSION"),
                server.local_addr(),
                cli.pool.display()
            );
            server.wait();
            println!("pmem-kv-server stopped; the store is closed");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("pmem-kv-server: {error}");
            ExitCode::FAILURE
        }
    }
}
