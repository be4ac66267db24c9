//! The operator recipes (docs/databases/README.md, "Operators"): meshdns started with each
//! recipe's own configuration — the `env` block of its page, read from the page so the docs and
//! this test cannot drift — answers exactly the names that operator's pods look up, from the
//! cluster that holds the pod and from no other; and `meshdns --check` passes on every block.
//!
//! Each cluster's DNS is a fake on loopback that knows only its own cluster's records, with
//! addresses that say whose they are (10.8… cluster a, 10.9… b, 10.10… c), and NXDOMAIN for
//! everything else: a name routed to the wrong cluster comes back NXDOMAIN or with another
//! cluster's address, and the test fails.

use crate::support;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::rdata::PTR;
use hickory_proto::rr::{RData, Record, RecordType};
use support::scratch::Scratch;
use support::{Answer, Behaviour, FakeDns, Meshdns, ask, rr};

const TIDB: &str = include_str!("../../docs/databases/tidb-operator.md");
const COCKROACHDB: &str = include_str!("../../docs/databases/cockroachdb-operator.md");
const MONGODB: &str = include_str!("../../docs/databases/mongodb-operators.md");
const PERCONA: &str = include_str!("../../docs/databases/percona.md");
const K8SSANDRA: &str = include_str!("../../docs/databases/k8ssandra.md");
const CLOUDNATIVE_PG: &str = include_str!("../../docs/databases/cloudnative-pg.md");
const STRIMZI: &str = include_str!("../../docs/databases/strimzi.md");

/// Every recipe block: its page, its name.
const BLOCKS: [(&str, &str); 8] = [
    (TIDB, "meshdns-tidb-namespaces"),
    (TIDB, "meshdns-tidb-domains"),
    (COCKROACHDB, "meshdns-cockroachdb-operator"),
    (MONGODB, "meshdns-mongodb-multicluster"),
    (PERCONA, "meshdns-percona"),
    (K8SSANDRA, "meshdns-k8ssandra"),
    (CLOUDNATIVE_PG, "meshdns-cloudnative-pg"),
    (STRIMZI, "meshdns-strimzi"),
];

/// The `KEY=VALUE` lines of the fenced block "```env NAME" of a recipe page.
fn recipe(page: &str, name: &str) -> BTreeMap<String, String> {
    let fence = format!("```env {name}\n");
    let start = page
        .find(&fence)
        .unwrap_or_else(|| panic!("no block {name}"))
        + fence.len();
    let body = &page[start..];
    let body = &body[..body.find("```").expect("the block ends")];
    (body.lines())
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (key, value) = line.split_once('=').expect("KEY=VALUE");
            (key.to_string(), value.to_string())
        })
        .collect()
}

/// One simulated cluster: its name in the recipe, the second octet of its addresses, and the
/// records its DNS knows: Kubernetes names, each answered with `10.<octet>.1.<its index + 1>`,
/// and, when `reverse`, the PTR of each of those addresses to its name.
struct Cluster {
    name: &'static str,
    octet: u8,
    names: &'static [&'static str],
    reverse: bool,
}

