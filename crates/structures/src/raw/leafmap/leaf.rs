//! A leaf as the map keeps it in DRAM (its bitmap's mirror, each slot's fingerprint, its live
//! slots in key order, the slots found damaged at open), and the reads of one slot's pair
//! from the pool, every one bounds-checked and checksummed.

use std::cmp::Ordering;

use pmem_ordering::{Backend, Pool};

use super::layout::{LeafMapConfig, SlotHeader, SLOT_HEADER};
use crate::records::layout::{self as record_layout, Header};
use crate::records::RecordMapError;

/// A leaf's DRAM state. The map's lock guards it; the pool's bitmap word always equals
/// `bitmap` when no writer holds the lock.
#[derive(Clone, Debug)]
pub(crate) struct Leaf {
    /// The leaf block's offset.
    pub offset: u64,
    /// The live slots (the pool's bitmap word).
    pub bitmap: u64,
    /// Live slots whose bytes failed their checks at open: never served, never written over.
    pub damaged: u64,
    /// Each slot's key fingerprint (live slots only).
    pub fps: [u8; 64],
    /// The live, undamaged slots in key order (`count` of them).
    pub order: [u8; 64],
    pub count: u8,
}

impl Leaf {
    /// An empty leaf at `offset`.
    pub fn empty(offset: u64) -> Leaf {
        Leaf {
            offset,
            bitmap: 0,
            damaged: 0,
            fps: [0; 64],
            order: [0; 64],
            count: 0,
        }
    }

    /// The live slots in key order.
    #[inline]
    pub fn ordered(&self) -> &[u8] {
        &self.order[..self.count as usize]
    }

    /// The live slots whose fingerprint is `fp`.
    #[inline]
    pub fn matching(&self, fp: u8) -> u64 {
        let mut mask = 0u64;
        for (i, &f) in self.fps.iter().enumerate() {
            mask |= ((f == fp) as u64) << i;
        }
        mask & self.bitmap & !self.damaged
    }

    /// The lowest free slot of the first `slots`, if any.
    pub fn free_slot(&self, slots: u64) -> Option<usize> {
        let free = !self.bitmap & super::layout::low_bits(slots);
        (free != 0).then(|| free.trailing_zeros() as usize)
    }

    /// Put `slot` at `position` of the key order.
    pub fn order_insert(&mut self, position: usize, slot: usize) {
        let n = self.count as usize;
        self.order.copy_within(position..n, position + 1);
        self.order[position] = slot as u8;
        self.count += 1;
    }

    /// Take `slot` out of the key order.
    pub fn order_remove(&mut self, slot: usize) {
        let n = self.count as usize;
        if let Some(p) = self.order[..n].iter().position(|&s| s as usize == slot) {
            self.order.copy_within(p + 1..n, p);
            self.count -= 1;
        }
    }

    /// Put `new` where `old` is in the key order (an overwrite moves a key to another slot).
    pub fn order_replace(&mut self, old: usize, new: usize) {
        let n = self.count as usize;
        if let Some(p) = self.order[..n].iter().position(|&s| s as usize == old) {
            self.order[p] = new as u8;
        }
    }

    /// The error for a key that may be in one of this leaf's damaged slots.
    pub fn damage(&self, config: &LeafMapConfig) -> Option<RecordMapError> {
        (self.damaged != 0).then(|| {
            let slot = self.damaged.trailing_zeros() as usize;
            RecordMapError::CorruptRecord {
                offset: config.slot_at(self.offset, slot),
                reason: "the slot's bytes failed their checks when the map was opened".into(),
            }
        })
    }
}

/// Reads of one map's slots.
pub(crate) struct Slots<'a, B: Backend> {
    pub pool: &'a Pool<B>,
    pub config: LeafMapConfig,
}

/// Where a slot's pair is: inline at `at` (key, then value), or in the record at `record`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Place {
    Inline { at: u64, header: SlotHeader },
    Record { record: u64, header: Header },
}

/// The error for the slot at `slot` whose bytes cannot be a slot's.
fn bad_slot(slot: u64, reason: impl Into<String>) -> RecordMapError {
    RecordMapError::CorruptRecord {
        offset: slot,
        reason: reason.into(),
    }
}

