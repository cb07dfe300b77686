//! The hash commands' requests of the differential test: right and wrong (wrong arities,
//! strings where hashes are wanted and the other way, integers and floats Redis refuses, bad
//! HSCAN options), on the same keys as the string commands, so types meet.

use proptest::prelude::*;

use super::requests::{command, float_text, integer_text, key, pattern, request, value, Compare};

fn field() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (0u8..5).prop_map(|i| format!("f{i}").into_bytes()),
        1 => Just(Vec::new()),
        1 => Just(b"f\x00\xff".to_vec()),
    ]
}

fn pairs() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec((field(), value()), 1..5)
        .prop_map(|pairs| pairs.into_iter().flat_map(|(f, v)| [f, v]).collect())
}

fn fields() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(field(), 1..5)
}

/// A whole request: the name, the key, then `rest`.
fn keyed(
    name: &'static str,
    rest: impl Strategy<Value = Vec<Vec<u8>>>,
) -> impl Strategy<Value = Request> {
    (key(), rest).prop_map(move |(k, rest)| {
        let mut args = vec![k];
        args.extend(rest);
        command(name, args)
    })
}

use super::requests::Request;

/// One hash command, right or wrong.
pub fn hash_strategy() -> impl Strategy<Value = Request> {
    use Compare::*;
    prop_oneof![
        6 => keyed("HSET", pairs()),
        2 => keyed("HMSET", pairs()),
        // A field left without its value.
        1 => (proptest::sample::select(vec!["HSET", "HMSET"]), key(), pairs(), field())
            .prop_map(|(name, k, pairs, dangling)| {
                let mut args = vec![name.as_bytes().to_vec(), k];
                args.extend(pairs);
                args.push(dangling);
                request(Bytes, args)
            }),
        2 => keyed("HSETNX", (field(), value()).prop_map(|(f, v)| vec![f, v])),
        4 => keyed("HGET", field().prop_map(|f| vec![f])),
        2 => keyed("HMGET", fields()),
        2 => key().prop_map(|k| request(UnorderedPairs, vec![b"HGETALL".to_vec(), k])),
        2 => (proptest::sample::select(vec!["HKEYS", "HVALS"]), key())
            .prop_map(|(name, k)| request(Unordered, vec![name.into(), k])),
        3 => keyed("HDEL", fields()),
        2 => keyed("HLEN", Just(Vec::new())),
        2 => keyed("HEXISTS", field().prop_map(|f| vec![f])),
        2 => keyed("HSTRLEN", field().prop_map(|f| vec![f])),
        3 => keyed("HINCRBY", (field(), integer_text()).prop_map(|(f, by)| vec![f, by])),
        3 => keyed("HINCRBYFLOAT", (field(), float_text()).prop_map(|(f, by)| vec![f, by])),
        3 => hscan_strategy(),
    ]
}

fn hscan_strategy() -> impl Strategy<Value = Request> {
    let option = prop_oneof![
        pattern().prop_map(|p| vec![b"MATCH".to_vec(), p]),
        integer_text().prop_map(|n| vec![b"COUNT".to_vec(), n]),
        (1u32..5).prop_map(|n| vec![b"count".to_vec(), n.to_string().into_bytes()]),
        Just(vec![b"TYPE".to_vec(), b"string".to_vec()]),
        Just(vec![b"NOVALUES".to_vec()]),
        Just(vec![b"BOGUS".to_vec()]),
        Just(vec![b"MATCH".to_vec()]),
    ];
    (
        key(),
        proptest::sample::select(vec!["0", "0", "x", "-", "00"]),
        proptest::collection::vec(option, 0..3),
    )
        .prop_map(|(k, cursor, options)| {
            let mut args = vec![b"HSCAN".to_vec(), k, cursor.into()];
            args.extend(options.into_iter().flatten());
            request(Compare::HScan, args)
        })
}

/// The hash commands' arities, as `wrong_arity_strategy` takes them: name, the arguments it
/// takes (the name counted), whether more are allowed.
pub const HASH_ARITIES: &[(&str, usize, bool)] = &[
    ("HSET", 4, true),
    ("HMSET", 4, true),
    ("HSETNX", 4, false),
    ("HGET", 3, false),
    ("HMGET", 3, true),
    ("HGETALL", 2, false),
    ("HDEL", 3, true),
    ("HLEN", 2, false),
    ("HEXISTS", 3, false),
    ("HKEYS", 2, false),
    ("HVALS", 2, false),
    ("HINCRBY", 4, false),
    ("HINCRBYFLOAT", 4, false),
    ("HSTRLEN", 3, false),
    ("HSCAN", 3, true),
];