fn cluster(name: &'static str, octet: u8, names: &'static [&'static str]) -> Cluster {
    Cluster {
        name,
        octet,
        names,
        reverse: false,
    }
}

/// The clusters' DNS servers, by cluster name, and the recipe page whose names are asked.
struct World {
    fakes: BTreeMap<&'static str, (u8, FakeDns)>,
    page: &'static str,
}

impl World {
    async fn start(page: &'static str, clusters: &[Cluster]) -> World {
        let mut fakes = BTreeMap::new();
        for cluster in clusters {
            let fake = cluster_dns(cluster).await;
            fakes.insert(cluster.name, (cluster.octet, fake));
        }
        World { fakes, page }
    }

    /// `name` is one the recipe page shows: what is resolved here is what the page promises.
    fn on_page(&self, name: &str) {
        let shown = name.trim_end_matches('.');
        assert!(
            self.page.contains(shown),
            "{shown} is not on the recipe page"
        );
    }

    fn fake(&self, cluster: &str) -> &FakeDns {
        &self.fakes[cluster].1
    }

    /// meshdns as a pod of `local`, with the recipe's `vars` (each cluster's endpoints in
    /// `MESHDNS_CLUSTERS` replaced by its fake) and `extra` over them.
    async fn meshdns(
        &self,
        mut vars: BTreeMap<String, String>,
        local: &str,
        extra: &[(&str, &str)],
    ) -> Meshdns {
        let clusters = vars["MESHDNS_CLUSTERS"].clone();
        vars.insert("MESHDNS_CLUSTERS".into(), self.with_fakes(&clusters));
        vars.insert("MESHDNS_LOCAL_CLUSTER".into(), local.into());
        vars.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (&**k, &**v)).collect();
        Meshdns::before(self.fake(local), &vars).await
    }

    /// `MESHDNS_CLUSTERS` with each entry's endpoints replaced by the address of its fake.
    fn with_fakes(&self, clusters: &str) -> String {
        let entries = clusters.split(';').map(|entry| {
            let (name, rest) = entry.trim().split_once('=').expect("NAME=ENDPOINTS");
            let options = rest.split_once(' ').map_or("", |(_, options)| options);
            format!("{name}={} {options}", self.fake(name).addr)
        });
        entries.collect::<Vec<_>>().join("; ")
    }

    /// How many queries each cluster's DNS has received so far.
    fn asked(&self) -> BTreeMap<&'static str, usize> {
        (self.fakes.iter())
            .map(|(name, (_, fake))| (*name, fake.seen().len()))
            .collect()
    }

    /// `name` (A) through `meshdns` is answered with addresses of `cluster` only, and only
    /// `cluster`'s DNS was asked.
    async fn answers_from(&self, meshdns: &Meshdns, name: &str, cluster: &str) {
        self.on_page(name);
        let before = self.asked();
        let addresses = addresses(meshdns, name).await;
        let octet = self.fakes[cluster].0;
        assert!(
            !addresses.is_empty()
                && addresses
                    .iter()
                    .all(|a| a.starts_with(&format!("10.{octet}."))),
            "{name}: {addresses:?}, wanted cluster {cluster}'s (10.{octet}.…)"
        );
        self.only_asked(&before, Some(cluster), name);
    }

    /// [`World::answers_from`] for each `(name, cluster)` of `expected`.
    async fn answer_each(&self, meshdns: &Meshdns, expected: &[(&str, &str)]) {
        for (name, cluster) in expected {
            self.answers_from(meshdns, name, cluster).await;
        }
    }

    /// Since `before`, no cluster's DNS was asked but `cluster`'s (when given), which was.
    fn only_asked(&self, before: &BTreeMap<&str, usize>, cluster: Option<&str>, name: &str) {
        for (other, count) in self.asked() {
            let asked = count > before[other];
            assert_eq!(
                asked,
                Some(other) == cluster,
                "{name}: cluster {other} asked: {asked}"
            );
        }
    }
}

/// A cluster's DNS: the records of `cluster`, NXDOMAIN for every other name.
async fn cluster_dns(cluster: &Cluster) -> FakeDns {
    let nxdomain = Behaviour::Answer(Answer::nxdomain("cluster.local."));
    let mut builder = FakeDns::builder().otherwise(nxdomain);
    for (index, name) in cluster.names.iter().enumerate() {
        let host = u8::try_from(index + 1).expect("a few names");
        let address = [10, cluster.octet, 1, host];
        builder = builder.answer(name, RecordType::A, Answer::records([rr::a(name, address)]));
        if cluster.reverse {
            let reverse = format!("{host}.1.{}.10.in-addr.arpa.", cluster.octet);
            let ptr = RData::PTR(PTR(rr::name(name)));
            let record = Record::from_rdata(rr::name(&reverse), 30, ptr);
            builder = builder.answer(&reverse, RecordType::PTR, Answer::records([record]));
        }
    }
    builder.start().await
}

