//! One pipelined DNS stream per endpoint (RFC 7766 §6.2.1.1), over plain TCP or over TLS
//! (RFC 7858): the connection of `transport=tcp` and `transport=tls` clusters, and of the TCP
//! retries after a truncated UDP reply.
//!
//! A [`StreamEndpoint`] owns at most one connection to its address and pipelines every query
//! to that endpoint over it: each query gets an ID unique among the queries on the connection,
//! replies are matched by ID in whatever order they come — a frame with a query's ID that the
//! `accept` module does not take for its reply (another question, a message that does not walk
//! fully) is dropped and the query waits on —, and a query whose reply never comes
//! times out at its own deadline without disturbing the others. The module promises:
//! - nothing runs while unused: the connection (and its one task) is opened by the first query,
//!   closed after [`IDLE_TIMEOUT`] without traffic, and opened again by the next query;
//! - a peer that closes or resets a connection (a restart, a load balancer's idle cut, a cap on
//!   queries per connection, a reply cut in the middle) is normal life: the queries still
//!   waiting on it are sent again on a new connection, at once, within their deadlines, and
//!   nothing counts it as a failure. So is a connection on which nothing has come back for the
//!   idle timeout while queries wait (a peer that hangs);
//! - a failure is what a new connection cannot get past: the connect (refused, unreachable —
//!   except within [`RESTART_GRACE`] of a lost connection, when it is tried again — or not
//!   within [`CONNECT_TIMEOUT`]), the TLS handshake or the peer's certificate, a TLS alert,
//!   or [`MAX_UNANSWERED_CONNECTIONS`] connections in a row that ended without answering
//!   anything. It fails every query waiting on the connection at once, so callers move on to
//!   another endpoint, and the next connection waits for a backoff ([`BACKOFF_MIN`] doubling
//!   to [`BACKOFF_MAX`]) during which queries fail at once with the last cause;
//! - a certificate that does not verify is a [`StreamError::Tls`] naming the cause as rustls
//!   says it, never a fallback to plain DNS;
//! - memory is bounded: at most `max_in_flight` queries wait on a connection
//!   ([`MAX_IN_FLIGHT`]; more wait for a slot), and a reply buffer is the size its frame says;
//! - dropping the endpoint stops its connection task.
//!
//! The TLS client configuration (CA bundle, client certificate) is loaded by
//! [`certificates`](crate::certificates); each connection is opened with the one current then
//! ([`CurrentTls`]), so a rotation reaches the next connection of an endpoint that outlives it.
//! Which endpoint a query goes to, and whether its exchange moves on to another, are the
//! group's: a stream knows only its one address.

mod connection;
mod task;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::time::{Instant, timeout_at};

use crate::background::{Owner, Tasks};
use crate::certificates::CurrentTls;
use crate::upstream::PeerCertificateSeries;
use crate::wire;
use connection::Shared;

/// How long a connection may sit without a query or a reply before we close it. Below the 8 s
/// after which miekg/dns — the DNS library of CoreDNS — closes an idle TCP or TLS connection by
/// default, so that in the usual setup we close first and seldom write a query into a
/// connection the peer is just closing (when that happens anyway, the query moves to a new
/// connection). A re-opened TLS connection resumes its session (rustls keeps tickets in the
/// client configuration): closing early costs a round trip, not a full handshake.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the TCP connect (plus the TLS handshake) may take. Longer than a query's default
/// deadline (2 s; queries give up on their own, the connect goes on for the next), short
/// enough that a black-holed peer becomes a failure, and so a backoff, soon.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Queries waiting on one connection. A query beyond it waits (until its deadline) for a slot:
/// slots come back at the speed of replies, so waiting costs about a round trip, where failing
/// would count against a healthy endpoint. Queries whose caller gave up keep their ID reserved
/// (a late reply must not be taken for another query's) up to the same number again.
pub(crate) const MAX_IN_FLIGHT: usize = 256;

/// Connections in a row that may end (closed by the peer, or hanging) without a single reply
/// before that is a failure: a peer that accepts connections and drops them unanswered would
/// otherwise have its queries re-sent in a loop until their deadlines.
pub const MAX_UNANSWERED_CONNECTIONS: u32 = 3;

/// How long after the peer closed or reset a connection a refused connect is tried again
/// (after the backoff) with the queries kept waiting, instead of failing them: a server
/// process restarting behind its port refuses connections for a moment. Bounded by each
/// query's own deadline as well.
pub(crate) const RESTART_GRACE: Duration = Duration::from_secs(1);

/// The first delay after a failed connection; it doubles with each failure in a row.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(100);

/// The longest delay between connection attempts; a reply on a connection resets the delay to
/// [`BACKOFF_MIN`]. Each delay is drawn from its upper half, so the sidecars of many pods do
/// not reconnect to a recovering peer in step.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Why a query over a stream got no reply. The variant is what a caller turns into its metric
/// label: [`StreamError::Tls`] is `tls_error`, the timeouts are `timeout`, the rest are plain
/// errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamError {
    /// The TLS layer failed: the handshake, the peer's certificate (wrong name, unknown issuer,
    /// expired), an alert from the peer (our client certificate missing or refused), or a
    /// protocol error. The text is rustls's own.
    #[error("TLS: {0}")]
    Tls(String),
    /// The TCP connect failed, or connections kept ending with queries unanswered.
    #[error("{0}")]
    Network(String),
    /// The connection was not established within [`CONNECT_TIMEOUT`] (or the configured one).
    #[error("connect did not finish within {0:?}")]
    ConnectTimeout(Duration),
    /// The query's deadline passed before its reply came.
    #[error("timed out")]
    Timeout,
    /// The query is shorter than a DNS header or longer than a frame can carry.
    #[error("the query is not a DNS message that fits a TCP frame")]
    BadQuery,
}

