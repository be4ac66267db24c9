//! The invariants of routing, merging and encoding, checked by proptest over generated names,
//! legs and replies: rewriting a name into a cluster's domain and back is the identity; a
//! merged answer never holds a record of a cluster that did not answer; an encoded reply never
//! exceeds the client's size, and reads back as written however many names it holds; a reply
//! is taken exactly when it walks fully; every SRV target meshdns writes for a gathered
//! service resolves back through meshdns to the addresses it came from; and in every mesh that
//! validation accepts — generated names, prefixes and zones, nesting ones included — each
//! target written for a cluster routes back to that cluster.

use std::time::Duration;

use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, SRV};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};
use meshdns::Config;
use meshdns::testing::config::Cluster;
use meshdns::testing::gather::{ClientHost, Leg, Naming, Scheme, merge};
use meshdns::testing::reply::{encode_fitted, fit_wire};
use meshdns::testing::rewrite::ZoneMap;
use proptest::prelude::*;

/// A DNS label: letters of either case, digits, hyphens (what Kubernetes names use), or any
/// byte at all (DNS allows it; the mapping must not care).
fn label() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::string::string_regex("[a-zA-Z0-9][a-zA-Z0-9-]{0,20}")
            .unwrap()
            .prop_map(String::into_bytes),
        proptest::collection::vec(any::<u8>(), 1..=63),
    ]
}

fn name_under(zone: &Name, labels: &[Vec<u8>]) -> Option<Name> {
    Name::from_labels(labels.iter().map(Vec::as_slice).chain(zone.iter())).ok()
}

fn zone(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

proptest! {
    #[test]
    fn a_name_rewritten_into_a_cluster_domain_and_back_is_itself(
        labels in proptest::collection::vec(label(), 0..6),
        domain in prop_oneof![Just("svc.cluster.local."), Just("svc.west.example."), Just("svc.c.")],
        client in prop_oneof![Just("cluster.b."), Just("Cluster.West."), Just("b.mesh.internal.")],
    ) {
        let map = ZoneMap::new(zone(client), zone(domain));
        let Some(name) = name_under(&map.client, &labels) else {
            return Ok(()); // longer than DNS allows: not a name a client can send
        };
        // Mapped as a query's question is: on its wire form.
        let there = map.to_upstream(&name.to_bytes().unwrap());
        match there.map(|wire| Name::from_bytes(&wire).unwrap()) {
            Some(there) => {
                prop_assert!(map.upstream.zone_of(&there));
                let back = map.to_client(&there).expect("a rewritten name maps back");
                prop_assert!(back.eq_case(&name), "{} → {} → {}", name, there, back);
            }
            // Only a name that would be too long in the cluster's domain has no mapping.
            None => prop_assert!(
                name_under(&map.upstream, &labels).is_none(),
                "{} has no mapping though it fits", name
            ),
        }
    }
}

/// What one cluster's leg does: fail, NXDOMAIN, or answer with `n` records (each address
/// says which cluster it came from: 10.<cluster>.…).
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Failed,
    NxDomain,
    Records(u8),
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Failed),
        Just(Outcome::NxDomain),
        (0u8..6).prop_map(Outcome::Records),
    ]
}

fn leg(cluster: u8, outcome: Outcome, qtype: RecordType) -> Leg {
    let upstream = zone("_mongodb._tcp.mongo.db.svc.cluster.local.");
    let mut reply = Message::response(1, OpCode::Query);
    reply.add_query(Query::query(upstream.clone(), qtype));
    match outcome {
        Outcome::Failed => return Leg::Failed,
        Outcome::NxDomain => reply.metadata.response_code = ResponseCode::NXDomain,
        Outcome::Records(n) => {
            for i in 0..n {
                let host = zone(&format!("mongo-{i}.mongo.db.svc.cluster.local."));
                let ip = A::new(10, cluster, 0, i);
                match qtype {
                    RecordType::SRV => {
                        let srv = SRV::new(0, 50, 27017, host.clone());
                        reply.add_answer(Record::from_rdata(upstream.clone(), 30, RData::SRV(srv)));
                        reply.add_additional(Record::from_rdata(host, 30, RData::A(ip)));
                    }
                    _ => {
                        reply.add_answer(Record::from_rdata(upstream.clone(), 30, RData::A(ip)));
                    }
                }
            }
        }
    }
    Leg::Answered(reply)
}

