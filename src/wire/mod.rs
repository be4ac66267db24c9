//! Byte-level views of DNS messages, for the paths that must not pay for a full parse:
//! reading and patching the header, comparing question sections, walking names and resource
//! records (to find TTL fields and the OPT record), walking a reply fully before it is trusted
//! ([`walks_fully`]), and editing EDNS options in place — and
//! the one writer of the messages meshdns encodes ([`MessageWriter`]: name compression that
//! keeps working in big messages, RRsets that can be undone).
//!
//! Every function here takes untrusted bytes and returns `None` (or `false`) on anything short
//! or malformed; none can panic. Parsing stays with hickory-proto, and so does the encoding of
//! record data without names.
//!
//! It is the lowest layer: it imports nothing else of meshdns, and knows no route, cache or
//! configuration.

mod edns;
mod header;
mod name;
mod records;
mod walk;
mod writer;

pub(crate) use edns::{
    OPTION_CLIENT_SUBNET, OPTION_LOOP_MARKER, OptInfo, is_hop_by_hop_option, opt, without_opt,
    without_options,
};

#[cfg(any(test, feature = "testing"))]
pub(crate) use edns::OPTION_COOKIE;
#[cfg(test)]
pub(crate) use edns::{OPTION_NSID, OPTION_PADDING, has_option};
pub(crate) use edns::{
    cut_to_question, for_each_option, is_per_client_option, plain_query, with_option,
};
pub(crate) use header::{
    HEADER_LEN, RCODE_NOERROR, RCODE_NXDOMAIN, RCODE_SERVFAIL, checking_disabled, clear_unasked_ad,
    copy_request_bits, first_question, id, is_response, is_truncated, opcode, question_count,
    question_name, question_type, rcode, same_question, set_id, with_question,
};
#[cfg(test)]
pub(crate) use header::{authentic_data, first_question_name};
pub(crate) use name::{MAX_NAME, find_suffix, is_label_start, lowercase_name, walk_name};
pub use records::for_each_record;
pub(crate) use records::{Section, TYPE_SOA, questions_end, rewrite_ttls, ttl_value};
#[cfg(any(test, feature = "testing"))]
pub(crate) use records::{set_ttl, ttl_fields};
pub(crate) use walk::walks_fully;
pub(crate) use writer::MessageWriter;

/// The largest message a DNS transport can carry (TCP's 2-byte length prefix).
pub(crate) const MAX_MESSAGE: usize = 65_535;

/// The UDP payload a client without EDNS accepts (RFC 1035).
pub(crate) const CLASSIC_UDP_SIZE: usize = 512;

/// The largest reply meshdns sends in one datagram, whatever payload size the client
/// advertises: what an IPv4 datagram carries (65,535 − 20 bytes of IP header − 8 of UDP). An
/// IPv6 datagram carries 20 bytes more; one bound for both families keeps the rule simple, and
/// a reply sized to an advertised 65,535 could not be sent at all.
pub(crate) const MAX_UDP_REPLY: usize = 65_507;

/// The framing of DNS over TCP and over TLS (RFC 1035 §4.2.2, RFC 7858): a 2-byte length
/// prefix. A frame announcing more than `max` bytes is an error (the connection is then
/// closed); the buffer grows as bytes arrive, never to what a frame merely announces.
pub(crate) fn tcp_codec(max: usize) -> tokio_util::codec::LengthDelimitedCodec {
    tokio_util::codec::LengthDelimitedCodec::builder()
        .length_field_length(2)
        .max_frame_length(max)
        .new_codec()
}

/// A message with its 2-byte length prefix, as a whole frame to queue (DNS over TLS keeps
/// frames to re-send them on a new connection); `None` when it is longer than a prefix can say.
pub(crate) fn tcp_framed(msg: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(msg.len()).ok()?;
    let mut framed = Vec::with_capacity(msg.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(msg);
    Some(framed)
}

/// The transport a message travels on: it decides how large a reply may be, and it is the
/// `proto` label of the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proto {
    Udp,
    Tcp,
    /// DNS over TLS (RFC 7858): TCP's framing and limits inside a TLS session.
    Tls,
}

impl Proto {
    pub(crate) const ALL: [Proto; 3] = [Proto::Udp, Proto::Tcp, Proto::Tls];

    /// How large a reply may be: over UDP the client's EDNS payload size (512 without EDNS,
    /// and never less, RFC 6891; never more than [`MAX_UDP_REPLY`]), over TCP any size.
    pub(crate) fn reply_limit(self, edns_payload: Option<u16>) -> usize {
        match self {
            Proto::Udp => {
                usize::from(edns_payload.unwrap_or(0)).clamp(CLASSIC_UDP_SIZE, MAX_UDP_REPLY)
            }
            Proto::Tcp | Proto::Tls => MAX_MESSAGE,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
            Proto::Tls => "tls",
        }
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RData, Record, RecordType, rdata::A};

    use super::records::TYPE_OPT;
    use super::*;

