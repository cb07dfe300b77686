//! TATP: a subscriber table and its `update_location` transaction (Themis, Table II, the
//! smallest transaction of its Fig. 8: one store).
//!
//! TATP's `UPDATE_LOCATION` sets a subscriber's `vlr_location`. Here the subscriber table is a
//! heap block of fixed 64-byte records (one cache line each) indexed by `s_id` (1-based, as in
//! TATP); finding the record by `sub_nbr` is a direct index, so the transaction is exactly the
//! one logged store the paper describes.
//!
//! Layout: the root is `[table, subscribers]`; a record is the eight words of
//! [`Subscriber::to_words`].

use pmem_ordering::{Backend, Hardware};

use super::{corrupt, words};
use pmem_undo_log::{Heap, TxError};

/// Bytes of a subscriber record.
pub const RECORD_BYTES: u64 = 64;
/// Offset of `vlr_location` inside a record.
const VLR_LOCATION: u64 = 48;

/// One row of TATP's SUBSCRIBER table (its bit, hex and byte columns packed into words).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Subscriber {
    /// The subscriber id, 1-based.
    pub s_id: u64,
    /// The subscriber number (TATP: `s_id` as a 15-digit string; here the number itself).
    pub sub_nbr: u64,
    /// `bit_1 .. bit_10`, one bit each.
    pub bits: u64,
    /// `hex_1 .. hex_10`, four bits each.
    pub hex: u64,
    /// `byte2_1 .. byte2_8`, one byte each.
    pub byte2: u64,
    /// `msc_location`.
    pub msc_location: u64,
    /// `vlr_location`: what `update_location` sets.
    pub vlr_location: u64,
}

impl Subscriber {
    /// The initial row of subscriber `s_id`: fields derived from the id, `vlr_location` 0.
    pub fn initial(s_id: u64) -> Subscriber {
        let h = super::hashmap::hash(s_id);
        Subscriber {
            s_id,
            sub_nbr: s_id,
            bits: h & 0x3FF,
            hex: (h >> 10) & 0xFF_FFFF_FFFF,
            byte2: h.rotate_left(17),
            msc_location: h >> 32,
            vlr_location: 0,
        }
    }

    /// The record's words: `[s_id, sub_nbr, bits, hex, byte2, msc_location, vlr_location, 0]`.
    pub fn to_words(&self) -> [u64; 8] {
        [
            self.s_id,
            self.sub_nbr,
            self.bits,
            self.hex,
            self.byte2,
            self.msc_location,
            self.vlr_location,
            0,
        ]
    }

    /// The record held in `w` (see [`Subscriber::to_words`]).
    pub fn from_words(w: [u64; 8]) -> Subscriber {
        Subscriber {
            s_id: w[0],
            sub_nbr: w[1],
            bits: w[2],
            hex: w[3],
            byte2: w[4],
            msc_location: w[5],
            vlr_location: w[6],
        }
    }
}

/// A TATP subscriber table in a heap.
///
/// ```
/// use pmem_ordering::{Pool, PoolOptions};
/// use pmem_themis_workloads::Tatp;
/// use pmem_undo_log::{FencePolicy, Heap, HeapConfig};
///
/// let pool = Pool::anonymous("tatp", 4 << 20, &PoolOptions::new())?;
/// let heap: Heap = Heap::create(pool, HeapConfig::default(), FencePolicy::Batched)?;
/// let tatp = Tatp::create(&heap, heap.pool().root_offset(), 100)?;
/// assert!(tatp.update_location(42, 7)?);
/// assert_eq!(tatp.subscriber(42)?.unwrap().vlr_location, 7);
/// assert!(!tatp.update_location(101, 7)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Tatp<'h, B: Backend = Hardware> {
    heap: &'h Heap<B>,
    root: u64,
    table: u64,
    subscribers: u64,
}

impl<B: Backend> Clone for Tatp<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for Tatp<'_, B> {}

impl<B: Backend> std::fmt::Debug for Tatp<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tatp")
            .field("root", &self.root)
            .field("table", &self.table)
            .field("subscribers", &self.subscribers)
            .finish()
    }
}

impl<'h, B: Backend> Tatp<'h, B> {
    /// Bytes of the root: `[table, subscribers]`.
    pub const ROOT_BYTES: u64 = 16;

    /// Allocate a table of `subscribers` rows ([`Subscriber::initial`]) and root it at `root`,
    /// in one transaction.
    pub fn create(heap: &'h Heap<B>, root: u64, subscribers: u64) -> Result<Tatp<'h, B>, TxError> {
        let bytes = subscribers
            .checked_mul(RECORD_BYTES)
            .filter(|&b| b > 0)
            .ok_or_else(|| TxError::InvalidConfig {
                reason: format!("a table of {subscribers} subscribers cannot be laid out"),
            })?;
        let table = heap.transaction(|tx| {
            let table = tx.alloc(bytes)?.offset();
            let rows: Vec<u8> = (1..=subscribers)
                .flat_map(|s| Subscriber::initial(s).to_words())
                .flat_map(u64::to_le_bytes)
                .collect();
            tx.write(table, &rows)?;
            tx.write_value(root, &[table, subscribers])?;
            Ok::<_, TxError>(table)
        })?;
        Ok(Tatp {
            heap,
            root,
            table,
            subscribers,
        })
    }

    /// The table rooted at `root`.
    pub fn open(heap: &'h Heap<B>, root: u64) -> Result<Tatp<'h, B>, TxError> {
        let [table, subscribers] = words::<B, 2>(heap.pool(), root)?;
        if table == 0 || subscribers == 0 {
            return Err(corrupt("TATP table", root, "no table (never created?)"));
        }
        heap.pool()
            .check_range(table, subscribers.saturating_mul(RECORD_BYTES))
            .map_err(|e| corrupt("TATP table", root, e))?;
        Ok(Tatp {
            heap,
            root,
            table,
            subscribers,
        })
    }

    /// The root's offset.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// Number of subscribers (ids `1..=subscribers`).
    pub fn subscribers(&self) -> u64 {
        self.subscribers
    }

    fn record(&self, s_id: u64) -> Option<u64> {
        (1..=self.subscribers)
            .contains(&s_id)
            .then(|| self.table + (s_id - 1) * RECORD_BYTES)
    }

    /// `UPDATE_LOCATION`: set subscriber `s_id`'s `vlr_location`, one logged store in one
    /// transaction. `false` (and no transaction) if there is no such subscriber.
    pub fn update_location(&self, s_id: u64, location: u64) -> Result<bool, TxError> {
        let Some(record) = self.record(s_id) else {
            return Ok(false);
        };
        self.heap
            .transaction(|tx| tx.write_value(record + VLR_LOCATION, &location))?;
        Ok(true)
    }

    /// Subscriber `s_id`'s row, if there is one.
    pub fn subscriber(&self, s_id: u64) -> Result<Option<Subscriber>, TxError> {
        self.record(s_id)
            .map(|r| Ok(Subscriber::from_words(words::<B, 8>(self.heap.pool(), r)?)))
            .transpose()
    }

    /// Every subscriber's `vlr_location`, by `s_id` from 1.
    pub fn locations(&self) -> Result<Vec<u64>, TxError> {
        (1..=self.subscribers)
            .map(|s| Ok(self.subscriber(s)?.expect("in range").vlr_location))
            .collect()
    }

    /// Every heap block the structure owns: the table.
    pub fn blocks(&self) -> Vec<u64> {
        vec![self.table]
    }
}
