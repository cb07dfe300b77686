//! The persistence state machine: what is guaranteed persistent, what is still pending, and
//! which crash images the pending events allow.

use std::collections::BTreeMap;

use crate::barrier::PersistModel;
use crate::isa::CACHE_LINE;

use super::event::{Chunk, Event};
use super::rng::SplitMix64;

/// The torn-line bit set that includes every one of `n` stores.
fn low_bits(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Whether the torn-line selection `sel` includes the line's `j`-th pending store. A line with
/// more than 64 pending stores reuses bits, so its stores are torn in groups.
fn torn_included(sel: u64, j: usize) -> bool {
    sel & (1u64 << (j % 64)) != 0
}

/// A store not yet guaranteed persistent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingStore {
    /// Event index: program (and global) order.
    pub seq: u64,
    pub thread: u32,
    pub chunk: Chunk,
}

/// What the persistency model says about the pool after a prefix of events.
#[derive(Clone, Debug)]
pub(crate) struct PersistState {
    model: PersistModel,
    torn_lines: bool,
    /// The guaranteed-persistent image.
    pub persisted: Vec<u8>,
    /// Pending temporal stores per line, in program order.
    pub lines: BTreeMap<u64, Vec<PendingStore>>,
    /// Pending non-temporal stores, in program order.
    pub nt: Vec<PendingStore>,
    /// Per thread: lines flushed since its last fence, with the last store the flush covered.
    marks: BTreeMap<u32, Vec<(u64, u64)>>,
    /// Events applied so far.
    pub applied: u64,
    /// Operations completed so far.
    pub operations: u64,
}

/// What applying one event revealed (pmemcheck-style).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Observation {
    Nothing,
    /// A flush of a line with no pending store.
    FlushOfCleanLine(u64),
    /// A fence with no flush and no non-temporal store of its thread pending.
    FenceWithNothingPending,
    /// An operation returned while lines it wrote are not yet persistent.
    Unpersisted {
        lines: Vec<u64>,
        nt_words: Vec<u64>,
    },
}

impl PersistState {
    pub fn new(initial: Vec<u8>, model: PersistModel, torn_lines: bool) -> PersistState {
        PersistState {
            model,
            torn_lines,
            persisted: initial,
            lines: BTreeMap::new(),
            nt: Vec::new(),
            marks: BTreeMap::new(),
            applied: 0,
            operations: 0,
        }
    }

    /// Whether the Themis rule (nt -> t in program order, same thread) holds for this state.
    fn themis(&self) -> bool {
        self.model == PersistModel::Themis
    }

    /// Apply the next event.
    pub fn apply(&mut self, event: &Event) -> Observation {
        let seq = self.applied;
        self.applied += 1;
        match *event {
            Event::Store { thread, chunk } => {
                self.lines
                    .entry(chunk.line())
                    .or_default()
                    .push(PendingStore { seq, thread, chunk });
                Observation::Nothing
            }
            Event::NtStore { thread, chunk } => {
                self.nt.push(PendingStore { seq, thread, chunk });
                Observation::Nothing
            }
            Event::Flush { thread, line } => match self.lines.get(&line).and_then(|p| p.last()) {
                Some(last) => {
                    let upto = last.seq;
                    self.marks.entry(thread).or_default().push((line, upto));
                    Observation::Nothing
                }
                None => Observation::FlushOfCleanLine(line),
            },
            Event::FlushOrdered { line, .. } => {
                if self.lines.get(&line).is_some_and(|p| !p.is_empty()) {
                    self.persist_line_prefix(line, u64::MAX);
                    Observation::Nothing
                } else {
                    Observation::FlushOfCleanLine(line)
                }
            }
            Event::Fence { thread } => {
                let marks = self.marks.remove(&thread).unwrap_or_default();
                let own_nt = self.nt.iter().any(|s| s.thread == thread);
                let nothing = marks.is_empty() && !own_nt;
                for (line, upto) in marks {
                    self.persist_line_prefix(line, upto);
                }
                self.persist_nt_of(thread, u64::MAX);
                if nothing {
                    Observation::FenceWithNothingPending
                } else {
                    Observation::Nothing
                }
            }
            Event::OperationEnd { thread } => {
                self.operations += 1;
                let lines: Vec<u64> = self
                    .lines
                    .iter()
                    .filter(|(_, p)| p.iter().any(|s| s.thread == thread))
                    .map(|(&l, _)| l)
                    .collect();
                let nt_words: Vec<u64> = self
                    .nt
                    .iter()
                    .filter(|s| s.thread == thread)
                    .map(|s| s.chunk.word)
                    .collect();
                if lines.is_empty() && nt_words.is_empty() {
                    Observation::Nothing
                } else {
                    Observation::Unpersisted { lines, nt_words }
                }
            }
        }
    }

