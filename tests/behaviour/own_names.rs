//! The pod's own names (docs/design.md, "The pod's own names"): meshdns answers the exact
//! names of its own pod itself — under the cluster domain, its cluster zone, every distributed
//! zone with the local prefix, the clusterset zone, and the PTR of its addresses — without
//! asking anyone, from its first query on. Any other name, a sibling's included, is routed as
//! before.
//!
//! The world: pod mongo-0 of headless service `mongo` in namespace `db`, cluster a, addresses
//! 10.8.1.2 and fd00::8:1:2. The stand-in kube-dns does not know it yet (a pod that is not
//! ready is not published) and knows its sibling mongo-1 (10.8.1.3); cluster b's DNS knows
//! nothing. Both count what they are asked: an own name must reach neither.

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};
use support::configmap::ConfigMapDir;
use support::{
    Answer, Behaviour, FakeDns, Meshdns, Via, ask, eventually, query, rr, tcp, udp, with_edns,
};

const SVC: &str = "mongo-0.mongo.db.svc.cluster.local.";
const IN_CLUSTER: &str = "mongo-0.mongo.db.cluster.a.";
const DISTRIBUTED: &str = "a-mongo-0.mongo.db.svc.distributed.local.";
const CLUSTERSET: &str = "mongo-0.a.mongo.db.svc.clusterset.local.";
const REVERSE_V4: &str = "2.1.8.10.in-addr.arpa.";
const REVERSE_V6: &str =
    "2.0.0.0.1.0.0.0.8.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.";

/// Each forward own name with the zone whose SOA its negative answers carry.
const FORWARD: [(&str, &str); 4] = [
    (SVC, "cluster.local."),
    (IN_CLUSTER, "cluster.a."),
    (DISTRIBUTED, "distributed.local."),
    (CLUSTERSET, "clusterset.local."),
];

const SIBLING: &str = "mongo-1.mongo.db.svc.cluster.local.";

struct Pod {
    kube_dns: FakeDns,
    b: FakeDns,
    meshdns: Meshdns,
}

impl Pod {
    /// No query reached a stand-in.
    fn asked_nobody(&self) -> bool {
        self.kube_dns.seen().is_empty() && self.b.seen().is_empty()
    }
}

/// The stand-in kube-dns of cluster a: NXDOMAIN for mongo-0 (not ready), mongo-1's records.
async fn kube_dns() -> FakeDns {
    FakeDns::builder()
        .answer(SVC, RecordType::A, Answer::nxdomain("cluster.local."))
        .answer(SVC, RecordType::AAAA, Answer::nxdomain("cluster.local."))
        .answer(
            SIBLING,
            RecordType::A,
            Answer::records([rr::a(SIBLING, [10, 8, 1, 3])]),
        )
        .answer(
            "3.1.8.10.in-addr.arpa.",
            RecordType::PTR,
            Answer::nxdomain("in-addr.arpa."),
        )
        .start()
        .await
}

/// meshdns in pod mongo-0 with `pod_vars` (its identity) over the mesh of clusters a and b.
async fn pod_with(pod_vars: &[(&str, &str)], extra: &[(&str, &str)]) -> Pod {
    let kube_dns = kube_dns().await;
    let b = FakeDns::builder().start().await;
    let clusters = format!("a=; b={}", b.addr);
    let mut vars = vec![
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
        ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
    ];
    vars.extend_from_slice(pod_vars);
    vars.extend_from_slice(extra);
    let meshdns = Meshdns::before(&kube_dns, &vars).await;
    Pod {
        kube_dns,
        b,
        meshdns,
    }
}

const DUAL_STACK: [(&str, &str); 5] = [
    ("MESHDNS_POD_IP", "10.8.1.2"),
    ("MESHDNS_POD_IPS", "10.8.1.2,fd00::8:1:2"),
    ("MESHDNS_POD_HOSTNAME", "mongo-0"),
    ("MESHDNS_POD_SUBDOMAIN", "mongo"),
    ("MESHDNS_POD_NAMESPACE", "db"),
];

