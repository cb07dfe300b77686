//! A node's side of the RPCs its peers send: a listener, and per connection a loop that
//! reads a frame, checks it (version, cluster, addressee), hands the request to Raft and
//! writes the reply. A frame that fails a check is answered with [`Response::Refused`]
//! saying why, the connection is closed, and nothing it carried reaches Raft.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::codec::Framed;

use super::frame::{open, seal, Envelope, FrameCodec, Request, Response};
use super::partition::Cut;
use crate::error::ClusterError;
use crate::state_machine::Snapshot;
use crate::types::NodeId;
use crate::Raft;

/// Who serves: the node's Raft, its cluster id and node id.
#[derive(Clone)]
pub struct RpcService {
    /// The node's Raft.
    pub raft: Raft,
    /// The cluster's id (every frame must carry it).
    pub cluster: u128,
    /// This node's id (every request must be for it).
    pub me: NodeId,
    /// The peers whose requests are dropped (a test partition).
    pub cut: Arc<Cut>,
}

/// Serve peers' connections on `listener` until `stop` turns true.
pub async fn serve(listener: TcpListener, service: RpcService, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let service = service.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        if let Err(e) = serve_peer(socket, &service, stop).await {
                            eprintln!(
                                "pmem-kv-cluster node {}: the Raft connection from {peer} is closed: {e}",
                                service.me
                            );
                        }
                    });
                }
                // Out of descriptors and the like: the listener stays; back off a little.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            _ = stop.changed() => return,
        }
    }
}

/// Serve one connection until the peer closes it (`Ok`) or a frame is refused (`Err`).
async fn serve_peer(
    socket: TcpStream,
    service: &RpcService,
    mut stop: watch::Receiver<bool>,
) -> Result<(), ClusterError> {
    let _ = socket.set_nodelay(true);
    let mut conn = Framed::new(socket, FrameCodec::default());
    loop {
        let frame = tokio::select! {
            frame = conn.next() => frame,
            _ = stop.changed() => return Ok(()),
        };
        let checked = match frame {
            None => return Ok(()),
            Some(frame) => frame.and_then(|frame| {
                let envelope: Envelope = open(service.cluster, &frame)?;
                if envelope.to != service.me {
                    return Err(ClusterError::WrongNode {
                        to: envelope.to,
                        me: service.me,
                    });
                }
                Ok(envelope)
            }),
        };
        let envelope = match checked {
            Ok(envelope) => envelope,
            Err(e) => {
                refuse(conn, service.cluster, &e).await;
                return Err(e);
            }
        };
        if service.cut.cuts(envelope.from) {
            // As a lost link: no reply, the connection gone.
            return Ok(());
        }
        let reply = answer(&service.raft, envelope.request).await;
        conn.send(seal(service.cluster, &reply)?).await?;
    }
}

/// Raft's answer to `request`.
async fn answer(raft: &Raft, request: Request) -> Response {
    match request {
        Request::Append(rpc) => raft
            .append_entries(rpc)
            .await
            .map_or_else(|e| Response::Failed(e.to_string()), Response::Append),
        Request::Vote(rpc) => raft
            .vote(rpc)
            .await
            .map_or_else(|e| Response::Failed(e.to_string()), Response::Vote),
        Request::PreVote(rpc) => raft
            .pre_vote(rpc)
            .await
            .map_or_else(|e| Response::Failed(e.to_string()), Response::Vote),
        Request::Snapshot { vote, meta, data } => {
            let snapshot = Snapshot {
                meta,
                snapshot: std::io::Cursor::new(data),
            };
            raft.install_full_snapshot(vote, snapshot)
                .await
                .map_or_else(|e| Response::Failed(e.to_string()), Response::Snapshot)
        }
    }
}

/// How long, and how many bytes, a refused connection still reads and drops after its
/// reply, so the kernel does not reset it (destroying the reply) over unread input.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 1 << 20;

/// Tell the peer why it is refused, then close.
async fn refuse(mut conn: Framed<TcpStream, FrameCodec>, cluster: u128, why: &ClusterError) {
    if let Ok(frame) = seal(cluster, &Response::Refused(why.to_string())) {
        let _ = tokio::time::timeout(LINGER, conn.send(frame)).await;
    }
    let mut socket = conn.into_inner();
    if socket.shutdown().await.is_err() {
        return;
    }
    let mut scratch = vec![0u8; 16 << 10];
    let mut dropped = 0;
    let _ = tokio::time::timeout(LINGER, async {
        while dropped < LINGER_BYTES {
            match socket.read(&mut scratch).await {
                Ok(0) | Err(_) => break,
                Ok(n) => dropped += n,
            }
        }
    })
    .await;
}

/// The address a listener is bound to, for the node's member record.
pub fn bound(listener: &TcpListener) -> Result<SocketAddr, ClusterError> {
    listener.local_addr().map_err(|source| ClusterError::Io {
        what: "the Raft listener's address".into(),
        source,
    })
}
