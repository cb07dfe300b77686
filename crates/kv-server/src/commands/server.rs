//! `INFO`, `CONFIG` (nothing to read or set at run time: settings are command-line flags)
//! and `COMMAND`, which describes the command table as Redis 7 does, for clients that probe
//! it (cluster clients read key positions, redis-cli reads `COMMAND DOCS` for its hints).

use super::{wrong_arity, Call, Command, COMMANDS};
use crate::glob;
use crate::info;
use crate::reply::Reply;

pub(super) fn info(call: &mut Call) -> Reply {
    Reply::Verbatim(info::render(
        call.shared,
        &call.args[1..],
        super::COMMAND_NAMES,
    ))
}

/// A container command named alone (`CLIENT`) fails its arity check before it gets here;
/// with arguments, its subcommand runs instead.
pub(super) fn container(call: &mut Call) -> Reply {
    wrong_arity(&String::from_utf8_lossy(&call.args[0]).to_lowercase())
}

/// `CONFIG GET`: no parameter can be read at run time, so none matches (tools such as
/// redis-benchmark ask and go on).
pub(super) fn config_get(_call: &mut Call) -> Reply {
    Reply::Map(Vec::new())
}

pub(super) fn config_unsupported(call: &mut Call) -> Reply {
    Reply::error(format!(
        "ERR CONFIG {} is not supported: settings are command-line flags",
        String::from_utf8_lossy(&call.args[1]).to_uppercase()
    ))
}

/// `<CONTAINER> HELP`: each subcommand and its summary.
pub(super) fn help(call: &mut Call) -> Reply {
    let container = String::from_utf8_lossy(&call.args[0]).to_lowercase();
    let Some(index) = super::index_of(container.as_bytes()) else {
        return wrong_arity(&container);
    };
    let mut lines = vec![Reply::status(format!(
        "{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        container.to_uppercase()
    ))];
    for sub in COMMANDS[index].subcommands() {
        let (_, name) = sub.name.split_once('|').unwrap_or(("", sub.name));
        lines.push(Reply::status(name.to_uppercase()));
        lines.push(Reply::status(format!("    {}", sub.summary)));
    }
    Reply::Array(lines)
}

fn top_level() -> impl Iterator<Item = &'static Command> {
    COMMANDS.iter().filter(|command| !command.is_subcommand())
}

/// ACL categories as Redis names them, from the command's flags and group.
fn categories(command: &Command) -> Vec<&'static str> {
    let mut categories = Vec::new();
    if command.flags.contains(&"write") {
        categories.push("@write");
    }
    if command.flags.contains(&"readonly") {
        categories.push("@read");
    }
    match command.group {
        "string" => categories.push("@string"),
        "generic" => categories.push("@keyspace"),
        "connection" => categories.push("@connection"),
        "transactions" => categories.push("@transaction"),
        _ => {}
    }
    categories.push(if command.flags.contains(&"fast") {
        "@fast"
    } else {
        "@slow"
    });
    categories
}

/// One command as `COMMAND INFO` gives it: name, arity, flags, first key, last key, key
/// step, ACL categories, tips, key specifications (none given: the legacy positions say
/// it), subcommands.
fn command_reply(command: &Command) -> Reply {
    let statuses =
        |items: &[&'static str]| Reply::Set(items.iter().map(|&i| Reply::status(i)).collect());
    let (first, last, step) = command.keys;
    Reply::Array(vec![
        Reply::bulk(command.name),
        Reply::Integer(command.arity),
        statuses(command.flags),
        Reply::Integer(first),
        Reply::Integer(last),
        Reply::Integer(step),
        statuses(&categories(command)),
        Reply::Set(Vec::new()),
        Reply::Array(Vec::new()),
        Reply::Array(command.subcommands().map(command_reply).collect()),
    ])
}

pub(super) fn command(_call: &mut Call) -> Reply {
    Reply::Array(top_level().map(command_reply).collect())
}

pub(super) fn command_count(_call: &mut Call) -> Reply {
    Reply::Integer(top_level().count() as i64)
}

/// The commands named (a subcommand as `container|sub`): `None` for names not found.
fn named(names: &[bytes::Bytes]) -> Vec<Option<&'static Command>> {
    names
        .iter()
        .map(|name| super::index_of(name).map(|index| &COMMANDS[index]))
        .collect()
}

pub(super) fn command_info(call: &mut Call) -> Reply {
    if call.args.len() == 2 {
        return command(call);
    }
    Reply::Array(
        named(&call.args[2..])
            .into_iter()
            .map(|found| found.map_or(Reply::Null, command_reply))
            .collect(),
    )
}

fn docs_reply(command: &Command) -> Reply {
    let mut fields = vec![
        (Reply::bulk("summary"), Reply::bulk(command.summary)),
        (Reply::bulk("since"), Reply::bulk(command.since)),
        (Reply::bulk("group"), Reply::bulk(command.group)),
    ];
    let subcommands: Vec<(Reply, Reply)> = command
        .subcommands()
        .map(|sub| (Reply::bulk(sub.name), docs_reply(sub)))
        .collect();
    if !subcommands.is_empty() {
        fields.push((Reply::bulk("subcommands"), Reply::Map(subcommands)));
    }
    Reply::Map(fields)
}

/// `COMMAND DOCS [name ...]`: a map of each command found to its summary, the version that
/// brought it and its group (names not found are left out, as in Redis).
pub(super) fn command_docs(call: &mut Call) -> Reply {
    let commands: Vec<&Command> = if call.args.len() == 2 {
        top_level().collect()
    } else {
        named(&call.args[2..]).into_iter().flatten().collect()
    };
    Reply::Map(
        commands
            .into_iter()
            .map(|command| (Reply::bulk(command.name), docs_reply(command)))
            .collect(),
    )
}

/// `COMMAND LIST [FILTERBY ACLCAT category | PATTERN pattern | MODULE name]`.
pub(super) fn command_list(call: &mut Call) -> Reply {
    let names = |keep: &dyn Fn(&Command) -> bool| {
        Reply::Array(
            top_level()
                .filter(|command| keep(command))
                .map(|command| Reply::bulk(command.name))
                .collect(),
        )
    };
    match &call.args[2..] {
        [] => names(&|_| true),
        [filterby, kind, value] if filterby.eq_ignore_ascii_case(b"FILTERBY") => {
            if kind.eq_ignore_ascii_case(b"PATTERN") {
                names(&|command| glob::matches(value, command.name.as_bytes()))
            } else if kind.eq_ignore_ascii_case(b"ACLCAT") {
                let wanted = format!("@{}", String::from_utf8_lossy(value)).to_lowercase();
                names(&|command| categories(command).contains(&wanted.as_str()))
            } else if kind.eq_ignore_ascii_case(b"MODULE") {
                // No modules.
                names(&|_| false)
            } else {
                super::syntax_error()
            }
        }
        _ => super::syntax_error(),
    }
}
