//! The DNS listeners: binding (before the runtime starts, so bind errors become exit 71), the UDP,
//! TCP and DNS-over-TLS loops, and what they share — the access list, the in-flight bound, the
//! metrics and the shutdown signal. Beside them, the admin HTTP server (`/metrics`, `/livez`,
//! `/readyz`).
//!
//! Each loop is given the node of the instance's task tree it runs on (`crate::background`'s
//! `Tasks`), and starts every task of its own there: a UDP listener's misses, a stream
//! listener's or the admin server's connections, each connection's queries under a node of the
//! connection's. Nothing here is spawned outside that tree. Two things end work here, both the
//! tree's: the drain (`Shared::shutdown`), at which the DNS listeners stop accepting and their
//! connections stop reading and finish what they have; and an owner's end, which ends every
//! task below it at once (a connection's queries when it closes; everything when `run`
//! closes the root). This module never touches the tree's root.
//!
//! The listeners answer a query themselves only with what a listener alone knows: REFUSED to a
//! source the access list (the snapshot's) does not allow, FORMERR to a datagram cut by the
//! receive buffer. Everything else goes to the [`Resolver`]: nothing here routes, caches or
//! asks upstream.

mod admin;
mod batch;
mod bind;
mod dot;
mod tcp;
mod udp;

use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::query::Resolver;

#[cfg(any(test, feature = "testing"))]
pub use admin::MAX_CONNECTIONS as ADMIN_MAX_CONNECTIONS;
pub(crate) use admin::{Readiness, next_connection, response, serve_admin};
pub use bind::{BindError, Listeners, bind, bind_admin, bind_dot, bind_spread, bind_webhook};
pub(crate) use dot::serve_dot;
pub(crate) use tcp::serve_tcp;
#[cfg(any(test, feature = "testing"))]
pub use tcp::{
    IDLE_TIMEOUT as TCP_IDLE_TIMEOUT, MAX_CONNECTIONS as TCP_MAX_CONNECTIONS, MAX_QUERY_FRAME,
    WRITE_TIMEOUT as TCP_WRITE_TIMEOUT,
};
pub(crate) use udp::serve_udp;

/// What every listener loop needs.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) resolver: Arc<Resolver>,
    /// Client queries being answered at once, over all listeners (`MESHDNS_MAX_INFLIGHT`).
    /// A UDP query beyond it is dropped, a TCP connection waits; clients retry, and memory
    /// stays bounded.
    pub(crate) inflight: Arc<Semaphore>,
    /// TCP queries' share of `inflight` (half of it): a TCP query takes one of these before
    /// one of `inflight`, so pipelining connections, which wait for a slot instead of being
    /// dropped, can never take the slots UDP clients need.
    pub(crate) tcp_inflight: Arc<Semaphore>,
    pub(crate) metrics: Arc<Metrics>,
    /// Cancelled when shutdown begins: listeners stop accepting, connections finish what they
    /// have ([`crate::background::Background::draining`]).
    pub(crate) shutdown: CancellationToken,
}

/// The in-flight slots TCP queries may hold at once out of `max_inflight`: half, at least one.
pub(crate) fn tcp_share(max_inflight: usize) -> usize {
    (max_inflight / 2).max(1)
}
