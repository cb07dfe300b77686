//! The little of a Redis client the cluster section needs: one connection, one command, one
//! RESP2 reply, every wait bounded. The section follows `-MOVED` itself ([`super::router`]).

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+...`
    Status(String),
    /// `-...`
    Error(String),
    /// `:...`
    Integer(i64),
    /// `$...` (`None`: the null bulk string).
    Bulk(Option<Vec<u8>>),
    /// `*...` (`None`: the null array).
    Array(Option<Vec<Reply>>),
}

/// One connection to a server.
pub struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

fn invalid(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl Connection {
    /// Connect to `addr`, every later read and write bounded by `timeout`.
    pub fn open(addr: SocketAddr, timeout: Duration) -> io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// Send `args` as one command and read its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&out)?;
        read_reply(&mut self.reader)
    }
}

fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection ended inside a reply",
        ));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| invalid("a reply's line is not UTF-8"))
}

fn number(text: &str) -> io::Result<i64> {
    text.parse()
        .map_err(|_| invalid(format!("{text:?} is not a number")))
}

/// Read one reply.
pub fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let Some(kind) = line.chars().next() else {
        return Err(invalid("an empty reply line"));
    };
    let rest = &line[kind.len_utf8()..];
    match kind {
        '+' => Ok(Reply::Status(rest.to_string())),
        '-' => Ok(Reply::Error(rest.to_string())),
        ':' => Ok(Reply::Integer(number(rest)?)),
        '$' => {
            let Ok(len) = usize::try_from(number(rest)?) else {
                return Ok(Reply::Bulk(None));
            };
            let mut bytes = vec![0; len + 2];
            reader.read_exact(&mut bytes)?;
            if !bytes.ends_with(b"\r\n") {
                return Err(invalid("a bulk string does not end with CRLF"));
            }
            bytes.truncate(len);
            Ok(Reply::Bulk(Some(bytes)))
        }
        '*' => {
            let Ok(count) = usize::try_from(number(rest)?) else {
                return Ok(Reply::Array(None));
            };
            let items = (0..count)
                .map(|_| read_reply(reader))
                .collect::<io::Result<Vec<_>>>()?;
            Ok(Reply::Array(Some(items)))
        }
        _ => Err(invalid(format!("a reply of unknown type: {line:?}"))),
    }
}

/// `INFO`'s `key:value` lines as pairs.
pub fn info_fields(text: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut BufReader::new(bytes))
    }

    #[test]
    fn replies_of_every_type_parse() {
        assert_eq!(parse(b"+OK\r\n").unwrap(), Reply::Status("OK".into()));
        assert_eq!(
            parse(b"-MOVED 1 127.0.0.1:7000\r\n").unwrap(),
            Reply::Error("MOVED 1 127.0.0.1:7000".into())
        );
        assert_eq!(parse(b":-12\r\n").unwrap(), Reply::Integer(-12));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(
            parse(b"*2\r\n$1\r\nx\r\n$-1\r\n").unwrap(),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"x".to_vec())),
                Reply::Bulk(None)
            ]))
        );
    }

    #[test]
    fn truncated_or_unknown_replies_are_errors() {
        assert!(parse(b"+OK").is_err());
        assert!(parse(b"$5\r\nab\r\n").is_err());
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b":x\r\n").is_err());
        assert!(parse(b"\r\n").is_err());
    }

    #[test]
    fn info_lines_split_at_the_first_colon() {
        let fields = info_fields(b"# Raft\r\nraft_leader:2\r\nraft_cluster:a:b\r\n");
        assert_eq!(
            fields,
            vec![
                ("raft_leader".to_string(), "2".to_string()),
                ("raft_cluster".to_string(), "a:b".to_string())
            ]
        );
    }
}
