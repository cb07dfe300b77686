//! The primitive variants compared by `pmem-bench` and by the `persist` criterion bench.
//!
//! Four groups, each comparing variants side by side:
//!
//! * [`Group::FlushKinds`]: write one cache line, flush it, fence, for each flush instruction the
//!   CPU supports (PERC compares the same three instructions); then [`LINES_PER_FENCE`] lines
//!   far apart, each written and flushed, under one fence (how a structure's batched writes
//!   share a fence);
//! * [`Group::NtVsClwb`]: a non-temporal write plus a fence against a temporal write plus
//!   flush and fence, from 64 B to 64 KiB: the micro-buffering crossover of Optane guide (FAST'20), Sec. 5.2.1,
//!   found near 1 KB on Optane;
//! * [`Group::NtThenTemporal`]: a 64-byte non-temporal write followed by an 8-byte temporal write
//!   that must persist after it ([`Pool::write_after`]), under the x86 model (a fence between
//!   them) and the ideal model (no fence): the fence Themis removes (Themis, Sec. III-B). The
//!   temporal write is left unflushed, so the pair measures the ordering cost alone;
//! * [`Group::PersistVsRaw`]: the pool's `write` + `persist` of one line against a plain store,
//!   `flush_line` and `sfence` on a memmap2 mapping of the same pool file: the cost of the
//!   library's bounds checks, tokens and counters.
//!
//! Every operation writes the next slot of a 1 MiB ring in the pool ([`RING_LEN`]), so
//! successive operations touch different lines, the way a log or a structure's writes do.

use memmap2::MmapMut;
use pmem_ordering::isa::{self, CACHE_LINE};
use pmem_ordering::{FlushKind, Isa, PersistModel, Pool, PoolError, PoolOptions};

use crate::poolfile::{PoolFile, SetupError};

/// Size of the benchmark pool.
pub const POOL_SIZE: u64 = 4 << 20;
/// Length of the ring of slots the operations write in turn.
pub const RING_LEN: u64 = 1 << 20;
/// The write sizes of [`Group::NtVsClwb`].
pub const NT_SIZES: [usize; 6] = [64, 256, 1024, 4096, 16 << 10, 64 << 10];

/// Lines written and flushed before each fence in the batched row of [`Group::FlushKinds`].
pub const LINES_PER_FENCE: usize = 8;

/// Bytes of the non-temporal write in [`Group::NtThenTemporal`].
pub const NT_THEN_T_NT_BYTES: usize = 64;
/// Bytes of the temporal write in [`Group::NtThenTemporal`].
pub const NT_THEN_T_T_BYTES: usize = 8;

/// A group of variants compared with each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// One cache line written, flushed and fenced, per flush instruction.
    FlushKinds,
    /// Non-temporal write + fence vs temporal write + flush + fence, across sizes.
    NtVsClwb,
    /// A non-temporal write then a temporal write ordered after it, with and without the fence.
    NtThenTemporal,
    /// The pool's persist vs the raw instructions.
    PersistVsRaw,
}

impl Group {
    /// Every group, in report order.
    pub const ALL: [Group; 4] = [
        Group::FlushKinds,
        Group::NtVsClwb,
        Group::NtThenTemporal,
        Group::PersistVsRaw,
    ];

    /// The group's name in reports and criterion ids.
    pub fn name(self) -> &'static str {
        match self {
            Group::FlushKinds => "flush_kinds",
            Group::NtVsClwb => "nt_vs_clwb",
            Group::NtThenTemporal => "nt_then_temporal",
            Group::PersistVsRaw => "persist_vs_raw",
        }
    }

    /// One line saying what the group's operations are.
    pub fn description(self) -> String {
        let flush = detected_flush();
        match self {
            Group::FlushKinds => format!(
                "write 64 B + flush + sfence, per flush instruction; then {LINES_PER_FENCE} \
                 lines far apart, each written + flushed ({flush}), one sfence"
            ),
            Group::NtVsClwb => format!(
                "nt_write + sfence vs write + {flush} + sfence (Optane guide (FAST'20), Sec. 5.2.1: crossover \
                 near 1 KB on Optane)"
            ),
            Group::NtThenTemporal => "nt_write 64 B, then write_after 8 B (left unflushed): \
                the x86 model fences between them, the ideal model does not"
                .to_string(),
            Group::PersistVsRaw => format!(
                "the pool's write 64 B + persist vs a plain store + {flush} + sfence on a \
                 memmap2 mapping of the same pool file"
            ),
        }
    }
}

