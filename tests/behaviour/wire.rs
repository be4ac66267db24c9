//! Wire correctness, round two (issue 14), seen from a client: per-hop EDNS options
//! (docs/design.md, "Pass-through"), which queries may be answered from the cache ("Cache"),
//! whole RRsets on truncation ("Truncation"), zone transfers, prefixed names under a
//! distributed zone ("Distributed zones"), one TTL per merged RRset, and what meshdns's own
//! replies echo ("Limits and bad input").
//!
//! The fakes stand in for kube-dns and the peers' CoreDNS: they set cookies and NSID, omit the
//! question of an error reply, and serve RRsets too large for 512 bytes. What they received is
//! kept byte for byte, so a test can tell what meshdns relayed.

use crate::support;

use std::time::Duration;

use hickory_proto::op::{Edns, Message, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::{Record, RecordType};
use meshdns::wire::{
    OPTION_CLIENT_SUBNET, OPTION_COOKIE, OPTION_NSID, OPTION_PADDING, OPTION_TCP_KEEPALIVE,
};
use support::{
    Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, Reply, Via, query, rcode_of, rr, tcp,
    tcp_raw, udp, with_edns,
};

const NAME: &str = "www.example.com.";

/// Caching on (the test default is off).
const CACHED: (&str, &str) = ("MESHDNS_CACHE_SIZE", "10000");

fn www() -> Answer {
    Answer::records([rr::a(NAME, [192, 0, 2, 1])])
}

/// kube-dns answering [`NAME`] A with `answer`, and meshdns in front of it with `vars`.
async fn serving(answer: Answer, vars: &[(&str, &str)]) -> (FakeDns, Meshdns) {
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, vars).await;
    (upstream, meshdns)
}

/// A query for `name` with EDNS carrying `options` (code, data), in that order.
fn asking(name: &str, rtype: RecordType, options: &[(u16, &[u8])]) -> Message {
    let mut msg = with_edns(query(name, rtype), 1232);
    let edns = msg.edns.as_mut().expect("EDNS was just set");
    for (code, data) in options {
        edns.options_mut()
            .insert(EdnsOption::Unknown(*code, data.to_vec()));
    }
    msg
}

/// Whether a message (a reply, or a query as a fake received it) carries EDNS option `code`.
fn carries(msg: &[u8], code: u16) -> bool {
    meshdns::wire::opt(msg)
        .flatten()
        .is_some_and(|opt| opt.options.contains(code))
}

/// The option as it travels: code, length, data.
fn option_bytes(code: u16, data: &[u8]) -> Vec<u8> {
    let len = u16::try_from(data.len()).unwrap();
    [&code.to_be_bytes()[..], &len.to_be_bytes(), data].concat()
}

async fn cache_hits(meshdns: &Meshdns) -> f64 {
    meshdns.metric("meshdns_cache_hits_total", &[]).await
}

// --- 1. Per-hop EDNS options ---------------------------------------------------------------

#[tokio::test]
async fn a_second_client_never_gets_the_first_clients_cookie() {
    // kube-dns with cookies: a query's client cookie comes back with a server cookie.
    let upstream = FakeDns::builder()
        .cookies()
        .answer(NAME, RecordType::A, www())
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[CACHED]).await;
    let first = udp(
        meshdns.addr,
        &asking(NAME, RecordType::A, &[(OPTION_COOKIE, b"client-1")]),
    )
    .await;
    let second = udp(
        meshdns.addr,
        &asking(NAME, RecordType::A, &[(OPTION_COOKIE, b"client-2")]),
    )
    .await;
    let without = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    for (who, reply) in [
        ("first", &first),
        ("second", &second),
        ("no cookie", &without),
    ] {
        assert_eq!(reply.answer_lines().len(), 1, "{who}");
        assert!(!carries(&reply.bytes, OPTION_COOKIE), "{who} got a cookie");
    }
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "the second and third were cache hits");
    assert!(
        !carries(&seen[0].query, OPTION_COOKIE),
        "a client's cookie went upstream"
    );
}

