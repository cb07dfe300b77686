//! The command line of `pmem-bench` (a module of the binary, not of the library): the options
//! ([`Cli`]) and what they select, checked ([`Selection`]).

use std::path::PathBuf;

use clap::builder::PossibleValuesParser;
use clap::{Parser, ValueEnum};
use pmem_bench::bytekeys::{ByteKeyPlan, MapConfig, CONFIGS};
use pmem_bench::report::PMDK_HINT;
use pmem_bench::ycsb::{KeyDistribution, Matrix, Scale, Structure, Variant, Workload};
use pmem_ordering::pool::PageSize;
use pmem_ordering::Granularity;

/// Measure persist primitives, undo-log transactions and the persistent structures of this
/// workspace on a pool file, and print the results as tables.
///
/// The report has these sections, all run by default (choose with --section):
///
/// * primitives: one cache line written + flushed + fenced with each flush instruction the CPU
///   has; non-temporal writes + fence against temporal writes + flush + fence from 64 B to
///   64 KiB; a non-temporal write then an ordered temporal write with and without the fence;
///   the pool's persist against the raw instructions.
///
/// * transactions: undo-log transactions of K = 1..128 words, the Themis workloads (SPS, LL,
///   Hashmap, CQ, TATP, TPCC, CTree, PC, RB) and in-place vs out-of-place object updates, under
///   the strict, batched and ideal fence policies; then every Themis workload with 1 and 2
///   threads (strict and batched).
///
/// * structures: CCEH (1M random keys, or --keys: single inserts, insert_batch with the speculative helper
///   thread off and on and with inline prefetching, lookups, removals, bytes per key),
///   FAST&FAIR (1M keys, or --keys, under the per-shift, FAST and redo-logged shift policies: inserts,
///   lookups, range scans) and the datalog (random 64 B to 4 KiB overwrites of a 64 MiB file,
///   copy-on-write against embedded writes); then CCEH and FAST&FAIR through a Store's
///   handles against the raw structures, paired in one run (single calls and YCSB; the
///   store/raw ratio per operation).
///
/// * byte-keys: byte keys through the Store's typed maps beside the u64 path, one thread,
///   1M records (or --keys): hash_map::<Vec<u8>, Vec<u8>> and btree_map::<Vec<u8>, Vec<u8>>
///   (FAST shifts) with 16 random bytes -> 100 B and -> 1 KiB, and an ordered map of
///   user:%011d keys (a layered map), each beside the u64 -> u64 map of its kind; the raw
///   leaf map (pairs inline in persistent leaves, its open timed) with the same three, and the
///   same leaves through the Store's handle (btree_map_with(name, BTreeLayout::leaves()),
///   16 random bytes -> 100 B); and LMDB (heed) and redb with the same keys, 100 B values and operations, one durable commit per
///   write: YCSB load, A, B, C (and E: 100-record range scans, ordered maps): ops/s, latency
///   percentiles, fences, flushes and bytes per operation, the ratio to the u64 path, ours
///   over each peer, and the speed targets checked (--byte-key-map chooses the maps).
///
/// * ycsb: YCSB-style workloads over every structure and variant: a load, then workloads A
///   (50% reads, 50% updates), B (95/5), C (reads only), E (short scans, B+-tree only) and an
///   insert-only run, with uniform and Zipfian (0.99) key choice, on 1 and 2 threads: ops/s,
///   p50/p99/p99.9 latency, fences, flushes, nt bytes and bytes to persistent memory per
///   operation, and the effective write ratio at 256-byte XPLine granularity.
///
/// * page-size: CCEH and FAST&FAIR single-call lookups and YCSB C (uniform, one thread) on
///   anonymous pools with 4 KiB pages against 2 MiB pages (MADV_HUGEPAGE) and, where the host
///   has a hugetlbfs mount with free 2 MiB pages, pool files on it, paired in one run,
///   with the pages obtained read back from /proc/self/smaps and dTLB load misses per lookup
///   where perf counters exist (2M records, about 30 s; --quick 200 000, about 2 s).
///
/// * alloc: alloc/free throughput for 64 B, 256 B, 1 KiB and 4 KiB blocks, one and two threads:
///   ours (undo-log transactions and record blocks), the system allocator, jemalloc and, built
///   with --features pmdk, libpmemobj, in one run (about 15 s; --quick about 2 s).
///
/// * read-after-persist: the cycles of one load of a line right after clwb + sfence,
///   clflushopt + sfence, clflush or an nt store + sfence, at once and after 1 and 10 us,
///   against a cache hit, a store without flush and a cold line: does the flush evict the line
///   on this CPU (about 5 s; --quick well under 2 s)?
///
/// * perc: PERC's micro-benchmarks: a fence every 1..64 flushes (clwb, clflushopt; clflush
///   unfenced), lines of one L1/L2 cache set against different sets, pointer chasing with and
///   without flushes, and the empty loop (about 5 s; --quick well under 2 s).
///
/// * service: redis-benchmark SET and GET (50 clients, pipelines 1 and 16, 1,000,000 requests,
///   random keys, 100 B values) against our RESP2 server (pmem-kv-server, in process),
///   redis-server with appendfsync always and redis-server without persistence, in one run;
///   then the store's byte-key maps against redb in process (200 000 keys: inserts with a
///   durable commit each and per 1,000, and gets). Skipped, with the reason, when
///   redis-benchmark or redis-server is not installed (a few minutes; --quick a few seconds).
///
/// * cluster: the server replicated on 3 nodes (processes of this binary, on loopback) against
///   the standalone server and redis-server with and without AOF, redis-benchmark SET and GET
///   as in the service section (100,000 requests, keys below 100,000); then the leader killed
///   10 times while a client writes: the time until a write is acknowledged again, and every
///   acknowledged write read back (a few minutes; --quick 10,000 requests and one kill, a few
///   seconds).
///
/// * pmdk (built with --features pmdk): PMDK's pmem_memcpy_persist and libpmemobj transactions
///   side by side with the same operations of ours.
///
/// The default run takes about two minutes on a 2-core machine, about half a minute more for
/// the store path comparison and about four minutes more for the byte keys (1M records in
/// each of 11 maps and the two peers, redb's per-commit writes the longest), plus the service
/// section (a few minutes); --quick under a minute.
/// Pools live in /dev/shm by default: DRAM, with flushes and fences issued as on persistent
/// memory (emulated granularity), which the report's header says.
#[derive(Debug, Parser)]
#[command(name = "pmem-bench", version)]
pub(crate) struct Cli {
    /// Short run for CI and smoke tests (under 20 seconds): fewer keys, fewer and shorter
    /// batches, so the numbers are noisier.
    #[arg(long)]
    pub(crate) quick: bool,

