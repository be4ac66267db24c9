//! Additional records for names outside the zone answered (RFC 2181 §5.4.1, docs/design.md
//! "Cluster zones" and "Pass-through"): a cluster zone's reply carries only the additional
//! records it maps back into the zone; in pass-through the reply is relayed verbatim, but no
//! additional record ever becomes the answer for its own name — from the cache or otherwise.

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{Answer, FakeDns, Meshdns, ask, rr};

/// A name outside every zone, and what kube-dns really answers for it.
const FOREIGN: &str = "www.example.org.";
const FOREIGN_REAL: [u8; 4] = [192, 0, 2, 80];
/// What a misbehaving server claims for it, as glue.
const FOREIGN_GLUE: [u8; 4] = [203, 0, 113, 66];

/// kube-dns: the real answer for [`FOREIGN`], and `extra` besides.
async fn kube_dns(
    extra: impl FnOnce(support::FakeDnsBuilder) -> support::FakeDnsBuilder,
) -> FakeDns {
    let builder = FakeDns::builder().answer(
        FOREIGN,
        RecordType::A,
        Answer::records([rr::a(FOREIGN, FOREIGN_REAL)]),
    );
    extra(builder).start().await
}

/// The foreign name, asked after the glue was seen, is kube-dns's real answer.
async fn foreign_is_answered_by_kube_dns(meshdns: &Meshdns, local: &FakeDns) {
    let reply = ask(meshdns, FOREIGN, RecordType::A).await;
    assert_eq!(reply.answer_lines(), ["www.example.org. A 192.0.2.80"]);
    let asked = (local.exchanges().iter())
        .filter(|seen| seen.name == FOREIGN)
        .count();
    assert_eq!(asked, 1, "kube-dns was asked for the foreign name itself");
}

#[tokio::test]
async fn a_cluster_zone_reply_keeps_only_additional_records_inside_the_zone() {
    let owner = "_mongodb._tcp.mongo.db.svc.cluster.local.";
    let member = "mongo-0.mongo.db.svc.cluster.local.";
    let peer = FakeDns::builder()
        .answer(
            owner,
            RecordType::SRV,
            Answer::records([rr::srv(owner, 27017, member)])
                .additional(rr::a(member, [10, 2, 1, 0]))
                .additional(rr::a(FOREIGN, FOREIGN_GLUE))
                .additional(rr::aaaa("ns.example.net.", "2001:db8::53")),
        )
        .start()
        .await;
    let local = kube_dns(|b| b).await;
    let clusters = format!("a=; b={}", peer.addr);
    let meshdns = Meshdns::before(
        &local,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_CACHE_SIZE", "1000"),
        ],
    )
    .await;
    for ask_ in ["first", "second (from the cache)"] {
        let reply = ask(
            &meshdns,
            "_mongodb._tcp.mongo.db.cluster.b.",
            RecordType::SRV,
        )
        .await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError, "{ask_}");
        assert_eq!(
            reply.additional_lines(),
            ["mongo-0.mongo.db.cluster.b. A 10.2.1.0"],
            "{ask_}: only the record the zone owns"
        );
    }
    foreign_is_answered_by_kube_dns(&meshdns, &local).await;
}

#[tokio::test]
async fn a_pass_through_additional_record_never_answers_for_its_own_name() {
    let asked = "www.example.com.";
    let local = kube_dns(|b| {
        b.answer(
            asked,
            RecordType::A,
            Answer::records([rr::a(asked, [192, 0, 2, 1])])
                .additional(rr::a(FOREIGN, FOREIGN_GLUE)),
        )
    })
    .await;
    let meshdns = Meshdns::before(&local, &[("MESHDNS_CACHE_SIZE", "1000")]).await;
    for ask_ in ["first", "second (from the cache)"] {
        let reply = ask(&meshdns, asked, RecordType::A).await;
        assert_eq!(
            reply.answer_lines(),
            ["www.example.com. A 192.0.2.1"],
            "{ask_}"
        );
        assert_eq!(
            reply.additional_lines(),
            ["www.example.org. A 203.0.113.66"],
            "{ask_}: pass-through relays the reply verbatim"
        );
    }
    foreign_is_answered_by_kube_dns(&meshdns, &local).await;
    // And again, now that both are cached: each name its own entry.
    let reply = ask(&meshdns, FOREIGN, RecordType::A).await;
    assert_eq!(reply.answer_lines(), ["www.example.org. A 192.0.2.80"]);
}
