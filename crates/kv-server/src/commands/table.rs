//! Every command the server runs: name, arity (Redis's convention), flags, key positions,
//! group, the Redis version that introduced it, a one-line summary, and its handler. The
//! arity check and `COMMAND`'s replies (`INFO`, `DOCS`, `COUNT`, `LIST`) come from here, so
//! they cannot disagree with what runs.

use super::{connection, expiry, hashes, keys, multikey, server, strings, Command};

macro_rules! table {
    ($(
        $name:literal $arity:literal [$($flag:ident)*] ($first:literal $last:literal $step:literal)
        $group:ident $since:literal $run:path, $summary:literal;
    )*) => {
        /// Every command's name, in [`COMMANDS`]' order.
        pub(crate) static COMMAND_NAMES: &[&str] = &[$($name),*];

        // The counters keep a slot per command (`crate::counters::MAX_COMMANDS`).
        const _: () = assert!([$($name),*].len() <= crate::counters::MAX_COMMANDS);

        /// Every command, containers before their subcommands.
        pub(crate) static COMMANDS: &[Command] = &[$(
            Command {
                name: $name,
                arity: $arity,
                flags: &[$(stringify!($flag)),*],
                keys: ($first, $last, $step),
                group: stringify!($group),
                since: $since,
                summary: $summary,
                run: $run,
            },
        )*];
    };
}

