//! Distributed zones (docs/design.md, "Distributed zones"): a name under
//! `distributed.local` is asked of every cluster in parallel (or of one, for a prefixed host),
//! and the answers are merged by gathersrv's naming, with the outcome table and the rows of
//! "Better than the references" each checked by a test: prefixed names and the names a
//! cluster's domain cannot hold, one TTL per merged RRset, SRV targets that resolve back to
//! the addresses they came from, and a down cluster's leg never filled by what that cluster
//! last said was gone.
//!
//! Three clusters: a (this pod's; its DNS is `MESHDNS_UPSTREAMS`), b and c, each with its own
//! fake DNS that knows `svc.cluster.local` names only, with addresses that say which cluster
//! answered (10.1.… for a, 10.2.… for b, 10.3.… for c). A fake asked something it does not
//! know answers REFUSED, so a misrouted question shows.
//!
//! Tests about time run on tokio's paused clock: the fakes still answer over 127.0.0.1, and
//! the durations measured are exact virtual time (timeouts, delays), whatever the machine's
//! load.

use crate::support;

use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{Record, RecordType};
use support::{
    Answer, Behaviour, FAIL_FAST, FakeDns, FakeDnsBuilder, Meshdns, Reply, Via, ask, query, rr,
    tcp, udp, with_edns,
};
use tokio::time::Instant;

const ZONE: &str = "distributed.local.";
const SRV_NAME: &str = "_mongodb._tcp.mongo.db.svc.distributed.local.";
const SERVICE: &str = "mongo.db.svc.distributed.local.";
/// The question of the outcome-table tests, as the client asks it and as each cluster gets it.
const OUTCOME: &str = "q.db.svc.distributed.local.";
const OUTCOME_UPSTREAM: &str = "q.db.svc.cluster.local.";
/// Every cluster gives this same TXT record for the service (MongoDB's seedlist options).
const SEEDLIST_OPTIONS: &str = "replicaSet=rs0&authSource=admin";

/// What cluster number `n`'s DNS knows: the `mongo` headless service of namespace `db` with
/// pods `mongo-0` … `mongo-{pods - 1}` (their SRV records with glue, the service's addresses
/// and TXT) and pod `mongo-2` by name (A, AAAA, TXT).
fn cluster_dns(n: u8, pods: u8) -> FakeDnsBuilder {
    let srv_owner = rr::in_cluster_local("_mongodb._tcp.mongo.db");
    let pod = |i: u8| rr::in_cluster_local(&format!("mongo-{i}.mongo.db"));
    let mut srv = Answer::records((0..pods).map(|i| rr::srv(&srv_owner, 27017, &pod(i))));
    for i in 0..pods {
        srv = srv.additional(rr::a(&pod(i), [10, n, 1, i]));
    }
    let service = rr::in_cluster_local("mongo.db");
    let mongo_2 = pod(2);
    FakeDns::builder()
        .answer(&srv_owner, RecordType::SRV, srv)
        .answer(
            &service,
            RecordType::A,
            Answer::records([rr::a(&service, [10, n, 0, 1])]),
        )
        .answer(
            &service,
            RecordType::TXT,
            Answer::records([rr::txt(&service, SEEDLIST_OPTIONS)]),
        )
        .answer(
            &mongo_2,
            RecordType::A,
            Answer::records([rr::a(&mongo_2, [10, n, 1, 2])]),
        )
        .answer(
            &mongo_2,
            RecordType::AAAA,
            Answer::records([rr::aaaa(&mongo_2, &format!("fd00::{n}:2"))]),
        )
        .answer(
            &mongo_2,
            RecordType::TXT,
            Answer::records([rr::txt(&mongo_2, &format!("cluster={n}"))]),
        )
}

/// Three clusters a (local), b and c, and meshdns in front of them.
struct Mesh {
    a: FakeDns,
    b: FakeDns,
    c: FakeDns,
    meshdns: Meshdns,
}

impl Mesh {
    /// meshdns over the three fakes, with `vars` over the defaults.
    async fn start([a, b, c]: [FakeDnsBuilder; 3], clusters: &str, vars: &[(&str, &str)]) -> Mesh {
        let (a, b, c) = (a.start().await, b.start().await, c.start().await);
        let clusters = clusters
            .replace("{b}", &b.addr.to_string())
            .replace("{c}", &c.addr.to_string());
        let mut all = vec![
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", clusters.as_str()),
        ];
        all.extend_from_slice(vars);
        let meshdns = Meshdns::before(&a, &all).await;
        Mesh { a, b, c, meshdns }
    }

    /// The usual mesh: every cluster knows two pods.
    async fn usual() -> Mesh {
        Self::start(
            [cluster_dns(1, 2), cluster_dns(2, 2), cluster_dns(3, 2)],
            CLUSTERS,
            &[],
        )
        .await
    }

    /// Each cluster treats [`OUTCOME_UPSTREAM`] A as said, in cluster order a, b, c.
    async fn outcome(behaviours: [Behaviour; 3], vars: &[(&str, &str)]) -> Mesh {
        Self::start(behaviours.map(outcome_dns), CLUSTERS, vars).await
    }

    async fn ask(&self, name: &str, rtype: RecordType) -> Reply {
        udp(self.meshdns.addr, &with_edns(query(name, rtype), 1232)).await
    }

    /// [`Mesh::ask`], and how long the reply took (virtual time on the paused clock).
    async fn ask_timed(&self, name: &str, rtype: RecordType) -> (Reply, Duration) {
        let started = Instant::now();
        let reply = self.ask(name, rtype).await;
        (reply, started.elapsed())
    }

    fn queried(&self) -> [usize; 3] {
        [&self.a, &self.b, &self.c].map(|fake| fake.exchanges().len())
    }
}

const CLUSTERS: &str = "a=; b={b}; c={c}";

/// A cluster's DNS that treats [`OUTCOME_UPSTREAM`] A as said.
fn outcome_dns(behaviour: Behaviour) -> FakeDnsBuilder {
    FakeDns::builder().on(OUTCOME_UPSTREAM, RecordType::A, behaviour)
}

/// A cluster's DNS that answers nothing, health probes included.
fn silent() -> FakeDnsBuilder {
    FakeDns::builder().otherwise(Behaviour::Drop)
}

/// The attempt timeout of the timing tests, and their vars (a deadline of many attempts).
const ATTEMPT: Duration = Duration::from_millis(200);
const TIMING: [(&str, &str); 2] = [
    ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
    ("MESHDNS_TIMEOUT", "2s"),
];

/// The answer line of cluster number `n` for [`OUTCOME`].
fn outcome_line(n: u8) -> String {
    format!("{OUTCOME} A 10.{n}.0.1")
}

fn records(n: u8) -> Behaviour {
    Behaviour::Answer(Answer::records([rr::a(OUTCOME_UPSTREAM, [10, n, 0, 1])]))
}

fn nxdomain() -> Behaviour {
    Behaviour::Answer(Answer::nxdomain("cluster.local."))
}

fn nodata() -> Behaviour {
    Behaviour::Answer(Answer::nodata("cluster.local."))
}

