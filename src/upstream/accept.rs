//! What makes bytes from an endpoint the reply to a query: the one check every reply passes,
//! whatever the route and the transport (a UDP datagram in the `exchange` module, a TCP or TLS
//! frame as the `stream` module hands it to its query, the TCP fetch after a truncated reply).
//!
//! A reply is a response that carries our ID and opcode and echoes our question (names
//! compared ignoring case) — or an error reply (FORMERR, SERVFAIL, NOTIMP, REFUSED) with no
//! question at all: servers that cannot parse a query omit it, and that is still the endpoint's
//! answer — and it walks fully (docs/design.md, "Replies are walked once, fully":
//! `wire::walks_fully` follows every name through its compression pointers and frames every
//! record). Anything else is no reply at all: the query keeps waiting for its own, and the
//! bytes are never relayed, cached or parsed. This module decides and the transports act on
//! its verdict; it touches no socket.

use crate::wire;

/// RCODEs a server sends without the question when it cannot parse a query.
const QUESTIONLESS_ERRORS: [u8; 4] = [1, 2, 4, 5];

#[cfg(any(test, feature = "testing"))]
/// Whether `reply` answers `sent` (see the module documentation): a response with our ID and
/// opcode, our question or none at all on an error, and a message that walks fully — a
/// malformed one would reach the client verbatim on the pass-through route (and its cache), so
/// it counts as no reply at all.
pub fn acceptable(reply: &[u8], id: u16, sent: &[u8]) -> bool {
    check(reply, id, sent).is_ok()
}

/// Why a datagram or frame that reached an attempt is not its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum Refused {
    #[error("does not answer the query (ID, opcode or question)")]
    NotAnAnswer,
    #[error("does not walk fully (a malformed name, count, length or record)")]
    Malformed,
}

/// `acceptable`, saying why not.
pub(super) fn check(reply: &[u8], id: u16, sent: &[u8]) -> Result<(), Refused> {
    (answers(reply, id, sent).then_some(())).ok_or(Refused::NotAnAnswer)?;
    (wire::walks_fully(reply).then_some(())).ok_or(Refused::Malformed)
}

/// The header and question half of `acceptable`: a response with our ID and opcode that
/// echoes our question, or none at all on an error.
pub(super) fn answers(reply: &[u8], id: u16, sent: &[u8]) -> bool {
    let Some(asked) = wire::first_question(sent) else {
        return false;
    };
    let question_ok = match wire::first_question(reply) {
        Some(got) => wire::same_question(got, asked),
        None => {
            wire::question_count(reply) == Some(0)
                && wire::rcode(reply).is_some_and(|rcode| QUESTIONLESS_ERRORS.contains(&rcode))
                && wire::with_question(reply, asked).is_some()
        }
    };
    wire::is_response(reply)
        && wire::id(reply) == Some(id)
        && wire::opcode(reply) == wire::opcode(sent)
        && question_ok
}

#[cfg(test)]
pub(super) mod tests {
    use hickory_proto::op::{Message, Query, ResponseCode};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    /// A query for `www.example.org. A`, the exchange tests' too.
    pub(in crate::upstream) fn query() -> Vec<u8> {
        let mut msg = Message::query();
        let name = Name::from_ascii("www.example.org.").unwrap();
        msg.add_query(Query::query(name, RecordType::A));
        msg.to_vec().unwrap()
    }

    fn error_without_question(sent: &[u8], rcode: ResponseCode) -> Vec<u8> {
        let mut reply = Message::error_msg(0, hickory_proto::op::OpCode::Query, rcode);
        reply.metadata.id = wire::id(sent).unwrap();
        reply.to_vec().unwrap()
    }

    #[test]
    fn an_error_reply_without_a_question_is_an_answer() {
        let sent = query();
        let id = wire::id(&sent).unwrap();
        for rcode in [ResponseCode::Refused, ResponseCode::FormErr] {
            assert!(acceptable(&error_without_question(&sent, rcode), id, &sent));
        }
        // A NOERROR reply must echo the question.
        let noerror = error_without_question(&sent, ResponseCode::NoError);
        assert!(!acceptable(&noerror, id, &sent));
        let refused = error_without_question(&sent, ResponseCode::Refused);
        assert!(!acceptable(&refused, id.wrapping_add(1), &sent));
    }

    #[test]
    fn a_reply_whose_owner_name_is_a_pointer_loop_is_malformed() {
        use hickory_proto::rr::rdata::A;
        use hickory_proto::rr::{RData, Record};
        let sent = query();
        let mut reply = Message::from_vec(&sent).unwrap();
        reply.metadata.message_type = hickory_proto::op::MessageType::Response;
        let name = reply.queries[0].name().clone();
        reply.add_answer(Record::from_rdata(name, 60, RData::A(A::new(192, 0, 2, 1))));
        let mut bytes = reply.to_vec().unwrap();
        let id = wire::id(&sent).unwrap();
        assert_eq!(check(&bytes, id, &sent), Ok(()));
        // The answer's owner (a pointer to the question's name) made a pointer to itself.
        let owner = wire::questions_end(&bytes).unwrap();
        let at = u16::try_from(owner).unwrap() | 0xc000;
        bytes[owner..owner + 2].copy_from_slice(&at.to_be_bytes());
        assert_eq!(check(&bytes, id, &sent), Err(Refused::Malformed));
        assert!(!acceptable(&bytes, id, &sent));
    }
}