    fn sample() -> Vec<u8> {
        let name = Name::from_ascii("Mongo-0.mongo.db.svc.cluster.local.").unwrap();
        let mut msg = Message::response(0x1234, hickory_proto::op::OpCode::Query);
        msg.add_query(Query::query(name.clone(), RecordType::A));
        let answer = Record::from_rdata(name.clone(), 30, RData::A(A::new(10, 1, 0, 1)));
        msg.add_answer(answer);
        msg.add_additional(Record::from_rdata(name, 7, RData::A(A::new(10, 1, 0, 2))));
        msg.set_edns(hickory_proto::op::Edns::new());
        msg.to_vec().unwrap()
    }

    #[test]
    fn header_fields_read_and_patch() {
        let mut msg = sample();
        assert_eq!(id(&msg), Some(0x1234));
        set_id(&mut msg, 7);
        assert_eq!(id(&msg), Some(7));
        assert!(is_response(&msg));
        assert!(!is_truncated(&msg));
        assert_eq!(question_count(&msg), Some(1));
    }

    #[test]
    fn ttl_fields_skip_the_opt_record() {
        let mut msg = sample();
        let fields = ttl_fields(&msg).unwrap();
        assert_eq!(fields.iter().map(|f| f.ttl).collect::<Vec<_>>(), [30, 7]);
        set_ttl(&mut msg, fields[0], 3);
        let parsed = Message::from_vec(&msg).unwrap();
        assert_eq!(parsed.answers[0].ttl, 3);
        assert_eq!(parsed.additionals[0].ttl, 7);
    }

    #[test]
    fn questions_compare_ignoring_case() {
        let same = |a: &[u8], b: &[u8]| {
            same_question(first_question(a).unwrap(), first_question(b).unwrap())
        };
        let a = sample();
        let mut b = sample();
        b[HEADER_LEN + 1] = b'm';
        assert!(same(&a, &b));
        b[HEADER_LEN + 2] = b'x';
        assert!(!same(&a, &b));
    }

    #[test]
    fn truncated_and_garbage_input_gives_none() {
        let msg = sample();
        for cut in 0..msg.len() {
            let _ = ttl_fields(&msg[..cut]);
            let _ = first_question(&msg[..cut]);
        }
        assert_eq!(ttl_fields(&msg[..msg.len() - 1]), None);
        assert_eq!(id(&[1]), None);
        let mut looping = msg.clone();
        looping[HEADER_LEN] = 0x40; // reserved label type
        assert_eq!(first_question(&looping), None);
        // A first question whose name is longer than 255 bytes (labels of 63) is malformed.
        let mut long = msg[..HEADER_LEN].to_vec();
        for _ in 0..4 {
            long.push(63);
            long.extend_from_slice(&[b'a'; 63]);
        }
        long.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert_eq!(first_question(&long), None);
        long.drain(HEADER_LEN..HEADER_LEN + 64);
        assert!(first_question(&long).is_some());
        let mut pointing = msg.clone();
        pointing[HEADER_LEN..HEADER_LEN + 2].copy_from_slice(&[0xc0, 0x0c]); // to itself
        assert_eq!(first_question(&pointing), None);
    }

    #[test]
    fn records_are_walked_by_section_and_opt_is_read() {
        let msg = sample();
        let mut seen = Vec::new();
        for_each_record(&msg, |r| seen.push((r.section, r.rtype))).unwrap();
        assert_eq!(
            seen,
            [
                (Section::Answer, 1),
                (Section::Additional, 1),
                (Section::Additional, TYPE_OPT)
            ]
        );
        let info = opt(&msg).unwrap().unwrap();
        assert!(!info.dnssec_ok);
        assert_eq!(info.extended_rcode, 0);
        let mut plain = Message::query();
        plain.add_query(Query::query(Name::root(), RecordType::NS));
        assert_eq!(opt(&plain.to_vec().unwrap()), Some(None));
    }

    #[test]
    fn header_bits_read_and_copy() {
        let mut msg = sample();
        assert_eq!(opcode(&msg), Some(0));
        assert!(!checking_disabled(&msg));
        msg[3] |= 0x10;
        assert!(checking_disabled(&msg));
        msg[3] &= !0x10;
        let mut request = [0u8; HEADER_LEN];
        request[2] = 0x01;
        request[3] = 0x10;
        copy_request_bits(&mut msg, &request);
        assert_eq!(msg[2] & 0x01, 0x01);
        assert!(checking_disabled(&msg));
        copy_request_bits(&mut msg, &[0u8; HEADER_LEN]);
        assert_eq!(msg[2] & 0x01, 0);
        assert!(!checking_disabled(&msg));
        // AD stays for a request with AD or DO, and only for those (RFC 6840 §5.8).
        let with_ad = [0, 0, 0, 0x20];
        for (request, dnssec_ok, kept) in [
            (&with_ad[..], false, true),
            (&[0u8; 4][..], true, true),
            (&[0u8; 4][..], false, false),
        ] {
            msg[3] |= 0x20;
            clear_unasked_ad(&mut msg, request, dnssec_ok);
            assert_eq!(authentic_data(&msg), kept, "{request:?} {dnssec_ok}");
        }
        for cut in 0..msg.len() {
            let _ = opt(&msg[..cut]);
            let _ = for_each_record(&msg[..cut], |_| {});
        }
    }
}
