//! What the integration tests share, the behaviour tests and the memory measurements alike: a
//! fake DNS server to stand in for kube-dns and the peer clusters' CoreDNS ([`FakeDns`]),
//! meshdns itself started on 127.0.0.1:0 ([`Meshdns`]), a tiny DNS client ([`udp`], [`tcp`]),
//! the DNS-over-TLS fakes ([`dot`]), the admin server's scrapes ([`admin`]), a kubelet-style
//! ConfigMap directory ([`configmap`]), scratch files ([`scratch`]), a reader of DNS messages
//! as bytes for what hickory cannot check ([`raw`]), and for the memory measurements a
//! counting allocator ([`counting`]) and the typical cache entry ([`typical`]). It may not
//! reach into meshdns beyond what the tests themselves use.
//!
//! Everything binds on loopback port 0: tests never race for ports and never send a packet
//! off the machine.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code)]

pub mod admin;
pub mod configmap;
pub mod counting;
pub mod dot;
pub mod raw;
pub mod scratch;
pub mod typical;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, Metadata, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, SOA, SRV, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long the test client waits for a reply before the test fails.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Fast failure detection, for the tests where an upstream goes silent: an attempt of 200 ms,
/// a query of 1 s.
pub const FAIL_FAST: [(&str, &str); 2] = [
    ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
    ("MESHDNS_TIMEOUT", "1s"),
];

/// The UDP payload size the fake advertises in its OPT record.
const FAKE_EDNS_SIZE: u16 = 1232;

/// The server cookie of a fake with [`FakeDnsBuilder::cookies`].
pub const FAKE_SERVER_COOKIE: &[u8] = b"fakeSrv!";

/// Records for the fake's tables and the tests' expectations, with TTL 30 unless said.
pub mod rr {
    use super::*;

    pub fn name(text: &str) -> Name {
        Name::from_ascii(text).expect("a valid test name")
    }

    /// `host.svc.cluster.local.`: a name as a cluster's DNS of domain `cluster.local` knows it.
    pub fn in_cluster_local(host: &str) -> String {
        format!("{host}.svc.cluster.local.")
    }

    pub fn a(owner: &str, ip: [u8; 4]) -> Record {
        Record::from_rdata(
            name(owner),
            30,
            RData::A(A::from(std::net::Ipv4Addr::from(ip))),
        )
    }

    pub fn aaaa(owner: &str, ip: &str) -> Record {
        let ip: std::net::Ipv6Addr = ip.parse().expect("an IPv6 address");
        Record::from_rdata(name(owner), 30, RData::AAAA(AAAA::from(ip)))
    }

    pub fn srv(owner: &str, port: u16, target: &str) -> Record {
        Record::from_rdata(
            name(owner),
            30,
            RData::SRV(SRV::new(0, 50, port, name(target))),
        )
    }

    /// `record` with its TTL set to `ttl`.
    pub fn with_ttl(mut record: Record, ttl: u32) -> Record {
        record.ttl = ttl;
        record
    }

    pub fn cname(owner: &str, target: &str) -> Record {
        Record::from_rdata(name(owner), 30, RData::CNAME(CNAME(name(target))))
    }

    pub fn ns(owner: &str, target: &str) -> Record {
        Record::from_rdata(name(owner), 30, RData::NS(NS(name(target))))
    }

    pub fn txt(owner: &str, text: &str) -> Record {
        Record::from_rdata(
            name(owner),
            30,
            RData::TXT(TXT::new(vec![text.to_string()])),
        )
    }

    /// The SOA a server puts in the authority section of a negative answer for `zone`.
    pub fn soa(zone: &str) -> Record {
        soa_serial(zone, 1)
    }

    /// [`soa`] with the serial given.
    pub fn soa_serial(zone: &str, serial: u32) -> Record {
        let soa = SOA::new(
            name(&format!("ns.dns.{zone}")),
            name(&format!("hostmaster.{zone}")),
            serial,
            7200,
            1800,
            86_400,
            5,
        );
        Record::from_rdata(name(zone), 5, RData::SOA(soa))
    }
}

/// What the fake puts in a reply: rcode, sections, the AA and AD bits, and EDNS options (sent
/// only to a query that carried EDNS).
#[derive(Debug, Clone)]
pub struct Answer {
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
    pub authoritative: bool,
    pub authentic_data: bool,
    pub options: Vec<EdnsOption>,
}

impl Answer {
    pub fn rcode(rcode: ResponseCode) -> Self {
        Self {
            rcode,
            answers: Vec::new(),
            authorities: Vec::new(),
            additionals: Vec::new(),
            authoritative: false,
            authentic_data: false,
            options: Vec::new(),
        }
    }

    /// NOERROR with these answer records.
    pub fn records(records: impl IntoIterator<Item = Record>) -> Self {
        Self {
            answers: records.into_iter().collect(),
            ..Self::rcode(ResponseCode::NoError)
        }
    }

    /// NXDOMAIN with the SOA of `zone`, as an authoritative server gives it.
    pub fn nxdomain(zone: &str) -> Self {
        Self {
            authorities: vec![rr::soa(zone)],
            authoritative: true,
            ..Self::rcode(ResponseCode::NXDomain)
        }
    }

    /// NOERROR without answers (the name exists, not the type), with the SOA of `zone`.
    pub fn nodata(zone: &str) -> Self {
        Self {
            authorities: vec![rr::soa(zone)],
            authoritative: true,
            ..Self::rcode(ResponseCode::NoError)
        }
    }