    /// Sections to run, comma-separated or repeated (default: all of them).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "SECTION")]
    pub(crate) section: Vec<SectionArg>,

    /// Structures for the structure and YCSB sections, comma-separated or repeated (default:
    /// all, or those of the --variant given).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "STRUCTURE")]
    pub(crate) structure: Vec<StructureArg>,

    /// YCSB variants, comma-separated or repeated (default: every variant of the structures):
    /// CCEH helper-off / helper-on (how the load runs: insert_batch without or with the
    /// speculative helper thread), FAST&FAIR per-shift / fast / redo (shift policies), datalog
    /// copy-on-write / embedded / auto (write modes).
    #[arg(long, value_delimiter = ',', value_name = "VARIANT",
          value_parser = PossibleValuesParser::new(Variant::ALL.map(Variant::name)))]
    pub(crate) variant: Vec<String>,

    /// YCSB workloads after the load, comma-separated or repeated (default: a, b, c, e,
    /// insert-only; `load` alone runs the load only). Every structure is loaded first.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "WORKLOAD")]
    pub(crate) workload: Vec<Workload>,

    /// Maps of the byte-keys section, comma-separated or repeated (default: all of them):
    /// hash-u64, hash-100, hash-1024, ordered-u64, ordered-100, ordered-1024, ordered-user,
    /// leaf-100, leaf-1024, leaf-user, lmdb, redb (the number: bytes of a value under 16
    /// random bytes of key). At 10M keys, e.g. hash-100,ordered-100,leaf-100,lmdb,redb (the
    /// 1 KiB maps would not fit in memory).
    #[arg(long, value_delimiter = ',', value_name = "MAP", value_parser = byte_key_map)]
    pub(crate) byte_key_map: Vec<String>,

    /// YCSB key choice for reads, updates and scans, comma-separated or repeated (default:
    /// both).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "DISTRIBUTION")]
    pub(crate) distribution: Vec<KeyDistribution>,

    /// Keys loaded into each structure: the YCSB records (default 200000; 20000 with --quick),
    /// the keys of the structures section's CCEH and FAST&FAIR tables (default 1000000;
    /// 100000 with --quick; beyond the default, fewer rounds in proportion, at least one) and
    /// the records of each byte-keys map (default 1000000; 20000 with --quick).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_YCSB_RECORDS))]
    pub(crate) keys: Option<u64>,

    /// YCSB operations of each workload run (default 200000; 20000 with --quick), and the
    /// byte-keys section's operations of A, B and C (default 1000000; 20000 with --quick; E
    /// runs a fifth as many scans).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=MAX_YCSB_OPS))]
    pub(crate) ops: Option<u64>,

    /// YCSB thread counts, comma-separated or repeated: each runs on its own freshly loaded
    /// structure (default: 1,2).
    #[arg(long, value_delimiter = ',', value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=MAX_THREADS))]
    pub(crate) threads: Vec<u64>,

    /// Seed of the YCSB keys and operations (the same seed gives the same operations).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    pub(crate) seed: u64,

    /// Directory for the pool files (created fresh and removed at exit). Default: /dev/shm if
    /// it exists, else the system temporary directory.
    #[arg(long, value_name = "DIR")]
    pub(crate) pool_dir: Option<PathBuf>,

    /// How persistence works for the pools: `emulated` issues flush instructions and fences as
    /// on persistent memory without msync (the default; on tmpfs this is DRAM, not persistent
    /// memory); `page` ends every persist in msync; `detect` tries MAP_SYNC (persistent memory
    /// behind a DAX file system: byte granularity if sysfs says its region is eADR, else cache
    /// line) and falls back to page.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = GranularityArg::Emulated)]
    pub(crate) granularity: GranularityArg,

    /// Page size of the pools the page-size and alloc sections make: `4k` or `2m` (2 MiB:
    /// transparent huge pages for anonymous pools, and pool files on hugetlbfs where the host
    /// has it). The page-size section measures only this size when given (default: both,
    /// paired); the alloc section maps our heap with it
    /// (default 4k). The other sections' pool files get 4 KiB pages (2 MiB pages for a file
    /// need hugetlbfs).
    #[arg(long, value_enum, value_name = "SIZE")]
    pub(crate) page_size: Option<PageSizeArg>,

    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,

    /// Also write the results as markdown to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) markdown: Option<PathBuf>,

    /// Write PNG charts into DIR (created if missing): YCSB throughput per variant for each
    /// structure (ycsb-<structure>.png), byte keys against the u64 path per map kind
    /// (bytekeys-hash.png, bytekeys-ordered.png), and the non-temporal vs flush crossover from
    /// the primitives section (crossover.png).
    #[arg(long, value_name = "DIR")]
    pub(crate) plot: Option<PathBuf>,
}

