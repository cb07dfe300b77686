//! What a [`Write`] does to the keyspace, inside the write batch that also records the
//! entry's log id: the same bytes and replies on every node, as Redis 7 answers them.

use pmem_structures::raw::pmem_ordering::Backend;
use pmem_structures::{BTreeMap, Error, WriteBatch};

use crate::types::{Condition, Outcome, Write};

/// The keyspace map's type.
pub type Keyspace<B> = BTreeMap<Vec<u8>, Vec<u8>, B>;

/// Redis's reply to `INCR` on a value that is not a 64-bit decimal integer.
pub const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
/// Redis's reply to an `INCRBY` past the 64-bit range.
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";

/// Apply `write` (any but a flush, which is not a batch: `core.rs`) to `keys` in `batch`.
/// An `Ok(Outcome::Error)` is a refusal every node makes alike (nothing written); an `Err` is
/// the store's refusal, which the caller turns into a refusal of the whole entry.
pub fn apply_in<B: Backend>(
    keys: &Keyspace<B>,
    batch: &mut WriteBatch<B>,
    write: &Write,
) -> Result<Outcome, Error> {
    match write {
        Write::Set {
            key,
            value,
            when,
            get,
            integer_reply,
        } => {
            let old = keys.get_in(batch, key)?;
            let writes = match when {
                Condition::Always => true,
                Condition::IfAbsent => old.is_none(),
                Condition::IfPresent => old.is_some(),
            };
            if writes {
                keys.put_in(batch, key, value)?;
            }
            Ok(if *integer_reply {
                Outcome::Integer(i64::from(writes))
            } else if *get {
                old.map_or(Outcome::Null, Outcome::Bulk)
            } else if writes {
                Outcome::Ok
            } else {
                Outcome::Null
            })
        }
        Write::Append { key, value } => {
            let mut new = keys.get_in(batch, key)?.unwrap_or_default();
            new.extend_from_slice(value);
            let len = new.len() as i64;
            keys.put_in(batch, key, new)?;
            Ok(Outcome::Integer(len))
        }
        Write::IncrBy { key, by } => {
            let old = match keys.get_in(batch, key)? {
                None => 0,
                Some(bytes) => match parse_integer(&bytes) {
                    Some(n) => n,
                    None => return Ok(Outcome::Error(NOT_AN_INTEGER.into())),
                },
            };
            let Some(new) = old.checked_add(*by) else {
                return Ok(Outcome::Error(OVERFLOW.into()));
            };
            keys.put_in(batch, key, new.to_string().into_bytes())?;
            Ok(Outcome::Integer(new))
        }
        Write::MSet { pairs } => {
            for (key, value) in pairs {
                keys.put_in(batch, key, value)?;
            }
            Ok(Outcome::Ok)
        }
        Write::Del { keys: names } => {
            let mut removed = 0;
            for key in names {
                if keys.remove_in(batch, key)?.is_some() {
                    removed += 1;
                }
            }
            Ok(Outcome::Integer(removed))
        }
        Write::Flush => Err(Error::InvalidConfig {
            reason: "a flush is not applied in a write batch".into(),
        }),
    }
}

/// A value as Redis reads it for `INCR`: a decimal `i64`, no sign but `-`, no leading zero,
/// no space.
pub fn parse_integer(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && text != "-0";
    if canonical {
        text.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::parse_integer;

    #[test]
    fn integers_parse_as_redis_reads_them() {
        assert_eq!(parse_integer(b"42"), Some(42));
        assert_eq!(parse_integer(b"-7"), Some(-7));
        assert_eq!(parse_integer(b"0"), Some(0));
        assert_eq!(parse_integer(b"9223372036854775807"), Some(i64::MAX));
        for bad in [
            &b""[..],
            b"+1",
            b"01",
            b" 1",
            b"1 ",
            b"-0",
            b"1.0",
            b"9223372036854775808",
            b"x",
        ] {
            assert_eq!(
                parse_integer(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