proptest! {
    #[test]
    fn a_merged_answer_holds_no_record_of_a_cluster_that_did_not_answer(
        outcomes in proptest::array::uniform3(outcome()),
        srv in any::<bool>(),
    ) {
        let config = targets::three_clusters();
        let qtype = if srv { RecordType::SRV } else { RecordType::A };
        let question = zone("_mongodb._tcp.mongo.db.svc.distributed.local.");
        let mut request = Message::query();
        request.add_query(Query::query(question.clone(), qtype));
        let legs: Vec<(&Cluster, Leg)> = (config.clusters.iter().zip(&outcomes))
            .enumerate()
            .map(|(i, (cluster, o))| (cluster, leg(i as u8 + 1, *o, qtype)))
            .collect();
        let naming = Naming { zone: zone("distributed.local."), scheme: Scheme::Prefix };
        let merged = merge(&request, &naming, &legs, Duration::from_secs(5));
        let answered = |cluster: u8| {
            matches!(outcomes[usize::from(cluster) - 1], Outcome::Records(n) if n > 0)
        };
        let prefixes = ["a-", "b-", "west-"];
        for record in merged.reply.answers.iter().chain(&merged.reply.additionals) {
            match &record.data {
                RData::A(a) => {
                    let cluster = a.0.octets()[1];
                    prop_assert!(answered(cluster), "{} from cluster {} that did not answer", record, cluster);
                }
                RData::SRV(srv) => {
                    let first = String::from_utf8_lossy(srv.target.iter().next().unwrap_or_default()).to_string();
                    let from = prefixes.iter().position(|p| first.starts_with(p)).expect("a prefixed target");
                    prop_assert!(answered(from as u8 + 1), "{} from a cluster that did not answer", record);
                }
                _ => {}
            }
        }
        // And every record of every cluster that answered is there.
        let expected: usize = outcomes.iter().map(|o| match o { Outcome::Records(n) => usize::from(*n), _ => 0 }).sum();
        prop_assert_eq!(merged.reply.answers.len(), expected);
    }
}

proptest! {
    #[test]
    fn an_encoded_reply_never_exceeds_the_clients_size(
        answers in 0usize..300,
        name_len in 1usize..60,
        edns in any::<bool>(),
        limit in 512usize..=65_535,
    ) {
        let owner = zone(&format!("{}.example.", "x".repeat(name_len)));
        let mut reply = Message::response(7, OpCode::Query);
        reply.add_query(Query::query(owner.clone(), RecordType::A));
        if edns {
            reply.set_edns(Edns::new());
        }
        for i in 0..answers {
            let ip = A::new(10, (i >> 8) as u8, i as u8, 1);
            reply.add_answer(Record::from_rdata(owner.clone(), 30, RData::A(ip)));
            reply.add_additional(Record::from_rdata(zone(&format!("h{i}.example.")), 30, RData::A(ip)));
        }
        let out = encode_fitted(&reply, limit);
        prop_assert!(out.len() <= limit, "{} > {}", out.len(), limit);
        let parsed = Message::from_vec(&out).unwrap();
        prop_assert_eq!(parsed.id, 7);
        prop_assert_eq!(parsed.edns.is_some(), edns, "OPT kept when the client sent one");
        let full = reply.to_vec().unwrap();
        let cut = fit_wire(full.clone(), limit);
        prop_assert!(cut.len() <= limit);
        // Whole RRsets only (docs/design.md, "Truncation"): additional records go first,
        // without TC; TC says the answer RRset was left out, and then none of it is there.
        if full.len() <= limit {
            prop_assert!(!parsed.truncation);
        }
        let kept = parsed.answers.len();
        prop_assert!(kept == 0 || kept == answers, "{} of the {} records of one RRset", kept, answers);
        prop_assert_eq!(parsed.truncation, kept < answers);
    }
}

