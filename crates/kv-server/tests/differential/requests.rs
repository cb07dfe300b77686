//! The requests of the differential test: every command both servers have, right and
//! wrong, and how each one's replies are compared.

use proptest::prelude::*;

/// How two replies to one request are compared.
#[derive(Clone, Copy, Debug)]
pub enum Compare {
    Bytes,
    /// An array whose order is Redis's hash order: compared sorted.
    Unordered,
    /// SCAN: errors as bytes, otherwise the keys of the whole scan as sets.
    Scan,
    /// HSCAN: errors as bytes, otherwise the (field, value) pairs of the whole scan as sets.
    HScan,
    /// HGETALL (a map in RESP3, fields and values in turn in RESP2), in Redis's hash order:
    /// the pairs compared sorted.
    UnorderedPairs,
    /// A key that exists on its server, or nil on both.
    RandomKey,
    /// An integer on both.
    AnyInteger,
    /// HELLO: errors as bytes, otherwise a reply of the same type and size on both.
    Shape,
    /// TTL and its kin: errors and negative answers (no key, no deadline) as bytes, times
    /// within this many units of each other (the two servers took their times apart).
    Within(i64),
}

#[derive(Clone)]
pub struct Request {
    pub args: Vec<Vec<u8>>,
    pub compare: Compare,
}

/// The arguments as text, so a failing sequence reads as the commands it sent.
impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<String> = self
            .args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        write!(f, "{shown:?}")
    }
}

pub fn request(compare: Compare, args: Vec<Vec<u8>>) -> Request {
    Request { args, compare }
}

/// A request of `name` and `rest`, compared as bytes.
pub fn command(name: &str, rest: Vec<Vec<u8>>) -> Request {
    let mut args = vec![name.as_bytes().to_vec()];
    args.extend(rest);
    request(Compare::Bytes, args)
}

pub fn words(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|w| w.as_bytes().to_vec()).collect()
}

pub fn key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (0u8..6).prop_map(|i| format!("k{i}").into_bytes()),
        1 => Just(Vec::new()),
        1 => Just(b"k\x00\xff".to_vec()),
        1 => Just(b"user:1".to_vec()),
    ]
}

/// Text an integer argument may be: valid, in the forms Redis refuses, out of range.
pub fn integer_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => (-20i64..20).prop_map(|n| n.to_string().into_bytes()),
        1 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        2 => proptest::sample::select(vec![
            "007", "01", "-0", "+1", " 1", "1 ", "", "abc", "1.0", "1e3", "00",
            "9223372036854775807", "-9223372036854775808", "9223372036854775808",
            "-9223372036854775809", "18446744073709551616", "0x10",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
    ]
}

/// Text a float argument may be.
pub fn float_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (-1_000_000i64..1_000_000, 0u32..6, -30i32..30).prop_map(|(mantissa, point, exponent)| {
            let digits = mantissa.unsigned_abs().to_string();
            let point = (point as usize).min(digits.len());
            let (whole, fraction) = digits.split_at(digits.len() - point);
            let sign = if mantissa < 0 { "-" } else { "" };
            format!("{sign}{whole}.{fraction}e{exponent}").into_bytes()
        }),
        2 => (-1000i64..1000).prop_map(|n| format!("{}.{}", n / 10, (n % 10).abs()).into_bytes()),
        1 => any::<f64>().prop_map(|f| format!("{f:e}").into_bytes()),
        2 => proptest::sample::select(vec![
            "0", "-0", "0.1", "1e-18", "0.000003814697265625", "1e300", "1e4932", "1e5000",
            "1e-5000", "0x10", "0x1.8p3", "inf", "-inf", "nan", " 1", "1 ", "abc", "", "1e",
            ".5", "5.", "+2.5", "1E2", "0.1e-4940", "18446744073709551617",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
    ]
}

pub fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => (-100i64..100).prop_map(|n| n.to_string().into_bytes()),
        2 => float_text(),
        2 => integer_text(),
        3 => proptest::collection::vec(any::<u8>(), 0..12),
    ]
}

/// A glob pattern over the keys' bytes and every wildcard.
pub fn pattern() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(
        proptest::sample::select(b"k0123*?[]^-\\:user".to_vec()),
        0..7,
    )
}

fn some_keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(key(), 1..6)
}

