//! The one view of a client's query: its bytes read once, when the query arrives, into a
//! [`Request`] that every route uses — the header, the question's range, the OPT record with
//! its options' range, whether it carries this process's loop marker, and the cache key.
//! hickory's `BinDecoder` reads the header and the question; a full [`Message`] is made from
//! the view only where a reply is synthesized ([`Request::message`]).
//!
//! The first look also decides whether the query can be served or must be answered at once
//! (FORMERR, NOTIMP, BADVERS) or dropped. Dropped: anything without a full header, and
//! responses (QR set) — answering those could make meshdns one half of a packet loop.
//! Everything else gets an answer (docs/design.md, "Limits and bad input"): FORMERR for what
//! does not parse (two OPT records, a question name with a compression pointer or longer than
//! 255 bytes, garbage after the header), NOTIMP for other opcodes, BADVERS for EDNS versions
//! above 0. A plain query ([`wire::plain_query`]: one question, at most an OPT record, the
//! cache-hit path's walk) is known well-formed from that walk; anything else is parsed whole
//! by hickory to be judged.
//!
//! EDNS options are not judged here: hickory parses some strictly (a CLIENT-SUBNET option of
//! an unknown address family is an error to it, not to the protocol), so they are read only
//! as ranges of the bytes, and travel on unparsed: every route relays the client's options but
//! the hop-by-hop ones ([`wire::is_hop_by_hop_option`]), another meshdns's loop marker
//! included ([`Request::for_peer`], [`Request::for_leg`]).
//!
//! It answers only what cannot be served (the FORMERR, NOTIMP and BADVERS above); which way a
//! query goes is `route`'s, and what a loop gets `loops`'s.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use hickory_proto::op::{Edns, Header, Message, Metadata, OpCode, Query, ResponseCode};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::cache::{CacheKey, KeyFlags, TargetId, may_share};
use crate::reply;
use crate::upstream::marker;
use crate::wire::{self, OptInfo};

/// What to do with a datagram or TCP frame.
#[derive(Debug)]
pub(crate) enum Inspected {
    /// A well-formed standard query with exactly one question (shared: its resolution may
    /// finish in the background).
    Query(Arc<Request>),
    /// A reply to send back right away.
    Reply(Vec<u8>),
    /// Nothing to answer.
    Drop,
}

/// What the cache-hit path reads of a plain query: enough to look it up and, on a miss, to
/// make its [`Request`] without walking the bytes again.
#[derive(Debug, Clone)]
pub(crate) struct Plain {
    /// Where the question (name, type, class) ends; it starts right after the header.
    question_end: usize,
    opt: Option<OptInfo>,
    /// The question's cache key.
    key: Option<CacheKey>,
    /// Whether its reply may be shared ([`may_share`]).
    shared: bool,
}

impl Plain {
    /// The view of `bytes` when it is a plain query ([`wire::plain_query`]).
    pub(crate) fn read(bytes: &[u8]) -> Option<Plain> {
        let query = wire::plain_query(bytes)?;
        let opt = query.opt;
        let question_end = wire::HEADER_LEN + query.question.len();
        let shared = may_share(query.question, opt.as_ref());
        Some(Plain {
            question_end,
            opt,
            shared,
            // Built last: with a field computed after it, the compiler built the key (136
            // bytes) aside and copied it once more on every cache hit.
            key: CacheKey::for_client(query.question, KeyFlags::of_query(bytes, opt.as_ref())),
        })
    }

    /// The key to look the query up and share its answer under: `None` when its reply may not
    /// be shared.
    pub(crate) fn shared_key(&self) -> Option<&CacheKey> {
        self.key.as_ref().filter(|_| self.shared)
    }

    /// Files the key under `target`, the target of the query's route
    /// ([`CacheKey::set_target`]).
    pub(crate) fn set_target(&mut self, target: TargetId) {
        if let Some(key) = &mut self.key {
            key.set_target(target);
        }
    }

    /// The question's bytes (name, type, class) in `bytes`, the query this view was read from.
    pub(crate) fn question<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        bytes
            .get(wire::HEADER_LEN..self.question_end)
            .unwrap_or_default()
    }

    /// The client's UDP payload size, when it sent an OPT record.
    pub(crate) fn payload(&self) -> Option<u16> {
        self.opt.map(|o| o.payload)
    }
}

