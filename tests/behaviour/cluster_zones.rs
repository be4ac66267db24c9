//! Cluster zones (docs/design.md, "Cluster zones"): `NAME.cluster.X` is asked of cluster
//! X's DNS as `NAME.svc.<domain of X>`, and every name of the reply comes back under
//! `cluster.X`, the question as the client spelled it — or, for a name the cluster zone cannot
//! hold, SERVFAIL, never the name as the peer spelled it.
//!
//! Each cluster has its own fake DNS that answers `svc.cluster.local` names only, with
//! addresses that say which cluster answered (10.1.… for a, 10.2.… for b, 10.3.… for c): a
//! routing mistake shows as a wrong address, or as REFUSED from a server that was not meant to
//! be asked.
//!
//! The failover and deadline tests run on tokio's paused clock: the durations measured are
//! exact virtual time.

use crate::support;

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, Via, ask, query, rr, tcp, udp};
use tokio::time::Instant;

/// The names every cluster's DNS knows, with addresses of cluster number `n`, in `domain`.
fn cluster_dns_in(n: u8, domain: &str) -> FakeDnsBuilder {
    let name = |host: &str| format!("{host}.svc.{domain}.");
    let member = name("member-4.foo.ns");
    let mongo = |i: u8| name(&format!("mongo-{i}.mongo.db"));
    FakeDns::builder()
        .answer(
            &member,
            RecordType::A,
            Answer::records([rr::a(&member, [10, n, 0, 4])]),
        )
        .answer(
            &member,
            RecordType::AAAA,
            Answer::records([rr::aaaa(&member, &format!("fd00::{n}:4"))]),
        )
        .answer(&member, RecordType::TXT, Answer::nodata(domain))
        .answer(
            &name("_mongodb._tcp.mongo.db"),
            RecordType::SRV,
            Answer::records([
                rr::srv(&name("_mongodb._tcp.mongo.db"), 27017, &mongo(0)),
                rr::srv(&name("_mongodb._tcp.mongo.db"), 27017, &mongo(1)),
            ])
            .additional(rr::a(&mongo(0), [10, n, 1, 0]))
            .additional(rr::a(&mongo(1), [10, n, 1, 1])),
        )
        .answer(
            &name("alias.db"),
            RecordType::A,
            Answer::records([
                rr::cname(&name("alias.db"), &mongo(0)),
                rr::a(&mongo(0), [10, n, 1, 0]),
            ]),
        )
        .answer(
            &name("config.db"),
            RecordType::TXT,
            Answer::records([rr::txt(&name("config.db"), &format!("replicaSet=rs{n}"))]),
        )
        .answer(
            &name("alias.db"),
            RecordType::AAAA,
            Answer::nodata(domain).record(rr::cname(&name("alias.db"), &mongo(0))),
        )
        .answer(&name("gone.db"), RecordType::A, Answer::nxdomain(domain))
        .answer(
            &name("with-ns.db"),
            RecordType::A,
            Answer::records([rr::a(&name("with-ns.db"), [10, n, 2, 0])])
                .authority(rr::ns(
                    &format!("svc.{domain}."),
                    &format!("ns.dns.{domain}."),
                ))
                .additional(rr::a(&format!("ns.dns.{domain}."), [10, n, 9, 9])),
        )
}

fn cluster_dns(n: u8) -> FakeDnsBuilder {
    cluster_dns_in(n, "cluster.local")
}

/// Three clusters: a (this pod's, whose DNS is the upstream), b and c.
struct Mesh {
    local: FakeDns,
    b: FakeDns,
    c: FakeDns,
    meshdns: Meshdns,
}

impl Mesh {
    /// `name` `rtype` asked of meshdns over UDP.
    async fn ask(&self, name: &str, rtype: RecordType) -> support::Reply {
        udp(self.meshdns.addr, &query(name, rtype)).await
    }
}

/// Names outside every cluster zone that kube-dns (the local fake) also knows.
const PASSTHROUGH: [&str; 3] = ["x.notcluster.b.", "x.cluster.bb.", "x.cluster.z."];

