//! Zone apexes (docs/design.md, "Zone apexes"): each meshdns zone answers its own SOA in the
//! answer section — a cluster zone with its peer's SOA mapped to the zone (the peer's
//! serial), a gathered zone with a synthesized SOA whose serial changes whenever a cluster's
//! does. Below an apex, an SOA question keeps the Kubernetes DNS shape: NODATA with the SOA in
//! the authority section.
//!
//! The fakes answer as CoreDNS's kubernetes plugin does: `cluster.local SOA` with the SOA in
//! the answer section, `svc.cluster.local SOA` (no zone of its own) NODATA with it in the
//! authority section; the serial is each cluster's own.

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{RData, Record, RecordType};
use support::{Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, Reply, ask, rr};

const DOMAIN: &str = "cluster.local.";

/// A cluster's DNS whose zone `cluster.local` has these serials, one per query of its SOA
/// (the last one to every query after).
fn cluster_dns(serials: &[u32]) -> FakeDnsBuilder {
    let apex = serials
        .iter()
        .map(|&serial| Answer::records([rr::soa_serial(DOMAIN, serial)]))
        .collect();
    let below = |serial: u32| Answer {
        authorities: vec![rr::soa_serial(DOMAIN, serial)],
        authoritative: true,
        ..Answer::rcode(ResponseCode::NoError)
    };
    let last = *serials.last().expect("a serial");
    FakeDns::builder()
        .on(DOMAIN, RecordType::SOA, Behaviour::Sequence(apex))
        .answer("svc.cluster.local.", RecordType::SOA, below(last))
        .answer("db.svc.cluster.local.", RecordType::SOA, below(last))
        .answer(
            "gone.db.svc.cluster.local.",
            RecordType::A,
            Answer {
                rcode: ResponseCode::NXDomain,
                ..below(last)
            },
        )
}

fn soa_of(record: &Record) -> &SOA {
    match &record.data {
        RData::SOA(soa) => soa,
        other => panic!("an SOA record, not {other}"),
    }
}

/// meshdns over clusters a (local), b and c, with the distributed and clusterset zones.
async fn mesh(a: FakeDnsBuilder, b: FakeDnsBuilder, c: FakeDnsBuilder) -> (Vec<FakeDns>, Meshdns) {
    let fakes = vec![a.start().await, b.start().await, c.start().await];
    let clusters = format!("a=; b={}; c={}", fakes[1].addr, fakes[2].addr);
    let vars = [
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
        ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
    ];
    let meshdns = Meshdns::before(&fakes[0], &vars).await;
    (fakes, meshdns)
}

#[tokio::test]
async fn a_cluster_zones_soa_is_the_peers_in_the_answer_section() {
    let (_fakes, meshdns) = mesh(
        cluster_dns(&[11]),
        cluster_dns(&[2_026_120_201]),
        cluster_dns(&[33]),
    )
    .await;
    let reply = ask(&meshdns, "Cluster.B.", RecordType::SOA).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.msg.answers.len(), 1, "{:?}", reply.answer_lines());
    let answer = &reply.msg.answers[0];
    assert!(
        answer.name.eq_case(&rr::name("Cluster.B.")),
        "{}",
        answer.name
    );
    assert_eq!(soa_of(answer).serial, 2_026_120_201, "the peer's serial");
    assert!(
        reply.msg.authorities.is_empty(),
        "{:?}",
        reply.authority_lines()
    );
}

#[tokio::test]
async fn below_a_cluster_zones_apex_an_soa_question_is_nodata_with_the_soa_in_authority() {
    let (_fakes, meshdns) = mesh(cluster_dns(&[11]), cluster_dns(&[22]), cluster_dns(&[33])).await;
    let reply = ask(&meshdns, "db.cluster.b.", RecordType::SOA).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert!(reply.msg.answers.is_empty());
    assert_eq!(reply.authority_lines().len(), 1);
    assert_eq!(reply.msg.authorities[0].name, rr::name("cluster.b."));
    assert_eq!(soa_of(&reply.msg.authorities[0]).serial, 22);
}

#[tokio::test]
async fn a_distributed_zones_soa_serial_changes_when_a_clusters_serial_does() {
    let (_fakes, meshdns) = mesh(
        cluster_dns(&[100]),
        cluster_dns(&[200, 250]),
        cluster_dns(&[300]),
    )
    .await;
    let serial = |reply: &Reply| {
        assert_eq!(reply.msg.response_code, ResponseCode::NoError);
        assert_eq!(reply.msg.answers.len(), 1, "{:?}", reply.answer_lines());
        assert!(
            reply.msg.answers[0]
                .name
                .eq_case(&rr::name("Distributed.Local."))
        );
        soa_of(&reply.msg.answers[0]).serial
    };
    let first = serial(&ask(&meshdns, "Distributed.Local.", RecordType::SOA).await);
    let second = serial(&ask(&meshdns, "Distributed.Local.", RecordType::SOA).await);
    assert_eq!(first, 600, "the sum of the clusters' serials");
    assert_eq!(second, 650, "cluster b's serial went from 200 to 250");
    // The clusterset zone's is made the same way.
    let clusterset = ask(&meshdns, "clusterset.local.", RecordType::SOA).await;
    assert_eq!(soa_of(&clusterset.msg.answers[0]).serial, 650);
}

#[tokio::test]
async fn a_distributed_zones_serial_wraps_around_and_a_silent_cluster_leaves_it() {
    let (_fakes, meshdns) = mesh(
        cluster_dns(&[u32::MAX]),
        cluster_dns(&[5]),
        FakeDns::builder().otherwise(Behaviour::Answer(Answer::rcode(ResponseCode::ServFail))),
    )
    .await;
    let reply = ask(&meshdns, "distributed.local.", RecordType::SOA).await;
    let answer = &reply.msg.answers[0];
    assert_eq!(soa_of(answer).serial, 4, "u32::MAX + 5, modulo 2^32");
    assert!(answer.ttl <= 5, "partial: cached a few seconds at most");
}

#[tokio::test]
async fn below_a_distributed_zones_apex_soa_is_nodata_and_a_negative_answer_carries_the_serial() {
    let (fakes, meshdns) = mesh(cluster_dns(&[1]), cluster_dns(&[2]), cluster_dns(&[3])).await;
    let below = ask(&meshdns, "db.svc.distributed.local.", RecordType::SOA).await;
    assert_eq!(below.msg.response_code, ResponseCode::NoError);
    assert!(below.msg.answers.is_empty());
    assert_eq!(
        below.msg.authorities[0].name,
        rr::name("distributed.local.")
    );
    assert!(
        fakes.iter().all(|f| f.seen().is_empty()),
        "no cluster asked"
    );
    let gone = ask(&meshdns, "gone.db.svc.distributed.local.", RecordType::A).await;
    assert_eq!(gone.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(soa_of(&gone.msg.authorities[0]).serial, 6, "1 + 2 + 3");
}