#[tokio::test]
async fn a_cookie_in_an_upstream_reply_reaches_no_client_on_a_miss_or_a_hit() {
    let mut answer = www();
    answer.options = vec![EdnsOption::Unknown(
        OPTION_COOKIE,
        b"client-1fakeSrv!".to_vec(),
    )];
    let (upstream, meshdns) = serving(answer, &[CACHED]).await;
    let cookie: &[(u16, &[u8])] = &[(OPTION_COOKIE, b"client-1")];
    let miss = udp(meshdns.addr, &asking(NAME, RecordType::A, cookie)).await;
    let hit = udp(meshdns.addr, &asking(NAME, RecordType::A, cookie)).await;
    let over_tcp = tcp(meshdns.addr, &asking(NAME, RecordType::A, cookie)).await;
    for (which, reply) in [("miss", &miss), ("hit", &hit), ("tcp hit", &over_tcp)] {
        assert!(!carries(&reply.bytes, OPTION_COOKIE), "{which}");
        assert_eq!(reply.answer_lines().len(), 1, "{which}");
    }
    assert_eq!(upstream.exchanges().len(), 1);
}

#[tokio::test]
async fn nsid_reaches_only_the_client_that_asked() {
    let mut answer = www();
    answer.options = vec![EdnsOption::Unknown(OPTION_NSID, b"kube-dns-7f9c".to_vec())];
    let (upstream, meshdns) = serving(answer, &[CACHED]).await;
    let nsid: &[(u16, &[u8])] = &[(OPTION_NSID, b"")];
    let asked = udp(meshdns.addr, &asking(NAME, RecordType::A, nsid)).await;
    assert!(
        carries(&asked.bytes, OPTION_NSID),
        "the asker gets kube-dns's NSID"
    );
    assert!(carries(&upstream.seen()[0].query, OPTION_NSID), "relayed");
    let never_asked = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    assert!(
        !carries(&never_asked.bytes, OPTION_NSID),
        "a hit for a client that never asked"
    );
    // A hit was produced by another client's query: the identity there is not this hop's.
    let asked_on_a_hit = udp(meshdns.addr, &asking(NAME, RecordType::A, nsid)).await;
    assert!(!carries(&asked_on_a_hit.bytes, OPTION_NSID));
    assert_eq!(
        upstream.exchanges().len(),
        1,
        "both later queries were hits"
    );
}

#[tokio::test]
async fn padding_and_tcp_keepalive_reach_no_client_and_are_never_sent_upstream() {
    // kube-dns pads its reply and says how long it keeps its TCP connection to meshdns open:
    // both describe the hop between them, never the client's (RFC 7828 §3.3.2, RFC 7830).
    let mut answer = www();
    answer.options = vec![
        EdnsOption::Unknown(OPTION_PADDING, vec![0; 40]),
        EdnsOption::Unknown(OPTION_TCP_KEEPALIVE, vec![0, 100]),
    ];
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::Delay(Duration::from_millis(200), answer),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[CACHED]).await;
    // The clients pad their queries and ask for keepalive, as a DoT-minded stub may.
    let hop_options: &[(u16, &[u8])] = &[(OPTION_PADDING, &[0; 24]), (OPTION_TCP_KEEPALIVE, &[])];
    let ask = || async { udp(meshdns.addr, &asking(NAME, RecordType::A, hop_options)).await };
    // Two clients at once: one leads the exchange, the other follows it; then a hit, over TCP.
    let (one, two) = tokio::join!(ask(), ask());
    let hit = tcp(meshdns.addr, &asking(NAME, RecordType::A, hop_options)).await;
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1, "one exchange for all three");
    for code in [OPTION_PADDING, OPTION_TCP_KEEPALIVE] {
        assert!(
            !carries(&seen[0].query, code),
            "option {code} went upstream"
        );
        for (who, reply) in [
            ("leader or follower", &one),
            ("the other", &two),
            ("hit", &hit),
        ] {
            assert!(
                !carries(&reply.bytes, code),
                "option {code} reached the {who}"
            );
        }
    }
    for reply in [&one, &two, &hit] {
        assert_eq!(reply.answer_lines().len(), 1);
    }
}

