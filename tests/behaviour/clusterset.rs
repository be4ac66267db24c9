//! The clusterset zone (docs/design.md, "Clusterset zone"): Kubernetes multi-cluster
//! services naming (KEP-1645) over the same gathering as the distributed zones. A pod is
//! `<host>.<cluster>.<service>.<ns>.svc.clusterset.local`, asked of that cluster only; services
//! and SRV records are the union over the clusters, whose targets resolve back to their
//! addresses (a ClusterIP Service's too).
//!
//! Three clusters a (local), b and c, each a fake DNS that knows `svc.cluster.local` names
//! only, with addresses that say which cluster answered (10.1.… for a, 10.2.… for b, …).

use crate::support;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use support::{Answer, FakeDns, FakeDnsBuilder, Meshdns, Reply, ask, query, rr, udp, with_edns};

const SRV_NAME: &str = "_mongodb._tcp.mongo.db.svc.clusterset.local.";
const SERVICE: &str = "mongo.db.svc.clusterset.local.";

/// Cluster number `n`'s DNS: headless service `mongo` of namespace `db` with pods `mongo-0`
/// and `mongo-1` (SRV with glue, the pods' and the service's addresses).
fn cluster_dns(n: u8) -> FakeDnsBuilder {
    let srv_owner = rr::in_cluster_local("_mongodb._tcp.mongo.db");
    let pod = |i: u8| rr::in_cluster_local(&format!("mongo-{i}.mongo.db"));
    let service = rr::in_cluster_local("mongo.db");
    let mut fake = FakeDns::builder()
        .answer(
            &srv_owner,
            RecordType::SRV,
            Answer::records([
                rr::srv(&srv_owner, 27017, &pod(0)),
                rr::srv(&srv_owner, 27017, &pod(1)),
            ])
            .additional(rr::a(&pod(0), [10, n, 1, 0]))
            .additional(rr::a(&pod(1), [10, n, 1, 1])),
        )
        .answer(
            &service,
            RecordType::A,
            Answer::records([rr::a(&service, [10, n, 0, 1])]),
        );
    for i in 0..2 {
        fake = fake.answer(
            &pod(i),
            RecordType::A,
            Answer::records([rr::a(&pod(i), [10, n, 1, i])]),
        );
    }
    fake
}

struct Mesh {
    a: FakeDns,
    b: FakeDns,
    c: FakeDns,
    meshdns: Meshdns,
}

async fn mesh() -> Mesh {
    let (a, b, c) = (
        cluster_dns(1).start().await,
        cluster_dns(2).start().await,
        cluster_dns(3).start().await,
    );
    let clusters = format!("a=; b={}; c={}", b.addr, c.addr);
    let meshdns = Meshdns::before(
        &a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_CLUSTERSET_ZONE", "clusterset.local"),
        ],
    )
    .await;
    Mesh { a, b, c, meshdns }
}

impl Mesh {
    async fn ask(&self, name: &str, rtype: RecordType) -> Reply {
        udp(self.meshdns.addr, &with_edns(query(name, rtype), 1232)).await
    }
}

#[tokio::test]
async fn srv_is_the_union_with_targets_named_by_cluster() {
    let mesh = mesh().await;
    let reply = mesh.ask(SRV_NAME, RecordType::SRV).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    let (answers, additionals) = support::srv_set_of_three_clusters(SRV_NAME, |cluster, i| {
        format!("mongo-{i}.{cluster}.mongo.db.svc.clusterset.local.")
    });
    assert_eq!(reply.answer_lines(), answers);
    assert_eq!(reply.additional_lines(), additionals);
    assert!(reply.answer_lines().contains(&format!(
        "{SRV_NAME} SRV 0 50 27017 mongo-0.b.mongo.db.svc.clusterset.local."
    )));
}

#[tokio::test]
async fn a_pod_name_goes_to_its_cluster_only() {
    let mesh = mesh().await;
    let host = "mongo-0.b.mongo.db.svc.clusterset.local.";
    let reply = mesh.ask(host, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.answer_lines(), [format!("{host} A 10.2.1.0")]);
    assert_eq!(
        mesh.b.names(),
        [rr::in_cluster_local("mongo-0.mongo.db")],
        "asked without the cluster label"
    );
    assert!(mesh.a.seen().is_empty() && mesh.c.seen().is_empty());
}

#[tokio::test]
async fn a_service_address_set_is_the_union_owned_by_the_question() {
    let mesh = mesh().await;
    let reply = mesh.ask(SERVICE, RecordType::A).await;
    assert_eq!(
        reply.answer_lines(),
        [
            format!("{SERVICE} A 10.1.0.1"),
            format!("{SERVICE} A 10.2.0.1"),
            format!("{SERVICE} A 10.3.0.1"),
        ]
    );
}

#[tokio::test]
async fn dns_version_is_the_mcs_schema_version() {
    let mesh = mesh().await;
    let reply = mesh
        .ask("dns-version.clusterset.local.", RecordType::TXT)
        .await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.answer_lines(),
        ["dns-version.clusterset.local. TXT 1.0.0"]
    );
    let asked = mesh.a.exchanges().len() + mesh.b.exchanges().len() + mesh.c.exchanges().len();
    assert_eq!(asked, 0, "answered by meshdns itself");
}

/// The invariant of the gathered zones (docs/design.md, "Distributed zones"): every SRV target
/// meshdns writes resolves back through meshdns to the addresses it came from — in the
/// clusterset zone too ("same merge rules"). The SRV target of a ClusterIP Service is the
/// service name itself (`web.db.svc.cluster.local`, no host label).
#[tokio::test]
async fn a_clusterset_srv_target_of_a_clusterip_service_resolves_back_to_its_address() {
    let web = rr::in_cluster_local("web.db");
    let srv_owner = rr::in_cluster_local("_http._tcp.web.db");
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
        .nxdomain_otherwise()
        .start()
        .await;
    let a = FakeDns::builder().nxdomain_otherwise().start().await;
    let c = FakeDns::builder().nxdomain_otherwise().start().await;
    let vars = [("MESHDNS_CLUSTERSET_ZONE", "clusterset.local")];
    let meshdns = Meshdns::in_cluster_a_with(&a, &[("b", &b), ("c", &c)], &vars).await;
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
