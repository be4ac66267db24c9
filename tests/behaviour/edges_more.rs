//! A second review of the edges: the search-list rule, the pod's own names, namespace and
//! reverse routes, pass-through, zone apexes and the request parser. Each test is named after
//! what must hold; the first reproduced a bug (the pod's `svc` name kept under the cluster
//! domain it was read in, after a reload changed the domain).

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::configmap::ConfigMapDir;
use support::{Answer, Behaviour, FakeDns, Meshdns, ask, eventually, query, with_edns};

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

/// RFC 6891 §6.1.1: the OPT pseudo-record lives in the additional section. A query that carries
/// it in the answer or authority section is malformed (docs/design.md, "Limits and bad input":
/// FORMERR when the header can be read; "Cache": only well-formed queries take the cache-hit
/// path, anything else its proper error), and nothing of it is relayed.
#[tokio::test]
async fn an_opt_record_in_the_answer_or_authority_section_gets_formerr_and_is_not_relayed() {
    let kube = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::nxdomain("cluster.local.")))
        .start()
        .await;
    let meshdns = Meshdns::before(&kube, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let asked = with_edns(query("www.example.com.", RecordType::A), 1232);
    let good = asked.to_vec().unwrap();
    // Cached first, so a hit would show: the malformed query must not be answered from it.
    assert_eq!(
        support::rcode_of(&support::udp_raw(meshdns.addr, &good).await.unwrap()),
        ResponseCode::NXDomain
    );
    // The one OPT record moved from ARCOUNT to ANCOUNT, then to NSCOUNT.
    for (what, count_at) in [("answer", 6), ("authority", 8)] {
        let mut bytes = good.clone();
        bytes[10..12].copy_from_slice(&[0, 0]);
        bytes[count_at..count_at + 2].copy_from_slice(&[0, 1]);
        let over_udp = support::udp_raw(meshdns.addr, &bytes).await;
        let over_tcp = support::tcp_raw(meshdns.addr, &bytes).await;
        for reply in [over_udp.expect("a reply over UDP"), over_tcp] {
            assert_eq!(support::rcode_of(&reply), ResponseCode::FormErr, "{what}");
            assert_eq!(reply[..2], bytes[..2], "{what}: the ID is echoed");
        }
    }
    assert_eq!(
        kube.seen().len(),
        1,
        "only the well-formed query was relayed"
    );
}
