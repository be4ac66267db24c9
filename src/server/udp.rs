//! The UDP loop: one receive buffer reused for every datagram; cache hits answered on the
//! loop itself, each miss in its own task under the in-flight bound, replies sent from the
//! same socket to the source.

use std::sync::Arc;

use hickory_proto::op::ResponseCode;
use tokio::net::UdpSocket;

use super::{Shared, stopped};
use crate::metrics::DropReason;
use crate::query::FastPath;
use crate::reply;
use crate::wire::{self, Proto};

/// Serves one UDP socket until shutdown. Only an unrecoverable socket error ends it early.
pub async fn serve_udp(socket: Arc<UdpSocket>, shared: Shared) -> std::io::Result<()> {
    let mut buf = vec![0u8; wire::MAX_MESSAGE];
    let mut shutdown = shared.shutdown.clone();
    loop {
        let (len, peer) = tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok(received) => received,
                // Transient errors (e.g. ICMP-reported, ENOBUFS) must not stop the listener.
                Err(error) if is_transient(&error) => {
                    tracing::debug!(%error, "UDP receive error");
                    continue;
                }
                Err(error) => return Err(error),
            },
            () = stopped(&mut shutdown) => return Ok(()),
        };
        let datagram = buf.get(..len).unwrap_or_default();
        if !shared.allows(peer.ip()) {
            shared.metrics.dropped(DropReason::NotAllowed);
            if let Some(refused) = reply::from_header(datagram, ResponseCode::Refused) {
                let _ = socket.try_send_to(&refused, peer);
            }
            continue;
        }
        // A cache hit is answered right here: no task, no parse, no copy of the query.
        let key = match shared.resolver.answer_from_cache(datagram, Proto::Udp) {
            FastPath::Answered(reply) => {
                if let Err(error) = socket.send_to(&reply, peer).await {
                    tracing::debug!(%peer, %error, "UDP send failed");
                }
                continue;
            }
            FastPath::Miss(key) => key,
        };
        let Ok(permit) = Arc::clone(&shared.inflight).try_acquire_owned() else {
            tracing::debug!(%peer, "in-flight limit reached; datagram dropped");
            shared.metrics.dropped(DropReason::InflightLimit);
            continue;
        };
        let query = datagram.to_vec();
        let socket = Arc::clone(&socket);
        let resolver = Arc::clone(&shared.resolver);
        let counted = shared.metrics.inflight();
        tokio::spawn(async move {
            if let Some(reply) = resolver.handle_miss(&query, Proto::Udp, key).await
                && let Err(error) = socket.send_to(&reply, peer).await
            {
                tracing::debug!(%peer, %error, "UDP send failed");
            }
            drop((counted, permit));
        });
    }
}

fn is_transient(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        error.kind(),
        ConnectionRefused | ConnectionReset | Interrupted | WouldBlock | OutOfMemory
    ) || error.raw_os_error() == Some(105) // ENOBUFS
}
