//! A node's side of its peers' RPCs: openraft's network factory and, per peer, a client
//! keeping one TCP connection (made when first needed, made anew after any failure), sending
//! one request at a time and waiting for its reply within openraft's time to live.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use openraft::error::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

use super::frame::{open, seal, Envelope, FrameCodec, Request, Response};
use super::partition::Cut;
use crate::error::ClusterError;
use crate::state_machine::{Snapshot, SnapshotData};
use crate::types::{KvRaft, Member, NodeId, Vote};

/// Makes a node's clients of its peers, reached at their members' `raft` addresses.
#[derive(Clone, Debug)]
pub struct TcpNetwork {
    cluster: u128,
    me: NodeId,
    cut: Arc<Cut>,
}

impl TcpNetwork {
    /// The network of node `me` of the cluster whose id is `cluster`, reaching no peer that
    /// `cut` cuts off.
    pub fn new(cluster: u128, me: NodeId, cut: Arc<Cut>) -> TcpNetwork {
        TcpNetwork { cluster, me, cut }
    }
}

impl RaftNetworkFactory<KvRaft> for TcpNetwork {
    type Network = TcpPeer;

    async fn new_client(&mut self, target: NodeId, node: &Member) -> TcpPeer {
        TcpPeer {
            cluster: self.cluster,
            me: self.me,
            target,
            addr: node.raft.clone(),
            conn: None,
            cut: self.cut.clone(),
        }
    }
}

/// Why a call failed: the peer could not be reached (openraft backs off), or the exchange
/// failed once connected.
enum CallError {
    Unreachable(ClusterError),
    Network(ClusterError),
}

impl CallError {
    fn into_rpc(self) -> RPCError<KvRaft> {
        match self {
            CallError::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e) => RPCError::Network(NetworkError::new(&e)),
        }
    }

    fn into_streaming(self) -> StreamingError<KvRaft> {
        match self {
            CallError::Unreachable(e) => StreamingError::Unreachable(Unreachable::new(&e)),
            CallError::Network(e) => StreamingError::Network(NetworkError::new(&e)),
        }
    }
}

/// A node's client of one peer.
pub struct TcpPeer {
    cluster: u128,
    me: NodeId,
    target: NodeId,
    addr: String,
    conn: Option<Framed<TcpStream, FrameCodec>>,
    cut: Arc<Cut>,
}

impl TcpPeer {
    /// Send `request` and wait for the reply, within `ttl`; any failure drops the connection
    /// (a reply may be half read, or the request half sent).
    async fn call(&mut self, request: Request, ttl: Duration) -> Result<Response, CallError> {
        let kind = request.kind();
        if self.cut.cuts(self.target) {
            self.conn = None;
            return Err(CallError::Unreachable(ClusterError::Io {
                what: format!(
                    "node {} is cut off from node {} (a test partition)",
                    self.target, self.me
                ),
                source: std::io::ErrorKind::NotConnected.into(),
            }));
        }
        let envelope = Envelope {
            from: self.me,
            to: self.target,
            request,
        };
        let frame = seal(self.cluster, &envelope).map_err(CallError::Network)?;
        let exchange = async {
            if self.conn.is_none() {
                let socket = TcpStream::connect(&self.addr).await.map_err(|source| {
                    CallError::Unreachable(ClusterError::Io {
                        what: format!("connect to node {} at {}", self.target, self.addr),
                        source,
                    })
                })?;
                let _ = socket.set_nodelay(true);
                self.conn = Some(Framed::new(socket, FrameCodec::default()));
            }
            let conn = self.conn.as_mut().expect("connected above");
            conn.send(frame).await.map_err(CallError::Network)?;
            match conn.next().await {
                Some(Ok(reply)) => {
                    open::<Response>(self.cluster, &reply).map_err(CallError::Network)
                }
                Some(Err(e)) => Err(CallError::Network(e)),
                None => Err(CallError::Network(ClusterError::Io {
                    what: format!(
                        "node {} at {} closed the connection",
                        self.target, self.addr
                    ),
                    source: std::io::ErrorKind::UnexpectedEof.into(),
                })),
            }
        };
        let result = match tokio::time::timeout(ttl, exchange).await {
            Ok(result) => result,
            Err(_) => Err(CallError::Network(ClusterError::Io {
                what: format!(
                    "a {kind} request to node {} at {} had no reply in {ttl:?}",
                    self.target, self.addr
                ),
                source: std::io::ErrorKind::TimedOut.into(),
            })),
        };
        match result {
            Ok(Response::Refused(reason)) => {
                self.conn = None;
                Err(CallError::Unreachable(ClusterError::PeerRefused { reason }))
            }
            Ok(Response::Failed(reason)) => {
                Err(CallError::Network(ClusterError::PeerRefused { reason }))
            }
            Ok(reply) => Ok(reply),
            Err(e) => {
                self.conn = None;
                Err(e)
            }
        }
    }
}

fn wrong_reply(asked: &'static str, reply: &Response) -> CallError {
    CallError::Network(ClusterError::WrongReply {
        asked,
        answered: reply.kind(),
    })
}

impl RaftNetworkV2<KvRaft> for TcpPeer {
    type SnapshotData = SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KvRaft>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<KvRaft>, RPCError<KvRaft>> {
        match self.call(Request::Append(rpc), option.hard_ttl()).await {
            Ok(Response::Append(reply)) => Ok(reply),
            Ok(other) => Err(wrong_reply("append-entries", &other).into_rpc()),
            Err(e) => Err(e.into_rpc()),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<KvRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<KvRaft>, RPCError<KvRaft>> {
        match self.call(Request::Vote(rpc), option.hard_ttl()).await {
            Ok(Response::Vote(reply)) => Ok(reply),
            Ok(other) => Err(wrong_reply("vote", &other).into_rpc()),
            Err(e) => Err(e.into_rpc()),
        }
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<KvRaft>,
        option: RPCOption,
    ) -> Result<VoteResponse<KvRaft>, RPCError<KvRaft>> {
        match self.call(Request::PreVote(rpc), option.hard_ttl()).await {
            Ok(Response::Vote(reply)) => Ok(reply),
            Ok(other) => Err(wrong_reply("pre-vote", &other).into_rpc()),
            Err(e) => Err(e.into_rpc()),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<KvRaft>, StreamingError<KvRaft>> {
        let request = Request::Snapshot {
            vote,
            meta: snapshot.meta,
            data: snapshot.snapshot.into_inner(),
        };
        tokio::select! {
            reply = self.call(request, option.hard_ttl()) => match reply {
                Ok(Response::Snapshot(reply)) => Ok(reply),
                Ok(other) => Err(wrong_reply("snapshot", &other).into_streaming()),
                Err(e) => Err(e.into_streaming()),
            },
            closed = cancel => {
                // The exchange was cut at an unknown point.
                self.conn = None;
                Err(StreamingError::Closed(closed))
            }
        }
    }
}
