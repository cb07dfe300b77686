//! String values: reads, writes, and the read-modify-writes (INCR family, INCRBYFLOAT,
//! APPEND, SETRANGE, SETNX, SET NX/XX/GET, GETSET, GETDEL), each of which holds its key's
//! stripe from its read to its durable write, so no other command on the key slips in
//! between.

use bytes::Bytes;
use pmem_structures::Error;

use super::{
    deadline_of, integer, not_an_integer, store_error, string_value, syntax_error, with_maps,
    wrong_type, Call,
};
use crate::db::DbError;
use crate::numbers::{parse_long_double, LongDouble, ParsedFloat};
use crate::reply::Reply;

pub(super) fn get(call: &mut Call) -> Reply {
    let key = &call.args[1][..];
    with_maps(call.shared, |maps| {
        Ok(string_value(maps, key, maps.keys.get(key)?)?.map_or_else(|e| e, Reply::bulk_or_null))
    })
}

/// What a read-modify-write decided: the value to store (if any) and the reply.
pub(super) type Update = Result<(Option<Vec<u8>>, Reply), Reply>;

/// What a write does to the key's deadline.
#[derive(Clone, Copy)]
pub(super) enum Ttl {
    /// The key keeps the deadline it has (a new key has none): INCR, APPEND, SETRANGE,
    /// SET KEEPTTL.
    Keep,
    /// The key has no deadline after the write: SET, GETSET.
    Clear,
    /// The key has this one: SET EX, SETEX.
    At(u64),
}

/// Whether a write reads the string it replaces (a hash there is then WRONGTYPE) or only
/// whether the key exists (and replaces whatever is there, as SET does a hash).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Old {
    Read,
    Replaced,
}

/// Run `decide` on the current value of `key` with the key's stripe held, store what it
/// returns with the deadline `ttl` says (durably, before the reply) and answer its reply.
/// With `Old::Replaced`, a hash at the key is passed to `decide` as its keyspace value, and
/// replaced if `decide` writes.
pub(super) fn update(
    call: &Call,
    key: &[u8],
    ttl: Ttl,
    old: Old,
    decide: impl FnOnce(Option<Vec<u8>>) -> Update,
) -> Reply {
    let db = &call.shared.db;
    let _locks = db.lock_keys(std::iter::once(key));
    let read = db.with_maps(|maps| {
        let value = maps.keys.get(key)?;
        let value = match old {
            Old::Read => string_value(maps, key, value)?,
            Old::Replaced => Ok(value),
        };
        Ok::<_, Error>((value, maps.deadline(key)?))
    });
    let (old, old_deadline) = match read {
        Ok(Ok((Ok(value), deadline))) => (value, deadline),
        Ok(Ok((Err(reply), _))) => return reply,
        Ok(Err(error)) => return store_error(DbError::Store(error)),
        Err(error) => return store_error(error),
    };
    let existed = old.is_some();
    let (value, reply) = match decide(old) {
        Ok(decided) => decided,
        Err(reply) => return reply,
    };
    let Some(value) = value else {
        return reply;
    };
    let new_deadline = match ttl {
        Ttl::Keep if existed => old_deadline,
        Ttl::Keep | Ttl::Clear => None,
        Ttl::At(deadline) => Some(deadline),
    };
    // A deadline already past is written as it is (Redis 7.0 does the same): the key reads
    // as absent from now on and goes at its next access or active expiry, and DBSIZE
    // counts it until then, as Redis's does.
    match db.write_key(key, &value, old_deadline, new_deadline) {
        Ok(()) => reply,
        Err(error) => store_error(error),
    }
}