/// A query meshdns relayed, without the loop marker it adds to every query it sends upstream
/// (docs/design.md, "No loops"); fails the test when the marker is missing.
fn unmarked(relayed: &[u8]) -> Vec<u8> {
    meshdns::wire::without_options(relayed, |code| code == meshdns::wire::OPTION_LOOP_MARKER)
        .expect("every relayed query carries meshdns's loop marker")
}

#[tokio::test]
async fn a_client_subnet_query_is_relayed_and_never_cached() {
    let (upstream, meshdns) = serving(www(), &[CACHED]).await;
    // 192.0.2.0/24 (family 1, source prefix 24, scope 0).
    let subnet: &[u8] = &[0, 1, 24, 0, 192, 0, 2];
    for _ in 0..2 {
        let asked = asking(NAME, RecordType::A, &[(OPTION_CLIENT_SUBNET, subnet)]);
        let reply = udp(meshdns.addr, &asked).await;
        assert_eq!(reply.answer_lines().len(), 1);
        let relayed = unmarked(&upstream.seen().last().unwrap().query);
        assert_eq!(
            support::without_id(&relayed),
            support::without_id(&asked.to_vec().unwrap()),
            "relayed as is"
        );
    }
    assert_eq!(
        upstream.exchanges().len(),
        2,
        "the second was not a cache hit"
    );
    // Nor was the reply stored for clients without a subnet.
    let plain = || async { udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await };
    plain().await;
    plain().await;
    assert_eq!(
        upstream.exchanges().len(),
        3,
        "a scoped reply was never served to another"
    );
}

#[tokio::test]
async fn a_client_subnet_option_of_an_unknown_family_is_relayed_not_formerr() {
    let (upstream, meshdns) = serving(www(), &[]).await;
    let odd: &[u8] = &[0, 99, 0, 0];
    let asked = asking(
        NAME,
        RecordType::A,
        &[(OPTION_CLIENT_SUBNET, odd), (65001, b"private")],
    );
    let bytes = asked.to_vec().unwrap();
    let reply = support::udp_raw(meshdns.addr, &bytes)
        .await
        .expect("a reply");
    assert_eq!(
        rcode_of(&reply),
        ResponseCode::NoError,
        "as kube-dns answers it"
    );
    let relayed = &unmarked(&upstream.seen()[0].query);
    assert_eq!(
        support::without_id(relayed),
        support::without_id(&bytes),
        "passed on unparsed"
    );
    let option = option_bytes(OPTION_CLIENT_SUBNET, odd);
    assert!(relayed.windows(option.len()).any(|w| w == option));
}

// --- 2. Only well-formed queries take the cache-hit path ------------------------------------

/// `msg` encoded with a second OPT record after the first (ARCOUNT 2).
fn with_two_opt_records(msg: &Message) -> Vec<u8> {
    let mut bytes = msg.to_vec().unwrap();
    let opt = bytes[bytes.len() - 11..].to_vec();
    assert_eq!(opt[..3], [0, 0, 41], "an empty OPT record ends the message");
    bytes.extend_from_slice(&opt);
    bytes[11] = 2;
    bytes
}

#[tokio::test]
async fn two_opt_records_get_formerr_even_when_the_name_is_cached() {
    let (upstream, meshdns) = serving(www(), &[CACHED]).await;
    let edns_query = with_edns(query(NAME, RecordType::A), 1232);
    udp(meshdns.addr, &edns_query).await;
    assert_eq!(udp(meshdns.addr, &edns_query).await.answer_lines().len(), 1);
    assert_eq!(cache_hits(&meshdns).await, 1.0, "the name is cached");
    let two = with_two_opt_records(&edns_query);
    let over_udp = support::udp_raw(meshdns.addr, &two).await.expect("a reply");
    let over_tcp = tcp_raw(meshdns.addr, &two).await;
    for reply in [over_udp, over_tcp] {
        assert_eq!(rcode_of(&reply), ResponseCode::FormErr, "RFC 6891 §6.1.1");
        assert_eq!(reply[..2], two[..2], "the ID is echoed");
    }
    assert_eq!(
        cache_hits(&meshdns).await,
        1.0,
        "no hit for a malformed query"
    );
    assert_eq!(upstream.exchanges().len(), 1, "nor was it forwarded");
}

