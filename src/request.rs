//! The first look at a client's bytes: parse, and decide whether the query can be served or
//! must be answered at once (FORMERR, NOTIMP, BADVERS) or dropped.
//!
//! Dropped: anything without a full header, and responses (QR set) — answering those could make
//! meshdns one half of a packet loop. Everything else gets an answer (DESIGN.md, "Limits and
//! bad input").

use hickory_proto::op::{Message, OpCode, ResponseCode};

use crate::reply;
use crate::wire;

/// What to do with a datagram or TCP frame.
#[derive(Debug)]
pub enum Inspected {
    /// A well-formed standard query with exactly one question.
    Query(Message),
    /// A reply to send back right away.
    Reply(Vec<u8>),
    /// Nothing to answer.
    Drop,
}

/// Classifies client bytes; never panics on any input.
pub fn inspect(bytes: &[u8]) -> Inspected {
    if bytes.len() < wire::HEADER_LEN || wire::is_response(bytes) {
        return Inspected::Drop;
    }
    let Ok(msg) = Message::from_vec(bytes) else {
        return reply::from_header(bytes, ResponseCode::FormErr)
            .map_or(Inspected::Drop, Inspected::Reply);
    };
    let refusal = if msg.op_code != OpCode::Query {
        Some(ResponseCode::NotImp)
    } else if msg.queries.len() != 1 {
        Some(ResponseCode::FormErr)
    } else if msg.edns.as_ref().is_some_and(|e| e.version() > 0) {
        Some(ResponseCode::BADVERS)
    } else {
        None
    };
    match refusal {
        None => Inspected::Query(msg),
        Some(rcode) => {
            let mut answer = reply::synthesized(&msg, rcode);
            if msg.queries.len() != 1 {
                answer.queries.clear();
            }
            Inspected::Reply(reply::encode_fitted(&answer, wire::CLASSIC_UDP_SIZE))
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Query};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn query() -> Message {
        let mut msg = Message::query();
        msg.metadata.id = 99;
        msg.add_query(Query::query(
            Name::from_ascii("a.example.").unwrap(),
            RecordType::A,
        ));
        msg
    }

    fn rcode_of(inspected: Inspected) -> ResponseCode {
        match inspected {
            Inspected::Reply(bytes) => Message::from_vec(&bytes).unwrap().response_code,
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    #[test]
    fn a_standard_query_is_served() {
        assert!(matches!(
            inspect(&query().to_vec().unwrap()),
            Inspected::Query(_)
        ));
    }

    #[test]
    fn other_opcodes_get_notimp() {
        let mut msg = query();
        msg.metadata.op_code = OpCode::Notify;
        assert_eq!(
            rcode_of(inspect(&msg.to_vec().unwrap())),
            ResponseCode::NotImp
        );
    }

    #[test]
    fn question_counts_other_than_one_get_formerr() {
        let mut two = query();
        two.add_query(Query::query(
            Name::from_ascii("b.example.").unwrap(),
            RecordType::A,
        ));
        assert_eq!(
            rcode_of(inspect(&two.to_vec().unwrap())),
            ResponseCode::FormErr
        );
        let mut none = query();
        none.queries.clear();
        assert_eq!(
            rcode_of(inspect(&none.to_vec().unwrap())),
            ResponseCode::FormErr
        );
    }

    #[test]
    fn unknown_edns_versions_get_badvers() {
        let mut msg = query();
        let mut edns = Edns::new();
        edns.set_version(1);
        msg.set_edns(edns);
        // 16 is BADVERS for OPT (RFC 6891) and BADSIG for TSIG; hickory decodes it as the latter.
        assert_eq!(
            u16::from(rcode_of(inspect(&msg.to_vec().unwrap()))),
            u16::from(ResponseCode::BADVERS)
        );
    }

    #[test]
    fn garbage_after_a_header_gets_formerr_and_short_input_is_dropped() {
        let mut bytes = query().to_vec().unwrap();
        bytes.truncate(bytes.len() - 2);
        assert_eq!(rcode_of(inspect(&bytes)), ResponseCode::FormErr);
        assert!(matches!(inspect(&bytes[..11]), Inspected::Drop));
        let mut response = query().to_vec().unwrap();
        response[2] |= 0x80;
        assert!(matches!(inspect(&response), Inspected::Drop));
    }
}
