//! Hashes: `HSET`/`HMSET`, `HSETNX`, `HGET`, `HMGET`, `HGETALL`, `HDEL`, `HLEN`, `HEXISTS`,
//! `HKEYS`, `HVALS`, `HINCRBY`, `HINCRBYFLOAT`, `HSTRLEN`, `HSCAN`, with Redis 7.0's replies
//! and errors (arguments checked before the key's type, as Redis does). Fields come in field
//! order (Redis gives a small hash's in insertion order, a large one's in hash order). Writes
//! hold the key's stripe from their read to their durable write. Reads of a few fields see
//! each write batch whole or not at all (`Store::read_consistent`, which runs them again if
//! a batch applied meanwhile); reads of a whole hash hold its key's stripe instead, so every
//! writer of the key waits for them, and a large hash is not read again and again while
//! batches of other keys apply (see `crate::hashes` for where fields live).

use std::ops::Bound;

use pmem_structures::Error;

use super::keys::{resume_of, scan_cursor, scan_options};
use super::{integer, store_error, with_maps, wrong_arity, wrong_type, Call};
use crate::db::{DbError, Maps};
use crate::hashes::{field_key, field_of, field_range, HashMeta};
use crate::numbers::{parse_i64, parse_long_double, LongDouble, ParsedFloat};
use crate::reply::Reply;

/// How a read sees the hash's writes whole.
#[derive(Clone, Copy)]
enum Whole {
    /// Run again if a batch applied meanwhile: a read of a few fields.
    Retried,
    /// With the key's stripe held: a read of every field.
    Locked,
}

/// Run `read` on the hash at the command's key (`None`: absent), seeing every write of it
/// whole; WRONGTYPE for a string.
fn read_hash(
    call: &Call,
    whole: Whole,
    read: impl Fn(&Maps, Option<HashMeta>) -> Result<Reply, Error>,
) -> Reply {
    let key = &call.args[1][..];
    let db = &call.shared.db;
    let read_once = |maps: &Maps| match maps.hash_meta(key)? {
        Some(meta) => read(maps, Some(meta)),
        None if maps.keys.contains_key(key)? => Ok(wrong_type()),
        None => read(maps, None),
    };
    match whole {
        Whole::Retried => with_maps(call.shared, |maps| {
            db.store().read_consistent(|| read_once(maps))
        }),
        Whole::Locked => {
            let _locks = db.lock_keys(std::iter::once(key));
            with_maps(call.shared, read_once)
        }
    }
}

/// The value of `field` in the hash `meta` (none in an absent hash).
fn field_value(
    maps: &Maps,
    meta: Option<HashMeta>,
    field: &[u8],
) -> Result<Option<Vec<u8>>, Error> {
    match meta {
        Some(meta) => maps.fields.get(&field_key(meta.id, field)[..]),
        None => Ok(None),
    }
}

/// Every `(field, value)` of the hash `meta`, in field order (none of an absent hash).
/// A field and its value.
type FieldValue = (Vec<u8>, Vec<u8>);

fn all_fields(maps: &Maps, meta: Option<HashMeta>) -> Result<Vec<FieldValue>, Error> {
    let Some(meta) = meta else {
        return Ok(Vec::new());
    };
    let (low, high) = field_range(meta.id, Bound::Unbounded, Bound::Unbounded);
    maps.fields
        .range::<&[u8], _>((
            low.as_ref().map(Vec::as_slice),
            high.as_ref().map(Vec::as_slice),
        ))
        .map(|entry| {
            entry.map(|(entry, value)| (field_of(&entry).unwrap_or_default().to_vec(), value))
        })
        .collect()
}

pub(super) fn hget(call: &mut Call) -> Reply {
    let field = &call.args[2][..];
    read_hash(call, Whole::Retried, |maps, meta| {
        Ok(Reply::bulk_or_null(field_value(maps, meta, field)?))
    })
}

pub(super) fn hmget(call: &mut Call) -> Reply {
    let fields = &call.args[2..];
    read_hash(call, Whole::Retried, |maps, meta| {
        let values = fields
            .iter()
            .map(|field| field_value(maps, meta, field).map(Reply::bulk_or_null))
            .collect::<Result<_, _>>()?;
        Ok(Reply::Array(values))
    })
}

/// HGETALL: a map in RESP3, fields and values in turn in RESP2.
pub(super) fn hgetall(call: &mut Call) -> Reply {
    read_hash(call, Whole::Locked, |maps, meta| {
        let pairs = all_fields(maps, meta)?;
        Ok(Reply::Map(
            pairs
                .into_iter()
                .map(|(field, value)| (Reply::bulk(field), Reply::bulk(value)))
                .collect(),
        ))
    })
}

