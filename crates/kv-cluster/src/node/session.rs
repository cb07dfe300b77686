//! What a client connection keeps between its requests.

use pmem_kv_server::protocol::Protocol;

/// What a connection keeps between its requests.
pub(crate) struct Session {
    pub(crate) protocol: Protocol,
    /// The connection closes once this request's reply is out (`QUIT`).
    pub(crate) closing: bool,
}