/// A --byte-key-map name: one of the byte-key maps' slugs.
fn byte_key_map(name: &str) -> Result<String, String> {
    let names: Vec<String> = CONFIGS.iter().map(MapConfig::slug).collect();
    if names.iter().any(|n| n == name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "no byte-key map {name}; the maps: {}",
            names.join(", ")
        ))
    }
}

/// The largest --keys: a structure of this many records fits a 64 GiB pool.
const MAX_YCSB_RECORDS: u64 = 100_000_000;
/// The largest --ops.
const MAX_YCSB_OPS: u64 = 1_000_000_000;
/// The largest --threads.
const MAX_THREADS: u64 = 64;
/// The default --seed.
const DEFAULT_SEED: u64 = 0x5C5B;

/// A section of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SectionArg {
    /// Flush instructions, nt vs temporal writes, nt -> temporal ordering, persist overhead.
    Primitives,
    /// Undo-log transactions, the Themis workloads and object updates.
    Transactions,
    /// Each structure's own benchmark (CCEH, FAST&FAIR, datalog).
    Structures,
    /// Byte keys through the store's typed maps beside the u64 path.
    ByteKeys,
    /// YCSB workloads over every structure and variant.
    Ycsb,
    /// PMDK side by side (needs the pmdk feature).
    Pmdk,
    /// CCEH and FAST&FAIR on 4 KiB against 2 MiB pages.
    PageSize,
    /// Allocator throughput: ours, libpmemobj, system, jemalloc.
    Alloc,
    /// One load of a line right after clwb, clflushopt, clflush or an nt store, and later.
    ReadAfterPersist,
    /// PERC's flush and fence micro-benchmarks.
    Perc,
    ///
    /// Our server against redis-server under redis-benchmark; our maps against redb.
    Service,
    /// The server replicated on 3 nodes against the standalone server and redis-server;
    /// leader failover.
    Cluster,
}

/// A page size, on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum PageSizeArg {
    /// 4 KiB base pages.
    #[value(name = "4k")]
    Base4K,
    /// 2 MiB huge pages.
    #[value(name = "2m")]
    Huge2M,
}

impl PageSizeArg {
    /// The page size.
    pub(crate) fn page_size(self) -> PageSize {
        match self {
            PageSizeArg::Base4K => PageSize::Base4K,
            PageSizeArg::Huge2M => PageSize::Huge2M,
        }
    }
}

/// A structure, on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum StructureArg {
    /// The CCEH hash table.
    Cceh,
    /// The FAST&FAIR B+-tree.
    Fastfair,
    /// The datalog object store.
    Datalog,
}

impl StructureArg {
    fn structure(self) -> Structure {
        match self {
            StructureArg::Cceh => Structure::Cceh,
            StructureArg::Fastfair => Structure::FastFair,
            StructureArg::Datalog => Structure::Datalog,
        }
    }
}