table! {
    "get" 2 [readonly fast] (1 1 1) string "1.0.0" strings::get,
        "Returns the string value of a key.";
    "set" -3 [write denyoom] (1 1 1) string "1.0.0" strings::set,
        "Sets the string value of a key (NX, XX, GET, EX, PX, EXAT, PXAT, KEEPTTL).";
    "setex" 4 [write denyoom] (1 1 1) string "2.0.0" expiry::setex,
        "Sets the string value and expiration time of a key.";
    "psetex" 4 [write denyoom] (1 1 1) string "2.6.0" expiry::psetex,
        "Sets both string value and expiration time in milliseconds of a key.";
    "getex" -2 [write fast] (1 1 1) string "6.2.0" expiry::getex,
        "Returns the string value of a key after setting its expiration time.";
    "setnx" 3 [write denyoom fast] (1 1 1) string "1.0.0" strings::setnx,
        "Sets the string value of a key only when the key doesn't exist.";
    "append" 3 [write denyoom fast] (1 1 1) string "2.0.0" strings::append,
        "Appends a string to the value of a key. Creates the key if it doesn't exist.";
    "strlen" 2 [readonly fast] (1 1 1) string "2.2.0" strings::strlen,
        "Returns the length of a string value.";
    "setrange" 4 [write denyoom] (1 1 1) string "2.2.0" strings::setrange,
        "Overwrites a part of a string value with another by an offset, zero-padding it.";
    "getrange" 4 [readonly] (1 1 1) string "2.4.0" strings::getrange,
        "Returns a substring of the string stored at a key.";
    "substr" 4 [readonly] (1 1 1) string "1.0.0" strings::getrange,
        "Returns a substring from a string value (GETRANGE's old name).";
    "incr" 2 [write denyoom fast] (1 1 1) string "1.0.0" strings::incr,
        "Increments the integer value of a key by one.";
    "decr" 2 [write denyoom fast] (1 1 1) string "1.0.0" strings::decr,
        "Decrements the integer value of a key by one.";
    "incrby" 3 [write denyoom fast] (1 1 1) string "1.0.0" strings::incrby,
        "Increments the integer value of a key by a number.";
    "decrby" 3 [write denyoom fast] (1 1 1) string "1.0.0" strings::decrby,
        "Decrements a number from the integer value of a key.";
    "incrbyfloat" 3 [write denyoom fast] (1 1 1) string "2.6.0" strings::incrbyfloat,
        "Increments the floating point value of a key by a number.";
    "getset" 3 [write denyoom fast] (1 1 1) string "1.0.0" strings::getset,
        "Returns the previous string value of a key after setting it to a new value.";
    "getdel" 2 [write fast] (1 1 1) string "6.2.0" strings::getdel,
        "Returns the string value of a key after deleting the key.";
    "mget" -2 [readonly fast] (1 -1 1) string "1.0.0" multikey::mget,
        "Atomically returns the string values of one or more keys.";
    "mset" -3 [write denyoom] (1 -1 2) string "1.0.1" multikey::mset,
        "Atomically creates or modifies the string values of one or more keys.";
    "msetnx" -3 [write denyoom] (1 -1 2) string "1.0.1" multikey::msetnx,
        "Atomically modifies the string values of one or more keys only when all keys don't exist.";
    "hset" -4 [write denyoom fast] (1 1 1) hash "2.0.0" hashes::hset,
        "Creates or modifies the value of a field in a hash.";
    "hmset" -4 [write denyoom fast] (1 1 1) hash "2.0.0" hashes::hmset,
        "Sets the values of multiple fields (HSET's old name, answering OK).";
    "hsetnx" 4 [write denyoom fast] (1 1 1) hash "2.0.0" hashes::hsetnx,
        "Sets the value of a field in a hash only when the field doesn't exist.";
    "hget" 3 [readonly fast] (1 1 1) hash "2.0.0" hashes::hget,
        "Returns the value of a field in a hash.";
    "hmget" -3 [readonly fast] (1 1 1) hash "2.0.0" hashes::hmget,
        "Returns the values of all fields in a hash.";
    "hgetall" 2 [readonly] (1 1 1) hash "2.0.0" hashes::hgetall,
        "Returns all fields and values in a hash, in field order.";
    "hdel" -3 [write fast] (1 1 1) hash "2.0.0" hashes::hdel,
        "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.";
    "hlen" 2 [readonly fast] (1 1 1) hash "2.0.0" hashes::hlen,
        "Returns the number of fields in a hash.";
    "hexists" 3 [readonly fast] (1 1 1) hash "2.0.0" hashes::hexists,
        "Determines whether a field exists in a hash.";
    "hkeys" 2 [readonly] (1 1 1) hash "2.0.0" hashes::hkeys,
        "Returns all fields in a hash, in field order.";
    "hvals" 2 [readonly] (1 1 1) hash "2.0.0" hashes::hvals,
        "Returns all values in a hash, in field order.";
    "hincrby" 4 [write denyoom fast] (1 1 1) hash "2.0.0" hashes::hincrby,
        "Increments the integer value of a field in a hash by a number.";
    "hincrbyfloat" 4 [write denyoom fast] (1 1 1) hash "2.6.0" hashes::hincrbyfloat,
        "Increments the floating point value of a field by a number.";
    "hstrlen" 3 [readonly fast] (1 1 1) hash "3.2.0" hashes::hstrlen,
        "Returns the length of the value of a field.";
    "hscan" -3 [readonly] (1 1 1) hash "2.8.0" hashes::hscan,
        "Iterates over fields and values of a hash, in field order.";
    "del" -2 [write] (1 -1 1) generic "1.0.0" keys::del,
        "Deletes one or more keys.";
    "unlink" -2 [write fast] (1 -1 1) generic "4.0.0" keys::del,
        "Deletes one or more keys (at once: the store frees space as it deletes).";
    "exists" -2 [readonly fast] (1 -1 1) generic "1.0.0" keys::exists,
        "Determines whether one or more keys exist.";
    "touch" -2 [readonly fast] (1 -1 1) generic "3.2.1" keys::exists,
        "Returns the number of existing keys out of those specified (no access times kept).";
    "rename" 3 [write] (1 2 1) generic "1.0.0" multikey::rename,
        "Renames a key and overwrites the destination.";
    "renamenx" 3 [write fast] (1 2 1) generic "1.0.0" multikey::renamenx,
        "Renames a key only when the target key name doesn't exist.";
    "copy" -3 [write denyoom] (1 2 1) generic "6.2.0" multikey::copy,
        "Copies the value of a key to a new key (DB 0 only: the server has one database).";
    "expire" -3 [write fast] (1 1 1) generic "1.0.0" expiry::expire,
        "Sets the expiration time of a key in seconds.";
    "pexpire" -3 [write fast] (1 1 1) generic "2.6.0" expiry::pexpire,
        "Sets the expiration time of a key in milliseconds.";
    "expireat" -3 [write fast] (1 1 1) generic "1.2.0" expiry::expireat,
        "Sets the expiration time of a key to a Unix timestamp.";
    "pexpireat" -3 [write fast] (1 1 1) generic "2.6.0" expiry::pexpireat,
        "Sets the expiration time of a key to a Unix milliseconds timestamp.";
    "ttl" 2 [readonly fast] (1 1 1) generic "1.0.0" expiry::ttl,
        "Returns the expiration time in seconds of a key.";
    "pttl" 2 [readonly fast] (1 1 1) generic "2.6.0" expiry::pttl,
        "Returns the expiration time in milliseconds of a key.";
    "expiretime" 2 [readonly fast] (1 1 1) generic "7.0.0" expiry::expiretime,
        "Returns the expiration time of a key as a Unix timestamp.";
    "pexpiretime" 2 [readonly fast] (1 1 1) generic "7.0.0" expiry::pexpiretime,
        "Returns the expiration time of a key as a Unix milliseconds timestamp.";
    "persist" 2 [write fast] (1 1 1) generic "2.2.0" expiry::persist,
        "Removes the expiration time of a key.";
    "type" 2 [readonly fast] (1 1 1) generic "1.0.0" keys::type_of,
        "Determines the type of value stored at a key.";
    "randomkey" 1 [readonly] (0 0 0) generic "1.0.0" keys::randomkey,
        "Returns a random key name from the database (not uniformly: see the README).";
    "keys" 2 [readonly] (0 0 0) generic "1.0.0" keys::keys,
        "Returns all key names that match a pattern, in key order.";
    "scan" -2 [readonly] (0 0 0) generic "2.8.0" keys::scan,
        "Iterates over the key names in the database, in key order.";
    "dbsize" 1 [readonly fast] (0 0 0) server "1.0.0" keys::dbsize,
        "Returns the number of keys in the database.";
    "flushdb" -1 [write] (0 0 0) server "1.0.0" keys::flush,
        "Removes all keys from the current database.";
    "flushall" -1 [write] (0 0 0) server "1.0.0" keys::flush,
        "Removes all keys from all databases (there is one).";
    "info" -1 [loading stale] (0 0 0) server "1.0.0" server::info,
        "Returns information and statistics about the server.";
    "config" -2 [] (0 0 0) server "2.0.0" server::container,
        "A container for server configuration commands.";
    "config|get" -3 [loading stale] (0 0 0) server "2.0.0" server::config_get,
        "Returns the effective values of configuration parameters (none: they are flags).";
    "config|set" -4 [loading stale] (0 0 0) server "2.0.0" server::config_unsupported,
        "Sets configuration parameters at run time (refused: settings are flags).";
    "config|resetstat" 2 [loading stale] (0 0 0) server "2.0.0" server::config_unsupported,
        "Resets the server's statistics (refused).";
    "config|rewrite" 2 [loading stale] (0 0 0) server "2.8.0" server::config_unsupported,
        "Persists the effective configuration to file (refused: there is none).";
    "config|help" 2 [loading stale] (0 0 0) server "5.0.0" server::help,
        "Returns helpful text about the different subcommands.";
    "command" -1 [loading stale] (0 0 0) server "2.8.13" server::command,
        "Returns detailed information about all commands.";
    "command|count" 2 [loading stale] (0 0 0) server "2.8.13" server::command_count,
        "Returns a count of commands.";
    "command|docs" -2 [loading stale] (0 0 0) server "7.0.0" server::command_docs,
        "Returns documentary information about one, multiple or all commands.";
    "command|info" -2 [loading stale] (0 0 0) server "2.8.13" server::command_info,
        "Returns information about one, multiple or all commands.";
    "command|list" -2 [loading stale] (0 0 0) server "7.0.0" server::command_list,
        "Returns a list of command names.";
    "command|help" 2 [loading stale] (0 0 0) server "5.0.0" server::help,
        "Returns helpful text about the different subcommands.";
    "ping" -1 [fast] (0 0 0) connection "1.0.0" connection::ping,
        "Returns the server's liveliness response.";
    "echo" 2 [fast] (0 0 0) connection "1.0.0" connection::echo,
        "Returns the given string.";
    "quit" -1 [allow_busy noscript loading stale fast no_auth] (0 0 0) connection "1.0.0" connection::quit,
        "Closes the connection.";
    "select" 2 [loading stale fast] (0 0 0) connection "1.0.0" connection::select,
        "Changes the selected database (there is one, 0).";
    "hello" -1 [noscript loading stale fast no_auth] (0 0 0) connection "6.0.0" connection::hello,
        "Handshakes with the server: protocol 2 or 3, a client name.";
    "auth" -2 [noscript loading stale fast no_auth] (0 0 0) connection "1.0.0" connection::auth,
        "Authenticates the connection (the server has no passwords: only the default user).";
    "reset" 1 [noscript loading stale fast no_auth] (0 0 0) connection "6.2.0" connection::reset,
        "Resets the connection: protocol 2, no name, out of a refused MULTI.";
    "client" -2 [] (0 0 0) connection "2.4.0" server::container,
        "A container for client connection commands.";
    "client|id" 2 [noscript loading stale] (0 0 0) connection "5.0.0" connection::client_id,
        "Returns the unique client ID of the connection.";
    "client|getname" 2 [noscript loading stale] (0 0 0) connection "2.6.9" connection::client_getname,
        "Returns the name of the connection.";
    "client|setname" 3 [noscript loading stale] (0 0 0) connection "2.6.9" connection::client_setname,
        "Sets the connection name.";
    "client|setinfo" 4 [noscript loading stale] (0 0 0) connection "7.2.0" connection::client_setinfo,
        "Sets information specific to the client or connection (LIB-NAME, LIB-VER).";
    "client|info" 2 [noscript loading stale] (0 0 0) connection "6.2.0" connection::client_info,
        "Returns information about the connection.";
    "client|help" 2 [loading stale] (0 0 0) connection "5.0.0" server::help,
        "Returns helpful text about the different subcommands.";
    "multi" 1 [noscript loading stale fast allow_busy] (0 0 0) transactions "1.2.0" connection::multi,
        "Starts a transaction (refused: transactions come with the store's write batches).";
    "exec" 1 [noscript loading stale skip_slowlog] (0 0 0) transactions "1.2.0" connection::exec,
        "Executes all commands in a transaction (ends a refused MULTI).";
    "discard" 1 [noscript loading stale fast allow_busy] (0 0 0) transactions "2.0.0" connection::discard,
        "Discards a transaction (ends a refused MULTI).";
    "watch" -2 [noscript loading stale fast allow_busy] (1 -1 1) transactions "2.2.0" connection::watch,
        "Monitors changes to keys to determine the execution of a transaction (refused).";
    "unwatch" 1 [noscript loading stale fast allow_busy] (0 0 0) transactions "2.2.0" connection::unwatch,
        "Forgets about watched keys of a transaction (there are none).";
}