impl<B: Backend> Slots<'_, B> {
    /// Where the pair of the slot at `slot` is, its header parsed (not yet checksummed).
    pub fn place(&self, slot: u64) -> Result<Place, RecordMapError> {
        let word = self.pool.load_u64(slot)?;
        let header = SlotHeader::parse(word, self.config.inline_bytes())
            .ok_or_else(|| bad_slot(slot, "its lengths do not fit the slot"))?;
        if !header.out_of_line {
            return Ok(Place::Inline {
                at: slot + SLOT_HEADER as u64,
                header,
            });
        }
        let record = self.pool.load_u64(slot + SLOT_HEADER as u64)?;
        if header.computed(&record.to_le_bytes(), &[]) != header.crc {
            return Err(bad_slot(
                slot,
                "its record pointer fails the slot's checksum",
            ));
        }
        let line = record_layout::first_line(self.pool, record)?;
        if self
            .pool
            .check_range(record, line.header.record_bytes())
            .is_err()
        {
            return Err(bad_slot(record, "the record runs past the pool's end"));
        }
        Ok(Place::Record {
            record,
            header: line.header,
        })
    }

    /// Compare the key of the slot at `slot` with `key`, reading it a piece at a time.
    pub fn compare(&self, slot: u64, key: &[u8]) -> Result<Ordering, RecordMapError> {
        let (at, len) = match self.place(slot)? {
            Place::Inline { at, header } => (at, header.key_len),
            Place::Record { record, header } => (Header::key_at(record), header.key_len),
        };
        compare_at(self.pool, at, len, key)
    }

    /// Whether the slot at `slot` holds `key`.
    pub fn holds(&self, slot: u64, key: &[u8]) -> Result<bool, RecordMapError> {
        let (at, len) = match self.place(slot)? {
            Place::Inline { at, header } => (at, header.key_len),
            Place::Record { record, header } => (Header::key_at(record), header.key_len),
        };
        Ok(len == key.len() && compare_at(self.pool, at, len, key)? == Ordering::Equal)
    }

    /// The value of the slot at `slot`, whose key is `key`, into `out` (cleared first), the
    /// pair checked against its checksum.
    pub fn value_into(
        &self,
        slot: u64,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), RecordMapError> {
        out.clear();
        match self.place(slot)? {
            Place::Inline { at, header } => {
                out.resize(header.value_len, 0);
                self.pool.read_bytes(at + header.key_len as u64, out)?;
                if header.computed(key, out) != header.crc {
                    out.clear();
                    return Err(bad_slot(slot, "its bytes fail the slot's checksum"));
                }
            }
            Place::Record { record, header } => {
                out.resize(header.value_len, 0);
                self.pool.read_bytes(header.value_at(record), out)?;
                if let Err(e) = header.check(record, key, out) {
                    out.clear();
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Append the key and then the value of the slot at `slot` to `out`, the pair checked:
    /// the key's length and the value's.
    pub fn append_pair(
        &self,
        slot: u64,
        out: &mut Vec<u8>,
    ) -> Result<(usize, usize), RecordMapError> {
        let start = out.len();
        let (at, header_crc, key_len, value_len, record) = match self.place(slot)? {
            Place::Inline { at, header } => (at, header, header.key_len, header.value_len, None),
            Place::Record { record, header } => {
                let h = SlotHeader::parse(self.pool.load_u64(slot)?, self.config.inline_bytes())
                    .ok_or_else(|| bad_slot(slot, "its lengths do not fit the slot"))?;
                (
                    Header::key_at(record),
                    h,
                    header.key_len,
                    header.value_len,
                    Some((record, header)),
                )
            }
        };
        out.resize(start + key_len + value_len, 0);
        let read = self.pool.read_bytes(at, &mut out[start..]);
        let checked = read.map_err(RecordMapError::from).and_then(|()| {
            let (key, value) = out[start..].split_at(key_len);
            match record {
                None if header_crc.computed(key, value) != header_crc.crc => {
                    Err(bad_slot(slot, "its bytes fail the slot's checksum"))
                }
                None => Ok(()),
                Some((record, header)) => header.check(record, key, value),
            }
        });
        if let Err(e) = checked {
            out.truncate(start);
            return Err(e);
        }
        Ok((key_len, value_len))
    }

    /// The whole pair of the slot at `slot`, checked (for open, splits and verification).
    pub fn pair(&self, slot: u64) -> Result<(Vec<u8>, Vec<u8>), RecordMapError> {
        let mut bytes = Vec::new();
        let (key_len, _) = self.append_pair(slot, &mut bytes)?;
        let value = bytes.split_off(key_len);
        Ok((bytes, value))
    }

    /// The record the slot at `slot` names, if its pair is out of line.
    pub fn record_of(&self, slot: u64) -> Result<Option<u64>, RecordMapError> {
        Ok(match self.place(slot)? {
            Place::Record { record, .. } => Some(record),
            Place::Inline { .. } => None,
        })
    }
}

/// Compare the `len` key bytes at `at` with `key`, 64 bytes at a time.
fn compare_at<B: Backend>(
    pool: &Pool<B>,
    at: u64,
    len: usize,
    key: &[u8],
) -> Result<Ordering, RecordMapError> {
    let mut chunk = [0u8; 64];
    let mut done = 0;
    while done < len {
        let n = (len - done).min(64);
        pool.read_bytes(at + done as u64, &mut chunk[..n])?;
        let theirs = &chunk[..n];
        let ours = &key[done.min(key.len())..(done + n).min(key.len())];
        // Slices of unequal lengths never compare equal: `Equal` means `ours` had `n` bytes.
        match theirs.cmp(ours) {
            Ordering::Equal => done += n,
            other => return Ok(other),
        }
    }
    Ok(len.cmp(&key.len()))
}
