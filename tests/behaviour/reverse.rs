//! Reverse lookups across clusters (docs/design.md, "Reverse lookups across clusters"): with
//! `cidr=` on a cluster entry, the reverse name of an address in that cluster's networks is
//! asked of that cluster's DNS as it was asked, and the names under `svc.<its domain>` in the
//! reply come back under `cluster.X` — so the name a reverse lookup gives resolves forward,
//! through meshdns, to the address it came from; a network moved to another cluster by a
//! reload is never answered from the old one again.
//!
//! The local cluster (a) owns 10.8.0.0/16, cluster b owns 10.9.0.0/16 and fd00:9::/56. Each
//! fake knows only its own cluster's records (REFUSED otherwise), so a query sent to the wrong
//! cluster shows.

use crate::support;

use std::net::IpAddr;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::PTR;
use hickory_proto::rr::{RData, Record, RecordType};
use support::configmap::ConfigMapDir;
use support::{
    Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, ask, eventually, query, rr, udp,
    without_id,
};

const B_POD_V4: &str = "10.9.1.4";
const B_POD_V6: &str = "fd00:9::1:4";
const B_POD: &str = "mongo-4.mongo.db.svc.cluster.local.";
const A_POD_V4: &str = "10.8.1.0";
const A_POD: &str = "mongo-0.mongo.db.svc.cluster.local.";
const ELSEWHERE_V4: &str = "192.0.2.1";

/// The reverse name of `ip`: `d.c.b.a.in-addr.arpa.`, or 32 nibbles under `ip6.arpa.`.
fn reverse_name(ip: &str) -> String {
    match ip.parse::<IpAddr>().expect("an address") {
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
        }
        IpAddr::V6(v6) => {
            let nibbles: String = format!("{:032x}", u128::from(v6))
                .chars()
                .rev()
                .map(|nibble| format!("{nibble}."))
                .collect();
            format!("{nibbles}ip6.arpa.")
        }
    }
}

fn ptr(owner: &str, target: &str) -> Record {
    Record::from_rdata(rr::name(owner), 30, RData::PTR(PTR(rr::name(target))))
}

/// Cluster b's DNS: its pod's reverse names (IPv4 and IPv6) and forward names.
fn cluster_b() -> FakeDnsBuilder {
    FakeDns::builder()
        .answer(
            &reverse_name(B_POD_V4),
            RecordType::PTR,
            Answer::records([ptr(&reverse_name(B_POD_V4), B_POD)]),
        )
        .answer(
            &reverse_name(B_POD_V6),
            RecordType::PTR,
            Answer::records([ptr(&reverse_name(B_POD_V6), B_POD)]),
        )
        .answer(
            B_POD,
            RecordType::A,
            Answer::records([rr::a(B_POD, [10, 9, 1, 4])]),
        )
        .answer(
            B_POD,
            RecordType::AAAA,
            Answer::records([rr::aaaa(B_POD, B_POD_V6)]),
        )
        .answer(
            &reverse_name("10.9.200.1"),
            RecordType::PTR,
            Answer::nxdomain("9.10.in-addr.arpa"),
        )
}

/// kube-dns of cluster a: its own pod's reverse name, an address of no cluster, and the
/// reverse zone of b's whole network (which kube-dns may know from elsewhere).
fn kube_dns() -> FakeDnsBuilder {
    FakeDns::builder()
        .answer(
            &reverse_name(A_POD_V4),
            RecordType::PTR,
            Answer::records([ptr(&reverse_name(A_POD_V4), A_POD)]),
        )
        .answer(
            &reverse_name(ELSEWHERE_V4),
            RecordType::PTR,
            Answer::records([ptr(&reverse_name(ELSEWHERE_V4), "www.example.com.")]),
        )
        .answer(
            "9.10.in-addr.arpa.",
            RecordType::SOA,
            Answer::records([rr::soa("9.10.in-addr.arpa.")]),
        )
}

