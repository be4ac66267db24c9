//! Replies meshdns writes itself — errors, refusals, synthesized answers — and fitting any reply
//! into the size a client accepts.
//!
//! Every reply echoes the client's ID, opcode, RD and CD bits and its question as spelled. A
//! client that sent EDNS gets an OPT record back (RFC 6891); one that did not gets none.
//!
//! It owns the shape of those replies and the cut to a size; which reply a query gets is its
//! caller's.

use std::time::Duration;

use std::collections::HashMap;

use hickory_proto::ProtoError;
use hickory_proto::op::{Edns, HeaderCounts, Message, MessageType, Metadata, ResponseCode};
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::{Name, RData, Record};
use hickory_proto::serialize::binary::BinEncodable;

use crate::wire;

/// The UDP payload size meshdns advertises (the DNS Flag Day 2020 value).
pub(crate) const ADVERTISED_UDP_SIZE: u16 = 1232;

/// EDNS option code of an Extended DNS Error (RFC 8914).
pub(crate) const EDE_OPTION: u16 = 15;

/// Extended DNS Error info codes used by meshdns (RFC 8914 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtendedError {
    /// 0: Other Error, the text says what (RFC 8914 has no code for a forwarding loop).
    Other = 0,
    /// 22: no upstream answered in time.
    NoReachableAuthority = 22,
    /// 23: an upstream answered with an error.
    NetworkError = 23,
}

/// A reply built from the raw request header, for requests that could not be parsed or are
/// refused before parsing: ID, opcode and RD echoed, the question copied when it can be found.
/// `None` when not even a header is there, or when the bytes are a response: answering a
/// response (even with REFUSED to a source outside `MESHDNS_ALLOW_FROM`) could make meshdns
/// one half of a packet loop, so it is dropped like any unanswerable input.
pub(crate) fn from_header(request: &[u8], rcode: ResponseCode) -> Option<Vec<u8>> {
    let header = request.get(..wire::HEADER_LEN)?;
    if wire::is_response(request) {
        return None;
    }
    let question = match wire::question_count(request) {
        Some(1) => wire::first_question(request),
        _ => None,
    };
    let id = u16::from_be_bytes([header[0], header[1]]);
    let mut reply = Vec::with_capacity(wire::HEADER_LEN + question.map_or(0, <[u8]>::len));
    reply.extend_from_slice(&reply_header(
        id,
        header[2],
        rcode,
        false,
        question.is_some(),
    ));
    wire::copy_request_bits(&mut reply, request);
    reply.extend_from_slice(question.unwrap_or_default());
    Some(reply)
}

/// An empty reply to a parsed request: question echoed, `rcode` set, EDNS when the client
/// used it. Callers add records.
pub(crate) fn synthesized(request: &Message, rcode: ResponseCode) -> Message {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.message_type = MessageType::Response;
    metadata.recursion_available = true;
    metadata.response_code = rcode;
    let mut reply = Message::new(request.id, MessageType::Response, request.op_code);
    reply.metadata = metadata;
    reply.queries = request.queries.clone();
    if let Some(client_edns) = &request.edns {
        let mut edns = Edns::new();
        edns.set_max_payload(ADVERTISED_UDP_SIZE);
        edns.set_dnssec_ok(client_edns.flags().dnssec_ok);
        reply.set_edns(edns);
    }
    reply
}

/// Adds an Extended DNS Error to a reply that carries EDNS (a client without EDNS cannot
/// receive one, and gets the plain rcode).
pub(crate) fn add_extended_error(reply: &mut Message, code: ExtendedError, text: &str) {
    if let Some(edns) = reply.edns.as_mut() {
        let mut data = (code as u16).to_be_bytes().to_vec();
        data.extend_from_slice(text.as_bytes());
        edns.options_mut()
            .insert(EdnsOption::Unknown(EDE_OPTION, data));
    }
}

/// SERVFAIL, with an Extended DNS Error saying why when the client speaks EDNS.
pub(crate) fn servfail(request: &Message, code: ExtendedError, why: &str) -> Message {
    let mut reply = synthesized(request, ResponseCode::ServFail);
    add_extended_error(&mut reply, code, why);
    reply
}

