//! The TCP loop: connections capped, each connection read as a stream of length-prefixed
//! frames whose queries are answered concurrently and written back as they complete (out of
//! order, RFC 7766 §6.2.1.1).
//!
//! Bounds, and what happens at each: a frame larger than [`MAX_QUERY_FRAME`] closes the
//! connection; a connection silent for [`IDLE_TIMEOUT`], or trickling a frame slower than
//! that, is closed (a slowloris client holds a slot for seconds, not forever); at most
//! [`MAX_PIPELINED`] queries of one connection are answered or waiting to be written at once
//! (the connection is not read further until one is written, and TCP flow control slows the
//! client); a client that stops reading its replies — a write that makes no progress for
//! [`WRITE_TIMEOUT`] — loses its connection (RFC 7766 §6.2.3). A query holds one of the
//! process's in-flight slots only while it is being answered, never while its reply waits to
//! be written, so stalled clients cannot starve anyone else; and TCP queries together hold at
//! most half of those slots (they wait for one where a UDP query would be dropped, so without
//! the share a few pipelining connections could take every slot UDP clients need).
//!
//! DNS over TLS (`dot`) uses the same accept loop and the same framing, inside a TLS session.
//!
//! At shutdown a connection stops reading, finishes the queries it has, writes their replies
//! and closes; the listener returns once its connections have.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hickory_proto::op::ResponseCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::timeout;
use tokio_util::codec::{FramedRead, FramedWrite};

use super::Shared;
use crate::metrics::DropReason;
use crate::reply;
use crate::wire::{self, Proto};

/// Open client connections at once; further connections are closed as soon as accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// Queries of one connection being answered or waiting to be written at once.
pub(super) const MAX_PIPELINED: usize = 32;

/// How long a connection may be silent, or take to deliver one frame.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long writing one reply may make no progress before the client counts as stalled.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest query frame accepted. A query is a header, one question and an OPT record:
/// a few hundred bytes; this leaves room for large EDNS options and still bounds what a
/// client can make meshdns buffer.
pub const MAX_QUERY_FRAME: usize = 16 * 1024;

/// Serves one listener until shutdown, then waits for its connections to finish. Only a
/// listening socket that can never accept again ends it early, with that error.
pub(crate) async fn serve_tcp(listener: TcpListener, shared: Shared) -> std::io::Result<()> {
    accept(listener, shared, connection).await
}

/// The accept loop of a stream listener (TCP, and DNS over TLS around it): at most
/// [`MAX_CONNECTIONS`] connections, each served by `serve` on a task of the loop's own, until
/// shutdown; then waits for them to finish.
pub(super) async fn accept<Serve, Served>(
    listener: TcpListener,
    shared: Shared,
    serve: Serve,
) -> std::io::Result<()>
where
    Serve: Fn(TcpStream, SocketAddr, Shared) -> Served,
    Served: Future<Output = ()> + Send + 'static,
{
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut open: JoinSet<()> = JoinSet::new();
    let shutdown = shared.shutdown.clone();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) if is_broken_listener(&error) => return Err(error),
                Err(error) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(%error, "TCP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = open.join_next() => continue,
            () = shutdown.cancelled() => break,
        };
        let Ok(slot) = Arc::clone(&connections).try_acquire_owned() else {
            tracing::debug!(%peer, "TCP connection limit reached; connection closed");
            shared.metrics.dropped(DropReason::TcpConnectionLimit);
            continue;
        };
        let served = serve(stream, peer, shared.clone());
        open.spawn(async move {
            served.await;
            drop(slot);
        });
    }
    while open.join_next().await.is_some() {}
    Ok(())
}

/// Accept errors that no waiting cures: the socket is no (longer a) listening socket. Every
/// other error passes — descriptors or buffers short (EMFILE, ENFILE, ENOBUFS, ENOMEM), a
/// connection aborted before it was taken, the network errors accept(2) passes on — so only
/// these end the listener, and with it the process.
fn is_broken_listener(error: &std::io::Error) -> bool {
    const EBADF: i32 = 9;
    const EINVAL: i32 = 22;
    const ENOTSOCK: i32 = 88;
    matches!(error.raw_os_error(), Some(EBADF | EINVAL | ENOTSOCK))
}

/// Who may ask over a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// A client address within `MESHDNS_ALLOW_FROM`, asked per query (a reload that narrows
    /// it reaches the connections already open).
    AllowFrom,
    /// A client certificate, which the TLS handshake required and verified.
    Certificate,
}

async fn connection(stream: TcpStream, peer: SocketAddr, shared: Shared) {
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    serve_frames(reader, writer, peer, shared, Proto::Tcp, Access::AllowFrom).await;
}

