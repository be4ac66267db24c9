//! The DNS-over-TLS listener (RFC 7858) for the peer clusters: TCP's accept loop, framing and
//! limits (connection cap, idle timeout, pipelining, stalled readers) inside a TLS session,
//! answered through the same routing as every other listener.
//!
//! Each connection's handshake uses the certificate in force when it was accepted
//! ([`ServerTls::config`]): a renewal reaches the next connections, and the ones open keep
//! theirs. A handshake must finish within the idle timeout; one that fails (no client
//! certificate where one is required, a certificate the client CA did not sign, a client that
//! does not speak TLS) closes the connection and counts as `tls_handshake` in
//! `meshdns_dropped_total`.
//!
//! Who may ask: with a client CA the certificate the handshake verified is the access control,
//! and `MESHDNS_ALLOW_FROM` is not asked (the peers' addresses are outside the cluster's
//! networks, and rewritten by load balancers); without one, `MESHDNS_ALLOW_FROM` applies per
//! query, as on the TCP listener.
//!
//! It owns the handshake only: the connection after it is the `tcp` module's, and the
//! certificate's renewal is `certificates::server`'s.

use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use tokio_rustls::TlsAcceptor;

use super::Shared;
use super::tcp::{Access, Client, IDLE_TIMEOUT, accept, serve_frames};
use crate::background::Tasks;
use crate::certificates::server::ServerTls;
use crate::metrics::DropReason;
use crate::wire::Proto;

/// Serves DNS over TLS on one listener until shutdown, each connection on a task of
/// `connections` (the listener's node in the instance's tree), as
/// [`serve_tcp`](super::serve_tcp) does; only a listening socket that can never accept again
/// ends it early.
pub(crate) async fn serve_dot(
    listener: TcpListener,
    shared: Shared,
    tls: Arc<ServerTls>,
    connections: Tasks,
) -> std::io::Result<()> {
    let access = if tls.files().client_ca.is_some() {
        Access::Certificate
    } else {
        Access::AllowFrom
    };
    accept(
        listener,
        shared,
        connections,
        move |stream, peer, shared, queries| {
            let client = Client {
                peer,
                proto: Proto::Tls,
                access,
            };
            connection(stream, client, shared, Arc::clone(&tls), queries)
        },
    )
    .await
}

async fn connection(
    stream: TcpStream,
    client: Client,
    shared: Shared,
    tls: Arc<ServerTls>,
    queries: Tasks,
) {
    let peer = client.peer;
    let _ = stream.set_nodelay(true);
    let handshake = TlsAcceptor::from(tls.config()).accept(stream);
    let shutdown = shared.shutdown.clone();
    let session = tokio::select! {
        session = timeout(IDLE_TIMEOUT, handshake) => session,
        () = shutdown.cancelled() => return,
    };
    let session = match session {
        Ok(Ok(session)) => session,
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "DNS over TLS handshake failed; connection closed");
            shared.metrics.dropped(DropReason::TlsHandshake);
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "DNS over TLS handshake not finished in time; connection closed");
            shared.metrics.dropped(DropReason::TlsHandshake);
            return;
        }
    };
    let (reader, writer) = tokio::io::split(session);
    serve_frames(reader, writer, client, shared, queries).await;
}