pub(super) fn hkeys(call: &mut Call) -> Reply {
    read_hash(call, Whole::Locked, |maps, meta| {
        let pairs = all_fields(maps, meta)?;
        Ok(Reply::Array(
            pairs
                .into_iter()
                .map(|(field, _)| Reply::bulk(field))
                .collect(),
        ))
    })
}

pub(super) fn hvals(call: &mut Call) -> Reply {
    read_hash(call, Whole::Locked, |maps, meta| {
        let pairs = all_fields(maps, meta)?;
        Ok(Reply::Array(
            pairs
                .into_iter()
                .map(|(_, value)| Reply::bulk(value))
                .collect(),
        ))
    })
}

pub(super) fn hlen(call: &mut Call) -> Reply {
    read_hash(call, Whole::Retried, |_, meta| {
        Ok(Reply::Integer(meta.map_or(0, |meta| meta.len as i64)))
    })
}

pub(super) fn hexists(call: &mut Call) -> Reply {
    let field = &call.args[2][..];
    read_hash(call, Whole::Retried, |maps, meta| {
        let present = match meta {
            Some(meta) => maps.fields.contains_key(&field_key(meta.id, field)[..])?,
            None => false,
        };
        Ok(Reply::Integer(i64::from(present)))
    })
}

pub(super) fn hstrlen(call: &mut Call) -> Reply {
    let field = &call.args[2][..];
    read_hash(call, Whole::Retried, |maps, meta| {
        let value = field_value(maps, meta, field)?;
        Ok(Reply::Integer(value.map_or(0, |v| v.len() as i64)))
    })
}

/// Run `write` on the hash at the command's key with the key's stripe held, given its
/// metadata (`None`: absent); WRONGTYPE for a string.
fn write_hash(
    call: &Call,
    write: impl FnOnce(&[u8], Option<HashMeta>) -> Result<Reply, DbError>,
) -> Reply {
    let key = &call.args[1][..];
    let db = &call.shared.db;
    let _locks = db.lock_keys(std::iter::once(key));
    match db.hash_of(key) {
        Ok(Ok(meta)) => write(key, meta).unwrap_or_else(store_error),
        Ok(Err(())) => wrong_type(),
        Err(error) => store_error(error),
    }
}

/// The `(field, value)` pairs after the key, or `None` when one is left without a value.
fn pairs<'a>(call: &Call<'a>) -> Option<Vec<(&'a [u8], &'a [u8])>> {
    let rest = &call.args[2..];
    rest.len().is_multiple_of(2).then(|| {
        rest.chunks_exact(2)
            .map(|pair| (&pair[0][..], &pair[1][..]))
            .collect()
    })
}

/// HSET: how many fields are new; all of them written in one batch.
pub(super) fn hset(call: &mut Call) -> Reply {
    let Some(pairs) = pairs(call) else {
        return wrong_arity("hset");
    };
    let db = &call.shared.db;
    write_hash(call, |key, meta| {
        Ok(Reply::Integer(db.hash_set(key, meta, &pairs)? as i64))
    })
}

/// HMSET: HSET under its old name, answering OK.
pub(super) fn hmset(call: &mut Call) -> Reply {
    let Some(pairs) = pairs(call) else {
        return wrong_arity("hmset");
    };
    let db = &call.shared.db;
    write_hash(call, |key, meta| {
        db.hash_set(key, meta, &pairs)?;
        Ok(Reply::ok())
    })
}

/// The value of `field` in the hash `meta`, read with the key's stripe held.
fn current(call: &Call, meta: Option<HashMeta>, field: &[u8]) -> Result<Option<Vec<u8>>, DbError> {
    Ok(call
        .shared
        .db
        .with_maps(|maps| field_value(maps, meta, field))??)
}

pub(super) fn hsetnx(call: &mut Call) -> Reply {
    let (field, value) = (&call.args[2][..], &call.args[3][..]);
    let db = &call.shared.db;
    write_hash(call, |key, meta| {
        if current(call, meta, field)?.is_some() {
            return Ok(Reply::Integer(0));
        }
        db.hash_set(key, meta, &[(field, value)])?;
        Ok(Reply::Integer(1))
    })
}

