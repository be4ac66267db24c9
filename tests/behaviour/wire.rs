//! EDNS on the wire, per hop (docs/design.md, "Pass-through"), seen from a client: which
//! options of a client reach the upstream and which of an upstream's reach a client (cookies,
//! NSID, padding, TCP keepalive, client subnet, options meshdns does not know), the payload
//! size a client advertises, and what meshdns's own replies echo ("Limits and bad input": CD,
//! the question an upstream's error reply left out).
//!
//! The fakes stand in for kube-dns and the peers' CoreDNS: they set cookies and NSID and omit
//! the question of an error reply. What they received is kept byte for byte, so a test can
//! tell what meshdns relayed.

use crate::support;

use std::time::Duration;

use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{Record, RecordType};
use support::raw::{
    self, OPTION_CLIENT_SUBNET, OPTION_COOKIE, OPTION_LOOP_MARKER, OPTION_NSID, OPTION_PADDING,
    OPTION_TCP_KEEPALIVE,
};
use support::{
    Answer, Behaviour, FakeDns, Meshdns, Reply, Via, query, query_with_edns_options, rcode_of, rr,
    tcp, udp, with_edns,
};

const NAME: &str = "www.example.com.";

/// Caching on (the test default is off).
const CACHED: (&str, &str) = ("MESHDNS_CACHE_SIZE", "10000");

fn www() -> Answer {
    Answer::records([rr::a(NAME, [192, 0, 2, 1])])
}

/// kube-dns answering [`NAME`] A with `answer`, and meshdns in front of it with `vars`.
async fn serving(answer: Answer, vars: &[(&str, &str)]) -> (FakeDns, Meshdns) {
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, vars).await;
    (upstream, meshdns)
}

/// Whether a message (a reply, or a query as a fake received it) carries EDNS option `code`.
fn carries(msg: &[u8], code: u16) -> bool {
    let msg = Message::from_vec(msg).expect("a DNS message");
    msg.edns
        .is_some_and(|edns| edns.option(EdnsCode::from(code)).is_some())
}

/// The option as it travels: code, length, data.
fn option_bytes(code: u16, data: &[u8]) -> Vec<u8> {
    let len = u16::try_from(data.len()).unwrap();
    [&code.to_be_bytes()[..], &len.to_be_bytes(), data].concat()
}

// --- 1. Per-hop EDNS options ---------------------------------------------------------------

#[tokio::test]
async fn a_second_client_never_gets_the_first_clients_cookie() {
    // kube-dns with cookies: a query's client cookie comes back with a server cookie.
    let upstream = FakeDns::builder()
        .cookies()
        .answer(NAME, RecordType::A, www())
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[CACHED]).await;
    let first = udp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, &[(OPTION_COOKIE, b"client-1")]),
    )
    .await;
    let second = udp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, &[(OPTION_COOKIE, b"client-2")]),
    )
    .await;
    let without = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    for (who, reply) in [
        ("first", &first),
        ("second", &second),
        ("no cookie", &without),
    ] {
        assert_eq!(reply.answer_lines().len(), 1, "{who}");
        assert!(!carries(&reply.bytes, OPTION_COOKIE), "{who} got a cookie");
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "the second and third were cache hits");
    assert!(
        !carries(&seen[0].query, OPTION_COOKIE),
        "a client's cookie went upstream"
    );
}

#[tokio::test]
async fn a_cookie_in_an_upstream_reply_reaches_no_client_on_a_miss_or_a_hit() {
    let mut answer = www();
    answer.options = vec![EdnsOption::Unknown(
        OPTION_COOKIE,
        b"client-1fakeSrv!".to_vec(),
    )];
    let (upstream, meshdns) = serving(answer, &[CACHED]).await;
    let cookie: &[(u16, &[u8])] = &[(OPTION_COOKIE, b"client-1")];
    let miss = udp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, cookie),
    )
    .await;
    let hit = udp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, cookie),
    )
    .await;
    let over_tcp = tcp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, cookie),
    )
    .await;
    for (which, reply) in [("miss", &miss), ("hit", &hit), ("tcp hit", &over_tcp)] {
        assert!(!carries(&reply.bytes, OPTION_COOKIE), "{which}");
        assert_eq!(reply.answer_lines().len(), 1, "{which}");
    }
    assert_eq!(upstream.exchanges().len(), 1);
}

