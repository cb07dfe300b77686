//! A leaf as the map keeps it in DRAM (its bitmap's mirror, each slot's fingerprint, its live
//! slots in key order, the slots found damaged at open), and the reads of one slot's pair
//! from the pool, every one bounds-checked and checksummed.

use std::cmp::Ordering;

use pmem_ordering::{Backend, Pool};

use super::layout::{slot_checksum, LeafMapConfig, SlotHeader, SLOT_HEADER};
use crate::records::layout::{self as record_layout, Header};
use crate::records::RecordMapError;

/// A leaf's DRAM state. The map's lock guards it; the pool's bitmap word always equals
/// `bitmap` when no writer holds the lock. In C order, what a scan reads first (the offset,
/// the damage, the key order and its length) in the first two cache lines, apart from the
/// fingerprints and prefixes the writes search.
#[derive(Clone, Debug)]
#[repr(C, align(64))]
pub(crate) struct Leaf {
    /// The leaf block's offset.
    pub offset: u64,
    /// The live slots (the pool's bitmap word).
    pub bitmap: u64,
    /// Live slots whose bytes failed their checks at open: never served, never written over.
    pub damaged: u64,
    pub count: u8,
    /// The live, undamaged slots in key order (`count` of them).
    pub order: [u8; 64],
    /// Each slot's key fingerprint (live slots only).
    pub fps: [u8; 64],
    /// Each slot's key's first 16 bytes ([`key_prefix`]): a search in key order reads a slot
    /// only when they tie. Sixteen, not eight: keys often share their first 8 bytes
    /// (`user:000…`, `key:0000…`), and a tie costs a read of a slot, a cache miss.
    pub prefixes: [KeyPrefix; 64],
}

impl Leaf {
    /// An empty leaf at `offset`.
    pub fn empty(offset: u64) -> Leaf {
        Leaf {
            offset,
            bitmap: 0,
            damaged: 0,
            fps: [0; 64],
            prefixes: [0; 64],
            order: [0; 64],
            count: 0,
        }
    }