/// One primitive operation measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    /// `write` 64 B + `persist` on a pool using this flush instruction.
    FlushLine(FlushKind),
    /// This many lines, [`RING_LEN`] / n apart, each written (64 B) and flushed with the
    /// detected flush, then one fence for them all.
    LinesPerFence(usize),
    /// `nt_write` of this many bytes + fence.
    NtWrite(usize),
    /// `write` of this many bytes + `persist` (the detected flush, then a fence).
    WritePersist(usize),
    /// `nt_write` 64 B then `write_after` 8 B, on a pool of this persistency model.
    NtThenTemporal(PersistModel),
    /// The pool's `write` 64 B + `persist`.
    PoolPersist,
    /// A plain 64-byte store, `flush_line` and `sfence` on a memmap2 mapping of the pool file.
    RawPersist,
}

/// `64 B`, `1 KiB`, `16 KiB`.
pub fn size_label(bytes: usize) -> String {
    if bytes >= 1024 && bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

fn detected_flush() -> &'static str {
    Isa::detected().flush().name()
}

impl Variant {
    /// The group the variant belongs to.
    pub fn group(self) -> Group {
        match self {
            Variant::FlushLine(_) | Variant::LinesPerFence(_) => Group::FlushKinds,
            Variant::NtWrite(_) | Variant::WritePersist(_) => Group::NtVsClwb,
            Variant::NtThenTemporal(_) => Group::NtThenTemporal,
            Variant::PoolPersist | Variant::RawPersist => Group::PersistVsRaw,
        }
    }

    /// What the variant does, without its size (criterion's function id); the group's
    /// [`Group::description`] says the rest.
    pub fn function(self) -> String {
        match self {
            Variant::FlushLine(k) => k.name().to_string(),
            Variant::LinesPerFence(n) => format!("{n} lines per sfence ({})", detected_flush()),
            Variant::NtWrite(_) => "nt_write+sfence".to_string(),
            Variant::WritePersist(_) => format!("write+{}+sfence", detected_flush()),
            Variant::NtThenTemporal(PersistModel::X86) => "x86 (fence)".to_string(),
            Variant::NtThenTemporal(m) => format!("{} (no fence)", m.name()),
            Variant::PoolPersist => "pool write+persist".to_string(),
            Variant::RawPersist => format!("raw store+{}+sfence (memmap2)", detected_flush()),
        }
    }

    /// The size parameter, for variants compared across sizes.
    pub fn parameter(self) -> Option<String> {
        match self {
            Variant::NtWrite(n) | Variant::WritePersist(n) => Some(size_label(n)),
            _ => None,
        }
    }

    /// A unique, readable id: the function and its parameter.
    pub fn id(self) -> String {
        match self.parameter() {
            Some(p) => format!("{} {p}", self.function()),
            None => self.function(),
        }
    }

    /// The variant this one is compared with (its ratio's denominator), if any.
    pub fn baseline(self) -> Option<Variant> {
        match self {
            Variant::FlushLine(k) => {
                let best = Isa::detected().flush();
                (k != best && best != FlushKind::Portable).then_some(Variant::FlushLine(best))
            }
            Variant::LinesPerFence(_) => {
                let best = Isa::detected().flush();
                (best != FlushKind::Portable).then_some(Variant::FlushLine(best))
            }
            Variant::NtWrite(n) => Some(Variant::WritePersist(n)),
            Variant::NtThenTemporal(PersistModel::X86) => None,
            Variant::NtThenTemporal(_) => Some(Variant::NtThenTemporal(PersistModel::X86)),
            Variant::PoolPersist => Some(Variant::RawPersist),
            Variant::WritePersist(_) | Variant::RawPersist => None,
        }
    }