#[tokio::test]
async fn only_well_formed_queries_take_the_cache_hit_path() {
    let (upstream, meshdns) = serving(www(), &[CACHED]).await;
    udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    let mut with_answer = with_edns(query(NAME, RecordType::A), 1232);
    with_answer.add_answer(rr::a(NAME, [192, 0, 2, 9]));
    let mut with_authority = with_edns(query(NAME, RecordType::A), 1232);
    with_authority.add_authority(rr::soa("example.com."));
    // An A record after the OPT record: the OPT is not last.
    let mut opt_not_last = with_edns(query(NAME, RecordType::A), 1232)
        .to_vec()
        .unwrap();
    opt_not_last.extend_from_slice(&[0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, 192, 0, 2, 9]);
    opt_not_last[11] = 2;
    let odd = [
        with_answer.to_vec().unwrap(),
        with_authority.to_vec().unwrap(),
        opt_not_last,
    ];
    for bytes in &odd {
        support::udp_raw(meshdns.addr, bytes)
            .await
            .expect("a reply");
    }
    assert_eq!(
        cache_hits(&meshdns).await,
        0.0,
        "none was answered from the cache"
    );
    assert_eq!(
        upstream.exchanges().len(),
        1 + odd.len(),
        "each took the full path"
    );
    udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    assert_eq!(
        cache_hits(&meshdns).await,
        1.0,
        "a well-formed one still does"
    );
}

// --- 3. Truncation keeps whole RRsets --------------------------------------------------------

const BIG_SRV: &str = "_http._tcp.big.db.svc.cluster.local.";

/// `pods` SRV records for [`BIG_SRV`] with their targets' addresses (cluster `n`), truncated
/// over UDP as a real server does (TC, no records), whole over TCP.
fn big_srv(n: u8, pods: u8) -> FakeDnsBuilder {
    let pod = |i: u8| format!("big-{i}.big.db.svc.cluster.local.");
    let mut answer = Answer::records((0..pods).map(|i| rr::srv(BIG_SRV, 8080, &pod(i))));
    for i in 0..pods {
        answer = answer.additional(rr::a(&pod(i), [10, n, 1, i]));
    }
    FakeDns::builder().on(BIG_SRV, RecordType::SRV, Behaviour::TruncateUdp(answer))
}

#[tokio::test]
async fn a_big_srv_set_without_edns_is_all_or_nothing_with_tc() {
    let upstream = big_srv(1, 60).start().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let over_udp = udp(meshdns.addr, &query(BIG_SRV, RecordType::SRV)).await;
    assert!(
        over_udp.bytes.len() <= 512,
        "{} bytes",
        over_udp.bytes.len()
    );
    assert!(over_udp.msg.truncation, "TC: ask again over TCP");
    assert_eq!(
        over_udp.answer_lines(),
        Vec::<String>::new(),
        "none of the set"
    );
    assert!(over_udp.msg.additionals.is_empty());
    let over_tcp = tcp(meshdns.addr, &query(BIG_SRV, RecordType::SRV)).await;
    assert!(!over_tcp.msg.truncation);
    assert_eq!(over_tcp.answer_lines().len(), 60, "all of it over TCP");
}