async fn mesh() -> Mesh {
    let mut local = cluster_dns(1);
    for name in PASSTHROUGH {
        local = local.answer(
            name,
            RecordType::A,
            Answer::records([rr::a(name, [192, 0, 2, 1])]),
        );
    }
    let (local, b, c) = (
        local.start().await,
        cluster_dns(2).start().await,
        cluster_dns(3).start().await,
    );
    let peers = format!("b={}; c={}", b.addr, c.addr);
    let meshdns = Meshdns::in_cluster_a(&local, &peers).await;
    Mesh {
        local,
        b,
        c,
        meshdns,
    }
}

/// meshdns with one peer cluster b configured by `entry` (its part after `b=`).
async fn with_cluster_b(upstream: &FakeDns, entry: &str, vars: &[(&str, &str)]) -> Meshdns {
    let clusters = format!("a=; b={entry}");
    let mut all = vec![
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
    ];
    all.extend_from_slice(vars);
    Meshdns::before(upstream, &all).await
}

#[tokio::test]
async fn an_a_record_comes_from_that_clusters_dns_under_its_zone() {
    let mesh = mesh().await;
    let reply = mesh.ask("member-4.foo.ns.cluster.b.", RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.answer_lines(),
        ["member-4.foo.ns.cluster.b. A 10.2.0.4"]
    );
    assert_eq!(mesh.b.names(), ["member-4.foo.ns.svc.cluster.local."]);
    assert!(mesh.local.seen().is_empty() && mesh.c.seen().is_empty());
}

/// The peer gets the client's query with the name rewritten and the client's options but the
/// per-hop ones: CLIENT-SUBNET and another meshdns's loop marker travel, a cookie does not.
#[tokio::test]
async fn the_clients_options_travel_to_the_peer_but_the_per_hop_ones() {
    use hickory_proto::rr::rdata::opt::EdnsOption;
    use support::raw::{self, OPTION_CLIENT_SUBNET, OPTION_COOKIE, OPTION_LOOP_MARKER};
    let mesh = mesh().await;
    let mut asked = support::with_edns(query("member-4.foo.ns.cluster.b.", RecordType::A), 1232);
    let subnet = vec![0, 1, 24, 0, 10, 0, 0];
    let other_meshdns = vec![0xee; 8];
    if let Some(edns) = asked.edns.as_mut() {
        for (code, data) in [
            (OPTION_COOKIE, vec![1; 8]),
            (OPTION_CLIENT_SUBNET, subnet.clone()),
            (OPTION_LOOP_MARKER, other_meshdns.clone()),
        ] {
            edns.options_mut().insert(EdnsOption::Unknown(code, data));
        }
    }
    let reply = udp(mesh.meshdns.addr, &asked).await;
    assert_eq!(
        reply.answer_lines(),
        ["member-4.foo.ns.cluster.b. A 10.2.0.4"]
    );
    let seen = mesh.b.seen();
    let sent = &seen.first().expect("asked cluster b").query;
    assert_eq!(seen[0].name, "member-4.foo.ns.svc.cluster.local.");
    let options = raw::options(sent).unwrap();
    assert!(options.contains(&(OPTION_CLIENT_SUBNET, subnet)));
    assert!(options.contains(&(OPTION_LOOP_MARKER, other_meshdns)));
    assert!(!options.iter().any(|(code, _)| *code == OPTION_COOKIE));
}

#[tokio::test]
async fn an_aaaa_record_comes_from_that_clusters_dns_under_its_zone() {
    let mesh = mesh().await;
    let reply = mesh
        .ask("member-4.foo.ns.cluster.c.", RecordType::AAAA)
        .await;
    assert_eq!(
        reply.answer_lines(),
        ["member-4.foo.ns.cluster.c. AAAA fd00::3:4"]
    );
}

