//! Redo-logged shifts ([`super::ShiftPolicy::Redo`], Optane buffering (EuroSys'22), Sec. 4.2):
//! each cache line a shift touches is built in DRAM, logged to the writer's lane, committed,
//! applied in place and its commit cleared; [`FastFair::open`] replays the committed slots.

use pmem_ordering::{Backend, Written};

use super::layout::{
    commit_target, commit_word, encode_entry, entry_offset, line_of, NodeView, ENTRIES_PER_LINE,
    ENTRY, LINE,
};
use super::shift::{Shift, SlotWrite};
use super::{FastFair, FastFairError, LANES};

impl<B: Backend> FastFair<B> {
    /// Redo-logged: each touched line goes through the lane before it is written in place.
    pub(super) fn shift_redo(
        &self,
        view: NodeView<'_>,
        node: u64,
        lane: usize,
        shift: Shift,
    ) -> Result<(), FastFairError> {
        let mut turn = 0;
        let mut unfenced_clear: Option<Written> = None;
        let mut group = [SlotWrite::default(); ENTRIES_PER_LINE];
        let mut grouped = 0;
        for i in 0..=shift.len() {
            let next = if i < shift.len() {
                Some(shift.write(view, i))
            } else {
                None
            };
            let same_line = next.is_some_and(|w| line_of(w.slot) == line_of(group[0].slot));
            if grouped > 0 && !same_line {
                // The line's new bytes, built in DRAM from its current bytes and the writes.
                let writes = &group[..grouped];
                let lo = writes.iter().map(|w| w.slot).min().expect("non-empty");
                let hi = writes.iter().map(|w| w.slot).max().expect("non-empty");
                let mut bytes = [0u8; LINE as usize];
                let len = (hi - lo + 1) * ENTRY as usize;
                self.pool()
                    .read_bytes(entry_offset(node, lo), &mut bytes[..len])?;
                for w in writes {
                    encode_entry(&mut bytes, w.slot - lo, w.key, w.value);
                }
                unfenced_clear = Some(self.redo_line(
                    lane,
                    turn,
                    entry_offset(node, lo),
                    &bytes[..len],
                    unfenced_clear.take(),
                )?);
                turn ^= 1;
                grouped = 0;
            }
            if let Some(w) = next {
                group[grouped] = w;
                grouped += 1;
            }
        }
        if let Some(clear) = unfenced_clear {
            self.pool().persist(clear);
        }
        Ok(())
    }

    /// Log, commit, apply and clear one line's update through slot `turn` of `lane`. The
    /// previous slot's clear, still unfenced, is made durable by this slot's first fence (it
    /// must be, before that slot's data line is written again). Returns this slot's clear.
    fn redo_line(
        &self,
        lane: usize,
        turn: usize,
        target: u64,
        bytes: &[u8],
        previous_clear: Option<Written>,
    ) -> Result<Written, FastFairError> {
        let pool = self.pool();
        let (data, commit) = self.redo.slot(lane, turn);
        let logged = pool.flush(pool.write(data, bytes)?);
        let pending = match previous_clear {
            Some(clear) => logged.and(pool.flush(clear)),
            None => logged,
        };
        pool.fence(pending);
        pool.persist(pool.store_u64(commit, commit_word(target, bytes.len()))?);
        pool.persist(pool.write(target, bytes)?);
        Ok(pool.store_u64(commit, 0)?)
    }

    /// Apply every committed redo slot (recovery). A commit word that names anything but a
    /// run of whole words inside one line of the pool is refused as corrupt.
    pub(super) fn replay_redo(&self) -> Result<(), FastFairError> {
        let pool = self.pool();
        for lane in 0..LANES {
            for turn in 0..2 {
                let (data, commit) = self.redo.slot(lane, turn);
                let word = pool.load_u64(commit)?;
                if word == 0 {
                    continue;
                }
                let (target, len) = commit_target(word);
                let fits = (1..=LINE).contains(&len)
                    && target.is_multiple_of(8)
                    && target / LINE == (target + len - 1) / LINE
                    && pool.check_range(target, len).is_ok();
                if !fits {
                    return Err(self.corrupt(format!(
                        "redo lane {lane} slot {turn} commits {len} bytes at {target:#x}"
                    )));
                }
                let mut bytes = [0u8; LINE as usize];
                pool.read_bytes(data, &mut bytes[..len as usize])?;
                pool.persist(pool.write(target, &bytes[..len as usize])?);
                pool.persist(pool.store_u64(commit, 0)?);
            }
        }
        Ok(())
    }
}