#[tokio::test]
async fn a_gathered_srv_set_without_edns_is_all_or_nothing_with_tc() {
    let gathered = "_http._tcp.big.db.svc.distributed.local.";
    for (pods, fits) in [(1, true), (3, false), (60, false)] {
        let (a, b, c) = (
            big_srv(1, pods).start().await,
            big_srv(2, pods).start().await,
            big_srv(3, pods).start().await,
        );
        let peers = format!("b={}; c={}", b.addr, c.addr);
        let meshdns = Meshdns::in_cluster_a(&a, &peers).await;
        let all = 3 * usize::from(pods);
        let noedns = udp(meshdns.addr, &query(gathered, RecordType::SRV)).await;
        assert!(noedns.bytes.len() <= 512, "{} bytes", noedns.bytes.len());
        if fits {
            assert!(!noedns.msg.truncation, "the whole set fits: no TC");
            assert_eq!(noedns.answer_lines().len(), all);
        } else {
            assert!(noedns.msg.truncation, "{pods} per cluster: TC");
            assert_eq!(noedns.answer_lines().len(), 0, "never part of the set");
        }
        let edns = udp(
            meshdns.addr,
            &with_edns(query(gathered, RecordType::SRV), 1232),
        )
        .await;
        assert!(edns.bytes.len() <= 1232);
        assert!(
            [0, all].contains(&edns.answer_lines().len()),
            "all or nothing"
        );
        assert_eq!(edns.msg.truncation, edns.answer_lines().is_empty());
        let over_tcp = tcp(meshdns.addr, &query(gathered, RecordType::SRV)).await;
        assert_eq!(over_tcp.answer_lines().len(), all);
        assert_eq!(over_tcp.msg.additionals.len(), all);
    }
}

#[tokio::test]
async fn additional_records_are_dropped_before_any_answer_without_tc() {
    // Nine SRV records fit in 512 bytes; with their nine addresses they do not.
    let upstream = big_srv(1, 9).start().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query(BIG_SRV, RecordType::SRV)).await;
    assert!(reply.bytes.len() <= 512, "{} bytes", reply.bytes.len());
    assert!(!reply.msg.truncation, "the answer is complete: no TC");
    assert_eq!(reply.answer_lines().len(), 9);
    assert!(reply.msg.additionals.len() < 9, "some addresses left out");
    // What is kept of the additional section is whole sets, in order.
    let kept = reply.additional_lines();
    let full = tcp(meshdns.addr, &query(BIG_SRV, RecordType::SRV)).await;
    assert_eq!(kept, full.additional_lines()[..kept.len()]);
}

// --- 4. Zone transfers ----------------------------------------------------------------------

#[tokio::test]
async fn axfr_and_ixfr_are_refused_over_udp_and_tcp_and_never_cached() {
    // An upstream that would answer anything: it must never be asked.
    let upstream = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::records([rr::soa(
            "example.com.",
        )])))
        .start()
        .await;
    let clusters = format!("a=; b={}", upstream.addr);
    let meshdns = Meshdns::before(
        &upstream,
        &[
            CACHED,
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
        ],
    )
    .await;
    for zone in ["example.com.", "db.cluster.b."] {
        let axfr = query(zone, RecordType::AXFR);
        // An IXFR query carries the client's SOA (its serial) in the authority section.
        let mut ixfr = query(zone, RecordType::IXFR);
        ixfr.add_authority(rr::soa(zone));
        for msg in [&axfr, &ixfr, &axfr, &ixfr] {
            for reply in [udp(meshdns.addr, msg).await, tcp(meshdns.addr, msg).await] {
                assert_eq!(reply.msg.response_code, ResponseCode::Refused, "{zone}");
                assert_eq!(reply.msg.queries, msg.queries, "the question echoed");
                assert!(reply.msg.answers.is_empty());
            }
        }
    }
    assert!(upstream.seen().is_empty(), "never relayed");
    assert_eq!(meshdns.metric("meshdns_cache_entries", &[]).await, 0.0);
    assert_eq!(cache_hits(&meshdns).await, 0.0);
}

// --- 5. Prefixed names under a distributed zone ----------------------------------------------