    /// The first position of the key order whose key is not below `key` (`inclusive`), or
    /// above it (not `inclusive`): a binary search on the keys' prefixes, reading a slot's key
    /// through `compare` only where they tie.
    pub fn search(
        &self,
        key: &[u8],
        inclusive: bool,
        mut compare: impl FnMut(usize) -> Result<Ordering, RecordMapError>,
    ) -> Result<usize, RecordMapError> {
        let prefix = key_prefix(key);
        let order = self.ordered();
        let (mut lo, mut hi) = (0, order.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let slot = order[mid] as usize;
            let theirs = match self.prefixes[slot].cmp(&prefix) {
                Ordering::Equal => compare(slot)?,
                decided => decided,
            };
            match theirs {
                Ordering::Less => lo = mid + 1,
                Ordering::Equal if !inclusive => lo = mid + 1,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }

    /// The number of live slots whose key lies below `key` (`inclusive`), or not above it
    /// (not `inclusive`): the first position of the key order inside that lower bound. Counts
    /// over every slot's prefix at once, so the leaf's prefix lines are read side by side, not
    /// one after another as a binary search would; a slot's key is read through `compare`
    /// only where prefixes tie.
    pub fn rank(
        &self,
        key: &[u8],
        inclusive: bool,
        mut compare: impl FnMut(usize) -> Result<Ordering, RecordMapError>,
    ) -> Result<usize, RecordMapError> {
        let prefix = key_prefix(key);
        let live = self.live();
        let (mut below, mut ties) = (0u64, 0u64);
        for (i, &p) in self.prefixes.iter().enumerate() {
            below |= u64::from(p < prefix) << i;
            ties |= u64::from(p == prefix) << i;
        }
        let mut rank = (below & live).count_ones() as usize;
        let mut ties = ties & live;
        while ties != 0 {
            let slot = ties.trailing_zeros() as usize;
            ties &= ties - 1;
            match compare(slot)? {
                Ordering::Less => rank += 1,
                Ordering::Equal if !inclusive => rank += 1,
                _ => {}
            }
        }
        Ok(rank)
    }

    /// The live slots whose keys' prefixes show them past `end` (each such key sorts after
    /// it; a key past `end` whose prefix ties with its is not among them).
    pub fn beyond(&self, end: &[u8]) -> u64 {
        let prefix = key_prefix(end);
        let mut beyond = 0u64;
        for (i, &p) in self.prefixes.iter().enumerate() {
            beyond |= u64::from(p > prefix) << i;
        }
        beyond & self.live()
    }

    /// The slots of the key order: the live, undamaged ones.
    #[inline]
    pub fn live(&self) -> u64 {
        self.bitmap & !self.damaged
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

/// A key's first bytes as one number ([`key_prefix`]).
pub(crate) type KeyPrefix = u128;

/// The first 16 bytes of `key`, big-endian, zero-padded: prefixes compare as their keys do,
/// unless they are equal (keys sharing their first 16 bytes, or a key and its extension by
/// zero bytes, tie).
#[inline]
pub(crate) fn key_prefix(key: &[u8]) -> KeyPrefix {
    let mut bytes = [0u8; 16];
    let n = key.len().min(16);
    bytes[..n].copy_from_slice(&key[..n]);
    KeyPrefix::from_be_bytes(bytes)
}

/// Reads of one map's slots.
pub(crate) struct Slots<'a, B: Backend> {
    pub pool: &'a Pool<B>,
    pub config: LeafMapConfig,
}

/// A slot's pair as read: inline (its key and value in the slot's bytes, and whether they
/// match the slot's checksum), or in the record at `record`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Pair<'b> {
    Inline {
        key: &'b [u8],
        value: &'b [u8],
        checked: bool,
    },
    Record {
        record: u64,
    },
}

/// A buffer one slot is read into: on the stack for slots of up to 256 bytes.
pub(crate) struct SlotBuf {
    small: [u8; 256],
    large: Vec<u8>,
}

impl SlotBuf {
    pub fn new() -> SlotBuf {
        SlotBuf {
            small: [0; 256],
            large: Vec::new(),
        }
    }

    /// The first `n` bytes.
    fn get(&mut self, n: usize) -> &mut [u8] {
        if n <= self.small.len() {
            &mut self.small[..n]
        } else {
            self.large.resize(n, 0);
            &mut self.large[..n]
        }
    }

    /// The first `n` bytes, as read.
    fn bytes(&self, n: usize) -> &[u8] {
        if n <= self.small.len() {
            &self.small[..n]
        } else {
            &self.large[..n]
        }
    }
}

/// The error for the slot at `slot` whose bytes cannot be a slot's.
#[cold]
fn bad_slot(slot: u64, reason: impl Into<String>) -> RecordMapError {
    RecordMapError::CorruptRecord {
        offset: slot,
        reason: reason.into(),
    }
}

/// The error for an inline pair whose bytes fail the slot's checksum.
#[cold]
#[inline(never)]
fn failed_checksum(slot: u64) -> RecordMapError {
    bad_slot(slot, "its bytes fail the slot's checksum")
}

/// Parse the bytes of a slot (`bytes`, the whole slot) holding `inline` bytes of payload at
/// most.
fn parse(slot: u64, bytes: &[u8], inline: usize) -> Result<Pair<'_>, RecordMapError> {
    let word = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let header = SlotHeader::parse(word, inline)
        .ok_or_else(|| bad_slot(slot, "its lengths do not fit the slot"))?;
    if header.out_of_line {
        // The checksum covers the lengths and the record's offset: one call over both.
        if slot_checksum(&bytes[4..SLOT_HEADER + 8]) != header.crc {
            return Err(bad_slot(
                slot,
                "its record pointer fails the slot's checksum",
            ));
        }
        let record = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        return Ok(Pair::Record { record });
    }
    let end = SLOT_HEADER + header.key_len + header.value_len;
    Ok(Pair::Inline {
        key: &bytes[SLOT_HEADER..SLOT_HEADER + header.key_len],
        value: &bytes[SLOT_HEADER + header.key_len..end],
        checked: slot_checksum(&bytes[4..end]) == header.crc,
    })
}

impl<B: Backend> Slots<'_, B> {
    fn slot_bytes(&self) -> usize {
        self.config.slot_bytes as usize
    }

