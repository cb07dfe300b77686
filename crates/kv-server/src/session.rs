//! What the server keeps per connection: its protocol, the client's name and library, and
//! whether it is inside a refused `MULTI`.

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;

use crate::reply::Protocol;

pub(crate) struct Session {
    /// Unique per connection for the server's life (`CLIENT ID`), from 1.
    pub(crate) id: u64,
    pub(crate) protocol: Protocol,
    /// `CLIENT SETNAME` (or `HELLO ... SETNAME`); `None` when unset or set empty.
    pub(crate) name: Option<Bytes>,
    /// `CLIENT SETINFO LIB-NAME` and `LIB-VER`.
    pub(crate) lib_name: Option<Bytes>,
    pub(crate) lib_version: Option<Bytes>,
    /// The client sent `MULTI`, which was refused: every command up to `EXEC` or `DISCARD` is
    /// refused too, unrun, so a client that sent a transaction in one go applies none of it.
    pub(crate) refused_multi: bool,
    /// The connection closes once this command's reply is out (`QUIT`).
    pub(crate) closing: bool,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) connected: Instant,
}

impl Session {
    pub(crate) fn new(id: u64, peer: Option<SocketAddr>) -> Session {
        Session {
            id,
            protocol: Protocol::Resp2,
            name: None,
            lib_name: None,
            lib_version: None,
            refused_multi: false,
            closing: false,
            peer,
            connected: Instant::now(),
        }
    }

    /// Back to a new connection's state, keeping the id (`RESET`).
    pub(crate) fn reset(&mut self) {
        *self = Session {
            connected: self.connected,
            ..Session::new(self.id, self.peer)
        };
    }
}