    pub fn record(mut self, record: Record) -> Self {
        self.answers.push(record);
        self
    }

    pub fn additional(mut self, record: Record) -> Self {
        self.additionals.push(record);
        self
    }

    pub fn authority(mut self, record: Record) -> Self {
        self.authorities.push(record);
        self
    }
}

/// How the fake treats a query.
#[derive(Debug, Clone)]
pub enum Behaviour {
    Answer(Answer),
    /// The answer, after a pause.
    Delay(Duration, Answer),
    /// Never answer.
    Drop,
    /// Over UDP: TC set and no records; over TCP: the whole answer.
    TruncateUdp(Answer),
    /// A reply with another ID first, then the right one (both transports).
    WrongIdFirst(Answer),
    /// A reply to another question first, then the right one (both transports).
    WrongQuestionFirst(Answer),
    /// Over UDP: `forged` (right ID and question) from another port of the fake's host, then
    /// the real answer from the server's port; over TCP: the real answer.
    ForgedFromAnotherPortFirst {
        forged: Answer,
        real: Answer,
    },
    /// Bytes that are no DNS message, and nothing else.
    Garbage,
    /// Over UDP: TC as [`Behaviour::TruncateUdp`]; over TCP: half a frame, then close.
    CloseTcpMidFrame(Answer),
    /// A reply with another ID, and nothing else (both transports).
    WrongIdOnly(Answer),
    /// A reply to another question, and nothing else (both transports).
    WrongQuestionOnly(Answer),
    /// Over UDP: TC as [`Behaviour::TruncateUdp`]; over TCP: the answer one byte at a time,
    /// a byte every given pause (a peer that trickles).
    TrickleTcp(Duration, Answer),
    /// The answer to the first `n` queries for this name and type, then silence: an upstream
    /// that goes down after it has been cached from (serve-stale, stale leg fill).
    AnswerThenDrop(usize, Answer),
    /// No reply to the first `n` queries for this name and type, then the behaviour: a lost
    /// datagram that the retry recovers.
    DropFirst(usize, Box<Behaviour>),
    /// An error reply with the query's ID and no question section (QDCOUNT=0), as NSD and
    /// CoreDNS send when they cannot parse a query (both transports).
    ErrorWithoutQuestion(ResponseCode),
    /// A malformed reply first — the right one with the owner name of its first record made a
    /// compression pointer to itself (a loop; the answer must have a record) — then, 50 ms
    /// later, the right one (both transports).
    PointerLoopFirst(Answer),
    /// The malformed reply of [`Behaviour::PointerLoopFirst`], and nothing else.
    PointerLoopOnly(Answer),
    /// Over UDP: TC as [`Behaviour::TruncateUdp`] (NOERROR); over TCP: the behaviour given.
    TruncateUdpThenOverTcp(Box<Behaviour>),
    /// The right reply changed by the patch first, then, 50 ms later, the right one (both
    /// transports): whatever the patch breaks or keeps.
    PatchedFirst(Patch, Answer),
    /// The behaviour for the first `n` queries for this name and type, then silence: a slow
    /// upstream that goes down after its late answer came.
    ThenDrop(usize, Box<Behaviour>),
    /// The `n`-th answer to the `n`-th query for this name and type, the last one to every
    /// query after: a server whose data changes (a zone's serial).
    Sequence(Vec<Answer>),
}

/// The transport a query arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Udp,
    Tcp,
}

/// One query the fake received, and the last reply it sent to it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub via: Via,
    /// The question name as it arrived (case kept), in ASCII with the trailing dot.
    pub name: String,
    pub rtype: RecordType,
    /// The query as it arrived, byte for byte (what meshdns relayed).
    pub query: Vec<u8>,
    pub reply: Option<Vec<u8>>,
    /// Where a UDP query came from (its socket); `None` over TCP.
    pub from: Option<SocketAddr>,
}

/// Byte edits to a reply as the fake encodes it ([`reply_bytes`]): each `(offset, byte)`
/// written where the reply has that offset, then the reply cut to `cut` bytes if shorter.
#[derive(Debug, Clone, Default)]
pub struct Patch {
    pub bytes: Vec<(usize, u8)>,
    pub cut: Option<usize>,
}

impl Patch {
    pub fn apply(&self, mut reply: Vec<u8>) -> Vec<u8> {
        for &(at, byte) in &self.bytes {
            if let Some(slot) = reply.get_mut(at) {
                *slot = byte;
            }
        }
        if let Some(cut) = self.cut {
            reply.truncate(cut);
        }
        reply
    }
}

/// Builds a [`FakeDns`]: a table keyed by (lowercased name, type), and a behaviour for the
/// rest (REFUSED unless said, so a query sent to the wrong server shows).
pub struct FakeDnsBuilder {
    table: HashMap<(String, RecordType), Behaviour>,
    otherwise: Behaviour,
    cookies: bool,
    compressing: bool,
    tcp: bool,
    udp: bool,
}

impl FakeDnsBuilder {
    pub fn on(mut self, name: &str, rtype: RecordType, behaviour: Behaviour) -> Self {
        self.table.insert((key(name), rtype), behaviour);
        self
    }

    pub fn answer(self, name: &str, rtype: RecordType, answer: Answer) -> Self {
        self.on(name, rtype, Behaviour::Answer(answer))
    }

    pub fn otherwise(mut self, behaviour: Behaviour) -> Self {
        self.otherwise = behaviour;
        self
    }

