//! Magic numbers as people read them.
//!
//! Every format in the workspace starts with an 8-byte magic made of ASCII (`b"PMORDPL\0"`,
//! `b"CCEH\0v01"`, ...). An error that prints one as a decimal `u64` or a byte array tells the
//! user nothing; [`MagicText`] prints it as the text it spells, falling back to hex for bytes
//! that are not printable.

use std::fmt;

/// An 8-byte magic, displayed as quoted text with `\0` and `\xNN` escapes, followed by its hex
/// value when any byte is not printable ASCII: `"CCEH\0v01"`, or
/// `"\x9c\x01..." (0x...)` for bytes that spell nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct MagicText(pub [u8; 8]);

impl MagicText {
    /// The magic stored little-endian in `word`, the way the structures keep theirs.
    pub fn from_word(word: u64) -> MagicText {
        MagicText(word.to_le_bytes())
    }

    /// Whether every byte is printable ASCII or a NUL padding byte.
    pub fn is_text(&self) -> bool {
        self.0
            .iter()
            .all(|&b| b == 0 || b.is_ascii_graphic() || b == b' ')
    }
}

impl fmt::Display for MagicText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for &b in &self.0 {
            match b {
                0 => f.write_str("\\0")?,
                b'"' | b'\\' => write!(f, "\\{}", b as char)?,
                b if b.is_ascii_graphic() || b == b' ' => write!(f, "{}", b as char)?,
                b => write!(f, "\\x{b:02x}")?,
            }
        }
        f.write_str("\"")?;
        if !self.is_text() {
            write!(f, " ({:#018x})", u64::from_le_bytes(self.0))?;
        }
        Ok(())
    }
}

impl fmt::Debug for MagicText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::MagicText;

    #[test]
    fn ascii_magics_print_as_their_text() {
        assert_eq!(MagicText(*b"CCEH\0v01").to_string(), "\"CCEH\\0v01\"");
        assert_eq!(
            MagicText::from_word(u64::from_le_bytes(*b"FASTFAIR")).to_string(),
            "\"FASTFAIR\""
        );
    }

    #[test]
    fn other_bytes_print_escaped_with_the_hex_value() {
        let text = MagicText([0x9c, b'a', 0, 0, 0, 0, 0, 0xff]).to_string();
        assert_eq!(text, "\"\\x9ca\\0\\0\\0\\0\\0\\xff\" (0xff0000000000619c)");
    }
}
