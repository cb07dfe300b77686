//! Requests out of a connection's read buffer.
//!
//! A request is a RESP array of bulk strings (what every client sends, in RESP2 and RESP3
//! alike) or an inline command (a line of text, as `telnet` sends; split by [`crate::inline`]).
//! A guard walks the headers of the request under way (counts and lengths only, resuming
//! where the last read stopped), reads their integers as Redis does (no `+`, no leading
//! zeros), holds them to the [`Limits`] and notes where each bulk string lies: so no request
//! waits on a bulk string larger than the server accepts, nor nests arrays (no client sends
//! them). Once the whole array has arrived, its arguments are cut out of the buffer at the
//! places noted (each a view of the one read buffer, nothing copied), without a second
//! parse. A request refused here gets Redis's error text and closes the connection.

use bytes::{Bytes, BytesMut};

use crate::config::Limits;

/// What the buffer holds next.
#[derive(Debug)]
pub enum Next {
    /// A whole request: its arguments, the command name first (never empty).
    Request(Vec<Bytes>),
    /// Not a whole request yet: read more.
    Incomplete,
    /// A request the connection cannot be read past: reply with this message (after
    /// `ERR Protocol error: `) and close.
    Fatal(Vec<u8>),
}

/// How far the guard has checked the request at the head of the buffer.
#[derive(Debug, Default)]
pub struct Framer {
    /// Bytes of the request already checked (its array header and whole bulk strings).
    checked: usize,
    /// Bulk strings of the request still to check (`None` before the array header).
    remaining: Option<usize>,
    /// Each checked bulk string's start and length, from the request's start (kept between
    /// requests for its capacity).
    spans: Vec<(usize, usize)>,
}

impl Framer {
    /// Take the next request out of `buf` (or say why not).
    pub fn next(&mut self, buf: &mut BytesMut, limits: &Limits) -> Next {
        loop {
            let Some(&first) = buf.first() else {
                return Next::Incomplete;
            };
            if first != b'*' {
                return match inline(buf, limits) {
                    Inline::Request(args) => Next::Request(args),
                    Inline::Blank => continue,
                    Inline::Incomplete => Next::Incomplete,
                    Inline::Fatal(message) => Next::Fatal(message),
                };
            }
            match self.guard(buf, limits) {
                Guard::Complete => {}
                Guard::Empty(len) => {
                    // `*0` and `*-1` carry no command: Redis skips them.
                    let _ = buf.split_to(len);
                    self.reset();
                    continue;
                }
                Guard::Incomplete => return Next::Incomplete,
                Guard::Fatal(message) => return Next::Fatal(message),
            }
            // The guard saw the whole array: its bulk strings are where it noted them.
            let request = buf.split_to(self.checked).freeze();
            let args = self
                .spans
                .iter()
                .map(|&(at, len)| request.slice(at..at + len))
                .collect();
            self.reset();
            return Next::Request(args);
        }
    }

    /// Ready for the next request.
    fn reset(&mut self) {
        self.checked = 0;
        self.remaining = None;
        self.spans.clear();
    }

    /// Check the array at the head of `buf`, from where the last call stopped.
    fn guard(&mut self, buf: &[u8], limits: &Limits) -> Guard {
        if self.remaining.is_none() {
            let Some((count, len)) = header(buf, b'*') else {
                return incomplete_or_overlong(buf, "multibulk");
            };
            // Redis's words for a count it cannot read and for one over its limit alike.
            let invalid = || Guard::Fatal(b"invalid multibulk length".to_vec());
            let Ok(count) = count else {
                return invalid();
            };
            if count <= 0 {
                return Guard::Empty(len);
            }
            if count as u64 > limits.max_args as u64 {
                return invalid();
            }
            self.checked = len;
            self.remaining = Some(count as usize);
        }
        while let Some(remaining @ 1..) = self.remaining {
            let rest = &buf[self.checked..];
            match rest.first() {
                None => return Guard::Incomplete,
                Some(b'$') => {}
                Some(&other) => {
                    let mut message = b"expected '$', got '".to_vec();
                    message.extend([other, b'\'']);
                    return Guard::Fatal(message);
                }
            }
            let Some((bulk, len)) = header(rest, b'$') else {
                return incomplete_or_overlong(rest, "bulk");
            };
            // Unreadable, negative, or over the limit (Redis's words for all three).
            let bulk = match bulk {
                Ok(bulk) if bulk >= 0 && bulk as u64 <= limits.max_value_bytes as u64 => {
                    bulk as u64
                }
                _ => return Guard::Fatal(b"invalid bulk length".to_vec()),
            };
            let end = len + bulk as usize;
            if rest.len() < end + 2 {
                return Guard::Incomplete;
            }
            // Redis skips these two bytes unread; a client whose length is wrong is told.
            if &rest[end..end + 2] != b"\r\n" {
                return Guard::Fatal(b"a bulk string not ended by CRLF".to_vec());
            }
            self.spans.push((self.checked + len, bulk as usize));
            self.checked += end + 2;
            self.remaining = Some(remaining - 1);
        }
        Guard::Complete
    }
}

