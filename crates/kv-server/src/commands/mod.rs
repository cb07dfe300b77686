//! The commands: finding one by name (and subcommand), checking its arity, running it, and
//! counting it for INFO's commandstats. Errors read as Redis 7's, word for word.
//!
//! * `table`: every command, its arity, flags, keys and documentation (for `COMMAND`).
//! * `strings`: values (`GET`, `SET`, `APPEND`, `INCRBYFLOAT`, ...).
//! * `keys`: the keyspace (`DEL`, `EXISTS`, `TYPE`, `KEYS`, `SCAN`, `FLUSHDB`, ...).
//! * `expiry`: expiry times (`EXPIRE` and its kin, `TTL`, `PERSIST`, `SETEX`, `GETEX`).
//! * `hashes`: hashes (`HSET`, `HGET`, `HDEL`, `HSCAN`, ...).
//! * `multikey`: writes of several keys as one (`MSET`, `MSETNX`, `RENAME`, `COPY`) and `MGET`.
//! * `connection`: the connection's own state (`HELLO`, `CLIENT`, `SELECT`, `MULTI`, ...).
//! * `server`: `INFO`, `CONFIG`, `COMMAND`.
//!
//! A write's reply is made after the store call returns, and the store returns once the
//! write is durable: an acknowledged write survives a crash of the process.

mod connection;
mod expiry;
mod hashes;
mod keys;
mod multikey;
mod server;
mod strings;
mod table;

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use pmem_structures::Error;

use crate::db::{DbError, Keyspace};
use crate::hashes::Kind;
use crate::pipeline::Pipeline;
use crate::reply::Reply;
use crate::session::Session;
use crate::shared::Shared;

pub(crate) use crate::args::{deadline_of, integer, not_an_integer};
pub(crate) use crate::db::store_error;
pub(crate) use table::{COMMANDS, COMMAND_NAMES};

/// One command being run: the server, the connection, the arguments (name first).
pub(crate) struct Call<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) session: &'a mut Session,
    pub(crate) args: &'a [Bytes],
    /// The command's time (milliseconds since the Unix epoch), taken once at its start: its
    /// keys' deadlines are judged against it, as Redis 7 does.
    pub(crate) now: u64,
}

type Handler = fn(&mut Call) -> Reply;

/// A command as `COMMAND` describes it.
pub(crate) struct Command {
    /// Lower case; a subcommand is `container|sub` (`client|setname`).
    pub(crate) name: &'static str,
    /// Redis's convention: `n` exactly n arguments (the name counted), `-n` at least n.
    pub(crate) arity: i64,
    pub(crate) flags: &'static [&'static str],
    /// The first key's position, the last's (-1: the last argument), the step between keys.
    pub(crate) keys: (i64, i64, i64),
    pub(crate) group: &'static str,
    pub(crate) since: &'static str,
    pub(crate) summary: &'static str,
    run: Handler,
}

impl Command {
    fn takes(&self, args: usize) -> bool {
        let args = args as i64;
        if self.arity >= 0 {
            args == self.arity
        } else {
            args >= -self.arity
        }
    }

    pub(crate) fn is_subcommand(&self) -> bool {
        self.name.contains('|')
    }

    /// The subcommands of a container command (`client|...` for `client`).
    pub(crate) fn subcommands(&self) -> impl Iterator<Item = &'static Command> + '_ {
        COMMANDS.iter().filter(move |command| {
            command
                .name
                .strip_prefix(self.name)
                .is_some_and(|rest| rest.starts_with('|'))
        })
    }
}

/// The table's index of each command name.
static BY_NAME: LazyLock<HashMap<&'static str, usize>> = LazyLock::new(|| {
    COMMANDS
        .iter()
        .enumerate()
        .map(|(index, command)| (command.name, index))
        .collect()
});

/// Whether each command of the table (by index) has subcommands: a request's lookup asks for
/// every request, so it is worked out once, not by a walk of the table each time.
static HAS_SUBCOMMANDS: LazyLock<Vec<bool>> = LazyLock::new(|| {
    COMMANDS
        .iter()
        .map(|command| command.subcommands().next().is_some())
        .collect()
});

/// The longest name in the table is shorter: no lookup for longer ones.
const MAX_NAME: usize = 32;