    /// NXDOMAIN, with the SOA of `cluster.local.`, for every name the table does not hold: what
    /// a cluster's CoreDNS says of a name it does not know.
    pub fn nxdomain_otherwise(self) -> Self {
        self.otherwise(Behaviour::Answer(Answer::nxdomain("cluster.local.")))
    }

    /// No TCP listener: connections to the fake's port are refused (a server that sets TC
    /// and cannot be asked over TCP).
    pub fn udp_only(mut self) -> Self {
        self.tcp = false;
        self
    }

    /// A server with DNS cookies (RFC 7873): a query carrying a COOKIE option is answered with
    /// that client cookie and a server cookie of the fake's own.
    pub fn cookies(mut self) -> Self {
        self.cookies = true;
        self
    }

    /// Compresses every name it may, as CoreDNS does (hickory's encoder stops after 120
    /// names), so an answer of hundreds of records fits a TCP frame whole.
    pub fn compressing(mut self) -> Self {
        self.compressing = true;
        self
    }

    pub async fn start(self) -> FakeDns {
        self.start_on("127.0.0.1:0").await
    }

    /// Starts in the place of `fake`, on its address: a peer that went down (a silent fake),
    /// or changed.
    pub async fn replace(self, fake: FakeDns) -> FakeDns {
        let addr = fake.addr.to_string();
        drop(fake);
        tokio::time::sleep(Duration::from_millis(1)).await; // the stopped fake lets go of its port
        self.start_on(&addr).await
    }

    /// Starts on `addr` (another loopback address, the port of a fake that moved).
    pub async fn start_on(self, addr: &str) -> FakeDns {
        let listeners = meshdns::bind(&[addr.parse().unwrap()]).unwrap();
        let addr = listeners.local_addrs()[0];
        let udp = UdpSocket::from_std(listeners.udp.into_iter().next().unwrap()).unwrap();
        let tcp = TcpListener::from_std(listeners.tcp.into_iter().next().unwrap()).unwrap();
        let state = Arc::new(FakeState {
            table: self.table,
            otherwise: self.otherwise,
            cookies: self.cookies,
            compressing: self.compressing,
            seen: Mutex::new(Vec::new()),
        });
        let udp = Arc::new(udp);
        let mut tasks = vec![if self.udp {
            tokio::spawn(serve_fake_udp(udp, Arc::clone(&state)))
        } else {
            tokio::spawn(hold_unread(udp))
        }];
        if self.tcp {
            tasks.push(tokio::spawn(serve_fake_tcp(tcp, Arc::clone(&state))));
        }
        FakeDns { addr, state, tasks }
    }
}

fn key(name: &str) -> String {
    let mut lower = name.to_ascii_lowercase();
    if !lower.ends_with('.') {
        lower.push('.');
    }
    lower
}

struct FakeState {
    table: HashMap<(String, RecordType), Behaviour>,
    otherwise: Behaviour,
    cookies: bool,
    compressing: bool,
    seen: Mutex<Vec<Seen>>,
}

impl FakeState {
    fn behaviour(&self, query: &Query) -> &Behaviour {
        self.table
            .get(&(key(&query.name().to_ascii()), query.query_type()))
            .unwrap_or(&self.otherwise)
    }

    /// How many queries for this name (any case) and type came before.
    fn asked_before(&self, query: &Query) -> usize {
        let name = key(&query.name().to_ascii());
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.rtype == query.query_type() && key(&s.name) == name)
            .count()
    }

    /// Notes the query; returns its index for [`FakeState::sent`].
    fn received(&self, via: Via, from: Option<SocketAddr>, query: &Query, bytes: &[u8]) -> usize {
        let mut seen = self.seen.lock().unwrap();
        seen.push(Seen {
            via,
            name: query.name().to_ascii(),
            rtype: query.query_type(),
            query: bytes.to_vec(),
            reply: None,
            from,
        });
        seen.len() - 1
    }

    fn sent(&self, index: usize, reply: &[u8]) {
        if let Some(seen) = self.seen.lock().unwrap().get_mut(index) {
            seen.reply = Some(reply.to_vec());
        }
    }
}

/// A DNS server on 127.0.0.1 (UDP and TCP, one port) that answers from its table and notes
/// what it was asked. Stops when dropped.
pub struct FakeDns {
    pub addr: SocketAddr,
    state: Arc<FakeState>,
    tasks: Vec<JoinHandle<()>>,
}

impl FakeDns {
    pub fn builder() -> FakeDnsBuilder {
        FakeDnsBuilder {
            table: HashMap::new(),
            otherwise: Behaviour::Answer(Answer::rcode(ResponseCode::Refused)),
            cookies: false,
            compressing: false,
            tcp: true,
            udp: true,
        }
    }