/// The IPv4 addresses of `name` through `meshdns` (none unless NOERROR).
async fn addresses(meshdns: &Meshdns, name: &str) -> Vec<String> {
    let reply = ask(meshdns, name, RecordType::A).await;
    if reply.msg.response_code != ResponseCode::NoError {
        return Vec::new();
    }
    (reply.msg.answers.iter())
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.to_string()),
            _ => None,
        })
        .collect()
}

/// The meshdns binary with only `args`, a harmless upstream and no admin listener.
fn meshdns_binary(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshdns"))
        .args(args)
        .env_clear()
        .env("MESHDNS_UPSTREAMS", "127.0.0.1:1")
        .env("MESHDNS_ADMIN_LISTEN", "")
        .stdin(Stdio::null())
        .output()
        .expect("the meshdns binary runs")
}

/// `meshdns --check --env-file` on `content`.
fn check(content: &str) -> Output {
    let dir = Scratch::new("operators-check");
    let file = dir.file("recipe.env", content);
    meshdns_binary(&["--check", "--env-file", &file])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn every_recipe_configuration_passes_check() {
    for (page, name) in BLOCKS {
        let block: String = (recipe(page, name).iter())
            .map(|(key, value)| format!("{key}={value}\n"))
            .collect();
        let output = check(&block);
        let stdout = text(&output.stdout);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{name}: {}",
            text(&output.stderr)
        );
        assert!(stdout.contains("routing"), "{name}: {stdout}");
    }
}

/// A new recipe block is not forgotten: every `env meshdns-…` block of docs/databases is
/// one of [`BLOCKS`].
#[test]
fn every_env_block_of_the_recipe_pages_is_tested() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/databases");
    for entry in std::fs::read_dir(dir).unwrap() {
        let page = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        for line in page.lines().filter(|line| line.starts_with("```env ")) {
            let name = &line["```env ".len()..];
            assert!(
                BLOCKS.iter().any(|(_, known)| *known == name),
                "untested block {name}"
            );
        }
    }
}

/// TiDB's layout 3 (docs/databases/tidb-operator.md): clusters whose real domains differ
/// cannot be given a cluster zone equal to `svc.<domain>` — the gap the recipe names.
#[test]
fn a_peers_real_cluster_domain_is_refused_as_a_zone() {
    let output = check(
        "MESHDNS_LOCAL_CLUSTER=a\nMESHDNS_CLUSTER_ZONE=svc.cluster-{name}.local\n\
         MESHDNS_CLUSTERS=a=10.8.0.1:30053; b=10.9.0.1:30053 domain=cluster-b.local\n",
    );
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("MESHDNS_CLUSTER_ZONE"), "{stderr}");
}

#[tokio::test]
async fn tidb_members_in_a_namespace_per_cluster_are_asked_of_their_cluster() {
    let world = World::start(
        TIDB,
        &[
            cluster(
                "a",
                8,
                &[
                    "basic-pd-0.basic-pd-peer.tidb-a.svc.cluster.local.",
                    "basic-pd-peer.tidb-a.svc.cluster.local.",
                ],
            ),
            cluster(
                "b",
                9,
                &[
                    "basic-pd-0.basic-pd-peer.tidb-b.svc.cluster.local.",
                    "basic-discovery.tidb-b.svc.cluster.local.",
                ],
            ),
            cluster(
                "c",
                10,
                &["basic-tikv-0.basic-tikv-peer.tidb-c.svc.cluster.local."],
            ),
        ],
    )
    .await;
    let vars = recipe(TIDB, "meshdns-tidb-namespaces");
    let meshdns = world.meshdns(vars, "b", &[]).await;
    let expected = [
        ("basic-pd-0.basic-pd-peer.tidb-a.svc.cluster.local.", "a"),
        ("basic-pd-peer.tidb-a.svc.cluster.local.", "a"),
        (
            "basic-tikv-0.basic-tikv-peer.tidb-c.svc.cluster.local.",
            "c",
        ),
        ("basic-pd-0.basic-pd-peer.tidb-b.svc.cluster.local.", "b"),
        ("basic-discovery.tidb-b.svc.cluster.local.", "b"),
    ];
    world.answer_each(&meshdns, &expected).await;
}

