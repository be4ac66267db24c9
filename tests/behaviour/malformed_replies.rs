//! Which upstream replies meshdns takes (docs/design.md, "Replies are walked once, fully"): a
//! reply that does not walk — here a compression-pointer loop in an owner name — is no reply
//! at all, on every route and every transport, and neither is one whose question is not the
//! one asked (its type differing in the 0x20 bit included). The attempt listens on and takes the right reply that follows; with none, the
//! client gets SERVFAIL with an Extended DNS Error. A malformed reply is never relayed and never
//! cached. (The fault matrix has the same fault for every route; these tests add the cache, TCP
//! and the reply-only case.)

use crate::support;

use std::net::SocketAddr;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{
    Answer, Behaviour, FakeDns, Meshdns, Via, extended_error_text, query, rr, udp, with_edns,
};
use tokio::net::UdpSocket;

const NAME: &str = "www.example.com.";
const MEMBER: &str = "member-4.foo.ns.cluster.b.";
const MEMBER_UPSTREAM: &str = "member-4.foo.ns.svc.cluster.local.";

fn www() -> Answer {
    Answer::records([rr::a(NAME, [192, 0, 2, 1]), rr::a(NAME, [192, 0, 2, 2])])
}

fn member() -> Answer {
    Answer::records([rr::a(MEMBER_UPSTREAM, [10, 2, 0, 4])])
}

#[tokio::test]
async fn pass_through_ignores_a_pointer_loop_reply_and_relays_and_caches_the_right_one() {
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::PointerLoopFirst(www()))
        .start()
        .await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    for ask in ["first", "second (from the cache)"] {
        let reply = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError, "{ask}");
        assert_eq!(
            reply.answer_lines(),
            [
                "www.example.com. A 192.0.2.1",
                "www.example.com. A 192.0.2.2"
            ],
            "{ask}"
        );
    }
    assert_eq!(
        upstream.exchanges().len(),
        1,
        "one exchange, its attempt listened past the malformed reply; then the cache"
    );
}

#[tokio::test]
async fn pass_through_ignores_a_pointer_loop_frame_in_the_tcp_fetch_after_a_truncated_reply() {
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::TruncateUdpThenOverTcp(Box::new(Behaviour::PointerLoopFirst(www()))),
        )
        .start()
        .await;
    let meshdns = Meshdns::cached(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert!(!reply.msg.truncation, "the whole answer, fetched over TCP");
    assert_eq!(reply.answer_lines().len(), 2);
    assert_eq!(
        (upstream.count(Via::Udp), upstream.count(Via::Tcp)),
        (1, 1),
        "one query each way: the TCP fetch listened past the malformed frame"
    );
}

#[tokio::test]
async fn pass_through_with_only_pointer_loop_replies_is_servfail_with_a_reason_never_cached() {
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::PointerLoopOnly(www()))
        .start()
        .await;
    let meshdns = Meshdns::cached(
        &upstream,
        &[
            ("MESHDNS_TIMEOUT", "300ms"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "100ms"),
        ],
    )
    .await;
    for ask in ["first", "second"] {
        let reply = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
        assert_eq!(reply.msg.response_code, ResponseCode::ServFail, "{ask}");
        assert!(reply.msg.answers.is_empty(), "{ask}");
        assert!(
            extended_error_text(&reply.msg).is_some(),
            "{ask}: SERVFAIL says why"
        );
    }
}

/// meshdns in cluster a, cluster b's DNS at `peer` (with `options` after its address).
async fn with_cluster_b(peer: &FakeDns, options: &str) -> (FakeDns, Meshdns) {
    let local = FakeDns::builder().start().await;
    let meshdns = Meshdns::in_cluster_a(&local, &format!("b={} {options}", peer.addr)).await;
    (local, meshdns)
}

#[tokio::test]
async fn cluster_route_ignores_a_pointer_loop_reply_and_answers_from_the_right_one() {
    for (transport, options) in [(Via::Udp, ""), (Via::Tcp, "transport=tcp")] {
        let peer = FakeDns::builder()
            .on(
                MEMBER_UPSTREAM,
                RecordType::A,
                Behaviour::PointerLoopFirst(member()),
            )
            .start()
            .await;
        let (_local, meshdns) = with_cluster_b(&peer, options).await;
        let reply = udp(meshdns.addr, &query(MEMBER, RecordType::A)).await;
        assert_eq!(
            reply.msg.response_code,
            ResponseCode::NoError,
            "{transport:?}"
        );
        assert_eq!(
            reply.answer_lines(),
            ["member-4.foo.ns.cluster.b. A 10.2.0.4"],
            "{transport:?}"
        );
        assert_eq!(
            peer.count(transport),
            1,
            "{transport:?}: answered within the first attempt"
        );
    }
}

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
