//! No loops: a query meshdns sent upstream that comes back to meshdns is answered SERVFAIL at
//! once, never relayed again and never answered from another cluster's records.
//!
//! Two ways a query comes back. In the cluster-level mode kube-dns forwards meshdns's zones to
//! meshdns and meshdns passes what it does not own to kube-dns: a zone kube-dns forwards that
//! meshdns does not have (a cluster removed from `MESHDNS_CLUSTERS` but not from the Corefile)
//! would bounce between them until a deadline. And an endpoint that is meshdns itself (by IP,
//! or a host name that resolves to its own address) makes meshdns answer a peer's names from
//! its own kube-dns: cluster a's pods under cluster b's names.
//!
//! Every query meshdns sends upstream carries the marker: an EDNS option of the local and
//! experimental range (`wire::OPTION_LOOP_MARKER`) whose value is random per process. A
//! query that arrives with this process's value was sent by this process: that is a loop, and
//! nothing else is, so two clients asking the same name at once are never taken for one. A
//! forwarder that relays the message as it is (CoreDNS's `forward` writes the client's message
//! to its upstream, options included; so does dnsdist) brings the marker back within one round
//! trip. A forwarder that builds a query of its own (unbound, Knot Resolver) drops it; unbound
//! also joins the returning query to the one it is already waiting for, so nothing comes back
//! to be recognised, and the loop ends at `MESHDNS_TIMEOUT` with SERVFAIL instead.
//! Endpoints equal to a listen address are refused by the configuration
//! ([`config::is_own_address`](crate::config::is_own_address)),
//! and a host name that resolves to one is never asked.
//!
//! The cache-hit path pays nothing: a query carrying a marker is not a plain query
//! (`wire::plain_query` already walks its options), so it takes the full path, where the
//! request's view compares the value ([`Request::came_back`](crate::request::Request::came_back)).
//! The marker itself is added and taken off where queries leave, in the upstream module
//! (`upstream::marker`). Every route relays the markers a query carries (another meshdns's
//! too), so a loop through several meshdns and rewritten names is seen where it started.
//!
//! It owns what a loop gets (the SERVFAIL, its count and its rate-limited warning); it adds no
//! marker and reads none: `upstream::marker` and the request's view do.

use std::time::Duration;

use hickory_proto::op::Message;
use prometheus::IntCounter;

use crate::reply::{self, ExtendedError};
use crate::upstream::log_limit::LogLimit;

/// A loop is logged at most once in this interval (the metric counts every one).
pub(crate) const LOOP_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What the client is told (the EDE's text).
pub(crate) const LOOP_TEXT: &str = "forwarding loop: this query came back to meshdns (a zone forwarded to meshdns that it does not serve, or an endpoint that is meshdns itself)";

/// What a query that came back gets: counted, logged at most once a minute, SERVFAIL.
#[derive(Debug)]
pub(crate) struct Loops {
    counter: IntCounter,
    log: LogLimit,
}

impl Loops {
    pub(crate) fn new(counter: IntCounter) -> Self {
        Self {
            counter,
            log: LogLimit::every(LOOP_LOG_INTERVAL),
        }
    }

    /// The reply to `request`, a query that came back: SERVFAIL with an Extended DNS
    /// Error. It carries no marker, so the meshdns that waits for it relays it to its client.
    pub(crate) fn answer(&self, request: &Message) -> Vec<u8> {
        self.counter.inc();
        if let Some(held_back) = self.log.check() {
            let name = request.queries.first().map(|q| q.name().to_string());
            tracing::warn!(
                name = name.as_deref().unwrap_or(""),
                held_back,
                "a query came back to meshdns (a forwarding loop): answered SERVFAIL; check that kube-dns forwards to meshdns only zones it serves, and that no endpoint is meshdns itself"
            );
        }
        reply::servfail_bytes(request, ExtendedError::Other, LOOP_TEXT)
    }
}
