//! Observability (docs/design.md, "Observability"): the admin server's `/metrics`, `/livez`
//! and `/readyz`, scraped over HTTP from meshdns running on 127.0.0.1 with fake upstreams.
//!
//! Every meshdns has its own registry, so scrapes taken before and after a scripted mix of
//! queries give exact deltas, whatever the other tests do meanwhile.

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use meshdns::testing::metrics::FAMILIES;
use support::admin::{Scrape, changes, get, request};
use support::{Answer, FakeDns, Meshdns, query, rr, tcp, udp, udp_raw_within};
use tokio::net::TcpStream;

const WWW: &str = "www.example.com.";
const MEMBER_B: &str = "member-4.foo.ns.svc.cluster.local.";
const SRV_NAME: &str = "_mongodb._tcp.mongo.db.svc.cluster.local.";

/// A port on 127.0.0.1 where nothing listens: UDP queries to it fail at once (ICMP port
/// unreachable → connection refused), a clean "upstream failure".
fn dead_port() -> SocketAddr {
    ([127, 0, 0, 1], support::free_port()).into()
}

#[tokio::test]
async fn a_scrape_after_a_scripted_mix_of_queries_shows_the_exact_deltas() {
    let kube_dns = FakeDns::builder()
        .answer(
            WWW,
            RecordType::A,
            Answer::records([rr::a(WWW, [192, 0, 2, 1])]),
        )
        .answer(
            SRV_NAME,
            RecordType::SRV,
            Answer::records([rr::srv(
                SRV_NAME,
                27017,
                "mongo-0.mongo.db.svc.cluster.local.",
            )]),
        )
        .start()
        .await;
    let cluster_b = FakeDns::builder()
        .answer(
            MEMBER_B,
            RecordType::A,
            Answer::records([rr::a(MEMBER_B, [10, 2, 0, 4])]),
        )
        .answer(
            SRV_NAME,
            RecordType::SRV,
            Answer::records([rr::srv(
                SRV_NAME,
                27017,
                "mongo-0.mongo.db.svc.cluster.local.",
            )]),
        )
        .start()
        .await;
    let dead = dead_port();
    let clusters = format!("a=; b={}; c={dead}", cluster_b.addr);
    // One attempt per exchange (timeout = attempt timeout), so every count is exact.
    let meshdns = Meshdns::before(
        &kube_dns,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_TIMEOUT", "1s"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "1s"),
            ("MESHDNS_CACHE_SIZE", "100"),
        ],
    )
    .await;
    let before = meshdns.scrape().await;

    // Pass-through, then the same again: a cache hit.
    let www = query(WWW, RecordType::A);
    assert_eq!(
        udp(meshdns.addr, &www).await.msg.response_code,
        ResponseCode::NoError
    );
    assert_eq!(
        udp(meshdns.addr, &www).await.msg.response_code,
        ResponseCode::NoError
    );
    // A cluster zone over TCP.
    let member = query("member-4.foo.ns.cluster.b.", RecordType::A);
    assert_eq!(
        tcp(meshdns.addr, &member).await.msg.response_code,
        ResponseCode::NoError
    );
    // A cluster whose DNS is down: SERVFAIL.
    let down = query("member-4.foo.ns.cluster.c.", RecordType::A);
    assert_eq!(
        udp(meshdns.addr, &down).await.msg.response_code,
        ResponseCode::ServFail
    );
    // Gathered from a, b and c; c fails, so the answer is partial.
    let gathered = query(
        "_mongodb._tcp.mongo.db.svc.distributed.local.",
        RecordType::SRV,
    );
    let reply = udp(meshdns.addr, &gathered).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.msg.answers.len(), 2, "a's and b's members");
    // Five bytes are no DNS message: dropped without a reply.
    assert_eq!(
        udp_raw_within(meshdns.addr, &[1, 2, 3, 4, 5], Duration::from_millis(200)).await,
        None
    );

    let after = meshdns.scrape().await;
    let requests = |proto, route, rcode| {
        format!("meshdns_requests_total{{proto=\"{proto}\",rcode=\"{rcode}\",route=\"{route}\"}}")
    };
    let upstream = |cluster, result| {
        format!("meshdns_upstream_requests_total{{peer=\"{cluster}\",result=\"{result}\"}}")
    };
    let count = |name: &str, route: &str| format!("{name}{{route=\"{route}\"}}");
    let upstream_count =
        |cluster: &str| format!("meshdns_upstream_duration_seconds_count{{peer=\"{cluster}\"}}");
    let expected: BTreeMap<String, f64> = [
        (requests("udp", "passthrough", "NOERROR"), 2.0),
        (requests("tcp", "cluster", "NOERROR"), 1.0),
        (requests("udp", "cluster", "SERVFAIL"), 1.0),
        (requests("udp", "distributed", "NOERROR"), 1.0),
        (
            count("meshdns_request_duration_seconds_count", "passthrough"),
            2.0,
        ),
        (
            count("meshdns_request_duration_seconds_count", "cluster"),
            2.0,
        ),
        (
            count("meshdns_request_duration_seconds_count", "distributed"),
            1.0,
        ),
        // kube-dns: the first pass-through and the gathered leg; b: its zone and its leg;
        // c: its zone and its leg, both refused at once.
        (upstream("a", "ok"), 2.0),
        (upstream("b", "ok"), 2.0),
        (upstream("c", "error"), 2.0),
        (upstream_count("a"), 2.0),
        (upstream_count("b"), 2.0),
        (upstream_count("c"), 2.0),
        ("meshdns_gather_partial_total".to_string(), 1.0),
        ("meshdns_cache_hits_total".to_string(), 1.0),
        // Looked up and not found: the first pass-through, both cluster-zone queries and the
        // gathered query (its legs are stored, not looked up).
        ("meshdns_cache_misses_total".to_string(), 4.0),
        (
            "meshdns_dropped_total{reason=\"malformed\"}".to_string(),
            1.0,
        ),
    ]
    .into_iter()
    .collect();
    let mut changed = changes(&before, &after);
    // Stored: the pass-through, cluster b's answer, the gathered answer and its legs from a
    // and b, and cluster c's failure, remembered for a second (RFC 9520).
    assert_eq!(changed.remove("meshdns_cache_entries"), Some(6.0));
    assert_eq!(changed, expected);

    // Labels come from closed sets only; no query name ever becomes a label.
    assert_eq!(
        after.label_values("meshdns_requests_total", "route"),
        sorted(&ROUTES)
    );
    assert_eq!(
        after.label_values("meshdns_requests_total", "rcode"),
        sorted(&RCODES)
    );
    assert_eq!(
        after.label_values("meshdns_upstream_requests_total", "result"),
        sorted(&RESULTS)
    );
    assert_eq!(
        after.label_values("meshdns_dropped_total", "reason"),
        sorted(&REASONS)
    );
    for key in after.samples.keys() {
        for name in ["example", "member-4", "mongo", "cluster.b"] {
            assert!(!key.contains(name), "a query name in a label: {key}");
        }
    }
    assert_eq!(after.value("meshdns_inflight", &[]), 0.0);
    assert_eq!(
        after.value(
            "meshdns_upstream_healthy",
            &[("peer", "b"), ("endpoint", &cluster_b.addr.to_string())]
        ),
        1.0
    );
}

