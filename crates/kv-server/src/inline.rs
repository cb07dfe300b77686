//! Inline commands (a line of text, as `telnet` or `redis-cli` piped sends them) split into
//! arguments as Redis's `sdssplitargs` splits them: blanks between arguments; `"..."` with
//! `\n`, `\r`, `\t`, `\b`, `\a`, `\xHH` and `\<any byte>` escapes; `'...'` with `\'` alone;
//! a quote inside a word opening a quoted part; a closing quote followed by anything but a
//! blank, or a quote never closed, refusing the line ("unbalanced quotes"). As in C, the line
//! ends at a zero byte.

/// C's `isspace` in the C locale: what separates arguments.
fn is_blank(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// The arguments of `line` (without its line end), or `None` for unbalanced quotes.
pub(crate) fn split(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    // Past the end reads as C's terminating zero.
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut args = Vec::new();
    let mut p = 0;
    loop {
        while p < line.len() && is_blank(line[p]) {
            p += 1;
        }
        if p == line.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        // The quote the word is inside, if any.
        let mut quote = None;
        loop {
            let byte = at(p);
            let escape_at = byte == b'\\' && p + 1 < line.len();
            match quote {
                Some(b'"')
                    if escape_at
                        && at(p + 1) == b'x'
                        && at(p + 2).is_ascii_hexdigit()
                        && at(p + 3).is_ascii_hexdigit() =>
                {
                    let hex = |b: u8| char::from(b).to_digit(16).unwrap_or(0) as u8;
                    current.push(hex(at(p + 2)) * 16 + hex(at(p + 3)));
                    p += 3;
                }
                Some(b'"') if escape_at => {
                    p += 1;
                    current.push(match line[p] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => b'\x08',
                        b'a' => b'\x07',
                        other => other,
                    });
                }
                Some(b'\'') if escape_at && at(p + 1) == b'\'' => {
                    p += 1;
                    current.push(b'\'');
                }
                Some(closing) if byte == closing => {
                    // A closing quote ends the word: a blank or the line's end must follow.
                    if p + 1 < line.len() && !is_blank(line[p + 1]) {
                        return None;
                    }
                    p += 1;
                    break;
                }
                // The line ended inside quotes.
                Some(_) if p == line.len() => return None,
                Some(_) => current.push(byte),
                None if p == line.len() || matches!(byte, b' ' | b'\n' | b'\r' | b'\t') => {
                    // Only these end an unquoted word (a vertical tab or form feed is part
                    // of it, though the blanks before a word skip them); C steps past the
                    // end.
                    p = (p + 1).min(line.len());
                    break;
                }
                None if byte == b'"' || byte == b'\'' => quote = Some(byte),
                None => current.push(byte),
            }
            p += 1;
        }
        args.push(current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Option<Vec<String>> {
        split(line.as_bytes()).map(|args| {
            args.into_iter()
                .map(|a| String::from_utf8_lossy(&a).into_owned())
                .collect()
        })
    }

    #[test]
    fn blanks_separate_and_quotes_group() {
        assert_eq!(words("SET  k\t v").unwrap(), ["SET", "k", "v"],);
        assert_eq!(words("set \"a b\" 'c d'").unwrap(), ["set", "a b", "c d"]);
        assert_eq!(words("  ").unwrap(), Vec::<String>::new());
        assert_eq!(words("a\"b c\"").unwrap(), ["ab c"]);
        assert_eq!(words("\"\"").unwrap(), [""]);
        assert_eq!(words("''").unwrap(), [""]);
        assert_eq!(words("a\x0bb").unwrap(), ["a\x0bb"]);
        assert_eq!(words("\x0ba").unwrap(), ["a"]);
    }

    #[test]
    fn escapes_inside_quotes() {
        assert_eq!(
            split(b"\"\\x41\\n\\r\\t\\b\\a\\\"\\\\\\q\\x4\"").unwrap(),
            [b"A\n\r\t\x08\x07\"\\qx4".to_vec()]
        );
        assert_eq!(words("'it\\'s' '\\n'").unwrap(), ["it's", "\\n"]);
        assert_eq!(split(b"\"\\xff\\x00\"").unwrap(), [vec![0xff, 0]]);
    }

    #[test]
    fn unbalanced_quotes_refuse_the_line() {
        for line in ["\"abc", "'abc", "\"a\"b", "'a'b", "set \"k", "\"\\\""] {
            assert_eq!(words(line), None, "{line:?}");
        }
        assert_eq!(words("\"a\" b").unwrap(), ["a", "b"]);
    }

    #[test]
    fn a_zero_byte_ends_the_line() {
        assert_eq!(
            split(b"get a\0b c").unwrap(),
            [b"get".to_vec(), b"a".to_vec()]
        );
        assert_eq!(split(b"\"ab\0cd\"").unwrap_or_default().len(), 0);
    }
}