/// The serial of an SOA meshdns synthesizes when it has learnt none from the clusters (a
/// negative answer no cluster was asked for): a negative answer's SOA is read for its TTL and
/// minimum only (RFC 2308 §5).
pub(crate) const SYNTHESIZED_SERIAL: u32 = 1;

/// A negative answer (NXDOMAIN or NODATA) for a zone meshdns speaks for, with the SOA that
/// lets clients cache it (RFC 2308): owned by the zone apex, minimum and TTL `negative_ttl`,
/// serial [`SYNTHESIZED_SERIAL`].
pub(crate) fn negative(
    request: &Message,
    rcode: ResponseCode,
    zone: &Name,
    negative_ttl: Duration,
) -> Message {
    negative_with_serial(request, rcode, zone, negative_ttl, SYNTHESIZED_SERIAL)
}

/// [`negative`] with the SOA's serial given.
pub(crate) fn negative_with_serial(
    request: &Message,
    rcode: ResponseCode,
    zone: &Name,
    negative_ttl: Duration,
    serial: u32,
) -> Message {
    let mut reply = synthesized(request, rcode);
    reply.metadata.authoritative = true;
    reply.add_authority(zone_soa(zone, negative_ttl, serial));
    reply
}

/// The SOA meshdns synthesizes for a zone it speaks for: `ns.` and `hostmaster.` of the zone,
/// `serial`, TTL and minimum `ttl`.
pub(crate) fn zone_soa(zone: &Name, ttl: Duration, serial: u32) -> Record {
    let ttl = u32::try_from(ttl.as_secs()).unwrap_or(u32::MAX);
    let host = |label: &str| zone.prepend_label(label).unwrap_or_else(|_| zone.clone());
    let soa = SOA::new(
        host("ns"),
        host("hostmaster"),
        serial,
        3600,
        600,
        86_400,
        ttl,
    );
    Record::from_rdata(zone.clone(), ttl, RData::SOA(soa))
}

/// SERVFAIL as bytes, ready to send (see [`servfail`]).
pub(crate) fn servfail_bytes(request: &Message, code: ExtendedError, why: &str) -> Vec<u8> {
    encode_fitted(&servfail(request, code, why), wire::MAX_MESSAGE)
}

/// Encodes `msg` in at most `limit` bytes, keeping whole RRsets only (RFC 2181 §9): when the
/// whole message does not fit, additional RRsets go first, from the end, without TC; when the
/// answer and authority sections alone do not fit, the RRsets that do not are left out whole
/// (the additional section with them) and TC is set, so the client asks again over TCP and a
/// client that cannot never takes part of a set for all of it. The OPT record is always kept.
/// Names are compressed wherever a pointer reaches ([`wire::MessageWriter`]), so a big answer
/// fits whole where it can.
pub fn encode_fitted(msg: &Message, limit: usize) -> Vec<u8> {
    match fitted(msg, limit) {
        Ok(Some(bytes)) => bytes,
        // Not even the question and the OPT record fit.
        Ok(None) => encode_servfail_header(msg),
        Err(error) => {
            tracing::warn!(%error, "reply could not be encoded; answering SERVFAIL");
            encode_servfail_header(msg)
        }
    }
}

/// [`encode_fitted`]'s work, in one pass: each RRset is written and, when it goes past the
/// room left, undone.
fn fitted(msg: &Message, limit: usize) -> Result<Option<Vec<u8>>, ProtoError> {
    // The OPT record is kept whatever else is left out: its room is set aside first.
    let opt = msg.edns.as_ref().map(|edns| {
        let mut edns = edns.clone();
        edns.set_rcode_high(msg.response_code.high());
        Record::from(&edns)
    });
    // The OPT record's owner is the root: it is the same size however it is written.
    let opt_size = match &opt {
        Some(opt) => opt.to_bytes()?.len(),
        None => 0,
    };
    let Some(room) = limit.checked_sub(opt_size) else {
        return Ok(None);
    };
    let mut writer = wire::MessageWriter::new(limit.min(msg_size_hint(msg)));
    for query in &msg.queries {
        writer.question(query);
    }
    if writer.size() > room {
        return Ok(None);
    }
    let mut metadata = msg.metadata;
    let (answers, complete) = write_rrsets(&mut writer, &msg.answers, room)?;
    let (authorities, complete) = match complete {
        true => write_rrsets(&mut writer, &msg.authorities, room)?,
        false => (0, false),
    };
    let additionals = match complete {
        true => write_rrsets(&mut writer, &msg.additionals, room)?.0,
        false => 0,
    };
    metadata.truncation |= !complete;
    if let Some(opt) = &opt {
        writer.record(opt)?;
    }
    let counts = HeaderCounts {
        queries: count(msg.queries.len())?,
        answers,
        authorities,
        additionals: additionals + u16::from(opt.is_some()),
    };
    Ok(Some(writer.finish(&metadata, counts)))
}