#[tokio::test]
async fn nsid_reaches_only_the_client_that_asked() {
    let mut answer = www();
    answer.options = vec![EdnsOption::Unknown(OPTION_NSID, b"kube-dns-7f9c".to_vec())];
    let (upstream, meshdns) = serving(answer, &[CACHED]).await;
    let nsid: &[(u16, &[u8])] = &[(OPTION_NSID, b"")];
    let asked = udp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, nsid),
    )
    .await;
    assert!(
        carries(&asked.bytes, OPTION_NSID),
        "the asker gets kube-dns's NSID"
    );
    assert!(carries(&upstream.seen()[0].query, OPTION_NSID), "relayed");
    let never_asked = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    assert!(
        !carries(&never_asked.bytes, OPTION_NSID),
        "a hit for a client that never asked"
    );
    // A hit was produced by another client's query: the identity there is not this hop's.
    let asked_on_a_hit = udp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, nsid),
    )
    .await;
    assert!(!carries(&asked_on_a_hit.bytes, OPTION_NSID));
    assert_eq!(
        upstream.exchanges().len(),
        1,
        "both later queries were hits"
    );
}

#[tokio::test]
async fn padding_and_tcp_keepalive_reach_no_client_and_are_never_sent_upstream() {
    // kube-dns pads its reply and says how long it keeps its TCP connection to meshdns open:
    // both describe the hop between them, never the client's (RFC 7828 §3.3.2, RFC 7830).
    let mut answer = www();
    answer.options = vec![
        EdnsOption::Unknown(OPTION_PADDING, vec![0; 40]),
        EdnsOption::Unknown(OPTION_TCP_KEEPALIVE, vec![0, 100]),
    ];
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::Delay(Duration::from_millis(200), answer),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[CACHED]).await;
    // The clients pad their queries and ask for keepalive, as a DoT-minded stub may.
    let hop_options: &[(u16, &[u8])] = &[(OPTION_PADDING, &[0; 24]), (OPTION_TCP_KEEPALIVE, &[])];
    let ask = || async {
        udp(
            meshdns.addr,
            &query_with_edns_options(NAME, RecordType::A, hop_options),
        )
        .await
    };
    // Two clients at once: one leads the exchange, the other follows it; then a hit, over TCP.
    let (one, two) = tokio::join!(ask(), ask());
    let hit = tcp(
        meshdns.addr,
        &query_with_edns_options(NAME, RecordType::A, hop_options),
    )
    .await;
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "one exchange for all three");
    for code in [OPTION_PADDING, OPTION_TCP_KEEPALIVE] {
        assert!(
            !carries(&seen[0].query, code),
            "option {code} went upstream"
        );
        for (who, reply) in [
            ("leader or follower", &one),
            ("the other", &two),
            ("hit", &hit),
        ] {
            assert!(
                !carries(&reply.bytes, code),
                "option {code} reached the {who}"
            );
        }
    }
    for reply in [&one, &two, &hit] {
        assert_eq!(reply.answer_lines().len(), 1);
    }
}

/// A query meshdns relayed, without the loop marker it adds to every query it sends upstream
/// (docs/design.md, "No loops"); fails the test when the marker is missing.
fn unmarked(relayed: &[u8]) -> Vec<u8> {
    raw::without_options(relayed, |code| code == OPTION_LOOP_MARKER)
        .expect("every relayed query carries meshdns's loop marker")
}

#[tokio::test]
async fn a_client_subnet_query_is_relayed_and_never_cached() {
    let (upstream, meshdns) = serving(www(), &[CACHED]).await;
    // 192.0.2.0/24 (family 1, source prefix 24, scope 0).
    let subnet: &[u8] = &[0, 1, 24, 0, 192, 0, 2];
    for _ in 0..2 {
        let asked = query_with_edns_options(NAME, RecordType::A, &[(OPTION_CLIENT_SUBNET, subnet)]);
        let reply = udp(meshdns.addr, &asked).await;
        assert_eq!(reply.answer_lines().len(), 1);
        let relayed = unmarked(&upstream.seen().last().unwrap().query);
        assert_eq!(
            support::without_id(&relayed),
            support::without_id(&asked.to_vec().unwrap()),
            "relayed as is"
        );
    }
    assert_eq!(
        upstream.exchanges().len(),
        2,
        "the second was not a cache hit"
    );
    // Nor was the reply stored for clients without a subnet.
    let plain = || async { udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await };
    plain().await;
    plain().await;
    assert_eq!(
        upstream.exchanges().len(),
        3,
        "a scoped reply was never served to another"
    );
}

