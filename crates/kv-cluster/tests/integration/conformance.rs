//! openraft's own storage conformance suite (`openraft::testing::log::Suite`: log state,
//! vote, entries, truncate, purge, membership read back, apply, snapshot build and install)
//! run against the log store and the state machine, each pair on a fresh anonymous store.

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use openraft::StorageError;
use pmem_kv_cluster::{KvRaft, LogStore, StateMachine};
use pmem_structures::{Store, StoreOptions};

struct AnonymousStores;

impl StoreBuilder<KvRaft, LogStore, StateMachine> for AnonymousStores {
    async fn build(&self) -> Result<((), LogStore, StateMachine), StorageError<KvRaft>> {
        let fail =
            |e: String| StorageError::write(KvRaft::err_from_error(&std::io::Error::other(e)));
        let store =
            Store::anonymous(32 << 20, &StoreOptions::new()).map_err(|e| fail(e.to_string()))?;
        let log = LogStore::open(&store).map_err(|e| fail(e.to_string()))?;
        let sm = StateMachine::open(&store).map_err(|e| fail(e.to_string()))?;
        Ok(((), log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime
        .block_on(Suite::test_all(AnonymousStores))
        .unwrap_or_else(|e| panic!("openraft's storage suite: {e}"));
}
