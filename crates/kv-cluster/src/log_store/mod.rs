//! openraft's log storage on a store: [`LogStore`] (the writer) and [`LogReader`] (what the
//! replication tasks read entries and the vote through). The persistence rules are
//! [`core`]'s; every write is durable before the call returns, so an append's flush callback
//! is called before `append` returns.

pub mod core;

use std::fmt::Debug;
use std::io;
use std::ops::RangeBounds;

use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use pmem_structures::Store;

use self::core::{LogCore, LogMaps};
use crate::error::ClusterError;
use crate::types::{Entry, KvRaft, LogId, Vote};

/// The Raft log and vote of a node, in its store.
pub struct LogStore {
    core: LogCore,
}

impl LogStore {
    /// Open the log in `store` (made if new), finishing a purge a crash interrupted; a log
    /// with a hole is refused ([`ClusterError::LogGap`]).
    pub fn open(store: &Store) -> Result<LogStore, ClusterError> {
        Ok(LogStore {
            core: LogCore::open(store)?,
        })
    }

    /// The last log id (the last entry's, or the last purged one's).
    pub fn last_log_id(&self) -> Option<LogId> {
        self.core.last().cloned()
    }
}

/// Reads entries and the vote for openraft's replication tasks.
#[derive(Clone)]
pub struct LogReader {
    maps: LogMaps,
}

impl RaftLogReader<KvRaft> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self.maps.entries(range)?)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.maps.vote()?)
    }
}

impl RaftLogReader<KvRaft> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self.core.maps().entries(range)?)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.core.maps().vote()?)
    }
}

impl RaftLogStorage<KvRaft> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<KvRaft>, io::Error> {
        Ok(LogState {
            last_purged_log_id: self.core.purged().cloned(),
            last_log_id: self.core.last().cloned(),
        })
    }

    async fn get_log_reader(&mut self) -> LogReader {
        LogReader {
            maps: self.core.maps().clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        Ok(self.core.save_vote(vote)?)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        Ok(self.core.save_committed(committed.as_ref())?)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.core.maps().committed()?)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<KvRaft>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        // Durable on return: the callback is told at once.
        self.core.append(entries)?;
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        Ok(self.core.truncate_after(last_log_id.as_ref())?)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        Ok(self.core.purge(&log_id)?)
    }
}