    /// Read the slot at `slot` into `buf` and parse it.
    pub fn read<'b>(&self, slot: u64, buf: &'b mut SlotBuf) -> Result<Pair<'b>, RecordMapError> {
        let n = self.slot_bytes();
        self.pool.read_bytes(slot, buf.get(n))?;
        parse(slot, buf.bytes(n), self.config.inline_bytes())
    }

    /// The slot at `slot` as [`Slots::read`] left it in `buf`, parsed again.
    pub fn parsed<'b>(&self, slot: u64, buf: &'b SlotBuf) -> Result<Pair<'b>, RecordMapError> {
        parse(
            slot,
            buf.bytes(self.slot_bytes()),
            self.config.inline_bytes(),
        )
    }

    /// The header of the record at `record`, which a slot names: one of a record inside the
    /// pool.
    fn record(&self, record: u64) -> Result<Header, RecordMapError> {
        let line = record_layout::first_line(self.pool, record)?;
        if self
            .pool
            .check_range(record, line.header.record_bytes())
            .is_err()
        {
            return Err(bad_slot(record, "the record runs past the pool's end"));
        }
        Ok(line.header)
    }

    /// Compare the key of the slot at `slot` with `key` (its lengths checked, not its
    /// checksum, as a search needs). An inline key is read alone, after the slot's header:
    /// a search that ties on prefixes (keys sharing their first 16 bytes) reads a few words
    /// per step, not the whole slot.
    pub fn compare(&self, slot: u64, key: &[u8]) -> Result<Ordering, RecordMapError> {
        let mut word = [0u8; SLOT_HEADER];
        self.pool.read_bytes(slot, &mut word)?;
        let header = SlotHeader::parse(u64::from_le_bytes(word), self.config.inline_bytes())
            .ok_or_else(|| bad_slot(slot, "its lengths do not fit the slot"))?;
        if !header.out_of_line {
            return compare_at(self.pool, slot + SLOT_HEADER as u64, header.key_len, key);
        }
        // Out of line: the record's pointer, checked against the slot's checksum.
        let mut buf = SlotBuf::new();
        match self.read(slot, &mut buf)? {
            Pair::Inline { key: theirs, .. } => Ok(theirs.cmp(key)),
            Pair::Record { record } => {
                let header = self.record(record)?;
                compare_at(self.pool, Header::key_at(record), header.key_len, key)
            }
        }
    }

    /// Whether the slot at `slot` holds `key`, the slot left in `buf`. A slot holding another
    /// key whose bytes fail its checksum is [`RecordMapError::CorruptRecord`]: it may be
    /// `key`'s, damaged.
    pub fn holds(&self, slot: u64, key: &[u8], buf: &mut SlotBuf) -> Result<bool, RecordMapError> {
        match self.read(slot, buf)? {
            Pair::Inline { key: theirs, .. } if theirs == key => Ok(true),
            Pair::Inline { checked: false, .. } => Err(failed_checksum(slot)),
            Pair::Inline { .. } => Ok(false),
            Pair::Record { record } => {
                let line = record_layout::first_line(self.pool, record)?;
                if line.key_equals(self.pool, record, key)? {
                    return Ok(true);
                }
                line.check(self.pool, record)?;
                Ok(false)
            }
        }
    }

    /// If the slot at `slot` holds `key`, its value into `out` (cleared first), the pair
    /// checked: whether it holds `key`. One read of the slot, one checksum (a point read's
    /// whole visit to the pool for an inline pair). A slot holding another key whose bytes
    /// fail its checksum is [`RecordMapError::CorruptRecord`], as for [`Slots::holds`].
    pub fn value_of(
        &self,
        slot: u64,
        key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, RecordMapError> {
        out.clear();
        let mut buf = SlotBuf::new();
        match self.read(slot, &mut buf)? {
            Pair::Inline { checked: false, .. } => Err(failed_checksum(slot)),
            Pair::Inline {
                key: theirs, value, ..
            } => {
                if theirs != key {
                    return Ok(false);
                }
                out.extend_from_slice(value);
                Ok(true)
            }
            Pair::Record { record } => {
                let line = record_layout::first_line(self.pool, record)?;
                if !line.key_equals(self.pool, record, key)? {
                    line.check(self.pool, record)?;
                    return Ok(false);
                }
                self.value_into(slot, key, &buf, out)?;
                Ok(true)
            }
        }
    }

    /// The value of the slot at `slot`, left in `buf` by [`Slots::holds`], whose key is `key`,
    /// into `out` (cleared first), the pair checked against its checksum.
    pub fn value_into(
        &self,
        slot: u64,
        key: &[u8],
        buf: &SlotBuf,
        out: &mut Vec<u8>,
    ) -> Result<(), RecordMapError> {
        out.clear();
        match self.parsed(slot, buf)? {
            Pair::Inline { checked: false, .. } => Err(failed_checksum(slot)),
            Pair::Inline { value, .. } => {
                out.extend_from_slice(value);
                Ok(())
            }
            Pair::Record { record } => {
                let header = self.record(record)?;
                out.resize(header.value_len, 0);
                self.pool.read_bytes(header.value_at(record), out)?;
                header.check(record, key, out).inspect_err(|_| out.clear())
            }
        }
    }

    /// Append the key and then the value of the slot at `slot` to `out`, the pair checked:
    /// where the key starts in `out`, the key's length and the value's. (An inline slot is
    /// read whole into `out`, whose bytes past the pair are left there.)
    pub fn append_pair(
        &self,
        slot: u64,
        out: &mut Vec<u8>,
    ) -> Result<(usize, usize, usize), RecordMapError> {
        let start = out.len();
        let mut end = start;
        self.copy_slot(slot, out, start)
            .and_then(|()| self.finish_pair(slot, out, start, &mut end))
            .inspect_err(|_| out.truncate(start))
    }

    /// Read the slot at `slot` whole into `out` from `start` on (`out` grows when it is too
    /// short, never shrinks), unchecked: [`Slots::finish_pair`] checks it and finds its pair.
    /// A scan copies a leaf's slots first and checks them after: the checksum's loads, which
    /// straddle the copy's 8-byte stores, would wait for those stores to reach the cache if
    /// they came right after them.
    #[inline]
    pub fn copy_slot(
        &self,
        slot: u64,
        out: &mut Vec<u8>,
        start: usize,
    ) -> Result<(), RecordMapError> {
        let n = self.slot_bytes();
        if out.len() < start + n {
            out.resize(start + n, 0);
        }
        self.pool.read_bytes(slot, &mut out[start..start + n])?;
        Ok(())
    }

    /// The pair of the slot at `slot`, whose bytes [`Slots::copy_slot`] left in `out` at
    /// `start`, checked: where its key starts in `out`, the key's length and the value's. An
    /// inline pair stays where it is; an out-of-line one is read from its record into `out`
    /// from `*end` on (`out` grown if short), and `*end` moved past it. The inline pair's
    /// path is inlined whole, its result kept in registers (returned through memory, its
    /// words stored one by one and loaded two at a time, it waited on every pair).
    #[inline(always)]
    pub fn finish_pair(
        &self,
        slot: u64,
        out: &mut Vec<u8>,
        start: usize,
        end: &mut usize,
    ) -> Result<(usize, usize, usize), RecordMapError> {
        let bytes = &out[start..start + self.slot_bytes()];
        let word = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        match SlotHeader::parse(word, self.config.inline_bytes()) {
            Some(header) if !header.out_of_line => {
                let stop = SLOT_HEADER + header.key_len + header.value_len;
                if slot_checksum(&bytes[4..stop]) != header.crc {
                    return Err(failed_checksum(slot));
                }
                Ok((start + SLOT_HEADER, header.key_len, header.value_len))
            }
            _ => self.finish_record(slot, out, start, end),
        }
    }

    /// [`Slots::finish_pair`] of a slot that is not a sound inline pair: its record's key
    /// and value read into `out` from `*end` on, checked, or the slot's error.
    #[cold]
    #[inline(never)]
    fn finish_record(
        &self,
        slot: u64,
        out: &mut Vec<u8>,
        start: usize,
        end: &mut usize,
    ) -> Result<(usize, usize, usize), RecordMapError> {
        let bytes = &out[start..start + self.slot_bytes()];
        let record = match parse(slot, bytes, self.config.inline_bytes())? {
            Pair::Inline { checked: false, .. } => return Err(failed_checksum(slot)),
            Pair::Inline { key, value, .. } => {
                return Ok((start + SLOT_HEADER, key.len(), value.len()))
            }
            Pair::Record { record } => record,
        };
        let header = self.record(record)?;
        let at = *end;
        let stop = at + header.key_len + header.value_len;
        if out.len() < stop {
            out.resize(stop, 0);
        }
        self.pool
            .read_bytes(Header::key_at(record), &mut out[at..stop])?;
        let (key, value) = out[at..stop].split_at(header.key_len);
        header.check(record, key, value)?;
        *end = stop;
        Ok((at, header.key_len, header.value_len))
    }

    /// The whole pair of the slot at `slot`, checked (for open, splits and verification).
    pub fn pair(&self, slot: u64) -> Result<(Vec<u8>, Vec<u8>), RecordMapError> {
        let mut bytes = Vec::new();
        let (at, key_len, value_len) = self.append_pair(slot, &mut bytes)?;
        let value = bytes[at + key_len..at + key_len + value_len].to_vec();
        bytes.truncate(at + key_len);
        bytes.drain(..at);
        Ok((bytes, value))
    }

    /// `f` of the key of the slot at `slot`, whose bytes (the whole slot) are `bytes`, as
    /// read: an inline key from `bytes`, an out-of-line one from its record (its lengths
    /// checked, not its checksum: a split moving a slot reads its key so).
    pub fn with_key<R>(
        &self,
        slot: u64,
        bytes: &[u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, RecordMapError> {
        match parse(slot, bytes, self.config.inline_bytes())? {
            Pair::Inline { key, .. } => Ok(f(key)),
            Pair::Record { record } => {
                let header = self.record(record)?;
                let mut key = vec![0u8; header.key_len];
                self.pool.read_bytes(Header::key_at(record), &mut key)?;
                Ok(f(&key))
            }
        }
    }

    /// The record the slot at `slot` names, if its pair is out of line.
    pub fn record_of(&self, slot: u64) -> Result<Option<u64>, RecordMapError> {
        let mut buf = SlotBuf::new();
        Ok(match self.read(slot, &mut buf)? {
            Pair::Record { record } => Some(record),
            Pair::Inline { .. } => None,
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
