//! Plain writes of one connection's pipeline, committed together as one write batch.
//!
//! `SET key value` (no options, or one expiry option: `EX`, `PX`, `EXAT`, `PXAT` with a valid
//! time, its deadline taken at the command's arrival, as a command run alone takes its time
//! at its start) and `MSET` are deferred rather than run: their keys' stripes are taken, their
//! pairs kept, their replies held back. Any other command, and the end of
//! the requests read so far, first commits what is deferred: one store write for a single
//! pair, else one write batch for all of them, and only then are their replies encoded, in
//! order, before the next reply. So:
//!
//! * no reply leaves before its write is durable (replies go out after the commit);
//! * every command sees the writes before it in the pipeline (a read, or any command that is
//!   not deferred, runs after the commit; deferred writes of one key keep the last value, as
//!   running them in order would);
//! * each command's reply is the one it would get alone, and one command's failure undoes no
//!   other: if the batch fails (a full pool, a key past the store's limit, a batch too large
//!   for the store's write-batch area), nothing of it was applied, and the deferred commands
//!   run again one by one, each with its own outcome (`MSET` alone stays all-or-nothing);
//! * no other client sees a deferred write before the commit, nor a write slip in between:
//!   the deferred keys' stripes are held from the deferral to the end of the commit.
//!
//! Stripes are taken waiting only when nothing is deferred; with writes deferred, a stripe
//! another command holds is not waited for (the holder may be waiting for the batch lock or
//! the map's lock while our commit would wait for it): the deferred writes are committed
//! first, then the stripe is taken as for a first command.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use parking_lot::MutexGuard;

use crate::db::stripe_of;
use crate::reply::{Protocol, Reply};
use crate::shared::Shared;

/// The most keys one pipeline batch gathers before it is committed: small enough that its
/// log fits any store's write-batch area (64 KiB at least) and the replies are not held back
/// long, large enough that a `redis-benchmark -P 16` pipeline is one batch.
const MAX_DEFERRED_KEYS: usize = 256;

/// A deferred command: its index in the command table, its arguments (name first; the
/// pairs after it) and the deadline it gives its key (SET ... EX).
struct Deferred {
    index: usize,
    args: Vec<Bytes>,
    deadline: Option<u64>,
}

impl Deferred {
    /// Its writes: `(key, value, deadline)`.
    fn writes(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8], Option<u64>)> {
        // SET's expiry option is not a pair: the pairs are the arguments up to it.
        let end = if self.deadline.is_some() {
            3
        } else {
            self.args.len()
        };
        self.args[1..end]
            .chunks_exact(2)
            .map(|pair| (&pair[0][..], &pair[1][..], self.deadline))
    }
}

/// The writes a connection's pipeline has deferred, and the stripes they hold.
pub(crate) struct Pipeline<'a> {
    shared: &'a Shared,
    /// Whether deferring is on (`--pipeline-batches`): off, every write runs at once.
    enabled: bool,
    /// Held stripes by index, sorted.
    held: Vec<(usize, MutexGuard<'a, ()>)>,
    deferred: Vec<Deferred>,
    keys: usize,
    /// When the first deferred command arrived (its time, and the others', for INFO).
    since: Option<Instant>,
}

