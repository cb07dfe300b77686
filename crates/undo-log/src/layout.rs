//! Where the heap's parts live in the pool: the superblock, the lanes, the allocator's region;
//! planning a new heap ([`HeapConfig`] -> [`Layout`]) and reading a formatted one back.
//!
//! This file knows where each lane starts and how long it is; what a lane holds is `lane/`'s.
//!
//! The superblock sits at the pool's heap offset (just after the root object), written once at
//! [`crate::Heap::create`] and never changed; its magic is written last, so an interrupted
//! format reads as "not formatted". Little-endian fields:
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0   | 8 | magic `b"PMUNDO01"` |
//! | 8   | 4 | version ([`VERSION`]) |
//! | 16  | 8 | lane count |
//! | 24  | 8 | bytes of each lane's log |
//! | 32  | 8 | offset of lane 0 |
//! | 40  | 8 | offset of the allocator's region (chunk aligned) |
//! | 48  | 8 | size of the allocator's region (whole chunks) |
//! | 56  | 8 | chunk size |
//! | 64  | 8 | the fence policy's code ([`FencePolicy`]; version 2 on) |
//! | 120 | 4 | CRC-32C of bytes 0..120 |
//!
//! Version 1 superblocks had no policy word: the policy was passed to every open. They are
//! refused with [`TxError::OutdatedSuperblock`] rather than opened under a guessed policy.
//! Version 2 heaps' lane logs held no allocator intents (their transactions logged allocator
//! words at commit, `lane/entry.rs`): they are refused with [`TxError::OutdatedLogFormat`],
//! since a log their release left mid-transaction would be rolled back by other rules. Version 3
//! heaps' lane logs checksummed each entry on its own, where version 4 checksums each group of
//! entries (one batch) once: refused the same way, since their logs do not read as groups.

use pmem_ordering::{Backend, MagicText, Pool};

use crate::lane::{self, Lane};
use crate::policy::FencePolicy;
use crate::TxError;

/// The superblock's magic.
const MAGIC: [u8; 8] = *b"PMUNDO01";
/// The superblock format version: 2 records the fence policy; 3 has allocator intents in the
/// lane logs; 4 checksums the lane logs' entries by group (`lane/entry.rs`).
const VERSION: u32 = 4;
/// The last version whose lane logs had no allocator intents.
const VERSION_WITHOUT_INTENTS: u32 = 2;
/// The last version whose lane log entries each carried their own checksum.
const VERSION_WITH_ENTRY_CHECKSUMS: u32 = 3;
/// The last version that did not record the fence policy.
const VERSION_WITHOUT_POLICY: u32 = 1;
/// Byte offset of the fence policy's code in the superblock.
const POLICY_AT: usize = 64;
const SUPERBLOCK_LEN: usize = 128;

/// How to lay out a new heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapConfig {
    /// Transaction lanes: how many threads can run transactions at once.
    pub lanes: u64,
    /// Bytes of undo log per lane (a multiple of 64): bounds the snapshots of one transaction.
    pub lane_log_bytes: u64,
    /// Allocator chunk size (a power of two, at least 4 KiB).
    pub chunk_size: u64,
}

impl Default for HeapConfig {
    fn default() -> Self {
        HeapConfig {
            lanes: 8,
            lane_log_bytes: 64 << 10,
            chunk_size: 256 << 10,
        }
    }
}

/// The decoded superblock: where everything is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the superblock.
    pub superblock: u64,
    /// Number of lanes.
    pub lanes: u64,
    /// Bytes of each lane's log.
    pub lane_log_bytes: u64,
    /// Offset of lane 0; lane `i` starts at `lanes_offset + i * lane_stride()`.
    pub lanes_offset: u64,
    /// Offset of the allocator's region.
    pub alloc_offset: u64,
    /// Size of the allocator's region.
    pub alloc_size: u64,
    /// Chunk size.
    pub chunk_size: u64,
}

fn align_up(x: u64, to: u64) -> Option<u64> {
    x.checked_add(to - 1).map(|v| v / to * to)
}

impl Layout {
    /// Bytes from one lane to the next.
    pub fn lane_stride(&self) -> u64 {
        lane::HEADER_BYTES + self.lane_log_bytes
    }

    /// Offset of lane `i`'s header (its committed generation).
    pub fn lane_header(&self, lane: usize) -> u64 {
        self.lanes_offset + lane as u64 * self.lane_stride()
    }

    /// Offset of lane `i`'s log.
    pub fn lane_log(&self, lane: usize) -> u64 {
        self.lane_header(lane) + lane::HEADER_BYTES
    }

    /// Lane `i`, to run its protocol.
    pub(crate) fn lane(&self, lane: usize) -> Lane {
        Lane::new(lane, self.lane_header(lane), self.lane_log_bytes)
    }