/// The index of the command named `name` (any case), or of `container|sub`.
pub(crate) fn index_of(name: &[u8]) -> Option<usize> {
    // Lower-cased on the stack: every request looks its name up.
    let mut lower = [0u8; MAX_NAME];
    let lower = lower.get_mut(..name.len())?;
    for (to, from) in lower.iter_mut().zip(name) {
        *to = from.to_ascii_lowercase();
    }
    BY_NAME.get(std::str::from_utf8(lower).ok()?).copied()
}

/// The command `args` ask for, or the error Redis gives when there is none.
fn lookup(args: &[Bytes]) -> Result<usize, Reply> {
    let Some(index) = index_of(&args[0]) else {
        return Err(unknown_command(args));
    };
    if args.len() < 2 || !HAS_SUBCOMMANDS[index] {
        return Ok(index);
    }
    let mut full = args[0].to_vec();
    full.push(b'|');
    full.extend_from_slice(&args[1]);
    index_of(&full).ok_or_else(|| {
        Reply::error(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            shown(&args[1], 128),
            String::from_utf8_lossy(&args[0]).to_uppercase()
        ))
    })
}

/// Run one request (a non-empty list of arguments), or defer it to `pipeline` (a plain
/// write); its reply, after those of the writes deferred before it, goes to `output`.
pub(crate) fn execute(
    shared: &Shared,
    session: &mut Session,
    args: Vec<Bytes>,
    pipeline: &mut Pipeline,
    output: &mut BytesMut,
) {
    let checked = checked(shared, session, &args);
    if let Ok(index) = checked {
        if let Some(deadline) = pipeline.defers(COMMANDS[index].name, &args) {
            return pipeline.defer(index, args, deadline, session.protocol, output);
        }
    }
    let reply = match checked {
        Ok(index) => {
            pipeline.commit(session.protocol, output);
            let started = Instant::now();
            let now = crate::expiry::now_ms();
            let reply = match expire_named_keys(shared, &COMMANDS[index], &args, now) {
                Ok(()) => (COMMANDS[index].run)(&mut Call {
                    shared,
                    session,
                    args: &args,
                    now,
                }),
                Err(reply) => reply,
            };
            shared
                .db
                .counters
                .called(index, started.elapsed(), reply.is_error());
            reply
        }
        Err(reply) => {
            pipeline.commit(session.protocol, output);
            reply
        }
    };
    // In the protocol the command leaves (HELLO 3 answers in RESP3).
    reply.encode(session.protocol, output);
}

/// Lazy expiry: the keys `command` names in `args` (by the table's key positions) whose
/// deadline is at or before `now` are deleted before it runs, so it sees them absent.
fn expire_named_keys(
    shared: &Shared,
    command: &Command,
    args: &[Bytes],
    now: u64,
) -> Result<(), Reply> {
    if !shared.db.may_have_deadlines() {
        return Ok(());
    }
    let (first, last, step) = command.keys;
    if first <= 0 {
        return Ok(());
    }
    let last = if last < 0 {
        args.len() as i64 + last
    } else {
        last.min(args.len() as i64 - 1)
    };
    let keys: Vec<&[u8]> = (first..=last)
        .step_by(step.max(1) as usize)
        .map(|at| &args[at as usize][..])
        .collect();
    shared.db.expire_due(&keys, now).map_err(store_error)
}

/// The index of the command `args` asks for, if it may run: named, of the right arity, not
/// inside a refused MULTI; else the error Redis gives.
fn checked(shared: &Shared, session: &Session, args: &[Bytes]) -> Result<usize, Reply> {
    let index = lookup(args).inspect_err(|_| shared.db.counters.unknown())?;
    let command = &COMMANDS[index];
    if !command.takes(args.len()) {
        shared.db.counters.rejected(index);
        return Err(wrong_arity(command.name));
    }
    if session.refused_multi && !connection::ends_or_nests_multi(command.name) {
        shared.db.counters.rejected(index);
        return Err(Reply::error(
            "ERR not run: this connection is inside a MULTI the server refused (it has no transactions yet); EXEC or DISCARD ends it",
        ));
    }
    Ok(index)
}

/// Up to `max` bytes of `bytes`, cut at a zero byte as C's `%.*s` would, for an error text.
fn shown(bytes: &[u8], max: usize) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end.min(max)]).into_owned()
}

