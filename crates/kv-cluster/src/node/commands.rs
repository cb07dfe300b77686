//! The commands a node serves. Keyed commands are the leader's: a write is proposed with
//! `client_write` and answered once committed by a majority and applied; a read waits for
//! a read index (or the leader's lease, if so configured) and then reads the state machine.
//! Anywhere else the client is sent on: `-MOVED <slot> <leader>` when a leader is known,
//! `-CLUSTERDOWN` when none is, `-TRYAGAIN` when the leader cannot reach a majority.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::StreamExt;
use openraft::error::{ClientWriteError, ForwardToLeader, LinearizableReadError, RaftError};
use pmem_kv_server::protocol::Reply;

use super::routing::elsewhere;
use super::session::Session;
use super::slot::key_slot;
use super::{admin, info, NodeShared};
use crate::state_machine::writes::parse_integer;
use crate::types::{Condition, KvRaft, Outcome, Write};

/// Run one request (a non-empty list of arguments).
pub(crate) async fn execute(shared: &NodeShared, session: &mut Session, args: &[Bytes]) -> Reply {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let arity = |min: usize, exact: bool| {
        let fits = if exact {
            args.len() == min
        } else {
            args.len() >= min
        };
        if fits {
            Ok(())
        } else {
            Err(Reply::error(format!(
                "ERR wrong number of arguments for '{name}' command"
            )))
        }
    };
    let handled: Result<Handled, Reply> = match name.as_str() {
        "ping" => match args.len() {
            1 => Ok(Reply::status("PONG").into()),
            2 => Ok(Reply::bulk(args[1].clone()).into()),
            _ => Err(wrong_arity("ping")),
        },
        "echo" => arity(2, true).map(|()| Reply::bulk(args[1].clone()).into()),
        "quit" => {
            session.closing = true;
            Ok(Reply::ok().into())
        }
        "select" => arity(2, true).map(|()| {
            if &args[1][..] == b"0" {
                Reply::ok().into()
            } else {
                Reply::error("ERR SELECT is not allowed in cluster mode").into()
            }
        }),
        "readonly" | "readwrite" | "asking" => arity(1, true).map(|()| Reply::ok().into()),
        "client" => arity(2, false).map(|()| client(shared, args).into()),
        "info" => Ok(info::reply(shared, args).into()),
        "cluster" => match arity(2, false) {
            Ok(()) => Ok(admin::execute(shared, args).await.into()),
            Err(reply) => Err(reply),
        },
        "get" => arity(2, true).map(|()| Read::Get.into()),
        "strlen" => arity(2, true).map(|()| Read::Strlen.into()),
        "mget" => arity(2, false).map(|()| Read::MGet.into()),
        "exists" => arity(2, false).map(|()| Read::Exists.into()),
        _ => match parse_write(&name, args) {
            Some(Ok(write)) => return propose(shared, write).await,
            Some(Err(reply)) => Err(reply),
            None => Err(unknown_command(args)),
        },
    };
    match handled {
        Ok(Handled::Reply(reply)) => reply,
        Ok(Handled::Read(read)) => linearizable_read(shared, read, &args[1..]).await,
        Err(reply) => reply,
    }
}

/// A command handled at once, or a read that waits for its read index.
enum Handled {
    Reply(Reply),
    Read(Read),
}

impl From<Reply> for Handled {
    fn from(reply: Reply) -> Handled {
        Handled::Reply(reply)
    }
}

impl From<Read> for Handled {
    fn from(read: Read) -> Handled {
        Handled::Read(read)
    }
}

/// The reads.
pub(crate) enum Read {
    Get,
    Strlen,
    MGet,
    Exists,
}

