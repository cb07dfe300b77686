//! Debian's Redis tools as the section drives them: whether they are installed and which
//! version ([`tool_version`]), a `redis-server` child on its own port and directory
//! ([`RedisServer`]), and one `redis-benchmark` run, parsed ([`run_benchmark`]).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::csv::{self, BenchmarkLine};
use super::ServiceError;

/// How long a `redis-server` may take to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a `redis-server` may take to exit after `SHUTDOWN NOSAVE` before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The first line `tool --version` prints, or `None` when the tool cannot be run (not
/// installed, or not executable).
pub fn tool_version(tool: &str) -> Option<String> {
    let output = Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    Some(text.lines().next().unwrap_or("").trim().to_string())
}

/// A free TCP port on the loopback interface: bound, read, released. Another process could
/// take it before the server binds it; the server's start then fails with a clear error.
pub fn free_port() -> Result<u16, ServiceError> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| ServiceError::Io {
            what: "find a free port".to_string(),
            source,
        })?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|source| ServiceError::Io {
            what: "find a free port".to_string(),
            source,
        })
}

/// What a `redis-server` makes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// `--appendonly yes --appendfsync always`: every write in the append-only file,
    /// fsync'd before the reply.
    AofAlways,
    /// `--appendonly no --save ""`: nothing written to disk.
    Nothing,
}

impl Persistence {
    fn args(self) -> [&'static str; 4] {
        match self {
            Persistence::AofAlways => ["--appendonly", "yes", "--appendfsync", "always"],
            Persistence::Nothing => ["--appendonly", "no", "--appendfsync", "no"],
        }
    }
}

/// A `redis-server` child process serving on a free loopback port, its files in its own
/// directory. Dropping it stops the server (`SHUTDOWN NOSAVE`, else a kill) and removes the
/// directory.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Start `redis-server` with `persistence`, its files (append-only file, log) in `dir`
    /// (created; it must not exist), and wait until it answers `PING`.
    pub fn start(dir: &Path, persistence: Persistence) -> Result<RedisServer, ServiceError> {
        std::fs::create_dir(dir).map_err(|source| ServiceError::Io {
            what: format!("create {}", dir.display()),
            source,
        })?;
        let port = free_port()?;
        let spawned = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(dir)
            .args(["--save", "", "--daemonize", "no", "--protected-mode", "no"])
            .args(persistence.args())
            .arg("--logfile")
            .arg(dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(source) => {
                let _ = std::fs::remove_dir_all(dir);
                return Err(ServiceError::Tool {
                    tool: "redis-server",
                    source,
                });
            }
        };
        // From here on, a failure drops `server`, which stops the child and removes `dir`.
        let mut server = RedisServer {
            child,
            port,
            dir: dir.to_path_buf(),
        };
        server.wait_until_ready()?;
        Ok(server)
    }

    /// The port it serves on.
    pub fn port(&self) -> u16 {
        self.port
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log"))
            .unwrap_or_else(|e| format!("(no log: {e})"))
    }

    fn wait_until_ready(&mut self) -> Result<(), ServiceError> {
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(ServiceError::RedisExited {
                    status,
                    log: self.log(),
                });
            }
            if ping(self.addr()) {
                return Ok(());
            }
            if start.elapsed() > START_TIMEOUT {
                return Err(ServiceError::RedisNotReady {
                    port: self.port,
                    secs: START_TIMEOUT.as_secs(),
                    log: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `SHUTDOWN NOSAVE`, then wait for the child; killed if it has not exited in time.
    fn stop(&mut self) {
        if let Ok(mut socket) = TcpStream::connect_timeout(&self.addr(), Duration::from_secs(1)) {
            let _ = socket.write_all(b"SHUTDOWN NOSAVE\r\n");
        }
        let start = Instant::now();
        while start.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        // Best effort: a directory already gone needs no removal.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a server at `addr` answers `PING` with `+PONG`.
fn ping(addr: SocketAddr) -> bool {
    let Ok(mut socket) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_millis(500)));
    if socket.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    socket.read_exact(&mut reply).is_ok() && reply.starts_with(b"+PONG")
}

/// One `redis-benchmark` run's settings.
#[derive(Clone, Copy, Debug)]
pub struct BenchmarkArgs {
    /// The test: `set` or `get`.
    pub test: &'static str,
    /// Parallel connections (`-c`).
    pub clients: u32,
    /// Requests in all (`-n`).
    pub requests: u64,
    /// Requests per pipeline (`-P`).
    pub pipeline: u32,
    /// Keys are `key:` and a random number below this (`-r`).
    pub keyspace: u64,
    /// Bytes of a `SET`'s value (`-d`).
    pub value_bytes: u32,
}

/// How long one run may take before it is killed: `redis-benchmark` never gives up on a
/// server that stops answering. At least a minute, and 1,000 requests per second at worst.
fn deadline(args: &BenchmarkArgs) -> Duration {
    Duration::from_secs((args.requests / 1_000).max(60))
}

/// Run `redis-benchmark` with `args` against the server on `port` (`server` names it in
/// errors) and parse its line.
pub fn run_benchmark(
    server: &str,
    port: u16,
    args: &BenchmarkArgs,
) -> Result<BenchmarkLine, ServiceError> {
    let mut child = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &args.clients.to_string()])
        .args(["-n", &args.requests.to_string()])
        .args(["-P", &args.pipeline.to_string()])
        .args(["-r", &args.keyspace.to_string()])
        .args(["-d", &args.value_bytes.to_string()])
        .args(["-t", args.test, "--csv"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| ServiceError::Tool {
            tool: "redis-benchmark",
            source,
        })?;
    // Read both pipes on their own threads, so a full pipe never stalls the child.
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let limit = deadline(args);
    let status = wait_for(&mut child, limit);
    let collect = |h: Option<std::thread::JoinHandle<String>>| {
        h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
    };
    let (stdout, stderr) = (collect(stdout), collect(stderr));
    let test = args.test.to_ascii_uppercase();
    match status {
        None => Err(ServiceError::BenchmarkTimeout {
            server: server.to_string(),
            test,
            secs: limit.as_secs(),
        }),
        Some(status) if !status.success() => Err(ServiceError::BenchmarkFailed {
            server: server.to_string(),
            test,
            status,
            stderr,
        }),
        Some(_) => csv::parse(&stdout, &test).map_err(|source| ServiceError::Csv {
            server: server.to_string(),
            source,
        }),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// The child's exit status, or `None` (and the child killed) when `limit` passed first.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}