/// Every cluster has its own `basic-pd-0` in namespace `tidb`: the `clusterDomain` TiDB writes
/// (`cluster-X.local`) says whose, and the pod's own name is answered by its sidecar.
#[tokio::test]
async fn tidb_members_named_by_a_cluster_domain_per_cluster_are_asked_of_that_cluster() {
    const PD: &str = "basic-pd-0.basic-pd-peer.tidb.svc.cluster.local.";
    const TIKV: &str = "basic-tikv-0.basic-tikv-peer.tidb.svc.cluster.local.";
    let world = World::start(
        TIDB,
        &[
            cluster("a", 8, &[PD, TIKV]),
            cluster("b", 9, &[PD, TIKV]),
            cluster("c", 10, &[PD, TIKV]),
        ],
    )
    .await;
    let vars = recipe(TIDB, "meshdns-tidb-domains");
    let pod = [
        ("MESHDNS_POD_IP", "10.9.7.7"),
        ("MESHDNS_POD_HOSTNAME", "basic-pd-0"),
        ("MESHDNS_POD_SUBDOMAIN", "basic-pd-peer"),
        ("MESHDNS_POD_NAMESPACE", "tidb"),
    ];
    let meshdns = world.meshdns(vars, "b", &pod).await;
    let expected = [
        ("basic-pd-0.basic-pd-peer.tidb.svc.cluster-a.local.", "a"),
        (
            "basic-tikv-0.basic-tikv-peer.tidb.svc.cluster-c.local.",
            "c",
        ),
    ];
    world.answer_each(&meshdns, &expected).await;
    // PD waits for its own PD_DOMAIN before it starts: the sidecar answers it.
    let before = world.asked();
    let own = "basic-pd-0.basic-pd-peer.tidb.svc.cluster-b.local.";
    world.on_page(own);
    assert_eq!(addresses(&meshdns, own).await, ["10.9.7.7"]);
    world.only_asked(&before, None, own);
}

#[tokio::test]
async fn cockroachdb_join_names_of_each_region_are_asked_of_that_region() {
    let world = World::start(
        COCKROACHDB,
        &[
            cluster("us", 8, &["cockroachdb.crdb-us.svc.cluster.local."]),
            cluster("eu", 9, &["cockroachdb.crdb-eu.svc.cluster.local."]),
            cluster("ap", 10, &["cockroachdb.crdb-ap.svc.cluster.local."]),
        ],
    )
    .await;
    let vars = recipe(COCKROACHDB, "meshdns-cockroachdb-operator");
    let meshdns = world.meshdns(vars, "eu", &[]).await;
    let expected = [
        ("cockroachdb.crdb-us.svc.cluster.local.", "us"),
        ("cockroachdb.crdb-ap.svc.cluster.local.", "ap"),
        ("cockroachdb.crdb-eu.svc.cluster.local.", "eu"),
    ];
    world.answer_each(&meshdns, &expected).await;
}

