//! The keyspace: deleting, counting and finding keys, and emptying it.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::ops::Bound;

use bytes::Bytes;
use pmem_structures::Error;

use super::{integer, store_error, syntax_error, with_map, Call};
use crate::db::{prefix_end, Keyspace};
use crate::hashes::Kind;
use crate::reply::Reply;
use crate::scan::Pattern;

/// DEL and UNLINK (the store frees a key's space as it deletes it, so both are immediate).
pub(super) fn del(call: &mut Call) -> Reply {
    let keys = &call.args[1..];
    let db = &call.shared.db;
    let _locks = db.lock_keys(keys.iter().map(|k| &k[..]));
    let mut removed = 0;
    for key in keys {
        match db.delete_key(key) {
            Ok(Some(_)) => removed += 1,
            Ok(None) => {}
            Err(error) => return store_error(error),
        }
    }
    Reply::Integer(removed)
}

/// EXISTS and TOUCH: how many of the keys exist, a key named twice counted twice.
pub(super) fn exists(call: &mut Call) -> Reply {
    let keys = &call.args[1..];
    with_map(call.shared, |map| {
        let mut present = 0;
        for key in keys {
            if map.contains_key(&key[..])? {
                present += 1;
            }
        }
        Ok(Reply::Integer(present))
    })
}

pub(super) fn type_of(call: &mut Call) -> Reply {
    let key = &call.args[1][..];
    super::with_maps(call.shared, |maps| {
        Ok(Reply::status(type_name(&maps.read_kind(key)?)))
    })
}

/// The name TYPE gives what a key holds.
fn type_name(kind: &Kind) -> &'static str {
    match kind {
        Kind::Absent => "none",
        Kind::String(_) => "string",
        Kind::Hash(_) => "hash",
    }
}

/// A random key, found by a random descent of the keys' byte trie: at each depth, a byte
/// drawn uniformly between the smallest and the largest next byte of the keys under the
/// prefix so far (or the prefix itself, when it is a key), then deeper under it, or the
/// next key when no key has it. Every key can come out, a few lookups per byte of the key
/// (the map is ordered, not indexed by rank); keys in sparse parts of the trie come out
/// more often than keys in dense parts.
pub(super) fn randomkey(call: &mut Call) -> Reply {
    let state = RandomState::new();
    let mut draws = 0u64;
    let mut below = |n: u64| {
        draws += 1;
        state.hash_one(draws) % n
    };
    // A key past its deadline is deleted and another drawn, as Redis does; a few times at
    // most, so a keyspace of expired keys does not keep the command busy.
    for _ in 0..100 {
        let drawn = call.shared.db.with_maps(|maps| {
            let key = random_key(&maps.keys, &mut below)?;
            let due = match &key {
                Some(key) => maps.is_due(key, call.now)?,
                None => false,
            };
            Ok::<_, Error>((key, due))
        });
        match drawn {
            Ok(Ok((Some(key), true))) => {
                if let Err(error) = call.shared.db.expire_due(&[&key[..]], call.now) {
                    return store_error(error);
                }
            }
            Ok(Ok((key, _))) => return Reply::bulk_or_null(key),
            Ok(Err(error)) => return store_error(crate::db::DbError::Store(error)),
            Err(error) => return store_error(error),
        }
    }
    Reply::Null
}

/// The first key at or after `from` and below `high`.
fn first_key(map: &Keyspace, from: &[u8], high: &Bound<Vec<u8>>) -> Result<Option<Vec<u8>>, Error> {
    let range: (Bound<&[u8]>, Bound<&[u8]>) =
        (Bound::Included(from), high.as_ref().map(Vec::as_slice));
    map.range::<&[u8], _>(range)
        .next()
        .transpose()
        .map(|found| found.map(|(key, _)| key))
}

