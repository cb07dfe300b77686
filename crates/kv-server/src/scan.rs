//! SCAN and KEYS in key order: MATCH patterns and the cursors that resume a scan.
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
use crate::glob::{self, Rest};

/// A MATCH pattern: Redis's glob, and the key range its literal prefix bounds (so `user:*`
/// walks the `user:` keys alone, and a pattern without wildcards looks up one key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pattern {
    glob: Vec<u8>,
    prefix: Vec<u8>,
    rest: Rest,
}

impl Pattern {
    pub(crate) fn new(glob: &[u8]) -> Pattern {
        let (prefix, rest) = glob::literal_prefix(glob);
        Pattern {
            glob: glob.to_vec(),
            prefix,
            rest,
        }
    }

    /// Every key: `*` alone (which, unlike other patterns, matches the empty key too).
    pub(crate) fn all() -> Pattern {
        Pattern::new(b"*")
    }

    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        self.glob == b"*" || glob::matches(&self.glob, key)
    }

    /// The key range the pattern covers, starting after `resume` when there is one.
    pub(crate) fn range(&self, resume: Option<&[u8]>) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        let low = Bound::Included(self.prefix.clone());
        let high = match self.rest {
            Rest::Nothing => Bound::Included(self.prefix.clone()),
            Rest::Stars | Rest::Wildcards => prefix_end(&self.prefix),
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
    fn patterns_bound_their_range_by_their_literal_prefix() {
        let range = |glob: &[u8]| Pattern::new(glob).range(None);
        assert_eq!(
            range(b"user:*"),
            (
                Bound::Included(b"user:".to_vec()),
                Bound::Excluded(b"user;".to_vec())
            )
        );
        assert_eq!(
            range(b"user:*:name"),
            (
                Bound::Included(b"user:".to_vec()),
                Bound::Excluded(b"user;".to_vec())
            )
        );
        assert_eq!(
            range(b"a\\*b"),
            (
                Bound::Included(b"a*b".to_vec()),
                Bound::Included(b"a*b".to_vec())
            )
        );
        assert_eq!(range(b"*"), (Bound::Included(Vec::new()), Bound::Unbounded));
        assert_eq!(
            range(b"?x"),
            (Bound::Included(Vec::new()), Bound::Unbounded)
        );
        assert!(Pattern::all().matches(b""));
        assert!(!Pattern::new(b"**").matches(b""));
        assert!(Pattern::new(b"user:*:name").matches(b"user:7:name"));
        assert!(!Pattern::new(b"user:*:name").matches(b"user:7:mail"));
    }

    #[test]
    fn a_resumed_range_starts_after_the_resume_key_but_never_below_the_prefix() {
        let pattern = Pattern::new(b"b*");
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