/// MCK's `externalDomain` names and the Community horizons resolve to their cluster's pods;
/// the default per-pod Service name (made for a service mesh) only reaches the local kube-dns.
#[tokio::test]
async fn mongodb_members_by_external_domain_and_horizons_are_asked_of_their_cluster() {
    const DEFAULT_NAME: &str = "my-rs-1-0-svc.mongodb.svc.cluster.local.";
    let world = World::start(
        MONGODB,
        &[
            cluster(
                "a",
                8,
                &[
                    "my-rs-0-0.my-rs-0-svc.mongodb.svc.cluster.local.",
                    "my-rs-0.my-rs-svc.mongodb.svc.cluster.local.",
                    DEFAULT_NAME,
                ],
            ),
            cluster(
                "b",
                9,
                &[
                    "my-rs-1-0.my-rs-1-svc.mongodb.svc.cluster.local.",
                    DEFAULT_NAME,
                ],
            ),
            cluster(
                "c",
                10,
                &["my-rs-2-1.my-rs-2-svc.mongodb.svc.cluster.local."],
            ),
        ],
    )
    .await;
    let vars = recipe(MONGODB, "meshdns-mongodb-multicluster");
    let in_a = world.meshdns(vars.clone(), "a", &[]).await;
    world
        .answers_from(&in_a, "my-rs-1-0.my-rs-1-svc.mongodb.cluster.b.", "b")
        .await;
    world
        .answers_from(&in_a, "my-rs-2-1.my-rs-2-svc.mongodb.cluster.c.", "c")
        .await;
    world
        .answers_from(&in_a, "my-rs-0-0.my-rs-0-svc.mongodb.cluster.a.", "a")
        .await;
    // Not answered across clusters: the local duplicate's ClusterIP, from a's kube-dns.
    world.answers_from(&in_a, DEFAULT_NAME, "a").await;
    // A client in b, by the Community replica set's horizon names (members in a).
    let in_b = world.meshdns(vars, "b", &[]).await;
    world
        .answers_from(&in_b, "my-rs-0.my-rs-svc.mongodb.cluster.a.", "a")
        .await;
}

#[tokio::test]
async fn percona_members_of_the_other_site_are_asked_of_its_cluster() {
    const MAIN_SERVICE: &str = "main-rs0-0.psmdb.svc.cluster.local.";
    let world = World::start(
        PERCONA,
        &[
            cluster(
                "a",
                8,
                &[
                    "main-rs0-1.main-rs0.psmdb-a.svc.cluster.local.",
                    MAIN_SERVICE,
                    "cluster1-pxc-0.cluster1-pxc.pxc.svc.cluster.local.",
                ],
            ),
            cluster(
                "b",
                9,
                &["replica-rs0-0.replica-rs0.psmdb-b.svc.cluster.local."],
            ),
        ],
    )
    .await;
    let vars = recipe(PERCONA, "meshdns-percona");
    let in_a = world.meshdns(vars.clone(), "a", &[]).await;
    world
        .answers_from(
            &in_a,
            "replica-rs0-0.replica-rs0.psmdb-b.svc.cluster.local.",
            "b",
        )
        .await;
    let in_b = world.meshdns(vars, "b", &[]).await;
    world
        .answers_from(&in_b, "main-rs0-1.main-rs0.psmdb-a.svc.cluster.local.", "a")
        .await;
    world
        .answers_from(&in_b, "cluster1-pxc-0.cluster1-pxc.pxc.cluster.a.", "a")
        .await;
    // The MCS name is gathered: b (the local kube-dns here) says NXDOMAIN, a has the Service.
    let before = world.asked();
    let service = "main-rs0-0.psmdb.svc.clusterset.local.";
    world.on_page(service);
    let found = addresses(&in_b, service).await;
    assert!(
        !found.is_empty() && found.iter().all(|a| a.starts_with("10.8.")),
        "{found:?}"
    );
    for cluster in ["a", "b"] {
        assert!(
            world.asked()[cluster] > before[cluster],
            "{cluster} not asked"
        );
    }
}