#[tokio::test]
async fn a_client_subnet_option_of_an_unknown_family_is_relayed_not_formerr() {
    let (upstream, meshdns) = serving(www(), &[]).await;
    let odd: &[u8] = &[0, 99, 0, 0];
    let asked = query_with_edns_options(
        NAME,
        RecordType::A,
        &[(OPTION_CLIENT_SUBNET, odd), (65001, b"private")],
    );
    let bytes = asked.to_vec().unwrap();
    let reply = support::udp_raw(meshdns.addr, &bytes)
        .await
        .expect("a reply");
    assert_eq!(
        rcode_of(&reply),
        ResponseCode::NoError,
        "as kube-dns answers it"
    );
    let relayed = &unmarked(&upstream.seen()[0].query);
    assert_eq!(
        support::without_id(relayed),
        support::without_id(&bytes),
        "passed on unparsed"
    );
    let option = option_bytes(OPTION_CLIENT_SUBNET, odd);
    assert!(relayed.windows(option.len()).any(|w| w == option));
}

// --- 6. Smaller points -----------------------------------------------------------------------

#[tokio::test]
async fn meshdns_own_replies_echo_cd() {
    let cluster = FakeDns::builder().nxdomain_otherwise();
    let (a, b) = (cluster.start().await, FakeDns::silent().await);
    let clusters = format!("a=; b={}", b.addr);
    let meshdns = Meshdns::before(
        &a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
            ("MESHDNS_TIMEOUT", "500ms"),
        ],
    )
    .await;
    let cd = |mut msg: Message| {
        msg.metadata.checking_disabled = true;
        msg
    };
    let mut notify = query(NAME, RecordType::SOA);
    notify.metadata.op_code = OpCode::Notify;
    let mut two_questions = query(NAME, RecordType::A);
    two_questions.add_query(Query::query(rr::name("other.example.com."), RecordType::A));
    let mut badvers = with_edns(query(NAME, RecordType::A), 1232);
    let mut edns = Edns::new();
    edns.set_version(1);
    badvers.set_edns(edns);
    let parsed = [
        ("REFUSED (AXFR)", query(NAME, RecordType::AXFR)),
        ("NOTIMP", notify),
        ("FORMERR (two questions)", two_questions),
        ("BADVERS", badvers),
        (
            "NODATA (distributed MX)",
            query("mongo.db.svc.distributed.local.", RecordType::MX),
        ),
        (
            "NXDOMAIN (distributed)",
            query("gone.db.svc.distributed.local.", RecordType::A),
        ),
        (
            "SERVFAIL (cluster b silent)",
            query("mongo-0.mongo.db.cluster.b.", RecordType::A),
        ),
    ];
    for (what, msg) in parsed {
        let bytes = cd(msg).to_vec().unwrap();
        let reply = support::udp_raw(meshdns.addr, &bytes).await.expect(what);
        assert!(
            raw::header(&reply).checking_disabled,
            "{what}: CD not echoed"
        );
    }
    // A reply built from the header alone (what follows it does not parse).
    let mut garbage = cd(query(NAME, RecordType::A)).to_vec().unwrap();
    garbage.truncate(14);
    garbage.extend_from_slice(b"\xc0\xff garbage");
    let reply = support::udp_raw(meshdns.addr, &garbage)
        .await
        .expect("FORMERR");
    assert_eq!(rcode_of(&reply), ResponseCode::FormErr);
    assert!(raw::header(&reply).checking_disabled, "header-only FORMERR");
}

#[tokio::test]
async fn an_error_reply_without_a_question_is_relayed_with_the_question_restored() {
    let refused = "refused.example.com.";
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::ErrorWithoutQuestion(ResponseCode::FormErr),
        )
        .on(
            refused,
            RecordType::A,
            Behaviour::ErrorWithoutQuestion(ResponseCode::Refused),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(
        &upstream,
        &[
            CACHED,
            ("MESHDNS_ATTEMPT_TIMEOUT", "1s"),
            ("MESHDNS_TIMEOUT", "2s"),
        ],
    )
    .await;
    let asked_as = "WWW.Example.COM.";
    for (name, rcode) in [
        (asked_as, ResponseCode::FormErr),
        (refused, ResponseCode::Refused),
    ] {
        for via in [Via::Udp, Via::Tcp, Via::Udp, Via::Udp] {
            let msg = query(name, RecordType::A);
            let reply = match via {
                Via::Udp => udp(meshdns.addr, &msg).await,
                Via::Tcp => tcp(meshdns.addr, &msg).await,
            };
            assert_eq!(reply.msg.response_code, rcode);
            let echoed: Vec<String> = reply
                .msg
                .queries
                .iter()
                .map(|q| q.name().to_ascii())
                .collect();
            assert_eq!(echoed, [name], "the client's question, as spelled");
        }
    }
    // Relayed at once: one attempt per query, none of them waited out (a reply held back for
    // a better one would count a timeout and ask again).
    assert_eq!(
        upstream.exchanges().len(),
        8,
        "never answered from the cache, never retried"
    );
    // The upstreams of MESHDNS_UPSTREAMS are the group "local" (no MESHDNS_LOCAL_CLUSTER).
    assert_eq!(meshdns.upstream_requests("local", "timeout").await, 0.0);
    let healthy = meshdns.upstream_healthy("local", &upstream).await;
    assert_eq!(healthy, 1.0, "the endpoint answered: never marked down");
}

