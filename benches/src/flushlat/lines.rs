//! Cache-line-aligned buffers and safe wrappers over the crate's flush and streaming-store
//! instructions, one line at a time.

use pmem_ordering::isa::{flush_line, movnti_u64, sfence, FlushKind, Isa, CACHE_LINE};

/// One 64-byte cache line of eight words.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub struct Line(pub [u64; 8]);

const _: () = assert!(std::mem::size_of::<Line>() == CACHE_LINE);

/// A zeroed buffer of `count` lines. Buffers this large come from an anonymous mapping of the
/// allocator; every line is written once here, so its page is backed before anything is timed.
pub fn line_buffer(count: usize) -> Vec<Line> {
    vec![Line::default(); count]
}

/// Write `line` back with the flush instruction of `isa`.
#[inline(always)]
pub fn flush(isa: Isa, line: &Line) {
    // SAFETY: a reference points into memory mapped in this process, and `isa` exists only if
    // the CPU has its instruction.
    unsafe { flush_line(isa, (line as *const Line).cast::<u8>()) }
}

/// Store `value` to the first word of `line` with a non-temporal store (`movnti`).
#[inline(always)]
pub fn nt_store(line: &mut Line, value: u64) {
    // SAFETY: `&mut` gives exclusive access to a valid, 8-byte-aligned word.
    unsafe { movnti_u64(&mut line.0[0], value) }
}

/// How a line is made durable after a store to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persist {
    /// A temporal store and no flush.
    None,
    /// A temporal store, a flush with this instruction, and an `sfence` unless the instruction
    /// is `clflush` (ordered by itself).
    Flush(FlushKind),
    /// A non-temporal store, then `sfence`.
    NonTemporal,
}

impl Persist {
    /// A short name for tables and JSON.
    pub fn name(self) -> String {
        match self {
            Persist::None => "store".to_string(),
            Persist::Flush(FlushKind::Clflush) => "store + clflush".to_string(),
            Persist::Flush(kind) => format!("store + {} + sfence", kind.name()),
            Persist::NonTemporal => "nt store + sfence".to_string(),
        }
    }

    /// The instruction set that runs this persist on this CPU, or why the CPU cannot.
    pub fn isa(self) -> Result<Isa, String> {
        match self {
            Persist::Flush(kind) => Isa::detected().with_flush(kind).map_err(|e| e.to_string()),
            Persist::None | Persist::NonTemporal => Ok(Isa::detected()),
        }
    }
}

/// Store `value` to `line` and make it durable the way `persist` says, with `isa` (from
/// [`Persist::isa`]).
#[inline(always)]
pub fn store_and_persist(isa: Isa, persist: Persist, line: &mut Line, value: u64) {
    match persist {
        Persist::None => line.0[0] = value,
        Persist::Flush(kind) => {
            line.0[0] = value;
            flush(isa, line);
            if kind != FlushKind::Clflush {
                sfence();
            }
        }
        Persist::NonTemporal => {
            nt_store(line, value);
            sfence();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_persist_leaves_the_value_stored() {
        let mut lines = line_buffer(4);
        let mut persists = vec![Persist::None, Persist::NonTemporal];
        persists.extend(Isa::supported_flushes().into_iter().map(Persist::Flush));
        for (i, persist) in persists.into_iter().enumerate() {
            let isa = persist.isa().expect("a supported flush");
            store_and_persist(isa, persist, &mut lines[1], i as u64 + 10);
            assert_eq!(lines[1].0[0], i as u64 + 10, "{}", persist.name());
        }
        assert!(lines.as_ptr().addr().is_multiple_of(CACHE_LINE));
    }
}