fn wrong_arity(name: &str) -> Reply {
    Reply::error(format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

fn syntax_error() -> Reply {
    Reply::error("ERR syntax error")
}

fn unknown_command(args: &[Bytes]) -> Reply {
    let mut message = b"ERR unknown command '".to_vec();
    message.extend_from_slice(&args[0][..args[0].len().min(128)]);
    message.extend_from_slice(b"'");
    Reply::error(message)
}

fn client(shared: &NodeShared, args: &[Bytes]) -> Reply {
    match String::from_utf8_lossy(&args[1])
        .to_ascii_lowercase()
        .as_str()
    {
        // Clients send these on connecting; the node keeps no per-client names.
        "setname" | "setinfo" => Reply::ok(),
        "id" => Reply::Integer(shared.connections.load(Ordering::Relaxed) as i64),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try CLIENT HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// The write `args` ask for (`None`: not a write command).
pub(crate) fn parse_write(name: &str, args: &[Bytes]) -> Option<Result<Write, Reply>> {
    let key = |i: usize| args[i].to_vec();
    let exact = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(wrong_arity(name))
        }
    };
    let integer = |i: usize| {
        parse_integer(&args[i])
            .ok_or_else(|| Reply::error("ERR value is not an integer or out of range"))
    };
    Some(match name {
        "set" => parse_set(args),
        "setnx" => exact(3).map(|()| Write::Set {
            key: key(1),
            value: key(2),
            when: Condition::IfAbsent,
            get: false,
            integer_reply: true,
        }),
        "append" => exact(3).map(|()| Write::Append {
            key: key(1),
            value: key(2),
        }),
        "incr" => exact(2).map(|()| Write::IncrBy { key: key(1), by: 1 }),
        "decr" => exact(2).map(|()| Write::IncrBy {
            key: key(1),
            by: -1,
        }),
        "incrby" => exact(3)
            .and_then(|()| integer(2))
            .map(|by| Write::IncrBy { key: key(1), by }),
        "decrby" => exact(3).and_then(|()| integer(2)).and_then(|by| {
            by.checked_neg()
                .map(|by| Write::IncrBy { key: key(1), by })
                .ok_or_else(|| Reply::error("ERR decrement would overflow"))
        }),
        "mset" => {
            if args.len() < 3 || args.len().is_multiple_of(2) {
                Err(wrong_arity(name))
            } else {
                Ok(Write::MSet {
                    pairs: args[1..]
                        .chunks(2)
                        .map(|pair| (pair[0].to_vec(), pair[1].to_vec()))
                        .collect(),
                })
            }
        }
        "del" | "unlink" => {
            if args.len() < 2 {
                Err(wrong_arity(name))
            } else {
                Ok(Write::Del {
                    keys: args[1..].iter().map(|k| k.to_vec()).collect(),
                })
            }
        }
        "flushdb" | "flushall" => match args.len() {
            1 => Ok(Write::Flush),
            2 if ["sync", "async"]
                .iter()
                .any(|mode| args[1].eq_ignore_ascii_case(mode.as_bytes())) =>
            {
                Ok(Write::Flush)
            }
            2 => Err(syntax_error()),
            _ => Err(wrong_arity(name)),
        },
        _ => return None,
    })
}

/// `SET key value [NX|XX] [GET] [KEEPTTL]`; keys never expire, so an expiry is refused.
fn parse_set(args: &[Bytes]) -> Result<Write, Reply> {
    if args.len() < 3 {
        return Err(wrong_arity("set"));
    }
    let mut when = Condition::Always;
    let mut get = false;
    for option in &args[3..] {
        match option.to_ascii_uppercase().as_slice() {
            b"NX" if when != Condition::IfPresent => when = Condition::IfAbsent,
            b"XX" if when != Condition::IfAbsent => when = Condition::IfPresent,
            b"GET" => get = true,
            b"KEEPTTL" => {}
            b"EX" | b"PX" | b"EXAT" | b"PXAT" => return Err(Reply::error(
                "ERR keys never expire on this server: SET with EX, PX, EXAT or PXAT is refused",
            )),
            _ => return Err(syntax_error()),
        }
    }
    Ok(Write::Set {
        key: args[1].to_vec(),
        value: args[2].to_vec(),
        when,
        get,
        integer_reply: false,
    })
}

/// The slot `-MOVED` names for a write: its first key's (0 for a flush).
fn write_slot(write: &Write) -> u16 {
    write.keys().first().map_or(0, |key| key_slot(key))
}

/// Propose `write`, answer once it is committed and applied.
async fn propose(shared: &NodeShared, write: Write) -> Reply {
    let slot = write_slot(&write);
    let proposed = tokio::time::timeout(shared.write_timeout, shared.raft.client_write(write));
    match proposed.await {
        Err(_) => unconfirmed(shared),
        Ok(Ok(response)) => outcome(response.data),
        Ok(Err(RaftError::APIError(refused))) => write_refused(refused, slot),
        Ok(Err(RaftError::Fatal(fatal))) => stopped(&fatal),
    }
}

/// Propose a connection's consecutive `writes` together (one message to Raft, appended in
/// order) and answer each, in order, once it is committed and applied.
pub(crate) async fn propose_all(shared: &NodeShared, writes: Vec<Write>) -> Vec<Reply> {
    if writes.len() == 1 {
        let write = writes.into_iter().next().expect("one write");
        return vec![propose(shared, write).await];
    }
    let slots: Vec<u16> = writes.iter().map(write_slot).collect();
    let deadline = tokio::time::Instant::now() + shared.write_timeout;
    let proposed = tokio::time::timeout_at(deadline, shared.raft.client_write_many(writes));
    let mut results = match proposed.await {
        Err(_) => return slots.iter().map(|_| unconfirmed(shared)).collect(),
        Ok(Err(fatal)) => return slots.iter().map(|_| stopped(&fatal)).collect(),
        Ok(Ok(results)) => results,
    };
    let mut replies = Vec::with_capacity(slots.len());
    for slot in slots {
        replies.push(
            match tokio::time::timeout_at(deadline, results.next()).await {
                Err(_) => unconfirmed(shared),
                Ok(None) => {
                    Reply::error("ERR the write's result never came: it may or may not be applied")
                }
                Ok(Some(Err(fatal))) => stopped(&fatal),
                Ok(Some(Ok(Ok(response)))) => outcome(response.response),
                Ok(Some(Ok(Err(refused)))) => write_refused(refused, slot),
            },
        );
    }
    replies
}

fn unconfirmed(shared: &NodeShared) -> Reply {
    Reply::error(format!(
        "ERR the write was not confirmed within {:?}: it may or may not be applied",
        shared.write_timeout
    ))
}

fn stopped(fatal: &impl std::fmt::Display) -> Reply {
    Reply::error(format!("CLUSTERDOWN this node's Raft has stopped: {fatal}"))
}

/// Why a write for slot `slot` was not applied, or is in doubt.
fn write_refused(refused: ClientWriteError<KvRaft>, slot: u16) -> Reply {
    match refused {
        ClientWriteError::ForwardToLeader(forward) => elsewhere(&forward, slot),
        ClientWriteError::LogEntryDiscarded(_) => Reply::error(
            "ERR the leader changed before the write was confirmed: it may or may not be applied",
        ),
        other => Reply::error(format!("ERR {other}")),
    }
}

fn outcome(outcome: Outcome) -> Reply {
    match outcome {
        Outcome::Ok => Reply::ok(),
        Outcome::Null => Reply::Null,
        Outcome::Integer(n) => Reply::Integer(n),
        Outcome::Bulk(bytes) => Reply::bulk(bytes),
        Outcome::Error(text) => Reply::error(text),
    }
}

/// Why reads cannot be served here and now.
enum NotReady {
    Elsewhere(ForwardToLeader<KvRaft>),
    TryAgain,
    Stopped(String),
}

impl NotReady {
    fn reply(&self, slot: u16) -> Reply {
        match self {
            NotReady::Elsewhere(forward) => elsewhere(forward, slot),
            NotReady::TryAgain => try_again(),
            NotReady::Stopped(fatal) => stopped(fatal),
        }
    }
}

/// Wait until a read of the state machine is linearizable (a read index, or the lease).
async fn ready_to_read(shared: &NodeShared) -> Result<(), NotReady> {
    let ready = tokio::time::timeout(
        shared.write_timeout,
        shared.raft.ensure_linearizable(shared.read_policy.clone()),
    );
    match ready.await {
        Err(_) => Err(NotReady::TryAgain),
        Ok(Ok(_)) => Ok(()),
        Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(forward)))) => {
            Err(NotReady::Elsewhere(forward))
        }
        Ok(Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(_)))) => {
            Err(NotReady::TryAgain)
        }
        Ok(Err(RaftError::Fatal(fatal))) => Err(NotReady::Stopped(fatal.to_string())),
    }
}