#[tokio::test]
async fn srv_targets_and_their_addresses_are_mapped_under_the_cluster_zone() {
    let mesh = mesh().await;
    let reply = mesh
        .ask("_mongodb._tcp.mongo.db.cluster.b.", RecordType::SRV)
        .await;
    assert_eq!(
        reply.answer_lines(),
        [
            "_mongodb._tcp.mongo.db.cluster.b. SRV 0 50 27017 mongo-0.mongo.db.cluster.b.",
            "_mongodb._tcp.mongo.db.cluster.b. SRV 0 50 27017 mongo-1.mongo.db.cluster.b.",
        ]
    );
    assert_eq!(
        reply.additional_lines(),
        [
            "mongo-0.mongo.db.cluster.b. A 10.2.1.0",
            "mongo-1.mongo.db.cluster.b. A 10.2.1.1",
        ]
    );
}

#[tokio::test]
async fn a_cname_inside_the_cluster_domain_is_mapped_back() {
    let mesh = mesh().await;
    let reply = mesh.ask("alias.db.cluster.b.", RecordType::A).await;
    assert_eq!(
        reply.answer_lines(),
        [
            "alias.db.cluster.b. CNAME mongo-0.mongo.db.cluster.b.",
            "mongo-0.mongo.db.cluster.b. A 10.2.1.0",
        ]
    );
}

#[tokio::test]
async fn a_txt_record_comes_from_that_clusters_dns() {
    let mesh = mesh().await;
    let reply = mesh.ask("config.db.cluster.b.", RecordType::TXT).await;
    assert_eq!(
        reply.answer_lines(),
        ["config.db.cluster.b. TXT replicaSet=rs2"]
    );
}

#[tokio::test]
async fn the_question_and_owners_keep_the_clients_spelling() {
    let mesh = mesh().await;
    let asked = "MEMBER-4.Foo.ns.Cluster.B.";
    let reply = mesh.ask(asked, RecordType::A).await;
    assert_eq!(reply.msg.queries[0].name().to_ascii(), asked);
    assert_eq!(reply.answer_lines(), [format!("{asked} A 10.2.0.4")]);
}