    /// Persist the pending stores of `line` up to and including event `upto`.
    fn persist_line_prefix(&mut self, line: u64, upto: u64) {
        let Some(pending) = self.lines.get_mut(&line) else {
            return;
        };
        let n = pending.iter().take_while(|s| s.seq <= upto).count();
        let done: Vec<PendingStore> = pending.drain(..n).collect();
        if pending.is_empty() {
            self.lines.remove(&line);
        }
        for s in done {
            if self.themis() {
                // Themis: an nt-store persists no later than a later temporal store of its thread.
                self.persist_nt_of(s.thread, s.seq);
            }
            self.persist_chunk(s);
        }
    }

    /// Persist the pending nt-stores of `thread` made before event `before`.
    fn persist_nt_of(&mut self, thread: u32, before: u64) {
        let (done, keep): (Vec<_>, Vec<_>) = self
            .nt
            .drain(..)
            .partition(|s| s.thread == thread && s.seq < before);
        self.nt = keep;
        for s in done {
            self.persist_chunk(s);
        }
    }

    /// Write a store into the persisted image, and mask its bytes out of older pending stores
    /// of the same word: a store that is persistent must not be overwritten by an older one.
    fn persist_chunk(&mut self, s: PendingStore) {
        s.chunk.apply(&mut self.persisted);
        let older_same_word = |p: &PendingStore| p.seq < s.seq && p.chunk.word == s.chunk.word;
        for p in self.nt.iter_mut().filter(|p| older_same_word(p)) {
            p.chunk.mask &= !s.chunk.mask;
        }
        if let Some(pending) = self.lines.get_mut(&s.chunk.line()) {
            for p in pending.iter_mut().filter(|p| older_same_word(p)) {
                p.chunk.mask &= !s.chunk.mask;
            }
        }
    }

    /// Offsets of every line with a pending store (temporal or non-temporal), ascending.
    pub fn pending_line_offsets(&self) -> Vec<u64> {
        let lines: std::collections::BTreeSet<u64> = self
            .lines
            .keys()
            .copied()
            .chain(self.nt.iter().map(|s| s.chunk.line()))
            .collect();
        lines.into_iter().map(|l| l * CACHE_LINE as u64).collect()
    }

    /// Number of pending stores (temporal and non-temporal).
    pub fn pending_count(&self) -> usize {
        self.lines.values().map(Vec::len).sum::<usize>() + self.nt.len()
    }

    /// The number of choices a crash has here, or `None` if it exceeds `limit`.
    pub fn choice_count(&self, limit: u64) -> Option<u64> {
        let mut total: u64 = 1;
        for pending in self.lines.values() {
            let per_line = if self.torn_lines {
                1u64.checked_shl(pending.len() as u32)?
            } else {
                pending.len() as u64 + 1
            };
            total = total.checked_mul(per_line)?;
        }
        total = total.checked_mul(1u64.checked_shl(self.nt.len() as u32)?)?;
        (total <= limit).then_some(total)
    }

