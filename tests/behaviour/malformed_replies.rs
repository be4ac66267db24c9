//! Replies are walked once, fully (docs/design.md): a reply that does not walk — here a
//! compression-pointer loop in an owner name — is no reply at all, on every route and every
//! transport. The attempt listens on and takes the right reply that follows; with none, the
//! client gets SERVFAIL with an Extended DNS Error. A malformed reply is never relayed and never
//! cached. (The fault matrix has the same fault for every route; these tests add the cache, TCP
//! and the reply-only case.)

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{
    Answer, Behaviour, FakeDns, Meshdns, Via, extended_error_text, query, rr, udp, with_edns,
};

const NAME: &str = "www.example.com.";
const MEMBER: &str = "member-4.foo.ns.cluster.b.";
const MEMBER_UPSTREAM: &str = "member-4.foo.ns.svc.cluster.local.";

fn www() -> Answer {
    Answer::records([rr::a(NAME, [192, 0, 2, 1]), rr::a(NAME, [192, 0, 2, 2])])
}

fn member() -> Answer {
    Answer::records([rr::a(MEMBER_UPSTREAM, [10, 2, 0, 4])])
}

/// meshdns with a cache, in front of `upstream` as kube-dns, with `vars` besides.
async fn cached_before(upstream: &FakeDns, vars: &[(&str, &str)]) -> Meshdns {
    let mut all = vec![("MESHDNS_CACHE_SIZE", "1000")];
    all.extend_from_slice(vars);
    Meshdns::before(upstream, &all).await
}

#[tokio::test]
async fn pass_through_ignores_a_pointer_loop_reply_and_relays_and_caches_the_right_one() {
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::PointerLoopFirst(www()))
        .start()
        .await;
    let meshdns = cached_before(&upstream, &[]).await;
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
    let meshdns = cached_before(&upstream, &[]).await;
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
    let meshdns = cached_before(
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