/// A name from a small pool of labels in both cases, so that names share suffixes (and
/// differ only in case) often.
fn pooled_name() -> impl Strategy<Value = Name> {
    let label = prop::sample::select(vec!["mongo", "Mongo", "db", "DB", "svc", "a-mongo-1", "x"]);
    let zone = prop::sample::select(vec!["cluster.local.", "distributed.local.", "Cluster.B."]);
    (prop::collection::vec(label, 0..5), zone).prop_map(|(labels, zone)| {
        zone_name(&format!(
            "{}{zone}",
            labels.iter().map(|l| format!("{l}.")).collect::<String>()
        ))
    })
}

fn zone_name(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

/// A record of a type with a name inside (compressed or not) or without one.
fn any_record() -> impl Strategy<Value = Record> {
    use hickory_proto::rr::rdata::{CNAME, MX, NS, PTR, SOA, TXT};
    (
        pooled_name(),
        pooled_name(),
        pooled_name(),
        0u8..8,
        any::<u16>(),
    )
        .prop_map(|(owner, n1, n2, kind, number)| {
            let data = match kind {
                0 => RData::A(A::new(10, 0, (number >> 8) as u8, number as u8)),
                1 => RData::SRV(SRV::new(0, 50, number, n1)),
                2 => RData::CNAME(CNAME(n1)),
                3 => RData::MX(MX::new(number, n1)),
                4 => RData::NS(NS(n1)),
                5 => RData::PTR(PTR(n1)),
                6 => RData::SOA(SOA::new(n1, n2, u32::from(number), 1, 2, 3, 4)),
                _ => RData::TXT(TXT::new(vec![format!("t{number}")])),
            };
            Record::from_rdata(owner, 30, data)
        })
}

/// Records as sorted `owner type data` lines, the owner's case kept.
fn lines(records: &[Record]) -> Vec<String> {
    let mut lines: Vec<String> = records
        .iter()
        .map(|r| format!("{} {} {:?}", r.name.to_ascii(), r.record_type(), r.data))
        .collect();
    lines.sort();
    lines
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn every_reply_reads_back_as_written_however_many_names_it_holds(
        question in pooled_name(),
        answers in prop::collection::vec(any_record(), 0..900),
        authorities in prop::collection::vec(any_record(), 0..3),
        additionals in prop::collection::vec(any_record(), 0..900),
    ) {
        let mut reply = Message::response(9, OpCode::Query);
        reply.add_query(Query::query(question, RecordType::ANY));
        reply.answers = answers;
        reply.authorities = authorities;
        reply.additionals = additionals;
        reply.set_edns(Edns::new());
        let out = encode_fitted(&reply, 65_535);
        prop_assert!(out.len() <= 65_535);
        let parsed = Message::from_vec(&out).unwrap();
        prop_assert!(parsed.queries[0].name().eq_case(reply.queries[0].name()));
        // Whole RRsets are kept or left out; those kept read back byte for byte (names with
        // their case), whatever pointer they were written with.
        let kept = |got: &[Record], all: &[Record]| {
            all.iter().filter(|r| got.iter().any(|g| g.name.eq_case(&r.name) && g.record_type() == r.record_type())).cloned().collect::<Vec<_>>()
        };
        for (got, all) in [
            (&parsed.answers, &reply.answers),
            (&parsed.authorities, &reply.authorities),
            (&parsed.additionals, &reply.additionals),
        ] {
            prop_assert_eq!(lines(got), lines(&kept(got, all)));
        }
        if !parsed.truncation {
            prop_assert_eq!(lines(&parsed.answers), lines(&reply.answers));
            prop_assert_eq!(lines(&parsed.authorities), lines(&reply.authorities));
        }
    }
}

// --- Every SRV target meshdns writes resolves back (issue 24) ------------------------------

use crate::support;

use std::collections::BTreeMap;

use support::{Answer, Behaviour, FakeDns, Meshdns, query, rr, udp, with_edns};

/// The gathered service of the round trip, in every cluster's domain.
const SERVICE: &str = "web.db.svc";

/// What one cluster holds for [`SERVICE`]: nothing, a ClusterIP service (the SRV target is the
/// service name itself), or a headless one with these pod host names.
#[derive(Debug, Clone)]
enum Shape {
    Absent,
    ClusterIp,
    Headless(Vec<String>),
}

/// One cluster of a generated mesh: its prefix (`None`: the default `NAME-`), its domain, and
/// what it holds.
#[derive(Debug, Clone)]
struct Peer {
    prefix: Option<&'static str>,
    domain: &'static str,
    shape: Shape,
}

const NAMES: [&str; 4] = ["a", "b", "c", "west"];
/// Prefixes none of which begins another: with nested prefixes (`b-` and `b-b-`) two
/// clusters could write the same target, and no routing can send it to both.
const PREFIXES: [&str; 4] = ["eu-", "us-", "x1-", "ap-"];

fn host() -> impl Strategy<Value = String> {
    // Some hosts begin like a prefix (`a-…`, `eu-…`): the fallback's case.
    (
        prop_oneof![Just(""), Just("a-"), Just("b-"), Just("eu-"), Just("west-")],
        "[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?",
    )
        .prop_map(|(start, rest)| format!("{start}{rest}"))
}

fn peer(index: usize) -> impl Strategy<Value = Peer> {
    (
        proptest::option::of(Just(PREFIXES[index])),
        prop_oneof![Just("cluster.local"), Just("west.example")],
        prop_oneof![
            1 => Just(Shape::Absent),
            2 => Just(Shape::ClusterIp),
            3 => proptest::collection::btree_set(host(), 1..4)
                .prop_map(|hosts| Shape::Headless(hosts.into_iter().collect())),
        ],
    )
        .prop_map(|(prefix, domain, shape)| Peer {
            prefix,
            domain,
            shape,
        })
}

fn mesh() -> impl Strategy<Value = Vec<Peer>> {
    (1..=4usize).prop_flat_map(|n| (0..n).map(peer).collect::<Vec<_>>())
}

/// Cluster `index`'s DNS, and the model of it: each SRV target as that cluster names it, with
/// its address (10.<index>.<pod>.7). What it does not hold is NXDOMAIN, as CoreDNS answers.
async fn peer_dns(index: usize, peer: &Peer) -> (FakeDns, Vec<(String, [u8; 4])>) {
    let in_domain = |relative: &str| format!("{relative}.{}.", peer.domain);
    let owner = in_domain(&format!("_http._tcp.{SERVICE}"));
    let targets: Vec<(String, [u8; 4])> = match &peer.shape {
        Shape::Absent => Vec::new(),
        Shape::ClusterIp => vec![(in_domain(SERVICE), [10, index as u8, 0, 7])],
        Shape::Headless(hosts) => (0u8..)
            .zip(hosts)
            .map(|(pod, host)| {
                (
                    in_domain(&format!("{host}.{SERVICE}")),
                    [10, index as u8, pod, 7],
                )
            })
            .collect(),
    };
    let nxdomain = Behaviour::Answer(Answer::nxdomain(&format!("{}.", peer.domain)));
    let mut fake = FakeDns::builder().otherwise(nxdomain);
    if !targets.is_empty() {
        let mut srv = Answer::records(targets.iter().map(|(t, _)| rr::srv(&owner, 80, t)));
        for (target, ip) in &targets {
            srv = srv.additional(rr::a(target, *ip));
            fake = fake.answer(target, RecordType::A, Answer::records([rr::a(target, *ip)]));
        }
        fake = fake.answer(&owner, RecordType::SRV, srv);
    }
    (fake.start().await, targets)
}

/// Starts the mesh, gathers the service's SRV, and resolves every target through meshdns:
/// the targets must be exactly the model's (each cluster's, with its prefix), and each must
/// resolve to the address it came from, and to nothing else.
async fn round_trip(peers: &[Peer]) -> Result<(), TestCaseError> {
    let mut fakes = Vec::new();
    let mut entries = Vec::new();
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (index, peer) in peers.iter().enumerate() {
        let (fake, targets) = peer_dns(index, peer).await;
        let name = NAMES[index];
        let prefix = peer.prefix.map_or(format!("{name}-"), str::to_string);
        let mut entry = match index {
            0 => format!("{name}= domain={}", peer.domain),
            _ => format!("{name}={} domain={}", fake.addr, peer.domain),
        };
        if let Some(prefix) = peer.prefix {
            entry.push_str(&format!(" prefix={prefix}"));
        }
        entries.push(entry);
        for (target, ip) in targets {
            let relative = target.trim_end_matches(&format!(".{}.", peer.domain));
            let client = format!("{prefix}{relative}.distributed.local.");
            let [o1, o2, o3, o4] = ip;
            expected
                .entry(client.clone())
                .or_default()
                .push(format!("{client} A {o1}.{o2}.{o3}.{o4}"));
        }
        fakes.push(fake);
    }
    let clusters = entries.join("; ");
    let meshdns = Meshdns::before(
        &fakes[0],
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
        ],
    )
    .await;
    let addr = meshdns.addr;
    let ask = |name: &str, rtype| {
        let msg = with_edns(query(name, rtype), 4096);
        async move { udp(addr, &msg).await }
    };
    let srv = ask(
        &format!("_http._tcp.{SERVICE}.distributed.local."),
        RecordType::SRV,
    )
    .await;
    let written: Vec<String> = srv
        .msg
        .answers
        .iter()
        .filter_map(|r| {
            r.try_borrow::<SRV>()
                .map(|srv| srv.data().target.to_ascii())
        })
        .collect();
    let mut sorted = written.clone();
    sorted.sort();
    prop_assert_eq!(
        sorted,
        expected.keys().cloned().collect::<Vec<_>>(),
        "{}",
        clusters
    );
    for target in written {
        let reply = ask(&target, RecordType::A).await;
        prop_assert_eq!(
            reply.msg.response_code,
            ResponseCode::NoError,
            "{} with {}",
            target,
            clusters
        );
        prop_assert_eq!(&reply.answer_lines(), &expected[&target], "{}", clusters);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_gathered_srv_target_resolves_back_to_the_addresses_it_came_from(peers in mesh()) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(round_trip(&peers))?;
    }
}