/// One request of a command both servers have, right or wrong.
pub fn request_strategy() -> impl Strategy<Value = Request> {
    use Compare::*;
    let set_option = proptest::sample::select(vec![
        "NX", "XX", "GET", "KEEPTTL", "nx", "get", "BOGUS", "EX", "PX", "EXAT", "PXAT",
    ]);
    // An expiry option with a value Redis refuses (zero, negative, not an integer).
    let bad_expiry = (
        proptest::sample::select(vec!["EX", "PX", "EXAT", "PXAT"]),
        proptest::sample::select(vec!["0", "-5", "abc", "01", "9223372036854775807"]),
    );
    prop_oneof![
        6 => (key(), value()).prop_map(|(k, v)| command("SET", vec![k, v])),
        3 => (key(), value(), proptest::collection::vec(set_option, 0..3))
            .prop_map(|(k, v, options)| {
                let mut args = vec![k, v];
                args.extend(options.iter().map(|o| o.as_bytes().to_vec()));
                command("SET", args)
            }),
        1 => (key(), value(), bad_expiry)
            .prop_map(|(k, v, (o, n))| command("SET", vec![k, v, o.into(), n.into()])),
        8 => expiry_strategy(),
        12 => super::hash_requests::hash_strategy(),
        4 => key().prop_map(|k| command("GET", vec![k])),
        2 => (key(), value()).prop_map(|(k, v)| command("SETNX", vec![k, v])),
        3 => (key(), value()).prop_map(|(k, v)| command("APPEND", vec![k, v])),
        2 => key().prop_map(|k| command("STRLEN", vec![k])),
        3 => (key(), prop_oneof![integer_text(), Just(b"536870912".to_vec())], value())
            .prop_map(|(k, o, v)| command("SETRANGE", vec![k, o, v])),
        3 => (proptest::sample::select(vec!["GETRANGE", "SUBSTR"]), key(), integer_text(), integer_text())
            .prop_map(|(name, k, a, b)| request(Bytes, vec![name.into(), k, a, b])),
        3 => (proptest::sample::select(vec!["INCR", "DECR"]), key())
            .prop_map(|(name, k)| request(Bytes, vec![name.into(), k])),
        3 => (proptest::sample::select(vec!["INCRBY", "DECRBY"]), key(), integer_text())
            .prop_map(|(name, k, by)| request(Bytes, vec![name.into(), k, by])),
        4 => (key(), float_text()).prop_map(|(k, by)| command("INCRBYFLOAT", vec![k, by])),
        2 => some_keys().prop_map(|keys| command("MGET", keys)),
        2 => proptest::collection::vec((key(), value()), 1..4)
            .prop_map(|pairs| command("MSET", pairs.into_iter().flat_map(|(k, v)| [k, v]).collect())),
        2 => proptest::collection::vec((key(), value()), 1..4)
            .prop_map(|pairs| command("MSETNX", pairs.into_iter().flat_map(|(k, v)| [k, v]).collect())),
        1 => (proptest::sample::select(vec!["MSET", "MSETNX"]), key(), value(), key())
            .prop_map(|(name, k, v, dangling)| request(Bytes, vec![name.into(), k, v, dangling])),
        2 => (key(), value()).prop_map(|(k, v)| command("GETSET", vec![k, v])),
        2 => key().prop_map(|k| command("GETDEL", vec![k])),
        3 => (proptest::sample::select(vec!["RENAME", "RENAMENX"]), key(), key())
            .prop_map(|(name, from, to)| request(Bytes, vec![name.into(), from, to])),
        3 => copy_strategy(),
        2 => (proptest::sample::select(vec!["DEL", "UNLINK", "EXISTS", "TOUCH"]), some_keys())
            .prop_map(|(name, keys)| {
                let mut args = vec![name.as_bytes().to_vec()];
                args.extend(keys);
                request(Bytes, args)
            }),
        2 => key().prop_map(|k| command("TYPE", vec![k])),
        1 => Just(request(RandomKey, words(&["RANDOMKEY"]))),
        2 => pattern().prop_map(|p| request(Unordered, vec![b"KEYS".to_vec(), p])),
        2 => scan_strategy(),
        1 => Just(request(Bytes, words(&["DBSIZE"]))),
        1 => proptest::sample::select(vec![
            vec!["FLUSHDB"], vec!["FLUSHALL"], vec!["FLUSHDB", "ASYNC"], vec!["FLUSHALL", "sync"],
            vec!["FLUSHDB", "now"], vec!["FLUSHALL", "ASYNC", "SYNC"],
        ]).prop_map(|w| request(Bytes, words(&w))),
        2 => connection_strategy(),
        3 => wrong_arity_strategy(),
        1 => unknown_command_strategy(),
    ]
}