impl<'a> Pipeline<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Pipeline<'a> {
        Pipeline {
            shared,
            enabled: shared.pipeline_batches,
            held: Vec::new(),
            deferred: Vec::new(),
            keys: 0,
            since: None,
        }
    }

    /// Whether `args` (a command the table found, of the right arity) is a write this
    /// pipeline defers: `SET key value` without options or with one valid expiry option, or
    /// `MSET` with whole pairs. `Some` of the deadline it gives (`None`: no deadline) if so.
    pub(crate) fn defers(&self, name: &str, args: &[Bytes]) -> Option<Option<u64>> {
        if !self.enabled {
            return None;
        }
        match (name, args.len()) {
            ("set", 3) => Some(None),
            ("set", 5) => {
                let option = args[3].to_ascii_uppercase();
                let option = ["EX", "PX", "EXAT", "PXAT"]
                    .into_iter()
                    .find(|o| o.as_bytes() == option.as_slice())?;
                // A time Redis refuses is not deferred: run alone, it gets its error.
                let now = crate::expiry::now_ms();
                crate::args::deadline_of(option, &args[4], now, "set")
                    .ok()
                    .map(Some)
            }
            ("mset", n) if n % 2 == 1 => Some(None),
            _ => None,
        }
    }

    /// Defer the write `args`, committing what is deferred first when its stripes cannot be
    /// taken without waiting or the batch is full.
    pub(crate) fn defer(
        &mut self,
        index: usize,
        args: Vec<Bytes>,
        deadline: Option<u64>,
        protocol: Protocol,
        output: &mut BytesMut,
    ) {
        let keys = if deadline.is_some() {
            1
        } else {
            (args.len() - 1) / 2
        };
        if !self.deferred.is_empty()
            && (self.keys + keys > MAX_DEFERRED_KEYS || !self.try_hold(&args, keys))
        {
            self.commit(protocol, output);
        }
        if self.deferred.is_empty() {
            self.hold_waiting(&args, keys);
            self.since = Some(Instant::now());
        }
        self.keys += keys;
        self.deferred.push(Deferred {
            index,
            args,
            deadline,
        });
    }

    /// The stripes of `args`'s keys, taken without waiting: all of them (`true`), or none
    /// beyond those held before (`false`).
    fn try_hold(&mut self, args: &[Bytes], keys: usize) -> bool {
        let before = self.held.len();
        for key in args[1..].iter().step_by(2).take(keys) {
            let stripe = stripe_of(key);
            if self.held.iter().any(|(held, _)| *held == stripe) {
                continue;
            }
            match self.shared.db.stripe(stripe).try_lock() {
                Some(guard) => self.held.push((stripe, guard)),
                None => {
                    self.held.truncate(before);
                    return false;
                }
            }
        }
        true
    }

    /// The stripes of `args`'s keys, with nothing else held: waited for in stripe order.
    fn hold_waiting(&mut self, args: &[Bytes], keys: usize) {
        debug_assert!(self.held.is_empty());
        let mut stripes: Vec<usize> = args[1..]
            .iter()
            .step_by(2)
            .take(keys)
            .map(|k| stripe_of(k))
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let db = &self.shared.db;
        self.held = stripes
            .into_iter()
            .map(|stripe| (stripe, db.stripe(stripe).lock()))
            .collect();
    }

    /// Commit what is deferred and encode its replies, in order, into `output`. Does nothing
    /// when nothing is deferred.
    pub(crate) fn commit(&mut self, protocol: Protocol, output: &mut BytesMut) {
        if self.deferred.is_empty() {
            return;
        }
        let db = &self.shared.db;
        let writes = self.deferred.iter().flat_map(Deferred::writes);
        let together = db.set_all(writes, self.keys);
        let replies: Vec<Reply> = match together {
            Ok(()) => self.deferred.iter().map(|_| Reply::ok()).collect(),
            Err(error) if self.deferred.len() == 1 => vec![crate::db::store_error(error)],
            // Nothing of the batch applied: each command on its own, in order.
            Err(_) => self
                .deferred
                .iter()
                .map(
                    |write| match db.set_all(write.writes(), write.writes().len()) {
                        Ok(()) => Reply::ok(),
                        Err(error) => crate::db::store_error(error),
                    },
                )
                .collect(),
        };
        let share = self.since.map_or_else(Default::default, |since| {
            since.elapsed() / replies.len() as u32
        });
        for (write, reply) in self.deferred.iter().zip(&replies) {
            db.counters.called(write.index, share, reply.is_error());
            reply.encode(protocol, output);
        }
        self.deferred.clear();
        self.held.clear();
        self.keys = 0;
        self.since = None;
    }
}

impl Drop for Pipeline<'_> {
    fn drop(&mut self) {
        debug_assert!(
            self.deferred.is_empty(),
            "a pipeline dropped with writes deferred: their replies were never sent"
        );
    }
}