/// Three clusters a (local), b, c over `fakes`; `domains` are the cluster domains, when not
/// the default.
async fn mesh(fakes: [&FakeDns; 3], domains: [Option<&str>; 3]) -> Meshdns {
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

/// A cluster DNS that says NXDOMAIN for what it does not know, as CoreDNS does.
fn cluster() -> FakeDnsBuilder {
    FakeDns::builder().otherwise(Behaviour::Answer(Answer::nxdomain("cluster.local.")))
}

/// [`cluster`] with an A record for `name`.
fn cluster_knowing(name: &str, ip: [u8; 4]) -> FakeDnsBuilder {
    cluster().answer(name, RecordType::A, Answer::records([rr::a(name, ip)]))
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
    let meshdns = mesh([&a, &b, &c], [None; 3]).await;
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
    let c = cluster().start().await;
    let meshdns = mesh([&a, &b, &c], [None; 3]).await;

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
        cluster().start().await,
        cluster().start().await,
        cluster().start().await,
    );
    let meshdns = mesh([&a, &b, &c], [Some(LONG_DOMAIN); 3]).await;
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
    let (b, c) = (cluster().start().await, cluster().start().await);
    let meshdns = mesh([&a, &b, &c], [None, Some(LONG_DOMAIN), None]).await;
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

// --- 6. Smaller points -----------------------------------------------------------------------

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
        cluster()
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
    let meshdns = mesh([&a, &b, &c], [None; 3]).await;
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

#[tokio::test]
async fn meshdns_own_replies_echo_cd() {
    let (a, b) = (cluster().start().await, FakeDns::silent().await);
    let clusters = format!("a=; b={}", b.addr);
    let meshdns = Meshdns::before(
        &a,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
            ("MESHDNS_TIMEOUT", "500ms"),
        ],
    )
    .await;
    let cd = |mut msg: Message| {
        msg.metadata.checking_disabled = true;
        msg
    };
    let mut notify = query(NAME, RecordType::SOA);
    notify.metadata.op_code = OpCode::Notify;
    let mut two_questions = query(NAME, RecordType::A);
    two_questions.add_query(Query::query(rr::name("other.example.com."), RecordType::A));
    let mut badvers = with_edns(query(NAME, RecordType::A), 1232);
    let mut edns = Edns::new();
    edns.set_version(1);
    badvers.set_edns(edns);
    let parsed = [
        ("REFUSED (AXFR)", query(NAME, RecordType::AXFR)),
        ("NOTIMP", notify),
        ("FORMERR (two questions)", two_questions),
        ("BADVERS", badvers),
        (
            "NODATA (distributed MX)",
            query("mongo.db.svc.distributed.local.", RecordType::MX),
        ),
        (
            "NXDOMAIN (distributed)",
            query("gone.db.svc.distributed.local.", RecordType::A),
        ),
        (
            "SERVFAIL (cluster b silent)",
            query("mongo-0.mongo.db.cluster.b.", RecordType::A),
        ),
    ];
    for (what, msg) in parsed {
        let bytes = cd(msg).to_vec().unwrap();
        let reply = support::udp_raw(meshdns.addr, &bytes).await.expect(what);
        assert!(
            meshdns::wire::checking_disabled(&reply),
            "{what}: CD not echoed"
        );
    }
    // A reply built from the header alone (what follows it does not parse).
    let mut garbage = cd(query(NAME, RecordType::A)).to_vec().unwrap();
    garbage.truncate(14);
    garbage.extend_from_slice(b"\xc0\xff garbage");
    let reply = support::udp_raw(meshdns.addr, &garbage)
        .await
        .expect("FORMERR");
    assert_eq!(rcode_of(&reply), ResponseCode::FormErr);
    assert!(
        meshdns::wire::checking_disabled(&reply),
        "header-only FORMERR"
    );
}