/// One cluster of a generated mesh: its name, an explicit `prefix=` or none, and its domain.
#[derive(Debug, Clone)]
struct Member {
    name: String,
    prefix: Option<String>,
    domain: &'static str,
}

/// Names and prefixes from a small alphabet, so that generated meshes often nest (`b` and
/// `b-b`, `prefix=a-` and a cluster `a-b`) and zones often collide with domains or each other:
/// what validation must refuse, next to what it accepts.
fn member() -> impl Strategy<Value = Member> {
    (
        "[ab](-[ab]){0,2}",
        proptest::option::of("[ab]{1,2}-"),
        prop_oneof![
            Just("cluster.local"),
            Just("west.example"),
            Just("b.west.example")
        ],
    )
        .prop_map(|(name, prefix, domain)| Member {
            name,
            prefix,
            domain,
        })
}

/// A host of a member as its cluster names it, relative to the domain: a pod of a headless
/// Service, or the Service itself (the SRV target of a ClusterIP Service); some begin like a
/// prefix.
fn relative_host() -> impl Strategy<Value = String> {
    (
        prop_oneof![Just(""), Just("a-"), Just("b-"), Just("b-b-"), Just("a-b-")],
        "[a-z0-9]{1,4}",
        prop_oneof![Just(".db.db.svc"), Just(".db.svc")],
    )
        .prop_map(|(start, rest, under)| format!("{start}{rest}{under}"))
}