    /// Payload bytes written per operation.
    pub fn bytes(self) -> usize {
        match self {
            Variant::FlushLine(_) | Variant::PoolPersist | Variant::RawPersist => CACHE_LINE,
            Variant::NtWrite(n) | Variant::WritePersist(n) => n,
            Variant::LinesPerFence(n) => n * CACHE_LINE,
            Variant::NtThenTemporal(_) => NT_THEN_T_NT_BYTES + NT_THEN_T_T_BYTES,
        }
    }

    /// Whether the operation goes through a pool, and so shows in the pool's per-thread
    /// counters ([`pmem_ordering::thread_stats`]); the raw variant bypasses them.
    pub fn is_counted(self) -> bool {
        !matches!(self, Variant::RawPersist)
    }

    /// Bytes of the ring each operation takes.
    fn slot(self) -> u64 {
        let bytes = match self {
            Variant::NtThenTemporal(_) => 2 * CACHE_LINE,
            // The lines are spread over the ring from the cursor; the cursor moves a line.
            Variant::LinesPerFence(_) => CACHE_LINE,
            v => v.bytes(),
        };
        bytes.div_ceil(CACHE_LINE) as u64 * CACHE_LINE as u64
    }
}

/// The variants of `group` this CPU can run, in report order.
pub fn variants(group: Group) -> Vec<Variant> {
    match group {
        Group::FlushKinds => {
            let mut v: Vec<Variant> = Isa::supported_flushes()
                .into_iter()
                .filter(|&k| k != FlushKind::Portable)
                .map(Variant::FlushLine)
                .collect();
            v.push(Variant::LinesPerFence(LINES_PER_FENCE));
            v
        }
        Group::NtVsClwb => NT_SIZES
            .iter()
            .flat_map(|&n| [Variant::WritePersist(n), Variant::NtWrite(n)])
            .collect(),
        Group::NtThenTemporal => vec![
            Variant::NtThenTemporal(PersistModel::X86),
            Variant::NtThenTemporal(PersistModel::Ideal),
        ],
        Group::PersistVsRaw => vec![Variant::RawPersist, Variant::PoolPersist],
    }
}

/// Every variant of every group, in report order.
pub fn all_variants() -> Vec<Variant> {
    Group::ALL.into_iter().flat_map(variants).collect()
}

/// What one operation does, resolved at set-up.
enum Target {
    /// Through a pool: `nt_write` + fence.
    NtFence(Pool),
    /// Through a pool: `write` + `persist`.
    WritePersist(Pool),
    /// Through a pool: `lines` lines far apart written and flushed, then one fence.
    LinesPerFence { pool: Pool, lines: u64 },
    /// Through a pool: `nt_write`, then `write_after` the line behind it.
    NtThenTemporal(Pool),
    /// Raw instructions on a mapping of the pool file.
    Raw {
        /// Keeps the mapping alive; written only through `base`.
        _map: MmapMut,
        base: *mut u8,
        isa: Isa,
    },
}

/// A variant ready to run: its pool (or raw mapping), its ring cursor and its source data.
pub struct Primitive {
    variant: Variant,
    target: Target,
    ring_start: u64,
    slot: u64,
    cursor: u64,
    data: Vec<u8>,
}

impl std::fmt::Debug for Primitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Primitive")
            .field("variant", &self.variant)
            .field("ring_start", &self.ring_start)
            .field("slot", &self.slot)
            .finish()
    }
}