async fn dual_stack_pod() -> Pod {
    pod_with(&DUAL_STACK, &[]).await
}

/// The same pod with its IPv4 address only.
async fn ipv4_pod() -> Pod {
    pod_with(&DUAL_STACK[..1], &DUAL_STACK[2..]).await
}

fn ttls(reply: &support::Reply) -> Vec<u32> {
    reply
        .msg
        .answers
        .iter()
        .chain(&reply.msg.authorities)
        .map(|r| r.ttl)
        .collect()
}

#[tokio::test]
async fn every_own_name_is_answered_locally_with_the_pods_addresses() {
    let pod = dual_stack_pod().await;
    for (name, _) in FORWARD {
        let reply = udp(pod.meshdns.addr, &query(name, RecordType::A)).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError, "{name}");
        assert_eq!(reply.answer_lines(), [format!("{name} A 10.8.1.2")]);
        assert!(reply.msg.authoritative, "{name}");
        let reply = udp(pod.meshdns.addr, &query(name, RecordType::AAAA)).await;
        assert_eq!(reply.answer_lines(), [format!("{name} AAAA fd00::8:1:2")]);
        assert_eq!(ttls(&reply), [5], "{name}");
    }
    assert!(pod.asked_nobody(), "{:?}", pod.kube_dns.names());
}

#[tokio::test]
async fn the_family_the_pod_lacks_is_nodata_with_the_soa_of_the_names_zone() {
    let pod = ipv4_pod().await;
    for (name, zone) in FORWARD {
        let reply = udp(pod.meshdns.addr, &query(name, RecordType::AAAA)).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError, "{name}");
        assert!(reply.msg.answers.is_empty(), "{name}");
        let soa = &reply.msg.authorities;
        assert_eq!(soa.len(), 1, "{name}");
        assert_eq!(soa[0].name.to_ascii(), zone);
        assert!(matches!(soa[0].data, RData::SOA(_)), "{name}");
        assert_eq!(ttls(&reply), [5], "{name}");
        let reply = udp(pod.meshdns.addr, &query(name, RecordType::A)).await;
        assert_eq!(reply.answer_lines(), [format!("{name} A 10.8.1.2")]);
    }
    assert!(pod.asked_nobody());
}

#[tokio::test]
async fn other_types_of_an_own_name_are_nodata() {
    let pod = dual_stack_pod().await;
    for rtype in [
        RecordType::TXT,
        RecordType::MX,
        RecordType::SRV,
        RecordType::PTR,
    ] {
        let reply = udp(pod.meshdns.addr, &query(IN_CLUSTER, rtype)).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError, "{rtype}");
        assert!(reply.msg.answers.is_empty(), "{rtype}");
        assert_eq!(reply.authority_lines().len(), 1, "{rtype}");
    }
    let reply = udp(pod.meshdns.addr, &query(REVERSE_V4, RecordType::A)).await;
    assert!(reply.msg.answers.is_empty());
    assert_eq!(reply.msg.authorities[0].name.to_ascii(), "in-addr.arpa.");
    assert!(pod.asked_nobody());
}

#[tokio::test]
async fn any_gets_every_record_of_the_name() {
    let pod = dual_stack_pod().await;
    let reply = udp(pod.meshdns.addr, &query(DISTRIBUTED, RecordType::ANY)).await;
    assert_eq!(
        reply.answer_lines(),
        [
            format!("{DISTRIBUTED} A 10.8.1.2"),
            format!("{DISTRIBUTED} AAAA fd00::8:1:2")
        ]
    );
    let reply = udp(pod.meshdns.addr, &query(REVERSE_V4, RecordType::ANY)).await;
    assert_eq!(
        reply.answer_lines(),
        [format!("{REVERSE_V4} PTR {IN_CLUSTER}")]
    );
    assert!(pod.asked_nobody());
}