fn rcode(rcode: ResponseCode) -> Behaviour {
    Behaviour::Answer(Answer::rcode(rcode))
}

/// The reply is a negative answer whose only authority record is an SOA owned by the zone
/// apex (not the clusters' `cluster.local.` SOA), with a TTL within the negative cap (5 s).
fn assert_zone_soa(reply: &Reply) {
    assert!(reply.msg.answers.is_empty(), "{:?}", reply.answer_lines());
    let [soa] = reply.msg.authorities.as_slice() else {
        panic!("one SOA expected, got {:?}", reply.authority_lines());
    };
    assert_eq!(soa.record_type(), RecordType::SOA);
    assert_eq!(soa.name.to_ascii(), ZONE);
    assert!(soa.ttl <= 5, "negative TTL {} above the cap", soa.ttl);
}

/// The Extended DNS Error info code of a reply, if it carries one.
fn extended_error(msg: &Message) -> Option<u16> {
    match msg.edns.as_ref()?.option(EdnsCode::Unknown(15))? {
        EdnsOption::Unknown(15, data) => Some(u16::from_be_bytes([*data.first()?, *data.get(1)?])),
        _ => None,
    }
}

fn max_ttl(records: &[Record]) -> u32 {
    records.iter().map(|r| r.ttl).max().unwrap_or(0)
}

// --- The outcome table ---------------------------------------------------------------------

#[tokio::test]
async fn records_from_any_leg_make_noerror() {
    let mesh = Mesh::outcome([nxdomain(), records(2), nodata()], &[]).await;
    let reply = mesh.ask(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.answer_lines(), [format!("{OUTCOME} A 10.2.0.1")]);
}

