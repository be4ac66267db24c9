//! DNS over TLS (RFC 7858) to one peer endpoint, for clusters configured with `transport=tls`.
//!
//! A [`TlsEndpoint`] owns at most one TLS connection to its address and pipelines every query
//! to that endpoint over it (RFC 7766 §6.2.1.1): each query gets an ID unique among the queries
//! on the connection, replies are matched by ID in whatever order they come, and a query whose
//! reply never comes times out at its own deadline without disturbing the others. The module
//! promises:
//! - nothing runs while unused: the connection (and its one task) is opened by the first query,
//!   closed after [`IDLE_TIMEOUT`] without traffic, and opened again by the next query;
//! - a failed connection (handshake, certificate, reset, the server closing without answering,
//!   no reply at all for the idle timeout while queries wait) fails every query waiting on it
//!   at once, so callers move on to another endpoint, and the next connection waits for a
//!   backoff ([`BACKOFF_MIN`] doubling to [`BACKOFF_MAX`]) during which queries fail at once
//!   with the last cause;
//! - a server that closes a connection in good order after answering on it (idle timeout,
//!   a cap on queries per connection) is not failing: the queries still waiting move to a new
//!   connection;
//! - a certificate that does not verify is a [`TlsError::Tls`] naming the cause as rustls says
//!   it, never a fallback to plain DNS;
//! - memory is bounded: at most `max_in_flight` queries wait on a connection
//!   ([`MAX_IN_FLIGHT`]; more wait for a slot), and a reply buffer is the size its frame says;
//! - dropping the endpoint stops its connection task.
//!
//! The client configuration (CA bundle, client certificate) is loaded by
//! [`certificates`](crate::certificates).

mod connection;
mod task;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;
use rustls::pki_types::ServerName;
use tokio::time::{Instant, timeout_at};

use crate::wire;
use connection::Shared;

/// How long a connection may sit without a query or a reply before we close it. Below the 8 s
/// after which miekg/dns — the DNS library of CoreDNS — closes an idle TCP or TLS connection by
/// default, so that in the usual setup we close first and seldom write a query into a
/// connection the peer is just closing (when that happens anyway, the query moves to a new
/// connection). A re-opened connection resumes the TLS session (rustls keeps tickets in the
/// client configuration): closing early costs a round trip, not a full handshake.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the TCP connect plus the TLS handshake may take. Longer than a query's default
/// deadline (2 s; queries give up on their own, the handshake goes on for the next), short enough that a black-holed peer becomes a
/// failure, and so a backoff, soon.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(3);

/// Queries waiting on one connection. A query beyond it waits (until its deadline) for a slot:
/// slots come back at the speed of replies, so waiting costs about a round trip, where failing
/// would count against a healthy endpoint. Queries whose caller gave up keep their ID reserved
/// (a late reply must not be taken for another query's) up to the same number again.
pub const MAX_IN_FLIGHT: usize = 256;

/// The first delay after a failed connection; it doubles with each failure in a row.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);

/// The longest delay between connection attempts; a reply on a connection resets the delay to
/// [`BACKOFF_MIN`]. Each delay is drawn from its upper half, so the sidecars of many pods do
/// not reconnect to a recovering peer in step.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Why a query over TLS got no reply. The variant is what a caller turns into its metric label:
/// [`TlsError::Tls`] is `tls_error`, the timeouts are `timeout`, the rest are plain errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsError {
    /// The TLS layer failed: the handshake, the peer's certificate (wrong name, unknown issuer,
    /// expired), an alert from the peer (our client certificate missing or refused), or a
    /// protocol error. The text is rustls's own.
    #[error("TLS: {0}")]
    Tls(String),
    /// The TCP connection failed or ended with queries unanswered.
    #[error("{0}")]
    Network(String),
    /// The connection was not established within [`HANDSHAKE_TIMEOUT`] (or the configured one).
    #[error("TCP connect and TLS handshake did not finish within {0:?}")]
    HandshakeTimeout(Duration),
    /// The query's deadline passed before its reply came.
    #[error("timed out")]
    Timeout,
    /// The query is shorter than a DNS header or longer than a frame can carry.
    #[error("the query is not a DNS message that fits a TLS frame")]
    BadQuery,
}

