//! The commands: each takes its arguments (name first) and gives the reply frame.
//!
//! A write's reply is made after the store call returns, and the store returns once the
//! write is durable: an acknowledged write survives a crash of the process.

use std::ops::Bound;

use bytes::Bytes;
use pmem_structures::Error;
use redis_protocol::bytes_utils::Str;
use redis_protocol::resp2::types::BytesFrame as Frame;

use crate::db::{DbError, Keyspace};
use crate::info;
use crate::scan::Pattern;
use crate::server::Shared;

/// What the connection does after replying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    Continue,
    Close,
}

/// Run one request.
pub(crate) fn execute(shared: &Shared, args: &[Bytes]) -> (Frame, After) {
    let name = &args[0];
    let reply = match upper(name).as_slice() {
        b"QUIT" => return (ok(), After::Close),
        b"PING" => ping(args),
        b"ECHO" => arity(args, 2, 2).map(|()| bulk(args[1].clone())),
        b"GET" => arity(args, 2, 2).and_then(|()| get(shared, &args[1])),
        b"SET" => arity(args, 3, usize::MAX).and_then(|()| set(shared, args)),
        b"DEL" => arity(args, 2, usize::MAX).and_then(|()| del(shared, &args[1..])),
        b"EXISTS" => arity(args, 2, usize::MAX).and_then(|()| exists(shared, &args[1..])),
        b"INCR" => arity(args, 2, 2).and_then(|()| incr_by(shared, &args[1], 1)),
        b"DECR" => arity(args, 2, 2).and_then(|()| incr_by(shared, &args[1], -1)),
        b"INCRBY" => arity(args, 3, 3)
            .and_then(|()| integer(&args[2]))
            .and_then(|by| incr_by(shared, &args[1], by)),
        b"DECRBY" => arity(args, 3, 3)
            .and_then(|()| integer(&args[2]))
            .and_then(|by| by.checked_neg().ok_or_else(not_an_integer))
            .and_then(|by| incr_by(shared, &args[1], by)),
        b"MGET" => arity(args, 2, usize::MAX).and_then(|()| mget(shared, &args[1..])),
        b"MSET" => mset(shared, args),
        b"DBSIZE" => arity(args, 1, 1).and_then(|()| dbsize(shared)),
        b"SCAN" => arity(args, 2, usize::MAX).and_then(|()| scan(shared, args)),
        b"FLUSHDB" | b"FLUSHALL" => arity(args, 1, 2).and_then(|()| flush(shared, args)),
        b"SELECT" => arity(args, 2, 2).and_then(|()| select(&args[1])),
        b"INFO" => Ok(bulk(Bytes::from(info::render(shared, &args[1..])))),
        b"CONFIG" => config(args),
        _ => Err(unknown_command(args)),
    };
    (
        reply.unwrap_or_else(|message| error(&message)),
        After::Continue,
    )
}

/// A command's outcome: its reply, or the message of an error reply.
type Reply = Result<Frame, String>;

fn upper(name: &[u8]) -> Vec<u8> {
    name.to_ascii_uppercase()
}

fn ok() -> Frame {
    Frame::SimpleString(Bytes::from_static(b"OK"))
}

fn bulk(bytes: impl Into<Bytes>) -> Frame {
    Frame::BulkString(bytes.into())
}

fn bulk_or_nil(value: Option<Vec<u8>>) -> Frame {
    value.map_or(Frame::Null, bulk)
}

pub(crate) fn error(message: &str) -> Frame {
    Frame::Error(Str::from(message))
}

fn arity(args: &[Bytes], min: usize, max: usize) -> Result<(), String> {
    if (min..=max).contains(&args.len()) {
        Ok(())
    } else {
        Err(wrong_arity(args))
    }
}

fn wrong_arity(args: &[Bytes]) -> String {
    format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(&args[0]).to_lowercase()
    )
}

fn unknown_command(args: &[Bytes]) -> String {
    let shown: String = args[1..]
        .iter()
        .take(3)
        .map(|arg| format!("'{}' ", String::from_utf8_lossy(&arg[..arg.len().min(64)])))
        .collect();
    format!(
        "ERR unknown command '{}', with args beginning with: {shown}",
        String::from_utf8_lossy(&args[0][..args[0].len().min(64)])
    )
}

fn not_an_integer() -> String {
    "ERR value is not an integer or out of range".into()
}

/// A decimal i64 as Redis writes them: no sign but `-`, no spaces.
fn integer(text: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(text)
        .ok()
        .filter(|digits| !digits.starts_with('+'))
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(not_an_integer)
}

