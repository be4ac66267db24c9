//! Search-list expansions (docs/design.md, "Search-list expansions"): with `ndots:5`, a pod's
//! resolver tries `mongo-4.mongo.db.cluster.b` with every search suffix first. A meshdns name
//! followed by a suffix under a cluster domain cannot exist in Kubernetes DNS: meshdns answers
//! it NXDOMAIN with the SOA of the cluster domain, asking nobody. Suffixes not under a cluster
//! domain, names that merely end like a zone, and a pod without a readable resolv.conf still
//! go to kube-dns.
//!
//! Cluster a is the pod's (its DNS is the kube-dns fake), b a peer; the pod lives in namespace
//! `db` and its resolv.conf has the usual search list plus `example.com`. Every fake answers
//! NXDOMAIN for anything, so a query that reaches one shows in its log.

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{FakeDns, Meshdns, Reply, query, udp, with_edns};

const SEARCH: &str = "db.svc.cluster.local svc.cluster.local cluster.local example.com";
/// The negative TTL of these tests: the SOA of a synthesized answer carries it.
const NEGATIVE_TTL: u32 = 7;

/// A pod's resolv.conf (meshdns's own nameserver, the search list, ndots) in a temporary file
/// removed when dropped.
struct ResolvConf(std::path::PathBuf);

impl ResolvConf {
    fn with_search(search: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "meshdns-search-list-{}-{}.conf",
            std::process::id(),
            rand::random::<u32>()
        ));
        let text = format!("nameserver 127.0.0.1\nsearch {search}\noptions ndots:5\n");
        std::fs::write(&path, text).unwrap();
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for ResolvConf {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

async fn nxdomain_for_all() -> FakeDns {
    FakeDns::builder().nxdomain_otherwise().start().await
}

/// kube-dns (cluster a), cluster b's DNS, and meshdns reading `resolv_conf`.
struct Pod {
    kube: FakeDns,
    b: FakeDns,
    meshdns: Meshdns,
}

impl Pod {
    async fn start(resolv_conf: &str) -> Pod {
        let (kube, b) = (nxdomain_for_all().await, nxdomain_for_all().await);
        let clusters = format!("a=; b={}", b.addr);
        let negative = format!("{NEGATIVE_TTL}s");
        let meshdns = Meshdns::before(
            &kube,
            &[
                ("MESHDNS_LOCAL_CLUSTER", "a"),
                ("MESHDNS_CLUSTERS", &clusters),
                ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
                ("MESHDNS_RESOLV_CONF", resolv_conf),
                ("MESHDNS_CACHE_NEGATIVE_TTL", &negative),
            ],
        )
        .await;
        Pod { kube, b, meshdns }
    }

    async fn ask(&self, name: &str, rtype: RecordType) -> Reply {
        udp(self.meshdns.addr, &with_edns(query(name, rtype), 1232)).await
    }

    fn upstream_queries(&self) -> Vec<String> {
        let mut names = self.kube.names();
        names.extend(self.b.names());
        names
    }
}

/// What glibc asks before the name itself, for a name with fewer than 5 dots.
fn expansions(name: &str) -> Vec<String> {
    ["db.svc.cluster.local", "svc.cluster.local", "cluster.local"]
        .iter()
        .map(|suffix| format!("{name}.{suffix}."))
        .collect()
}

/// NXDOMAIN whose only authority record is the SOA of the cluster domain, with the negative
/// TTL, and no answer.
fn assert_cluster_domain_nxdomain(reply: &Reply, asked: &str) {
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain, "{asked}");
    assert!(reply.msg.answers.is_empty(), "{asked}");
    let [soa] = reply.msg.authorities.as_slice() else {
        panic!(
            "{asked}: one SOA expected, got {:?}",
            reply.authority_lines()
        );
    };
    assert_eq!(soa.record_type(), RecordType::SOA);
    assert_eq!(soa.name.to_ascii(), "cluster.local.");
    assert_eq!(soa.ttl, NEGATIVE_TTL);
}

#[tokio::test]
async fn search_expansions_of_cluster_distributed_and_clusterset_names_are_nxdomain_asking_nobody()
{
    let resolv = ResolvConf::with_search(SEARCH);
    let pod = Pod::start(resolv.path()).await;
    for name in [
        "mongo-4.mongo.db.cluster.b",
        "Mongo-4.Mongo.DB.Cluster.B",
        "a-mongo-0.mongo.db.svc.distributed.local",
        "mongo.db.svc.distributed.local",
        "mongo-0.b.mongo.db.svc.clusterset.local",
    ] {
        for asked in expansions(name) {
            for rtype in [RecordType::A, RecordType::AAAA] {
                let reply = pod.ask(&asked, rtype).await;
                assert_cluster_domain_nxdomain(&reply, &asked);
                assert_eq!(reply.msg.queries[0].name().to_ascii(), asked);
            }
        }
    }
    assert_eq!(pod.upstream_queries(), Vec::<String>::new());
    let search = pod
        .meshdns
        .metric(
            "meshdns_requests_total",
            &[("proto", "udp"), ("route", "search"), ("rcode", "NXDOMAIN")],
        )
        .await;
    assert_eq!(search, 30.0, "counted under route=\"search\"");
}

#[tokio::test]
async fn a_suffix_not_under_a_cluster_domain_still_goes_upstream() {
    let resolv = ResolvConf::with_search(SEARCH);
    let pod = Pod::start(resolv.path()).await;
    let asked = "mongo-4.mongo.db.cluster.b.example.com.";
    let reply = pod.ask(asked, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(pod.kube.names(), [asked], "asked of kube-dns, verbatim");
}

#[tokio::test]
async fn a_name_that_merely_ends_like_a_zone_or_that_kubernetes_could_hold_is_untouched() {
    let resolv = ResolvConf::with_search(SEARCH);
    let pod = Pod::start(resolv.path()).await;
    let untouched = [
        // Label boundaries: `notcluster.b` and `cluster.bb` are no zones.
        "mongo-4.mongo.db.notcluster.b.svc.cluster.local.",
        "mongo-4.mongo.db.cluster.bb.svc.cluster.local.",
        // Pod `x` of service `cluster` in namespace `b`: a name Kubernetes DNS can hold.
        "x.cluster.b.svc.cluster.local.",
        // The pod's own cluster names.
        "mongo-0.mongo.db.svc.cluster.local.",
    ];
    for asked in untouched {
        pod.ask(asked, RecordType::A).await;
    }
    assert_eq!(pod.kube.names(), untouched);
}

#[tokio::test]
async fn without_a_readable_resolv_conf_expansions_go_to_kube_dns() {
    let pod = Pod::start("/nonexistent/resolv.conf").await;
    let asked = "mongo-4.mongo.db.cluster.b.svc.cluster.local.";
    let reply = pod.ask(asked, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(pod.kube.names(), [asked]);
}