    /// Plan a heap for a pool of `pool_size` bytes whose free space starts at `start`.
    pub fn plan(start: u64, pool_size: u64, config: &HeapConfig) -> Result<Layout, TxError> {
        let invalid = |reason: String| TxError::InvalidConfig { reason };
        if config.lanes == 0 || config.lanes > 1024 {
            return Err(invalid(format!(
                "{} lanes: between 1 and 1024 are allowed",
                config.lanes
            )));
        }
        if config.lane_log_bytes < 256 || !config.lane_log_bytes.is_multiple_of(64) {
            return Err(invalid(format!(
                "lane log of {} bytes: it must be a multiple of 64, at least 256",
                config.lane_log_bytes
            )));
        }
        if config.lane_log_bytes > u32::MAX as u64 {
            // A log entry stores its length in 32 bits.
            return Err(invalid(format!(
                "lane log of {} bytes: at most {} bytes are allowed",
                config.lane_log_bytes,
                u32::MAX as u64 / 64 * 64
            )));
        }
        if !config.chunk_size.is_power_of_two() || config.chunk_size < 4096 {
            return Err(invalid(format!(
                "chunk size {}: it must be a power of two of at least 4096",
                config.chunk_size
            )));
        }
        let overflow = || invalid("the layout overflows 64 bits".into());
        let lanes_offset = align_up(start + SUPERBLOCK_LEN as u64, 64).ok_or_else(overflow)?;
        let lanes_end = lane::HEADER_BYTES
            .checked_add(config.lane_log_bytes)
            .and_then(|stride| stride.checked_mul(config.lanes))
            .and_then(|b| b.checked_add(lanes_offset))
            .ok_or_else(overflow)?;
        let alloc_offset = align_up(lanes_end, config.chunk_size).ok_or_else(overflow)?;
        let chunks = pool_size.saturating_sub(alloc_offset) / config.chunk_size;
        if chunks == 0 {
            return Err(invalid(format!(
                "a pool of {pool_size} bytes has no room for one {}-byte chunk after {} lanes of {} bytes",
                config.chunk_size, config.lanes, config.lane_log_bytes
            )));
        }
        Ok(Layout {
            superblock: start,
            lanes: config.lanes,
            lane_log_bytes: config.lane_log_bytes,
            lanes_offset,
            alloc_offset,
            alloc_size: chunks * config.chunk_size,
            chunk_size: config.chunk_size,
        })
    }

    fn encode(&self, policy: FencePolicy) -> [u8; SUPERBLOCK_LEN] {
        let mut b = [0u8; SUPERBLOCK_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        for (i, v) in [
            self.lanes,
            self.lane_log_bytes,
            self.lanes_offset,
            self.alloc_offset,
            self.alloc_size,
            self.chunk_size,
        ]
        .into_iter()
        .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        b[POLICY_AT..POLICY_AT + 8].copy_from_slice(&policy.code().to_le_bytes());
        let crc = crc32c::crc32c(&b[..120]);
        b[120..124].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Format every lane, then write the superblock recording `policy`, magic last, each part
    /// persisted.
    pub(crate) fn format<B: Backend>(
        &self,
        pool: &Pool<B>,
        policy: FencePolicy,
    ) -> Result<(), TxError> {
        for lane in 0..self.lanes as usize {
            self.lane(lane).format(pool)?;
        }
        let bytes = self.encode(policy);
        let body = pool.write(self.superblock + 8, &bytes[8..])?;
        pool.persist(body);
        let magic = pool.write(self.superblock, &bytes[..8])?;
        pool.persist(magic);
        Ok(())
    }

    /// Read and check the superblock at `superblock`: the layout and the fence policy it
    /// records.
    pub(crate) fn read<B: Backend>(
        pool: &Pool<B>,
        superblock: u64,
    ) -> Result<(Layout, FencePolicy), TxError> {
        let mut b = [0u8; SUPERBLOCK_LEN];
        pool.read_bytes(superblock, &mut b)?;
        let bad = |reason: String| TxError::BadSuperblock { reason };
        if b[0..8] == [0u8; 8] {
            return Err(TxError::NotFormatted);
        }
        if b[0..8] != MAGIC {
            return Err(bad(format!(
                "magic {}, not {}",
                MagicText(b[0..8].try_into().expect("8 bytes")),
                MagicText(MAGIC)
            )));
        }
        let version = u32::from_le_bytes(b[8..12].try_into().expect("4 bytes"));
        if version == VERSION_WITHOUT_POLICY {
            return Err(TxError::OutdatedSuperblock {
                found: version,
                supported: VERSION,
            });
        }
        if version == VERSION_WITHOUT_INTENTS || version == VERSION_WITH_ENTRY_CHECKSUMS {
            return Err(TxError::OutdatedLogFormat {
                found: version,
                supported: VERSION,
            });
        }
        if version != VERSION {
            return Err(bad(format!(
                "version {version}, this library reads {VERSION}"
            )));
        }
        let stored = u32::from_le_bytes(b[120..124].try_into().expect("4 bytes"));
        let computed = crc32c::crc32c(&b[..120]);
        if stored != computed {
            return Err(bad(format!(
                "checksum {stored:#010x}, computed {computed:#010x}"
            )));
        }
        let field =
            |i: usize| u64::from_le_bytes(b[16 + 8 * i..24 + 8 * i].try_into().expect("8 bytes"));
        let found = Layout {
            superblock,
            lanes: field(0),
            lane_log_bytes: field(1),
            lanes_offset: field(2),
            alloc_offset: field(3),
            alloc_size: field(4),
            chunk_size: field(5),
        };
        // The stored layout must be the one `plan` gives for its own parameters.
        let config = HeapConfig {
            lanes: found.lanes,
            lane_log_bytes: found.lane_log_bytes,
            chunk_size: found.chunk_size,
        };
        let planned = Layout::plan(superblock, pool.size(), &config)
            .map_err(|e| bad(format!("its parameters are not a valid layout: {e}")))?;
        if planned != found {
            return Err(bad(format!("fields disagree with each other: {found:?}")));
        }
        let code = u64::from_le_bytes(b[POLICY_AT..POLICY_AT + 8].try_into().expect("8 bytes"));
        let policy = FencePolicy::from_code(code)
            .ok_or_else(|| bad(format!("fence policy code {code} names no policy")))?;
        Ok((found, policy))
    }
}