fn random_key(
    map: &Keyspace,
    below: &mut impl FnMut(u64) -> u64,
) -> Result<Option<Vec<u8>>, Error> {
    let mut prefix = Vec::new();
    loop {
        let high = prefix_end(&prefix);
        let first = |from: &[u8]| first_key(map, from, &high);
        let with_byte = |byte: u8| {
            let mut key = prefix.clone();
            key.push(byte);
            key
        };
        let Some(lowest) = first(&prefix)? else {
            return Ok(None);
        };
        let depth = prefix.len();
        // The prefix is a key itself when the lowest key under it is the prefix.
        let prefix_is_key = lowest.len() == depth;
        let smallest = if prefix_is_key {
            match first(&with_byte(0))? {
                Some(next) => next[depth],
                None => return Ok(Some(lowest)),
            }
        } else {
            lowest[depth]
        };
        // The largest next byte: the largest b with a key at or after prefix + b.
        let (mut low, mut high_byte) = (smallest, u8::MAX);
        while low < high_byte {
            let middle = low + (high_byte - low).div_ceil(2);
            if first(&with_byte(middle))?.is_some() {
                low = middle;
            } else {
                high_byte = middle - 1;
            }
        }
        let choices = u64::from(low - smallest) + 1 + u64::from(prefix_is_key);
        let pick = below(choices);
        if prefix_is_key && pick == choices - 1 {
            return Ok(Some(lowest));
        }
        let byte = smallest + pick as u8;
        let deeper = with_byte(byte);
        match first(&deeper)? {
            Some(key) if key[depth] == byte => prefix = deeper,
            // No key has this byte here: the next key after the gap.
            Some(key) => return Ok(Some(key)),
            // Deleted since the search: any key of the prefix will do.
            None => return Ok(Some(lowest)),
        }
    }
}

/// KEYS: every key the pattern matches, in key order (Redis gives hash order).
pub(super) fn keys(call: &mut Call) -> Reply {
    let pattern = Pattern::new(&call.args[1]);
    let (low, high) = pattern.range(None);
    let now = call.now;
    let outcome = call.shared.db.with_maps(|maps| {
        let mut found = Vec::new();
        for entry in maps.keys.range::<&[u8], _>((
            low.as_ref().map(Vec::as_slice),
            high.as_ref().map(Vec::as_slice),
        )) {
            let (key, _) = entry?;
            // A key past its deadline is not listed (the next command naming it deletes it).
            if pattern.matches(&key) && !maps.is_due(&key, now)? {
                found.push(Reply::bulk(key));
            }
        }
        Ok::<_, Error>(Reply::Array(found))
    });
    match outcome {
        Ok(Ok(reply)) => reply,
        Ok(Err(error)) => store_error(crate::db::DbError::Store(error)),
        Err(error) => store_error(error),
    }
}

/// The most keys (or fields) one SCAN (or HSCAN) call looks at, whatever COUNT asks.
const MAX_SCAN_COUNT: u64 = 100_000;

/// A SCAN or HSCAN cursor, as Redis reads it (before anything else).
pub(super) fn scan_cursor(text: &[u8]) -> Result<u64, Reply> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|c| c.parse::<u64>().ok())
        .ok_or_else(|| Reply::error("ERR invalid cursor"))
}

/// The options of SCAN (`types`: TYPE is one) and HSCAN from `args[at..]`: the MATCH
/// pattern, how many entries to look at, the TYPE wanted; or Redis's error.
pub(super) fn scan_options(
    args: &[Bytes],
    mut at: usize,
    types: bool,
) -> Result<(Pattern, usize, Option<&Bytes>), Reply> {
    let mut pattern = Pattern::all();
    let mut count = 10u64;
    let mut wanted_type = None;
    while at < args.len() {
        let (Some(option), Some(value)) = (args.get(at), args.get(at + 1)) else {
            return Err(syntax_error());
        };
        match option.to_ascii_uppercase().as_slice() {
            b"COUNT" => match integer(value)? {
                n if n >= 1 => count = n as u64,
                _ => return Err(syntax_error()),
            },
            b"MATCH" => pattern = Pattern::new(value),
            b"TYPE" if types => wanted_type = Some(value),
            _ => return Err(syntax_error()),
        }
        at += 2;
    }
    Ok((pattern, count.min(MAX_SCAN_COUNT) as usize, wanted_type))
}