    /// A server that never answers anything.
    pub async fn silent() -> FakeDns {
        Self::builder().otherwise(Behaviour::Drop).start().await
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn count(&self, via: Via) -> usize {
        self.seen().iter().filter(|s| s.via == via).count()
    }

    /// Queries received, a UDP query sent again on the same socket (meshdns's retransmission:
    /// the same source port and question) left out: one per exchange meshdns made.
    pub fn exchanges(&self) -> Vec<Seen> {
        let seen = self.seen();
        let resent = |at: usize, s: &Seen| {
            seen[..at].iter().any(|earlier| {
                s.from.is_some()
                    && earlier.from == s.from
                    && earlier.rtype == s.rtype
                    && earlier.name.eq_ignore_ascii_case(&s.name)
            })
        };
        (seen.iter().enumerate())
            .filter(|(at, s)| !resent(*at, s))
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// The question names received, in order.
    pub fn names(&self) -> Vec<String> {
        self.seen().into_iter().map(|s| s.name).collect()
    }

    /// The last reply sent, whatever the transport.
    pub fn last_reply(&self) -> Vec<u8> {
        self.seen()
            .into_iter()
            .rev()
            .find_map(|s| s.reply)
            .expect("the fake sent a reply")
    }
}

impl Drop for FakeDns {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What the fake sends for one query over `via`: `forged` from another port at once (UDP), then
/// after `pause`, `messages` in order (none: no reply), `between` apart; over TCP,
/// `close_mid_frame` cuts the first one in half and closes, and `trickle` sends it a byte at a
/// time with that pause.
struct Plan {
    forged: Option<Vec<u8>>,
    pause: Duration,
    messages: Vec<Vec<u8>>,
    between: Duration,
    close_mid_frame: bool,
    trickle: Option<Duration>,
}

fn plan(behaviour: &Behaviour, query: &Message, via: Via, compressing: bool) -> Plan {
    let encode = |msg: Message| match compressing {
        true => meshdns::testing::reply::encode_fitted(&msg, 65_535),
        false => msg.to_vec().expect("the fake's reply encodes"),
    };
    let right = |answer: &Answer| encode(reply(query, answer));
    let now = |messages| Plan {
        forged: None,
        pause: Duration::ZERO,
        messages,
        between: Duration::ZERO,
        close_mid_frame: false,
        trickle: None,
    };
    match behaviour {
        Behaviour::Answer(answer) | Behaviour::AnswerThenDrop(_, answer) => {
            now(vec![right(answer)])
        }
        // Past its end (the queries before were answered in `take_query`): the last answer.
        Behaviour::Sequence(answers) => now(answers.last().map(right).into_iter().collect()),
        Behaviour::DropFirst(_, then) | Behaviour::ThenDrop(_, then) => {
            plan(then, query, via, compressing)
        }
        Behaviour::Delay(pause, answer) => Plan {
            pause: *pause,
            ..now(vec![right(answer)])
        },
        Behaviour::Drop => now(vec![]),
        Behaviour::TruncateUdp(answer)
        | Behaviour::CloseTcpMidFrame(answer)
        | Behaviour::TrickleTcp(_, answer)
            if via == Via::Udp =>
        {
            now(vec![encode(truncated(query, answer.rcode))])
        }
        Behaviour::TruncateUdpThenOverTcp(_) if via == Via::Udp => {
            now(vec![encode(truncated(query, ResponseCode::NoError))])
        }
        Behaviour::TruncateUdpThenOverTcp(then) => plan(then, query, via, compressing),
        Behaviour::TruncateUdp(answer) => now(vec![right(answer)]),
        Behaviour::CloseTcpMidFrame(answer) => Plan {
            close_mid_frame: true,
            ..now(vec![right(answer)])
        },
        Behaviour::TrickleTcp(every, answer) => Plan {
            trickle: Some(*every),
            ..now(vec![right(answer)])
        },
        Behaviour::WrongIdFirst(answer) => now(vec![wrong_id(query, answer), right(answer)]),
        Behaviour::WrongIdOnly(answer) => now(vec![wrong_id(query, answer)]),
        Behaviour::WrongQuestionFirst(answer) => {
            now(vec![wrong_question(query, answer), right(answer)])
        }
        Behaviour::WrongQuestionOnly(answer) => now(vec![wrong_question(query, answer)]),
        Behaviour::PointerLoopFirst(answer) => Plan {
            between: Duration::from_millis(50),
            ..now(vec![pointer_loop(right(answer)), right(answer)])
        },
        Behaviour::PointerLoopOnly(answer) => now(vec![pointer_loop(right(answer))]),
        Behaviour::PatchedFirst(patch, answer) => Plan {
            between: Duration::from_millis(50),
            ..now(vec![patch.apply(right(answer)), right(answer)])
        },
        Behaviour::ForgedFromAnotherPortFirst { forged, real } if via == Via::Udp => Plan {
            forged: Some(right(forged)),
            pause: Duration::from_millis(50),
            ..now(vec![right(real)])
        },
        Behaviour::ForgedFromAnotherPortFirst { real, .. } => now(vec![right(real)]),
        Behaviour::Garbage => now(vec![
            b"\x12\x34 this is no DNS message \xff\xff\xff".to_vec(),
        ]),
        Behaviour::ErrorWithoutQuestion(rcode) => now(vec![without_question(query, *rcode)]),
    }
}

/// `reply` with a COOKIE option when `query` carried one: its client cookie and the fake's
/// server cookie (RFC 7873 §5.2.3).
fn with_server_cookie(reply: Vec<u8>, query: &Message) -> Vec<u8> {
    let client = query
        .edns
        .as_ref()
        .and_then(|edns| match edns.option(EdnsCode::Cookie) {
            Some(EdnsOption::Unknown(_, cookie)) => cookie.get(..8).map(<[u8]>::to_vec),
            _ => None,
        });
    let (Some(client), Ok(mut msg)) = (client, Message::from_vec(&reply)) else {
        return reply;
    };
    let Some(edns) = msg.edns.as_mut() else {
        return reply;
    };
    let cookie = [client.as_slice(), FAKE_SERVER_COOKIE].concat();
    edns.options_mut()
        .insert(EdnsOption::Unknown(u16::from(EdnsCode::Cookie), cookie));
    msg.to_vec().expect("the fake's reply encodes")
}

/// `answer` with an ID the query did not carry.
fn wrong_id(query: &Message, answer: &Answer) -> Vec<u8> {
    let mut spoof = reply(query, answer);
    spoof.metadata.id = query.id.wrapping_add(1);
    spoof.to_vec().expect("the fake's reply encodes")
}

/// A reply with TC set and no records.
fn truncated(query: &Message, rcode: ResponseCode) -> Message {
    let mut cut = reply(query, &Answer::rcode(rcode));
    cut.metadata.truncation = true;
    cut
}

/// `reply` with the owner name of its first record made a compression pointer to itself: a
/// loop no decoder can follow.
pub fn pointer_loop(mut reply: Vec<u8>) -> Vec<u8> {
    let owner = raw::questions_end(&reply).expect("a reply that walks");
    assert!(owner + 2 < reply.len(), "the reply has a record");
    let pointer = 0xc000 | u16::try_from(owner).expect("a pointer reaches it");
    reply[owner..owner + 2].copy_from_slice(&pointer.to_be_bytes());
    reply
}

/// `answer` to a question the query did not ask.
fn wrong_question(query: &Message, answer: &Answer) -> Vec<u8> {
    let mut spoof = reply(query, answer);
    if let Some(q) = spoof.queries.first_mut() {
        let other = q.name().prepend_label("spoofed").unwrap();
        q.set_name(other);
    }
    spoof.to_vec().expect("the fake's reply encodes")
}

/// The bytes of the fake's reply to `query` (without [`FakeDnsBuilder::compressing`]).
pub fn reply_bytes(query: &Message, answer: &Answer) -> Vec<u8> {
    reply(query, answer)
        .to_vec()
        .expect("the fake's reply encodes")
}

/// The reply a server gives: ID, opcode, RD, CD and question echoed; EDNS only when asked.
fn reply(query: &Message, answer: &Answer) -> Message {
    let mut msg = Message::new(query.id, MessageType::Response, query.op_code);
    msg.metadata = Metadata::response_from_request(&query.metadata);
    msg.metadata.recursion_available = true;
    msg.metadata.response_code = answer.rcode;
    msg.metadata.authoritative = answer.authoritative;
    msg.metadata.authentic_data = answer.authentic_data;
    msg.queries = query.queries.clone();
    msg.answers = answer.answers.clone();
    msg.authorities = answer.authorities.clone();
    msg.additionals = answer.additionals.clone();
    if let Some(asked) = &query.edns {
        let mut edns = Edns::new();
        edns.set_max_payload(FAKE_EDNS_SIZE);
        edns.set_dnssec_ok(asked.flags().dnssec_ok);
        for option in &answer.options {
            edns.options_mut().insert(option.clone());
        }
        msg.set_edns(edns);
    }
    msg
}

/// The query's plan, the query noted as received (with the index for [`FakeState::sent`]);
/// `None` for bytes that do not parse. EDNS options hickory rejects (a CLIENT-SUBNET of an
/// unknown family) are ignored, as servers do.
fn take_query(
    state: &FakeState,
    bytes: &[u8],
    via: Via,
    from: Option<SocketAddr>,
) -> Option<(usize, Plan)> {
    let query = Message::from_vec(bytes)
        .ok()
        .or_else(|| Message::from_vec(&raw::without_options(bytes, |_| true)?).ok())?;
    let question = query.queries.first()?;
    let before = state.asked_before(question);
    let index = state.received(via, from, question, bytes);
    let nth;
    let behaviour = match state.behaviour(question) {
        Behaviour::AnswerThenDrop(n, _) | Behaviour::ThenDrop(n, _) if before >= *n => {
            &Behaviour::Drop
        }
        Behaviour::DropFirst(n, _) if before < *n => &Behaviour::Drop,
        Behaviour::Sequence(answers) if before + 1 < answers.len() => {
            nth = Behaviour::Answer(answers[before].clone());
            &nth
        }
        behaviour => behaviour,
    };
    let mut plan = plan(behaviour, &query, via, state.compressing);
    if state.cookies {
        plan.messages = (plan.messages.into_iter())
            .map(|m| with_server_cookie(m, &query))
            .collect();
    }
    Some((index, plan))
}

async fn serve_fake_udp(socket: Arc<UdpSocket>, state: Arc<FakeState>) {
    let mut buf = vec![0u8; 65_535];
    loop {
        let Ok((len, peer)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let Some((index, plan)) = take_query(&state, &buf[..len], Via::Udp, Some(peer)) else {
            continue;
        };
        let (socket, state) = (Arc::clone(&socket), Arc::clone(&state));
        tokio::spawn(async move {
            if let Some(forged) = &plan.forged {
                let elsewhere = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                let _ = elsewhere.send_to(forged, peer).await;
            }
            tokio::time::sleep(plan.pause).await;
            for (nth, message) in plan.messages.iter().enumerate() {
                if nth > 0 {
                    tokio::time::sleep(plan.between).await;
                }
                let _ = socket.send_to(message, peer).await;
                state.sent(index, message);
            }
        });
    }
}

async fn serve_fake_tcp(listener: TcpListener, state: Arc<FakeState>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(fake_tcp_connection(stream, Arc::clone(&state)));
    }
}

/// Frames are answered concurrently, so a delayed answer does not hold back the next one.
async fn fake_tcp_connection(stream: TcpStream, state: Arc<FakeState>) {
    let (mut reader, writer) = stream.into_split();
    let writer = Arc::new(tokio::sync::Mutex::new(writer));
    loop {
        let Ok(len) = reader.read_u16().await else {
            return;
        };
        let mut frame = vec![0u8; usize::from(len)];
        if reader.read_exact(&mut frame).await.is_err() {
            return;
        }
        let Some((index, plan)) = take_query(&state, &frame, Via::Tcp, None) else {
            continue;
        };
        let (writer, state) = (Arc::clone(&writer), Arc::clone(&state));
        tokio::spawn(async move {
            tokio::time::sleep(plan.pause).await;
            for (nth, message) in plan.messages.iter().enumerate() {
                if nth > 0 {
                    tokio::time::sleep(plan.between).await;
                }
                let mut writer = writer.lock().await;
                let mut framed = frame_of(message);
                if plan.close_mid_frame {
                    framed.truncate(framed.len() / 2);
                    let _ = writer.write_all(&framed).await;
                    let _ = writer.shutdown().await;
                    return;
                }
                if let Some(every) = plan.trickle {
                    for byte in framed {
                        if writer.write_all(&[byte]).await.is_err() {
                            return;
                        }
                        tokio::time::sleep(every).await;
                    }
                    state.sent(index, message);
                    continue;
                }
                let _ = writer.write_all(&framed).await;
                state.sent(index, message);
            }
        });
    }
}

/// A message with its 2-byte TCP length prefix.
pub fn frame_of(message: &[u8]) -> Vec<u8> {
    let len = u16::try_from(message.len()).expect("a message fits a TCP frame");
    [&len.to_be_bytes()[..], message].concat()
}

/// meshdns serving on 127.0.0.1 (UDP and TCP, one port) with its admin server on another
/// port; stops when dropped.
pub struct Meshdns {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Meshdns {
    /// Starts meshdns with `vars` over test defaults: no cache (each query reaches the
    /// fakes). It is ready at once: its sockets are bound before `run`.
    pub async fn start(vars: &[(&str, &str)]) -> Meshdns {
        Self::start_on("127.0.0.1:0", vars).await
    }

    /// Starts meshdns in front of `upstream` as kube-dns (`MESHDNS_UPSTREAMS`), with `vars`
    /// over the test defaults.
    pub async fn before(upstream: &FakeDns, vars: &[(&str, &str)]) -> Meshdns {
        Self::before_all(&[upstream], vars).await
    }

    /// [`Meshdns::before`] as a pod of local cluster `a` whose peers are `peers` (the entries
    /// of `MESHDNS_CLUSTERS` after `a=`).
    pub async fn in_cluster_a(upstream: &FakeDns, peers: &str) -> Meshdns {
        let clusters = format!("a=; {peers}");
        let vars = [
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", clusters.as_str()),
        ];
        Self::before(upstream, &vars).await
    }

    /// [`Meshdns::before`] as a pod of local cluster `a` (kube-dns `a`) whose peers are the
    /// fakes `peers` (`name=fake`), with `vars` over the test defaults.
    pub async fn in_cluster_a_with(
        a: &FakeDns,
        peers: &[(&str, &FakeDns)],
        vars: &[(&str, &str)],
    ) -> Meshdns {
        let mut line = vec!["a=".to_string()];
        line.extend(
            peers
                .iter()
                .map(|(name, fake)| format!("{name}={}", fake.addr)),
        );
        let line = line.join("; ");
        let mut all = vec![
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", line.as_str()),
        ];
        all.extend_from_slice(vars);
        Self::before(a, &all).await
    }

    /// [`Meshdns::before`] with its cache on (10,000 entries).
    pub async fn cached(upstream: &FakeDns, vars: &[(&str, &str)]) -> Meshdns {
        let mut all = vec![("MESHDNS_CACHE_SIZE", "10000")];
        all.extend_from_slice(vars);
        Self::before(upstream, &all).await
    }

    /// [`Meshdns::cached`] that gives up on a silent upstream quickly ([`FAIL_FAST`]).
    pub async fn cached_failing_fast(upstream: &FakeDns, vars: &[(&str, &str)]) -> Meshdns {
        let mut all = FAIL_FAST.to_vec();
        all.extend_from_slice(vars);
        Self::cached(upstream, &all).await
    }

    /// [`Meshdns::before`] with several kube-dns endpoints, in this order.
    pub async fn before_all(upstreams: &[&FakeDns], vars: &[(&str, &str)]) -> Meshdns {
        let list: Vec<String> = upstreams.iter().map(|f| f.addr.to_string()).collect();
        let list = list.join(",");
        let mut all = vec![("MESHDNS_UPSTREAMS", list.as_str())];
        all.extend_from_slice(vars);
        Self::start(&all).await
    }

    /// How many queries meshdns answered from its cache.
    pub async fn cache_hits(&self) -> f64 {
        self.metric("meshdns_cache_hits_total", &[]).await
    }

    /// The admin server's `/metrics`, parsed.
    pub async fn scrape(&self) -> admin::Scrape {
        let response = admin::get(self.admin, "/metrics").await;
        assert_eq!(response.status, 200);
        admin::Scrape::parse(&response.body)
    }

    /// One series of this meshdns's registry (0 when absent).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.scrape().await.value(name, labels)
    }

    /// `meshdns_upstream_healthy` of `endpoint` in the group `cluster`.
    pub async fn upstream_healthy(&self, cluster: &str, endpoint: &FakeDns) -> f64 {
        let endpoint = endpoint.addr.to_string();
        self.metric(
            "meshdns_upstream_healthy",
            &[("peer", cluster), ("endpoint", &endpoint)],
        )
        .await
    }

    /// `meshdns_upstream_requests_total` of the group `cluster` with `result`.
    pub async fn upstream_requests(&self, cluster: &str, result: &str) -> f64 {
        self.metric(
            "meshdns_upstream_requests_total",
            &[("peer", cluster), ("result", result)],
        )
        .await
    }

    /// `meshdns_dropped_total` for `reason`.
    pub async fn dropped(&self, reason: &str) -> f64 {
        self.metric("meshdns_dropped_total", &[("reason", reason)])
            .await
    }

    /// `meshdns_config_reloads_total` with `result`.
    pub async fn config_reloads(&self, result: &str) -> f64 {
        self.metric("meshdns_config_reloads_total", &[("result", result)])
            .await
    }

    pub async fn start_on(listen: &str, vars: &[(&str, &str)]) -> Meshdns {
        let mut merged: HashMap<String, String> =
            [("MESHDNS_CACHE_SIZE", "0"), ("MESHDNS_ADMIN_LISTEN", "")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        merged.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        assert!(
            merged.contains_key("MESHDNS_UPSTREAMS"),
            "tests must name the upstreams: the machine's resolv.conf is not ours to query"
        );
        let config = meshdns::Config::from_vars(merged).expect("a valid test config");
        let mut listeners =
            meshdns::bind_spread(&[listen.parse().unwrap()], config.threads).unwrap();
        let admin = meshdns::bind_admin("127.0.0.1:0".parse().unwrap()).unwrap();
        let admin_addr = admin.local_addr().unwrap();
        listeners.admin = Some(admin);
        let addr = listeners.local_addrs()[0];
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(async move {
            let shutdown = async {
                let _ = stopped.await;
            };
            meshdns::run(config, listeners, shutdown)
                .await
                .expect("meshdns runs until shut down");
        });
        Meshdns {
            addr,
            admin: admin_addr,
            stop: Some(stop),
        }
    }
}

impl Drop for Meshdns {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A query with RD set and a random ID, without EDNS.
pub fn query(name: &str, rtype: RecordType) -> Message {
    let mut msg = Message::query();
    msg.metadata.id = rand::random();
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(rr::name(name), rtype));
    msg
}

/// The text of a reply's Extended DNS Error (RFC 8914), if it carries one.
pub fn extended_error_text(reply: &Message) -> Option<String> {
    use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
    match reply.edns.as_ref()?.option(EdnsCode::Unknown(15))? {
        EdnsOption::Unknown(15, data) => Some(String::from_utf8_lossy(data.get(2..)?).into()),
        _ => None,
    }
}

/// The query with an OPT record advertising `size`.
pub fn with_edns(mut msg: Message, size: u16) -> Message {
    let mut edns = Edns::new();
    edns.set_max_payload(size);
    msg.set_edns(edns);
    msg
}

/// A query for `name` with EDNS carrying `options` (code, data), in that order.
pub fn query_with_edns_options(name: &str, rtype: RecordType, options: &[(u16, &[u8])]) -> Message {
    let mut msg = with_edns(query(name, rtype), 1232);
    let edns = msg.edns.as_mut().expect("EDNS was just set");
    for (code, data) in options {
        edns.options_mut()
            .insert(EdnsOption::Unknown(*code, data.to_vec()));
    }
    msg
}

/// A reply as received, and parsed.
#[derive(Debug)]
pub struct Reply {
    pub bytes: Vec<u8>,
    pub msg: Message,
}

impl Reply {
    fn parse(bytes: Vec<u8>, asked: &Message) -> Reply {
        let msg = Message::from_vec(&bytes).expect("meshdns replies with a DNS message");
        assert_eq!(msg.id, asked.id, "the reply carries the client's ID");
        Reply { bytes, msg }
    }

    /// The targets of the answer section's SRV records, in order (every record an SRV).
    pub fn srv_targets(&self) -> Vec<String> {
        (self.msg.answers.iter())
            .map(|r| {
                let srv = r.try_borrow::<SRV>().expect("an SRV record");
                srv.data().target.to_ascii()
            })
            .collect()
    }

    /// The answer section as `owner type data` lines, for comparing with the expected text.
    pub fn answer_lines(&self) -> Vec<String> {
        self.msg.answers.iter().map(record_line).collect()
    }

    pub fn additional_lines(&self) -> Vec<String> {
        self.msg.additionals.iter().map(record_line).collect()
    }

    pub fn authority_lines(&self) -> Vec<String> {
        self.msg.authorities.iter().map(record_line).collect()
    }
}

/// `owner type data`, owner with its case as sent.
pub fn record_line(record: &Record) -> String {
    format!(
        "{} {} {}",
        record.name.to_ascii(),
        record.record_type(),
        record.data
    )
}

/// Asks over UDP from 127.0.0.1; fails the test when no reply comes in [`CLIENT_TIMEOUT`].
/// `name` `rtype` asked of `meshdns` over UDP, with EDNS (1232 bytes): how a pod's stub asks.
pub async fn ask(meshdns: &Meshdns, name: &str, rtype: RecordType) -> Reply {
    udp(meshdns.addr, &with_edns(query(name, rtype), 1232)).await
}

/// Asks `name` A of meshdns over UDP (no EDNS): the reply, and how long it took on the test's
/// clock (tokio's, paused or not).
pub async fn ask_timed(meshdns: &Meshdns, name: &str) -> (Reply, Duration) {
    let started = tokio::time::Instant::now();
    let reply = udp(meshdns.addr, &query(name, RecordType::A)).await;
    (reply, started.elapsed())
}

/// The address `name` resolves to (A, over UDP) through meshdns, when it resolves.
pub async fn address_of(meshdns: &Meshdns, name: &str) -> Option<String> {
    let reply = udp(meshdns.addr, &query(name, RecordType::A)).await;
    (reply.msg.response_code == ResponseCode::NoError)
        .then(|| reply.answer_lines().first().cloned())
        .flatten()
        .and_then(|line| line.rsplit(' ').next().map(str::to_string))
}

pub async fn udp(server: SocketAddr, msg: &Message) -> Reply {
    let bytes = udp_raw(server, &msg.to_vec().unwrap())
        .await
        .expect("a reply over UDP");
    Reply::parse(bytes, msg)
}

/// Asks over TCP, one query on a new connection.
pub async fn tcp(server: SocketAddr, msg: &Message) -> Reply {
    let bytes = tcp_raw(server, &msg.to_vec().unwrap()).await;
    Reply::parse(bytes, msg)
}

/// Sends raw bytes over TCP on a new connection; the reply frame. Fails the test when no
/// whole frame comes in [`CLIENT_TIMEOUT`].
pub async fn tcp_raw(server: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(server).await.unwrap();
    stream.write_all(&frame_of(bytes)).await.unwrap();
    tokio::time::timeout(CLIENT_TIMEOUT, read_frame(&mut stream))
        .await
        .expect("a reply over TCP in time")
        .expect("a whole frame")
}

/// The answer and additional lines of `srv_name`'s SRV set gathered from three clusters a, b
/// and c (numbered 1, 2, 3) of two pods each, port 27017, weight 50, in that order: pod `i` of
/// a cluster numbered `n` is `target(cluster, i)` at 10.n.1.i.
pub fn srv_set_of_three_clusters(
    srv_name: &str,
    target: impl Fn(&str, u8) -> String,
) -> (Vec<String>, Vec<String>) {
    let mut answers = Vec::new();
    let mut additionals = Vec::new();
    for (cluster, n) in [("a", 1), ("b", 2), ("c", 3)] {
        for i in 0..2 {
            let target = target(cluster, i);
            answers.push(format!("{srv_name} SRV 0 50 27017 {target}"));
            additionals.push(format!("{target} A 10.{n}.1.{i}"));
        }
    }
    (answers, additionals)
}

/// Sends raw bytes over UDP from 127.0.0.1; the reply, or `None` when none came in `wait`.
pub async fn udp_raw_within(server: SocketAddr, bytes: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(server).await.unwrap();
    socket.send(bytes).await.unwrap();
    let mut buf = vec![0u8; 65_535];
    let len = tokio::time::timeout(wait, socket.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf.truncate(len);
    Some(buf)
}

pub async fn udp_raw(server: SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    udp_raw_within(server, bytes, CLIENT_TIMEOUT).await
}

/// One length-prefixed message from a TCP stream; `None` at EOF.
pub async fn read_frame(stream: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let len = stream.read_u16().await.ok()?;
    let mut frame = vec![0u8; usize::from(len)];
    stream.read_exact(&mut frame).await.ok()?;
    Some(frame)
}

/// The response code of a reply as received.
pub fn rcode_of(reply: &[u8]) -> ResponseCode {
    Message::from_vec(reply)
        .expect("a DNS message")
        .response_code
}

/// A port free for UDP and TCP on 127.0.0.1 a moment ago (a binary must be told its port).
///
/// Chosen below the kernel's ephemeral range, so the sockets other tests bind to port 0 in the
/// meantime cannot take it before the binary binds it (they did: `AddrInUse` in CI).
pub fn free_port() -> u16 {
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let below_ephemeral = 10_000..ephemeral_from.max(10_001);
    loop {
        let port = rand::random_range(below_ephemeral.clone());
        let Ok(_udp) = std::net::UdpSocket::bind(("127.0.0.1", port)) else {
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Asks until `want` holds, at most `tries` times, 100 ms apart; whether it came to hold.
pub async fn eventually<F, Fut>(tries: usize, mut want: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..tries {
        if want().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The message without its ID: what pass-through must keep byte for byte.
pub fn without_id(msg: &[u8]) -> &[u8] {
    &msg[2..]
}

// Fakes for failures (tests/failure.rs): an error reply without a question, a peer reachable
// over TCP only, a client that stops reading.

impl FakeDnsBuilder {
    /// Answers over TCP only; datagrams to its port are taken in and never read (a peer behind
    /// a firewall that lets only TCP through, as a `transport=tcp` cluster may be).
    pub fn tcp_only(mut self) -> Self {
        self.udp = false;
        self
    }
}

/// Keeps `socket` bound without ever reading it: what is sent to it vanishes.
async fn hold_unread(socket: Arc<UdpSocket>) {
    let _held = socket;
    std::future::pending::<()>().await;
}

/// An error reply to `query`, its ID and flags echoed but not its question (QDCOUNT=0).
fn without_question(query: &Message, rcode: ResponseCode) -> Vec<u8> {
    let mut msg = reply(query, &Answer::rcode(rcode));
    msg.queries.clear();
    msg.to_vec().expect("the fake's reply encodes")
}

/// A TCP connection to `server` whose owner never reads: its receive buffer is as small as
/// the kernel allows, so the server's writes stall after a few MiB at most.
pub async fn tcp_client_that_never_reads(server: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    socket.connect(server).await.unwrap()
}
