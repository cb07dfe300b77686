//! One client connection: read, run every whole request in the buffer, send the replies in
//! one write, repeat.

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::commands;
use crate::framing::{Framer, Next};
use crate::pipeline::Pipeline;
use crate::reply::Reply;
use crate::session::Session;
use crate::shared::Shared;

/// What the connection does after replying.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    Continue,
    Close,
}

/// Bytes a read asks for at least.
const READ_CHUNK: usize = 16 << 10;

/// Serve one client: `session` was made when the connection was accepted, so client ids
/// follow the order of accepts, as Redis's do.
pub(crate) async fn serve(
    mut socket: TcpStream,
    mut session: Session,
    shared: &Shared,
    mut closing: watch::Receiver<bool>,
) {
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut output = BytesMut::with_capacity(READ_CHUNK);
    let mut framer = Framer::default();
    loop {
        let after = run_buffered(shared, &mut session, &mut framer, &mut input, &mut output);
        if !output.is_empty() {
            if socket.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
        if after == After::Close {
            close_lingering(&mut socket).await;
            return;
        }
        if *closing.borrow() {
            let _ = socket.shutdown().await;
            return;
        }
        input.reserve(READ_CHUNK);
        tokio::select! {
            read = socket.read_buf(&mut input) => match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            },
            _ = closing.changed() => {
                let _ = socket.shutdown().await;
                return;
            }
        }
    }
}

/// How long, and how many bytes, a connection closed by the server (QUIT, a request that
/// cannot be read past) still reads and drops what the client sends.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 << 20;

/// Send FIN after the last reply, then read and drop what the client is still sending for a
/// moment: closing a socket with unread input makes the kernel send RST, which can destroy
/// the error reply before the client reads it (a client still writing a rejected pipeline).
async fn close_lingering(socket: &mut TcpStream) {
    if socket.shutdown().await.is_err() {
        return;
    }
    let mut scratch = vec![0u8; READ_CHUNK];
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

/// Run every whole request in `input`, their replies appended to `output`, until one closes
/// the connection (QUIT, a request that cannot be read past) or the rest is incomplete.
pub(crate) fn run_buffered(
    shared: &Shared,
    session: &mut Session,
    framer: &mut Framer,
    input: &mut BytesMut,
    output: &mut BytesMut,
) -> After {
    // Plain writes are deferred and committed together (see `pipeline`), at the latest
    // before the replies go out.
    let mut pipeline = Pipeline::new(shared);
    loop {
        match framer.next(input, &shared.limits) {
            Next::Request(args) => {
                commands::execute(shared, session, args, &mut pipeline, output);
                if session.closing {
                    return After::Close;
                }
            }
            Next::Incomplete => {
                pipeline.commit(session.protocol, output);
                return After::Continue;
            }
            Next::Fatal(message) => {
                pipeline.commit(session.protocol, output);
                let mut text = b"ERR Protocol error: ".to_vec();
                text.extend_from_slice(&message);
                Reply::error(text).encode(session.protocol, output);
                return After::Close;
            }
        }
    }
}
