//! Wrong answers at the borders of reloads, name rewriting and gathered merges, found by a
//! review of the edges (its cache-key test is in `cache`): each test is named after what must
//! hold, and five of them reproduced a bug (a remembered NXDOMAIN filling a down cluster's leg,
//! twice; a target too long for its prefix; a clusterset ClusterIP target that routed nowhere;
//! a peer's name too long for the cluster zone).
//!
//! Clusters: a (this pod's; its DNS is `MESHDNS_UPSTREAMS`), b and c, each a fake DNS on
//! 127.0.0.1 with addresses that say which cluster answered (10.1.… for a, 10.2.… for b,
//! 10.3.… for c).

use crate::support;

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, ask, rr};

/// A name of cluster domain `cluster.local`.
fn upstream(host: &str) -> String {
    format!("{host}.svc.cluster.local.")
}

fn nxdomain() -> Behaviour {
    Behaviour::Answer(Answer::nxdomain("cluster.local."))
}

/// A cluster's DNS that answers nothing.
fn silent() -> FakeDnsBuilder {
    FakeDns::builder().otherwise(Behaviour::Drop)
}

/// meshdns as a pod of cluster a (kube-dns `a`) whose peers are `peers` (`name=fake`), with
/// `vars` over the test defaults.
async fn mesh(a: &FakeDns, peers: &[(&str, &FakeDns)], vars: &[(&str, &str)]) -> Meshdns {
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
    Meshdns::before(a, &all).await
}

// --- Gathered answers: stale legs ----------------------------------------------------------

