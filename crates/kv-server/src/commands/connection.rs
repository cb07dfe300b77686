//! The connection's own commands: liveness, the handshake (`HELLO`, `AUTH`), the client's
//! name and library, the database number, and transactions, which are refused until the
//! store's write batches can make them atomic: `MULTI` is answered with an error and every
//! command after it up to `EXEC` or `DISCARD` with another, unrun, so a client that sends a
//! transaction in one go (as redis-py's pipelines do) applies none of it and fails.

use bytes::Bytes;

use super::{integer, Call};
use crate::info::REDIS_VERSION;
use crate::reply::{Protocol, Reply};

pub(super) fn ping(call: &mut Call) -> Reply {
    match call.args.len() {
        1 => Reply::status("PONG"),
        2 => Reply::bulk(call.args[1].clone()),
        _ => super::wrong_arity("ping"),
    }
}

pub(super) fn echo(call: &mut Call) -> Reply {
    Reply::bulk(call.args[1].clone())
}

pub(super) fn quit(call: &mut Call) -> Reply {
    call.session.closing = true;
    Reply::ok()
}

pub(super) fn select(call: &mut Call) -> Reply {
    match integer(&call.args[1]) {
        Ok(0) => Reply::ok(),
        Ok(1..=15) => {
            Reply::error("ERR DB index is out of range (this server has one database, 0)")
        }
        Ok(_) => Reply::error("ERR DB index is out of range"),
        Err(reply) => reply,
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switch protocol, maybe name the
/// connection, and describe the server.
pub(super) fn hello(call: &mut Call) -> Reply {
    let args = call.args;
    let mut protocol = None;
    if let Some(version) = args.get(1) {
        protocol = match crate::numbers::parse_i64(version) {
            Some(2) => Some(Protocol::Resp2),
            Some(3) => Some(Protocol::Resp3),
            Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
            None => return Reply::error("ERR Protocol version is not an integer or out of range"),
        };
    }
    let mut name = None;
    let mut at = 2;
    while at < args.len() {
        let left = args.len() - 1 - at;
        let option = args[at].to_ascii_uppercase();
        if option == b"AUTH" && left >= 2 {
            if let Err(reply) = authenticate(&args[at + 1], &args[at + 2]) {
                return reply;
            }
            at += 3;
        } else if option == b"SETNAME" && left >= 1 {
            if let Err(reply) = valid_name(&args[at + 1]) {
                return reply;
            }
            name = Some(args[at + 1].clone());
            at += 2;
        } else {
            let mut message = b"ERR Syntax error in HELLO option '".to_vec();
            message.extend_from_slice(&args[at]);
            message.push(b'\'');
            return Reply::error(message);
        }
    }
    if let Some(name) = name {
        call.session.name = (!name.is_empty()).then_some(name);
    }
    if let Some(protocol) = protocol {
        call.session.protocol = protocol;
    }
    let field = |name: &'static str| Reply::bulk(name);
    Reply::Map(vec![
        (field("server"), field("pmem-kv-server")),
        (field("version"), field(REDIS_VERSION)),
        (
            field("proto"),
            Reply::Integer(call.session.protocol.version()),
        ),
        (field("id"), Reply::Integer(call.session.id as i64)),
        (field("mode"), field("standalone")),
        (field("role"), field("master")),
        (field("modules"), Reply::Array(Vec::new())),
    ])
}

/// The server has no passwords: the default user takes any password, as in a Redis without
/// `requirepass`; any other user does not exist.
fn authenticate(user: &[u8], _password: &[u8]) -> Result<(), Reply> {
    if user == b"default" {
        Ok(())
    } else {
        Err(Reply::error(
            "WRONGPASS invalid username-password pair or user is disabled.",
        ))
    }
}

pub(super) fn auth(call: &mut Call) -> Reply {
    match call.args {
        [_, _password] => Reply::error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"),
        [_, user, password] => match authenticate(user, password) {
            Ok(()) => Reply::ok(),
            Err(reply) => reply,
        },
        _ => super::syntax_error(),
    }
}

pub(super) fn reset(call: &mut Call) -> Reply {
    call.session.reset();
    Reply::status("RESET")
}

/// Redis's rule for client names and library fields: printable ASCII without spaces.
fn printable(value: &[u8]) -> bool {
    value.iter().all(|&b| (b'!'..=b'~').contains(&b))
}

fn valid_name(name: &[u8]) -> Result<(), Reply> {
    if printable(name) {
        Ok(())
    } else {
        Err(Reply::error(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ))
    }
}

pub(super) fn client_id(call: &mut Call) -> Reply {
    Reply::Integer(call.session.id as i64)
}

pub(super) fn client_getname(call: &mut Call) -> Reply {
    call.session.name.clone().map_or(Reply::Null, Reply::Bulk)
}

pub(super) fn client_setname(call: &mut Call) -> Reply {
    let name = &call.args[2];
    if let Err(reply) = valid_name(name) {
        return reply;
    }
    call.session.name = (!name.is_empty()).then(|| name.clone());
    Reply::ok()
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value` (Redis 7.2; clients send it on connect).
pub(super) fn client_setinfo(call: &mut Call) -> Reply {
    let (attribute, value) = (&call.args[2], &call.args[3]);
    let (slot, shown): (&mut Option<Bytes>, &str) = if attribute.eq_ignore_ascii_case(b"lib-name") {
        (&mut call.session.lib_name, "lib-name")
    } else if attribute.eq_ignore_ascii_case(b"lib-ver") {
        (&mut call.session.lib_version, "lib-ver")
    } else {
        return Reply::error(format!(
            "ERR Unrecognized option '{}'",
            String::from_utf8_lossy(attribute)
        ));
    };
    if !printable(value) {
        return Reply::error(format!(
            "ERR {shown} cannot contain spaces, newlines or special characters."
        ));
    }
    *slot = (!value.is_empty()).then(|| value.clone());
    Reply::ok()
}

/// `CLIENT INFO`: this connection in `CLIENT LIST`'s format (the fields this server keeps).
pub(super) fn client_info(call: &mut Call) -> Reply {
    let session = &call.session;
    let text = |value: &Option<Bytes>| {
        value
            .as_ref()
            .map_or_else(String::new, |v| String::from_utf8_lossy(v).into_owned())
    };
    let addr = session.peer.map_or_else(String::new, |a| a.to_string());
    Reply::Verbatim(format!(
        "id={} addr={addr} laddr={} name={} age={} db=0 multi={} resp={} lib-name={} lib-ver={}\n",
        session.id,
        call.shared.addr,
        text(&session.name),
        session.connected.elapsed().as_secs(),
        if session.refused_multi { 0 } else { -1 },
        session.protocol.version(),
        text(&session.lib_name),
        text(&session.lib_version),
    ))
}

/// Whether a command is let through inside a refused `MULTI`: those that end it, nest it, or
/// leave the connection.
pub(super) fn ends_or_nests_multi(name: &str) -> bool {
    matches!(
        name,
        "exec" | "discard" | "multi" | "watch" | "quit" | "reset"
    )
}

pub(super) fn multi(call: &mut Call) -> Reply {
    if call.session.refused_multi {
        return Reply::error("ERR MULTI calls can not be nested");
    }
    call.session.refused_multi = true;
    Reply::error("ERR MULTI is not supported yet: this server has no transactions; the commands up to EXEC or DISCARD will be refused, not run")
}

pub(super) fn exec(call: &mut Call) -> Reply {
    if !std::mem::take(&mut call.session.refused_multi) {
        return Reply::error("ERR EXEC without MULTI");
    }
    Reply::error("EXECABORT Transaction discarded because of previous errors.")
}

pub(super) fn discard(call: &mut Call) -> Reply {
    if !std::mem::take(&mut call.session.refused_multi) {
        return Reply::error("ERR DISCARD without MULTI");
    }
    Reply::ok()
}

pub(super) fn watch(call: &mut Call) -> Reply {
    if call.session.refused_multi {
        return Reply::error("ERR WATCH inside MULTI is not allowed");
    }
    Reply::error("ERR WATCH is not supported yet: this server has no transactions")
}

/// Nothing is ever watched; clients send UNWATCH when they reset a pipeline.
pub(super) fn unwatch(_call: &mut Call) -> Reply {
    Reply::ok()
}