#[tokio::test]
async fn no_records_and_some_leg_noerror_is_nodata_with_the_zone_soa() {
    let mesh = Mesh::outcome([nxdomain(), nodata(), nxdomain()], &[]).await;
    let reply = mesh.ask(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_zone_soa(&reply);
}

#[tokio::test]
async fn nxdomain_from_every_cluster_is_nxdomain_with_the_zone_soa() {
    let mesh = Mesh::outcome([nxdomain(), nxdomain(), nxdomain()], &[]).await;
    let reply = mesh.ask(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_zone_soa(&reply);
}

#[tokio::test(start_paused = true)]
async fn no_cluster_answering_is_servfail_with_an_extended_error_for_edns_clients() {
    let failing = || {
        [
            rcode(ResponseCode::ServFail),
            rcode(ResponseCode::Refused),
            Behaviour::Drop,
        ]
    };
    let mesh = Mesh::outcome(failing(), &FAIL_FAST).await;
    let reply = mesh.ask(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(reply.msg.answers.is_empty());
    assert!(
        extended_error(&reply.msg).is_some(),
        "an EDNS client gets an Extended DNS Error"
    );

    let plain = udp(mesh.meshdns.addr, &query(OUTCOME, RecordType::A)).await;
    assert_eq!(plain.msg.response_code, ResponseCode::ServFail);
    assert!(
        plain.msg.edns.is_none(),
        "no OPT record to a client without EDNS"
    );
}

/// A cluster that failed could hold the name the others do not have.
async fn assert_failed_leg_hides_nothing(failed: Behaviour) {
    let mesh = Mesh::outcome([nxdomain(), failed, nxdomain()], &FAIL_FAST).await;
    let reply = mesh.ask(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(
        reply.msg.authorities.is_empty(),
        "nothing to cache negatively"
    );
}

#[tokio::test]
async fn a_servfail_leg_with_the_others_nxdomain_is_servfail_never_nxdomain() {
    assert_failed_leg_hides_nothing(rcode(ResponseCode::ServFail)).await;
}

#[tokio::test]
async fn a_refused_leg_with_the_others_nxdomain_is_servfail_never_nxdomain() {
    assert_failed_leg_hides_nothing(rcode(ResponseCode::Refused)).await;
}

#[tokio::test(start_paused = true)]
async fn a_silent_leg_with_the_others_nxdomain_is_servfail_never_nxdomain() {
    assert_failed_leg_hides_nothing(Behaviour::Drop).await;
}

// --- Better than the references ------------------------------------------------------------

#[tokio::test]
async fn zone_and_prefix_matching_ignore_case_and_respect_label_boundaries() {
    let local = cluster_dns(1, 2).answer(
        "x.fooDistributed.local.",
        RecordType::A,
        Answer::records([rr::a("x.foodistributed.local.", [192, 0, 2, 1])]),
    );
    let mesh = Mesh::start([local, cluster_dns(2, 2), cluster_dns(3, 2)], CLUSTERS, &[]).await;

    // Not under the zone: kube-dns gets it verbatim.
    let reply = mesh.ask("x.fooDistributed.local.", RecordType::A).await;
    assert_eq!(
        reply.answer_lines(),
        ["x.foodistributed.local. A 192.0.2.1"]
    );
    assert_eq!(mesh.a.names(), ["x.fooDistributed.local."]);
    assert_eq!(mesh.queried(), [1, 0, 0]);

    // The zone in another case is still the zone, and an upper-case prefix still names b.
    let asked = "B-Mongo-2.mongo.db.svc.DISTRIBUTED.Local.";
    let reply = mesh.ask(asked, RecordType::A).await;
    assert_eq!(reply.answer_lines(), [format!("{asked} A 10.2.1.2")]);
    assert_eq!(
        mesh.b.names(),
        ["Mongo-2.mongo.db.svc.cluster.local."],
        "the prefix is removed, the rest kept as asked"
    );
    assert_eq!(mesh.queried(), [1, 1, 0]);
}

#[tokio::test]
async fn negative_answers_carry_an_soa_synthesized_at_the_zone_apex() {
    let mesh = Mesh::outcome([nxdomain(), nxdomain(), nxdomain()], &[]).await;
    let nx = mesh.ask(OUTCOME, RecordType::A).await;
    assert_zone_soa(&nx);
    let soa = nx.authority_lines().join("");
    assert!(
        !soa.contains("cluster.local"),
        "no cluster's SOA leaks: {soa}"
    );

    let mesh = Mesh::usual().await;
    let nodata = mesh.ask(SERVICE, RecordType::MX).await;
    assert_eq!(nodata.msg.response_code, ResponseCode::NoError);
    assert_zone_soa(&nodata);
}

#[tokio::test]
async fn headless_service_addresses_are_a_union_owned_by_the_question() {
    let mesh = Mesh::usual().await;
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
async fn identical_txt_records_from_several_clusters_collapse_to_one() {
    let mesh = Mesh::usual().await;
    let reply = mesh.ask(SERVICE, RecordType::TXT).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.answer_lines(),
        [format!("{SERVICE} TXT {SEEDLIST_OPTIONS}")]
    );
    assert_eq!(mesh.queried(), [1, 1, 1]);
}

/// A cluster's DNS whose TXT record for [`OUTCOME_UPSTREAM`] says `text`.
fn txt_dns(text: &str) -> FakeDnsBuilder {
    FakeDns::builder().answer(
        OUTCOME_UPSTREAM,
        RecordType::TXT,
        Answer::records([rr::txt(OUTCOME_UPSTREAM, text)]),
    )
}

/// `mongodb+srv` refuses a seed list with two TXT records: when the clusters' differ, the
/// gathered answer carries exactly one — the local cluster's, else the first configured
/// cluster's — the same one query after query, and the disagreement is counted.
#[tokio::test]
async fn clusters_disagreeing_on_txt_give_exactly_one_the_local_clusters_else_the_first_configured()
{
    let txt_line = |text: &str| format!("{OUTCOME} TXT {text}");
    let clusters = [
        txt_dns("replicaSet=rs1"),
        txt_dns("replicaSet=rs2"),
        txt_dns("replicaSet=rs3"),
    ];
    let mesh = Mesh::start(clusters, "c={c}; b={b}; a=", &[]).await;
    for _ in 0..2 {
        let reply = mesh.ask(OUTCOME, RecordType::TXT).await;
        assert_eq!(
            reply.answer_lines(),
            [txt_line("replicaSet=rs1")],
            "a is local"
        );
    }
    let counted = "meshdns_gather_txt_disagreements_total";
    assert_eq!(mesh.meshdns.metric(counted, &[]).await, 2.0);

    let local_without = FakeDns::builder().answer(
        OUTCOME_UPSTREAM,
        RecordType::TXT,
        Answer::nodata("cluster.local."),
    );
    let clusters = [
        local_without,
        txt_dns("replicaSet=rs2"),
        txt_dns("replicaSet=rs3"),
    ];
    let mesh = Mesh::start(clusters, "a=; c={c}; b={b}", &[]).await;
    let reply = mesh.ask(OUTCOME, RecordType::TXT).await;
    assert_eq!(
        reply.answer_lines(),
        [txt_line("replicaSet=rs3")],
        "c is configured first"
    );
}

/// Only records a leg's question owns answer it (RFC 1034 §4.3.2): a peer's answer section
/// with an address of another name, also behind a CNAME chain that leads elsewhere, must not
/// become an address of the question.
#[tokio::test]
async fn records_another_name_owns_never_answer_a_gathered_question() {
    let other = rr::in_cluster_local("other.db");
    let unrelated = Answer::records([
        rr::a(OUTCOME_UPSTREAM, [10, 1, 0, 1]),
        rr::a(&other, [10, 9, 9, 1]),
    ]);
    let broken_chain = Answer::records([
        rr::cname(OUTCOME_UPSTREAM, &rr::in_cluster_local("elsewhere.db")),
        rr::a(&other, [10, 9, 9, 2]),
    ]);
    let mesh = Mesh::outcome(
        [
            Behaviour::Answer(unrelated),
            Behaviour::Answer(broken_chain),
            records(3),
        ],
        &[],
    )
    .await;
    let reply = mesh.ask(OUTCOME, RecordType::A).await;
    assert_eq!(reply.answer_lines(), [outcome_line(1), outcome_line(3)]);
}

#[tokio::test(start_paused = true)]
async fn mixed_outcomes_follow_the_defined_table() {
    use ResponseCode::{NoError, ServFail};
    let table: [([Behaviour; 3], ResponseCode, usize); 6] = [
        ([records(1), rcode(ServFail), nxdomain()], NoError, 1),
        ([nxdomain(), nxdomain(), records(3)], NoError, 1),
        (
            [nodata(), rcode(ResponseCode::Refused), nxdomain()],
            NoError,
            0,
        ),
        ([nxdomain(), nodata(), nxdomain()], NoError, 0),
        ([rcode(ServFail), nxdomain(), nxdomain()], ServFail, 0),
        ([records(1), records(2), Behaviour::Drop], NoError, 2),
    ];
    for (row, (legs, rcode, answers)) in table.into_iter().enumerate() {
        let mesh = Mesh::outcome(legs, &FAIL_FAST).await;
        let reply = mesh.ask(OUTCOME, RecordType::A).await;
        assert_eq!(reply.msg.response_code, rcode, "row {row}");
        assert_eq!(reply.msg.answers.len(), answers, "row {row}");
        if rcode == NoError && answers == 0 {
            assert_zone_soa(&reply);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn per_attempt_and_per_query_deadlines_bound_the_wait() {
    // One dead cluster costs its attempt and its retry (two attempt timeouts), and the answer
    // is partial.
    let vars = [
        ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ("MESHDNS_TIMEOUT", "800ms"),
    ];
    let mesh = Mesh::outcome([records(1), records(2), Behaviour::Drop], &vars).await;
    let (reply, partial) = mesh.ask_timed(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.msg.answers.len(), 2);
    assert!(
        max_ttl(&reply.msg.answers) <= 5,
        "{:?}",
        reply.answer_lines()
    );
    assert_eq!(
        partial,
        ATTEMPT * 2,
        "the attempt and its retry, not the deadline"
    );

    // Nobody answers: SERVFAIL at the query's deadline, not later.
    let mesh = Mesh::outcome([Behaviour::Drop, Behaviour::Drop, Behaviour::Drop], &vars).await;
    let (reply, failed) = mesh.ask_timed(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert_eq!(failed, Duration::from_millis(800), "the query's deadline");
}

#[tokio::test(start_paused = true)]
async fn answer_order_is_local_first_then_configuration_order_whatever_the_arrival() {
    let srv_owner = rr::in_cluster_local("_mongodb._tcp.mongo.db");
    let slow = |n: u8, ms: u64| {
        let pod = rr::in_cluster_local("mongo-0.mongo.db");
        let answer = Answer::records([rr::srv(&srv_owner, 27017, &pod)])
            .additional(rr::a(&pod, [10, n, 1, 0]));
        FakeDns::builder().on(
            &srv_owner,
            RecordType::SRV,
            Behaviour::Delay(Duration::from_millis(ms), answer),
        )
    };
    // Configured c, a, b; a is local; arrival b, c, a.
    let mesh = Mesh::start(
        [slow(1, 150), slow(2, 0), slow(3, 60)],
        "c={c}; a=; b={b}",
        &[],
    )
    .await;
    for _ in 0..2 {
        let reply = mesh.ask(SRV_NAME, RecordType::SRV).await;
        assert_eq!(
            reply.srv_targets(),
            [
                "a-mongo-0.mongo.db.svc.distributed.local.",
                "c-mongo-0.mongo.db.svc.distributed.local.",
                "b-mongo-0.mongo.db.svc.distributed.local.",
            ]
        );
        assert_eq!(
            reply.additional_lines(),
            [
                "a-mongo-0.mongo.db.svc.distributed.local. A 10.1.1.0",
                "c-mongo-0.mongo.db.svc.distributed.local. A 10.3.1.0",
                "b-mongo-0.mongo.db.svc.distributed.local. A 10.2.1.0",
            ]
        );
    }
}

// --- Prefixed hosts and SRV targets -------------------------------------------------------

#[tokio::test]
async fn a_prefixed_host_goes_to_its_cluster_only() {
    let mesh = Mesh::usual().await;
    let host = "b-mongo-2.mongo.db.svc.distributed.local.";
    let expected = [
        (RecordType::A, format!("{host} A 10.2.1.2")),
        (RecordType::AAAA, format!("{host} AAAA fd00::2:2")),
        (RecordType::TXT, format!("{host} TXT cluster=2")),
    ];
    for (rtype, line) in expected {
        let reply = mesh.ask(host, rtype).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError);
        assert_eq!(reply.answer_lines(), [line]);
    }
    assert!(mesh.a.seen().is_empty() && mesh.c.seen().is_empty());
    assert_eq!(
        mesh.b.names(),
        vec![rr::in_cluster_local("mongo-2.mongo.db"); 3],
        "the prefix removed, in b's domain"
    );
}

#[tokio::test]
async fn srv_targets_and_their_addresses_carry_their_cluster_prefix() {
    let mesh = Mesh::usual().await;
    let reply = mesh.ask(SRV_NAME, RecordType::SRV).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    let (answers, additionals) = support::srv_set_of_three_clusters(SRV_NAME, |cluster, i| {
        format!("{cluster}-mongo-{i}.mongo.db.svc.distributed.local.")
    });
    assert_eq!(reply.answer_lines(), answers);
    assert_eq!(reply.additional_lines(), additionals);
}

#[tokio::test]
async fn every_srv_target_shares_the_parent_domain_of_the_service_name() {
    let mesh = Mesh::usual().await;
    let reply = mesh.ask(SRV_NAME, RecordType::SRV).await;
    // MongoDB's seedlist rule for `mongodb+srv://mongo.db.svc.distributed.local`.
    let parent = rr::name("db.svc.distributed.local.");
    let targets = reply.srv_targets();
    assert_eq!(targets.len(), 6);
    for target in targets {
        assert!(parent.zone_of(&rr::name(&target)), "{target}");
    }
}

#[tokio::test]
async fn other_types_are_nodata_with_the_zone_soa() {
    let mesh = Mesh::usual().await;
    let reply = mesh.ask(SERVICE, RecordType::MX).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_zone_soa(&reply);
    assert_eq!(mesh.queried(), [0, 0, 0], "nothing to ask the clusters");
}

// --- Every SRV target meshdns writes resolves back ------------------------------------------

/// Cluster number `n`'s DNS with ClusterIP service `web` of namespace `db`: its SRV target is
/// the service name itself (with its address as glue), and its A record. Anything else is
/// NXDOMAIN, as CoreDNS answers in its own domain.
fn clusterip_dns(n: u8) -> FakeDnsBuilder {
    let owner = rr::in_cluster_local("_http._tcp.web.db");
    let service = rr::in_cluster_local("web.db");
    let address = rr::a(&service, [10, 96, n, 7]);
    FakeDns::builder()
        .answer(
            &owner,
            RecordType::SRV,
            Answer::records([rr::srv(&owner, 80, &service)]).additional(address.clone()),
        )
        .answer(&service, RecordType::A, Answer::records([address]))
        .otherwise(nxdomain())
}

#[tokio::test]
async fn a_clusterip_srv_target_resolves_back_to_its_service_address() {
    let mesh = Mesh::start([1, 2, 3].map(clusterip_dns), CLUSTERS, &[]).await;
    let srv = mesh
        .ask("_http._tcp.web.db.svc.distributed.local.", RecordType::SRV)
        .await;
    let targets = srv.srv_targets();
    assert_eq!(
        targets,
        ["a", "b", "c"].map(|c| format!("{c}-web.db.svc.distributed.local."))
    );
    for (n, target) in (1..).zip(&targets) {
        let line = format!("{target} A 10.96.{n}.7");
        assert!(srv.additional_lines().contains(&line), "{line} as glue");
        let back = mesh.ask(target, RecordType::A).await;
        assert_eq!(back.msg.response_code, ResponseCode::NoError, "{target}");
        assert_eq!(back.answer_lines(), [line], "the address it came from");
    }
    assert_eq!(
        mesh.b.names(),
        [
            rr::in_cluster_local("_http._tcp.web.db"),
            rr::in_cluster_local("web.db")
        ],
        "b's target asked of b only, with the prefix removed"
    );
}

#[tokio::test]
async fn a_prefixed_txt_of_a_service_goes_to_its_cluster() {
    let whoami = rr::in_cluster_local("whoami.default");
    let c = FakeDns::builder().answer(
        &whoami,
        RecordType::TXT,
        Answer::records([rr::txt(&whoami, "cluster=c")]),
    );
    let mesh = Mesh::start([FakeDns::builder(), FakeDns::builder(), c], CLUSTERS, &[]).await;
    let asked = "c-whoami.default.svc.distributed.local.";
    let reply = mesh.ask(asked, RecordType::TXT).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.answer_lines(), [format!("{asked} TXT cluster=c")]);
    assert_eq!(mesh.queried(), [0, 0, 1]);
    assert_eq!(mesh.c.names(), [whoami]);
}

#[tokio::test]
async fn a_service_really_named_like_a_prefix_is_gathered_when_that_cluster_lacks_the_rest() {
    // Service `a-team` lives in b and c; cluster a has no service `team`.
    let team = rr::in_cluster_local("a-team.db");
    let with_team = |n: u8| {
        FakeDns::builder()
            .answer(
                &team,
                RecordType::A,
                Answer::records([rr::a(&team, [10, n, 0, 5])]),
            )
            .otherwise(nxdomain())
    };
    let a = FakeDns::builder().otherwise(nxdomain());
    let mesh = Mesh::start([a, with_team(2), with_team(3)], CLUSTERS, &[]).await;
    let asked = "a-team.db.svc.distributed.local.";
    let reply = mesh.ask(asked, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.answer_lines(),
        [format!("{asked} A 10.2.0.5"), format!("{asked} A 10.3.0.5")]
    );
    assert_eq!(
        mesh.a.names(),
        [rr::in_cluster_local("team.db"), team],
        "a asked first for `team`, then the name as it is"
    );
}

#[tokio::test(start_paused = true)]
async fn a_removed_member_is_nxdomain_never_stale_while_another_cluster_is_down() {
    let member = rr::in_cluster_local("db-3.db.prod");
    let asked = "a-db-3.db.prod.svc.distributed.local.";
    let vars = [
        ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ("MESHDNS_TIMEOUT", "1s"),
        ("MESHDNS_CACHE_SIZE", "1000"),
    ];
    let a = FakeDns::builder().answer(
        &member,
        RecordType::A,
        Answer::records([rr::a(&member, [10, 1, 3, 3])]),
    );
    let b = FakeDns::builder().otherwise(nxdomain());
    let mesh = Mesh::start([a, b, silent()], CLUSTERS, &vars).await;
    let first = mesh.ask(asked, RecordType::A).await;
    assert_eq!(first.answer_lines(), [format!("{asked} A 10.1.3.3")]);

    // db-3 is removed from cluster a, which answers (a little slowly) NXDOMAIN from now on;
    // c stays down. The cached answer expires (TTL 30 s) but could still be served stale.
    let kube_addr = mesh.a.addr.to_string();
    let Mesh { a, meshdns, .. } = mesh;
    drop(a);
    tokio::time::sleep(Duration::from_millis(1)).await; // the stopped fake lets go of its port
    let _a = FakeDns::builder()
        .otherwise(Behaviour::Delay(
            Duration::from_millis(150),
            Answer::nxdomain("cluster.local."),
        ))
        .start_on(&kube_addr)
        .await;
    tokio::time::sleep(Duration::from_secs(31)).await;
    for _ in 0..8 {
        let reply = udp(meshdns.addr, &with_edns(query(asked, RecordType::A), 1232)).await;
        assert_eq!(
            reply.msg.response_code,
            ResponseCode::NXDomain,
            "{:?}",
            reply.answer_lines()
        );
        assert_zone_soa(&reply);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

// --- Timing ------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn slow_clusters_are_asked_in_parallel() {
    let srv_owner = rr::in_cluster_local("_mongodb._tcp.mongo.db");
    let delayed = |n: u8| {
        let pod = rr::in_cluster_local("mongo-0.mongo.db");
        let answer = Answer::records([rr::srv(&srv_owner, 27017, &pod)]);
        let behaviour = if n == 1 {
            Behaviour::Answer(answer)
        } else {
            Behaviour::Delay(Duration::from_millis(300), answer)
        };
        FakeDns::builder().on(&srv_owner, RecordType::SRV, behaviour)
    };
    let mesh = Mesh::start([delayed(1), delayed(2), delayed(3)], CLUSTERS, &[]).await;
    let (reply, took) = mesh.ask_timed(SRV_NAME, RecordType::SRV).await;
    assert_eq!(reply.srv_targets().len(), 3, "{:?}", reply.answer_lines());
    // b and c each take 300 ms: one after the other they would take 600.
    assert_eq!(
        took,
        Duration::from_millis(300),
        "the legs were not asked in parallel"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_cluster_costs_its_attempt_and_its_retry_and_the_answer_is_partial() {
    let mesh = Mesh::start(
        [cluster_dns(1, 2), cluster_dns(2, 2), silent()],
        CLUSTERS,
        &TIMING,
    )
    .await;
    let (reply, took) = mesh.ask_timed(SRV_NAME, RecordType::SRV).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.srv_targets(),
        [
            "a-mongo-0.mongo.db.svc.distributed.local.",
            "a-mongo-1.mongo.db.svc.distributed.local.",
            "b-mongo-0.mongo.db.svc.distributed.local.",
            "b-mongo-1.mongo.db.svc.distributed.local.",
        ]
    );
    // A cluster of one endpoint, still considered up, keeps its retry: a lost attempt is not
    // yet a dead cluster.
    assert_eq!(
        took,
        ATTEMPT * 2,
        "two attempt timeouts, not the 2 s deadline"
    );
    let ttl = max_ttl(&reply.msg.answers).max(max_ttl(&reply.msg.additionals));
    assert!(ttl <= 5, "a partial answer's TTLs are capped, got {ttl}");
    assert!(!mesh.c.seen().is_empty(), "c was asked");
}

/// Peer b has a domain of its own (`d.example`) and its DNS also serves `cluster.local`: an SRV
/// target it names there cannot be shown in the zone under b's prefix (it does not resolve
/// back to b), and written as it came the client would resolve it to cluster a's host of that
/// name. b's records are left out, counted as a partial answer.
#[tokio::test]
async fn a_target_under_another_clusters_domain_is_left_out_never_written() {
    let b_owner = "_mongodb._tcp.mongo.db.svc.d.example.";
    let local_host = rr::in_cluster_local("mongo-0.mongo.db");
    let b = FakeDns::builder().answer(
        b_owner,
        RecordType::SRV,
        Answer::records([rr::srv(b_owner, 27017, &local_host)])
            .additional(rr::a(&local_host, [10, 2, 1, 0])),
    );
    let clusters = "a=; b={b} domain=d.example; c={c}";
    let mesh = Mesh::start([cluster_dns(1, 1), b, cluster_dns(3, 1)], clusters, &[]).await;
    let reply = mesh.ask(SRV_NAME, RecordType::SRV).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.srv_targets(),
        [
            "a-mongo-0.mongo.db.svc.distributed.local.",
            "c-mongo-0.mongo.db.svc.distributed.local.",
        ]
    );
    assert!(
        !reply.additional_lines().iter().any(|l| l.contains("10.2.")),
        "{:?}",
        reply.additional_lines()
    );
    assert!(max_ttl(&reply.msg.answers) <= 5, "partial");
    let partial = mesh
        .meshdns
        .metric("meshdns_gather_partial_total", &[])
        .await;
    assert_eq!(partial, 1.0);
}

// --- Stragglers ----------------------------------------------------------------------------
// Once some leg has answered, a pending leg keeps the rest of its current attempt and at most
// one more attempt at its next endpoint; a leg with no endpoint left to try is cut.

#[tokio::test(start_paused = true)]
async fn a_cluster_failing_over_to_its_second_endpoint_is_still_in_the_reply() {
    let dead = FakeDns::silent().await;
    // b's first endpoint is dead; its second answers 50 ms after it is asked.
    let late = Duration::from_millis(50);
    let b = outcome_dns(Behaviour::Delay(
        late,
        Answer::records([rr::a(OUTCOME_UPSTREAM, [10, 2, 0, 1])]),
    ));
    let clusters = format!("a=; b={},{{b}}; c={{c}}", dead.addr);
    let mesh = Mesh::start(
        [outcome_dns(records(1)), b, outcome_dns(records(3))],
        &clusters,
        &TIMING,
    )
    .await;
    let (reply, took) = mesh.ask_timed(OUTCOME, RecordType::A).await;
    assert_eq!(
        reply.answer_lines(),
        [outcome_line(1), outcome_line(2), outcome_line(3)]
    );
    assert_eq!(
        dead.exchanges().len(),
        1,
        "b's dead endpoint was asked first"
    );
    // a and c answered at once; b's answer came after its first attempt timed out, later than
    // one attempt timeout after the first answer (the 0.1.0 rule cut it there).
    assert_eq!(took, ATTEMPT + late);
}

#[tokio::test(start_paused = true)]
async fn dead_clusters_cost_at_most_two_attempt_timeouts() {
    // Clusters b, c, d and e: every endpoint of theirs is dead, three or four each.
    let dead = [
        FakeDns::silent().await,
        FakeDns::silent().await,
        FakeDns::silent().await,
    ];
    let endpoints = dead
        .iter()
        .map(|fake| fake.addr.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let clusters =
        format!("a=; b={{b}},{endpoints}; c={{c}},{endpoints}; d={endpoints}; e={endpoints}");
    let mesh = Mesh::start(
        [outcome_dns(records(1)), silent(), silent()],
        &clusters,
        &TIMING,
    )
    .await;
    let (reply, took) = mesh.ask_timed(OUTCOME, RecordType::A).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.answer_lines(), [outcome_line(1)]);
    // a answered at once: each dead leg had the rest of its first attempt and one more, not
    // an attempt per endpoint, nor the 2 s deadline.
    assert_eq!(took, 2 * ATTEMPT);
}

#[tokio::test(start_paused = true)]
async fn dead_clusters_marked_down_cost_nothing_once_another_answered() {
    let mesh = Mesh::start(
        [outcome_dns(records(1)), silent(), silent()],
        CLUSTERS,
        &FAIL_FAST,
    )
    .await;
    // Until health checks mark b and c down, each query costs them an attempt timeout; their
    // cut legs run on to the deadline in the background and fail there.
    let mut asked = 0;
    let meshdns = &mesh.meshdns;
    while meshdns.upstream_healthy("b", &mesh.b).await
        + meshdns.upstream_healthy("c", &mesh.c).await
        > 0.0
    {
        assert!(asked < 3, "b and c still up after {asked} queries");
        let reply = mesh.ask(OUTCOME, RecordType::A).await;
        assert_eq!(reply.answer_lines(), [outcome_line(1)]);
        asked += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let [_, b_before, c_before] = mesh.queried();

    let (reply, took) = mesh.ask_timed(OUTCOME, RecordType::A).await;
    assert_eq!(reply.answer_lines(), [outcome_line(1)]);
    assert_eq!(took, Duration::ZERO, "no wait for clusters marked down");
    let [_, b_after, c_after] = mesh.queried();
    assert!(
        b_after > b_before && c_after > c_before,
        "endpoints marked down are still asked, as a last resort"
    );
}

/// Asks until `cluster`'s endpoint `fake` is marked down (health checks after its failed
/// attempts), a probe interval between queries.
async fn mark_down(meshdns: &Meshdns, cluster: &str, fake: &FakeDns) {
    for _ in 0..5 {
        udp(meshdns.addr, &query(OUTCOME, RecordType::A)).await;
        if meshdns.upstream_healthy(cluster, fake).await == 0.0 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("{cluster} is not marked down");
}

/// The cut-off follows the legs: once b (slow, but up) has answered, nothing is left to wait
/// for but c, which is marked down — so the reply goes then, not when b's attempt and retry
/// would have ended (the cut-off the first answer set).
#[tokio::test(start_paused = true)]
async fn a_cluster_marked_down_is_not_waited_for_once_the_others_answered() {
    let slow = Duration::from_millis(50);
    let b = Behaviour::Delay(
        slow,
        Answer::records([rr::a(OUTCOME_UPSTREAM, [10, 2, 0, 1])]),
    );
    let mesh = Mesh::start(
        [outcome_dns(records(1)), outcome_dns(b), silent()],
        CLUSTERS,
        &TIMING,
    )
    .await;
    mark_down(&mesh.meshdns, "c", &mesh.c).await;
    let (reply, took) = mesh.ask_timed(OUTCOME, RecordType::A).await;
    assert_eq!(reply.answer_lines(), [outcome_line(1), outcome_line(2)]);
    assert_eq!(took, slow, "b's answer, and no wait for c");
}

/// Sixteen clusters, one black-holed and marked down: the fifteen answer at once, and so does
/// the gathered answer (partial), however many legs were still pending when the first came.
#[tokio::test(start_paused = true)]
async fn sixteen_clusters_with_one_marked_down_answer_at_once() {
    let answering = |n: u8| outcome_dns(records(n)).start();
    let a = answering(1).await;
    let mut peers = Vec::new();
    for n in 2..=15 {
        peers.push(answering(n).await);
    }
    let dead = FakeDns::silent().await;
    let mut clusters = vec!["a=".to_string()];
    clusters.extend(
        (2..)
            .zip(&peers)
            .map(|(n, fake)| format!("p{n}={}", fake.addr)),
    );
    clusters.push(format!("dead={}", dead.addr));
    let clusters = clusters.join("; ");
    let mut vars = vec![
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
    ];
    vars.extend_from_slice(&TIMING);
    let meshdns = Meshdns::before(&a, &vars).await;
    mark_down(&meshdns, "dead", &dead).await;
    let started = Instant::now();
    let reply = udp(meshdns.addr, &query(OUTCOME, RecordType::A)).await;
    assert_eq!(
        started.elapsed(),
        Duration::ZERO,
        "no wait for the dead cluster"
    );
    assert_eq!(reply.msg.answers.len(), 15);
    assert!(max_ttl(&reply.msg.answers) <= 5, "partial");
}

#[tokio::test(start_paused = true)]
async fn a_cut_leg_still_refreshes_its_cache_entry() {
    // c answers once, 100 ms after its leg was cut (its attempt and its retry after a and b
    // answered), and is silent from then on.
    let late = Behaviour::Delay(
        ATTEMPT * 2 + Duration::from_millis(100),
        Answer::records([rr::a(OUTCOME_UPSTREAM, [10, 3, 0, 1])]),
    );
    let vars = [
        ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ("MESHDNS_TIMEOUT", "2s"),
        ("MESHDNS_CACHE_SIZE", "1000"),
        ("MESHDNS_SERVE_STALE", "1s"),
    ];
    let mesh = Mesh::outcome(
        [
            records(1),
            records(2),
            Behaviour::ThenDrop(1, Box::new(late)),
        ],
        &vars,
    )
    .await;
    let (first, took) = mesh.ask_timed(OUTCOME, RecordType::A).await;
    assert_eq!(took, ATTEMPT * 2);
    assert_eq!(
        first.answer_lines(),
        [outcome_line(1), outcome_line(2)],
        "c was cut"
    );

    // c's answer comes 100 ms later; then the partial merged answer (TTL 5 s) expires and
    // leaves its serve-stale window (1 s), so the next query is gathered again.
    let partial_ttl = u64::from(meshdns::testing::gather::PARTIAL_TTL);
    tokio::time::sleep(Duration::from_secs(partial_ttl + 2)).await;
    let asked_before = mesh.c.exchanges().len();
    let later = mesh.ask(OUTCOME, RecordType::A).await;
    assert!(mesh.c.exchanges().len() > asked_before, "c was asked again");
    assert_eq!(
        later.answer_lines(),
        [outcome_line(1), outcome_line(2), outcome_line(3)],
        "c's silence filled from the answer its cut leg brought"
    );
}

// --- Size ----------------------------------------------------------------------------------

#[tokio::test]
async fn a_large_merged_set_is_truncated_over_udp_and_whole_over_tcp() {
    const PODS: u8 = 60;
    // Each cluster sets TC over UDP: the legs must fetch their sets over TCP.
    let truncating = |n: u8| {
        let srv_owner = rr::in_cluster_local("_mongodb._tcp.mongo.db");
        let pod = |i: u8| rr::in_cluster_local(&format!("mongo-{i}.mongo.db"));
        let mut answer = Answer::records((0..PODS).map(|i| rr::srv(&srv_owner, 27017, &pod(i))));
        for i in 0..PODS {
            answer = answer.additional(rr::a(&pod(i), [10, n, 1, i]));
        }
        FakeDns::builder().on(&srv_owner, RecordType::SRV, Behaviour::TruncateUdp(answer))
    };
    let mesh = Mesh::start([truncating(1), truncating(2), truncating(3)], CLUSTERS, &[]).await;

    let over_udp = mesh.ask(SRV_NAME, RecordType::SRV).await;
    assert!(over_udp.msg.truncation, "TC set over UDP");
    assert!(
        over_udp.bytes.len() <= 1232,
        "{} bytes",
        over_udp.bytes.len()
    );
    assert!(over_udp.msg.answers.len() < 180);

    let over_tcp = tcp(mesh.meshdns.addr, &query(SRV_NAME, RecordType::SRV)).await;
    assert!(!over_tcp.msg.truncation);
    assert_eq!(over_tcp.msg.answers.len(), 180);
    assert_eq!(over_tcp.msg.additionals.len(), 180);
    let targets = over_tcp.srv_targets();
    for cluster in ["a", "b", "c"] {
        let from = targets
            .iter()
            .filter(|t| t.starts_with(&format!("{cluster}-")))
            .count();
        assert_eq!(from, 60, "cluster {cluster}");
    }
    for fake in [&mesh.a, &mesh.b, &mesh.c] {
        assert!(fake.count(Via::Tcp) >= 1, "the leg retried over TCP");
    }
}

/// Service `b-team` of namespace `db` runs in cluster a only: `b-team.db.svc.distributed.local`
/// is first asked of b as `team` (prefix `b-`), which b does not have, then gathered as it is.
/// When b then goes down, b's remembered NXDOMAIN for `team` must not turn into an NXDOMAIN
/// for `b-team`, which exists (in a): the fallback is what finds it, and b's stale "no" is
/// no answer to the question the client asked.
#[tokio::test(start_paused = true)]
async fn a_service_named_like_a_prefix_is_never_nxdomain_while_that_prefixes_cluster_is_down() {
    let team = rr::in_cluster_local("b-team.db");
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
    let meshdns = Meshdns::in_cluster_a_with(&a, &[("b", &b)], &vars).await;
    let asked = "b-team.db.svc.distributed.local.";
    let first = ask(&meshdns, asked, RecordType::A).await;
    assert_eq!(first.answer_lines(), [format!("{asked} A 10.1.0.7")]);
    assert_eq!(
        b.names(),
        [rr::in_cluster_local("team.db"), team.clone()],
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
    let meshdns = Meshdns::in_cluster_a_with(&a, &[("b", &b), ("c", &c)], &vars).await;
    let prefixed = ask(&meshdns, "c-q.db.svc.distributed.local.", RecordType::A).await;
    assert_eq!(prefixed.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(
        c.names()[0],
        rr::in_cluster_local("q.db"),
        "c was asked for `q`"
    );

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
    let name = rr::in_cluster_local(&format!("{LONG_SERVICE}.db"));
    let srv_owner = rr::in_cluster_local(&format!("_http._tcp.{LONG_SERVICE}.db"));
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

/// The same for one leg of a gathered answer: cluster b had service `mongo` (its SRV answer
/// cached for b's leg), then deleted it — b answers NXDOMAIN without an SOA, which the leg
/// cache does not keep. When b then fails, its failed leg must not be filled with
/// the SRV set it had before it said the service is gone (docs/design.md, "Distributed
/// zones": a member removed from its cluster must not come back; the stale fill is for a
/// cluster whose last word was an answer).
#[tokio::test(start_paused = true)]
async fn a_service_a_cluster_just_said_is_gone_never_fills_its_failed_leg() {
    let srv = "_mongodb._tcp.mongo.db.svc.cluster.local.";
    let host = "mongo-0.mongo.db.svc.cluster.local.";
    let set = |ip: [u8; 4]| {
        Answer::records([rr::with_ttl(rr::srv(srv, 27017, host), 1)])
            .additional(rr::with_ttl(rr::a(host, ip), 1))
    };
    let a = FakeDns::builder()
        .answer(srv, RecordType::SRV, set([10, 1, 0, 1]))
        .start()
        .await;
    let gone = Answer {
        authoritative: true,
        ..Answer::rcode(ResponseCode::NXDomain)
    };
    let b = FakeDns::builder()
        .on(
            srv,
            RecordType::SRV,
            Behaviour::Sequence(vec![set([10, 2, 0, 1]), gone]),
        )
        .start()
        .await;
    let clusters = format!("a=; b={}", b.addr);
    let meshdns = Meshdns::cached_failing_fast(
        &a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", clusters.as_str()),
        ],
    )
    .await;
    let asked = "_mongodb._tcp.mongo.db.svc.distributed.local.";
    let both = ask(&meshdns, asked, RecordType::SRV).await;
    assert_eq!(both.srv_targets().len(), 2, "{:?}", both.answer_lines());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let only_a = ask(&meshdns, asked, RecordType::SRV).await;
    assert_eq!(
        only_a.srv_targets(),
        ["a-mongo-0.mongo.db.svc.distributed.local."],
        "b said the service is gone"
    );

    // b goes away (its port closed: each leg fails at once, before the client timer).
    drop(b);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = ask(&meshdns, asked, RecordType::SRV).await;
    assert_eq!(
        later.srv_targets(),
        ["a-mongo-0.mongo.db.svc.distributed.local."],
        "b's removed service came back from its stale leg"
    );
}

/// Three clusters a (local), b, c over `fakes`; `domains` are the cluster domains, when not
/// the default.
async fn three_clusters(fakes: [&FakeDns; 3], domains: [Option<&str>; 3]) -> Meshdns {
    let entry = |name: &str, endpoint: String, domain: Option<&str>| {
        let domain = domain.map_or(String::new(), |d| format!(" domain={d}"));
        format!("{name}={endpoint}{domain}")
    };
    let [a, b, c] = fakes;
    let clusters = [
        entry("a", String::new(), domains[0]),
        entry("b", b.addr.to_string(), domains[1]),
        entry("c", c.addr.to_string(), domains[2]),
    ]
    .join("; ");
    Meshdns::before(
        a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
        ],
    )
    .await
}

/// A cluster domain longer than `distributed.local`: a name may fit under that zone and not
/// under this domain.
const LONG_DOMAIN: &str = "a-rather-long-cluster-domain.example";

/// 226 bytes of labels: under `distributed.local` or `cluster.local` they make a valid
/// name, under [`LONG_DOMAIN`] one longer than 255 bytes.
fn long_labels() -> String {
    [
        "x".repeat(63),
        "y".repeat(63),
        "z".repeat(63),
        "w".repeat(33),
    ]
    .join(".")
}

/// A cluster DNS that knows `name` (A) and says NXDOMAIN for the rest, as CoreDNS does.
fn cluster_knowing(name: &str, ip: [u8; 4]) -> FakeDnsBuilder {
    FakeDns::builder().nxdomain_otherwise().answer(
        name,
        RecordType::A,
        Answer::records([rr::a(name, ip)]),
    )
}

#[tokio::test]
async fn a_service_named_like_a_prefix_is_gathered() {
    // Services `a-cache` and `b-side` in namespace db exist in every cluster.
    let fake = |n: u8| {
        let cache = "a-cache.db.svc.cluster.local.";
        let side = "b-side.db.svc.cluster.local.";
        cluster_knowing(cache, [10, n, 0, 1]).answer(
            side,
            RecordType::TXT,
            Answer::records([rr::txt(side, "replicaSet=rs0")]),
        )
    };
    let (a, b, c) = (
        fake(1).start().await,
        fake(2).start().await,
        fake(3).start().await,
    );
    let meshdns = three_clusters([&a, &b, &c], [None; 3]).await;
    let service = "a-cache.db.svc.distributed.local.";
    let reply = udp(meshdns.addr, &query(service, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(
        reply.answer_lines(),
        [1, 2, 3].map(|n| format!("{service} A 10.{n}.0.1")),
        "the union, not host `cache` of cluster a"
    );
    let side = "b-side.db.svc.distributed.local.";
    let reply = udp(meshdns.addr, &query(side, RecordType::TXT)).await;
    assert_eq!(reply.answer_lines(), [format!("{side} TXT replicaSet=rs0")]);
    // A prefixed name goes to its cluster first (any depth: the SRV target of a ClusterIP
    // Service is the service name); its NXDOMAIN there sends the name as it is to everyone.
    let (cache, side) = (
        "a-cache.db.svc.cluster.local.",
        "b-side.db.svc.cluster.local.",
    );
    assert_eq!(a.names(), ["cache.db.svc.cluster.local.", cache, side]);
    assert_eq!(b.names(), [cache, "side.db.svc.cluster.local.", side]);
    assert_eq!(c.names(), [cache, side], "every cluster was asked both");
}

#[tokio::test]
async fn a_prefixed_host_unknown_to_its_cluster_falls_back_to_the_gathered_name() {
    // StatefulSet `b-side` runs pod `b-side-0` in cluster a only; pod `mongo-0` runs in b.
    let pod = "b-side-0.b-side.db.svc.cluster.local.";
    let mongo = "mongo-0.mongo.db.svc.cluster.local.";
    let a = cluster_knowing(pod, [10, 1, 0, 7]).start().await;
    let b = cluster_knowing(mongo, [10, 2, 0, 1]).start().await;
    let c = FakeDns::builder().nxdomain_otherwise().start().await;
    let meshdns = three_clusters([&a, &b, &c], [None; 3]).await;

    let host = "b-side-0.b-side.db.svc.distributed.local.";
    let reply = udp(meshdns.addr, &query(host, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.answer_lines(), [format!("{host} A 10.1.0.7")]);
    assert_eq!(
        b.names(),
        ["side-0.b-side.db.svc.cluster.local.", pod],
        "b was asked for its host `side-0` first, then everyone for the name as it is"
    );

    // A host its cluster knows is answered by that cluster alone.
    let prefixed = "b-mongo-0.mongo.db.svc.distributed.local.";
    let reply = udp(meshdns.addr, &query(prefixed, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), [format!("{prefixed} A 10.2.0.1")]);
    assert_eq!(
        (a.exchanges().len(), c.exchanges().len()),
        (1, 1),
        "no fallback needed"
    );

    // Unknown everywhere: NXDOMAIN with the zone's SOA.
    let nowhere = "b-side-9.b-side.db.svc.distributed.local.";
    let reply = udp(meshdns.addr, &query(nowhere, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(
        reply.msg.authorities[0].name.to_ascii(),
        "distributed.local."
    );
}

#[tokio::test]
async fn a_name_no_cluster_can_hold_is_nxdomain_whatever_the_type() {
    let name = format!("{}.distributed.local.", long_labels());
    let (a, b, c) = (
        FakeDns::builder().nxdomain_otherwise().start().await,
        FakeDns::builder().nxdomain_otherwise().start().await,
        FakeDns::builder().nxdomain_otherwise().start().await,
    );
    let meshdns = three_clusters([&a, &b, &c], [Some(LONG_DOMAIN); 3]).await;
    for rtype in [RecordType::A, RecordType::SRV, RecordType::MX] {
        let reply = udp(meshdns.addr, &query(&name, rtype)).await;
        assert_eq!(
            reply.msg.response_code,
            ResponseCode::NXDomain,
            "{rtype}: not NODATA"
        );
        assert_eq!(
            reply.msg.authorities[0].name.to_ascii(),
            "distributed.local."
        );
    }
    assert!(a.seen().is_empty() && b.seen().is_empty() && c.seen().is_empty());
}

#[tokio::test]
async fn a_long_name_is_answered_by_the_clusters_whose_domain_can_hold_it() {
    let name = format!("{}.distributed.local.", long_labels());
    let in_a = format!("{}.cluster.local.", long_labels());
    let a = cluster_knowing(&in_a, [10, 1, 0, 1]).start().await;
    let (b, c) = (
        FakeDns::builder().nxdomain_otherwise().start().await,
        FakeDns::builder().nxdomain_otherwise().start().await,
    );
    let meshdns = three_clusters([&a, &b, &c], [None, Some(LONG_DOMAIN), None]).await;
    let reply = udp(meshdns.addr, &query(&name, RecordType::A)).await;
    assert_eq!(
        reply.msg.response_code,
        ResponseCode::NoError,
        "not a false NXDOMAIN"
    );
    assert_eq!(reply.answer_lines(), [format!("{name} A 10.1.0.1")]);
    assert!(b.seen().is_empty(), "b's domain cannot hold the name");
    assert_eq!(c.names(), [in_a]);
}

#[tokio::test]
async fn merged_rrsets_carry_one_ttl() {
    let service = "mongo.db.svc.cluster.local.";
    let srv = "_mongodb._tcp.mongo.db.svc.cluster.local.";
    let with_ttl = |mut record: Record, ttl: u32| {
        record.ttl = ttl;
        record
    };
    // Each cluster's CoreDNS has its own `ttl` setting.
    let fake = |n: u8, ttl: u32| {
        let target = "mongo-0.mongo.db.svc.cluster.local.";
        FakeDns::builder()
            .nxdomain_otherwise()
            .answer(
                service,
                RecordType::A,
                Answer::records([with_ttl(rr::a(service, [10, n, 0, 1]), ttl)]),
            )
            .answer(
                srv,
                RecordType::SRV,
                Answer::records([with_ttl(rr::srv(srv, 27017, target), ttl)])
                    .additional(with_ttl(rr::a(target, [10, n, 0, 10]), ttl + 1)),
            )
    };
    let (a, b, c) = (
        fake(1, 30).start().await,
        fake(2, 10).start().await,
        fake(3, 20).start().await,
    );
    let meshdns = three_clusters([&a, &b, &c], [None; 3]).await;
    for (name, rtype) in [
        ("mongo.db.svc.distributed.local.", RecordType::A),
        (
            "_mongodb._tcp.mongo.db.svc.distributed.local.",
            RecordType::SRV,
        ),
    ] {
        let reply = udp(meshdns.addr, &with_edns(query(name, rtype), 1232)).await;
        let ttls: Vec<u32> = reply.msg.answers.iter().map(|r| r.ttl).collect();
        assert_eq!(
            ttls,
            [10, 10, 10],
            "{rtype}: the smallest, for the whole set"
        );
    }
}