/// Tuning of one endpoint; the defaults are the documented constants. Tests shorten them.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    pub idle_timeout: Duration,
    pub connect_timeout: Duration,
    pub max_in_flight: usize,
    /// Counts every connection attempt (the TCP connect, plus the handshake over TLS; failed
    /// ones included) into each of these: `meshdns_upstream_connections_total`, and
    /// `meshdns_upstream_tls_handshakes_total` for TLS endpoints.
    pub connect_metrics: Vec<prometheus::IntCounter>,
    /// Told the notAfter of the certificate the peer presents in each TLS handshake.
    pub peer_certificate: Option<PeerCertificateSeries>,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            idle_timeout: IDLE_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            max_in_flight: MAX_IN_FLIGHT,
            connect_metrics: Vec::new(),
            peer_certificate: None,
        }
    }
}

/// What a connection runs over.
#[derive(Clone)]
enum Dial {
    Tcp,
    /// TLS checking `server_name` against the CA bundle of the configuration current when the
    /// connection is opened.
    Tls {
        config: CurrentTls,
        server_name: ServerName<'static>,
    },
}

/// One endpoint spoken to over a stream (TCP or TLS), and its (lazily opened, shared)
/// connection. Keep one per address for as long as the configuration lasts: the connection and
/// its backoff live here.
pub struct StreamEndpoint {
    shared: Arc<Shared>,
    /// Ends the connection task when the endpoint is dropped.
    _owner: Owner,
}

impl StreamEndpoint {
    /// An endpoint spoken to over plain TCP, whose connection tasks run in `tasks` (its
    /// owner's place in the instance's tree). Opens nothing until the first
    /// [`exchange`](Self::exchange).
    pub fn tcp(addr: SocketAddr, settings: StreamSettings, tasks: Tasks) -> Self {
        Self::over(addr, Dial::Tcp, settings, &tasks)
    }

    /// An endpoint spoken to over TLS, whose certificate must carry `server_name` and verify
    /// against `config`'s CA bundle (as it is when each connection opens: see [`CurrentTls`]).
    /// Its connection tasks run in `tasks`, as [`StreamEndpoint::tcp`]'s. Opens nothing until
    /// the first [`exchange`](Self::exchange).
    pub fn tls(
        addr: SocketAddr,
        server_name: ServerName<'static>,
        config: impl Into<CurrentTls>,
        settings: StreamSettings,
        tasks: Tasks,
    ) -> Self {
        let dial = Dial::Tls {
            config: config.into(),
            server_name,
        };
        Self::over(addr, dial, settings, &tasks)
    }

    /// The endpoint at `addr` reached by `dial`, under an owner of its own below `tasks`.
    fn over(addr: SocketAddr, dial: Dial, settings: StreamSettings, tasks: &Tasks) -> Self {
        let owner = tasks.child();
        Self {
            shared: Arc::new(Shared::new(addr, dial, settings, owner.tasks())),
            _owner: owner,
        }
    }

    /// The address this endpoint connects to.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Sends `query` (a complete DNS message) over the endpoint's connection, opening it if
    /// needed, and returns the reply that carries the query's ID, or an error by `deadline`.
    ///
    /// The ID is chosen here — random, and unique among the queries on the connection — and
    /// overwrites the one in `query`; the reply comes back with that ID. Only the ID is matched:
    /// the caller checks the rest (a response, the question it asked) as it does for UDP.
    /// Health probes (`. NS`) go through here like any query.
    pub async fn exchange(&self, query: &[u8], deadline: Instant) -> Result<Vec<u8>, StreamError> {
        if query.len() < wire::HEADER_LEN || query.len() > wire::MAX_MESSAGE {
            return Err(StreamError::BadQuery);
        }
        if Instant::now() >= deadline {
            return Err(StreamError::Timeout);
        }
        let _slot = match timeout_at(deadline, self.shared.slots.acquire()).await {
            Ok(Ok(permit)) => permit,
            // The semaphore is never closed; say something sensible should that change.
            Ok(Err(_)) => {
                return Err(StreamError::Network("the endpoint is shutting down".into()));
            }
            Err(_) => return Err(StreamError::Timeout),
        };
        // Kept until the end: if the deadline passes first, dropping it tells the connection
        // that nobody waits for this ID any more.
        let (_registration, reply) = self.shared.register(query)?;
        match timeout_at(deadline, reply).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(StreamError::Network("the connection was dropped".into())),
            Err(_) => Err(StreamError::Timeout),
        }
    }

    /// Connection attempts (TCP connect, plus the TLS handshake) made so far, failed ones
    /// included. Connection reuse shows as this number staying put while queries are answered.
    pub fn connects(&self) -> u64 {
        self.shared.connects()
    }

    #[cfg(any(test, feature = "testing"))]
    /// Whether a connection is open or being opened (tests and debugging; nothing decides on it).
    pub fn is_connected(&self) -> bool {
        self.shared.is_connected()
    }
}

impl Drop for StreamEndpoint {
    fn drop(&mut self) {
        self.shared.stop();
    }
}

impl fmt::Debug for StreamEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("StreamEndpoint");
        debug.field("addr", &self.shared.addr);
        if let Dial::Tls { server_name, .. } = &self.shared.dial {
            debug.field("tls_name", server_name);
        }
        debug
            .field("connects", &self.connects())
            .finish_non_exhaustive()
    }
}
