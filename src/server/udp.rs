//! The UDP loop: datagrams received in batches (one wake-up and one system call serve every
//! datagram waiting), cache hits answered on the loop itself and sent back in groups of
//! [`SEND_GROUP`](batch::SEND_GROUP) (so that the first reply of a backlog does not wait for
//! the last), each miss in its own task under the in-flight bound, replies sent from the same
//! socket to the source.
//!
//! The socket is registered for readability only. Replies are sent without waiting for
//! writability — a send buffer that is full drops the reply, as the network would, and the
//! client asks again — so no write-readiness event ever wakes the loop. After a receive that
//! did not fill the batch the queue is known empty, and the loop goes back to waiting without
//! one more receive that could only say EAGAIN. At a pod's real rate a query costs a wake-up,
//! one receive and one send.
//!
//! It owns the loop and when a miss gets a task; whether a query is a hit, and its answer, are
//! the [`Resolver`](crate::query::Resolver)'s, and the system calls the `batch` module's.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::sync::Arc;

use bytes::Bytes;
use hickory_proto::op::ResponseCode;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use super::Shared;
use super::batch::{self, BATCH, Datagram, Inbox, Outbox};
use crate::background::Tasks;
use crate::metrics::DropReason;
use crate::query::FastPath;
use crate::reply;
use crate::snapshot::Snapshot;
use crate::wire::Proto;

/// Serves one UDP socket (non-blocking) until shutdown, each miss on a task of `misses` (the
/// listener's node in the instance's tree). Only an unrecoverable socket error ends it early.
pub(crate) async fn serve_udp(
    socket: UdpSocket,
    shared: Shared,
    misses: Tasks,
) -> std::io::Result<()> {
    // Deprecated because a borrowed descriptor could be closed under the reactor; here the
    // AsyncFd owns the socket, so its descriptor stays open and the same for its whole life
    // (the safe case the deprecation note spells out). Readable interest only: see above.
    #[allow(deprecated)]
    let socket = Arc::new(AsyncFd::with_interest(socket, Interest::READABLE)?);
    let mut inbox = Inbox::default();
    let mut outbox = Outbox::default();
    let shutdown = shared.shutdown.clone();
    loop {
        let mut ready = tokio::select! {
            ready = socket.readable() => ready?,
            () = shutdown.cancelled() => return Ok(()),
        };
        let received = match inbox.receive(socket.get_ref()) {
            Ok(received) => received,
            Err(error) if error.kind() == ErrorKind::WouldBlock => {
                ready.clear_ready();
                continue;
            }
            // Transient errors (e.g. ICMP-reported, ENOBUFS) must not stop the listener.
            Err(error) if is_transient(&error) => {
                tracing::debug!(%error, "UDP receive error");
                continue;
            }
            Err(error) => return Err(error),
        };
        if received < BATCH {
            // The queue is empty: wait for the next datagram's edge instead of asking again.
            ready.clear_ready();
        }
        drop(ready);
        // One configuration for the whole batch: the datagrams arrived together.
        let snapshot = shared.resolver.current();
        for datagram in inbox.datagrams() {
            let buffer = outbox.buffer();
            if let Some(reply) = serve(&socket, &shared, &misses, &snapshot, datagram, buffer) {
                outbox.push(socket.get_ref(), reply, datagram.peer);
            }
        }
        outbox.flush(socket.get_ref());
    }
}

/// One datagram: the reply to send now (a refusal, a cache hit — written into `buffer` —,
/// FORMERR for a datagram too long to read whole), or `None` when there is none now (a miss,
/// answered by its own task, on `misses`).
fn serve(
    socket: &Arc<AsyncFd<UdpSocket>>,
    shared: &Shared,
    misses: &Tasks,
    snapshot: &Arc<Snapshot>,
    datagram: Datagram<'_>,
    buffer: Vec<u8>,
) -> Option<Vec<u8>> {
    let Datagram {
        bytes,
        peer,
        truncated,
    } = datagram;
    if !snapshot.allows(peer.ip()) {
        shared.metrics.dropped(DropReason::NotAllowed);
        return reply::from_header(bytes, ResponseCode::Refused);
    }
    if truncated {
        shared.metrics.dropped(DropReason::Malformed);
        return reply::from_header(bytes, ResponseCode::FormErr);
    }
    // A cache hit is answered right here: no task, no parse, no copy of the query.
    let routed = match shared
        .resolver
        .answer_from_cache(snapshot, bytes, Proto::Udp, buffer)
    {
        FastPath::Answered(reply) => return Some(reply),
        FastPath::Miss(routed) => routed,
    };
    let Ok(permit) = Arc::clone(&shared.inflight).try_acquire_owned() else {
        tracing::debug!(%peer, "in-flight limit reached; datagram dropped");
        shared.metrics.dropped(DropReason::InflightLimit);
        return None;
    };
    let query = Bytes::copy_from_slice(bytes);
    let socket = Arc::clone(socket);
    let resolver = Arc::clone(&shared.resolver);
    let counted = shared.metrics.inflight();
    misses.spawn(async move {
        if let Some(reply) = resolver.handle_miss(query, Proto::Udp, routed).await {
            batch::send_one(socket.get_ref(), &reply, peer);
        }
        drop((counted, permit));
    });
    None
}

fn is_transient(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionReset | Interrupted | OutOfMemory
    ) || error.raw_os_error() == Some(105) // ENOBUFS
}