/// Writes `records` RRset by RRset while they fit in `room`: how many records were written,
/// and whether all were.
fn write_rrsets(
    writer: &mut wire::MessageWriter,
    records: &[Record],
    room: usize,
) -> Result<(u16, bool), ProtoError> {
    let (ordered, ends) = rrsets(records);
    let mut written = 0;
    for end in ends {
        let mark = writer.mark();
        for record in ordered.get(written..end).unwrap_or_default() {
            writer.record(record)?;
        }
        if writer.size() > room {
            writer.undo(mark);
            return Ok((count(written)?, false));
        }
        written = end;
    }
    Ok((count(written)?, true))
}

fn count(records: usize) -> Result<u16, ProtoError> {
    u16::try_from(records).map_err(|_| ProtoError::Message("more records than a header counts"))
}

/// A guess at the encoded size, for the buffer's first allocation: a compressed record is
/// rarely longer than 64 bytes.
fn msg_size_hint(msg: &Message) -> usize {
    let records = msg.answers.len() + msg.authorities.len() + msg.additionals.len();
    wire::HEADER_LEN + 64 * (msg.queries.len() + records + 1)
}

/// The RRset of each record (the same owner ignoring case, type and class, RFC 2181 §5),
/// numbered in order of first appearance; and how many sets there are. A record of the set of
/// the record before it (the usual case: a set's records are adjacent) costs one comparison;
/// only the first of a set is hashed.
pub(crate) fn rrset_ids(records: &[Record]) -> (Vec<usize>, usize) {
    let mut ids: Vec<usize> = Vec::with_capacity(records.len());
    let mut firsts: HashMap<RrsetOf<'_>, usize, foldhash::fast::RandomState> =
        HashMap::with_capacity_and_hasher(records.len(), Default::default());
    let mut previous: Option<(&Record, usize)> = None;
    for record in records {
        let id = match previous {
            Some((before, id)) if same_rrset(before, record) => id,
            _ => {
                let count = firsts.len();
                *firsts.entry(RrsetOf(record)).or_insert(count)
            }
        };
        ids.push(id);
        previous = Some((record, id));
    }
    (ids, firsts.len())
}

/// Whether two records belong to one RRset.
fn same_rrset(a: &Record, b: &Record) -> bool {
    a.record_type() == b.record_type() && a.dns_class == b.dns_class && same_name(&a.name, &b.name)
}

/// `a == b` for names (ASCII case ignored, fully qualified or not), label by label from the
/// left: `Name`'s own comparison goes a character at a time from the right, and was a quarter
/// of the time spent encoding a big answer.
fn same_name(a: &Name, b: &Name) -> bool {
    a.len() == b.len()
        && a.is_fqdn() == b.is_fqdn()
        && a.iter().len() == b.iter().len()
        && a.iter()
            .zip(b.iter())
            .all(|(x, y)| x.eq_ignore_ascii_case(y))
}

/// A record as the key of its RRset: equal as [`same_rrset`] says, hashed by what is quick to
/// read and tells most sets apart (the owner's length and first label, lowercased; the type;
/// the class): a gathered answer's hosts differ in their first label.
struct RrsetOf<'a>(&'a Record);

impl PartialEq for RrsetOf<'_> {
    fn eq(&self, other: &Self) -> bool {
        same_rrset(self.0, other.0)
    }
}