/// The error reply for a store refusal.
fn store_error(error: DbError) -> String {
    match error {
        DbError::Store(error @ Error::PoolFull { .. }) => format!("OOM {error}"),
        DbError::Store(error) => format!("ERR {error}"),
        DbError::Unavailable => {
            "ERR the keyspace is unavailable: FLUSHDB removed it and could not make a new one (see the server's log); FLUSHDB again to retry".into()
        }
    }
}

/// Run `command` on the keyspace.
fn with_map<T>(
    shared: &Shared,
    command: impl FnOnce(&Keyspace) -> Result<T, Error>,
) -> Result<T, String> {
    match shared.db.with_map(command) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(store_error(DbError::Store(error))),
        Err(error) => Err(store_error(error)),
    }
}

fn ping(args: &[Bytes]) -> Reply {
    arity(args, 1, 2)?;
    Ok(match args.get(1) {
        Some(message) => bulk(message.clone()),
        None => Frame::SimpleString(Bytes::from_static(b"PONG")),
    })
}

fn get(shared: &Shared, key: &[u8]) -> Reply {
    with_map(shared, |map| map.get(key)).map(bulk_or_nil)
}

/// The options of SET this server takes.
#[derive(Default)]
struct SetOptions {
    only_if_absent: bool,
    only_if_present: bool,
    get: bool,
}

fn set_options(options: &[Bytes]) -> Result<SetOptions, String> {
    let mut parsed = SetOptions::default();
    for option in options {
        match upper(option).as_slice() {
            b"NX" if !parsed.only_if_present => parsed.only_if_absent = true,
            b"XX" if !parsed.only_if_absent => parsed.only_if_present = true,
            b"GET" => parsed.get = true,
            b"EX" | b"PX" | b"EXAT" | b"PXAT" | b"KEEPTTL" => {
                return Err(format!(
                    "ERR SET {} is not supported: this server keeps no expiry times",
                    String::from_utf8_lossy(option).to_uppercase()
                ))
            }
            _ => return Err("ERR syntax error".into()),
        }
    }
    Ok(parsed)
}

fn set(shared: &Shared, args: &[Bytes]) -> Reply {
    let (key, value) = (&args[1][..], &args[2][..]);
    let options = set_options(&args[3..])?;
    let _locks = shared.db.lock_keys(std::iter::once(key));
    with_map(shared, |map| {
        if !options.only_if_absent && !options.only_if_present {
            let old = shared.db.counted_write(1, || map.upsert(key, value))?;
            return Ok(if options.get { bulk_or_nil(old) } else { ok() });
        }
        let old = map.get(key)?;
        let write = if options.only_if_absent {
            old.is_none()
        } else {
            old.is_some()
        };
        if write {
            shared.db.counted_write(1, || map.upsert(key, value))?;
        }
        Ok(match (options.get, write) {
            (true, _) => bulk_or_nil(old),
            (false, true) => ok(),
            (false, false) => Frame::Null,
        })
    })
}

fn del(shared: &Shared, keys: &[Bytes]) -> Reply {
    let _locks = shared.db.lock_keys(keys.iter().map(|k| &k[..]));
    with_map(shared, |map| {
        let mut removed = 0;
        for key in keys {
            if shared
                .db
                .counted_write(1, || map.remove(&key[..]))?
                .is_some()
            {
                removed += 1;
            }
        }
        Ok(Frame::Integer(removed))
    })
}

fn exists(shared: &Shared, keys: &[Bytes]) -> Reply {
    with_map(shared, |map| {
        let mut present = 0;
        for key in keys {
            if map.contains_key(&key[..])? {
                present += 1;
            }
        }
        Ok(Frame::Integer(present))
    })
}

fn incr_by(shared: &Shared, key: &[u8], by: i64) -> Reply {
    let _locks = shared.db.lock_keys(std::iter::once(key));
    with_map(shared, |map| {
        let current = match map.get(key)? {
            Some(text) => match integer(&text) {
                Ok(current) => current,
                Err(message) => return Ok(Err(message)),
            },
            None => 0,
        };
        let Some(next) = current.checked_add(by) else {
            return Ok(Err("ERR increment or decrement would overflow".into()));
        };
        shared
            .db
            .counted_write(1, || map.upsert(key, next.to_string().as_bytes()))?;
        Ok(Ok(Frame::Integer(next)))
    })?
}

fn mget(shared: &Shared, keys: &[Bytes]) -> Reply {
    with_map(shared, |map| {
        keys.iter()
            .map(|key| map.get(&key[..]).map(bulk_or_nil))
            .collect::<Result<Vec<_>, _>>()
            .map(Frame::Array)
    })
}