/// Service `b-team` of namespace `db` runs in cluster a only: `b-team.db.svc.distributed.local`
/// is first asked of b as `team` (prefix `b-`), which b does not have, then gathered as it is.
/// When b then goes down, b's remembered NXDOMAIN for `team` must not turn into an NXDOMAIN
/// for `b-team`, which exists (in a): the fallback is what finds it, and b's stale "no" is
/// no answer to the question the client asked.
#[tokio::test(start_paused = true)]
async fn a_service_named_like_a_prefix_is_never_nxdomain_while_that_prefixes_cluster_is_down() {
    let team = upstream("b-team.db");
    let a = FakeDns::builder()
        .answer(
            &team,
            RecordType::A,
            Answer::records([rr::a(&team, [10, 1, 0, 7])]),
        )
        .otherwise(nxdomain())
        .start()
        .await;
    let b = FakeDns::builder().otherwise(nxdomain()).start().await;
    let vars = [
        ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ("MESHDNS_TIMEOUT", "1s"),
        ("MESHDNS_CACHE_SIZE", "1000"),
    ];
    let meshdns = mesh(&a, &[("b", &b)], &vars).await;
    let asked = "b-team.db.svc.distributed.local.";
    let first = ask(&meshdns, asked, RecordType::A).await;
    assert_eq!(first.answer_lines(), [format!("{asked} A 10.1.0.7")]);
    assert_eq!(
        b.names(),
        [upstream("team.db"), team.clone()],
        "b was asked for `team`, then the fallback asked everyone for `b-team`"
    );

    // b goes down; the cached answer (TTL 30 s) expires.
    let _b = silent().replace(b).await;
    tokio::time::sleep(Duration::from_secs(31)).await;
    let mut seen = Vec::new();
    for _ in 0..6 {
        let reply = ask(&meshdns, asked, RecordType::A).await;
        seen.push(format!(
            "{} {:?}",
            reply.msg.response_code,
            reply.answer_lines()
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        seen.iter().all(|s| !s.starts_with("Non-Existent Domain")),
        "b-team exists in cluster a, b being down says nothing about it: {seen:#?}"
    );
}

/// The outcome table (docs/design.md, "Distributed zones"): "no records, others NXDOMAIN, a
/// failed leg could hold the name → SERVFAIL, never a cacheable NXDOMAIN". c's NXDOMAIN for
/// `q`, remembered from the leg a prefixed question made (`c-q` is first asked of c as `q`),
/// is no answer of c's while c is down: the gathered `q` is SERVFAIL, not a complete NXDOMAIN
/// made of the others' "no" and c's old one.
#[tokio::test(start_paused = true)]
async fn a_down_clusters_remembered_nxdomain_never_makes_a_complete_nxdomain() {
    let a = FakeDns::builder().otherwise(nxdomain()).start().await;
    let b = FakeDns::builder().otherwise(nxdomain()).start().await;
    let c = FakeDns::builder().otherwise(nxdomain()).start().await;
    let vars = [
        ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ("MESHDNS_TIMEOUT", "1s"),
        ("MESHDNS_CACHE_SIZE", "1000"),
    ];
    let meshdns = mesh(&a, &[("b", &b), ("c", &c)], &vars).await;
    let prefixed = ask(&meshdns, "c-q.db.svc.distributed.local.", RecordType::A).await;
    assert_eq!(prefixed.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(c.names()[0], upstream("q.db"), "c was asked for `q`");

    // c goes down; `q` itself is asked for the first time.
    let _c = silent().replace(c).await;
    let partial_before = meshdns.metric("meshdns_gather_partial_total", &[]).await;
    let reply = ask(&meshdns, "q.db.svc.distributed.local.", RecordType::A).await;
    let partial_after = meshdns.metric("meshdns_gather_partial_total", &[]).await;
    assert_eq!(
        reply.msg.response_code,
        ResponseCode::ServFail,
        "c did not answer: it could hold the name (partial counted {partial_before} → {partial_after})"
    );
}

// --- Gathered answers: SRV targets resolve back ----------------------------------------------

/// The invariant of the gathered zones (docs/design.md, "Distributed zones"): every SRV target
/// meshdns writes resolves back through meshdns to the addresses it came from — in the
/// clusterset zone too ("same merge rules"). The SRV target of a ClusterIP Service is the
/// service name itself (`web.db.svc.cluster.local`, no host label).
#[tokio::test]
async fn a_clusterset_srv_target_of_a_clusterip_service_resolves_back_to_its_address() {
    let web = upstream("web.db");
    let srv_owner = upstream("_http._tcp.web.db");
    let b = FakeDns::builder()
        .answer(
            &srv_owner,
            RecordType::SRV,
            Answer::records([rr::srv(&srv_owner, 80, &web)])
                .additional(rr::a(&web, [10, 96, 2, 7])),
        )
        .answer(
            &web,
            RecordType::A,
            Answer::records([rr::a(&web, [10, 96, 2, 7])]),
        )
        .otherwise(nxdomain())
        .start()
        .await;
    let a = FakeDns::builder().otherwise(nxdomain()).start().await;
    let c = FakeDns::builder().otherwise(nxdomain()).start().await;
    let vars = [("MESHDNS_CLUSTERSET_ZONE", "clusterset.local")];
    let meshdns = mesh(&a, &[("b", &b), ("c", &c)], &vars).await;
    let srv = ask(
        &meshdns,
        "_http._tcp.web.db.svc.clusterset.local.",
        RecordType::SRV,
    )
    .await;
    assert_eq!(srv.msg.response_code, ResponseCode::NoError);
    let [record] = srv.msg.answers.as_slice() else {
        panic!("one SRV record: {:?}", srv.answer_lines());
    };
    let target = match &record.data {
        hickory_proto::rr::RData::SRV(srv) => srv.target.to_ascii(),
        other => panic!("{other:?}"),
    };
    let back = ask(&meshdns, &target, RecordType::A).await;
    assert_eq!(
        (back.msg.response_code, back.answer_lines()),
        (ResponseCode::NoError, vec![format!("{target} A 10.96.2.7")]),
        "the target {target} resolves to the address it came from"
    );
}

// --- Cluster zones: names that do not fit -----------------------------------------------------

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
    let a = FakeDns::builder().otherwise(nxdomain()).start().await;
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

// --- Gathered answers: prefixes that do not fit a label ---------------------------------------

/// A Service name of 50 characters, of namespace `db`: with cluster a's prefix `a-` it fits a
/// label (52 bytes), with cluster b's `prod-eu-west-1-` it does not (65).
const LONG_SERVICE: &str = "payments-gateway-production-eu-west-release-api-hl";

/// The invariant (docs/design.md, "Distributed zones"): every SRV target meshdns writes
/// resolves back through meshdns to the addresses it came from. A ClusterIP Service whose
/// name leaves no room for b's prefix in its label has no name in the zone at b: b's target
/// must not come out as b's own `svc.cluster.local` name (which the client resolves through
/// kube-dns, to the local cluster's Service of that name). b's records are left out and the
/// answer is partial (TTLs of a few seconds, counted), a's target resolves back to a.
#[tokio::test]
async fn a_target_too_long_for_its_prefix_never_comes_out_as_the_clusters_own_name() {
    assert_eq!(LONG_SERVICE.len(), 50);
    let name = upstream(&format!("{LONG_SERVICE}.db"));
    let srv_owner = upstream(&format!("_http._tcp.{LONG_SERVICE}.db"));
    let cluster = |n: u8| {
        FakeDns::builder()
            .answer(
                &srv_owner,
                RecordType::SRV,
                Answer::records([rr::srv(&srv_owner, 80, &name)])
                    .additional(rr::a(&name, [10, 96, n, 7])),
            )
            .answer(
                &name,
                RecordType::A,
                Answer::records([rr::a(&name, [10, 96, n, 7])]),
            )
            .otherwise(nxdomain())
    };
    let (a, b) = (cluster(1).start().await, cluster(2).start().await);
    let clusters = format!("a=; b={} prefix=prod-eu-west-1-", b.addr);
    let vars = [
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
    ];
    let meshdns = Meshdns::before(&a, &vars).await;
    let asked = format!("_http._tcp.{LONG_SERVICE}.db.svc.distributed.local.");
    let srv = ask(&meshdns, &asked, RecordType::SRV).await;
    assert_eq!(srv.msg.response_code, ResponseCode::NoError);
    let target = format!("a-{LONG_SERVICE}.db.svc.distributed.local.");
    assert_eq!(
        srv.answer_lines(),
        [format!("{asked} SRV 0 50 80 {target}")]
    );
    assert!(srv.msg.answers.iter().all(|r| r.ttl <= 5), "partial");
    assert_eq!(
        meshdns.metric("meshdns_gather_partial_total", &[]).await,
        1.0
    );
    let back = ask(&meshdns, &target, RecordType::A).await;
    assert_eq!(back.answer_lines(), [format!("{target} A 10.96.1.7")]);
}

// --- Reloads ---------------------------------------------------------------------------------

/// `d.c.b.a.in-addr.arpa.`
fn reverse_v4([a, b, c, d]: [u8; 4]) -> String {
    format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
}

/// A network moves from cluster b to cluster c (the operator gave it to the wrong cluster
/// first): the PTR cached from b, with a name under `cluster.b`, is never served again, also
/// once c goes down (c's own cached answer is what is left).
#[tokio::test]
async fn a_reload_that_moves_a_network_from_b_to_c_never_answers_its_ptr_from_b_again() {
    use hickory_proto::rr::rdata::PTR;
    use hickory_proto::rr::{RData, Record};
    use support::configmap::ConfigMapDir;
    let reverse = reverse_v4([10, 9, 1, 4]);
    let ptr = |target: &str| {
        Answer::records([Record::from_rdata(
            rr::name(&reverse),
            30,
            RData::PTR(PTR(rr::name(target))),
        )])
    };
    let kube = FakeDns::builder().start().await;
    let b = FakeDns::builder()
        .answer(
            &reverse,
            RecordType::PTR,
            ptr(&upstream("mongo-4.mongo.db")),
        )
        .start()
        .await;
    let c = FakeDns::builder()
        .answer(
            &reverse,
            RecordType::PTR,
            ptr(&upstream("kafka-1.kafka.db")),
        )
        .start()
        .await;
    let clusters = |b_cidr: &str, c_cidr: &str| {
        format!("a=; b={} cidr={b_cidr}; c={} cidr={c_cidr}", b.addr, c.addr)
    };
    let mut dir = ConfigMapDir::new(
        "edges-reverse-move",
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
    let _c = silent().replace(c).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reply = ask(&meshdns, &reverse, RecordType::PTR).await;
    assert!(
        !(reply.answer_lines().iter()).any(|line| line.contains("cluster.b")),
        "{:?}",
        reply.answer_lines()
    );
    assert_eq!(b.exchanges().len(), 1);
}