impl Eq for RrsetOf<'_> {}

impl std::hash::Hash for RrsetOf<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut first = [0u8; 63];
        let label = self.0.name.iter().next().unwrap_or_default();
        let lowered = first.get_mut(..label.len()).unwrap_or_default();
        lowered.copy_from_slice(label.get(..lowered.len()).unwrap_or_default());
        lowered.make_ascii_lowercase();
        state.write(lowered);
        state.write_usize(self.0.name.len());
        state.write_u16(u16::from(self.0.record_type()));
        state.write_u16(u16::from(self.0.dns_class));
    }
}

/// Records grouped into RRsets in order of first appearance (each set's records in their
/// order): the records, and where each set ends.
fn rrsets(records: &[Record]) -> (Vec<&Record>, Vec<usize>) {
    let (ids, count) = rrset_ids(records);
    let mut order: Vec<usize> = (0..records.len()).collect();
    // Stable, and one pass when the sets are adjacent already.
    order.sort_by_key(|&i| ids[i]);
    let mut ends = Vec::with_capacity(count);
    for (position, pair) in order.windows(2).enumerate() {
        if ids[pair[0]] != ids[pair[1]] {
            ends.push(position + 1);
        }
    }
    if !order.is_empty() {
        ends.push(order.len());
    }
    (order.into_iter().map(|i| &records[i]).collect(), ends)
}

/// A complete reply in wire form, cut to `limit` when it is larger (parsed and re-encoded only
/// then: the common case returns the bytes untouched).
pub(crate) fn fit_wire(reply: Vec<u8>, limit: usize) -> Vec<u8> {
    if reply.len() <= limit {
        return reply;
    }
    match Message::from_vec(&reply) {
        Ok(full) => encode_fitted(&full, limit),
        // A reply hickory cannot re-encode (it walks, or it would not have been accepted, but
        // holds data hickory rejects): nothing partial, and the client asks again over TCP.
        Err(_) => wire::cut_to_question(&reply),
    }
}

fn encode_servfail_header(msg: &Message) -> Vec<u8> {
    let flags = (u8::from(msg.op_code) << 3) | u8::from(msg.recursion_desired);
    reply_header(msg.id, flags, ResponseCode::ServFail, true, false).to_vec()
}

