//! Redis's glob patterns (KEYS, SCAN MATCH), with the semantics of Redis's `stringmatchlen`
//! to the byte: `*` (any run), `?` (one byte), `[...]` and `[^...]` sets with `a-z` ranges
//! (reversed ranges swapped, bounds compared as C's signed `char`s), `\` escaping the next
//! byte (inside sets too), an unclosed `[` ending the set at the pattern's end, an empty
//! string matched only by an empty pattern, and no match past 1,000 nested `*`s. The glob
//! crates follow shell or path rules (`[!...]`, `/` special, errors on unclosed sets), so
//! this is a small matcher of our own, tested against those rules and, in the differential
//! test, against `redis-server`'s KEYS.

/// Patterns nesting `*`s deeper than this match nothing (Redis's guard against patterns
/// made to take exponential time).
const MAX_NESTING: usize = 1000;

/// Whether `string` matches `pattern`.
pub(crate) fn matches(pattern: &[u8], string: &[u8]) -> bool {
    let mut skip_longer = false;
    match_from(pattern, string, &mut skip_longer, 0)
}

/// What follows a pattern's literal prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rest {
    /// Nothing: the pattern matches its literal bytes alone.
    Nothing,
    /// Only `*`s: every string with the prefix matches, except the empty string (which only
    /// the empty pattern matches).
    Stars,
    /// Any other wildcard.
    Wildcards,
}

/// The literal bytes every match starts with (up to the first wildcard, escapes resolved),
/// and what follows them.
pub(crate) fn literal_prefix(pattern: &[u8]) -> (Vec<u8>, Rest) {
    let mut prefix = Vec::new();
    let mut at = 0;
    while at < pattern.len() {
        match pattern[at] {
            b'*' if pattern[at..].iter().all(|&b| b == b'*') => return (prefix, Rest::Stars),
            b'*' | b'?' | b'[' => return (prefix, Rest::Wildcards),
            b'\\' if at + 1 < pattern.len() => {
                prefix.push(pattern[at + 1]);
                at += 2;
            }
            byte => {
                prefix.push(byte);
                at += 1;
            }
        }
    }
    (prefix, Rest::Nothing)
}

/// The byte at `at`, or 0 past the end (C reads the string's terminating zero there).
fn byte_at(bytes: &[u8], at: usize) -> u8 {
    bytes.get(at).copied().unwrap_or(0)
}

