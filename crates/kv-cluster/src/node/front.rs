//! Client connections: read, run the whole requests read (consecutive writes proposed
//! together, consecutive reads behind one read index: `pipeline`; anything else in turn),
//! send their replies in one write, repeat. Requests are framed and replies encoded by the
//! standalone server's own code, so both speak the protocol alike.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pmem_kv_server::protocol::{Framer, Next, Protocol, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::commands;
use super::pipeline::Run;
use super::session::Session;
use super::NodeShared;
use crate::error::ClusterError;

/// Bytes a read asks for at least.
const READ_CHUNK: usize = 16 << 10;

/// The address a listener is bound to, for the node's member record.
pub(crate) fn bound(listener: &TcpListener) -> Result<SocketAddr, ClusterError> {
    listener.local_addr().map_err(|source| ClusterError::Io {
        what: "the client listener's address".into(),
        source,
    })
}

/// Serve clients on `listener` until `stop` turns true.
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<NodeShared>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut socket, _)) => {
                    if shared.clients.load(Ordering::Relaxed) >= shared.limits.max_connections {
                        let _ = socket.write_all(b"-ERR max number of clients reached\r\n").await;
                        continue;
                    }
                    shared.clients.fetch_add(1, Ordering::Relaxed);
                    shared.connections.fetch_add(1, Ordering::Relaxed);
                    let _ = socket.set_nodelay(true);
                    let shared = shared.clone();
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        connection(socket, &shared, stop).await;
                        shared.clients.fetch_sub(1, Ordering::Relaxed);
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            _ = stop.changed() => return,
        }
    }
}

async fn connection(mut socket: TcpStream, shared: &NodeShared, mut stop: watch::Receiver<bool>) {
    let mut session = Session {
        protocol: Protocol::Resp2,
        closing: false,
    };
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    let mut framer = Framer::default();
    let mut run = Run::default();
    let mut replies = Vec::new();
    loop {
        let mut close = false;
        loop {
            match framer.next(&mut input, &shared.limits) {
                Next::Request(args) => {
                    if let Some(queued) = super::pipeline::queueable(&args) {
                        run.push(shared, queued, &mut replies).await;
                        continue;
                    }
                    // What came before is encoded before the command runs: it may change
                    // the protocol.
                    run.finish(shared, &mut replies).await;
                    for reply in replies.drain(..) {
                        reply.encode(session.protocol, &mut output);
                    }
                    let reply = commands::execute(shared, &mut session, &args).await;
                    reply.encode(session.protocol, &mut output);
                    if session.closing {
                        close = true;
                        break;
                    }
                }
                Next::Incomplete => break,
                Next::Fatal(message) => {
                    run.finish(shared, &mut replies).await;
                    let mut text = b"ERR Protocol error: ".to_vec();
                    text.extend_from_slice(&message);
                    replies.push(Reply::error(text));
                    close = true;
                    break;
                }
            }
        }
        run.finish(shared, &mut replies).await;
        for reply in replies.drain(..) {
            reply.encode(session.protocol, &mut output);
        }
        if !output.is_empty() {
            if socket.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
        if close {
            let _ = socket.shutdown().await;
            return;
        }
        input.reserve(READ_CHUNK);
        tokio::select! {
            read = socket.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = stop.changed() => {
                let _ = socket.shutdown().await;
                return;
            }
        }
    }
}
