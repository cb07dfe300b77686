//! Expiry times: `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT` (with `NX`, `XX`, `GT`, `LT`),
//! `TTL`, `PTTL`, `EXPIRETIME`, `PEXPIRETIME`, `PERSIST`, `SETEX`, `PSETEX`, `GETEX`, with
//! Redis 7's replies and errors. Each change of a key's deadline holds the key's stripe from
//! its read to its durable write (see `crate::expiry` for where deadlines live).

use pmem_structures::Error;

use super::deadline_of;
use super::strings::{set_options, update, Old, Ttl};
use super::{integer, store_error, string_value, Call};
use crate::db::DbError;
use crate::reply::Reply;

/// `EXPIRE`'s conditions on the key's current deadline.
#[derive(Default)]
struct Conditions {
    /// Only a key without a deadline.
    nx: bool,
    /// Only a key with one.
    xx: bool,
    /// Only to a later deadline (no deadline counts as infinitely late).
    gt: bool,
    /// Only to an earlier one.
    lt: bool,
}

fn conditions(options: &[bytes::Bytes]) -> Result<Conditions, Reply> {
    let mut parsed = Conditions::default();
    for option in options {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" => parsed.nx = true,
            b"XX" => parsed.xx = true,
            b"GT" => parsed.gt = true,
            b"LT" => parsed.lt = true,
            _ => {
                // As C prints it: up to a zero byte.
                let end = option.iter().position(|&b| b == 0).unwrap_or(option.len());
                let mut message = b"ERR Unsupported option ".to_vec();
                message.extend_from_slice(&option[..end]);
                return Err(Reply::error(message));
            }
        }
    }
    if parsed.nx && (parsed.xx || parsed.gt || parsed.lt) {
        return Err(Reply::error(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if parsed.gt && parsed.lt {
        return Err(Reply::error(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(parsed)
}

impl Conditions {
    /// Whether the deadline `when` may replace `current`.
    fn allow(&self, current: Option<u64>, when: i64) -> bool {
        let current = current.map(|c| c as i64);
        !(self.nx && current.is_some()
            || self.xx && current.is_none()
            || self.gt && current.is_none_or(|c| when <= c)
            || self.lt && current.is_some_and(|c| when >= c))
    }
}

/// A key's value and its deadline, if it has one.
type ValueAndDeadline = (Vec<u8>, Option<u64>);

/// The key's value read with its deadline (`None`: no key).
fn read(call: &Call, key: &[u8]) -> Result<Option<ValueAndDeadline>, Reply> {
    let read = call.shared.db.with_maps(|maps| {
        let Some(value) = maps.keys.get(key)? else {
            return Ok(None);
        };
        Ok::<_, Error>(Some((value, maps.deadline(key)?)))
    });
    match read {
        Ok(Ok(read)) => Ok(read),
        Ok(Err(error)) => Err(store_error(DbError::Store(error))),
        Err(error) => Err(store_error(error)),
    }
}

/// EXPIRE and its kin: `seconds` counts seconds (else milliseconds), `absolute` a time since
/// the epoch (else from now).
fn expire_generic(call: &Call, name: &str, seconds: bool, absolute: bool) -> Reply {
    let conditions = match conditions(&call.args[3..]) {
        Ok(conditions) => conditions,
        Err(reply) => return reply,
    };
    let mut when = match integer(&call.args[2]) {
        Ok(when) => when,
        Err(reply) => return reply,
    };
    let invalid = || Reply::error(format!("ERR invalid expire time in '{name}' command"));
    if seconds {
        match when.checked_mul(1000) {
            Some(millis) => when = millis,
            None => return invalid(),
        }
    }
    let base = if absolute { 0 } else { call.now as i64 };
    let Some(when) = when.checked_add(base) else {
        return invalid();
    };
    let key = &call.args[1][..];
    let db = &call.shared.db;
    let _locks = db.lock_keys(std::iter::once(key));
    let current = match read(call, key) {
        Ok(Some((_, current))) => current,
        Ok(None) => return Reply::Integer(0),
        Err(reply) => return reply,
    };
    if !conditions.allow(current, when) {
        return Reply::Integer(0);
    }
    let written = if when <= call.now as i64 {
        db.delete_key(key).map(drop)
    } else {
        db.change_deadline(key, current, Some(when as u64))
    };
    match written {
        Ok(()) => Reply::Integer(1),
        Err(error) => store_error(error),
    }
}

pub(super) fn expire(call: &mut Call) -> Reply {
    expire_generic(call, "expire", true, false)
}

pub(super) fn pexpire(call: &mut Call) -> Reply {
    expire_generic(call, "pexpire", false, false)
}

pub(super) fn expireat(call: &mut Call) -> Reply {
    expire_generic(call, "expireat", true, true)
}

pub(super) fn pexpireat(call: &mut Call) -> Reply {
    expire_generic(call, "pexpireat", false, true)
}

/// TTL and its kin: -2 for no key, -1 for no deadline, else the time left (`remaining`) or
/// the deadline, in seconds (rounded) or milliseconds.
fn ttl_generic(call: &Call, remaining: bool, millis: bool) -> Reply {
    let key = &call.args[1][..];
    let deadline = match read(call, key) {
        Ok(None) => return Reply::Integer(-2),
        Ok(Some((_, None))) => return Reply::Integer(-1),
        Ok(Some((_, Some(deadline)))) => deadline as i64,
        Err(reply) => return reply,
    };
    let shown = if remaining {
        (deadline - call.now as i64).max(0)
    } else {
        deadline
    };
    // Wider than the deadline: one near the 64-bit limit rounds up as in Redis.
    Reply::Integer(if millis {
        shown
    } else {
        ((i128::from(shown) + 500) / 1000) as i64
    })
}

pub(super) fn ttl(call: &mut Call) -> Reply {
    ttl_generic(call, true, false)
}

pub(super) fn pttl(call: &mut Call) -> Reply {
    ttl_generic(call, true, true)
}

pub(super) fn expiretime(call: &mut Call) -> Reply {
    ttl_generic(call, false, false)
}

pub(super) fn pexpiretime(call: &mut Call) -> Reply {
    ttl_generic(call, false, true)
}

/// PERSIST: 1 if the key had a deadline and has none now, else 0.
pub(super) fn persist(call: &mut Call) -> Reply {
    let key = &call.args[1][..];
    let db = &call.shared.db;
    let _locks = db.lock_keys(std::iter::once(key));
    match read(call, key) {
        Ok(Some((_, Some(deadline)))) => match db.change_deadline(key, Some(deadline), None) {
            Ok(()) => Reply::Integer(1),
            Err(error) => store_error(error),
        },
        Ok(_) => Reply::Integer(0),
        Err(reply) => reply,
    }
}

/// SETEX and PSETEX: SET with EX or PX.
fn set_expiring(call: &Call, option: &str, name: &str) -> Reply {
    let deadline = match deadline_of(option, &call.args[2], call.now, name) {
        Ok(deadline) => deadline,
        Err(reply) => return reply,
    };
    let value = call.args[3].to_vec();
    update(
        call,
        &call.args[1],
        Ttl::At(deadline),
        Old::Replaced,
        |_| Ok((Some(value), Reply::ok())),
    )
}

pub(super) fn setex(call: &mut Call) -> Reply {
    set_expiring(call, "EX", "setex")
}

pub(super) fn psetex(call: &mut Call) -> Reply {
    set_expiring(call, "PX", "psetex")
}

/// GETEX key [EX|PX|EXAT|PXAT time | PERSIST]: the value, and its deadline changed.
pub(super) fn getex(call: &mut Call) -> Reply {
    let options = match set_options(&call.args[2..], true) {
        Ok(options) => options,
        Err(reply) => return reply,
    };
    let key = &call.args[1][..];
    let db = &call.shared.db;
    let _locks = db.lock_keys(std::iter::once(key));
    let (value, current) = match read(call, key) {
        Ok(Some(read)) => read,
        Ok(None) => return Reply::Null,
        Err(reply) => return reply,
    };
    // A hash: WRONGTYPE (its keyspace value is the hash marker).
    let hash = value == crate::hashes::HASH_MARKER;
    match (call.shared.db).with_maps(|maps| match hash {
        true => string_value(maps, key, Some(value.clone())),
        false => Ok(Ok(None)),
    }) {
        Ok(Ok(Ok(_))) => {}
        Ok(Ok(Err(reply))) => return reply,
        Ok(Err(error)) => return store_error(DbError::Store(error)),
        Err(error) => return store_error(error),
    }
    let new = match &options.expiry {
        Some((option, time)) => match deadline_of(option, time, call.now, "getex") {
            Ok(deadline) => Some(deadline),
            Err(reply) => return reply,
        },
        None if options.persist => None,
        None => return Reply::bulk(value),
    };
    let written = match new {
        Some(deadline) if deadline <= call.now => db.delete_key(key).map(drop),
        new => db.change_deadline(key, current, new),
    };
    match written {
        Ok(()) => Reply::bulk(value),
        Err(error) => store_error(error),
    }
}