    /// The crash image for a choice of pending stores, or `None` if the choice breaks the
    /// Themis rule.
    pub fn image(&self, choice: &Choice) -> Option<Vec<u8>> {
        let mut chosen: Vec<&PendingStore> = Vec::new();
        for (i, pending) in self.lines.values().enumerate() {
            let sel = choice.lines[i];
            for (j, s) in pending.iter().enumerate() {
                let included = if self.torn_lines {
                    torn_included(sel, j)
                } else {
                    (j as u64) < sel
                };
                if included {
                    chosen.push(s);
                }
            }
        }
        if self.themis() {
            // Every pending nt-store older than an included temporal store of its thread must
            // be included too.
            for s in &chosen {
                for (k, n) in self.nt.iter().enumerate() {
                    if n.thread == s.thread && n.seq < s.seq && !choice.nt[k] {
                        return None;
                    }
                }
            }
        }
        chosen.extend(
            self.nt
                .iter()
                .enumerate()
                .filter(|(k, _)| choice.nt[*k])
                .map(|(_, s)| s),
        );
        chosen.sort_by_key(|s| s.seq);
        let mut image = self.persisted.clone();
        for s in chosen {
            s.chunk.apply(&mut image);
        }
        Some(image)
    }

    /// The choice that persists nothing pending.
    pub fn nothing(&self) -> Choice {
        Choice {
            lines: vec![0; self.lines.len()],
            nt: vec![false; self.nt.len()],
        }
    }

    /// The choice that persists everything pending.
    pub fn everything(&self) -> Choice {
        Choice {
            lines: self
                .lines
                .values()
                .map(|p| {
                    if self.torn_lines {
                        low_bits(p.len())
                    } else {
                        p.len() as u64
                    }
                })
                .collect(),
            nt: vec![true; self.nt.len()],
        }
    }

    /// A random choice that respects the model (Themis closure applied).
    pub fn random(&self, rng: &mut SplitMix64) -> Choice {
        let lines: Vec<u64> = self
            .lines
            .values()
            .map(|p| {
                if self.torn_lines {
                    rng.next_u64() & low_bits(p.len())
                } else {
                    rng.below(p.len() as u64 + 1)
                }
            })
            .collect();
        let mut nt: Vec<bool> = self.nt.iter().map(|_| rng.next_u64() & 1 == 1).collect();
        if self.themis() {
            let mut choice = Choice {
                lines,
                nt: nt.clone(),
            };
            let mut newest_included: BTreeMap<u32, u64> = BTreeMap::new();
            for (i, pending) in self.lines.values().enumerate() {
                for (j, s) in pending.iter().enumerate() {
                    let included = if self.torn_lines {
                        torn_included(choice.lines[i], j)
                    } else {
                        (j as u64) < choice.lines[i]
                    };
                    if included {
                        let e = newest_included.entry(s.thread).or_insert(0);
                        *e = (*e).max(s.seq);
                    }
                }
            }
            for (k, n) in self.nt.iter().enumerate() {
                if newest_included
                    .get(&n.thread)
                    .is_some_and(|&newest| n.seq < newest)
                {
                    nt[k] = true;
                }
            }
            choice.nt = nt;
            return choice;
        }
        Choice { lines, nt }
    }

    /// Every choice, in a fixed order (call only when `choice_count` is small).
    pub fn all_choices(&self) -> Vec<Choice> {
        let radices: Vec<u64> = self
            .lines
            .values()
            .map(|p| {
                if self.torn_lines {
                    1u64 << p.len()
                } else {
                    p.len() as u64 + 1
                }
            })
            .collect();
        let mut out = Vec::new();
        let mut lines = vec![0u64; radices.len()];
        loop {
            for bits in 0..(1u64 << self.nt.len()) {
                out.push(Choice {
                    lines: lines.clone(),
                    nt: (0..self.nt.len()).map(|k| bits & (1 << k) != 0).collect(),
                });
            }
            // Advance the mixed-radix counter over the lines.
            let mut i = 0;
            loop {
                if i == lines.len() {
                    return out;
                }
                lines[i] += 1;
                if lines[i] < radices[i] {
                    break;
                }
                lines[i] = 0;
                i += 1;
            }
        }
    }