/// `query` with an OPT record advertising `size` bytes, written into the bytes (hickory raises
/// any size below 512 to 512 when it encodes).
fn with_raw_edns_size(msg: &Message, size: u16) -> Vec<u8> {
    let mut bytes = with_edns(msg.clone(), 1232).to_vec().unwrap();
    let class_at = bytes.len() - 8; // OPT: root(1) type(2) CLASS(2) TTL(4) RDLEN(2), no options
    bytes[class_at..class_at + 2].copy_from_slice(&size.to_be_bytes());
    bytes
}

/// A client advertising an EDNS payload below 512 is answered as if it said 512 (RFC 6891
/// §6.2.3: "Values lower than 512 MUST be treated as equal to 512"): an answer of ~400 bytes
/// comes whole, without TC, with an OPT record, on a miss and on a hit.
#[tokio::test]
async fn an_edns_payload_below_512_is_taken_as_512() {
    let records: Vec<Record> = (0..20u8).map(|i| rr::a(NAME, [192, 0, 2, i])).collect();
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, Answer::records(records))
        .start()
        .await;
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[]).await;
    for round in ["miss", "hit"] {
        let asked = query(NAME, RecordType::A);
        let bytes = with_raw_edns_size(&asked, 100);
        let reply = support::udp_raw(meshdns.addr, &bytes).await.expect(round);
        assert!(
            reply.len() > 100 && reply.len() <= 512,
            "{round}: {}",
            reply.len()
        );
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.id, asked.id);
        assert!(!reply.truncation, "{round}: cut below 512");
        assert_eq!(reply.answers.len(), 20, "{round}");
        assert!(reply.edns.is_some(), "{round}: the OPT record kept");
    }
    assert_eq!(upstream.exchanges().len(), 1);
}

/// The EDNS options of a reply: codes.
fn option_codes(reply: &Reply) -> Vec<u16> {
    let Some(edns) = reply.msg.edns.as_ref() else {
        return Vec::new();
    };
    (edns.options().as_ref().iter())
        .map(|(code, _)| u16::from(*code))
        .collect()
}

/// An EDNS option meshdns does not know, sent by the client, is not echoed back (RFC 6891
/// §6.1.2: options are not echoed unless their own specification says so): not by
/// pass-through (on a miss or a hit), not in a reply meshdns writes itself (a distributed
/// zone's NODATA, BADVERS).
#[tokio::test]
async fn an_unknown_edns_option_of_the_client_is_never_echoed() {
    use hickory_proto::rr::rdata::opt::EdnsOption;
    let upstream = FakeDns::builder()
        .answer(
            NAME,
            RecordType::A,
            Answer::records([rr::a(NAME, [192, 0, 2, 1])]),
        )
        .start()
        .await;
    let peer = FakeDns::builder().otherwise(Behaviour::Drop).start().await;
    let clusters = format!("a=; b={}", peer.addr);
    let meshdns = Meshdns::cached_failing_fast(
        &upstream,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", clusters.as_str()),
        ],
    )
    .await;
    let asking = |name: &str, rtype: RecordType, version: u8| {
        let mut msg = with_edns(query(name, rtype), 1232);
        let edns = msg.edns.as_mut().unwrap();
        edns.set_version(version);
        edns.options_mut()
            .insert(EdnsOption::Unknown(65001, b"private".to_vec()));
        msg
    };
    let distributed = "mongo.db.svc.distributed.local.";
    for (what, msg) in [
        ("miss", asking(NAME, RecordType::A, 0)),
        ("hit", asking(NAME, RecordType::A, 0)),
        ("distributed NODATA", asking(distributed, RecordType::MX, 0)),
        ("BADVERS", asking(NAME, RecordType::A, 1)),
    ] {
        let reply = udp(meshdns.addr, &msg).await;
        assert!(reply.msg.edns.is_some(), "{what}: an OPT record");
        assert!(!option_codes(&reply).contains(&65001), "{what}: echoed");
    }
}