#[tokio::test]
async fn a_question_the_router_cannot_read_gets_formerr() {
    let (upstream, meshdns) = serving(www(), &[]).await;
    let good = with_edns(query(NAME, RecordType::A), 1232)
        .to_vec()
        .unwrap();
    // One question, nothing else.
    let plain = query(NAME, RecordType::A).to_vec().unwrap();
    let header = &plain[..12];
    let question_end = good.len() - 11;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // A question name that points into the header: hickory follows it, the router cannot.
    cases.push((
        "pointer into the header",
        [header, &[0xc0, 0x02, 0, 1, 0, 1]].concat(),
    ));
    cases.push(("a question cut short", good[..question_end - 3].to_vec()));
    cases.push(("an OPT record cut short", good[..good.len() - 4].to_vec()));
    // An option whose length runs past the end of the OPT record.
    let mut overrun = asking(NAME, RecordType::A, &[(65001, b"ab")])
        .to_vec()
        .unwrap();
    let at = overrun.len() - 3;
    overrun[at] = 9;
    cases.push(("an option longer than its record", overrun));
    let mut label_too_long = header.to_vec();
    label_too_long.extend_from_slice(&[64]);
    label_too_long.extend_from_slice(&[b'x'; 64]);
    label_too_long.extend_from_slice(&[0, 0, 1, 0, 1]);
    cases.push(("a label of 64 bytes", label_too_long));
    for (what, bytes) in cases {
        let over_udp = support::udp_raw_within(meshdns.addr, &bytes, Duration::from_secs(2)).await;
        let over_udp = over_udp.unwrap_or_else(|| panic!("{what}: dropped over UDP"));
        let over_tcp = tcp_raw(meshdns.addr, &bytes).await;
        for reply in [over_udp, over_tcp] {
            assert_eq!(rcode_of(&reply), ResponseCode::FormErr, "{what}");
            assert_eq!(reply[..2], bytes[..2], "{what}: the ID is echoed");
            let unread = [
                "pointer into the header",
                "a question cut short",
                "a label of 64 bytes",
            ];
            if unread.contains(&what) {
                assert_eq!(
                    meshdns::wire::question_count(&reply),
                    Some(0),
                    "{what}: no question the client did not send"
                );
            }
        }
    }
    assert!(upstream.seen().is_empty(), "nothing forwarded");
}

#[tokio::test]
async fn an_error_reply_without_a_question_is_relayed_with_the_question_restored() {
    let refused = "refused.example.com.";
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::ErrorWithoutQuestion(ResponseCode::FormErr),
        )
        .on(
            refused,
            RecordType::A,
            Behaviour::ErrorWithoutQuestion(ResponseCode::Refused),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(
        &upstream,
        &[
            CACHED,
            ("MESHDNS_ATTEMPT_TIMEOUT", "1s"),
            ("MESHDNS_TIMEOUT", "2s"),
        ],
    )
    .await;
    let asked_as = "WWW.Example.COM.";
    for (name, rcode) in [
        (asked_as, ResponseCode::FormErr),
        (refused, ResponseCode::Refused),
    ] {
        for via in [Via::Udp, Via::Tcp, Via::Udp, Via::Udp] {
            let msg = query(name, RecordType::A);
            let reply = match via {
                Via::Udp => udp(meshdns.addr, &msg).await,
                Via::Tcp => tcp(meshdns.addr, &msg).await,
            };
            assert_eq!(reply.msg.response_code, rcode);
            let echoed: Vec<String> = reply
                .msg
                .queries
                .iter()
                .map(|q| q.name().to_ascii())
                .collect();
            assert_eq!(echoed, [name], "the client's question, as spelled");
        }
    }
    // Relayed at once: one attempt per query, none of them waited out (a reply held back for
    // a better one would count a timeout and ask again).
    assert_eq!(
        upstream.exchanges().len(),
        8,
        "never answered from the cache, never retried"
    );
    let local = meshdns::snapshot::LOCAL_UPSTREAM;
    assert_eq!(meshdns.upstream_requests(local, "timeout").await, 0.0);
    let healthy = meshdns
        .upstream_healthy(meshdns::snapshot::LOCAL_UPSTREAM, &upstream)
        .await;
    assert_eq!(healthy, 1.0, "the endpoint answered: never marked down");
}

