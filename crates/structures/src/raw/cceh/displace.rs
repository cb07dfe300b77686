//! Displacement: making room in a full probing window by moving keys further along their own
//! windows, so that a segment splits later (a fuller table, fewer bytes per key).
//!
//! Why a move is safe for lock-free lookups and for a crash: the copy is written and persisted
//! (`Cceh::put_slot`) before the old slot is reused, and it lies *after* the old slot in the
//! moved key's own probing order. A lookup scanning that order meets the key at one place or
//! the other, never at neither; a crash between the two leaves two identical copies of one
//! key, which [`Cceh::open`] reduces to one (`recovery.rs`).

use std::cell::Cell;
use std::sync::atomic::Ordering;

use pmem_ordering::Backend;

use super::hashing::{hash, prefix};
use super::layout::{bucket_word, line_key, value_of, SegmentShape};
use super::{Cceh, CcehError, Place, EMPTY_KEY, PROBE_BUCKETS, SLOTS_PER_BUCKET};

/// How deep a chain of moves a full window may start before its segment splits (see
/// `Cceh::displace`): each move shifts one key to a later bucket of its own window.
const DISPLACEMENT_HOPS: u32 = 2;

/// How far past a window's home a displacement chain can reach: the window, then up to
/// `PROBE_BUCKETS - 1` buckets further per move.
const DISPLACEMENT_REACH: u64 = PROBE_BUCKETS + DISPLACEMENT_HOPS as u64 * (PROBE_BUCKETS - 1);
const _: () = assert!(
    DISPLACEMENT_REACH <= 16,
    "Neighbourhood's bit masks are 16 bits"
);

/// A chain of moves: `(bucket relative to the window's home, slot)` from the slot to free to
/// the free slot found.
type Chain = [(u64, usize); DISPLACEMENT_HOPS as usize + 1];

/// The buckets a displacement chain starting in one window can reach, read once: bucket `r`
/// of it is the `r`-th after the window's home bucket (wrapping in the segment; a segment
/// smaller than the reach has each of its buckets once).
struct Neighbourhood {
    segment: u64,
    shape: SegmentShape,
    home: u64,
    buckets: Vec<NearBucket>,
    /// Bit `r`: bucket `r` was found to have no room within one move. That does not depend on
    /// the chain that led there (a bucket on a chain has no free slot, so it is never a
    /// chain's end), so the search asks each bucket once, not once per chain through it.
    no_room_in_one_move: Cell<u16>,
}

/// One bucket of a [`Neighbourhood`].
#[derive(Clone, Copy, Default)]
struct NearBucket {
    keys: [u64; SLOTS_PER_BUCKET as usize],
    /// Each key's home bucket, relative to the window's home (meaningless for a free slot).
    homes: [u64; SLOTS_PER_BUCKET as usize],
    /// Bit `s` set: slot `s` is free (empty, or holding a key a split left behind).
    free: u8,
}

impl Neighbourhood {
    fn read<B: Backend>(
        table: &Cceh<B>,
        place: &Place,
        h: u64,
    ) -> Result<Neighbourhood, CcehError> {
        let segment = table.segment_words(table.pool_words()?, place.segment)?;
        let shape = table.shape;
        let home = shape.home(h);
        let pattern = prefix(h, place.local_depth);
        let buckets = (0..DISPLACEMENT_REACH.min(shape.buckets()))
            .map(|rel| {
                let bucket = shape.bucket_after(home, rel);
                let line = segment
                    .line(bucket_word(bucket))
                    .ok_or_else(|| table.bad_offset(shape.slot(place.segment, bucket, 0), 64))?;
                let mut near = NearBucket::default();
                for s in 0..SLOTS_PER_BUCKET as usize {
                    let k = line_key(&line, s);
                    near.keys[s] = k;
                    let hk = hash(k);
                    if k == EMPTY_KEY || prefix(hk, place.local_depth) != pattern {
                        near.free |= 1 << s;
                    }
                    near.homes[s] = shape.distance(home, shape.home(hk));
                }
                Ok(near)
            })
            .collect::<Result<Vec<_>, CcehError>>()?;
        Ok(Neighbourhood {
            segment: place.segment,
            shape,
            home,
            buckets,
            no_room_in_one_move: Cell::new(0),
        })
    }

