//! The first look at a client's bytes: parse, and decide whether the query can be served or
//! must be answered at once (FORMERR, NOTIMP, BADVERS) or dropped.
//!
//! Dropped: anything without a full header, and responses (QR set) — answering those could make
//! meshdns one half of a packet loop. Everything else gets an answer (docs/design.md, "Limits
//! and bad input"): FORMERR for what does not parse (two OPT records, a question name with a
//! compression pointer or longer than 255 bytes, garbage after the header), NOTIMP for other
//! opcodes, BADVERS for EDNS versions above 0.
//!
//! EDNS options are not judged here: hickory parses some strictly (a CLIENT-SUBNET option of
//! an unknown address family is an error to it, not to the protocol), so the message is parsed
//! without its options, and the bytes themselves travel on unparsed.

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
    let without_options = wire::without_options(bytes, |_| true);
    let parsed = Message::from_vec(without_options.as_deref().unwrap_or(bytes));
    let Ok(msg) = parsed else {
        return reply::from_header(bytes, ResponseCode::FormErr)
            .map_or(Inspected::Drop, Inspected::Reply);
    };
    // The question as the router reads it: one, of plain labels. hickory also follows a
    // compression pointer there, to a name the client never wrote (into the header, say).
    let readable_question = msg.queries.len() == 1 && wire::first_question(bytes).is_some();
    let refusal = if msg.op_code != OpCode::Query {
        Some(ResponseCode::NotImp)
    } else if !readable_question {
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
            if !readable_question {
                // Echoed, it would be a question the client did not send.
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
    fn two_opt_records_get_formerr() {
        let mut msg = query();
        msg.set_edns(Edns::new());
        let mut bytes = msg.to_vec().unwrap();
        let opt = bytes[bytes.len() - 11..].to_vec();
        bytes.extend_from_slice(&opt);
        bytes[11] = 2;
        assert_eq!(rcode_of(inspect(&bytes)), ResponseCode::FormErr);
    }

    #[test]
    fn a_client_subnet_option_of_an_unknown_family_is_passed_on() {
        let mut msg = query();
        let mut edns = Edns::new();
        edns.options_mut()
            .insert(hickory_proto::rr::rdata::opt::EdnsOption::Unknown(
                8,
                vec![0, 99, 0, 0],
            ));
        msg.set_edns(edns);
        assert!(matches!(
            inspect(&msg.to_vec().unwrap()),
            Inspected::Query(_)
        ));
    }

    #[test]
    fn a_question_name_with_a_pointer_gets_formerr_not_silence() {
        // The question name points at the header: hickory follows it, the router cannot.
        let mut bytes = query().to_vec().unwrap();
        bytes.truncate(wire::HEADER_LEN);
        bytes.extend_from_slice(&[0xc0, 0x00, 0, 1, 0, 1]);
        let Inspected::Reply(reply) = inspect(&bytes) else {
            panic!("answered")
        };
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.response_code, ResponseCode::FormErr);
        assert!(
            reply.queries.is_empty(),
            "not the name hickory made of the pointer"
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