/// The closed sets of label values that the README's Metrics section gives: `route`, `rcode`,
/// the `result` of an upstream request, and the `reason` a query or connection was dropped.
const ROUTES: [&str; 8] = [
    "passthrough",
    "cluster",
    "distributed",
    "clusterset",
    "reverse",
    "namespace",
    "self",
    "search",
];
const RCODES: [&str; 7] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other",
];
const RESULTS: [&str; 8] = [
    "ok",
    "servfail",
    "refused",
    "other_rcode",
    "timeout",
    "error",
    "tls_error",
    "local_error",
];
const REASONS: [&str; 6] = [
    "inflight_limit",
    "tcp_connection_limit",
    "malformed",
    "not_allowed",
    "tcp_stalled",
    "tls_handshake",
];

fn sorted(values: &[&str]) -> Vec<String> {
    let mut values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
    values.sort_unstable();
    values
}

#[tokio::test]
async fn readyz_is_200_while_every_upstream_is_down() {
    let dead_local = dead_port();
    let dead_b = dead_port();
    let upstreams = dead_local.to_string();
    let clusters = format!("a=; b={dead_b}");
    let meshdns = Meshdns::start(&[
        ("MESHDNS_UPSTREAMS", &upstreams),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", &clusters),
        ("MESHDNS_TIMEOUT", "1s"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "1s"),
    ])
    .await;
    // Three failures in a row mark an endpoint down.
    for _ in 0..3 {
        let www = udp(meshdns.addr, &query(WWW, RecordType::A)).await;
        assert_eq!(www.msg.response_code, ResponseCode::ServFail);
        let member = udp(meshdns.addr, &query("x.ns.cluster.b.", RecordType::A)).await;
        assert_eq!(member.msg.response_code, ResponseCode::ServFail);
    }
    let scrape = meshdns.scrape().await;
    // The kube-dns group is called after the local cluster.
    let healthy = |cluster: &str, endpoint: SocketAddr| {
        scrape.value(
            "meshdns_upstream_healthy",
            &[("peer", cluster), ("endpoint", &endpoint.to_string())],
        )
    };
    assert_eq!(healthy("a", dead_local), 0.0);
    assert_eq!(healthy("b", dead_b), 0.0);
    let ready = get(meshdns.admin, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(get(meshdns.admin, "/livez").await.status, 200);
}

#[tokio::test]
async fn metrics_are_text_format_and_other_paths_are_404() {
    // A cluster given by host name, so the configuration-bounded families have series too.
    let meshdns = Meshdns::start(&[
        ("MESHDNS_UPSTREAMS", &dead_port().to_string()),
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", "a=; b=dns-b.example.test:30053"),
    ])
    .await;
    let metrics = get(meshdns.admin, "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .headers
            .contains("content-type: text/plain; version=0.0.4"),
        "{}",
        metrics.headers
    );
    // Every family is there from the first scrape, with its type; but the certificates',
    // which show only certificates that exist (this meshdns has none): an expiry at 0 would
    // read as a certificate long expired.
    let scrape = Scrape::parse(&metrics.body);
    let types: BTreeMap<String, String> = FAMILIES
        .iter()
        .filter(|f| !f.name.contains("_certificate_"))
        .map(|f| (f.name.to_string(), f.kind.as_str().to_string()))
        .collect();
    assert_eq!(scrape.types, types);
    assert_eq!(
        scrape.value(
            "meshdns_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    for path in ["/", "/metrics/x", "/healthz", "/readyz?x"] {
        let status = get(meshdns.admin, path).await.status;
        assert_eq!(
            status,
            if path == "/readyz?x" { 200 } else { 404 },
            "{path}"
        );
    }
    assert_eq!(request(meshdns.admin, "POST", "/metrics").await.status, 404);
    assert_eq!(request(meshdns.admin, "HEAD", "/livez").await.status, 200);
}

#[tokio::test]
async fn the_admin_server_caps_its_connections_and_dns_keeps_answering() {
    let kube_dns = FakeDns::builder()
        .answer(
            WWW,
            RecordType::A,
            Answer::records([rr::a(WWW, [192, 0, 2, 1])]),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&kube_dns, &[]).await;
    // Idle connections that never send a request fill every admin slot…
    let mut idle = Vec::new();
    for _ in 0..meshdns::testing::server::ADMIN_MAX_CONNECTIONS + 4 {
        idle.push(TcpStream::connect(meshdns.admin).await.unwrap());
    }
    // …and DNS is served all the same.
    let reply = udp(meshdns.addr, &query(WWW, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    // Once they are gone, the admin server answers again.
    drop(idle);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(get(meshdns.admin, "/livez").await.status, 200);
}
