//! What a structure's name may be.

use super::catalog::MAX_NAME_BYTES;
use super::error::Error;

/// Check `name`: 1 to [`MAX_NAME_BYTES`] bytes of UTF-8 without control characters.
pub(super) fn check_name(name: &str) -> Result<(), Error> {
    let refuse = |reason| {
        Err(Error::InvalidName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return refuse("a name has at least one character");
    }
    if name.len() > MAX_NAME_BYTES {
        return refuse("a name has at most 64 bytes");
    }
    if name.chars().any(char::is_control) {
        return refuse("a name has no control characters");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check_name;
    use crate::store::Error;

    #[test]
    fn names_are_checked() {
        assert!(check_name("users").is_ok());
        assert!(check_name("übersicht/2026").is_ok());
        assert!(check_name(&"x".repeat(64)).is_ok());
        for bad in ["", "a\0b", "tab\t", &"x".repeat(65)] {
            assert!(
                matches!(check_name(bad), Err(Error::InvalidName { .. })),
                "{bad:?}"
            );
        }
    }
}
