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
    // The tests run the pipeline batches (the path with more to get wrong; off by default).
    config.pipeline_batches = true;
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

    pub fn addr(&self) -> SocketAddr {
        self.server.as_ref().unwrap().local_addr()
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
        .args([
            "--port",
            "0",
            "--granularity",
            "emulated",
            "--pipeline-batches",
        ])
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

/// A server binary that a kill test SIGKILLs: killed and reaped when dropped too, so a failing
/// test leaves no server behind.
pub struct KilledServer(Child);

impl KilledServer {
    /// [`spawn_binary`] on `pool`, with a pool of `mib` MiB if it makes one.
    pub fn spawn(pool: &Path, mib: u64) -> (KilledServer, SocketAddr) {
        let (child, addr) = spawn_binary(pool, mib);
        (KilledServer(child), addr)
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for KilledServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `redis` crate connection to `addr`, or `None` if the server is not there (killed).
pub fn connect(addr: SocketAddr) -> Option<redis::Connection> {
    redis::Client::open(format!("redis://{addr}/"))
        .and_then(|c| c.get_connection())
        .ok()
}

/// `args` as a RESP array of bulk strings, as clients send requests.
pub fn encode_request(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Read one whole reply (RESP2 or RESP3) and return its bytes as they came.
pub fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    read_reply_into(reader, &mut out)?;
    Ok(out)
}

fn read_reply_into(reader: &mut impl BufRead, out: &mut Vec<u8>) -> std::io::Result<()> {
    let start = out.len();
    if reader.read_until(b'\n', out)? == 0 || !out.ends_with(b"\r\n") {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let line = &out[start..out.len() - 2];
    let tag = line[0];
    let count: i64 = std::str::from_utf8(&line[1..])
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    match tag {
        // Blobs: the bytes and a CRLF.
        b'$' | b'=' | b'!' if count >= 0 => {
            let mut blob = vec![0u8; count as usize + 2];
            reader.read_exact(&mut blob)?;
            out.extend_from_slice(&blob);
        }
        // Aggregates: their elements (a map's, twice as many).
        b'*' | b'~' | b'>' | b'%' | b'|' if count >= 0 => {
            let items = if matches!(tag, b'%' | b'|') {
                2 * count
            } else {
                count
            };
            for _ in 0..items {
                read_reply_into(reader, out)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// One connection driven request by request, replies read whole and kept as bytes.
pub struct Raw {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Raw {
    pub fn connect(addr: SocketAddr) -> Raw {
        let socket = TcpStream::connect(addr).expect("a connection");
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Raw {
            reader: BufReader::new(socket.try_clone().unwrap()),
            writer: socket,
        }
    }

    /// Send a request and read its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send_bytes(&encode_request(args));
        self.reply()
    }

    /// `call` with text arguments, the reply as (lossy) text.
    pub fn call_text(&mut self, args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8_lossy(&self.call(&args)).into_owned()
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
    }

    pub fn reply(&mut self) -> Vec<u8> {
        read_reply(&mut self.reader).expect("a whole reply")
    }

    pub fn reply_text(&mut self) -> String {
        String::from_utf8_lossy(&self.reply()).into_owned()
    }
}