/// `query` with an OPT record advertising `size` bytes, written into the bytes (hickory raises
/// any size below 512 to 512 when it encodes).
fn with_raw_edns_size(msg: &Message, size: u16) -> Vec<u8> {
    let mut bytes = with_edns(msg.clone(), 1232).to_vec().unwrap();
    let class_at = bytes.len() - 8; // OPT: root(1) type(2) CLASS(2) TTL(4) RDLEN(2), no options
    bytes[class_at..class_at + 2].copy_from_slice(&size.to_be_bytes());
    bytes
}

/// A client advertising an EDNS payload below 512 is answered as if it said 512 (RFC 6891
/// §6.2.3: "Values lower than 512 MUST be treated as equal to 512"): an answer of ~400 bytes
/// comes whole, without TC, with an OPT record, on a miss and on a hit.
#[tokio::test]
async fn an_edns_payload_below_512_is_taken_as_512() {
    let records: Vec<Record> = (0..20u8).map(|i| rr::a(NAME, [192, 0, 2, i])).collect();
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, Answer::records(records))
        .start()
        .await;
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[]).await;
    for round in ["miss", "hit"] {
        let asked = query(NAME, RecordType::A);
        let bytes = with_raw_edns_size(&asked, 100);
        let reply = support::udp_raw(meshdns.addr, &bytes).await.expect(round);
        assert!(
            reply.len() > 100 && reply.len() <= 512,
            "{round}: {}",
            reply.len()
        );
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.id, asked.id);
        assert!(!reply.truncation, "{round}: cut below 512");
        assert_eq!(reply.answers.len(), 20, "{round}");
        assert!(reply.edns.is_some(), "{round}: the OPT record kept");
    }
    assert_eq!(upstream.exchanges().len(), 1);
}

/// The EDNS options of a reply: codes.
fn option_codes(reply: &Reply) -> Vec<u16> {
    let Some(edns) = reply.msg.edns.as_ref() else {
        return Vec::new();
    };
    (edns.options().as_ref().iter())
        .map(|(code, _)| u16::from(*code))
        .collect()
}

/// An EDNS option meshdns does not know, sent by the client, is not echoed back (RFC 6891
/// §6.1.2: options are not echoed unless their own specification says so): not by
/// pass-through (on a miss or a hit), not in a reply meshdns writes itself (a distributed
/// zone's NODATA, BADVERS).
#[tokio::test]
async fn an_unknown_edns_option_of_the_client_is_never_echoed() {
    use hickory_proto::rr::rdata::opt::EdnsOption;
    let upstream = FakeDns::builder()
        .answer(
            NAME,
            RecordType::A,
            Answer::records([rr::a(NAME, [192, 0, 2, 1])]),
        )
        .start()
        .await;
    let peer = FakeDns::builder().otherwise(Behaviour::Drop).start().await;
    let clusters = format!("a=; b={}", peer.addr);
    let meshdns = Meshdns::cached_failing_fast(
        &upstream,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", clusters.as_str()),
        ],
    )
    .await;
    let asking = |name: &str, rtype: RecordType, version: u8| {
        let mut msg = with_edns(query(name, rtype), 1232);
        let edns = msg.edns.as_mut().unwrap();
        edns.set_version(version);
        edns.options_mut()
            .insert(EdnsOption::Unknown(65001, b"private".to_vec()));
        msg
    };
    let distributed = "mongo.db.svc.distributed.local.";
    for (what, msg) in [
        ("miss", asking(NAME, RecordType::A, 0)),
        ("hit", asking(NAME, RecordType::A, 0)),
        ("distributed NODATA", asking(distributed, RecordType::MX, 0)),
        ("BADVERS", asking(NAME, RecordType::A, 1)),
    ] {
        let reply = udp(meshdns.addr, &msg).await;
        assert!(reply.msg.edns.is_some(), "{what}: an OPT record");
        assert!(!option_codes(&reply).contains(&65001), "{what}: echoed");
    }
}
