//! The TCP loop: connections capped, each connection read as a stream of 2-byte-length frames
//! whose queries are answered concurrently and written back as they complete (out of order,
//! RFC 7766 §6.2.1.1). A connection that sends nothing for `IDLE_TIMEOUT`, or trickles a frame
//! slower than that, is closed: a slowloris client holds a slot for seconds, not forever.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::time::timeout;

use super::{Shared, stopped};
use crate::metrics::{self, DropReason};
use crate::query::Proto;
use crate::reply;
use crate::wire;

/// Open client connections at once; further connections are closed as soon as accepted.
pub const MAX_CONNECTIONS: usize = 256;

/// Queries of one connection being answered at once; the connection is not read further
/// until one finishes (TCP flow control then slows the client).
pub const MAX_PIPELINED: usize = 32;

/// How long a connection may be silent, or take to deliver one frame.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves one listener until shutdown.
pub async fn serve_tcp(listener: TcpListener, shared: Shared) -> std::io::Result<()> {
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut shutdown = shared.shutdown.clone();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    tracing::warn!(%error, "TCP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stopped(&mut shutdown) => return Ok(()),
        };
        let Ok(slot) = Arc::clone(&connections).try_acquire_owned() else {
            tracing::debug!(%peer, "TCP connection limit reached; connection closed");
            metrics::dropped(DropReason::TcpConnectionLimit);
            continue;
        };
        let shared = shared.clone();
        tokio::spawn(async move {
            connection(stream, peer, shared).await;
            drop(slot);
        });
    }
}

async fn connection(stream: TcpStream, peer: SocketAddr, shared: Shared) {
    let _ = stream.set_nodelay(true);
    let allowed = shared.allows(peer.ip());
    let (mut reader, mut writer) = stream.into_split();
    let (replies, mut outgoing) = mpsc::channel::<Vec<u8>>(MAX_PIPELINED);
    let write_loop = tokio::spawn(async move {
        while let Some(reply) = outgoing.recv().await {
            let Some(framed) = wire::tcp_framed(&reply) else {
                continue;
            };
            if writer.write_all(&framed).await.is_err() {
                break;
            }
        }
        let _ = writer.shutdown().await;
    });
    let pipelined = Arc::new(Semaphore::new(MAX_PIPELINED));
    let mut shutdown = shared.shutdown.clone();
    loop {
        let frame = tokio::select! {
            frame = read_frame(&mut reader) => frame,
            () = stopped(&mut shutdown) => None,
        };
        let Some(query) = frame else { break };
        if !allowed {
            metrics::dropped(DropReason::NotAllowed);
            if let Some(refused) = reply::from_header(&query, ResponseCode::Refused) {
                let _ = replies.send(refused).await;
            }
            continue;
        }
        let Ok(turn) = Arc::clone(&pipelined).acquire_owned().await else {
            break;
        };
        let Ok(permit) = Arc::clone(&shared.inflight).acquire_owned().await else {
            break;
        };
        let resolver = Arc::clone(&shared.resolver);
        let replies = replies.clone();
        tokio::spawn(async move {
            let _counted = metrics::inflight();
            if let Some(reply) = resolver.handle(&query, Proto::Tcp).await {
                let _ = replies.send(reply).await;
            }
            drop((turn, permit));
        });
    }
    // The writer ends once every pending query has sent its reply and dropped its sender.
    drop(replies);
    let _ = write_loop.await;
}

/// One frame, or `None` at EOF, on error, or when the client is too slow.
async fn read_frame(reader: &mut tokio::net::tcp::OwnedReadHalf) -> Option<Vec<u8>> {
    let len = timeout(IDLE_TIMEOUT, reader.read_u16()).await.ok()?.ok()?;
    let mut frame = vec![0u8; usize::from(len)];
    timeout(IDLE_TIMEOUT, reader.read_exact(&mut frame))
        .await
        .ok()?
        .ok()?;
    Some(frame)
}
