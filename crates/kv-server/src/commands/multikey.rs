//! Commands over several keys at once: `MGET`, `MSET`, `MSETNX`, `RENAME`, `RENAMENX`,
//! `COPY`. Each write of several keys is one write batch of the store: after a crash all of
//! it is there or none (a write of one key is a single write, atomic by itself), and `MGET` reads through
//! `Store::read_consistent`, so it never sees a batch half applied. The keys' stripes are
//! held from the reads that decide (`MSETNX`, `RENAME`, `COPY`) to the commit.

use bytes::Bytes;

use super::{integer, store_error, syntax_error, with_maps, wrong_arity, Call};
use crate::hashes::Kind;
use crate::reply::Reply;

/// MGET: each key's string, nil for a missing key or a hash (no WRONGTYPE, as in Redis).
pub(super) fn mget(call: &mut Call) -> Reply {
    let keys = &call.args[1..];
    let store = call.shared.db.store();
    with_maps(call.shared, |maps| {
        store
            .read_consistent(|| {
                keys.iter()
                    .map(|key| match maps.read_kind(key)? {
                        Kind::String(value) => Ok(Reply::bulk(value)),
                        Kind::Absent | Kind::Hash(_) => Ok(Reply::Null),
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .map(Reply::Array)
    })
}

/// Set each `(key, value)` pair of `pairs` (`key value key value ...`): all durable, and
/// visible, together; a later pair of a key wins.
pub(super) fn set_pairs(call: &Call, pairs: &[Bytes]) -> Reply {
    let db = &call.shared.db;
    let _locks = db.lock_keys(pairs.iter().step_by(2).map(|k| &k[..]));
    let writes = pairs.chunks_exact(2).map(|p| (&p[0][..], &p[1][..], None));
    match db.set_all(writes.clone(), writes.len()) {
        Ok(()) => Reply::ok(),
        Err(error) => store_error(error),
    }
}

/// MSET as its own command (a connection's pipeline defers it and commits it with the plain
/// writes around it: see `pipeline`, which does the same).
pub(super) fn mset(call: &mut Call) -> Reply {
    if call.args.len().is_multiple_of(2) {
        return wrong_arity("mset");
    }
    set_pairs(call, &call.args[1..])
}

/// MSETNX: every key set if none of them exists (1), else none (0).
pub(super) fn msetnx(call: &mut Call) -> Reply {
    if call.args.len().is_multiple_of(2) {
        return wrong_arity("msetnx");
    }
    let pairs = &call.args[1..];
    let db = &call.shared.db;
    let _locks = db.lock_keys(pairs.iter().step_by(2).map(|k| &k[..]));
    let written = db.batch_write(pairs.len() as u64 / 2, |maps, batch| {
        for key in pairs.iter().step_by(2) {
            if maps.keys.contains_key(&key[..])? {
                return Ok(false);
            }
        }
        for pair in pairs.chunks_exact(2) {
            let key = &pair[0][..];
            maps.keys.put_in(batch, key, &pair[1][..])?;
            // Only the deadline a FLUSHDB left behind (see `db::Maps`).
            maps.change_deadline_in(batch, key, maps.deadline(key)?, None)?;
        }
        Ok(true)
    });
    match written {
        Ok(written) => Reply::Integer(i64::from(written)),
        Err(error) => store_error(error),
    }
}

pub(super) fn rename(call: &mut Call) -> Reply {
    rename_or_not(call, false)
}

pub(super) fn renamenx(call: &mut Call) -> Reply {
    rename_or_not(call, true)
}

/// RENAME (`if_absent` false: replaces the destination) and RENAMENX (true: only to a key
/// that does not exist), with Redis's replies: `ERR no such key` for a missing source, even
/// when it is also the destination.
fn rename_or_not(call: &Call, if_absent: bool) -> Reply {
    let (from, to) = (&call.args[1][..], &call.args[2][..]);
    let db = &call.shared.db;
    let _locks = db.lock_keys([from, to].into_iter());
    let outcome = db.batch_write(2, |maps, batch| {
        let Some(value) = maps.keys.get(from)? else {
            return Ok(Err(Reply::error("ERR no such key")));
        };
        if from == to {
            return Ok(Ok(!if_absent));
        }
        if if_absent && maps.keys.contains_key(to)? {
            return Ok(Ok(false));
        }
        // The destination takes the source's deadline (or none), as in Redis.
        maps.move_key_in(batch, from, to, value)?;
        Ok(Ok(true))
    });
    match outcome {
        Ok(Err(reply)) => reply,
        Ok(Ok(renamed)) if if_absent => Reply::Integer(i64::from(renamed)),
        Ok(Ok(_)) => Reply::ok(),
        Err(error) => store_error(error),
    }
}

/// COPY source destination [DB index] [REPLACE]: 1 if copied, 0 if the source is missing or
/// the destination exists (without REPLACE). The server has one database, 0: `DB 0` is
/// accepted, another index gets Redis's error for a database it does not have.
pub(super) fn copy(call: &mut Call) -> Reply {
    let args = call.args;
    let mut replace = false;
    let mut at = 3;
    while at < args.len() {
        let option = &args[at];
        if option.eq_ignore_ascii_case(b"REPLACE") {
            replace = true;
        } else if option.eq_ignore_ascii_case(b"DB") && at + 1 < args.len() {
            match integer(&args[at + 1]) {
                Ok(index) if i32::try_from(index).is_err() => {
                    return Reply::error(format!(
                        "ERR value is out of range, value must between {} and {}",
                        i32::MIN,
                        i32::MAX
                    ))
                }
                // Checked at once, as Redis selects the database as it reads the option.
                Ok(0) => {}
                Ok(_) => return Reply::error("ERR DB index is out of range"),
                Err(reply) => return reply,
            }
            at += 1;
        } else {
            return syntax_error();
        }
        at += 1;
    }
    let (from, to) = (&args[1][..], &args[2][..]);
    if from == to {
        return Reply::error("ERR source and destination objects are the same");
    }
    let db = &call.shared.db;
    let _locks = db.lock_keys([from, to].into_iter());
    let read = db.with_maps(|maps| {
        let kind = maps.read_kind(from)?;
        if kind == Kind::Absent || (!replace && maps.keys.contains_key(to)?) {
            return Ok(None);
        }
        Ok::<_, pmem_structures::Error>(Some((kind, maps.deadline(from)?, maps.deadline(to)?)))
    });
    // A string: one key written, a single write, or one batch when a deadline changes or
    // a hash is replaced (the copy takes the source's deadline, as in Redis). A hash: its
    // fields copied (see `Db::copy_hash`).
    match read {
        Ok(Ok(Some((Kind::Hash(meta), _, _)))) => match db.copy_hash(from, meta, to) {
            Ok(()) => Reply::Integer(1),
            Err(error) => store_error(error),
        },
        Ok(Ok(Some((Kind::String(value), deadline, replaced)))) => {
            match db.write_key(to, &value, replaced, deadline) {
                Ok(()) => Reply::Integer(1),
                Err(error) => store_error(error),
            }
        }
        Ok(Ok(_)) => Reply::Integer(0),
        Ok(Err(error)) => store_error(crate::db::DbError::Store(error)),
        Err(error) => store_error(error),
    }
}