    /// A chain of moves that frees a slot of bucket `rel` (relative to the window's home)
    /// within `hops` moves: its free slot, or one of its keys moved forward along that key's
    /// own window into room made the same way in a later bucket. Fills `chain[depth..]` with
    /// `(bucket, slot)` from the slot to free to the free slot found, and returns the chain's
    /// length. Buckets already on the chain are not used again.
    fn room(&self, rel: u64, hops: u32, chain: &mut Chain, depth: usize) -> Option<usize> {
        let bucket = &self.buckets[rel as usize];
        if bucket.free != 0 {
            chain[depth] = (rel, bucket.free.trailing_zeros() as usize);
            return Some(depth + 1);
        }
        if hops == 0 || (hops == 1 && self.no_room_in_one_move.get() & (1 << rel) != 0) {
            return None;
        }
        for (s, &moved_home) in bucket.homes.iter().enumerate() {
            chain[depth] = (rel, s);
            // Where the key sits in its own window, and the buckets of that window after it.
            let position = self.shape.distance(moved_home, rel);
            for step in position + 1..PROBE_BUCKETS {
                let next = self.shape.bucket_after(moved_home, step);
                if chain[..=depth]
                    .iter()
                    .any(|&(on_chain, _)| on_chain == next)
                {
                    continue;
                }
                if let Some(len) = self.room(next, hops - 1, chain, depth + 1) {
                    return Some(len);
                }
            }
        }
        if hops == 1 {
            self.no_room_in_one_move
                .set(self.no_room_in_one_move.get() | 1 << rel);
        }
        None
    }

    /// Offset of slot `s` of bucket `rel`.
    fn slot(&self, rel: u64, s: usize) -> u64 {
        let bucket = self.shape.bucket_after(self.home, rel);
        self.shape.slot(self.segment, bucket, s as u64)
    }
}

impl<B: Backend> Cceh<B> {
    /// Make room in `h`'s full window by moving keys further along their own windows: a key
    /// of the window moves to a later bucket of its window, where room may in turn be made
    /// the same way, up to [`DISPLACEMENT_HOPS`] moves deep, the shortest chain first. Returns
    /// the window's slot vacated, which still holds the key moved out: the caller overwrites
    /// it. Splitting later this way raises the load a segment reaches before it splits.
    ///
    /// Every move writes and persists the copy before the old slot is overwritten (see the
    /// file's docs for why lookups and recovery stay right).
    ///
    /// The buckets a chain can reach are read, and their keys hashed, once ([`Neighbourhood`]);
    /// the search itself is arithmetic on that copy (the caller's stripe lock keeps it true).
    pub(super) fn displace(&self, place: &Place, h: u64) -> Result<Option<u64>, CcehError> {
        let near = Neighbourhood::read(self, place, h)?;
        let mut chain: Chain = [(0, 0); DISPLACEMENT_HOPS as usize + 1];
        // Shallowest chain first: most full windows need one move, and a deep search is costly.
        let found = (1..=DISPLACEMENT_HOPS).find_map(|hops| {
            (0..PROBE_BUCKETS).find_map(|rel| near.room(rel, hops, &mut chain, 0))
        });
        let Some(len) = found else {
            return Ok(None);
        };
        // The last move first: each key moves into a slot already free.
        for i in (0..len - 1).rev() {
            let (from_rel, from_slot) = chain[i];
            let (to_rel, to_slot) = chain[i + 1];
            let from = near.slot(from_rel, from_slot);
            let value = self.word(value_of(from))?;
            let key = near.buckets[from_rel as usize].keys[from_slot];
            self.put_slot(near.slot(to_rel, to_slot), key, value)?;
            self.displaced.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(near.slot(chain[0].0, chain[0].1)))
    }
}