/// The configuration of `members` (the first is local) with the zone settings, when
/// validation accepts it.
fn accepted(
    members: &[Member],
    template: &str,
    distributed: &str,
    clusterset: Option<&str>,
) -> Option<Config> {
    let entries: Vec<String> = (members.iter().enumerate())
        .map(|(index, m)| {
            let endpoint = if index == 0 { "" } else { "127.0.0.1:9" };
            let prefix = m
                .prefix
                .as_ref()
                .map_or(String::new(), |p| format!(" prefix={p}"));
            format!("{}={endpoint} domain={}{prefix}", m.name, m.domain)
        })
        .collect();
    let mut vars = vec![
        ("MESHDNS_UPSTREAMS".to_string(), "127.0.0.1:9".to_string()),
        ("MESHDNS_LOCAL_CLUSTER".into(), members[0].name.clone()),
        ("MESHDNS_CLUSTERS".into(), entries.join("; ")),
        ("MESHDNS_CLUSTER_ZONE".into(), template.into()),
        ("MESHDNS_DISTRIBUTED_ZONES".into(), distributed.into()),
        ("MESHDNS_ADMIN_LISTEN".into(), String::new()),
    ];
    if let Some(zone) = clusterset {
        vars.push(("MESHDNS_CLUSTERSET_ZONE".into(), zone.into()));
    }
    Config::from_vars(vars).ok()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// docs/design.md: "every SRV target meshdns writes resolves back through meshdns to the
    /// addresses it came from". For every mesh that validation accepts, each target written
    /// for a member of any cluster routes to its distributed zone, and that zone sends it to
    /// the cluster it came from, as the name it has there: prefix routing is unambiguous.
    #[test]
    fn in_every_accepted_mesh_each_written_target_routes_back_to_its_cluster(
        members in proptest::collection::vec(member(), 1..5),
        template in prop_oneof![Just("cluster.{name}"), Just("{name}.west.example"), Just("{name}")],
        distributed in prop_oneof![
            Just("distributed.local"),
            Just("distributed.local,mesh.example"),
            Just("local"),
            Just("cluster.a"),
            Just("example"),
            Just("a.b"),
        ],
        clusterset in proptest::option::of(prop_oneof![Just("clusterset.local"), Just("west.example"), Just("b")]),
        hosts in proptest::collection::vec(relative_host(), 1..4),
    ) {
        let Some(config) = accepted(&members, template, distributed, clusterset) else {
            return Ok(()); // refused: not a configuration meshdns runs with
        };
        let router = meshdns::testing::route::Router::new(&config, &config.clusters);
        for zone in &config.distributed_zones {
            let naming = Naming { zone: zone.clone(), scheme: Scheme::Prefix };
            for cluster in &config.clusters {
                for relative in &hosts {
                    let there = Name::from_ascii(relative)
                        .and_then(|name| name.append_domain(&cluster.domain))
                        .unwrap();
                    let target = match naming.client_host(&there, cluster) {
                        ClientHost::InZone(target) => target,
                        // A prefixed label longer than DNS allows is never written.
                        ClientHost::TooLong => continue,
                        ClientHost::Elsewhere => {
                            return Err(TestCaseError::fail(format!("{there} is under {}", cluster.domain)));
                        }
                    };
                    let wire = target.to_bytes().unwrap();
                    prop_assert_eq!(
                        router.route(&wire).into_owned(),
                        meshdns::testing::route::Route::Distributed(std::sync::Arc::new(naming.clone())),
                        "{} of cluster {}", target, cluster.name
                    );
                    let plan = naming.plan(&target, RecordType::A, &config.clusters);
                    let meshdns::testing::gather::Plan::Ask { legs, .. } = plan else {
                        return Err(TestCaseError::fail(format!("{target}: {plan:?}")));
                    };
                    prop_assert_eq!(legs.len(), 1, "{} of cluster {}", target, cluster.name);
                    prop_assert_eq!(
                        &legs[0].0, cluster,
                        "{} of cluster {} goes to {}", target, cluster.name, legs[0].0.name
                    );
                    prop_assert!(legs[0].1.eq_ignore_root(&there), "{} asked as {}", target, legs[0].1);
                }
            }
        }
    }
}