/// Wait until a read of the state machine is linearizable, then read `keys`.
async fn linearizable_read(shared: &NodeShared, read: Read, keys: &[Bytes]) -> Reply {
    match ready_to_read(shared).await {
        Ok(()) => read_now(shared, &read, keys),
        Err(not_ready) => not_ready.reply(key_slot(&keys[0])),
    }
}

/// A connection's consecutive reads behind one read index: it is taken after all of them
/// arrived and before any is answered, so each is linearizable.
pub(crate) async fn read_all(shared: &NodeShared, reads: Vec<(Read, Vec<Bytes>)>) -> Vec<Reply> {
    match ready_to_read(shared).await {
        Ok(()) => reads
            .iter()
            .map(|(read, keys)| read_now(shared, read, keys))
            .collect(),
        Err(not_ready) => reads
            .iter()
            .map(|(_, keys)| not_ready.reply(key_slot(&keys[0])))
            .collect(),
    }
}

/// Read `keys` from the state machine as applied here.
fn read_now(shared: &NodeShared, read: &Read, keys: &[Bytes]) -> Reply {
    let get = |key: &Bytes| shared.maps.get(key);
    let result = match read {
        Read::Get => get(&keys[0]).map(Reply::bulk_or_null),
        Read::Strlen => get(&keys[0]).map(|v| Reply::Integer(v.map_or(0, |v| v.len() as i64))),
        Read::MGet => keys
            .iter()
            .map(|key| get(key).map(Reply::bulk_or_null))
            .collect::<Result<Vec<_>, _>>()
            .map(Reply::Array),
        Read::Exists => keys
            .iter()
            .map(|key| get(key).map(|v| i64::from(v.is_some())))
            .sum::<Result<i64, _>>()
            .map(Reply::Integer),
    };
    result.unwrap_or_else(|e| Reply::error(format!("ERR {e}")))
}

fn try_again() -> Reply {
    Reply::error(
        "TRYAGAIN the leader could not confirm its leadership with a majority of the nodes; try again",
    )
}