/// Plain writes only (`SET key value`, `SET key value EX time` and its kin, `MSET`): a run of
/// them is what a connection's pipeline commits as one batch (an expiry time Redis refuses
/// is not deferred, and gets its error).
pub fn plain_write_strategy() -> impl Strategy<Value = Request> {
    let expiry = proptest::sample::select(vec![
        ("EX", "100"),
        ("px", "100000"),
        ("EXAT", "4102444800"),
        ("PXAT", "4102444800000"),
        ("EX", "0"),
        ("PX", "x"),
    ]);
    prop_oneof![
        3 => (key(), value()).prop_map(|(k, v)| command("SET", vec![k, v])),
        2 => (key(), value(), expiry)
            .prop_map(|(k, v, (o, t))| command("SET", vec![k, v, o.into(), t.into()])),
        1 => proptest::collection::vec((key(), value()), 1..4)
            .prop_map(|pairs| command("MSET", pairs.into_iter().flat_map(|(k, v)| [k, v]).collect())),
    ]
}

/// A time for an expiry option or command: relative ones of 10 s and more (no key expires
/// between the two servers' answers) or not above 0; absolute ones in the past or far in the
/// future; and the texts Redis refuses or overflows on.
fn expiry_time(absolute: bool, millis: bool) -> impl Strategy<Value = Vec<u8>> {
    let scale: i64 = if millis { 1000 } else { 1 };
    let times = if absolute {
        // 2001, and 2100.
        vec![
            1,
            1_000_000_000 * scale,
            4_102_444_800 * scale,
            4_102_444_801 * scale,
        ]
    } else {
        vec![10 * scale, 100 * scale, 86_400 * scale, 0, -1, -100]
    };
    prop_oneof![
        6 => proptest::sample::select(times).prop_map(|n| n.to_string().into_bytes()),
        1 => proptest::sample::select(vec![
            "abc", "", "01", "1.5", "9223372036854775807", "-9223372036854775808",
            "9223372036854775", "9223372036854776", "-9223372036854776", "9223372036854775808",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
    ]
}

/// The expiry commands, and SET, GETEX with expiry options, right and wrong.
fn expiry_strategy() -> impl Strategy<Value = Request> {
    use Compare::*;
    let expire = (
        proptest::sample::select(vec![
            ("EXPIRE", false, false),
            ("PEXPIRE", false, true),
            ("EXPIREAT", true, false),
            ("PEXPIREAT", true, true),
        ]),
        any::<u8>(),
    )
        .prop_flat_map(|((name, absolute, millis), _)| {
            (
                Just(name),
                key(),
                expiry_time(absolute, millis),
                proptest::collection::vec(
                    proptest::sample::select(vec!["NX", "XX", "GT", "LT", "gt", "BOGUS"]),
                    0..3,
                ),
            )
        })
        .prop_map(|(name, k, time, conditions)| {
            let mut args = vec![name.as_bytes().to_vec(), k, time];
            args.extend(conditions.iter().map(|c| c.as_bytes().to_vec()));
            request(Bytes, args)
        });
    let option = proptest::sample::select(vec![
        ("EX", false, false),
        ("PX", false, true),
        ("EXAT", true, false),
        ("PXAT", true, true),
    ])
    .prop_flat_map(|(name, absolute, millis)| {
        // No time already past: Redis keeps such a key, counted by DBSIZE, until its
        // active expiry finds it, at a moment of its own.
        let time = expiry_time(absolute, millis).prop_filter("not past", |time| {
            !matches!(&time[..], b"1" | b"1000000000" | b"1000000000000")
        });
        (Just(name), time).prop_map(|(name, time)| vec![name.as_bytes().to_vec(), time])
    });
    let set = (
        key(),
        value(),
        option.clone(),
        proptest::collection::vec(
            proptest::sample::select(vec!["NX", "XX", "GET", "KEEPTTL"]),
            0..2,
        ),
    )
        .prop_map(|(k, v, expiry, more)| {
            let mut args = vec![b"SET".to_vec(), k, v];
            args.extend(expiry);
            args.extend(more.iter().map(|m| m.as_bytes().to_vec()));
            request(Bytes, args)
        });
    let getex = (
        key(),
        prop_oneof![
            2 => option.prop_map(|o| vec![o]),
            1 => proptest::collection::vec(
                proptest::sample::select(vec!["PERSIST", "EX", "KEEPTTL", "NX", "persist"])
                    .prop_map(|w| vec![w.as_bytes().to_vec()]),
                0..3,
            ),
        ],
    )
        .prop_map(|(k, options)| {
            let mut args = vec![b"GETEX".to_vec(), k];
            args.extend(options.into_iter().flatten());
            request(Bytes, args)
        });
    prop_oneof![
        4 => expire,
        3 => set,
        2 => getex,
        2 => (proptest::sample::select(vec!["SETEX", "PSETEX"]), key(), expiry_time(false, false), value())
            .prop_map(|(name, k, time, v)| request(Bytes, vec![name.into(), k, time, v])),
        2 => key().prop_map(|k| request(Within(1), vec![b"TTL".to_vec(), k])),
        2 => key().prop_map(|k| request(Within(500), vec![b"PTTL".to_vec(), k])),
        1 => key().prop_map(|k| request(Within(1), vec![b"EXPIRETIME".to_vec(), k])),
        1 => key().prop_map(|k| request(Within(500), vec![b"PEXPIRETIME".to_vec(), k])),
        2 => key().prop_map(|k| command("PERSIST", vec![k])),
    ]
}

/// COPY with its options, right and wrong (a database other than 0 only where Redis, with
/// 16 of them, refuses it too).
fn copy_strategy() -> impl Strategy<Value = Request> {
    let option = proptest::sample::select(vec![
        vec!["REPLACE"],
        vec!["replace"],
        vec!["DB", "0"],
        vec!["db", "00"],
        vec!["DB", "16"],
        vec!["DB", "-1"],
        vec!["DB", "x"],
        vec!["DB", "4294967296"],
        vec!["DB", "99999999999999999999"],
        vec!["DB"],
        vec!["BOGUS"],
    ]);
    (key(), key(), proptest::collection::vec(option, 0..3)).prop_map(|(from, to, options)| {
        let mut args = vec![b"COPY".to_vec(), from, to];
        args.extend(options.into_iter().flat_map(|o| words(&o)));
        request(Compare::Bytes, args)
    })
}

fn scan_strategy() -> impl Strategy<Value = Request> {
    let option = prop_oneof![
        pattern().prop_map(|p| vec![b"MATCH".to_vec(), p]),
        integer_text().prop_map(|n| vec![b"COUNT".to_vec(), n]),
        (1u32..20).prop_map(|n| vec![b"count".to_vec(), n.to_string().into_bytes()]),
        proptest::sample::select(vec!["string", "STRING", "hash", "list"])
            .prop_map(|t| vec![b"TYPE".to_vec(), t.into()]),
        Just(vec![b"BOGUS".to_vec()]),
        Just(vec![b"MATCH".to_vec()]),
    ];
    (
        proptest::sample::select(vec!["0", "x", "-", "00"]),
        proptest::collection::vec(option, 0..3),
    )
        .prop_map(|(cursor, options)| {
            let mut args = vec![b"SCAN".to_vec(), cursor.into()];
            args.extend(options.into_iter().flatten());
            request(Compare::Scan, args)
        })
}

fn connection_strategy() -> impl Strategy<Value = Request> {
    use Compare::*;
    let name = proptest::sample::select(vec!["app", "a b", "", "x\ny", "ok-name", "\u{e9}"]);
    prop_oneof![
        Just(request(Bytes, words(&["PING"]))),
        value().prop_map(|v| request(Bytes, vec![b"PING".to_vec(), v])),
        value().prop_map(|v| request(Bytes, vec![b"ECHO".to_vec(), v])),
        proptest::sample::select(vec![
            "0",
            "00",
            "-0",
            "+0",
            "01",
            "16",
            "-1",
            "x",
            "99999999999999999999",
        ])
        .prop_map(|i| request(Bytes, words(&["SELECT", i]))),
        proptest::sample::select(vec![
            vec!["HELLO"],
            vec!["HELLO", "2"],
            vec!["HELLO", "3"],
            vec!["HELLO", "4"],
            vec!["HELLO", "x"],
            vec!["HELLO", "03"],
            vec!["HELLO", "3", "FOO"],
            vec!["HELLO", "2", "SETNAME"],
            vec!["HELLO", "3", "SETNAME", "a b"],
            vec!["HELLO", "2", "AUTH", "default", "pw"],
            vec!["HELLO", "3", "AUTH", "bob", "pw"],
            vec!["HELLO", "3", "SETNAME", "named"],
        ])
        .prop_map(|w| request(Shape, words(&w))),
        proptest::sample::select(vec![
            vec!["AUTH", "pw"],
            vec!["AUTH", "default", "pw"],
            vec!["AUTH", "bob", "pw"],
            vec!["AUTH", "a", "b", "c"],
        ])
        .prop_map(|w| request(Bytes, words(&w))),
        name.prop_map(|n| request(Bytes, words(&["CLIENT", "SETNAME", n]))),
        Just(request(Bytes, words(&["CLIENT", "GETNAME"]))),
        Just(request(AnyInteger, words(&["CLIENT", "ID"]))),
        Just(request(Bytes, words(&["RESET"]))),
        proptest::sample::select(vec![
            vec!["CLIENT"],
            vec!["CLIENT", "NOPE"],
            vec!["client", "getname", "x"],
            vec!["CONFIG"],
            vec!["CONFIG", "NOPE"],
            vec!["CONFIG", "GET"],
            vec!["COMMAND", "NOPE"],
            vec!["COMMAND", "COUNT", "x"],
            vec!["COMMAND", "INFO", "nosuch"],
        ])
        .prop_map(|w| request(Bytes, words(&w))),
    ]
}

/// A command with too few or too many arguments (each command's arity, in Redis's table).
fn wrong_arity_strategy() -> impl Strategy<Value = Request> {
    let commands: Vec<(&'static str, usize, bool)> = vec![
        // name, arguments it takes (the name counted), whether more are allowed
        ("GET", 2, false),
        ("SET", 3, true),
        ("SETNX", 3, false),
        ("APPEND", 3, false),
        ("STRLEN", 2, false),
        ("SETRANGE", 4, false),
        ("GETRANGE", 4, false),
        ("SUBSTR", 4, false),
        ("INCR", 2, false),
        ("DECR", 2, false),
        ("INCRBY", 3, false),
        ("DECRBY", 3, false),
        ("INCRBYFLOAT", 3, false),
        ("MGET", 2, true),
        ("MSET", 3, true),
        ("MSETNX", 3, true),
        ("GETSET", 3, false),
        ("GETDEL", 2, false),
        ("RENAME", 3, false),
        ("RENAMENX", 3, false),
        ("COPY", 3, true),
        ("DEL", 2, true),
        ("UNLINK", 2, true),
        ("EXISTS", 2, true),
        ("TOUCH", 2, true),
        ("TYPE", 2, false),
        ("RANDOMKEY", 1, false),
        ("KEYS", 2, false),
        ("SCAN", 2, true),
        ("DBSIZE", 1, false),
        ("ECHO", 2, false),
        ("SELECT", 2, false),
        ("PING", 1, true),
        ("RESET", 1, false),
        ("AUTH", 2, true),
        ("EXPIRE", 3, true),
        ("PEXPIRE", 3, true),
        ("EXPIREAT", 3, true),
        ("PEXPIREAT", 3, true),
        ("TTL", 2, false),
        ("PTTL", 2, false),
        ("EXPIRETIME", 2, false),
        ("PEXPIRETIME", 2, false),
        ("PERSIST", 2, false),
        ("SETEX", 4, false),
        ("PSETEX", 4, false),
        ("GETEX", 2, true),
    ];
    let commands = [&commands[..], super::hash_requests::HASH_ARITIES].concat();
    (proptest::sample::select(commands), 0usize..3, any::<bool>()).prop_map(
        |((name, arity, more), extra, fewer)| {
            // Arguments after the name: fewer than the command takes, or (where it takes
            // no more) more. PING takes at most one.
            let takes = arity - 1;
            let count = match (fewer || more, takes.checked_sub(1 + extra)) {
                (true, Some(count)) => count,
                _ if name == "PING" => 2 + extra,
                _ => takes + 1 + extra,
            };
            let mut args = vec![name.as_bytes().to_vec()];
            args.extend((0..count).map(|i| format!("a{i}").into_bytes()));
            request(Compare::Bytes, args)
        },
    )
}

fn unknown_command_strategy() -> impl Strategy<Value = Request> {
    (
        proptest::sample::select(vec!["NOSUCH", "getx", "", "s\0et", "bad\r\nname"]),
        proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..10),
                (0usize..200).prop_map(|n| vec![b'x'; n]),
                Just(b"a\0b".to_vec()),
            ],
            0..5,
        ),
    )
        .prop_map(|(name, rest)| {
            let mut args = vec![name.as_bytes().to_vec()];
            args.extend(rest);
            request(Compare::Bytes, args)
        })
}