/// What the guard found.
enum Guard {
    Complete,
    /// An array of no elements, this many bytes long.
    Empty(usize),
    Incomplete,
    Fatal(Vec<u8>),
}

/// The longest header line (`*` or `$`, a 64-bit count, CRLF) worth waiting for.
const MAX_HEADER: usize = 32;

/// A header line `<tag><integer>\r\n` at the head of `buf`: its integer as Redis reads one
/// (or `Err` if it is none) and its length; `None` until the CRLF has arrived.
fn header(buf: &[u8], tag: u8) -> Option<(Result<i64, ()>, usize)> {
    debug_assert_eq!(buf.first(), Some(&tag));
    let end = buf.iter().take(MAX_HEADER).position(|&b| b == b'\n')?;
    let value = buf[1..end]
        .strip_suffix(b"\r")
        .and_then(crate::numbers::parse_i64)
        .ok_or(());
    Some((value, end + 1))
}

/// A header still without its line end: wait for it, unless it is already longer than any
/// count could be (Redis would wait longer for the line end, then refuse the count).
fn incomplete_or_overlong(buf: &[u8], what: &str) -> Guard {
    if buf.len() >= MAX_HEADER {
        Guard::Fatal(format!("invalid {what} length").into_bytes())
    } else {
        Guard::Incomplete
    }
}

/// What an inline command line gave.
enum Inline {
    Request(Vec<Bytes>),
    /// A line of nothing but blanks: skipped.
    Blank,
    Incomplete,
    Fatal(Vec<u8>),
}

