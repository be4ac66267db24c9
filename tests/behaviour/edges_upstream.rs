//! Edges of the upstream exchange, found by a review of `src/upstream/`: each test is named
//! after what must hold; three reproduced a bug (a reply whose question type differed by the
//! 0x20 bit accepted; an endpoint name's top-bit TTL held for five minutes; a failed A
//! question dropping a name's IPv4 endpoints).
//!
//! The fakes here are raw sockets on 127.0.0.1 where the shared `FakeDns` cannot say what is
//! needed (a reply whose question differs from the query in one byte of its type).

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{Answer, Behaviour, FakeDns, Meshdns, query, rr, udp};
use tokio::net::UdpSocket;

/// Where the question's type lies in `message`: after the header and the question's name
/// (uncompressed, as every query is).
fn question_type_at(message: &[u8]) -> usize {
    let mut at = 12;
    while message[at] != 0 {
        at += 1 + usize::from(message[at]);
    }
    at + 1
}

/// A UDP upstream that answers every query twice from its own address, with the query's ID:
/// first a NOERROR whose question has `wrong_type` in place of the asked type (every other
/// byte the query's), then an NXDOMAIN that echoes the question as asked.
async fn answers_another_type_first(wrong_type: u16) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65_535];
        loop {
            let Ok((len, from)) = socket.recv_from(&mut buf).await else {
                return;
            };
            let asked = &buf[..len];
            let at = question_type_at(asked);
            let mut wrong = asked.to_vec();
            wrong[2] |= 0x80; // QR
            wrong[at..at + 2].copy_from_slice(&wrong_type.to_be_bytes());
            let mut right = asked.to_vec();
            right[2] |= 0x80;
            right[3] = (right[3] & 0xf0) | 3; // NXDOMAIN
            let _ = socket.send_to(&wrong, from).await;
            let _ = socket.send_to(&right, from).await;
        }
    });
    addr
}

/// A reply is the upstream's answer only when it echoes the question asked: its name ignoring
/// letter case (RFC 4343; RFC 5452 §9.1 for the 0x20 trick), its type and class exactly
/// (RFC 5452 §3: ID, question and source must all match). Type 97 is HTTPS (65) with bit 0x20
/// set: a comparison that folds ASCII case over the type bytes takes one for the other.
#[tokio::test]
async fn a_reply_whose_question_type_differs_by_the_case_bit_is_not_accepted() {
    let upstream = answers_another_type_first(97).await;
    let list = upstream.to_string();
    let meshdns = Meshdns::start(&[("MESHDNS_UPSTREAMS", list.as_str())]).await;
    let reply = udp(meshdns.addr, &query("svc.example.org.", RecordType::HTTPS)).await;
    assert_eq!(
        reply.msg.response_code,
        ResponseCode::NXDomain,
        "the reply to the HTTPS question, not the one about TYPE97"
    );
}

/// The endpoint name of cluster b in [`resolutions_of_an_endpoint_name`].
const ENDPOINT_NAME: &str = "dns-b.example.test.";

/// How many times meshdns asks kube-dns for cluster b's endpoint name (A) in its first 21 s,
/// kube-dns answering it with 127.0.0.1 and `ttl`.
async fn resolutions_of_an_endpoint_name(ttl: u32) -> usize {
    let mut record = rr::a(ENDPOINT_NAME, [127, 0, 0, 1]);
    record.ttl = ttl;
    let kube = FakeDns::builder()
        .answer(ENDPOINT_NAME, RecordType::A, Answer::records([record]))
        .answer(
            ENDPOINT_NAME,
            RecordType::AAAA,
            Answer::nodata("example.test."),
        )
        .start()
        .await;
    let _meshdns = Meshdns::in_cluster_a(&kube, "b=dns-b.example.test:30053").await;
    tokio::time::sleep(Duration::from_secs(21)).await;
    kube.seen()
        .iter()
        .filter(|seen| seen.rtype == RecordType::A && seen.name == ENDPOINT_NAME)
        .count()
}

/// An endpoint name is re-resolved when its TTL runs out, clamped to 5 s … 5 min
/// (docs/design.md, "Configuration": "re-resolved when its TTL runs out (clamped to 5 s … 5
/// min)"): a 1 s TTL is asked again every 5 s.
#[tokio::test(start_paused = true)]
async fn an_endpoint_name_with_a_short_ttl_is_re_resolved_every_five_seconds() {
    let asked = resolutions_of_an_endpoint_name(1).await;
    assert!((4..=6).contains(&asked), "asked {asked} times in 21 s");
}

/// A TTL with its top bit set counts as 0 (RFC 2181 §8; docs/design.md, "Cache"), so an
/// endpoint name answered with one is re-resolved at the 5 s floor, not held for the 5 min
/// ceiling as if the TTL were 68 years.
#[tokio::test(start_paused = true)]
async fn an_endpoint_name_whose_ttl_has_the_top_bit_set_is_re_resolved_at_the_floor() {
    let asked = resolutions_of_an_endpoint_name(0x8000_0000).await;
    assert!((4..=6).contains(&asked), "asked {asked} times in 21 s");
}

/// A resolution of an endpoint name that fails keeps the last good addresses (docs/design.md,
/// "Configuration": "the last good addresses are kept when resolution fails"), and so does
/// one half of it: when the A question fails (SERVFAIL) while AAAA answers, the name's IPv4
/// addresses are not dropped as if the name had lost them.
#[tokio::test(start_paused = true)]
async fn an_endpoint_name_whose_a_question_fails_once_keeps_its_ipv4_addresses() {
    let mut v4 = rr::a(ENDPOINT_NAME, [127, 0, 0, 1]);
    v4.ttl = 1;
    let mut v6 = rr::aaaa(ENDPOINT_NAME, "::1");
    v6.ttl = 1;
    let kube = FakeDns::builder()
        .on(
            ENDPOINT_NAME,
            RecordType::A,
            Behaviour::Sequence(vec![
                Answer::records([v4]),
                Answer::rcode(ResponseCode::ServFail),
            ]),
        )
        .answer(ENDPOINT_NAME, RecordType::AAAA, Answer::records([v6]))
        .start()
        .await;
    let meshdns = Meshdns::in_cluster_a(&kube, "b=dns-b.example.test:30053").await;
    let series = |endpoint: &'static str| {
        let meshdns = &meshdns;
        async move {
            let scrape = meshdns.scrape().await;
            let endpoints = scrape.label_values("meshdns_upstream_healthy", "endpoint");
            endpoints.iter().any(|listed| listed == endpoint)
        }
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(series("127.0.0.1:30053").await, "resolved at first");
    assert!(series("[::1]:30053").await, "resolved at first");
    // The second resolution (after the 5 s floor) gets SERVFAIL for A.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        series("127.0.0.1:30053").await,
        "the IPv4 endpoint stays after a failed A question"
    );
}