/// A query to be served, read once (see the module documentation).
#[derive(Debug)]
pub(crate) struct Request {
    bytes: Bytes,
    view: Plain,
    /// The header, as hickory reads it.
    metadata: Metadata,
    /// The question, as hickory reads it.
    query: Query,
    /// The query carries this process's loop marker: meshdns sent it, and it came back.
    came_back: bool,
    /// Made from the view on first use: only where a reply is synthesized.
    message: OnceLock<Message>,
}

/// Classifies client bytes; never panics on any input. `plain` is what the cache-hit path
/// read of them, if it did.
pub(crate) fn inspect(bytes: Bytes, plain: Option<Plain>) -> Inspected {
    if bytes.len() < wire::HEADER_LEN || wire::is_response(&bytes) {
        return Inspected::Drop;
    }
    match plain.or_else(|| Plain::read(&bytes)) {
        Some(view) => read_plain(bytes, view),
        None => read_whole(bytes),
    }
}

/// A plain query: its header and question read by hickory; the walk that found it plain
/// checked everything else (a standard query, version 0, no marker, nothing after the OPT).
fn read_plain(bytes: Bytes, view: Plain) -> Inspected {
    let mut decoder = BinDecoder::new(&bytes);
    let read =
        Header::read(&mut decoder).and_then(|header| Ok((header, Query::read(&mut decoder)?)));
    let Ok((header, query)) = read else {
        return formerr(&bytes);
    };
    Inspected::Query(Arc::new(Request {
        metadata: header.metadata,
        query,
        came_back: false,
        message: OnceLock::new(),
        view,
        bytes,
    }))
}

/// Anything else: parsed whole, to be judged; the options taken off first (see the module
/// documentation).
fn read_whole(bytes: Bytes) -> Inspected {
    let without_options = wire::without_options(&bytes, |_| true);
    let parsed = Message::from_vec(without_options.as_deref().unwrap_or(&bytes));
    let Ok(msg) = parsed else {
        return formerr(&bytes);
    };
    // The question as the router reads it: one, of plain labels. hickory also follows a
    // compression pointer there, to a name the client never wrote (into the header, say).
    let question = wire::first_question(&bytes).filter(|_| msg.queries.len() == 1);
    let refusal = if msg.op_code != OpCode::Query {
        Some(ResponseCode::NotImp)
    } else if question.is_none() {
        Some(ResponseCode::FormErr)
    } else if msg.edns.as_ref().is_some_and(|e| e.version() > 0) {
        Some(ResponseCode::BADVERS)
    } else {
        None
    };
    let (Some(question), None, Some(query)) = (question, refusal, msg.queries.first()) else {
        let mut answer = reply::synthesized(&msg, refusal.unwrap_or(ResponseCode::FormErr));
        if question.is_none() {
            // Echoed, it would be a question the client did not send.
            answer.queries.clear();
        }
        return Inspected::Reply(reply::encode_fitted(&answer, wire::CLASSIC_UDP_SIZE));
    };
    // hickory took the whole message, options included: the records and options walk.
    let opt = wire::opt(&bytes).flatten();
    let came_back = opt.is_some_and(|opt| {
        let mut ours = false;
        let _ = wire::for_each_option(&bytes, opt.options_at, |code, range| {
            ours |= code == wire::OPTION_LOOP_MARKER
                && bytes
                    .get(range.start + 4..range.end)
                    .is_some_and(marker::is_ours);
        });
        ours
    });
    let flags = KeyFlags::of_query(&bytes, opt.as_ref());
    let view = Plain {
        question_end: wire::HEADER_LEN + question.len(),
        key: CacheKey::for_client(question, flags),
        shared: false,
        opt,
    };
    let (metadata, query) = (msg.metadata, query.clone());
    Inspected::Query(Arc::new(Request {
        metadata,
        query,
        came_back,
        message: OnceLock::from(msg),
        view,
        bytes,
    }))
}

fn formerr(bytes: &[u8]) -> Inspected {
    reply::from_header(bytes, ResponseCode::FormErr).map_or(Inspected::Drop, Inspected::Reply)
}

impl Request {
    /// The client's ID.
    pub(crate) fn id(&self) -> u16 {
        self.metadata.id
    }

    /// The client's bytes, as they arrived.
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The question's bytes: name (plain labels), type, class.
    pub(crate) fn question(&self) -> &[u8] {
        self.view.question(&self.bytes)
    }

    /// The question's name in wire form: what the router reads.
    pub(crate) fn name(&self) -> &[u8] {
        wire::question_name(self.question()).unwrap_or_default()
    }

    /// The question as hickory reads it.
    pub(crate) fn query(&self) -> &Query {
        &self.query
    }