/// An inline command: one line, split as Redis splits it.
fn inline(buf: &mut BytesMut, limits: &Limits) -> Inline {
    let Some(end) = buf
        .iter()
        .take(limits.max_inline_bytes + 1)
        .position(|&b| b == b'\n')
    else {
        return if buf.len() > limits.max_inline_bytes {
            Inline::Fatal(b"too big inline request".to_vec())
        } else {
            Inline::Incomplete
        };
    };
    let line = buf.split_to(end + 1);
    let text = line[..end].strip_suffix(b"\r").unwrap_or(&line[..end]);
    let Some(args) = crate::inline::split(text) else {
        return Inline::Fatal(b"unbalanced quotes in request".to_vec());
    };
    if args.is_empty() {
        return Inline::Blank;
    }
    if args.len() > limits.max_args {
        return Inline::Fatal(b"invalid multibulk length".to_vec());
    }
    Inline::Request(args.into_iter().map(Bytes::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(input: &[u8], limits: &Limits) -> (Vec<Vec<Vec<u8>>>, Option<String>, usize) {
        let fatal = |message: Vec<u8>| String::from_utf8_lossy(&message).into_owned();
        let mut buf = BytesMut::from(input);
        let mut framer = Framer::default();
        let mut requests = Vec::new();
        loop {
            match framer.next(&mut buf, limits) {
                Next::Request(args) => {
                    requests.push(args.iter().map(|a| a.to_vec()).collect());
                }
                Next::Incomplete => return (requests, None, buf.len()),
                Next::Fatal(message) => return (requests, Some(fatal(message)), buf.len()),
            }
        }
    }

    #[test]
    fn a_pipeline_of_arrays_and_inline_commands_frames_in_order() {
        let input = b"*1\r\n$4\r\nPING\r\nSET a  b\r\n*2\r\n$3\r\nGET\r\n$1\r\na\r\n\r\n*0\r\n";
        let (requests, fatal, left) = frames(input, &Limits::default());
        assert_eq!(fatal, None);
        assert_eq!(left, 0);
        let expected: Vec<Vec<&[u8]>> =
            vec![vec![b"PING"], vec![b"SET", b"a", b"b"], vec![b"GET", b"a"]];
        assert_eq!(requests, expected);
    }

    #[test]
    fn bulk_strings_are_cut_at_their_lengths_whatever_bytes_they_hold() {
        // An empty argument, one holding CRLF and a `$`, binary bytes; then a second
        // request in the same buffer, and the start of a third.
        let input = b"*4\r\n$3\r\nSET\r\n$0\r\n\r\n$5\r\n\r\n$\r\n\r\n$2\r\n\x00\xff\r\n\
                      *2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGE";
        let (requests, fatal, left) = frames(input, &Limits::default());
        assert_eq!(fatal, None);
        let expected: Vec<Vec<&[u8]>> = vec![
            vec![b"SET", b"", b"\r\n$\r\n", b"\x00\xff"],
            vec![b"GET", b"k"],
        ];
        assert_eq!(requests, expected);
        assert_eq!(left, b"*2\r\n$3\r\nGE".len());
    }

    #[test]
    fn a_request_split_anywhere_waits_then_frames_once_whole() {
        let whole = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n";
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            let mut framer = Framer::default();
            assert!(
                matches!(framer.next(&mut buf, &Limits::default()), Next::Incomplete),
                "cut at {cut}"
            );
            buf.extend_from_slice(&whole[cut..]);
            match framer.next(&mut buf, &Limits::default()) {
                Next::Request(args) => assert_eq!(args.len(), 3, "cut at {cut}"),
                other => panic!("cut at {cut}: {other:?}"),
            }
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn oversize_bulk_strings_and_arrays_are_refused_before_they_arrive() {
        let limits = Limits {
            max_value_bytes: 10,
            max_args: 4,
            ..Limits::default()
        };
        let (_, fatal, _) = frames(b"*2\r\n$3\r\nGET\r\n$11\r\n", &limits);
        assert_eq!(fatal.as_deref(), Some("invalid bulk length"));
        let (requests, fatal, _) = frames(b"*2\r\n$3\r\nGET\r\n$10\r\n0123456789\r\n", &limits);
        assert_eq!((requests.len(), fatal), (1, None));
        let (_, fatal, _) = frames(b"*5\r\n", &limits);
        assert_eq!(fatal.as_deref(), Some("invalid multibulk length"));
        let (_, fatal, _) = frames(b"a b c d e\r\n", &limits);
        assert_eq!(fatal.as_deref(), Some("invalid multibulk length"));
    }

    #[test]
    fn header_integers_are_read_as_redis_reads_them() {
        let limits = Limits::default();
        for (input, expected) in [
            (&b"*01\r\n"[..], "invalid multibulk length"),
            (b"*+1\r\n", "invalid multibulk length"),
            (b"*-0\r\n", "invalid multibulk length"),
            (b"* 1\r\n", "invalid multibulk length"),
            (b"*1\r\n$04\r\nPING\r\n", "invalid bulk length"),
            (b"*1\r\n$+4\r\nPING\r\n", "invalid bulk length"),
            (b"*1\r\n$-0\r\n", "invalid bulk length"),
        ] {
            let (requests, fatal, _) = frames(input, &limits);
            assert!(requests.is_empty());
            assert_eq!(fatal.as_deref(), Some(expected), "{input:?}");
        }
        let (requests, fatal, _) = frames(b"*1\r\n$4\r\nPING\r\n*0\r\n*-1\r\n", &limits);
        assert_eq!((requests.len(), fatal), (1, None));
    }

    #[test]
    fn malformed_headers_are_fatal_and_name_the_problem() {
        let limits = Limits::default();
        for (input, expected) in [
            (&b"*x\r\n"[..], "invalid multibulk length"),
            (b"*1\r\n:5\r\n", "expected '$', got ':'"),
            (b"*1\r\n\xff", "expected '$', got '\u{fffd}'"),
            (b"*1\r\n$-2\r\n", "invalid bulk length"),
            (b"*1\r\n$2\r\nabcd\r\n", "not ended by CRLF"),
            (b"*1\r\n*1\r\n$1\r\na\r\n", "expected '$', got '*'"),
            (
                b"*11111111111111111111111111111111111",
                "invalid multibulk length",
            ),
        ] {
            let (requests, fatal, _) = frames(input, &limits);
            assert!(requests.is_empty());
            let fatal = fatal.unwrap_or_else(|| panic!("{input:?} was accepted"));
            assert!(fatal.contains(expected), "{input:?}: {fatal}");
        }
    }

    #[test]
    fn inline_lines_past_the_limit_or_with_unbalanced_quotes_are_fatal() {
        let limits = Limits {
            max_inline_bytes: 16,
            ..Limits::default()
        };
        let (_, fatal, _) = frames(&[b'a'; 17], &limits);
        assert_eq!(fatal.as_deref(), Some("too big inline request"));
        let (requests, fatal, _) = frames(b"GET 0123456789\n", &limits);
        assert_eq!((requests.len(), fatal), (1, None));
        let (requests, fatal, _) = frames(b"SET a \"b c\"\r\nGET 'x\n", &Limits::default());
        assert_eq!(
            requests,
            vec![vec![b"SET".to_vec(), b"a".to_vec(), b"b c".to_vec()]]
        );
        assert_eq!(fatal.as_deref(), Some("unbalanced quotes in request"));
    }
}
