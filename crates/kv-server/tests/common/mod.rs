//! A server on a fresh pool for each test: in process, on a free port, in /dev/shm when
//! there is one.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use pmem_kv_server::{Limits, RunningServer, Server, ServerConfig};
use pmem_structures::Granularity;

pub struct TestServer {
    pub server: Option<RunningServer>,
    pub dir: tempfile::TempDir,
}

pub fn temp_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("a directory in /dev/shm")
    } else {
        tempfile::tempdir().expect("a temporary directory")
    }
}

pub fn config(pool: PathBuf, pool_size: u64, limits: Limits) -> ServerConfig {
    let mut config = ServerConfig::new(pool);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.granularity = Some(Granularity::Emulated);
    config.pool_size = pool_size;
    config.threads = 2;
    config.limits = limits;
    config
}

impl TestServer {
    pub fn start() -> TestServer {
        TestServer::with(64 << 20, Limits::default())
    }

    pub fn with(pool_size: u64, limits: Limits) -> TestServer {
        let dir = temp_dir();
        let server = Server::start(config(dir.path().join("kv.pool"), pool_size, limits))
            .expect("the server starts");
        TestServer {
            server: Some(server),
            dir,
        }
    }

    pub fn pool(&self) -> PathBuf {
        self.dir.path().join("kv.pool")
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.server.as_ref().unwrap().local_addr())
    }

    pub fn client(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).unwrap();
        let connection = client.get_connection().expect("a connection");
        connection
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        connection
    }

    /// A plain socket, for bytes no client would send.
    pub fn raw(&self) -> TcpStream {
        let socket = TcpStream::connect(self.server.as_ref().unwrap().local_addr()).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        socket
    }

    /// Stop and start again on the same pool.
    pub fn restart(&mut self) {
        self.server.take().unwrap().shutdown();
        let server = Server::start(config(self.pool(), 64 << 20, Limits::default()))
            .expect("the server starts again");
        self.server = Some(server);
    }
}

/// Send `request` and read until the server closes the connection or `expect` replies have
/// arrived (counted as lines starting a reply: good enough for the simple replies tests
/// look for).
pub fn exchange(socket: &mut TcpStream, request: &[u8]) -> String {
    socket.write_all(request).unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                if reply.ends_with(b"\r\n") {
                    // Give a closing server the moment to close.
                    socket
                        .set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                }
            }
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&reply).into_owned()
}

/// The server binary on `pool` (emulated granularity, a pool of `mib` MiB if it makes one),
/// on a free port: the child and the address its first line of output names.
pub fn spawn_binary(pool: &Path, mib: u64) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pmem-kv-server"))
        .args(["--port", "0", "--granularity", "emulated"])
        .args(["--pool-size-mib", &mib.to_string()])
        .arg("--pool")
        .arg(pool)
        .stdout(Stdio::piped())
        .spawn()
        .expect("the server binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split_whitespace()
        .find_map(|word| word.trim_end_matches(',').parse::<SocketAddr>().ok())
        .unwrap_or_else(|| panic!("no address in the server's first line: {line:?}"));
    (child, addr)
}
