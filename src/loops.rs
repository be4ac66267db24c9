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
//! experimental range ([`wire::OPTION_LOOP_MARKER`]) whose value is random per process. A
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
//! ([`wire::plain_query`] already walks its options), so it takes the full path, where
//! [`came_back`] compares the value.

use std::sync::LazyLock;
use std::time::Duration;

use hickory_proto::op::Message;
use prometheus::IntCounter;

use crate::reply::{self, ExtendedError};
use crate::upstream::log_limit::LogLimit;
use crate::wire::{self, OPTION_LOOP_MARKER};

/// A loop is logged at most once in this interval (the metric counts every one).
pub const LOOP_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// This process's marker value: 8 random bytes, drawn once.
static MARKER: LazyLock<[u8; 8]> = LazyLock::new(rand::random);

/// What the client is told (the EDE's text).
pub const LOOP_TEXT: &str = "forwarding loop: this query came back to meshdns (a zone forwarded to meshdns that it does not serve, or an endpoint that is meshdns itself)";

/// A query as it goes upstream: `query` with this process's marker.
#[derive(Debug)]
pub struct Marked {
    bytes: Vec<u8>,
    /// The query had no OPT record: the one added for the marker must not reach the client.
    added_opt: bool,
}

impl Marked {
    /// `query` with the marker; a query that cannot carry one (malformed, or signed) goes
    /// unmarked.
    pub fn new(query: &[u8]) -> Self {
        match wire::with_option(query, OPTION_LOOP_MARKER, MARKER.as_slice()) {
            Some((bytes, added_opt)) => Self { bytes, added_opt },
            None => Self {
                bytes: query.to_vec(),
                added_opt: false,
            },
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `reply` to the marked query as the unmarked one would have had it: no OPT record when
    /// the query had none, and no marker echoed back.
    pub fn unmark(&self, reply: Vec<u8>) -> Vec<u8> {
        if self.added_opt {
            return wire::without_opt(&reply).unwrap_or(reply);
        }
        wire::without_options(&reply, |code| code == OPTION_LOOP_MARKER).unwrap_or(reply)
    }
}

/// Whether `query` carries this process's marker: meshdns sent it, and it came back.
pub fn came_back(query: &[u8]) -> bool {
    wire::has_option(query, OPTION_LOOP_MARKER, MARKER.as_slice())
}

/// What a query that came back gets: counted, logged at most once a minute, SERVFAIL.
#[derive(Debug)]
pub struct Loops {
    counter: IntCounter,
    log: LogLimit,
}

impl Loops {
    pub fn new(counter: IntCounter) -> Self {
        Self {
            counter,
            log: LogLimit::every(LOOP_LOG_INTERVAL),
        }
    }

    /// The reply to `request`, a query that [`came_back`]: SERVFAIL with an Extended DNS
    /// Error. It carries no marker, so the meshdns that waits for it relays it to its client.
    pub fn answer(&self, request: &Message) -> Vec<u8> {
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

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn query(edns: bool) -> Vec<u8> {
        let mut msg = Message::query();
        msg.add_query(Query::query(
            Name::from_ascii("x.cluster.c.").unwrap(),
            RecordType::A,
        ));
        if edns {
            msg.set_edns(Edns::new());
        }
        msg.to_vec().unwrap()
    }

    #[test]
    fn a_marked_query_is_recognised_and_the_client_query_is_not() {
        for edns in [false, true] {
            let client = query(edns);
            assert!(!came_back(&client));
            let marked = Marked::new(&client);
            assert!(came_back(marked.bytes()), "edns {edns}");
            assert!(Message::from_vec(marked.bytes()).is_ok());
            assert!(
                wire::plain_query(marked.bytes()).is_none(),
                "a marked query never takes the cache-hit path"
            );
        }
    }

    #[test]
    fn another_process_marker_is_not_a_loop() {
        let (other, _) = wire::with_option(&query(true), OPTION_LOOP_MARKER, &[0xee; 8]).unwrap();
        assert!(!came_back(&other));
        assert!(came_back(Marked::new(&other).bytes()));
    }

    #[test]
    fn the_reply_loses_the_opt_record_added_for_the_marker() {
        let client = query(false);
        let marked = Marked::new(&client);
        let mut reply = Message::from_vec(marked.bytes()).unwrap();
        reply.metadata.message_type = hickory_proto::op::MessageType::Response;
        let reply = reply.to_vec().unwrap();
        let unmarked = Message::from_vec(&marked.unmark(reply)).unwrap();
        assert!(unmarked.edns.is_none());
        assert_eq!(unmarked.queries.len(), 1);
    }

    #[test]
    fn an_echoed_marker_is_taken_out_of_the_reply() {
        let marked = Marked::new(&query(true));
        let echoed = marked.bytes().to_vec();
        let unmarked = marked.unmark(echoed);
        assert!(!came_back(&unmarked));
        assert!(Message::from_vec(&unmarked).unwrap().edns.is_some());
    }
}