#[tokio::test]
async fn nxdomain_keeps_an_soa_owned_by_the_cluster_zone_apex() {
    let mesh = mesh().await;
    let reply = mesh.ask("gone.db.cluster.b.", RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_soa_at_apex(&reply, "cluster.b.");
}

#[tokio::test]
async fn nodata_keeps_an_soa_owned_by_the_cluster_zone_apex() {
    let mesh = mesh().await;
    let reply = mesh
        .ask("member-4.foo.ns.cluster.b.", RecordType::TXT)
        .await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert!(reply.msg.answers.is_empty());
    assert_soa_at_apex(&reply, "cluster.b.");
}

fn assert_soa_at_apex(reply: &support::Reply, apex: &str) {
    let soas: Vec<String> = reply
        .msg
        .authorities
        .iter()
        .filter(|r| r.record_type() == RecordType::SOA)
        .map(|r| r.name.to_ascii())
        .collect();
    assert_eq!(soas, [apex], "{:?}", reply.authority_lines());
}

#[tokio::test]
async fn nodata_after_a_cname_keeps_an_soa_owned_by_the_cluster_zone_apex() {
    let mesh = mesh().await;
    let reply = mesh.ask("alias.db.cluster.b.", RecordType::AAAA).await;
    assert_eq!(
        reply.answer_lines(),
        ["alias.db.cluster.b. CNAME mongo-0.mongo.db.cluster.b."]
    );
    assert_soa_at_apex(&reply, "cluster.b.");
}

#[tokio::test]
async fn the_peers_ns_records_and_their_glue_are_dropped() {
    let mesh = mesh().await;
    let reply = mesh.ask("with-ns.db.cluster.b.", RecordType::A).await;
    assert_eq!(reply.answer_lines(), ["with-ns.db.cluster.b. A 10.2.2.0"]);
    assert!(
        reply.msg.authorities.is_empty(),
        "{:?}",
        reply.authority_lines()
    );
    assert!(
        reply.msg.additionals.is_empty(),
        "{:?}",
        reply.additional_lines()
    );
}

#[tokio::test]
async fn names_that_only_end_like_a_cluster_zone_pass_through() {
    let mesh = mesh().await;
    for name in ["x.notcluster.b.", "x.cluster.bb."] {
        let reply = mesh.ask(name, RecordType::A).await;
        assert_eq!(reply.answer_lines(), [format!("{name} A 192.0.2.1")]);
    }
    assert_eq!(mesh.local.names(), ["x.notcluster.b.", "x.cluster.bb."]);
    assert!(mesh.b.seen().is_empty());
}

#[tokio::test]
async fn an_unknown_cluster_name_passes_through() {
    let mesh = mesh().await;
    let reply = mesh.ask("x.cluster.z.", RecordType::A).await;
    assert_eq!(reply.answer_lines(), ["x.cluster.z. A 192.0.2.1"]);
    assert_eq!(mesh.local.names(), ["x.cluster.z."]);
}

#[tokio::test]
async fn the_local_clusters_zone_goes_to_the_upstreams() {
    let mesh = mesh().await;
    let reply = mesh.ask("member-4.foo.ns.cluster.a.", RecordType::A).await;
    assert_eq!(
        reply.answer_lines(),
        ["member-4.foo.ns.cluster.a. A 10.1.0.4"]
    );
    assert_eq!(mesh.local.names(), ["member-4.foo.ns.svc.cluster.local."]);
    assert!(mesh.b.seen().is_empty() && mesh.c.seen().is_empty());
}

#[tokio::test]
async fn cluster_names_are_answered_over_tcp() {
    let mesh = mesh().await;
    let reply = tcp(
        mesh.meshdns.addr,
        &query("_mongodb._tcp.mongo.db.cluster.c.", RecordType::SRV),
    )
    .await;
    assert_eq!(reply.answer_lines().len(), 2);
    assert_eq!(
        reply.additional_lines(),
        [
            "mongo-0.mongo.db.cluster.c. A 10.3.1.0",
            "mongo-1.mongo.db.cluster.c. A 10.3.1.1",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_peer_endpoint_down_fails_over_to_the_next() {
    let (upstream, silent, live) = (
        FakeDns::builder().start().await,
        FakeDns::silent().await,
        cluster_dns(2).start().await,
    );
    let meshdns = with_cluster_b(
        &upstream,
        &format!("{},{}", silent.addr, live.addr),
        &[
            ("MESHDNS_TIMEOUT", "2s"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ],
    )
    .await;
    let started = Instant::now();
    let reply = udp(
        meshdns.addr,
        &query("member-4.foo.ns.cluster.b.", RecordType::A),
    )
    .await;
    assert_eq!(
        reply.answer_lines(),
        ["member-4.foo.ns.cluster.b. A 10.2.0.4"]
    );
    assert_eq!(silent.count(Via::Udp), 1);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(200),
        "one attempt timeout, not the deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_cluster_gives_servfail_within_the_deadline() {
    let (upstream, silent) = (FakeDns::builder().start().await, FakeDns::silent().await);
    let meshdns = with_cluster_b(
        &upstream,
        &silent.addr.to_string(),
        &[
            ("MESHDNS_TIMEOUT", "600ms"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ],
    )
    .await;
    let started = Instant::now();
    let reply = udp(
        meshdns.addr,
        &query("member-4.foo.ns.cluster.b.", RecordType::A),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert_eq!(
        reply.msg.queries[0].name().to_ascii(),
        "member-4.foo.ns.cluster.b."
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(600),
        "the deadline"
    );
}

#[tokio::test]
async fn per_cluster_transport_tcp_is_honoured() {
    let (upstream, peer) = (
        FakeDns::builder().start().await,
        cluster_dns(2).start().await,
    );
    let meshdns = with_cluster_b(&upstream, &format!("{} transport=tcp", peer.addr), &[]).await;
    let reply = udp(
        meshdns.addr,
        &query("member-4.foo.ns.cluster.b.", RecordType::A),
    )
    .await;
    assert_eq!(
        reply.answer_lines(),
        ["member-4.foo.ns.cluster.b. A 10.2.0.4"]
    );
    assert_eq!((peer.count(Via::Tcp), peer.count(Via::Udp)), (1, 0));
}

#[tokio::test]
async fn a_spoofed_reply_over_tcp_is_ignored_and_the_right_one_used() {
    let owner = "member-4.foo.ns.svc.cluster.local.";
    let (upstream, peer) = (
        FakeDns::builder().start().await,
        FakeDns::builder()
            .on(
                owner,
                RecordType::A,
                Behaviour::WrongIdFirst(Answer::records([rr::a(owner, [10, 2, 0, 4])])),
            )
            .start()
            .await,
    );
    let meshdns = with_cluster_b(&upstream, &format!("{} transport=tcp", peer.addr), &[]).await;
    let reply = udp(
        meshdns.addr,
        &query("member-4.foo.ns.cluster.b.", RecordType::A),
    )
    .await;
    assert_eq!(
        reply.answer_lines(),
        ["member-4.foo.ns.cluster.b. A 10.2.0.4"]
    );
    assert_eq!(peer.count(Via::Tcp), 1, "answered on the first connection");
}

#[tokio::test]
async fn a_truncated_peer_reply_is_fetched_again_over_tcp() {
    let owner = "member-4.foo.ns.svc.cluster.local.";
    let many: Vec<_> = (0..100).map(|i| rr::a(owner, [10, 2, 3, i])).collect();
    let (upstream, peer) = (
        FakeDns::builder().start().await,
        FakeDns::builder()
            .on(
                owner,
                RecordType::A,
                Behaviour::TruncateUdp(Answer::records(many)),
            )
            .start()
            .await,
    );
    let meshdns = with_cluster_b(&upstream, &peer.addr.to_string(), &[]).await;
    let reply = tcp(
        meshdns.addr,
        &query("member-4.foo.ns.cluster.b.", RecordType::A),
    )
    .await;
    assert!(!reply.msg.truncation);
    assert_eq!(reply.answer_lines().len(), 100);
    assert_eq!(
        reply.answer_lines()[0],
        "member-4.foo.ns.cluster.b. A 10.2.3.0"
    );
}

#[tokio::test]
async fn per_cluster_domain_is_honoured() {
    let (upstream, peer) = (
        FakeDns::builder().start().await,
        cluster_dns_in(2, "b.example").start().await,
    );
    let meshdns = with_cluster_b(&upstream, &format!("{} domain=b.example", peer.addr), &[]).await;
    let reply = udp(
        meshdns.addr,
        &query("_mongodb._tcp.mongo.db.cluster.b.", RecordType::SRV),
    )
    .await;
    assert_eq!(peer.names(), ["_mongodb._tcp.mongo.db.svc.b.example."]);
    assert_eq!(
        reply.additional_lines(),
        [
            "mongo-0.mongo.db.cluster.b. A 10.2.1.0",
            "mongo-1.mongo.db.cluster.b. A 10.2.1.1",
        ]
    );
}

/// Only records the question owns answer it (RFC 1034 §4.3.2), on the cluster route as in a
/// gathered answer: a peer's address for another name, also one behind a CNAME chain that
/// leads elsewhere, is dropped before its name is mapped.
#[tokio::test]
async fn records_another_name_owns_are_dropped_on_the_cluster_route() {
    let web = "web.db.svc.cluster.local.";
    let other = "other.db.svc.cluster.local.";
    let peer = FakeDns::builder()
        .answer(
            web,
            RecordType::A,
            Answer::records([rr::a(web, [10, 2, 0, 7]), rr::a(other, [10, 2, 9, 9])]),
        )
        .answer(
            "alias.db.svc.cluster.local.",
            RecordType::A,
            Answer::records([
                rr::cname("alias.db.svc.cluster.local.", "gone.db.svc.cluster.local."),
                rr::a(other, [10, 2, 9, 9]),
            ]),
        )
        .start()
        .await;
    let upstream = FakeDns::builder().start().await;
    let meshdns = with_cluster_b(&upstream, &peer.addr.to_string(), &[]).await;
    let reply = udp(meshdns.addr, &query("web.db.cluster.b.", RecordType::A)).await;
    assert_eq!(reply.answer_lines(), ["web.db.cluster.b. A 10.2.0.7"]);
    let reply = udp(meshdns.addr, &query("alias.db.cluster.b.", RecordType::A)).await;
    assert_eq!(
        reply.answer_lines(),
        ["alias.db.cluster.b. CNAME gone.db.cluster.b."]
    );
}

/// Peer b has a domain of its own (`d.example`) and its DNS also serves `cluster.local`: a
/// target it names under `svc.cluster.local` has no name under `cluster.b`, and as it came the
/// client would resolve it in its own cluster, to another host. SERVFAIL with a reason, as
/// for a name too long for the cluster zone; a name outside every cluster domain (an
/// ExternalName's) still comes as it is.
#[tokio::test]
async fn a_peer_with_its_own_domain_naming_a_local_host_is_servfail_never_that_host() {
    let owner = "_mongodb._tcp.mongo.db.svc.d.example.";
    let external = "_ext._tcp.mongo.db.svc.d.example.";
    let peer = FakeDns::builder()
        .answer(
            owner,
            RecordType::SRV,
            Answer::records([rr::srv(owner, 27017, "mongo-0.mongo.db.svc.cluster.local.")]),
        )
        .answer(
            external,
            RecordType::SRV,
            Answer::records([rr::srv(external, 27017, "db.example.org.")]),
        )
        .start()
        .await;
    let upstream = FakeDns::builder().start().await;
    let entry = format!("{} domain=d.example", peer.addr);
    let meshdns = with_cluster_b(&upstream, &entry, &[]).await;
    let asked = "_mongodb._tcp.mongo.db.cluster.b.";
    let reply = udp(meshdns.addr, &query(asked, RecordType::SRV)).await;
    assert_eq!(
        (reply.msg.response_code, reply.answer_lines()),
        (ResponseCode::ServFail, vec![])
    );
    let asked = "_ext._tcp.mongo.db.cluster.b.";
    let reply = udp(meshdns.addr, &query(asked, RecordType::SRV)).await;
    assert_eq!(
        reply.answer_lines(),
        [format!("{asked} SRV 0 50 27017 db.example.org.")]
    );
}

/// A name in a peer's answer under its `svc.<domain>` is shown under the cluster zone; one that
/// the cluster zone makes longer than 255 bytes cannot be, and left as it is (under the peer's
/// own domain) the client would resolve it in its own cluster. Cluster b's domain is `l`, so
/// `svc.l` (6 bytes on the wire) becomes `cluster.b` (11): a CNAME target of 255 bytes there
/// has no name here, and the reply is SERVFAIL, never the target as b spelled it.
#[tokio::test]
async fn a_peers_name_too_long_for_the_cluster_zone_is_servfail_never_left_as_it_is() {
    // 63, 63, 63 and 55 bytes, each with its length, `svc`, `l` and the root: 255.
    let labels = [
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(55),
    ];
    let target = format!("{}.svc.l.", labels.join("."));
    let b = FakeDns::builder()
        .answer(
            "web.db.svc.l.",
            RecordType::A,
            Answer::records([
                rr::cname("web.db.svc.l.", &target),
                rr::a(&target, [10, 2, 0, 7]),
            ]),
        )
        .start()
        .await;
    let a = FakeDns::builder().nxdomain_otherwise().start().await;
    let clusters = format!("a=; b={} domain=l", b.addr);
    let vars = [
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
    ];
    let meshdns = Meshdns::before(&a, &vars).await;
    let reply = ask(&meshdns, "web.db.cluster.b.", RecordType::A).await;
    assert_eq!(
        (reply.msg.response_code, reply.answer_lines()),
        (ResponseCode::ServFail, vec![]),
        "b was asked: {:?}",
        b.names()
    );
}