/// MSET holds every key's stripe while it writes, so no client sees some of its keys new
/// and others old; a crash part-way may keep some of its keys and not others (each key is
/// durable on its own; the reply, sent after the last, acknowledges them all).
fn mset(shared: &Shared, args: &[Bytes]) -> Reply {
    if args.len() < 3 || args.len().is_multiple_of(2) {
        return Err(wrong_arity(args));
    }
    let pairs = &args[1..];
    let _locks = shared.db.lock_keys(pairs.iter().step_by(2).map(|k| &k[..]));
    with_map(shared, |map| {
        for pair in pairs.chunks_exact(2) {
            shared
                .db
                .counted_write(1, || map.upsert(&pair[0][..], &pair[1][..]))?;
        }
        Ok(ok())
    })
}

fn dbsize(shared: &Shared) -> Reply {
    with_map(shared, |map| Ok(Frame::Integer(map.len() as i64)))
}

/// The most keys one SCAN call returns, whatever COUNT asks.
const MAX_SCAN_COUNT: u64 = 100_000;

fn scan(shared: &Shared, args: &[Bytes]) -> Reply {
    let cursor: u64 = std::str::from_utf8(&args[1])
        .ok()
        .and_then(|c| c.parse().ok())
        .ok_or("ERR invalid cursor")?;
    let mut pattern = Pattern::Prefix(Vec::new());
    let mut count = 10u64;
    let mut options = args[2..].iter();
    while let Some(option) = options.next() {
        let value = options.next().ok_or("ERR syntax error")?;
        match upper(option).as_slice() {
            b"MATCH" => pattern = Pattern::parse(value).map_err(|e| format!("ERR {e}"))?,
            b"COUNT" => {
                count = integer(value)?
                    .try_into()
                    .ok()
                    .filter(|&n: &u64| n >= 1)
                    .ok_or("ERR syntax error: COUNT must be at least 1")?
            }
            // Every key holds a string.
            b"TYPE" if value.eq_ignore_ascii_case(b"string") => {}
            b"TYPE" => return Ok(scan_reply(0, Vec::new())),
            _ => return Err("ERR syntax error".into()),
        }
    }
    let resume = if cursor == 0 {
        None
    } else {
        Some(
            shared
                .cursors
                .lock()
                .resume(cursor)
                .map(<[u8]>::to_vec)
                .ok_or_else(|| format!("ERR invalid cursor: {cursor} is not a cursor this server issued, or one it has forgotten (it keeps the newest 100,000); start again from 0"))?,
        )
    };
    let count = count.min(MAX_SCAN_COUNT) as usize;
    let (low, high) = pattern.range(resume.as_deref());
    let mut keys = Vec::with_capacity(count.min(1024));
    let mut more = false;
    with_map(shared, |map| {
        for entry in map.range::<&[u8], (Bound<&[u8]>, Bound<&[u8]>)>((
            low.as_ref().map(Vec::as_slice),
            high.as_ref().map(Vec::as_slice),
        )) {
            let (key, _) = entry?;
            if keys.len() == count {
                more = true;
                break;
            }
            keys.push(key);
        }
        Ok(())
    })?;
    let next = match (more, keys.last()) {
        (true, Some(last)) => shared.cursors.lock().issue(last.clone()),
        _ => 0,
    };
    Ok(scan_reply(next, keys))
}

fn scan_reply(cursor: u64, keys: Vec<Vec<u8>>) -> Frame {
    Frame::Array(vec![
        bulk(cursor.to_string()),
        Frame::Array(keys.into_iter().map(bulk).collect()),
    ])
}

fn flush(shared: &Shared, args: &[Bytes]) -> Reply {
    if let Some(mode) = args.get(1) {
        if !mode.eq_ignore_ascii_case(b"SYNC") && !mode.eq_ignore_ascii_case(b"ASYNC") {
            return Err("ERR syntax error".into());
        }
    }
    shared.db.flush().map_err(store_error)?;
    shared.cursors.lock().clear();
    Ok(ok())
}

fn select(index: &[u8]) -> Reply {
    match integer(index)? {
        0 => Ok(ok()),
        _ => Err("ERR DB index is out of range (this server has one database, 0)".into()),
    }
}

/// CONFIG GET answers with no parameters (the server has none to read at run time), so
/// tools that ask, such as redis-benchmark, go on; CONFIG SET is refused.
fn config(args: &[Bytes]) -> Reply {
    match args.get(1).map(|sub| upper(sub)) {
        Some(sub) if sub == b"GET" => {
            arity(args, 3, usize::MAX)?;
            Ok(Frame::Array(Vec::new()))
        }
        Some(sub) => Err(format!(
            "ERR CONFIG {} is not supported: settings are command-line flags",
            String::from_utf8_lossy(&sub)
        )),
        None => Err(wrong_arity(args)),
    }
}
