//! A store's configuration: its inode count and its policy (write paths, folding and
//! log-cleaning thresholds), both recorded in the store's root at create and read back at open;
//! and the policy's encoding in the root's policy words.
//!
//! | word | bits | field |
//! |-----:|------|-------|
//! | 0 | 0..8   | write mode code (1 copy-on-write, 2 embedded, 3 auto; 0 is never a code) |
//! | 0 | 8..16  | `compact_live_percent` (at most 100) |
//! | 1 | all    | `auto_embed_max` |
//! | 2 | 0..32  | `fold_after_entries` |
//! | 2 | 32..64 | `compact_min_pages` |
//! | 3 | all    | `fold_after_bytes` |

use super::layout::{PAGE, POLICY_WORDS};
use super::{DatalogError, MAX_FILES};

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
    /// Every mode.
    pub const ALL: [WriteMode; 3] = [WriteMode::CopyOnWrite, WriteMode::Embedded, WriteMode::Auto];

    /// The mode's code in the store's root.
    fn code(self) -> u64 {
        match self {
            WriteMode::CopyOnWrite => 1,
            WriteMode::Embedded => 2,
            WriteMode::Auto => 3,
        }
    }

    fn from_code(code: u64) -> Option<WriteMode> {
        WriteMode::ALL.into_iter().find(|m| m.code() == code)
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::CopyOnWrite => "cow",
            WriteMode::Embedded => "embedded",
            WriteMode::Auto => "auto",
        }
    }
}

/// How a new store is made: recorded in its root by
/// [`Datalog::create`](super::Datalog::create), read back by
/// [`Datalog::open`](super::Datalog::open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatalogConfig {
    /// Inodes: the most files the store holds at once (1 to [`MAX_FILES`]). 256 by default.
    pub max_files: u64,
    /// Write paths, folding and cleaning thresholds.
    pub policy: Policy,
}

impl Default for DatalogConfig {
    fn default() -> Self {
        DatalogConfig {
            max_files: 256,
            policy: Policy::default(),
        }
    }
}

impl DatalogConfig {
    pub(super) fn check(&self) -> Result<(), DatalogError> {
        if self.max_files == 0 || self.max_files > MAX_FILES {
            return Err(DatalogError::InvalidConfig {
                reason: format!(
                    "{} files: between 1 and {MAX_FILES} are allowed",
                    self.max_files
                ),
            });
        }
        self.policy.check()
    }
}

/// The run-time policy of a store, recorded in its root ([`DatalogConfig`]).
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
        // The root records these two in 32 bits each.
        if u32::try_from(self.fold_after_entries).is_err() {
            return bad(format!(
                "fold_after_entries {} is above {}",
                self.fold_after_entries,
                u32::MAX
            ));
        }
        if u32::try_from(self.compact_min_pages).is_err() {
            return bad(format!(
                "compact_min_pages {} is above {}",
                self.compact_min_pages,
                u32::MAX
            ));
        }
        Ok(())
    }

    /// The root's policy words (of a policy that passed [`Policy::check`]).
    pub(super) fn encode(&self) -> [u64; POLICY_WORDS] {
        [
            self.mode.code() | (self.compact_live_percent << 8),
            self.auto_embed_max,
            self.fold_after_entries as u64 | ((self.compact_min_pages as u64) << 32),
            self.fold_after_bytes,
        ]
    }

    /// The policy the root's words record; `Err` says what is wrong with them.
    pub(super) fn decode(words: [u64; POLICY_WORDS]) -> Result<Policy, String> {
        let code = words[0] & 0xFF;
        let mode = WriteMode::from_code(code).ok_or_else(|| {
            format!(
                "write mode code {code} names no mode (a store made before the policy was \
                 recorded has 0)"
            )
        })?;
        if words[0] >> 16 != 0 {
            return Err(format!("policy word 0 has stray bits: {:#x}", words[0]));
        }
        let policy = Policy {
            mode,
            compact_live_percent: (words[0] >> 8) & 0xFF,
            auto_embed_max: words[1],
            fold_after_entries: (words[2] & u64::from(u32::MAX)) as usize,
            compact_min_pages: (words[2] >> 32) as usize,
            fold_after_bytes: words[3],
        };
        policy
            .check()
            .map_err(|e| format!("the recorded policy is invalid: {e}"))?;
        Ok(policy)
    }
}