/// The options of SET (`getex` false) and GETEX (true) as Redis reads them: later options
/// may not contradict earlier ones.
#[derive(Default)]
pub(super) struct SetOptions {
    only_if_absent: bool,
    only_if_present: bool,
    get: bool,
    keep_ttl: bool,
    pub(super) persist: bool,
    /// An expiry option and its argument.
    pub(super) expiry: Option<(&'static str, Bytes)>,
}

pub(super) fn set_options(options: &[Bytes], getex: bool) -> Result<SetOptions, Reply> {
    let mut parsed = SetOptions::default();
    let mut at = 0;
    while at < options.len() {
        let option = options[at].to_ascii_uppercase();
        let next = options.get(at + 1);
        let expiry_name = match option.as_slice() {
            b"EX" => Some("EX"),
            b"PX" => Some("PX"),
            b"EXAT" => Some("EXAT"),
            b"PXAT" => Some("PXAT"),
            _ => None,
        };
        match (option.as_slice(), expiry_name, next) {
            (b"NX", ..) if !getex && !parsed.only_if_present => parsed.only_if_absent = true,
            (b"XX", ..) if !getex && !parsed.only_if_absent => parsed.only_if_present = true,
            (b"GET", ..) if !getex => parsed.get = true,
            (b"KEEPTTL", ..) if !getex && parsed.expiry.is_none() => parsed.keep_ttl = true,
            (b"PERSIST", ..) if getex && parsed.expiry.is_none() => parsed.persist = true,
            // An expiry option may repeat (the last counts) but not meet another, nor
            // KEEPTTL or PERSIST.
            (_, Some(name), Some(value))
                if !parsed.keep_ttl
                    && !parsed.persist
                    && parsed.expiry.as_ref().is_none_or(|(seen, _)| *seen == name) =>
            {
                parsed.expiry = Some((name, value.clone()));
                at += 1;
            }
            _ => return Err(syntax_error()),
        }
        at += 1;
    }
    Ok(parsed)
}

pub(super) fn set(call: &mut Call) -> Reply {
    let options = match set_options(&call.args[3..], false) {
        Ok(options) => options,
        Err(reply) => return reply,
    };
    let ttl = match &options.expiry {
        Some((option, value)) => match deadline_of(option, value, call.now, "set") {
            Ok(deadline) => Ttl::At(deadline),
            Err(reply) => return reply,
        },
        None if options.keep_ttl => Ttl::Keep,
        None => Ttl::Clear,
    };
    if !(options.only_if_absent || options.only_if_present || options.get)
        && matches!(ttl, Ttl::Clear)
    {
        // A plain write reads nothing.
        return super::multikey::set_pairs(call, &call.args[1..3]);
    }
    let value = call.args[2].to_vec();
    let old = if options.get {
        Old::Read
    } else {
        Old::Replaced
    };
    update(call, &call.args[1], ttl, old, |old| {
        let write = (!options.only_if_absent || old.is_none())
            && (!options.only_if_present || old.is_some());
        let reply = match (options.get, write) {
            (true, _) => Reply::bulk_or_null(old),
            (false, true) => Reply::ok(),
            (false, false) => Reply::Null,
        };
        Ok((write.then_some(value), reply))
    })
}

pub(super) fn setnx(call: &mut Call) -> Reply {
    let value = call.args[2].to_vec();
    update(call, &call.args[1], Ttl::Clear, Old::Replaced, |old| {
        Ok(match old {
            Some(_) => (None, Reply::Integer(0)),
            None => (Some(value), Reply::Integer(1)),
        })
    })
}

/// Redis's check of a string's length after a write, against `--max-value-bytes`.
fn check_length(call: &Call, length: u64) -> Result<(), Reply> {
    if length > call.shared.limits.max_value_bytes as u64 {
        Err(Reply::error(
            "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
        ))
    } else {
        Ok(())
    }
}

pub(super) fn append(call: &mut Call) -> Reply {
    let suffix = &call.args[2];
    update(call, &call.args[1], Ttl::Keep, Old::Read, |old| {
        let mut value = old.unwrap_or_default();
        check_length(call, value.len() as u64 + suffix.len() as u64)?;
        value.extend_from_slice(suffix);
        let length = value.len() as i64;
        Ok((Some(value), Reply::Integer(length)))
    })
}

pub(super) fn strlen(call: &mut Call) -> Reply {
    let key = &call.args[1][..];
    with_maps(call.shared, |maps| {
        Ok(string_value(maps, key, maps.keys.get(key)?)?
            .map_or_else(|e| e, |v| Reply::Integer(v.map_or(0, |v| v.len() as i64))))
    })
}

pub(super) fn setrange(call: &mut Call) -> Reply {
    let offset = match integer(&call.args[2]) {
        Ok(offset) if offset < 0 => return Reply::error("ERR offset is out of range"),
        Ok(offset) => offset as u64,
        Err(reply) => return reply,
    };
    let patch = &call.args[3];
    update(call, &call.args[1], Ttl::Keep, Old::Read, |old| {
        if patch.is_empty() {
            // Nothing to write: the length as it is (0 for no key, which stays absent).
            return Ok((None, Reply::Integer(old.map_or(0, |v| v.len() as i64))));
        }
        check_length(call, offset + patch.len() as u64)?;
        let mut value = old.unwrap_or_default();
        let end = offset as usize + patch.len();
        if value.len() < end {
            value.resize(end, 0);
        }
        value[offset as usize..end].copy_from_slice(patch);
        let length = value.len() as i64;
        Ok((Some(value), Reply::Integer(length)))
    })
}

/// GETRANGE and SUBSTR: Redis's index rules (negative from the end, clamped, empty when
/// both are negative and out of order).
pub(super) fn getrange(call: &mut Call) -> Reply {
    let (start, end) = match (integer(&call.args[2]), integer(&call.args[3])) {
        (Ok(start), Ok(end)) => (start, end),
        (Err(reply), _) | (_, Err(reply)) => return reply,
    };
    let key = &call.args[1][..];
    with_maps(call.shared, |maps| {
        Ok(match string_value(maps, key, maps.keys.get(key)?)? {
            Ok(value) => {
                let value = value.unwrap_or_default();
                Reply::bulk(substring(&value, start, end).to_vec())
            }
            Err(reply) => reply,
        })
    })
}

fn substring(value: &[u8], start: i64, end: i64) -> &[u8] {
    let length = value.len() as i64;
    if start < 0 && end < 0 && start > end {
        return &[];
    }
    let start = if start < 0 { length + start } else { start }.max(0);
    let end = if end < 0 { length + end } else { end }.max(0);
    let end = end.min(length - 1);
    if start > end || length == 0 {
        return &[];
    }
    &value[start as usize..=end as usize]
}

fn incr_by(call: &Call, by: i64) -> Reply {
    update(call, &call.args[1], Ttl::Keep, Old::Read, |old| {
        let current = match old {
            Some(text) => crate::numbers::parse_i64(&text).ok_or_else(not_an_integer)?,
            None => 0,
        };
        let next = current
            .checked_add(by)
            .ok_or_else(|| Reply::error("ERR increment or decrement would overflow"))?;
        Ok((Some(next.to_string().into_bytes()), Reply::Integer(next)))
    })
}

pub(super) fn incr(call: &mut Call) -> Reply {
    incr_by(call, 1)
}

pub(super) fn decr(call: &mut Call) -> Reply {
    incr_by(call, -1)
}

pub(super) fn incrby(call: &mut Call) -> Reply {
    match integer(&call.args[2]) {
        Ok(by) => incr_by(call, by),
        Err(reply) => reply,
    }
}

pub(super) fn decrby(call: &mut Call) -> Reply {
    match integer(&call.args[2]) {
        Ok(i64::MIN) => Reply::error("ERR decrement would overflow"),
        Ok(by) => incr_by(call, -by),
        Err(reply) => reply,
    }
}

pub(super) fn incrbyfloat(call: &mut Call) -> Reply {
    let by = call.args[2].clone();
    update(call, &call.args[1], Ttl::Keep, Old::Read, |old| {
        let not_a_float = || Reply::error("ERR value is not a valid float");
        let current = match old {
            Some(text) => parse_long_double(&text).ok_or_else(not_a_float)?,
            None => ParsedFloat::Finite(LongDouble::default()),
        };
        let by = parse_long_double(&by).ok_or_else(not_a_float)?;
        let sum = match (current, by) {
            (ParsedFloat::Finite(a), ParsedFloat::Finite(b)) => a.checked_add(b),
            _ => None,
        }
        .ok_or_else(|| Reply::error("ERR increment would produce NaN or Infinity"))?;
        let text = sum.to_redis_string();
        Ok((Some(text.clone().into_bytes()), Reply::bulk(text)))
    })
}

/// GETSET: SET with GET, under its old name.
pub(super) fn getset(call: &mut Call) -> Reply {
    let value = call.args[2].to_vec();
    update(call, &call.args[1], Ttl::Clear, Old::Read, |old| {
        Ok((Some(value), Reply::bulk_or_null(old)))
    })
}

/// GETDEL: the value, and the key gone (one store write, the remove returning what it
/// held; with the key's deadline, one batch). WRONGTYPE for a hash, which stays.
pub(super) fn getdel(call: &mut Call) -> Reply {
    let key = &call.args[1][..];
    let db = &call.shared.db;
    let _locks = db.lock_keys(std::iter::once(key));
    match db.with_maps(|maps| maps.read_kind(key)) {
        Ok(Ok(crate::hashes::Kind::Hash(_))) => return wrong_type(),
        Ok(Ok(_)) => {}
        Ok(Err(error)) => return store_error(DbError::Store(error)),
        Err(error) => return store_error(error),
    }
    match db.delete_key(key) {
        Ok(removed) => Reply::bulk_or_null(removed),
        Err(error) => store_error(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substrings_follow_redis_index_rules() {
        let s = b"Hello World";
        for (start, end, expected) in [
            (0, 3, &b"Hell"[..]),
            (-3, -1, b"rld"),
            (0, -1, b"Hello World"),
            (10, 100, b"d"),
            (5, 3, b""),
            (-1, -5, b""),
            (-100, 2, b"Hel"),
            (0, -100, b"H"),
            (i64::MIN, i64::MAX, b"Hello World"),
            (20, 30, b""),
        ] {
            assert_eq!(substring(s, start, end), expected, "{start} {end}");
        }
        assert_eq!(substring(b"", 0, -1), b"");
    }
}