pub(super) fn hdel(call: &mut Call) -> Reply {
    let fields: Vec<&[u8]> = call.args[2..].iter().map(|f| &f[..]).collect();
    let db = &call.shared.db;
    write_hash(call, |key, meta| match meta {
        Some(meta) => Ok(Reply::Integer(db.hash_delete(key, meta, &fields)? as i64)),
        None => Ok(Reply::Integer(0)),
    })
}

pub(super) fn hincrby(call: &mut Call) -> Reply {
    let by = match integer(&call.args[3]) {
        Ok(by) => by,
        Err(reply) => return reply,
    };
    let field = &call.args[2][..];
    let db = &call.shared.db;
    write_hash(call, |key, meta| {
        let current = match current(call, meta, field)? {
            Some(text) => match parse_i64(&text) {
                Some(n) => n,
                None => return Ok(Reply::error("ERR hash value is not an integer")),
            },
            None => 0,
        };
        let Some(next) = current.checked_add(by) else {
            return Ok(Reply::error("ERR increment or decrement would overflow"));
        };
        db.hash_set(key, meta, &[(field, next.to_string().as_bytes())])?;
        Ok(Reply::Integer(next))
    })
}

pub(super) fn hincrbyfloat(call: &mut Call) -> Reply {
    let by = match parse_long_double(&call.args[3]) {
        Some(ParsedFloat::Finite(by)) => by,
        Some(ParsedFloat::Infinite) => return Reply::error("ERR value is NaN or Infinity"),
        None => return Reply::error("ERR value is not a valid float"),
    };
    let field = &call.args[2][..];
    let db = &call.shared.db;
    write_hash(call, |key, meta| {
        let sum = match current(call, meta, field)? {
            Some(text) => match parse_long_double(&text) {
                Some(ParsedFloat::Finite(current)) => current.checked_add(by),
                Some(ParsedFloat::Infinite) => None,
                None => return Ok(Reply::error("ERR hash value is not a float")),
            },
            // An absent field counts as 0 (the sum normalizes as INCRBYFLOAT's does).
            None => LongDouble::default().checked_add(by),
        };
        let Some(sum) = sum else {
            return Ok(Reply::error("ERR increment would produce NaN or Infinity"));
        };
        let text = sum.to_redis_string();
        db.hash_set(key, meta, &[(field, text.as_bytes())])?;
        Ok(Reply::bulk(text))
    })
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]: up to COUNT fields from the cursor on, with
/// their values, those MATCH takes. As in Redis 7.0: the cursor is read first, then the key
/// (an absent key answers an empty scan whatever the options), then the options (no TYPE,
/// no NOVALUES).
pub(super) fn hscan(call: &mut Call) -> Reply {
    let args = call.args;
    let cursor = match scan_cursor(&args[2]) {
        Ok(cursor) => cursor,
        Err(reply) => return reply,
    };
    let meta = match call.shared.db.hash_of(&args[1]) {
        Ok(Ok(Some(meta))) => meta,
        Ok(Ok(None)) => return Reply::Array(vec![Reply::bulk("0"), Reply::Array(Vec::new())]),
        Ok(Err(())) => return wrong_type(),
        Err(error) => return store_error(error),
    };
    let (pattern, count) = match scan_options(args, 3, false) {
        Ok((pattern, count, _)) => (pattern, count),
        Err(reply) => return reply,
    };
    let resume = match resume_of(call, cursor) {
        Ok(resume) => resume,
        Err(reply) => return reply,
    };
    let (low, high) = pattern.range(resume.as_deref());
    let (low, high) = field_range(
        meta.id,
        low.as_ref().map(Vec::as_slice),
        high.as_ref().map(Vec::as_slice),
    );
    let mut items = Vec::new();
    let mut last_seen = None;
    let mut more = false;
    let walked = call.shared.db.with_maps(|maps| {
        let range = maps.fields.range::<&[u8], _>((
            low.as_ref().map(Vec::as_slice),
            high.as_ref().map(Vec::as_slice),
        ));
        for (seen, entry) in range.enumerate() {
            let (entry, value) = entry?;
            if seen == count {
                more = true;
                break;
            }
            let field = field_of(&entry).unwrap_or_default().to_vec();
            if pattern.matches(&field) {
                items.push(Reply::bulk(field.clone()));
                items.push(Reply::bulk(value));
            }
            last_seen = Some(field);
        }
        Ok::<_, Error>(())
    });
    match walked {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return store_error(DbError::Store(error)),
        Err(error) => return store_error(error),
    }
    let next = match (more, last_seen) {
        (true, Some(last)) => call.shared.cursors.lock().issue(last),
        _ => 0,
    };
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(items)])
}