    /// The client's OPT record, when it sent one.
    pub(crate) fn opt(&self) -> Option<&OptInfo> {
        self.view.opt.as_ref()
    }

    /// The DO bit: the client wants DNSSEC records.
    pub(crate) fn dnssec_ok(&self) -> bool {
        self.opt().is_some_and(|o| o.dnssec_ok)
    }

    /// Whether the query carries this process's loop marker (see `loops`).
    pub(crate) fn came_back(&self) -> bool {
        self.came_back
    }

    /// The cache key of the question, whether or not its reply may be shared.
    pub(crate) fn key(&self) -> Option<&CacheKey> {
        self.view.key.as_ref()
    }

    /// The key to share the answer under: `None` unless it is a plain query whose reply may
    /// be shared ([`may_share`]).
    pub(crate) fn shared_key(&self) -> Option<&CacheKey> {
        self.view.shared_key()
    }

    /// The flags the question's cache key was made with.
    pub(crate) fn key_flags(&self) -> KeyFlags {
        KeyFlags::of_query(&self.bytes, self.opt())
    }

    /// The request as a hickory message, for synthesizing a reply (the question echoed, the
    /// header bits copied, EDNS answered in kind); made on first use.
    pub(crate) fn message(&self) -> &Message {
        self.message.get_or_init(|| {
            let mut msg = Message::query();
            msg.metadata = self.metadata;
            msg.add_query(self.query.clone());
            if let Some(opt) = self.opt() {
                let mut edns = Edns::new();
                edns.set_max_payload(opt.payload);
                edns.set_version(opt.version);
                edns.set_dnssec_ok(opt.dnssec_ok);
                msg.set_edns(edns);
            }
            msg
        })
    }

