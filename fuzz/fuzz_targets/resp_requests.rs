//! Arbitrary bytes from clients into the key-value server's request path (framing and
//! commands, offline, on an anonymous store), fed in pieces whose sizes the input chooses.
//! No input may panic, every piece must get well-formed replies, and the keyspace must pass
//! its own check at the end, and its deadline and hash maps agree with its keys. Small limits,
//! so inputs reach them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pmem_kv_server::offline::Offline;
use pmem_kv_server::Limits;

fuzz_target!(|input: &[u8]| {
    let limits = Limits {
        max_value_bytes: 4096,
        max_args: 64,
        max_inline_bytes: 256,
        ..Limits::default()
    };
    let Ok(mut server) = Offline::anonymous(4 << 20, limits) else {
        return;
    };
    // The first byte sets the piece size, so one input is fed the same way every run.
    let Some((&piece, rest)) = input.split_first() else {
        return;
    };
    for chunk in rest.chunks(usize::from(piece % 64) + 1) {
        let (reply, _) = server.feed(chunk);
        assert!(
            reply.is_empty() || reply.ends_with(b"\r\n"),
            "a torn reply: {reply:?}"
        );
    }
    server.check().expect("the keyspace passes its check");
    if let Err(problem) = server.check_deadlines() {
        // A FLUSHDB that could not make the keyspace anew leaves nothing to check.
        assert!(
            problem.contains("unavailable"),
            "the deadline and hash maps disagree with the keys: {problem}"
        );
    }
});
