//! Replies, and their encoding in the protocol a connection chose (RESP2, or RESP3 after
//! `HELLO 3`).
//!
//! Encoded here rather than by the `redis-protocol` crate: an error reply must carry any
//! bytes (Redis quotes the client's arguments in its errors, and they need not be UTF-8,
//! while the crate's error frames are `str`s), and a map's entries must keep their order (the
//! crate's RESP3 maps are hash maps unless another map crate comes in). Requests are framed
//! by `framing`, which needs no codec either.

use std::borrow::Cow;
use std::fmt::Write as _;

use bytes::{BufMut, Bytes, BytesMut};

/// The protocol of a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Protocol {
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// A reply, in the terms of RESP3; RESP2 writes its richer types as Redis does (a map as a
/// flat array, a set as an array, a verbatim string as a bulk string, null as a null bulk).
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A status line: `+OK`.
    Status(Cow<'static, str>),
    /// An error line, its code first (`ERR ...`, `WRONGTYPE ...`); CR and LF become spaces,
    /// as in Redis, so the line cannot break the stream.
    Error(Bytes),
    Integer(i64),
    Bulk(Bytes),
    Null,
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Set(Vec<Reply>),
    /// Text meant for people (INFO): `=` with the `txt` format in RESP3.
    Verbatim(String),
}

impl Reply {
    pub fn ok() -> Reply {
        Reply::status("OK")
    }

    pub fn status(text: impl Into<Cow<'static, str>>) -> Reply {
        Reply::Status(text.into())
    }

    pub fn error(message: impl Into<Bytes>) -> Reply {
        Reply::Error(message.into())
    }

    pub fn bulk(bytes: impl Into<Bytes>) -> Reply {
        Reply::Bulk(bytes.into())
    }

    pub fn bulk_or_null(value: Option<Vec<u8>>) -> Reply {
        value.map_or(Reply::Null, Reply::bulk)
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// Append the reply's bytes in `protocol` to `out`.
    pub fn encode(&self, protocol: Protocol, out: &mut BytesMut) {
        let resp3 = protocol == Protocol::Resp3;
        match self {
            Reply::Status(text) => line(out, b'+', text.as_bytes()),
            Reply::Error(message) => {
                out.put_u8(b'-');
                out.extend(
                    message
                        .iter()
                        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
                );
                out.put_slice(b"\r\n");
            }
            Reply::Integer(n) => header(out, b':', *n),
            Reply::Bulk(bytes) => blob(out, b'$', bytes),
            Reply::Null if resp3 => out.put_slice(b"_\r\n"),
            Reply::Null => out.put_slice(b"$-1\r\n"),
            Reply::Array(items) => {
                header(out, b'*', items.len() as i64);
                for item in items {
                    item.encode(protocol, out);
                }
            }
            Reply::Set(items) => {
                header(out, if resp3 { b'~' } else { b'*' }, items.len() as i64);
                for item in items {
                    item.encode(protocol, out);
                }
            }
            Reply::Map(pairs) => {
                if resp3 {
                    header(out, b'%', pairs.len() as i64);
                } else {
                    header(out, b'*', 2 * pairs.len() as i64);
                }
                for (key, value) in pairs {
                    key.encode(protocol, out);
                    value.encode(protocol, out);
                }
            }
            Reply::Verbatim(text) if resp3 => {
                header(out, b'=', text.len() as i64 + 4);
                out.put_slice(b"txt:");
                out.put_slice(text.as_bytes());
                out.put_slice(b"\r\n");
            }
            Reply::Verbatim(text) => blob(out, b'$', text.as_bytes()),
        }
    }
}

fn line(out: &mut BytesMut, tag: u8, text: &[u8]) {
    out.put_u8(tag);
    out.put_slice(text);
    out.put_slice(b"\r\n");
}

fn header(out: &mut BytesMut, tag: u8, n: i64) {
    out.put_u8(tag);
    // Writing into a growable buffer cannot fail.
    let _ = write!(out, "{n}");
    out.put_slice(b"\r\n");
}

fn blob(out: &mut BytesMut, tag: u8, bytes: &[u8]) {
    header(out, tag, bytes.len() as i64);
    out.put_slice(bytes);
    out.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(reply: &Reply, protocol: Protocol) -> Vec<u8> {
        let mut out = BytesMut::new();
        reply.encode(protocol, &mut out);
        out.to_vec()
    }

    #[test]
    fn each_kind_encodes_in_both_protocols() {
        let map = Reply::Map(vec![
            (Reply::bulk("proto"), Reply::Integer(3)),
            (Reply::bulk("id"), Reply::Integer(-7)),
        ]);
        for (reply, resp2, resp3) in [
            (Reply::ok(), &b"+OK\r\n"[..], &b"+OK\r\n"[..]),
            (
                Reply::error(&b"ERR a\r\nb"[..]),
                b"-ERR a  b\r\n",
                b"-ERR a  b\r\n",
            ),
            (Reply::Integer(-12), b":-12\r\n", b":-12\r\n"),
            (Reply::bulk(""), b"$0\r\n\r\n", b"$0\r\n\r\n"),
            (Reply::Null, b"$-1\r\n", b"_\r\n"),
            (
                Reply::Array(vec![Reply::Null, Reply::bulk("a")]),
                b"*2\r\n$-1\r\n$1\r\na\r\n",
                b"*2\r\n_\r\n$1\r\na\r\n",
            ),
            (
                Reply::Set(vec![Reply::status("write")]),
                b"*1\r\n+write\r\n",
                b"~1\r\n+write\r\n",
            ),
            (
                map,
                b"*4\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:-7\r\n",
                b"%2\r\n$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:-7\r\n",
            ),
            (
                Reply::Verbatim("# Server\r\n".into()),
                b"$10\r\n# Server\r\n\r\n",
                b"=14\r\ntxt:# Server\r\n\r\n",
            ),
        ] {
            assert_eq!(encoded(&reply, Protocol::Resp2), resp2, "{reply:?}");
            assert_eq!(encoded(&reply, Protocol::Resp3), resp3, "{reply:?}");
        }
    }
}