/// The one place a reply header is built from bytes: QR set, the opcode and RD of
/// `request_flags` (the request's third header byte), AA and TC clear, RA as given, the rcode,
/// and a question count of 1 or 0 (no other section).
fn reply_header(
    id: u16,
    request_flags: u8,
    rcode: ResponseCode,
    recursion_available: bool,
    question: bool,
) -> [u8; wire::HEADER_LEN] {
    let mut header = [0u8; wire::HEADER_LEN];
    header[..2].copy_from_slice(&id.to_be_bytes());
    header[2] = 0x80 | (request_flags & 0x79);
    header[3] = (u8::from(recursion_available) << 7) | (rcode.low() & 0x0f);
    header[5] = u8::from(question);
    header
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{OpCode, Query};
    use hickory_proto::rr::rdata::opt::EdnsCode;
    use hickory_proto::rr::{Name, RData, Record, RecordType, rdata::A};
    use proptest::prelude::*;

    use super::*;
    use crate::config::tests::{name, property};

    fn request(edns: bool) -> Message {
        let mut msg = Message::query();
        msg.metadata.id = 4242;
        msg.metadata.recursion_desired = true;
        let name = Name::from_ascii("Big.Example.").unwrap();
        msg.add_query(Query::query(name, RecordType::A));
        if edns {
            msg.set_edns(Edns::new());
        }
        msg
    }

    #[test]
    fn header_replies_echo_id_opcode_and_question() {
        let query = request(false).to_vec().unwrap();
        let reply = from_header(&query, ResponseCode::Refused).unwrap();
        let parsed = Message::from_vec(&reply).unwrap();
        assert_eq!(parsed.id, 4242);
        assert_eq!(parsed.response_code, ResponseCode::Refused);
        assert!(parsed.recursion_desired);
        assert_eq!(parsed.queries[0].name().to_ascii(), "Big.Example.");
        assert!(from_header(&query[..5], ResponseCode::FormErr).is_none());
        let header_only = from_header(&query[..13], ResponseCode::FormErr).unwrap();
        assert_eq!(Message::from_vec(&header_only).unwrap().queries.len(), 0);
        let mut response = query.clone();
        response[2] |= 0x80;
        assert!(from_header(&response, ResponseCode::Refused).is_none());
    }

    #[test]
    fn synthesized_replies_use_edns_only_when_the_client_did() {
        let without = synthesized(&request(false), ResponseCode::NXDomain);
        assert!(without.edns.is_none());
        let with = synthesized(&request(true), ResponseCode::NXDomain);
        assert_eq!(
            with.edns.as_ref().unwrap().max_payload(),
            ADVERTISED_UDP_SIZE
        );
    }

    #[test]
    fn servfail_carries_an_extended_error_for_edns_clients() {
        let reply = servfail(
            &request(true),
            ExtendedError::NoReachableAuthority,
            "no cluster answered",
        );
        let bytes = reply.to_vec().unwrap();
        let parsed = Message::from_vec(&bytes).unwrap();
        let options = parsed.edns.unwrap();
        assert!(options.option(EdnsCode::Unknown(15)).is_some());
    }

    /// An A record of `owner`, TTL 30.
    fn a_record(owner: &str, [a, b, c, d]: [u8; 4]) -> Record {
        let owner = Name::from_ascii(owner).unwrap();
        Record::from_rdata(owner, 30, RData::A(A::new(a, b, c, d)))
    }

    fn a_records(reply: &mut Message, owner: &str, count: u8) {
        for i in 0..count {
            reply.add_answer(a_record(owner, [10, 0, 0, i]));
        }
    }

    #[test]
    fn an_rrset_that_does_not_fit_is_left_out_whole_with_tc_and_opt_kept() {
        let mut reply = synthesized(&request(true), ResponseCode::NoError);
        a_records(&mut reply, "big.example.", 100);
        let full = encode_fitted(&reply, wire::MAX_MESSAGE);
        assert!(!wire::is_truncated(&full));
        let cut = encode_fitted(&reply, 512);
        assert!(cut.len() <= 512);
        assert!(wire::is_truncated(&cut));
        let parsed = Message::from_vec(&cut).unwrap();
        assert!(parsed.edns.is_some());
        assert_eq!(parsed.answers.len(), 0, "all of the set or none of it");
    }

    #[test]
    fn whole_rrsets_that_fit_are_kept_in_order_with_tc() {
        let mut reply = synthesized(&request(true), ResponseCode::NoError);
        a_records(&mut reply, "a.example.", 10);
        a_records(&mut reply, "b.example.", 10);
        a_records(&mut reply, "c.example.", 10);
        let cut = encode_fitted(&reply, 512);
        assert!(wire::is_truncated(&cut));
        let parsed = Message::from_vec(&cut).unwrap();
        let owners: Vec<String> = parsed.answers.iter().map(|r| r.name.to_ascii()).collect();
        assert_eq!(owners.len() % 10, 0, "{owners:?}");
        assert!(!owners.is_empty() && owners.len() < 30);
        assert!(owners.iter().take(10).all(|o| o == "a.example."));
    }

    #[test]
    fn additional_records_go_first_without_tc() {
        let mut reply = synthesized(&request(true), ResponseCode::NoError);
        a_records(&mut reply, "a.example.", 5);
        for i in 0..40u8 {
            reply.add_additional(a_record(&format!("glue-{i}.example."), [10, 1, 0, i]));
        }
        let cut = encode_fitted(&reply, 512);
        assert!(!wire::is_truncated(&cut), "answers complete: no TC");
        let parsed = Message::from_vec(&cut).unwrap();
        assert_eq!(parsed.answers.len(), 5);
        assert!(parsed.additionals.len() < 40);
        assert!(parsed.edns.is_some());
    }

    #[test]
    fn over_tcp_only_an_answer_section_too_large_for_any_message_is_cut_whole_with_tc() {
        let mut reply = synthesized(&request(true), ResponseCode::NoError);
        a_records(&mut reply, "small.example.", 3);
        // 250 sets of 250 addresses: over 1 MB, compressed or not.
        for set in 0..250 {
            a_records(&mut reply, &format!("set-{set}.example."), 250);
        }
        reply.add_additional(a_record("glue.example.", [10, 1, 0, 1]));
        let cut = encode_fitted(&reply, wire::MAX_MESSAGE);
        assert!(cut.len() <= wire::MAX_MESSAGE);
        assert!(wire::is_truncated(&cut));
        let parsed = Message::from_vec(&cut).unwrap();
        assert_eq!(parsed.answers.len() % 250, 3, "whole sets only");
        assert!(parsed.answers.len() > 3 + 250, "as many sets as fit");
        assert!(parsed.additionals.is_empty(), "no glue beside a cut answer");
        assert!(parsed.edns.is_some());
    }

    #[test]
    fn a_udp_reply_is_never_larger_than_one_datagram() {
        let limit = wire::Proto::Udp.reply_limit(Some(u16::MAX));
        assert_eq!(limit, wire::MAX_UDP_REPLY);
        let mut reply = synthesized(&request(true), ResponseCode::NoError);
        a_records(&mut reply, "big.example.", 100);
        // Glue until the whole reply is larger than a datagram carries (a record of glue is
        // 26 bytes: a TCP message still holds it all).
        let mut glue = 0u32;
        loop {
            let size = encode_fitted(&reply, wire::MAX_MESSAGE).len();
            if size > wire::MAX_UDP_REPLY {
                break;
            }
            for _ in 0..((wire::MAX_UDP_REPLY - size) / 26).max(1) {
                let [_, _, high, low] = glue.to_be_bytes();
                let owner = format!("glue-{glue}.example.");
                reply.add_additional(a_record(&owner, [10, 2, high, low]));
                glue += 1;
            }
        }
        let whole = encode_fitted(&reply, wire::MAX_MESSAGE);
        assert!(whole.len() > wire::MAX_UDP_REPLY && !wire::is_truncated(&whole));
        let cut = fit_wire(whole, limit);
        assert!(cut.len() <= wire::MAX_UDP_REPLY);
        assert!(!wire::is_truncated(&cut), "only glue had to go");
        assert_eq!(Message::from_vec(&cut).unwrap().answers.len(), 100);
    }

    #[test]
    fn a_header_reply_echoes_the_cd_bit() {
        let mut query = request(false);
        query.metadata.checking_disabled = true;
        let reply = from_header(&query.to_vec().unwrap(), ResponseCode::Refused).unwrap();
        assert!(wire::checking_disabled(&reply));
    }

    proptest! {
        #![proptest_config(property(256))]

        #[test]
        fn an_encoded_reply_never_exceeds_the_clients_size(
            answers in 0usize..300,
            name_len in 1usize..60,
            edns in any::<bool>(),
            limit in 512usize..=65_535,
        ) {
            let owner = name(&format!("{}.example.", "x".repeat(name_len)));
            let mut reply = Message::response(7, OpCode::Query);
            reply.add_query(Query::query(owner.clone(), RecordType::A));
            if edns {
                reply.set_edns(Edns::new());
            }
            for i in 0..answers {
                let ip = A::new(10, (i >> 8) as u8, i as u8, 1);
                reply.add_answer(Record::from_rdata(owner.clone(), 30, RData::A(ip)));
                reply.add_additional(Record::from_rdata(name(&format!("h{i}.example.")), 30, RData::A(ip)));
            }
            let out = encode_fitted(&reply, limit);
            prop_assert!(out.len() <= limit, "{} > {}", out.len(), limit);
            let parsed = Message::from_vec(&out).unwrap();
            prop_assert_eq!(parsed.id, 7);
            prop_assert_eq!(parsed.edns.is_some(), edns, "OPT kept when the client sent one");
            let full = reply.to_vec().unwrap();
            let cut = fit_wire(full.clone(), limit);
            prop_assert!(cut.len() <= limit);
            // Whole RRsets only (docs/design.md, "Truncation"): additional records go first,
            // without TC; TC says the answer RRset was left out, and then none of it is there.
            if full.len() <= limit {
                prop_assert!(!parsed.truncation);
            }
            let kept = parsed.answers.len();
            prop_assert!(kept == 0 || kept == answers, "{} of the {} records of one RRset", kept, answers);
            prop_assert_eq!(parsed.truncation, kept < answers);
        }
    }

    /// A name from a small pool of labels in both cases, so that names share suffixes (and
    /// differ only in case) often.
    fn pooled_name() -> impl Strategy<Value = Name> {
        let label =
            prop::sample::select(vec!["mongo", "Mongo", "db", "DB", "svc", "a-mongo-1", "x"]);
        let zone = prop::sample::select(vec!["cluster.local.", "distributed.local.", "Cluster.B."]);
        (prop::collection::vec(label, 0..5), zone).prop_map(|(labels, zone)| {
            name(&format!(
                "{}{zone}",
                labels.iter().map(|l| format!("{l}.")).collect::<String>()
            ))
        })
    }

    /// A record of a type with a name inside (compressed or not) or without one.
    fn any_record() -> impl Strategy<Value = Record> {
        use hickory_proto::rr::rdata::{CNAME, MX, NS, PTR, SRV, TXT};
        (
            pooled_name(),
            pooled_name(),
            pooled_name(),
            0u8..8,
            any::<u16>(),
        )
            .prop_map(|(owner, n1, n2, kind, number)| {
                let data = match kind {
                    0 => RData::A(A::new(10, 0, (number >> 8) as u8, number as u8)),
                    1 => RData::SRV(SRV::new(0, 50, number, n1)),
                    2 => RData::CNAME(CNAME(n1)),
                    3 => RData::MX(MX::new(number, n1)),
                    4 => RData::NS(NS(n1)),
                    5 => RData::PTR(PTR(n1)),
                    6 => RData::SOA(SOA::new(n1, n2, u32::from(number), 1, 2, 3, 4)),
                    _ => RData::TXT(TXT::new(vec![format!("t{number}")])),
                };
                Record::from_rdata(owner, 30, data)
            })
    }

    /// Records as sorted `owner type data` lines, the owner's case kept.
    fn lines(records: &[Record]) -> Vec<String> {
        let mut lines: Vec<String> = records
            .iter()
            .map(|r| format!("{} {} {:?}", r.name.to_ascii(), r.record_type(), r.data))
            .collect();
        lines.sort();
        lines
    }

    proptest! {
        #![proptest_config(property(24))]

        #[test]
        fn every_reply_reads_back_as_written_however_many_names_it_holds(
            question in pooled_name(),
            answers in prop::collection::vec(any_record(), 0..900),
            authorities in prop::collection::vec(any_record(), 0..3),
            additionals in prop::collection::vec(any_record(), 0..900),
        ) {
            let mut reply = Message::response(9, OpCode::Query);
            reply.add_query(Query::query(question, RecordType::ANY));
            reply.answers = answers;
            reply.authorities = authorities;
            reply.additionals = additionals;
            reply.set_edns(Edns::new());
            let out = encode_fitted(&reply, 65_535);
            prop_assert!(out.len() <= 65_535);
            let parsed = Message::from_vec(&out).unwrap();
            prop_assert!(parsed.queries[0].name().eq_case(reply.queries[0].name()));
            // Whole RRsets are kept or left out; those kept read back byte for byte (names with
            // their case), whatever pointer they were written with.
            let kept = |got: &[Record], all: &[Record]| {
                all.iter().filter(|r| got.iter().any(|g| g.name.eq_case(&r.name) && g.record_type() == r.record_type())).cloned().collect::<Vec<_>>()
            };
            for (got, all) in [
                (&parsed.answers, &reply.answers),
                (&parsed.authorities, &reply.authorities),
                (&parsed.additionals, &reply.additionals),
            ] {
                prop_assert_eq!(lines(got), lines(&kept(got, all)));
            }
            if !parsed.truncation {
                prop_assert_eq!(lines(&parsed.answers), lines(&reply.answers));
                prop_assert_eq!(lines(&parsed.authorities), lines(&reply.authorities));
            }
        }
    }
}