impl Primitive {
    /// Open what `variant` needs on `file`.
    pub fn new(file: &PoolFile, variant: Variant) -> Result<Primitive, SetupError> {
        let ring_start = file.heap_offset().next_multiple_of(4096);
        if ring_start + RING_LEN > file.size() {
            return Err(SetupError::TooSmall {
                size: file.size(),
                ring: RING_LEN,
                heap: file.heap_offset(),
            });
        }
        let target = match variant {
            Variant::FlushLine(k) => Target::WritePersist(
                file.open(PoolOptions::new().isa(Isa::detected().with_flush(k)?))?,
            ),
            Variant::NtWrite(_) => Target::NtFence(file.open(PoolOptions::new())?),
            Variant::WritePersist(_) | Variant::PoolPersist => {
                Target::WritePersist(file.open(PoolOptions::new())?)
            }
            Variant::LinesPerFence(n) => Target::LinesPerFence {
                pool: file.open(PoolOptions::new())?,
                lines: n.max(1) as u64,
            },
            Variant::NtThenTemporal(model) => {
                Target::NtThenTemporal(file.open(PoolOptions::new().model(model))?)
            }
            Variant::RawPersist => {
                let mut map = file.map_raw()?;
                let base = map.as_mut_ptr();
                Target::Raw {
                    _map: map,
                    base,
                    isa: Isa::detected(),
                }
            }
        };
        let len = match variant {
            Variant::LinesPerFence(_) => CACHE_LINE,
            v => v.bytes().max(CACHE_LINE),
        };
        Ok(Primitive {
            variant,
            target,
            ring_start,
            slot: variant.slot(),
            cursor: 0,
            // Any non-zero pattern: the bytes' values do not matter, only that they are stored.
            data: (0..len).map(|i| (i % 251) as u8 + 1).collect(),
        })
    }

    /// The variant this primitive runs.
    pub fn variant(&self) -> Variant {
        self.variant
    }

    /// One operation, on the next slot of the ring.
    #[inline]
    pub fn step(&mut self) -> Result<(), PoolError> {
        let offset = self.ring_start + self.cursor;
        self.cursor += self.slot;
        if self.cursor + self.slot > RING_LEN {
            self.cursor = 0;
        }
        let len = self.variant.bytes();
        match &self.target {
            Target::NtFence(pool) => {
                let nt = pool.nt_write(offset, &self.data[..len])?;
                pool.fence(nt);
            }
            Target::WritePersist(pool) => {
                let w = pool.write(offset, &self.data[..len])?;
                pool.persist(w);
            }
            Target::LinesPerFence { pool, lines } => {
                // Line i lies RING_LEN / lines after line 0, wrapping within the ring.
                let apart = (RING_LEN / lines).next_multiple_of(CACHE_LINE as u64);
                let line =
                    |i: u64| self.ring_start + (offset - self.ring_start + i * apart) % RING_LEN;
                let mut pending = pool.flush(pool.write(line(0), &self.data[..CACHE_LINE])?);
                for i in 1..*lines {
                    let w = pool.write(line(i), &self.data[..CACHE_LINE])?;
                    pending = pending.and(pool.flush(w));
                }
                pool.fence(pending);
            }
            Target::NtThenTemporal(pool) => {
                let nt = pool.nt_write(offset, &self.data[..NT_THEN_T_NT_BYTES])?;
                // The temporal write is deliberately left unflushed: the variant measures the
                // nt -> t ordering, not the temporal write's own persist.
                let _unflushed = pool.write_after(
                    nt,
                    offset + CACHE_LINE as u64,
                    &self.data[..NT_THEN_T_T_BYTES],
                )?;
            }
            Target::Raw { base, isa, .. } => {
                // offset + 64 <= ring_start + RING_LEN <= the mapping's length (checked in `new`).
                // SAFETY: so the line is in the mapping; `data` holds at least 64 bytes, does not
                // overlap it, and nothing else writes the mapping while this primitive runs.
                unsafe {
                    let dst = base.add(offset as usize);
                    std::ptr::copy_nonoverlapping(self.data.as_ptr(), dst, CACHE_LINE);
                    isa::flush_line(*isa, dst);
                }
                isa::sfence();
            }
        }
        Ok(())
    }

    /// `n` operations.
    pub fn run(&mut self, n: u64) -> Result<(), PoolError> {
        for _ in 0..n {
            self.step()?;
        }
        Ok(())
    }
}
