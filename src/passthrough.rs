//! The pass-through route: a name that is none of meshdns's zones goes to the local cluster
//! DNS (kube-dns) as the client sent it, and the reply comes back as kube-dns sent it.
//!
//! Only what belongs to one hop changes: the ID (a fresh random one upstream, the client's
//! restored), the hop-by-hop EDNS options ([`wire::is_hop_by_hop_option`]: COOKIE,
//! TCP-KEEPALIVE, PADDING, relayed in neither direction — towards its loopback clients meshdns
//! is a server supporting none of them, a cookie made for one client must never reach another
//! through the cache, and kube-dns's keepalive describes its connection to meshdns, not the
//! client's), the question of an error reply that omitted it (the client's own is put back),
//! and the AD bit for a client that did not ask for it (RFC 6840 §5.8, cleared by
//! [`Resolver`](crate::query::Resolver) for every route). Every other byte — flags, rcode,
//! sections, EDNS options meshdns does not use — passes untouched.
//!
//! It owns those one-hop edits and keeps nothing: the exchange is the group's it is handed
//! (kube-dns's, or a peer's for a namespace that peer claims), and what is cached the cache's.

use tokio::time::Instant;

use crate::reply::{self, ExtendedError};
use crate::request::Request;
use crate::upstream::Upstream;
use crate::wire;

/// Forwards the client's query to `upstream`; the reply, or SERVFAIL when no endpoint
/// answered before `deadline`.
pub(crate) async fn forward(upstream: &Upstream, request: &Request, deadline: Instant) -> Vec<u8> {
    match upstream.exchange(&request.relayed(), deadline).await {
        Ok(answered) => to_client(answered.bytes, request.bytes()),
        Err(error) => {
            tracing::debug!(%error, "pass-through failed");
            reply::servfail_bytes(
                request.message(),
                ExtendedError::NoReachableAuthority,
                &error.client_reason("upstream DNS"),
            )
        }
    }
}

/// An accepted upstream reply as the client who sent `query` gets it: its ID, its question
/// when the reply omitted it, no hop-by-hop option; every other byte as kube-dns sent it.
pub(crate) fn to_client(mut reply: Vec<u8>, query: &[u8]) -> Vec<u8> {
    if wire::question_count(&reply) == Some(0)
        && let Some(with) =
            wire::first_question(query).and_then(|asked| wire::with_question(&reply, asked))
    {
        reply = with;
    }
    if let Some(without) = wire::without_options(&reply, wire::is_hop_by_hop_option) {
        reply = without;
    }
    wire::set_id(&mut reply, wire::id(query).unwrap_or_default());
    reply
}
