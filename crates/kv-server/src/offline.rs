//! The server's request path without a network, for the fuzz target and the model tests:
//! bytes in, reply bytes out, through the same framing and commands a connection runs.

use std::net::{Ipv4Addr, SocketAddr};

use bytes::BytesMut;
use pmem_structures::{Store, StoreOptions};

use crate::config::Limits;
use crate::connection::{run_buffered, After};
use crate::db::Db;
use crate::error::ServerError;
use crate::framing::Framer;
use crate::session::Session;
use crate::shared::Shared;

/// One connection's worth of state over an anonymous store.
pub struct Offline {
    shared: Shared,
    session: Session,
    framer: Framer,
    input: BytesMut,
}

impl Offline {
    /// A session on a fresh anonymous store of `size` bytes (emulated granularity).
    pub fn anonymous(size: u64, limits: Limits) -> Result<Offline, ServerError> {
        let store = Store::anonymous(size, &StoreOptions::new()).and_then(Db::open);
        let db = store.map_err(|source| ServerError::Store {
            path: "(anonymous)".into(),
            source,
        })?;
        let granularity = db.store().granularity();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let shared = Shared::new(db, limits, addr, granularity, 1, true);
        Ok(Offline {
            session: shared.new_session(None),
            shared,
            framer: Framer::default(),
            input: BytesMut::new(),
        })
    }

    /// Bytes a client sent: the replies to every whole request among them, and whether the
    /// server closed the connection (the next bytes then start a new connection).
    pub fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, bool) {
        self.input.extend_from_slice(bytes);
        let mut output = BytesMut::new();
        let after = run_buffered(
            &self.shared,
            &mut self.session,
            &mut self.framer,
            &mut self.input,
            &mut output,
        );
        let closed = after == After::Close;
        if closed {
            self.input.clear();
            self.framer = Framer::default();
            self.session = self.shared.new_session(None);
        }
        (output.to_vec(), closed)
    }

    /// The deadline and hash maps' agreement with each other and the keys (see
    /// [`check_pool`]): the number of keys and of deadlines, or what disagrees.
    pub fn check_deadlines(&self) -> Result<(u64, u64), String> {
        self.shared.db.check_deadlines()
    }

    /// Reclaim every deleted hash's fields now (a server does it in the background): how
    /// many field entries went.
    pub fn reclaim(&self) -> Result<u64, String> {
        let mut reclaimed = 0;
        while self.shared.db.has_reclaimable() {
            reclaimed += (self.shared.db)
                .reclaim_cycle(std::time::Duration::from_secs(1))
                .map_err(|error| format!("{error:?}"))?;
        }
        Ok(reclaimed)
    }

    /// How many field entries the hash maps hold (live hashes' and those to reclaim).
    pub fn field_entries(&self) -> u64 {
        self.shared
            .db
            .with_maps(|maps| maps.fields.len())
            .unwrap_or(0)
    }

    /// The keyspace's own consistency check: how many keys it holds, or what is wrong.
    pub fn check(&self) -> Result<u64, pmem_structures::Error> {
        // No keyspace (a FLUSHDB that could not make a new one) holds no keys.
        self.shared.db.with_map(|map| map.check()).unwrap_or(Ok(0))
    }
}

/// Open the server's pool at `path` (not in use; `granularity` as the server ran it) and
/// check its keyspace: the keys' map; that every deadline's key exists and is indexed under
/// it and every index entry is a key's deadline; that every hash's key holds the hash marker,
/// its field count is its fields' and every field entry is a live or a deleted hash's. The
/// number of keys and of keys with a deadline, or what is wrong.
pub fn check_pool(
    path: &std::path::Path,
    granularity: pmem_structures::Granularity,
) -> Result<(u64, u64), String> {
    let options = StoreOptions::new().granularity(granularity);
    let store = Store::open_with(path, &options).map_err(|error| error.to_string())?;
    let db = Db::open(store).map_err(|error| error.to_string())?;
    db.check_deadlines()
}