/// How persistence works for the pools, on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum GranularityArg {
    /// Flushes and fences issued, no msync (not persistent unless the file is on a DAX device).
    Emulated,
    /// Every persist ends in msync.
    Page,
    /// MAP_SYNC if the file system allows it (byte granularity on an eADR region, else cache
    /// line), else page.
    Detect,
}

impl GranularityArg {
    /// The granularity to force (`None`: detect).
    pub(crate) fn forced(self) -> Option<Granularity> {
        match self {
            GranularityArg::Emulated => Some(Granularity::Emulated),
            GranularityArg::Page => Some(Granularity::Page),
            GranularityArg::Detect => None,
        }
    }
}

/// What the command line asks for, checked.
pub(crate) struct Selection {
    /// The sections to run.
    pub(crate) sections: Vec<SectionArg>,
    /// The structures of the structure and YCSB sections.
    pub(crate) structures: Vec<Structure>,
    /// The YCSB runs.
    pub(crate) matrix: Matrix,
    /// The byte-keys section's plan.
    pub(crate) byte_keys: ByteKeyPlan,
}

impl Selection {
    /// The selection `cli` asks for, or why it cannot be run.
    pub(crate) fn from_cli(cli: &Cli) -> Result<Selection, String> {
        let sections = if cli.section.is_empty() {
            let mut all = vec![
                SectionArg::Primitives,
                SectionArg::Transactions,
                SectionArg::Structures,
                SectionArg::ByteKeys,
                SectionArg::Ycsb,
                SectionArg::PageSize,
                SectionArg::Alloc,
                SectionArg::ReadAfterPersist,
                SectionArg::Perc,
                SectionArg::Service,
                SectionArg::Cluster,
            ];
            if cfg!(feature = "pmdk") {
                all.push(SectionArg::Pmdk);
            }
            all
        } else {
            cli.section.clone()
        };
        if !cfg!(feature = "pmdk") && sections.contains(&SectionArg::Pmdk) {
            return Err(PMDK_HINT.to_string());
        }
        let variants: Vec<Variant> = cli
            .variant
            .iter()
            .filter_map(|name| Variant::ALL.into_iter().find(|v| v.name() == name))
            .collect();
        let structures: Vec<Structure> = if !cli.structure.is_empty() {
            Structure::ALL
                .into_iter()
                .filter(|s| cli.structure.iter().any(|a| a.structure() == *s))
                .collect()
        } else if !variants.is_empty() {
            Structure::ALL
                .into_iter()
                .filter(|s| variants.iter().any(|v| v.structure() == *s))
                .collect()
        } else {
            Structure::ALL.to_vec()
        };
        if let Some(v) = variants
            .iter()
            .find(|v| !structures.contains(&v.structure()))
        {
            return Err(format!(
                "variant {} is a {} variant, and --structure does not include {}",
                v.name(),
                v.structure().name(),
                v.structure().name()
            ));
        }
        let mut matrix = Matrix::new(if cli.quick {
            Scale::quick()
        } else {
            Scale::default()
        });
        if let Some(keys) = cli.keys {
            matrix.scale.records = keys;
        }
        if let Some(ops) = cli.ops {
            matrix.scale.ops = ops;
        }
        matrix.variants = if variants.is_empty() {
            structures.iter().flat_map(|s| s.variants()).collect()
        } else {
            variants
        };
        if !cli.workload.is_empty() {
            matrix.workloads = cli.workload.clone();
        }
        if !cli.distribution.is_empty() {
            matrix.distributions = cli.distribution.clone();
        }
        if !cli.threads.is_empty() {
            matrix.threads = cli.threads.iter().map(|&t| t as usize).collect();
        }
        matrix.seed = cli.seed;
        let mut byte_keys = if cli.quick {
            ByteKeyPlan::quick()
        } else {
            ByteKeyPlan::full()
        };
        if let Some(keys) = cli.keys {
            byte_keys = byte_keys.with_records(keys);
        }
        if let Some(ops) = cli.ops {
            byte_keys = byte_keys.with_ops(ops);
        }
        if !cli.byte_key_map.is_empty() {
            byte_keys.maps = CONFIGS
                .into_iter()
                .filter(|c| cli.byte_key_map.contains(&c.slug()))
                .collect();
        }
        Ok(Selection {
            sections,
            structures,
            matrix,
            byte_keys,
        })
    }

    /// Whether `section` runs.
    pub(crate) fn runs(&self, section: SectionArg) -> bool {
        self.sections.contains(&section)
    }

    /// Whether the structure section measures `structure`.
    pub(crate) fn measures(&self, structure: Structure) -> bool {
        self.runs(SectionArg::Structures) && self.structures.contains(&structure)
    }
}
