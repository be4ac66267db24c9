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
//! Every task here is one of the instance's tree (`crate::background`): a listener's
//! connections run under the listener's owner, a connection's queries under the connection's
//! (its task holds it, so they end when it does), and a connection's reading and writing are
//! two futures of its own task. At shutdown the listener stops accepting and returns, and a
//! connection stops reading, finishes the queries it has, writes their replies and closes;
//! `run` waits for them, at most its grace time, before it stops the root.
//!
//! It owns the framing and these bounds; what an allowed query gets back is the
//! [`Resolver`](crate::query::Resolver)'s.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hickory_proto::op::ResponseCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::time::timeout;
use tokio_util::codec::{FramedRead, FramedWrite};

use super::Shared;
use crate::background::Tasks;
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

/// Serves one listener until shutdown, each connection on a task of `connections` (the
/// listener's node in the instance's tree) with an owner of its own. Only a listening socket
/// that can never accept again ends it early, with that error.
pub(crate) async fn serve_tcp(
    listener: TcpListener,
    shared: Shared,
    connections: Tasks,
) -> std::io::Result<()> {
    accept(listener, shared, connections, connection).await
}

/// The accept loop of a stream listener (TCP, and DNS over TLS around it): at most
/// [`MAX_CONNECTIONS`] connections, each served by `serve` on a task of `connections`, until
/// shutdown. A connection's task holds the owner of its own work (`serve` is given the node
/// where it starts its queries): that work ends with the connection, and every connection ends
/// with the listener's owner. At shutdown the loop returns at once; the connections finish
/// what they have under that owner, which `run` waits for.
pub(super) async fn accept<Serve, Served>(
    listener: TcpListener,
    shared: Shared,
    connections: Tasks,
    serve: Serve,
) -> std::io::Result<()>
where
    Serve: Fn(TcpStream, SocketAddr, Shared, Tasks) -> Served,
    Served: Future<Output = ()> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
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
            () = shutdown.cancelled() => return Ok(()),
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, "TCP connection limit reached; connection closed");
            shared.metrics.dropped(DropReason::TcpConnectionLimit);
            continue;
        };
        let owner = connections.child();
        let served = serve(stream, peer, shared.clone(), owner.tasks());
        connections.spawn(async move {
            // Held while the connection is served, dropped however it ends: its queries end
            // with it, and its slot is given back.
            let _held = (owner, slot);
            served.await;
        });
    }
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

async fn connection(stream: TcpStream, peer: SocketAddr, shared: Shared, queries: Tasks) {
    let _ = stream.set_nodelay(true);
    let (reader, writer) = stream.into_split();
    let client = Client {
        peer,
        proto: Proto::Tcp,
        access: Access::AllowFrom,
    };
    serve_frames(reader, writer, client, shared, queries).await;
}

/// Who is asking over a connection, and how.
#[derive(Debug, Clone, Copy)]
pub(super) struct Client {
    pub(super) peer: SocketAddr,
    pub(super) proto: Proto,
    pub(super) access: Access,
}

/// Answers the length-prefixed queries read from `reader` on `writer` (see the module's
/// documentation for the bounds), each on a task of `queries` (the connection's node: they end
/// with it). Reading and writing are two futures of the connection's own task. The writer ends
/// first only when it gives up (a client that does not read, a broken connection): reading
/// stops with it, and the queries end with the connection. Otherwise reading ends (end of
/// stream, a silent client, shutdown) and the writer writes the replies of the queries still
/// being answered, then closes.
pub(super) async fn serve_frames<R, W>(
    reader: R,
    writer: W,
    client: Client,
    shared: Shared,
    queries: Tasks,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (replies, outgoing) = mpsc::channel::<Vec<u8>>(MAX_PIPELINED);
    let reading = read_queries(reader, replies, client, &shared, &queries);
    let writing = write_replies(writer, outgoing);
    tokio::pin!(reading, writing);
    let ended = tokio::select! {
        ended = &mut writing => ended,
        () = &mut reading => writing.await,
    };
    if ended == WriteEnd::Stalled {
        shared.metrics.dropped(DropReason::TcpStalled);
    }
}

/// Reads queries until the end of the stream, a silent client or shutdown, and starts each
/// on a task of `queries`, which queues its reply on `replies` (returning drops this
/// sender: the writer ends once the queries' own are gone too).
async fn read_queries<R: AsyncRead + Unpin>(
    reader: R,
    replies: mpsc::Sender<Vec<u8>>,
    client: Client,
    shared: &Shared,
    queries: &Tasks,
) {
    let mut frames = FramedRead::new(reader, wire::tcp_codec(MAX_QUERY_FRAME));
    let pipelined = Arc::new(Semaphore::new(MAX_PIPELINED));
    let answered = Arc::new(Notify::new());
    loop {
        // Idle means silent with nothing being answered (RFC 7766 §6.2.3); a frame must also
        // arrive whole within the timeout, so a trickling client cannot hold the slot.
        let idle_limit = if pipelined.available_permits() == MAX_PIPELINED {
            IDLE_TIMEOUT
        } else {
            IDLE_TIMEOUT.max(shared.resolver.timeout())
        };
        let frame = tokio::select! {
            frame = timeout(idle_limit, frames.next()) => match frame {
                Ok(Some(Ok(frame))) => frame,
                // EOF, a read error, a frame over the cap, or a silent client.
                _ => return,
            },
            // A query has been answered: the idle limit is counted again from now.
            () = answered.notified() => continue,
            () = shared.shutdown.cancelled() => return,
        };
        if client.access == Access::AllowFrom && !shared.resolver.allows(client.peer.ip()) {
            shared.metrics.dropped(DropReason::NotAllowed);
            if let Some(refused) = reply::from_header(&frame, ResponseCode::Refused)
                && replies.send(refused).await.is_err()
            {
                return;
            }
            continue;
        }
        let Ok(turn) = Arc::clone(&pipelined).acquire_owned().await else {
            return;
        };
        let Ok(tcp_share) = Arc::clone(&shared.tcp_inflight).acquire_owned().await else {
            return;
        };
        let Ok(permit) = Arc::clone(&shared.inflight).acquire_owned().await else {
            return;
        };
        let (resolver, replies) = (Arc::clone(&shared.resolver), replies.clone());
        let (counted, answered) = (shared.metrics.inflight(), Arc::clone(&answered));
        queries.spawn(async move {
            let reply = resolver.handle(frame.freeze(), client.proto).await;
            drop((counted, permit, tcp_share));
            if let Some(reply) = reply {
                // Waits while the writer is behind; the connection's turn is held until the
                // reply is queued, which is what bounds a stalled connection.
                let _ = replies.send(reply).await;
            }
            drop(turn);
            answered.notify_one();
        });
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
