//! Namespace routes (docs/design.md, "Namespace routes"): with `namespaces=crdb-eu` on cluster
//! b, names under `crdb-eu.svc.<local cluster domain>` (and that name itself) are asked of b
//! verbatim, and b's reply comes back as b sent it — owner names stay under
//! `svc.cluster.local`, as CockroachDB's certificates name its nodes.
//!
//! Each fake knows the names of its own cluster's namespace only (REFUSED otherwise), with
//! addresses that say who answered (10.8… kube-dns of a, 10.9… b, 10.10… c).

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::configmap::ConfigMapDir;
use support::{Answer, FakeDns, Meshdns, address_of, eventually, query, rr, udp, without_id};

const NODE_EU: &str = "cockroachdb-0.cockroachdb.crdb-eu.svc.cluster.local.";
const NAMESPACE_EU: &str = "crdb-eu.svc.cluster.local.";
const NODE_US: &str = "cockroachdb-0.cockroachdb.crdb-us.svc.cluster.local.";

/// A cluster's DNS that knows [`NODE_EU`] and [`NAMESPACE_EU`] with addresses `10.n.…`, and
/// [`NODE_US`] (the namespace of the local cluster) when it is kube-dns.
async fn cluster_dns(n: u8) -> FakeDns {
    FakeDns::builder()
        .answer(
            NODE_EU,
            RecordType::A,
            Answer::records([rr::a(NODE_EU, [10, n, 1, 0])]),
        )
        .answer(
            NAMESPACE_EU,
            RecordType::SOA,
            Answer::nodata("cluster.local."),
        )
        .answer(
            NODE_US,
            RecordType::A,
            Answer::records([rr::a(NODE_US, [10, n, 2, 0])]),
        )
        .start()
        .await
}

/// meshdns in cluster a (which holds `crdb-us`), with `crdb-eu` in cluster b.
async fn in_cluster_a(kube: &FakeDns, b: &FakeDns) -> Meshdns {
    let clusters = format!("a= namespaces=crdb-us; b={} namespaces=crdb-eu", b.addr);
    Meshdns::before(
        kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
        ],
    )
    .await
}

#[tokio::test]
async fn names_of_a_claimed_namespace_are_asked_of_its_cluster_verbatim() {
    let (kube, b) = (cluster_dns(8).await, cluster_dns(9).await);
    let meshdns = in_cluster_a(&kube, &b).await;
    let reply = udp(meshdns.addr, &query(NODE_EU, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), [format!("{NODE_EU} A 10.9.1.0")]);
    // The client asked without EDNS: the OPT record that carried meshdns's loop marker upstream
    // (and b's OPT in reply to it) is all that is taken off.
    let sent = b.last_reply();
    assert_eq!(
        without_id(&reply.bytes),
        without_id(&support::raw::without_opt(&sent).expect("an OPT record")),
        "b's reply, byte for byte but the ID and the OPT meshdns added"
    );
    // The namespace's own name goes there too.
    let apex = udp(meshdns.addr, &query(NAMESPACE_EU, RecordType::SOA)).await;
    assert_eq!(apex.msg.response_code, ResponseCode::NoError);
    assert_eq!(b.names(), [NODE_EU, NAMESPACE_EU]);
    assert!(kube.seen().is_empty(), "{:?}", kube.names());
    let namespace = meshdns
        .metric(
            "meshdns_requests_total",
            &[
                ("proto", "udp"),
                ("route", "namespace"),
                ("rcode", "NOERROR"),
            ],
        )
        .await;
    assert_eq!(namespace, 2.0);
}

#[tokio::test]
async fn other_namespaces_and_the_local_clusters_stay_with_kube_dns() {
    let (kube, b) = (cluster_dns(8).await, cluster_dns(9).await);
    let meshdns = in_cluster_a(&kube, &b).await;
    assert_eq!(
        address_of(&meshdns, NODE_US).await.as_deref(),
        Some("10.8.2.0")
    );
    let _ = udp(
        meshdns.addr,
        &query("x.crdb-eu-2.svc.cluster.local.", RecordType::A),
    )
    .await;
    assert_eq!(kube.names(), [NODE_US, "x.crdb-eu-2.svc.cluster.local."]);
    assert!(b.seen().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_namespace_whose_cluster_is_down_is_servfail_never_kube_dns() {
    let kube = cluster_dns(8).await;
    let b = FakeDns::silent().await;
    let clusters = format!("a=; b={} namespaces=crdb-eu", b.addr);
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
            ("MESHDNS_TIMEOUT", "1s"),
        ],
    )
    .await;
    let reply = udp(meshdns.addr, &query(NODE_EU, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(kube.seen().is_empty());
}

#[tokio::test]
async fn cached_answers_of_a_namespace_route_go_when_a_reload_moves_it_and_stay_otherwise() {
    let kube = cluster_dns(8).await;
    let (b, c) = (cluster_dns(9).await, cluster_dns(10).await);
    let mut dir = ConfigMapDir::new(
        "namespaces",
        &[(
            "MESHDNS_CLUSTERS",
            &format!("a=; b={} namespaces=crdb-eu; c={}", b.addr, c.addr),
        )],
    );
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_CONFIG_DIR", &path),
            ("MESHDNS_CACHE_SIZE", "100"),
            ("MESHDNS_LOCAL_CLUSTER", "a"),
        ],
    )
    .await;
    assert_eq!(
        address_of(&meshdns, NODE_EU).await.as_deref(),
        Some("10.9.1.0")
    );

    // A change that leaves b and its claim as they were keeps the cached answer.
    let other = cluster_dns(11).await;
    dir.update(&[(
        "MESHDNS_CLUSTERS",
        &format!(
            "a=; b={} namespaces=crdb-eu; c={}; d={}",
            b.addr, c.addr, other.addr
        ),
    )]);
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    assert_eq!(
        address_of(&meshdns, NODE_EU).await.as_deref(),
        Some("10.9.1.0")
    );
    assert_eq!(b.exchanges().len(), 1, "answered from the cache");

    // The namespace moves to c: no answer of b's is served for it any more.
    dir.update(&[(
        "MESHDNS_CLUSTERS",
        &format!("a=; b={}; c={} namespaces=crdb-eu", b.addr, c.addr),
    )]);
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("applied").await == 2.0
        })
        .await
    );
    assert_eq!(
        address_of(&meshdns, NODE_EU).await.as_deref(),
        Some("10.10.1.0")
    );
    assert_eq!(c.names(), [NODE_EU]);
    assert_eq!(b.exchanges().len(), 1);
}