/// meshdns in cluster a, with b's networks claimed; `vars` over that.
async fn meshdns(kube: &FakeDns, b: &FakeDns, vars: &[(&str, &str)]) -> Meshdns {
    let clusters = format!(
        "a= cidr=10.8.0.0/16; b={} cidr=10.9.0.0/16,fd00:9::/56",
        b.addr
    );
    let mut all = vec![
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
    ];
    all.extend_from_slice(vars);
    Meshdns::before(kube, &all).await
}

/// The address `name` resolves to through meshdns for `rtype`, if any.
async fn forward(meshdns: &Meshdns, name: &str, rtype: RecordType) -> Vec<IpAddr> {
    let reply = udp(meshdns.addr, &query(name, rtype)).await;
    reply
        .msg
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(IpAddr::V4(a.0)),
            RData::AAAA(aaaa) => Some(IpAddr::V6(aaaa.0)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_ptr_of_a_peer_pod_is_its_cluster_name_which_resolves_back_to_it() {
    let (kube, b) = (kube_dns().start().await, cluster_b().start().await);
    let meshdns = meshdns(&kube, &b, &[]).await;
    for (ip, rtype) in [(B_POD_V4, RecordType::A), (B_POD_V6, RecordType::AAAA)] {
        let asked = reverse_name(ip);
        let reply = udp(meshdns.addr, &query(&asked, RecordType::PTR)).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError, "{ip}");
        assert_eq!(
            reply.answer_lines(),
            [format!("{asked} PTR mongo-4.mongo.db.cluster.b.")],
            "{ip}"
        );
        // Forward-confirmed reverse DNS: the name gives the address back.
        let back = forward(&meshdns, "mongo-4.mongo.db.cluster.b.", rtype).await;
        assert_eq!(back, [ip.parse::<IpAddr>().unwrap()], "{ip}");
    }
    // Asked as the client asked (no rewriting of the question), never of kube-dns.
    let asked: Vec<String> = b.exchanges().into_iter().map(|s| s.name).collect();
    assert_eq!(
        asked,
        [
            reverse_name(B_POD_V4),
            B_POD.to_string(),
            reverse_name(B_POD_V6),
            B_POD.to_string()
        ]
    );
    assert!(kube.seen().is_empty(), "{:?}", kube.names());
    let reverse = meshdns
        .metric(
            "meshdns_requests_total",
            &[("proto", "udp"), ("route", "reverse"), ("rcode", "NOERROR")],
        )
        .await;
    assert_eq!(reverse, 2.0);
}

#[tokio::test]
async fn the_reply_carries_the_question_in_the_clients_spelling() {
    let (kube, b) = (kube_dns().start().await, cluster_b().start().await);
    let meshdns = meshdns(&kube, &b, &[]).await;
    let asked = reverse_name(B_POD_V4).replace("in-addr.arpa", "IN-ADDR.Arpa");
    let reply = udp(meshdns.addr, &query(&asked, RecordType::PTR)).await;
    assert!(reply.msg.queries[0].name().eq_case(&rr::name(&asked)));
    assert_eq!(
        reply.answer_lines(),
        [format!(
            "{} PTR mongo-4.mongo.db.cluster.b.",
            reverse_name(B_POD_V4)
        )],
        "the owner as the peer wrote it, the target mapped"
    );
}

#[tokio::test]
async fn addresses_of_the_local_cluster_or_of_no_network_go_to_kube_dns_verbatim() {
    let (kube, b) = (kube_dns().start().await, cluster_b().start().await);
    let meshdns = meshdns(&kube, &b, &[]).await;
    for (ip, target) in [(A_POD_V4, A_POD), (ELSEWHERE_V4, "www.example.com.")] {
        let asked = reverse_name(ip);
        let reply = udp(meshdns.addr, &query(&asked, RecordType::PTR)).await;
        assert_eq!(reply.answer_lines(), [format!("{asked} PTR {target}")]);
        // Verbatim but for the ID and the OPT record that carried meshdns's loop marker.
        let sent = kube.last_reply();
        let sent = support::raw::without_opt(&sent).expect("an OPT record");
        assert_eq!(without_id(&reply.bytes), without_id(&sent));
    }
    assert!(b.seen().is_empty(), "{:?}", b.names());
}

#[tokio::test]
async fn the_reverse_name_of_a_whole_network_passes_through() {
    let (kube, b) = (kube_dns().start().await, cluster_b().start().await);
    let meshdns = meshdns(&kube, &b, &[]).await;
    let reply = udp(meshdns.addr, &query("9.10.in-addr.arpa.", RecordType::SOA)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(kube.names(), ["9.10.in-addr.arpa."]);
    assert!(b.seen().is_empty());
}

#[tokio::test]
async fn a_peers_nxdomain_is_relayed_with_its_soa() {
    let (kube, b) = (kube_dns().start().await, cluster_b().start().await);
    let meshdns = meshdns(&kube, &b, &[]).await;
    let reply = udp(
        meshdns.addr,
        &query(&reverse_name("10.9.200.1"), RecordType::PTR),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(
        reply.msg.authorities[0].name.to_ascii(),
        "9.10.in-addr.arpa.",
        "the SOA of the reverse zone stays where it is"
    );
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_is_down_is_servfail_never_nxdomain() {
    let kube = kube_dns().start().await;
    let b = FakeDns::silent().await;
    let meshdns = meshdns(
        &kube,
        &b,
        &[
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
            ("MESHDNS_TIMEOUT", "1s"),
        ],
    )
    .await;
    let reply = udp(
        meshdns.addr,
        &query(&reverse_name(B_POD_V4), RecordType::PTR),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(reply.msg.answers.is_empty());
    assert!(kube.seen().is_empty(), "never asked of kube-dns instead");
}

#[tokio::test]
async fn a_peer_that_refuses_is_servfail_never_nxdomain() {
    let kube = kube_dns().start().await;
    let b = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::rcode(ResponseCode::Refused)))
        .start()
        .await;
    let meshdns = meshdns(&kube, &b, &[]).await;
    let reply = udp(
        meshdns.addr,
        &query(&reverse_name(B_POD_V4), RecordType::PTR),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_goes_down_is_answered_from_the_stale_ptr() {
    let kube = kube_dns().start().await;
    let asked = reverse_name(B_POD_V4);
    let mut short = ptr(&asked, B_POD);
    short.ttl = 1;
    let b = FakeDns::builder()
        .on(
            &asked,
            RecordType::PTR,
            Behaviour::AnswerThenDrop(1, Answer::records([short])),
        )
        .start()
        .await;
    let meshdns = meshdns(
        &kube,
        &b,
        &[
            ("MESHDNS_CACHE_SIZE", "100"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
            ("MESHDNS_TIMEOUT", "1s"),
        ],
    )
    .await;
    let fresh = udp(meshdns.addr, &query(&asked, RecordType::PTR)).await;
    assert_eq!(
        fresh.answer_lines(),
        [format!("{asked} PTR mongo-4.mongo.db.cluster.b.")]
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let stale = udp(meshdns.addr, &query(&asked, RecordType::PTR)).await;
    assert_eq!(stale.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        stale.answer_lines(),
        [format!("{asked} PTR mongo-4.mongo.db.cluster.b.")]
    );
    assert!(stale.msg.answers[0].ttl <= 30);
    assert!(
        b.exchanges().len() >= 2,
        "the expired entry was asked again"
    );
    assert!(kube.seen().is_empty());
}

#[test]
fn the_test_reverse_names_are_what_resolvers_ask() {
    assert_eq!(reverse_name("10.9.1.4"), "4.1.9.10.in-addr.arpa.");
    let v6 = reverse_name("fd00:9::1:4");
    assert!(v6.starts_with("4.0.0.0.1.0.0.0."), "{v6}");
    assert!(v6.ends_with("9.0.0.0.0.0.d.f.ip6.arpa."), "{v6}");
    assert_eq!(v6.split('.').count(), 35);
}

#[tokio::test]
async fn a_reload_with_overlapping_networks_is_rejected_and_the_reverse_route_stays() {
    let (kube, b) = (kube_dns().start().await, cluster_b().start().await);
    let c = FakeDns::silent().await;
    let clusters = |c_networks: &str| {
        format!(
            "a= cidr=10.8.0.0/16; b={} cidr=10.9.0.0/16,fd00:9::/56; c={} cidr={c_networks}",
            b.addr, c.addr
        )
    };
    let mut dir = ConfigMapDir::new(
        "reverse-overlap",
        &[("MESHDNS_CLUSTERS", &clusters("10.10.0.0/16"))],
    );
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CONFIG_DIR", &path),
        ],
    )
    .await;
    // c claims part of b's network: refused whole.
    dir.update(&[("MESHDNS_CLUSTERS", &clusters("10.9.1.0/24"))]);
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("rejected").await == 1.0
        })
        .await
    );
    let reply = udp(
        meshdns.addr,
        &query(&reverse_name(B_POD_V4), RecordType::PTR),
    )
    .await;
    assert_eq!(
        reply.answer_lines(),
        [format!(
            "{} PTR mongo-4.mongo.db.cluster.b.",
            reverse_name(B_POD_V4)
        )]
    );
    assert!(c.seen().is_empty());
}

/// A network moves from cluster b to cluster c (the operator gave it to the wrong cluster
/// first): the PTR cached from b, with a name under `cluster.b`, is never served again, also
/// once c goes down (c's own cached answer is what is left).
#[tokio::test]
async fn a_reload_that_moves_a_network_from_b_to_c_never_answers_its_ptr_from_b_again() {
    let reverse = reverse_name(B_POD_V4);
    let ptr = |target: &str| {
        Answer::records([Record::from_rdata(
            rr::name(&reverse),
            30,
            RData::PTR(PTR(rr::name(target))),
        )])
    };
    let kube = FakeDns::builder().start().await;
    let b = FakeDns::builder()
        .answer(&reverse, RecordType::PTR, ptr(B_POD))
        .start()
        .await;
    let c = FakeDns::builder()
        .answer(
            &reverse,
            RecordType::PTR,
            ptr("kafka-1.kafka.db.svc.cluster.local."),
        )
        .start()
        .await;
    let clusters = |b_cidr: &str, c_cidr: &str| {
        format!("a=; b={} cidr={b_cidr}; c={} cidr={c_cidr}", b.addr, c.addr)
    };
    let mut dir = ConfigMapDir::new(
        "reverse-network-moved",
        &[("MESHDNS_CLUSTERS", &clusters("10.9.0.0/16", "10.10.0.0/16"))],
    );
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CONFIG_DIR", &path),
            ("MESHDNS_CACHE_SIZE", "100"),
        ],
    )
    .await;
    let asked = || async {
        ask(&meshdns, &reverse, RecordType::PTR)
            .await
            .answer_lines()
    };
    assert_eq!(
        asked().await,
        [format!("{reverse} PTR mongo-4.mongo.db.cluster.b.")]
    );
    dir.update(&[("MESHDNS_CLUSTERS", &clusters("10.11.0.0/16", "10.9.0.0/16"))]);
    assert!(
        support::eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    assert_eq!(
        asked().await,
        [format!("{reverse} PTR kafka-1.kafka.db.cluster.c.")]
    );
    // c goes down: what is cached for the name is c's answer, never b's.
    let _c = FakeDns::builder()
        .otherwise(Behaviour::Drop)
        .replace(c)
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reply = ask(&meshdns, &reverse, RecordType::PTR).await;
    assert!(
        !(reply.answer_lines().iter()).any(|line| line.contains("cluster.b")),
        "{:?}",
        reply.answer_lines()
    );
    assert_eq!(b.exchanges().len(), 1);
}