// --- Replies are walked once, fully (issue 45) -----------------------------------------------

use meshdns::testing::fuzz as targets;

use support::{Patch, record_line, reply_bytes};

/// The pass-through name of the walk properties, and its reply: a CNAME, an address, an NS
/// and its glue, so that names are compressed in the owner, RDATA, authority and additional
/// sections.
const WALKED: &str = "www.example.com.";

fn walked_answer() -> Answer {
    Answer::records([
        rr::cname(WALKED, "web.example.com."),
        rr::a("web.example.com.", [192, 0, 2, 1]),
    ])
    .authority(rr::ns("example.com.", "ns1.example.com."))
    .additional(rr::a("ns1.example.com.", [192, 0, 2, 53]))
}

/// The query meshdns relays for a client asking [`WALKED`] with EDNS, as far as the fake's
/// reply depends on it (its question and EDNS), and that reply's bytes.
fn walked_exchange() -> (Vec<u8>, Vec<u8>) {
    let asked = with_edns(query(WALKED, RecordType::A), 1232);
    (
        asked.to_vec().unwrap(),
        reply_bytes(&asked, &walked_answer()),
    )
}

/// A mutation of a real reply where a walk can go wrong.
#[derive(Debug, Clone)]
enum Mutation {
    /// A section count (0 QD, 1 AN, 2 NS, 3 AR) set to a value.
    Count(usize, u16),
    /// The name that starts the nth record's owner (or its RDATA) made a compression pointer
    /// to `target`: a loop, a forward pointer, one into the middle of a label, or a good one.
    Pointer {
        record: usize,
        in_rdata: bool,
        target: u16,
    },
    /// The nth record's RDATA length set to a value.
    Length(usize, u16),
    /// The reply cut to its first bytes.
    Cut(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let small_or_any = || prop_oneof![0..8u16, any::<u16>()];
    prop_oneof![
        (0..4usize, small_or_any()).prop_map(|(section, value)| Mutation::Count(section, value)),
        (0..8usize, any::<bool>(), 0..160u16).prop_map(|(record, in_rdata, target)| {
            Mutation::Pointer {
                record,
                in_rdata,
                target,
            }
        }),
        (0..8usize, small_or_any()).prop_map(|(record, value)| Mutation::Length(record, value)),
        (0..160usize).prop_map(Mutation::Cut),
    ]
}

/// The mutation as byte edits to `reply`.
fn patch(reply: &[u8], mutation: &Mutation) -> Patch {
    let mut records = Vec::new();
    meshdns::testing::wire::for_each_record(reply, |r| records.push(*r))
        .expect("a reply that walks");
    let nth = |n: usize| records[n % records.len()];
    let u16_at = |at: usize, value: u16| {
        let [high, low] = value.to_be_bytes();
        Patch {
            bytes: vec![(at, high), (at + 1, low)],
            cut: None,
        }
    };
    match *mutation {
        Mutation::Count(section, value) => u16_at(4 + 2 * section, value),
        Mutation::Pointer {
            record,
            in_rdata,
            target,
        } => {
            let record = nth(record);
            let at = if in_rdata {
                record.rdata_offset
            } else {
                record.start
            };
            u16_at(at, 0xc000 | target)
        }
        Mutation::Length(record, value) => u16_at(nth(record).rdata_offset - 2, value),
        Mutation::Cut(len) => Patch {
            bytes: Vec::new(),
            cut: Some(len),
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_full_walk_accepts_a_mutated_reply_exactly_when_the_decoder_does(m in mutation()) {
        let (_, reply) = walked_exchange();
        targets::walk_agrees_with_decoder(&patch(&reply, &m).apply(reply));
    }
}

/// What the client sees of a reply: its rcode and its answer section.
fn seen(msg: &Message) -> (ResponseCode, Vec<String>) {
    (
        msg.response_code,
        msg.answers.iter().map(record_line).collect(),
    )
}

/// kube-dns sends the mutated reply first and the right one 50 ms later; the client, asking
/// twice (the second time from the cache, if the first answer was cacheable), sees the mutated
/// reply only when it walks fully, else the right one — never anything that does not parse.
async fn relayed_or_refused(mutation: &Mutation) -> Result<(), TestCaseError> {
    let (asked, good) = walked_exchange();
    let patch = patch(&good, mutation);
    let mutated = patch.apply(good.clone());
    let id = meshdns::testing::wire::id(&asked).unwrap();
    let expected = match meshdns::testing::upstream::acceptable(&mutated, id, &asked) {
        true => Message::from_vec(&mutated).map_err(|e| {
            TestCaseError::fail(format!("an accepted reply that does not parse: {e}"))
        })?,
        false => Message::from_vec(&good).unwrap(),
    };
    let upstream = FakeDns::builder()
        .on(
            WALKED,
            RecordType::A,
            Behaviour::PatchedFirst(patch, walked_answer()),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    for ask in ["first", "second"] {
        let reply = udp(meshdns.addr, &with_edns(query(WALKED, RecordType::A), 1232)).await;
        prop_assert_eq!(seen(&reply.msg), seen(&expected), "{} ask", ask);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn a_mutated_upstream_reply_is_relayed_when_it_walks_fully_and_else_never_relayed_or_cached(
        m in mutation()
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(relayed_or_refused(&m))?;
    }
}