    /// The client's bytes as they are relayed (pass-through, a claimed namespace): all of
    /// them but the hop-by-hop options, which are taken out only when the view saw one.
    pub(crate) fn relayed(&self) -> Cow<'_, [u8]> {
        let hop_by_hop = self.opt().is_some_and(|o| {
            (0..32).any(|code| wire::is_hop_by_hop_option(code) && o.options.contains(code))
        });
        match hop_by_hop
            .then(|| wire::without_options(&self.bytes, wire::is_hop_by_hop_option))
            .flatten()
        {
            Some(without) => Cow::Owned(without),
            None => Cow::Borrowed(&self.bytes),
        }
    }

    /// The client's query as a peer cluster's DNS must see it, with the question's name
    /// `name` (wire form; the client's own for a reverse name): the client's header and
    /// question type and class, and its OPT record without the hop-by-hop options — so another
    /// meshdns's loop marker and CLIENT-SUBNET go along. Records a query has no use for
    /// (answers, authorities, additional records but the OPT) are left out. `None` when `name`
    /// is longer than a name may be.
    pub(crate) fn for_peer(&self, name: &[u8]) -> Option<Vec<u8>> {
        let flags = [*self.bytes.get(2)?, *self.bytes.get(3)?];
        let opt = self.opt().map(|o| (o.payload, self.opt_ttl(o)));
        self.build(name, self.bytes.get(..2)?.try_into().ok()?, flags, opt)
    }

    /// The query of a gathered leg asking `name` (wire form): recursion desired, the client's
    /// CD bit and question type and class, EDNS with meshdns's UDP size (large sets come in
    /// one datagram, or over TCP when truncated) and the client's DO bit, and the client's
    /// options but the hop-by-hop ones. `None` when `name` is too long.
    pub(crate) fn for_leg(&self, name: &[u8]) -> Option<Vec<u8>> {
        const RD: u8 = 0x01;
        const CD: u8 = 0x10;
        let cd = if wire::checking_disabled(&self.bytes) {
            CD
        } else {
            0
        };
        let ttl = if self.dnssec_ok() { 0x8000 } else { 0 };
        self.build(
            name,
            [0, 0],
            [RD, cd],
            Some((reply::ADVERTISED_UDP_SIZE, ttl)),
        )
    }

    /// The TTL field of the client's OPT record (extended RCODE, version, flags), as sent.
    fn opt_ttl(&self, opt: &OptInfo) -> u32 {
        let at = opt.options_at.0.saturating_sub(6);
        self.bytes.get(at..at + 4).map_or(0, |ttl| {
            u32::from_be_bytes([ttl[0], ttl[1], ttl[2], ttl[3]])
        })
    }

    /// A query of `id`, header `flags`, one question (`name`, the client's type and class) and,
    /// when `opt` gives its payload size and TTL field, an OPT record with the client's
    /// options but the hop-by-hop ones.
    fn build(
        &self,
        name: &[u8],
        id: [u8; 2],
        flags: [u8; 2],
        opt: Option<(u16, u32)>,
    ) -> Option<Vec<u8>> {
        if name.len() > wire::MAX_NAME {
            return None;
        }
        let fixed = self
            .question()
            .get(self.question().len().checked_sub(4)?..)?;
        let mut out = Vec::with_capacity(self.bytes.len() + name.len() + 11);
        out.extend_from_slice(&id);
        out.extend_from_slice(&flags);
        out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, u8::from(opt.is_some())]);
        out.extend_from_slice(name);
        out.extend_from_slice(fixed);
        if let Some((payload, ttl)) = opt {
            out.extend_from_slice(&[0, 0, 41]);
            out.extend_from_slice(&payload.to_be_bytes());
            out.extend_from_slice(&ttl.to_be_bytes());
            let length_at = out.len();
            out.extend_from_slice(&[0, 0]);
            if let Some(client) = self.opt() {
                wire::for_each_option(&self.bytes, client.options_at, |code, range| {
                    if let (false, Some(option)) =
                        (wire::is_hop_by_hop_option(code), self.bytes.get(range))
                    {
                        out.extend_from_slice(option);
                    }
                })?;
            }
            let length = u16::try_from(out.len() - length_at - 2).ok()?;
            out[length_at..length_at + 2].copy_from_slice(&length.to_be_bytes());
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Edns, Query};
    use hickory_proto::rr::rdata::opt::EdnsOption;
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    fn query() -> Message {
        let mut msg = Message::query();
        msg.metadata.id = 99;
        let name = Name::from_ascii("a.example.").unwrap();
        msg.add_query(Query::query(name, RecordType::A));
        msg
    }

    fn look(bytes: &[u8]) -> Inspected {
        inspect(Bytes::copy_from_slice(bytes), None)
    }

    /// The RCODE of the reply `bytes` get at once.
    fn rcode_of(bytes: &[u8]) -> ResponseCode {
        match look(bytes) {
            Inspected::Reply(bytes) => Message::from_vec(&bytes).unwrap().response_code,
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    #[test]
    fn a_standard_query_is_served() {
        assert!(matches!(
            look(&query().to_vec().unwrap()),
            Inspected::Query(_)
        ));
    }

    #[test]
    fn other_opcodes_get_notimp() {
        let mut msg = query();
        msg.metadata.op_code = OpCode::Notify;
        assert_eq!(rcode_of(&msg.to_vec().unwrap()), ResponseCode::NotImp);
    }

    #[test]
    fn question_counts_other_than_one_get_formerr() {
        let mut two = query();
        let name = Name::from_ascii("b.example.").unwrap();
        two.add_query(Query::query(name, RecordType::A));
        assert_eq!(rcode_of(&two.to_vec().unwrap()), ResponseCode::FormErr);
        let mut none = query();
        none.queries.clear();
        assert_eq!(rcode_of(&none.to_vec().unwrap()), ResponseCode::FormErr);
    }

    #[test]
    fn unknown_edns_versions_get_badvers() {
        let mut msg = query();
        let mut edns = Edns::new();
        edns.set_version(1);
        msg.set_edns(edns);
        // 16 is BADVERS for OPT (RFC 6891) and BADSIG for TSIG; hickory decodes it as the latter.
        assert_eq!(
            u16::from(rcode_of(&msg.to_vec().unwrap())),
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
        assert_eq!(rcode_of(&bytes), ResponseCode::FormErr);
    }

    #[test]
    fn a_client_subnet_option_of_an_unknown_family_is_passed_on() {
        let mut msg = query();
        let mut edns = Edns::new();
        edns.options_mut()
            .insert(EdnsOption::Unknown(8, vec![0, 99, 0, 0]));
        msg.set_edns(edns);
        assert!(matches!(look(&msg.to_vec().unwrap()), Inspected::Query(_)));
    }

    #[test]
    fn a_question_name_with_a_pointer_gets_formerr_not_silence() {
        // The question name points at the header: hickory follows it, the router cannot.
        let mut bytes = query().to_vec().unwrap();
        bytes.truncate(wire::HEADER_LEN);
        bytes.extend_from_slice(&[0xc0, 0x00, 0, 1, 0, 1]);
        let Inspected::Reply(reply) = look(&bytes) else {
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
        assert_eq!(rcode_of(&bytes), ResponseCode::FormErr);
        assert!(matches!(look(&bytes[..11]), Inspected::Drop));
        let mut response = query().to_vec().unwrap();
        response[2] |= 0x80;
        assert!(matches!(look(&response), Inspected::Drop));
    }

    /// `query()` with `options` in its OPT record (payload 1232, DO set), and RD clear: a peer
    /// gets the client's RD as it is, a gathered leg always asks for recursion.
    fn with_options(options: &[(u16, &[u8])]) -> Vec<u8> {
        let mut msg = query();
        msg.metadata.recursion_desired = false;
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        edns.set_dnssec_ok(true);
        for (code, data) in options {
            edns.options_mut()
                .insert(EdnsOption::Unknown(*code, data.to_vec()));
        }
        msg.set_edns(edns);
        msg.to_vec().unwrap()
    }

    fn served(bytes: &[u8]) -> Arc<Request> {
        match look(bytes) {
            Inspected::Query(request) => request,
            other => panic!("not served: {other:?}"),
        }
    }

    fn option_codes(msg: &[u8]) -> Vec<u16> {
        let opt = wire::opt(msg).unwrap().unwrap();
        let mut codes = Vec::new();
        wire::for_each_option(msg, opt.options_at, |code, _| codes.push(code)).unwrap();
        codes
    }

    #[test]
    fn the_message_made_from_the_view_is_the_one_hickory_parses() {
        let mut cd = query();
        cd.metadata.checking_disabled = true;
        let plain = [
            query().to_vec().unwrap(),
            with_options(&[]),
            with_options(&[(wire::OPTION_NSID, &[])]),
            cd.to_vec().unwrap(),
        ];
        for bytes in plain {
            let request = served(&bytes);
            assert!(request.message.get().is_none(), "made only when asked for");
            let stripped = wire::without_options(&bytes, |_| true).unwrap_or(bytes.clone());
            assert_eq!(request.message(), &Message::from_vec(&stripped).unwrap());
        }
    }

    #[test]
    fn a_peer_gets_every_option_but_the_hop_by_hop_ones_and_the_new_name() {
        let other_meshdns = [0xee; 8];
        let bytes = with_options(&[
            (wire::OPTION_COOKIE, &[1; 8]),
            (wire::OPTION_CLIENT_SUBNET, &[0, 1, 24, 0, 10, 0, 0]),
            (wire::OPTION_PADDING, &[0; 4]),
            (wire::OPTION_LOOP_MARKER, &other_meshdns),
        ]);
        let request = served(&bytes);
        assert!(!request.came_back(), "another meshdns's marker is no loop");
        let name = wire::first_question_name(&with_options(&[]))
            .unwrap()
            .to_vec();
        let mut renamed = name.clone();
        renamed[1] = b'b';
        for (sent, rd, payload) in [
            (request.for_peer(&renamed).unwrap(), false, 1232),
            (
                request.for_leg(&renamed).unwrap(),
                true,
                reply::ADVERTISED_UDP_SIZE,
            ),
        ] {
            assert_eq!(wire::first_question_name(&sent), Some(renamed.as_slice()));
            assert_eq!(
                option_codes(&sent),
                [wire::OPTION_CLIENT_SUBNET, wire::OPTION_LOOP_MARKER]
            );
            assert!(wire::has_option(
                &sent,
                wire::OPTION_LOOP_MARKER,
                &other_meshdns
            ));
            let opt = wire::opt(&sent).unwrap().unwrap();
            assert!(opt.dnssec_ok);
            assert_eq!(opt.payload, payload);
            let parsed =
                Message::from_vec(&wire::without_options(&sent, |_| true).unwrap()).unwrap();
            assert_eq!(parsed.recursion_desired, rd);
            assert_eq!(parsed.queries[0].query_type(), RecordType::A);
        }
        assert_eq!(wire::id(&request.for_peer(&name).unwrap()), Some(99));
        let relayed = request.relayed();
        assert_eq!(
            option_codes(&relayed),
            [wire::OPTION_CLIENT_SUBNET, wire::OPTION_LOOP_MARKER]
        );
        assert!(matches!(
            served(&with_options(&[])).relayed(),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_query_carrying_this_process_marker_came_back() {
        let marked = crate::upstream::marker::Marked::new(&with_options(&[]));
        assert!(served(marked.bytes()).came_back());
        assert!(!served(&with_options(&[])).came_back());
    }
}