fn match_from(pattern: &[u8], string: &[u8], skip_longer: &mut bool, nesting: usize) -> bool {
    if nesting > MAX_NESTING {
        return false;
    }
    let (mut p, mut s) = (0usize, 0usize);
    while p < pattern.len() && s < string.len() {
        match pattern[p] {
            b'*' => {
                while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                while s < string.len() {
                    if match_from(&pattern[p + 1..], &string[s..], skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s += 1;
                }
                // Nothing after this `*` matches anywhere in the rest of the string, so no
                // earlier `*` taking more can help either.
                *skip_longer = true;
                return false;
            }
            b'?' => s += 1,
            b'[' => {
                p += 1;
                let negate = byte_at(pattern, p) == b'^';
                if negate {
                    p += 1;
                }
                let c = string[s];
                let mut matched = false;
                loop {
                    let left = pattern.len().saturating_sub(p);
                    if byte_at(pattern, p) == b'\\' && left >= 2 {
                        p += 1;
                        if pattern[p] == c {
                            matched = true;
                        }
                    } else if byte_at(pattern, p) == b']' {
                        break;
                    } else if left == 0 {
                        // An unclosed set: step back so the end of the loop below lands on
                        // the pattern's end.
                        p -= 1;
                        break;
                    } else if left >= 3 && pattern[p + 1] == b'-' {
                        // C compares the bounds as signed chars.
                        let (mut start, mut end) = (pattern[p] as i8, pattern[p + 2] as i8);
                        if start > end {
                            std::mem::swap(&mut start, &mut end);
                        }
                        p += 2;
                        if (start..=end).contains(&(c as i8)) {
                            matched = true;
                        }
                    } else if pattern[p] == c {
                        matched = true;
                    }
                    p += 1;
                }
                if matched == negate {
                    return false;
                }
                s += 1;
            }
            byte => {
                let literal = if byte == b'\\' && p + 1 < pattern.len() {
                    p += 1;
                    pattern[p]
                } else {
                    byte
                };
                if literal != string[s] {
                    return false;
                }
                s += 1;
            }
        }
        p += 1;
        if s == string.len() {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            break;
        }
    }
    p == pattern.len() && s == string.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, yes: &[&str], no: &[&str]) {
        for string in yes {
            assert!(
                matches(pattern.as_bytes(), string.as_bytes()),
                "{pattern:?} should match {string:?}"
            );
        }
        for string in no {
            assert!(
                !matches(pattern.as_bytes(), string.as_bytes()),
                "{pattern:?} should not match {string:?}"
            );
        }
    }

    #[test]
    fn stars_and_question_marks() {
        check("*", &["a", "abc"], &[""]);
        check("**", &["a"], &[""]);
        check("", &[""], &["a"]);
        check("a*", &["a", "ab", "a*"], &["", "b", "ba"]);
        check("*a", &["a", "ba", "aaa"], &["ab", ""]);
        check(
            "a*b*c",
            &["abc", "aXbYc", "abbc", "acbc"],
            &["ab", "acb", "abcd"],
        );
        check("h?llo", &["hello", "hallo"], &["hllo", "heello"]);
        check("?", &["x"], &["", "xy"]);
        check("a?*", &["ab", "abc"], &["a"]);
    }

    #[test]
    fn sets_ranges_negations_and_escapes() {
        check("h[ae]llo", &["hello", "hallo"], &["hillo", "hllo"]);
        check("h[^e]llo", &["hallo", "hbllo"], &["hello", "hllo"]);
        check("h[a-b]llo", &["hallo", "hbllo"], &["hcllo"]);
        check("h[b-a]llo", &["hallo", "hbllo"], &["hcllo"]);
        check("[\\]]", &["]"], &["\\", "a"]);
        check("[a\\-z]", &["a", "-", "z"], &["b"]);
        check("\\*", &["*"], &["a", "\\*"]);
        check("a\\", &["a\\"], &["a"]);
        check("\\?x", &["?x"], &["ax"]);
        // `[a-]x]`: the first `]` is the range's end (`]` to `a` once swapped), so the set
        // runs on to the second and holds `]`-`a` and `x` (as redis-server's KEYS answers).
        check("[a-]x]", &["]", "^", "a", "x"], &["]x", "ax", "b", "-"]);
    }

    #[test]
    fn unclosed_sets_end_at_the_pattern_end() {
        check("[", &[], &["[", "a", ""]);
        check("[^", &["a", "["], &["", "ab"]);
        check("a[bc", &["ab", "ac"], &["a", "abc", "ad"]);
        check("a[^bc", &["ad"], &["ab", "a"]);
    }

    #[test]
    fn bytes_above_127_compare_as_signed_chars_in_ranges() {
        // 'a' (97) to 0xff (-1) swaps to -1..=97: bytes 0x00-0x61 and 0xff, not 0x80-0xfe.
        let pattern = b"[a-\xff]";
        assert!(matches(pattern, b"\xff"));
        assert!(matches(pattern, b"A"));
        assert!(!matches(pattern, b"\x80"));
        assert!(!matches(pattern, b"b"));
        assert!(matches(b"[\x80-\xff]", b"\x90"));
        assert!(matches(b"\xe4\xb8*", "中文".as_bytes()));
    }

    #[test]
    fn abusive_patterns_end_quickly_and_deep_ones_match_nothing() {
        let abusive = "a*".repeat(30) + "b";
        assert!(!matches(abusive.as_bytes(), "a".repeat(60).as_bytes()));
        let deep = "*a".repeat(MAX_NESTING + 2);
        assert!(!matches(
            deep.as_bytes(),
            "a".repeat(MAX_NESTING + 2).as_bytes()
        ));
        let shallow = "*a".repeat(10);
        assert!(matches(shallow.as_bytes(), "a".repeat(10).as_bytes()));
    }

    #[test]
    fn literal_prefixes_and_what_follows_them() {
        for (pattern, prefix, rest) in [
            (&b"user:*"[..], &b"user:"[..], Rest::Stars),
            (b"user:**", b"user:", Rest::Stars),
            (b"*", b"", Rest::Stars),
            (b"a\\*b*", b"a*b", Rest::Stars),
            (b"user:*:name", b"user:", Rest::Wildcards),
            (b"a?", b"a", Rest::Wildcards),
            (b"ab[c]", b"ab", Rest::Wildcards),
            (b"exact", b"exact", Rest::Nothing),
            (b"a\\", b"a\\", Rest::Nothing),
            (b"", b"", Rest::Nothing),
        ] {
            assert_eq!(
                literal_prefix(pattern),
                (prefix.to_vec(), rest),
                "{pattern:?}"
            );
        }
    }

    proptest::proptest! {
        /// Every string a pattern matches starts with the pattern's literal prefix, a prefix
        /// and stars match every non-empty string with the prefix, and a pattern without
        /// wildcards matches its literal bytes alone.
        #[test]
        fn the_prefix_bounds_every_match(
            pattern in proptest::collection::vec(proptest::sample::select(b"ab*?[]^-\\".to_vec()), 0..8),
            string in proptest::collection::vec(proptest::sample::select(b"ab*?[]^-\\".to_vec()), 0..8),
        ) {
            let (prefix, rest) = literal_prefix(&pattern);
            if matches(&pattern, &string) {
                proptest::prop_assert!(string.starts_with(&prefix));
            }
            if rest == Rest::Stars && string.starts_with(&prefix) && !string.is_empty() {
                proptest::prop_assert!(matches(&pattern, &string));
            }
            if rest == Rest::Nothing {
                proptest::prop_assert_eq!(matches(&pattern, &string), string == prefix);
            }
        }
    }
}