    /// Describe a choice line by line, for failure reports.
    pub fn describe(&self, choice: &Choice) -> Vec<LineChoice> {
        let mut out: Vec<LineChoice> = self
            .lines
            .iter()
            .enumerate()
            .map(|(i, (&line, pending))| {
                let included = if self.torn_lines {
                    choice.lines[i].count_ones() as usize
                } else {
                    choice.lines[i] as usize
                };
                LineChoice {
                    offset: line * CACHE_LINE as u64,
                    pending: pending.len(),
                    included,
                    non_temporal: false,
                }
            })
            .collect();
        let mut nt_lines: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        for (k, s) in self.nt.iter().enumerate() {
            let e = nt_lines.entry(s.chunk.line()).or_default();
            e.0 += 1;
            e.1 += choice.nt[k] as usize;
        }
        out.extend(
            nt_lines
                .into_iter()
                .map(|(line, (pending, included))| LineChoice {
                    offset: line * CACHE_LINE as u64,
                    pending,
                    included,
                    non_temporal: true,
                }),
        );
        out
    }
}

/// Which pending stores a crash image includes: per line (in line order) the length of the
/// persisted prefix (or, in torn-line mode, a bit set of stores), and per nt-store whether it
/// persisted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub(crate) lines: Vec<u64>,
    pub(crate) nt: Vec<bool>,
}

/// How a crash image treated one cache line's pending stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineChoice {
    /// Offset of the line in the pool.
    pub offset: u64,
    /// Stores pending on it when the crash hit.
    pub pending: usize,
    /// How many of them the image includes.
    pub included: usize,
    /// Whether these are non-temporal stores (any subset may persist) or temporal ones (a
    /// prefix persists, unless in torn-line mode).
    pub non_temporal: bool,
}

impl std::fmt::Display for LineChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "line {:#x}: {} of {} pending {} stores persisted",
            self.offset,
            self.included,
            self.pending,
            if self.non_temporal {
                "non-temporal"
            } else {
                "temporal"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(thread: u32, offset: u64, bytes: &[u8]) -> Vec<Event> {
        Chunk::split(offset, bytes)
            .map(|chunk| Event::Store { thread, chunk })
            .collect()
    }

    #[test]
    fn chunks_split_at_word_boundaries() {
        let chunks: Vec<Chunk> = Chunk::split(6, &[1, 2, 3, 4, 5]).collect();
        assert_eq!(chunks.len(), 2);
        assert_eq!((chunks[0].word, chunks[0].mask), (0, 0b1100_0000));
        assert_eq!(&chunks[0].data[6..], &[1, 2]);
        assert_eq!((chunks[1].word, chunks[1].mask), (8, 0b0000_0111));
        assert_eq!(&chunks[1].data[..3], &[3, 4, 5]);
    }

    #[test]
    fn flush_then_fence_persists_only_the_flushed_prefix() {
        let mut s = PersistState::new(vec![0; 256], PersistModel::X86, false);
        for e in store(0, 0, &[1; 8]) {
            s.apply(&e);
        }
        s.apply(&Event::Flush { thread: 0, line: 0 });
        for e in store(0, 8, &[2; 8]) {
            s.apply(&e);
        }
        s.apply(&Event::Fence { thread: 0 });
        assert_eq!(&s.persisted[..8], &[1; 8]);
        assert_eq!(&s.persisted[8..16], &[0; 8]);
        assert_eq!(s.pending_count(), 1);
    }

    #[test]
    fn a_fence_of_another_thread_does_not_complete_a_flush() {
        let mut s = PersistState::new(vec![0; 128], PersistModel::X86, false);
        for e in store(0, 0, &[1; 8]) {
            s.apply(&e);
        }
        s.apply(&Event::Flush { thread: 0, line: 0 });
        assert_eq!(
            s.apply(&Event::Fence { thread: 1 }),
            Observation::FenceWithNothingPending
        );
        assert_eq!(s.pending_count(), 1);
        s.apply(&Event::Fence { thread: 0 });
        assert_eq!(s.pending_count(), 0);
    }

    #[test]
    fn a_persisted_store_is_not_undone_by_an_older_pending_nt_store() {
        let mut s = PersistState::new(vec![0; 128], PersistModel::X86, false);
        s.apply(&Event::NtStore {
            thread: 1,
            chunk: Chunk::split(0, &[7; 8]).next().unwrap(),
        });
        for e in store(0, 0, &[9; 8]) {
            s.apply(&e);
        }
        s.apply(&Event::FlushOrdered { thread: 0, line: 0 });
        let all = s.everything();
        assert_eq!(&s.image(&all).unwrap()[..8], &[9; 8]);
    }
}