/// Tuning of one endpoint; the defaults are the documented constants. Tests shorten them.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub idle_timeout: Duration,
    pub handshake_timeout: Duration,
    pub max_in_flight: usize,
    /// Also counts every connection attempt here (`meshdns_upstream_tls_handshakes_total`).
    pub handshake_metric: Option<prometheus::IntCounter>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        Self {
            idle_timeout: IDLE_TIMEOUT,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            max_in_flight: MAX_IN_FLIGHT,
            handshake_metric: None,
        }
    }
}

/// One DNS-over-TLS endpoint of a peer cluster, and its (lazily opened, shared) connection.
/// Keep one per address for as long as the configuration lasts: the connection and its backoff
/// live here. Replace it (drop the old one) when the client configuration changes.
pub struct TlsEndpoint {
    shared: Arc<Shared>,
}

impl TlsEndpoint {
    /// An endpoint whose certificate must carry `server_name` and verify against `config`'s CA
    /// bundle, tuned by `settings`. Opens nothing until the first [`exchange`](Self::exchange).
    pub fn with_settings(
        addr: SocketAddr,
        server_name: ServerName<'static>,
        config: Arc<ClientConfig>,
        settings: TlsSettings,
    ) -> Self {
        Self {
            shared: Arc::new(Shared::new(addr, server_name, config, settings)),
        }
    }

    /// The address this endpoint connects to.
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Sends `query` (a complete DNS message) over the endpoint's connection, opening it if
    /// needed, and returns the reply that carries the query's ID, or an error by `deadline`.
    ///
    /// The ID is chosen here — random, and unique among the queries on the connection — and
    /// overwrites the one in `query`; the reply comes back with that ID. Only the ID is matched:
    /// the caller checks the rest (a response, the question it asked) as it does for UDP and TCP.
    /// Health probes (`. NS`) go through here like any query.
    pub async fn exchange(&self, query: &[u8], deadline: Instant) -> Result<Vec<u8>, TlsError> {
        if query.len() < wire::HEADER_LEN || query.len() > wire::MAX_MESSAGE {
            return Err(TlsError::BadQuery);
        }
        if Instant::now() >= deadline {
            return Err(TlsError::Timeout);
        }
        let _slot = match timeout_at(deadline, self.shared.slots.acquire()).await {
            Ok(Ok(permit)) => permit,
            // The semaphore is never closed; say something sensible should that change.
            Ok(Err(_)) => return Err(TlsError::Network("the endpoint is shutting down".into())),
            Err(_) => return Err(TlsError::Timeout),
        };
        // Kept until the end: if the deadline passes first, dropping it tells the connection
        // that nobody waits for this ID any more.
        let (_registration, reply) = self.shared.register(query)?;
        match timeout_at(deadline, reply).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(TlsError::Network("the connection was dropped".into())),
            Err(_) => Err(TlsError::Timeout),
        }
    }

    /// Connection attempts (TCP connect plus TLS handshake) made so far, failed ones included.
    /// Connection reuse shows as this number staying put while queries are answered.
    pub fn handshakes(&self) -> u64 {
        self.shared.handshakes()
    }

    /// Whether a connection is open or being opened (tests and debugging; nothing decides on it).
    pub fn is_connected(&self) -> bool {
        self.shared.is_connected()
    }
}

impl Drop for TlsEndpoint {
    fn drop(&mut self) {
        self.shared.stop();
    }
}

impl fmt::Debug for TlsEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsEndpoint")
            .field("addr", &self.shared.addr)
            .field("server_name", &self.shared.server_name)
            .field("handshakes", &self.handshakes())
            .finish_non_exhaustive()
    }
}