/// Where a scan from `cursor` resumes: from the start (0), or after the key (or field) the
/// cursor stands for; an error for a cursor the server did not issue or has forgotten.
pub(super) fn resume_of(call: &Call, cursor: u64) -> Result<Option<Vec<u8>>, Reply> {
    if cursor == 0 {
        return Ok(None);
    }
    match call.shared.cursors.lock().resume(cursor) {
        Some(key) => Ok(Some(key.to_vec())),
        None => Err(Reply::error(format!(
            "ERR invalid cursor: {cursor} is not a cursor this server issued, or one it has forgotten (it keeps the newest 100,000); start again from 0"
        ))),
    }
}

/// SCAN looks at up to COUNT keys of the pattern's range from the cursor on and returns
/// those the pattern matches (so, as in Redis, a call may return fewer keys than COUNT, even
/// none, before the scan ends; a prefix pattern matches every key of its range).
pub(super) fn scan(call: &mut Call) -> Reply {
    let args = call.args;
    let cursor = match scan_cursor(&args[1]) {
        Ok(cursor) => cursor,
        Err(reply) => return reply,
    };
    let (pattern, count, wanted_type) = match scan_options(args, 2, true) {
        Ok(options) => options,
        Err(reply) => return reply,
    };
    let resume = match resume_of(call, cursor) {
        Ok(resume) => resume,
        Err(reply) => return reply,
    };
    let (low, high) = pattern.range(resume.as_deref());
    let mut keys = Vec::new();
    let mut last_seen = None;
    let mut more = false;
    let now = call.now;
    let outcome = call.shared.db.with_maps(|maps| {
        for (seen, entry) in maps
            .keys
            .range::<&[u8], _>((
                low.as_ref().map(Vec::as_slice),
                high.as_ref().map(Vec::as_slice),
            ))
            .enumerate()
        {
            let (key, value) = entry?;
            if seen == count {
                more = true;
                break;
            }
            let of_type = match wanted_type {
                None => true,
                Some(wanted) => wanted
                    .eq_ignore_ascii_case(type_name(&maps.kind(&key, Some(value))?).as_bytes()),
            };
            if of_type && pattern.matches(&key) && !maps.is_due(&key, now)? {
                keys.push(Reply::bulk(key.clone()));
            }
            last_seen = Some(key);
        }
        Ok::<_, Error>(())
    });
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => return store_error(crate::db::DbError::Store(error)),
        Err(error) => return store_error(error),
    }
    let next = match (more, last_seen) {
        (true, Some(last)) => call.shared.cursors.lock().issue(last),
        _ => 0,
    };
    Reply::Array(vec![Reply::bulk(next.to_string()), Reply::Array(keys)])
}

pub(super) fn dbsize(call: &mut Call) -> Reply {
    with_map(call.shared, |map| Ok(Reply::Integer(map.len() as i64)))
}

/// FLUSHDB and FLUSHALL (`ASYNC` and `SYNC` alike: the store frees the keys' space at once).
pub(super) fn flush(call: &mut Call) -> Reply {
    match call.args.get(1) {
        None => {}
        Some(mode)
            if call.args.len() == 2
                && (mode.eq_ignore_ascii_case(b"SYNC") || mode.eq_ignore_ascii_case(b"ASYNC")) => {}
        Some(_) => return syntax_error(),
    }
    if let Err(error) = call.shared.db.flush() {
        return store_error(error);
    }
    call.shared.cursors.lock().clear();
    Reply::ok()
}