fn unknown_command(args: &[Bytes]) -> Reply {
    let mut quoted = Vec::new();
    for arg in &args[1..] {
        if quoted.len() >= 128 {
            break;
        }
        let end = arg.iter().position(|&b| b == 0).unwrap_or(arg.len());
        let room = 128 - quoted.len();
        quoted.push(b'\'');
        quoted.extend_from_slice(&arg[..end.min(room)]);
        quoted.extend_from_slice(b"' ");
    }
    let name_end = args[0]
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(args[0].len());
    let mut message = b"ERR unknown command '".to_vec();
    message.extend_from_slice(&args[0][..name_end.min(128)]);
    message.extend_from_slice(b"', with args beginning with: ");
    message.extend_from_slice(&quoted);
    Reply::error(message)
}

pub(crate) fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// A command of one type on a key holding another.
pub(crate) fn wrong_type() -> Reply {
    Reply::error("WRONGTYPE Operation against a key holding the wrong kind of value")
}

/// The string `key` holds, or WRONGTYPE if it holds a hash (a keyspace value equal to the
/// hash marker is looked up among the hashes; any other value is a string's).
pub(crate) fn string_value<B: pmem_structures::raw::pmem_ordering::Backend>(
    maps: &crate::db::Maps<B>,
    key: &[u8],
    value: Option<Vec<u8>>,
) -> Result<Result<Option<Vec<u8>>, Reply>, Error> {
    Ok(match maps.kind(key, value)? {
        Kind::Absent => Ok(None),
        Kind::String(value) => Ok(Some(value)),
        Kind::Hash(_) => Err(wrong_type()),
    })
}

/// Run `command` on the keyspace's maps; a store error becomes its reply.
pub(crate) fn with_maps(
    shared: &Shared,
    command: impl FnOnce(&crate::db::Maps) -> Result<Reply, Error>,
) -> Reply {
    match shared.db.with_maps(command) {
        Ok(Ok(reply)) => reply,
        Ok(Err(error)) => store_error(DbError::Store(error)),
        Err(error) => store_error(error),
    }
}

pub(crate) fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

/// Run `command` on the keyspace; a store error becomes its reply.
pub(crate) fn with_map(
    shared: &Shared,
    command: impl FnOnce(&Keyspace) -> Result<Reply, Error>,
) -> Reply {
    match shared.db.with_map(command) {
        Ok(Ok(reply)) => reply,
        Ok(Err(error)) => store_error(DbError::Store(error)),
        Err(error) => store_error(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_is_lower_case_unique_and_every_subcommand_has_its_container() {
        assert_eq!(BY_NAME.len(), COMMANDS.len(), "a name is listed twice");
        for command in COMMANDS {
            assert_eq!(command.name, command.name.to_ascii_lowercase());
            assert!(command.name.len() <= MAX_NAME, "{}", command.name);
            if let Some((container, _)) = command.name.split_once('|') {
                let container = &COMMANDS[index_of(container.as_bytes()).unwrap()];
                assert!(container.subcommands().any(|sub| sub.name == command.name));
            }
            assert_ne!(command.arity, 0, "{}", command.name);
        }
        // The lookup's table of containers agrees with the names.
        for (index, command) in COMMANDS.iter().enumerate() {
            let container = COMMANDS
                .iter()
                .any(|sub| sub.name.starts_with(&format!("{}|", command.name)));
            assert_eq!(HAS_SUBCOMMANDS[index], container, "{}", command.name);
        }
    }

    #[test]
    fn names_are_found_in_any_case_and_subcommands_through_their_container() {
        let args = |words: &[&str]| -> Vec<Bytes> {
            words
                .iter()
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        let name = |index: usize| COMMANDS[index].name;
        assert_eq!(lookup(&args(&["gEt", "k"])).map(name), Ok("get"));
        assert_eq!(
            lookup(&args(&["client", "SETNAME", "x"])).map(name),
            Ok("client|setname")
        );
        assert_eq!(lookup(&args(&["COMMAND"])).map(name), Ok("command"));
        assert_eq!(
            lookup(&args(&["client", "nope"])),
            Err(Reply::error(
                "ERR unknown subcommand 'nope'. Try CLIENT HELP."
            ))
        );
        assert_eq!(
            lookup(&args(&["nosuch", "a", "b"])),
            Err(Reply::error(
                "ERR unknown command 'nosuch', with args beginning with: 'a' 'b' "
            ))
        );
        // Arguments are quoted until 128 bytes are shown, each cut to what room is left.
        let long = "x".repeat(100);
        let Err(Reply::Error(message)) = lookup(&args(&["nosuch", &long, &long, "c"])) else {
            panic!()
        };
        let shown = format!("'{long}' '{}' ", "x".repeat(128 - 103));
        assert!(message.ends_with(shown.as_bytes()), "{message:?}");
    }
}
