//! SCAN in key order: MATCH patterns and the cursors that resume a scan.
//!
//! Clients treat a cursor as a decimal number (redis-cli parses it with `strtoull`), but a
//! scan of an ordered map resumes after a key, and keys are up to 64 KiB. So the server keeps
//! the key each cursor resumes after, in a table bounded in entries and bytes; the oldest
//! cursors are forgotten first, and a forgotten (or made-up) cursor gets an error rather than
//! a silent restart. Like Redis's, a full scan returns every key present for its whole
//! duration; unlike Redis's, it returns each key once, in order.

use std::collections::{HashMap, VecDeque};
use std::ops::Bound;

use crate::db::prefix_end;

/// What a MATCH pattern selects: keys with a prefix, or one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// Keys starting with these bytes (`user:*`; `*` is the empty prefix).
    Prefix(Vec<u8>),
    /// Exactly this key (a pattern without wildcards).
    Exact(Vec<u8>),
}

impl Pattern {
    /// Parse a Redis glob pattern made of literal bytes (`\` escapes the next one) and at
    /// most one `*`, at the end; any other wildcard is refused with the reason.
    pub(crate) fn parse(glob: &[u8]) -> Result<Pattern, String> {
        let mut literal = Vec::with_capacity(glob.len());
        let mut bytes = glob.iter().copied().enumerate();
        while let Some((at, byte)) = bytes.next() {
            match byte {
                b'\\' => match bytes.next() {
                    Some((_, escaped)) => literal.push(escaped),
                    None => literal.push(b'\\'),
                },
                b'*' if at + 1 == glob.len() => return Ok(Pattern::Prefix(literal)),
                b'*' | b'?' | b'[' => {
                    return Err(format!(
                        "MATCH takes prefix patterns only (literal bytes, then one '*' at the end, such as user:*): '{}' has '{}' at byte {at}",
                        String::from_utf8_lossy(glob),
                        char::from(byte)
                    ))
                }
                literal_byte => literal.push(literal_byte),
            }
        }
        Ok(Pattern::Exact(literal))
    }

    /// The key range the pattern covers, starting after `resume` when there is one.
    pub(crate) fn range(&self, resume: Option<&[u8]>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let (low, high) = match self {
            Pattern::Prefix(prefix) => (Bound::Included(prefix.clone()), prefix_end(prefix)),
            Pattern::Exact(key) => (Bound::Included(key.clone()), Bound::Included(key.clone())),
        };
        match resume {
            Some(after) if !below_low(after, &low) => (Bound::Excluded(after.to_vec()), high),
            _ => (low, high),
        }
    }
}

/// Whether `key` sorts before the inclusive lower bound `low`.
fn below_low(key: &[u8], low: &Bound<Vec<u8>>) -> bool {
    match low {
        Bound::Included(low) => key < low.as_slice(),
        Bound::Excluded(low) => key <= low.as_slice(),
        Bound::Unbounded => false,
    }
}

/// How many cursors the table keeps at most.
const MAX_CURSORS: usize = 100_000;
/// How many bytes of resume keys the table keeps at most.
const MAX_CURSOR_BYTES: usize = 64 << 20;

/// The keys scans resume after, by cursor number.
pub(crate) struct Cursors {
    next: u64,
    keys: HashMap<u64, Vec<u8>>,
    /// Cursor numbers, oldest first.
    order: VecDeque<u64>,
    bytes: usize,
}

impl Cursors {
    /// An empty table whose numbers start at `seed` (made different per run, so a cursor a
    /// client kept across a restart is unknown rather than another scan's).
    pub(crate) fn new(seed: u64) -> Cursors {
        Cursors {
            next: seed.max(1),
            keys: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
        }
    }

    /// A cursor that resumes after `key`.
    pub(crate) fn issue(&mut self, key: Vec<u8>) -> u64 {
        while self.order.len() >= MAX_CURSORS || self.bytes + key.len() > MAX_CURSOR_BYTES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(old) = self.keys.remove(&oldest) {
                self.bytes -= old.len();
            }
        }
        // 0 means "done" to clients and the number must parse as a u64.
        let cursor = self.next;
        self.next = self.next.checked_add(1).unwrap_or(1);
        self.bytes += key.len();
        self.keys.insert(cursor, key);
        self.order.push_back(cursor);
        cursor
    }

    /// The key `cursor` resumes after (`None` if the table never issued it or forgot it).
    pub(crate) fn resume(&self, cursor: u64) -> Option<&[u8]> {
        self.keys.get(&cursor).map(Vec::as_slice)
    }

    /// Forget every cursor (FLUSHDB: their keys are gone).
    pub(crate) fn clear(&mut self) {
        self.keys.clear();
        self.order.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_and_exact_patterns_parse_and_wildcards_elsewhere_are_refused() {
        assert_eq!(
            Pattern::parse(b"user:*"),
            Ok(Pattern::Prefix(b"user:".to_vec()))
        );
        assert_eq!(Pattern::parse(b"*"), Ok(Pattern::Prefix(Vec::new())));
        assert_eq!(
            Pattern::parse(b"a\\*b"),
            Ok(Pattern::Exact(b"a*b".to_vec()))
        );
        assert_eq!(
            Pattern::parse(b"a\\**"),
            Ok(Pattern::Prefix(b"a*".to_vec()))
        );
        for glob in [&b"*a"[..], b"a?*", b"a[bc]*", b"a**"] {
            let error = Pattern::parse(glob).unwrap_err();
            assert!(error.contains("prefix patterns only"), "{error}");
        }
    }

    #[test]
    fn a_resumed_range_starts_after_the_resume_key_but_never_below_the_prefix() {
        let pattern = Pattern::Prefix(b"b".to_vec());
        assert_eq!(
            pattern.range(Some(b"a")),
            (
                Bound::Included(b"b".to_vec()),
                Bound::Excluded(b"c".to_vec())
            )
        );
        assert_eq!(
            pattern.range(Some(b"b7")),
            (
                Bound::Excluded(b"b7".to_vec()),
                Bound::Excluded(b"c".to_vec())
            )
        );
    }

    #[test]
    fn the_table_forgets_its_oldest_cursors_first() {
        let mut cursors = Cursors::new(7);
        let first = cursors.issue(vec![0; 10]);
        let later: Vec<u64> = (0..MAX_CURSORS).map(|_| cursors.issue(vec![1])).collect();
        assert_eq!(cursors.resume(first), None);
        assert_eq!(cursors.resume(later[0]), Some(&[1u8][..]));
        assert_ne!(first, 0);
        let big = cursors.issue(vec![2; MAX_CURSOR_BYTES]);
        assert_eq!(cursors.resume(later[MAX_CURSORS - 1]), None);
        assert_eq!(cursors.resume(big).map(<[u8]>::len), Some(MAX_CURSOR_BYTES));
        cursors.clear();
        assert_eq!(cursors.resume(big), None);
    }
}