#[tokio::test]
async fn the_ptr_of_each_own_address_is_the_cluster_zone_name_and_it_resolves_back() {
    let pod = dual_stack_pod().await;
    for (reverse, rtype, address) in [
        (REVERSE_V4, RecordType::A, "A 10.8.1.2"),
        (REVERSE_V6, RecordType::AAAA, "AAAA fd00::8:1:2"),
    ] {
        let reply = udp(pod.meshdns.addr, &query(reverse, RecordType::PTR)).await;
        assert_eq!(
            reply.answer_lines(),
            [format!("{reverse} PTR {IN_CLUSTER}")]
        );
        assert_eq!(ttls(&reply), [5]);
        // Forward-confirmed: the name the PTR gives resolves to the address asked about.
        let forward = udp(pod.meshdns.addr, &query(IN_CLUSTER, rtype)).await;
        assert_eq!(forward.answer_lines(), [format!("{IN_CLUSTER} {address}")]);
    }
    assert!(pod.asked_nobody());
}

#[tokio::test]
async fn without_a_local_cluster_the_ptr_is_the_svc_name() {
    let kube_dns = kube_dns().await;
    let meshdns = Meshdns::before(&kube_dns, &DUAL_STACK).await;
    let reply = udp(meshdns.addr, &query(REVERSE_V4, RecordType::PTR)).await;
    assert_eq!(reply.answer_lines(), [format!("{REVERSE_V4} PTR {SVC}")]);
    let reply = udp(meshdns.addr, &query(SVC, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), [format!("{SVC} A 10.8.1.2")]);
    assert!(kube_dns.seen().is_empty());
}

#[tokio::test]
async fn a_siblings_names_still_go_to_kube_dns() {
    let pod = dual_stack_pod().await;
    let reply = udp(pod.meshdns.addr, &query(SIBLING, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), [format!("{SIBLING} A 10.8.1.3")]);
    let reply = udp(
        pod.meshdns.addr,
        &query("mongo-1.mongo.db.cluster.a.", RecordType::A),
    )
    .await;
    assert_eq!(
        reply.answer_lines(),
        ["mongo-1.mongo.db.cluster.a. A 10.8.1.3"]
    );
    // A sibling's address, and names that only contain or extend an own name.
    let reply = udp(
        pod.meshdns.addr,
        &query("3.1.8.10.in-addr.arpa.", RecordType::PTR),
    )
    .await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    for name in [
        "x.mongo-0.mongo.db.svc.cluster.local.",
        "mongo.db.svc.cluster.local.",
    ] {
        udp(pod.meshdns.addr, &query(name, RecordType::A)).await;
    }
    assert_eq!(
        pod.kube_dns.names(),
        [
            SIBLING,
            SIBLING,
            "3.1.8.10.in-addr.arpa.",
            "x.mongo-0.mongo.db.svc.cluster.local.",
            "mongo.db.svc.cluster.local.",
        ]
    );
    assert!(pod.b.seen().is_empty());
}

