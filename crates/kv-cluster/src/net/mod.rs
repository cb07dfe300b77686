//! The cluster's network: openraft's RPCs between nodes over TCP.
//!
//! * `frame`: the frame format (length prefix, wire version, cluster id, postcard message)
//!   and its typed refusals;
//! * `client`: openraft's network factory, a client per peer;
//! * `server`: the listener serving peers' RPCs to the node's Raft;
//! * `partition`: the test-only cut of a node from named peers.

pub mod client;
pub mod frame;
pub mod partition;
pub mod server;

pub use client::TcpNetwork;
pub use partition::Cut;
pub use server::RpcService;