/// Answers the length-prefixed queries read from `reader` on `writer` (see the module's
/// documentation for the bounds), as `proto`, to clients admitted by `access`.
pub(super) async fn serve_frames<R, W>(
    reader: R,
    writer: W,
    peer: SocketAddr,
    shared: Shared,
    proto: Proto,
    access: Access,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut frames = FramedRead::new(reader, wire::tcp_codec(MAX_QUERY_FRAME));
    let (replies, outgoing) = mpsc::channel::<Vec<u8>>(MAX_PIPELINED);
    let mut writing = tokio::spawn(write_replies(writer, outgoing));
    let pipelined = Arc::new(Semaphore::new(MAX_PIPELINED));
    let shutdown = shared.shutdown.clone();
    let mut answering: JoinSet<()> = JoinSet::new();
    loop {
        // Finished queries are reaped here, before another is read. The `join_next` branch
        // below alone does not keep up: once the task's cooperative budget is spent it stays
        // pending while buffered frames keep coming, and every answered query's task cell
        // (~2 KB) stayed on the heap until the connection closed — 1 GiB for 300 connections
        // of 2,000 pipelined queries. `try_join_next` is not budgeted.
        while answering.try_join_next().is_some() {}
        // Idle means silent with nothing being answered (RFC 7766 §6.2.3); a frame must also
        // arrive whole within the timeout, so a trickling client cannot hold the slot.
        let idle_limit = if answering.is_empty() {
            IDLE_TIMEOUT
        } else {
            IDLE_TIMEOUT.max(shared.resolver.timeout())
        };
        let frame = tokio::select! {
            frame = timeout(idle_limit, frames.next()) => match frame {
                Ok(Some(Ok(frame))) => frame,
                // EOF, a read error, a frame over the cap, or a silent client.
                _ => break,
            },
            Some(_) = answering.join_next() => continue,
            // The writer gave up (a client that does not read, or a broken connection): stop
            // reading too; dropping `answering` stops the queries still being answered.
            ended = &mut writing => {
                if matches!(ended, Ok(WriteEnd::Stalled)) {
                    shared.metrics.dropped(DropReason::TcpStalled);
                }
                return;
            }
            () = shutdown.cancelled() => break,
        };
        if access == Access::AllowFrom && !shared.resolver.allows(peer.ip()) {
            shared.metrics.dropped(DropReason::NotAllowed);
            if let Some(refused) = reply::from_header(&frame, ResponseCode::Refused)
                && replies.send(refused).await.is_err()
            {
                break;
            }
            continue;
        }
        let Ok(turn) = Arc::clone(&pipelined).acquire_owned().await else {
            break;
        };
        let Ok(tcp_share) = Arc::clone(&shared.tcp_inflight).acquire_owned().await else {
            break;
        };
        let Ok(permit) = Arc::clone(&shared.inflight).acquire_owned().await else {
            break;
        };
        let (resolver, replies) = (Arc::clone(&shared.resolver), replies.clone());
        let counted = shared.metrics.inflight();
        answering.spawn(async move {
            let reply = resolver.handle(frame.freeze(), proto).await;
            drop((counted, permit, tcp_share));
            if let Some(reply) = reply {
                // Waits while the writer is behind; the connection's turn is held until the
                // reply is queued, which is what bounds a stalled connection.
                let _ = replies.send(reply).await;
            }
            drop(turn);
        });
    }
    // Finish the queries read so far, then let the writer drain and close.
    while answering.join_next().await.is_some() {}
    drop(replies);
    if matches!(writing.await, Ok(WriteEnd::Stalled)) {
        shared.metrics.dropped(DropReason::TcpStalled);
    }
}

/// How the writing half of a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteEnd {
    /// Every reply written, the connection closed.
    Done,
    /// A write made no progress for [`WRITE_TIMEOUT`]: the client does not read.
    Stalled,
    /// The connection broke (the client went away).
    Broken,
}

/// Writes replies as they come until every sender is gone.
async fn write_replies<W: AsyncWrite + Unpin>(
    writer: W,
    mut outgoing: mpsc::Receiver<Vec<u8>>,
) -> WriteEnd {
    let mut frames = FramedWrite::new(writer, wire::tcp_codec(wire::MAX_MESSAGE));
    while let Some(reply) = outgoing.recv().await {
        match timeout(WRITE_TIMEOUT, frames.send(Bytes::from(reply))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return WriteEnd::Broken,
            Err(_) => return WriteEnd::Stalled,
        }
    }
    let _ = SinkExt::<Bytes>::close(&mut frames).await;
    WriteEnd::Done
}
