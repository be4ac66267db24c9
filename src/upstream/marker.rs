//! The loop marker on every query that leaves meshdns: an EDNS option of the local and
//! experimental range ([`wire::OPTION_LOOP_MARKER`]) whose value is drawn at random once per
//! process, added before an exchange and taken off its reply, so that a query that comes back
//! to this process is recognised ([`is_ours`]; what meshdns then does is the `loops`
//! module's).
//!
//! It owns the value and the two edits; the request's view asks [`is_ours`] when a query
//! arrives, and the option's bytes are read and removed with the `wire` module's EDNS helpers.

use std::sync::LazyLock;

use crate::wire::{self, OPTION_LOOP_MARKER, Proto};

/// This process's marker value: 8 random bytes, drawn once.
static MARKER: LazyLock<[u8; 8]> = LazyLock::new(rand::random);

/// A query as it goes upstream: `query` with this process's marker, and the UDP payload size
/// the client's query advertised (what a reply to it may use), read while the marker went in.
#[derive(Debug)]
pub(crate) struct Marked {
    bytes: Vec<u8>,
    /// The query had no OPT record: the one added for the marker must not reach the client.
    added_opt: bool,
    advertised: usize,
}

impl Marked {
    /// `query` with the marker; a query that cannot carry one (malformed, or signed) goes
    /// unmarked.
    pub(crate) fn new(query: &[u8]) -> Self {
        match wire::with_option(query, OPTION_LOOP_MARKER, MARKER.as_slice()) {
            Some((bytes, payload)) => Self {
                bytes,
                added_opt: payload.is_none(),
                advertised: Proto::Udp.reply_limit(payload),
            },
            None => Self {
                bytes: query.to_vec(),
                added_opt: false,
                advertised: Proto::Udp.reply_limit(wire::opt(query).flatten().map(|o| o.payload)),
            },
        }
    }

    /// The UDP payload size the query advertises: what its reply may use (512 without EDNS).
    pub(crate) fn advertised(&self) -> usize {
        self.advertised
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// `reply` to the marked query as the unmarked one would have had it: no OPT record when
    /// the query had none, and no marker echoed back.
    pub(crate) fn unmark(&self, reply: Vec<u8>) -> Vec<u8> {
        if self.added_opt {
            return wire::without_opt(reply).unwrap_or_else(|unchanged| unchanged);
        }
        wire::without_options(&reply, |code| code == OPTION_LOOP_MARKER).unwrap_or(reply)
    }
}

/// Whether `value`, the data of a loop-marker option, is this process's: the query that
/// carries it was sent by this process and came back (the request's view asks).
pub(crate) fn is_ours(value: &[u8]) -> bool {
    value == MARKER.as_slice()
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn came_back(query: &[u8]) -> bool {
        wire::has_option(query, OPTION_LOOP_MARKER, MARKER.as_slice())
    }

    fn query(edns: bool) -> Vec<u8> {
        let mut msg = Message::query();
        let name = Name::from_ascii("x.cluster.c.").unwrap();
        msg.add_query(Query::query(name, RecordType::A));
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
    fn replies_are_received_into_what_the_query_advertised() {
        assert_eq!(Marked::new(&query(false)).advertised(), 512);
        let mut msg = Message::from_vec(&query(true)).unwrap();
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        msg.set_edns(edns);
        assert_eq!(Marked::new(&msg.to_vec().unwrap()).advertised(), 1232);
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