#[tokio::test]
async fn k8ssandra_seeds_stay_local_and_gossip_addresses_get_cluster_names() {
    const SEEDS: &[&str] = &[
        "demo-seed-service.k8ssandra-operator.svc.cluster.local.",
        "demo-dc1-additional-seed-service.k8ssandra-operator.svc.cluster.local.",
    ];
    const WEST_POD: &str =
        "demo-dc2-default-sts-0.demo-dc2-all-pods-service.k8ssandra-operator.svc.cluster.local.";
    let west = Cluster {
        reverse: true,
        ..cluster("west", 9, &[WEST_POD])
    };
    let world = World::start(K8SSANDRA, &[cluster("east", 8, SEEDS), west]).await;
    let vars = recipe(K8SSANDRA, "meshdns-k8ssandra");
    let meshdns = world.meshdns(vars, "east", &[]).await;
    for seed in SEEDS {
        world.answers_from(&meshdns, seed, "east").await;
    }
    // A gossiped address of west: its name under cluster.west, which resolves back to it.
    let before = world.asked();
    let reply = ask(&meshdns, "1.1.9.10.in-addr.arpa.", RecordType::PTR).await;
    let named = "demo-dc2-default-sts-0.demo-dc2-all-pods-service.k8ssandra-operator.cluster.west.";
    world.on_page("1.1.9.10.in-addr.arpa");
    world.on_page(named);
    assert_eq!(
        reply.answer_lines(),
        [format!("1.1.9.10.in-addr.arpa. PTR {named}")]
    );
    world.only_asked(&before, Some("west"), "1.1.9.10.in-addr.arpa.");
    assert_eq!(addresses(&meshdns, named).await, ["10.9.1.1"]);
}

#[tokio::test]
async fn cloudnative_pg_source_is_asked_of_its_cluster_and_search_expansions_of_nobody() {
    let world = World::start(
        CLOUDNATIVE_PG,
        &[
            cluster("a", 8, &["pg-eu-rw.pg.svc.cluster.local."]),
            cluster("b", 9, &["pg-us-rw.pg.svc.cluster.local."]),
        ],
    )
    .await;
    // The pod's resolv.conf (namespace pg), where meshdns reads the search list.
    let dir = Scratch::new("operators-cnpg");
    let resolv_conf = dir.file(
        "resolv.conf",
        "nameserver 127.0.0.1\nsearch pg.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
    );
    let vars = recipe(CLOUDNATIVE_PG, "meshdns-cloudnative-pg");
    let meshdns = (world.meshdns(vars, "b", &[("MESHDNS_RESOLV_CONF", &resolv_conf)])).await;
    world
        .answers_from(&meshdns, "pg-eu-rw.pg.cluster.a.", "a")
        .await;
    let before = world.asked();
    let expansion = "pg-eu-rw.pg.cluster.a.pg.svc.cluster.local.";
    world.on_page(expansion);
    let reply = ask(&meshdns, expansion, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    world.only_asked(&before, None, expansion);
}

#[tokio::test]
async fn strimzi_clusterset_names_are_asked_of_the_cluster_they_name() {
    const BROKERS: &str = "my-cluster-kafka-brokers.strimzi.svc.cluster.local.";
    let world = World::start(
        STRIMZI,
        &[
            cluster(
                "cluster1",
                8,
                &[
                    "my-cluster-broker-0.my-cluster-kafka-brokers.strimzi.svc.cluster.local.",
                    BROKERS,
                ],
            ),
            cluster(
                "cluster2",
                9,
                &[
                    "my-cluster-controller-101.my-cluster-kafka-brokers.strimzi.svc.cluster.local.",
                    BROKERS,
                ],
            ),
            cluster(
                "cluster3",
                10,
                &[
                    "my-cluster-controller-201.my-cluster-kafka-brokers.strimzi.svc.cluster.local.",
                    BROKERS,
                ],
            ),
        ],
    )
    .await;
    let vars = recipe(STRIMZI, "meshdns-strimzi");
    let meshdns = world.meshdns(vars, "cluster1", &[]).await;
    let expected = [
        (
            "my-cluster-controller-101.cluster2.my-cluster-kafka-brokers.strimzi.svc.clusterset.local.",
            "cluster2",
        ),
        (
            "my-cluster-controller-201.cluster3.my-cluster-kafka-brokers.strimzi.svc.clusterset.local.",
            "cluster3",
        ),
        (
            "my-cluster-broker-0.cluster1.my-cluster-kafka-brokers.strimzi.svc.clusterset.local.",
            "cluster1",
        ),
    ];
    world.answer_each(&meshdns, &expected).await;
}
