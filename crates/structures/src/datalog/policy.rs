//! The run-time policy: write paths, folding and log-cleaning thresholds.

use super::layout::PAGE;
use super::DatalogError;

/// How writes reach the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WriteMode {
    /// Every piece as a new 4 KB page (NOVA).
    CopyOnWrite,
    /// Sub-page pieces inline in the log (NOVA-datalog); whole pages copy-on-write.
    Embedded,
    /// Embedded up to [`Policy::auto_embed_max`] bytes per page piece, copy-on-write above.
    #[default]
    Auto,
}

impl WriteMode {
    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::CopyOnWrite => "cow",
            WriteMode::Embedded => "embedded",
            WriteMode::Auto => "auto",
        }
    }
}

/// Run-time policy of a store (not persistent: a store may be reopened with another).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The write path of [`Datalog::write_at`](super::Datalog::write_at).
    pub mode: WriteMode,
    /// Largest page piece [`WriteMode::Auto`] embeds.
    pub auto_embed_max: u64,
    /// Embedded entries over one page before it is folded.
    pub fold_after_entries: usize,
    /// Inline bytes over one page before it is folded.
    pub fold_after_bytes: u64,
    /// A log whose live entries fill less than this share (percent) of its pages is compacted.
    pub compact_live_percent: u64,
    /// Logs shorter than this many pages are never compacted.
    pub compact_min_pages: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            mode: WriteMode::Auto,
            auto_embed_max: 2048,
            fold_after_entries: 64,
            fold_after_bytes: PAGE,
            compact_live_percent: 33,
            compact_min_pages: 4,
        }
    }
}

impl Policy {
    /// The default policy with another write mode.
    pub fn with_mode(mode: WriteMode) -> Policy {
        Policy {
            mode,
            ..Policy::default()
        }
    }

    pub(super) fn check(&self) -> Result<(), DatalogError> {
        let bad = |reason: String| Err(DatalogError::InvalidConfig { reason });
        if self.fold_after_entries == 0 {
            return bad("fold_after_entries must be at least 1".into());
        }
        if self.compact_live_percent > 100 {
            return bad(format!(
                "compact_live_percent {} is above 100",
                self.compact_live_percent
            ));
        }
        if self.compact_min_pages < 2 {
            return bad("compact_min_pages must be at least 2".into());
        }
        Ok(())
    }
}