#[tokio::test]
async fn the_clients_spelling_is_echoed_in_the_question_and_the_answer() {
    // With the cache on: the second spelling is served from the entry the first one made.
    let pod = pod_with(&DUAL_STACK, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    for name in [
        "Mongo-0.MONGO.db.Cluster.A.",
        "mongo-0.mongo.DB.cluster.a.",
        "A-Mongo-0.Mongo.Db.Svc.Distributed.Local.",
        "2.1.8.10.IN-ADDR.ARPA.",
    ] {
        let rtype = if name.ends_with("ARPA.") {
            RecordType::PTR
        } else {
            RecordType::A
        };
        let reply = udp(pod.meshdns.addr, &query(name, rtype)).await;
        assert_eq!(reply.msg.queries[0].name().to_ascii(), name);
        assert_eq!(reply.msg.answers.len(), 1, "{name}");
        assert_eq!(reply.msg.answers[0].name.to_ascii(), name);
    }
    assert!(pod.asked_nobody());
}

#[tokio::test]
async fn edns_is_answered_with_edns_and_tcp_like_udp() {
    let pod = dual_stack_pod().await;
    let plain = udp(pod.meshdns.addr, &query(SVC, RecordType::A)).await;
    assert!(plain.msg.edns.is_none(), "no OPT to a client without EDNS");
    let with = udp(
        pod.meshdns.addr,
        &with_edns(query(SVC, RecordType::A), 1232),
    )
    .await;
    assert!(with.msg.edns.is_some(), "an OPT to a client with EDNS");
    assert_eq!(with.answer_lines(), plain.answer_lines());
    let over_tcp = tcp(pod.meshdns.addr, &query(SVC, RecordType::AAAA)).await;
    assert_eq!(over_tcp.answer_lines(), [format!("{SVC} AAAA fd00::8:1:2")]);
    assert!(pod.asked_nobody());
}

#[tokio::test]
async fn own_names_are_counted_under_route_self() {
    let pod = dual_stack_pod().await;
    udp(pod.meshdns.addr, &query(SVC, RecordType::A)).await;
    udp(pod.meshdns.addr, &query(REVERSE_V6, RecordType::PTR)).await;
    udp(pod.meshdns.addr, &query(SIBLING, RecordType::A)).await;
    let scrape = pod.meshdns.scrape().await;
    let requests = |route: &str| {
        scrape.value(
            "meshdns_requests_total",
            &[("proto", "udp"), ("route", route), ("rcode", "NOERROR")],
        )
    };
    assert_eq!(requests("self"), 2.0);
    assert_eq!(requests("passthrough"), 1.0);
}

/// A hosts file as the kubelet writes it for pod mongo-0, removed when dropped.
struct HostsFile(std::path::PathBuf);

impl HostsFile {
    fn kubelets() -> HostsFile {
        let path = std::env::temp_dir().join(format!(
            "meshdns-own-names-hosts-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::write(
            &path,
            "# Kubernetes-managed hosts file.\n\
             127.0.0.1\tlocalhost\n\
             ::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::1\tip6-allnodes\n\
             10.8.1.2\tmongo-0.mongo.db.svc.cluster.local\tmongo-0\n\
             fd00::8:1:2\tmongo-0.mongo.db.svc.cluster.local\tmongo-0\n",
        )
        .unwrap();
        HostsFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for HostsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test]
async fn the_identity_comes_from_the_kubelets_hosts_line_and_the_downward_api() {
    let hosts = HostsFile::kubelets();
    // What the sidecar component sets: the downward API's addresses and namespace.
    let pod = pod_with(
        &[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_IPS", "10.8.1.2,fd00::8:1:2"),
            ("MESHDNS_POD_NAMESPACE", "db"),
            ("MESHDNS_HOSTS_FILE", hosts.path()),
        ],
        &[],
    )
    .await;
    for (name, _) in FORWARD {
        let reply = udp(pod.meshdns.addr, &query(name, RecordType::AAAA)).await;
        assert_eq!(reply.answer_lines(), [format!("{name} AAAA fd00::8:1:2")]);
    }
    assert!(pod.asked_nobody());
}

#[tokio::test]
async fn a_namespace_variable_overrides_the_hosts_line() {
    let hosts = HostsFile::kubelets();
    let pod = pod_with(
        &[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_NAMESPACE", "prod"),
            ("MESHDNS_HOSTS_FILE", hosts.path()),
        ],
        &[],
    )
    .await;
    let own = "mongo-0.mongo.prod.cluster.a.";
    let reply = udp(pod.meshdns.addr, &query(own, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), [format!("{own} A 10.8.1.2")]);
    // The hosts line's namespace is not the pod's: that name is routed as any other.
    udp(pod.meshdns.addr, &query(SVC, RecordType::A)).await;
    assert_eq!(pod.kube_dns.names(), [SVC]);
}

#[tokio::test]
async fn without_a_hosts_line_for_the_pod_its_names_go_to_kube_dns_as_before() {
    let hosts = HostsFile::kubelets();
    let pod = pod_with(
        &[
            ("MESHDNS_POD_IP", "10.8.1.7"),
            ("MESHDNS_HOSTS_FILE", hosts.path()),
        ],
        &[],
    )
    .await;
    let reply = udp(pod.meshdns.addr, &query(SVC, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(pod.kube_dns.count(Via::Udp), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_identity_and_the_names_follow_the_zones() {
    let mut dir = ConfigMapDir::new(
        "own-names",
        &[
            ("MESHDNS_DISTRIBUTED_ZONES", "distributed.local"),
            ("MESHDNS_POD_HOSTNAME", "mongo-0"),
        ],
    );
    let path = dir.path.display().to_string();
    let pod = pod_with(
        &[
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_SUBDOMAIN", "mongo"),
            ("MESHDNS_POD_NAMESPACE", "db"),
            ("MESHDNS_CONFIG_DIR", &path),
        ],
        &[],
    )
    .await;
    let added = "a-mongo-0.mongo.db.svc.mesh.example.";
    dir.update(&[
        (
            "MESHDNS_DISTRIBUTED_ZONES",
            "distributed.local,mesh.example",
        ),
        ("MESHDNS_POD_HOSTNAME", "mongo-9"),
    ]);
    assert!(
        eventually(100, || async {
            udp(pod.meshdns.addr, &query(added, RecordType::A))
                .await
                .answer_lines()
                == [format!("{added} A 10.8.1.2")]
        })
        .await,
        "the pod's name in a zone added live is answered locally"
    );
    // Until the reload, that name went to kube-dns like any other.
    let before = pod.kube_dns.names().len();
    // The hostname is restart-only: the running identity stays.
    let reply = udp(pod.meshdns.addr, &query(IN_CLUSTER, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), [format!("{IN_CLUSTER} A 10.8.1.2")]);
    udp(
        pod.meshdns.addr,
        &query("mongo-9.mongo.db.cluster.a.", RecordType::A),
    )
    .await;
    assert_eq!(
        pod.kube_dns.names()[before..],
        ["mongo-9.mongo.db.svc.cluster.local."]
    );
    assert!(pod.b.seen().is_empty());
}

/// The pod's own `svc` name follows the local cluster domain (docs/design.md, "The pod's own
/// names": `HOST.SUB.NS.svc.<domain>`; a reload keeps the identity read at startup, while the
/// names follow the zones and the cluster domain): after a reload that changes
/// `MESHDNS_CLUSTER_DOMAIN` (a live variable), the name under the old domain is no name of
/// the pod's and goes to kube-dns; the one under the new domain is answered locally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reload_that_changes_the_cluster_domain_the_old_domains_svc_name_is_not_the_pods() {
    let kube = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::nxdomain("k8s.local.")))
        .start()
        .await;
    let mut dir = ConfigMapDir::new("own-domain", &[("MESHDNS_CLUSTER_DOMAIN", "cluster.local")]);
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CONFIG_DIR", &path),
            ("MESHDNS_POD_IP", "10.8.1.2"),
            ("MESHDNS_POD_HOSTNAME", "mongo-0"),
            ("MESHDNS_POD_SUBDOMAIN", "mongo"),
            ("MESHDNS_POD_NAMESPACE", "db"),
        ],
    )
    .await;
    let old = "mongo-0.mongo.db.svc.cluster.local.";
    let new = "mongo-0.mongo.db.svc.k8s.local.";
    assert_eq!(
        ask(&meshdns, old, RecordType::A).await.answer_lines(),
        [format!("{old} A 10.8.1.2")]
    );
    dir.update(&[("MESHDNS_CLUSTER_DOMAIN", "k8s.local")]);
    assert!(
        eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    let reply = ask(&meshdns, old, RecordType::A).await;
    let new_reply = ask(&meshdns, new, RecordType::A).await;
    assert_eq!(
        (reply.msg.response_code, reply.answer_lines()),
        (ResponseCode::NXDomain, vec![]),
        "the old domain's name is kube-dns's to answer"
    );
    assert_eq!(
        new_reply.answer_lines(),
        [format!("{new} A 10.8.1.2")],
        "the new domain's name is the pod's"
    );
}
