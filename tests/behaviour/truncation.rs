//! Truncation (docs/design.md, "Truncation"): answers too big for the client's size. A
//! gathered SRV set of 3 clusters × 100, 200 and 250 hosts, and a cluster route whose peer
//! answers 600 targets, asked over UDP with buffers of 512 (no EDNS), 1232, 4096 and 65,535
//! bytes and over TCP. Every query gets a reply; an RRset is all there or not at all, on every
//! transport; glue goes before any TC; TC over UDP only when the answer does not fit the
//! client's size, over TCP only when it does not fit a TCP message. A reply cut for a client
//! keeps its ID, question spelling, flags and OPT record.
//!
//! The fakes compress names as CoreDNS does, and send the whole set over TCP after a TC over
//! UDP (meshdns's legs advertise 1232 bytes).

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::{RData, Record, RecordType};
use support::{
    Answer, Behaviour, FakeDns, FakeDnsBuilder, Meshdns, Reply, Via, query, rr, tcp, udp, with_edns,
};

const NAME: &str = "www.example.com.";
const GATHERED: &str = "_mongodb._tcp.mongo.db.svc.distributed.local.";
const CLUSTER_ROUTE: &str = "_mongodb._tcp.mongo.db.cluster.b.";
const UPSTREAM: &str = "_mongodb._tcp.mongo.db.svc.cluster.local.";

/// The largest UDP reply meshdns sends (one IPv4 datagram).
const MAX_UDP_REPLY: usize = 65_507;

/// How a client asks.
#[derive(Debug, Clone, Copy)]
enum Ask {
    /// Over UDP with this EDNS buffer; `None`: without EDNS (512 bytes).
    Udp(Option<u16>),
    Tcp,
}

const EVERY_WAY: [Ask; 5] = [
    Ask::Udp(None),
    Ask::Udp(Some(1232)),
    Ask::Udp(Some(4096)),
    Ask::Udp(Some(65_535)),
    Ask::Tcp,
];

impl Ask {
    /// The size the reply must keep to.
    fn limit(self) -> usize {
        match self {
            Ask::Udp(None) => 512,
            Ask::Udp(Some(size)) => usize::from(size).min(MAX_UDP_REPLY),
            Ask::Tcp => 65_535,
        }
    }

    async fn send(self, meshdns: &Meshdns, name: &str) -> Reply {
        let asked = query(name, RecordType::SRV);
        match self {
            Ask::Udp(None) => udp_reply(meshdns, &asked).await,
            Ask::Udp(Some(size)) => udp_reply(meshdns, &with_edns(asked, size)).await,
            Ask::Tcp => tcp(meshdns.addr, &asked).await,
        }
    }
}

/// Asks over UDP; a test failure, named so, when no reply comes.
async fn udp_reply(meshdns: &Meshdns, asked: &Message) -> Reply {
    let bytes = support::udp_raw(meshdns.addr, &asked.to_vec().unwrap())
        .await
        .unwrap_or_else(|| panic!("no reply over UDP to {asked}"));
    let msg = Message::from_vec(&bytes).expect("a DNS message");
    assert_eq!(msg.id, asked.id);
    Reply { bytes, msg }
}

/// Cluster `n`'s DNS: `hosts` SRV records for [`UPSTREAM`], each target with its address in the
/// additional section (host names `label(i)` under `mongo.db.svc.cluster.local`); TC over UDP,
/// the whole set over TCP.
fn srv_dns(n: u8, hosts: usize, label: impl Fn(usize) -> String) -> FakeDnsBuilder {
    let target = |i: usize| format!("{}.mongo.db.svc.cluster.local.", label(i));
    let mut answer = Answer::records((0..hosts).map(|i| rr::srv(UPSTREAM, 27017, &target(i))));
    for i in 0..hosts {
        let [_, _, high, low] = u32::try_from(i).unwrap().to_be_bytes();
        answer = answer.additional(rr::a(&target(i), [10, n, high, low]));
    }
    FakeDns::builder()
        .compressing()
        .on(UPSTREAM, RecordType::SRV, Behaviour::TruncateUdp(answer))
}

fn mongo(i: usize) -> String {
    format!("mongo-{i}")
}

/// meshdns over clusters a (local), b and c, each with `hosts` hosts named by `label`.
async fn gathered(hosts: usize, label: fn(usize) -> String) -> (Vec<FakeDns>, Meshdns) {
    gathered_with(hosts, label, &[]).await
}

/// [`gathered`] with `vars` over the test defaults.
async fn gathered_with(
    hosts: usize,
    label: fn(usize) -> String,
    vars: &[(&str, &str)],
) -> (Vec<FakeDns>, Meshdns) {
    let mut fakes = Vec::new();
    for n in 1..=3 {
        fakes.push(srv_dns(n, hosts, label).start().await);
    }
    let clusters = format!("a=; b={}; c={}", fakes[1].addr, fakes[2].addr);
    let mut all = vec![
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
    ];
    all.extend_from_slice(vars);
    let meshdns = Meshdns::before(&fakes[0], &all).await;
    (fakes, meshdns)
}

/// meshdns with cluster b, whose DNS answers `hosts` targets.
async fn cluster_route(hosts: usize) -> (FakeDns, FakeDns, Meshdns) {
    let (local, peer) = (
        FakeDns::builder().start().await,
        srv_dns(2, hosts, mongo).start().await,
    );
    let clusters = format!("a=; b={}", peer.addr);
    let vars = [
        ("MESHDNS_LOCAL_CLUSTER", "a"),
        ("MESHDNS_CLUSTERS", clusters.as_str()),
    ];
    let meshdns = Meshdns::before(&local, &vars).await;
    (local, peer, meshdns)
}

/// What a reply holds, checked against the rules every big answer keeps.
#[derive(Debug)]
struct Shape {
    srv: usize,
    glue: usize,
    truncated: bool,
}

/// Checks `reply` (asked `how`, of a set of `hosts` SRV records) against the rules: within the
/// client's size; the SRV set whole or absent; TC exactly when it is absent; glue only beside a
/// whole answer, each record the address of a target of the set, once.
fn shape(reply: &Reply, how: Ask, hosts: usize) -> Shape {
    let context = format!("{how:?}, {hosts} hosts, {} bytes", reply.bytes.len());
    assert!(reply.bytes.len() <= how.limit(), "{context}: too large");
    let targets: Vec<String> = (reply.msg.answers.iter())
        .filter_map(|r| match &r.data {
            RData::SRV(srv) => Some(srv.target.to_ascii()),
            _ => None,
        })
        .collect();
    assert_eq!(
        targets.len(),
        reply.msg.answers.len(),
        "{context}: SRV only"
    );
    let (srv, glue, truncated) = (
        targets.len(),
        reply.msg.additionals.len(),
        reply.msg.truncation,
    );
    assert!(
        srv == 0 || srv == hosts,
        "{context}: {srv} of {hosts} SRV records"
    );
    assert_eq!(
        truncated,
        srv == 0,
        "{context}: TC exactly when the set is left out"
    );
    if truncated {
        assert_eq!(glue, 0, "{context}: glue goes before any TC");
    }
    let mut owners: HashSet<String> = targets.into_iter().collect();
    for glue in &reply.msg.additionals {
        let owner = glue.name.to_ascii();
        assert!(
            owners.remove(&owner),
            "{context}: {owner} is no target, or twice"
        );
    }
    Shape {
        srv,
        glue,
        truncated,
    }
}

#[tokio::test]
async fn gathered_sets_of_300_600_and_750_hosts_are_whole_or_absent_on_every_transport() {
    for per_cluster in [100, 200, 250] {
        let (_fakes, meshdns) = gathered(per_cluster, mongo).await;
        let hosts = 3 * per_cluster;
        for how in EVERY_WAY {
            let reply = how.send(&meshdns, GATHERED).await;
            let got = shape(&reply, how, hosts);
            // The answer section alone is 61 bytes a host: over 18 KB even for 300 hosts.
            let fits = matches!(how, Ask::Udp(Some(65_535)) | Ask::Tcp);
            assert_eq!(got.truncated, !fits, "{how:?}, {hosts} hosts: {got:?}");
            if fits {
                assert_eq!(got.glue, hosts, "{how:?}, {hosts} hosts: all the glue fits");
            }
        }
    }
}

#[tokio::test]
async fn a_cluster_route_of_600_targets_is_whole_or_absent_on_every_transport() {
    let (_local, _peer, meshdns) = cluster_route(600).await;
    for how in EVERY_WAY {
        let reply = how.send(&meshdns, CLUSTER_ROUTE).await;
        let got = shape(&reply, how, 600);
        let fits = matches!(how, Ask::Udp(Some(65_535)) | Ask::Tcp);
        assert_eq!(got.truncated, !fits, "{how:?}: {got:?}");
        if fits {
            assert_eq!(got.glue, 600, "{how:?}");
        }
    }
}

// Regression tests, one per failure observed before names were compressed past the first
// 120 (issue 31).

#[tokio::test]
async fn tcp_client_gets_all_600_srv_records_and_all_their_glue_without_tc() {
    // Was: 600 SRV records, TC set, 229 of 600 addresses.
    let (_fakes, meshdns) = gathered(200, mongo).await;
    let reply = Ask::Tcp.send(&meshdns, GATHERED).await;
    let got = shape(&reply, Ask::Tcp, 600);
    assert!(!got.truncated);
    assert_eq!((got.srv, got.glue), (600, 600));
}

#[tokio::test]
async fn tcp_client_gets_all_750_srv_records_never_part_of_the_set() {
    // Was: 705 of 750 SRV records with TC.
    let (_fakes, meshdns) = gathered(250, mongo).await;
    let reply = Ask::Tcp.send(&meshdns, GATHERED).await;
    let got = shape(&reply, Ask::Tcp, 750);
    assert!(!got.truncated);
    assert_eq!(got.srv, 750);
}

#[tokio::test]
async fn cluster_route_passes_on_a_peers_600_targets_whole_over_tcp() {
    // Was: TC, though the peer had answered the whole set over TCP.
    let (_local, _peer, meshdns) = cluster_route(600).await;
    let reply = Ask::Tcp.send(&meshdns, CLUSTER_ROUTE).await;
    let got = shape(&reply, Ask::Tcp, 600);
    assert!(!got.truncated);
    assert_eq!((got.srv, got.glue), (600, 600));
    assert_eq!(
        support::record_line(&reply.msg.additionals[599]),
        "mongo-599.mongo.db.cluster.b. A 10.2.2.87"
    );
}

#[tokio::test]
async fn udp_client_with_a_65535_buffer_gets_a_reply() {
    // Was: no reply at all (a reply sized to the buffer is no datagram), counted as answered.
    let (_fakes, meshdns) = gathered(250, mongo).await;
    let how = Ask::Udp(Some(65_535));
    let reply = how.send(&meshdns, GATHERED).await;
    assert!(reply.bytes.len() <= MAX_UDP_REPLY);
    assert_eq!(shape(&reply, how, 750).srv, 750);
}

#[tokio::test]
async fn an_answer_larger_than_a_tcp_message_is_left_out_whole_with_tc() {
    // Host names of 60 characters: 400 a cluster fit its own reply, 1,200 gathered do not
    // fit 65,535 bytes.
    let long = |i: usize| format!("{i:0>60}");
    let (_fakes, meshdns) = gathered(400, long).await;
    for how in [Ask::Tcp, Ask::Udp(Some(65_535))] {
        let reply = how.send(&meshdns, GATHERED).await;
        let got = shape(&reply, how, 1200);
        assert!(got.truncated, "{how:?}: {got:?}");
    }
}

#[tokio::test]
async fn a_cached_big_answer_is_cut_for_each_client_anew() {
    let (fakes, meshdns) = gathered_with(250, mongo, &[("MESHDNS_CACHE_SIZE", "1000")]).await;
    // The first client's reply is cut; the whole answer is what the cache keeps. (All ask
    // with EDNS: its presence is part of the cache key.)
    for (how, size) in [
        (Ask::Udp(Some(1232)), 1232),
        (Ask::Tcp, 1232),
        (Ask::Udp(Some(512)), 512),
        (Ask::Udp(Some(65_535)), 65_535),
    ] {
        let asked = with_edns(query(GATHERED, RecordType::SRV), size);
        let reply = match how {
            Ask::Tcp => tcp(meshdns.addr, &asked).await,
            Ask::Udp(_) => udp_reply(&meshdns, &asked).await,
        };
        let got = shape(&reply, how, 750);
        let fits = matches!(how, Ask::Udp(Some(65_535)) | Ask::Tcp);
        assert_eq!(got.srv == 750, fits, "{how:?}: {got:?}");
    }
    let asked: usize = fakes.iter().map(|f| f.exchanges().len()).sum();
    assert_eq!(
        asked, 6,
        "each cluster asked once (UDP, then TCP); then the cache answered"
    );
}

/// How many queries `fake` received over UDP and over TCP.
fn transports(fake: &FakeDns) -> (usize, usize) {
    (fake.count(Via::Udp), fake.count(Via::Tcp))
}

#[tokio::test]
async fn a_leg_truncated_last_time_is_asked_over_tcp_at_once_after_its_entry_expired() {
    let vars = [
        ("MESHDNS_CACHE_SIZE", "1000"),
        ("MESHDNS_CACHE_MAX_TTL", "1s"),
    ];
    let (fakes, meshdns) = gathered_with(60, mongo, &vars).await;
    let whole = shape(&Ask::Tcp.send(&meshdns, GATHERED).await, Ask::Tcp, 180);
    assert_eq!(whole.srv, 180, "{whole:?}");
    for fake in &fakes {
        assert_eq!(transports(fake), (1, 1), "first ask: UDP, TC, then TCP");
    }
    // Past the entry's expiry (and the leg entries'): every leg is asked again.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let again = Ask::Tcp.send(&meshdns, GATHERED).await;
    assert_eq!(shape(&again, Ask::Tcp, 180).srv, 180);
    for fake in &fakes {
        assert_eq!(transports(fake), (1, 2), "second ask: straight to TCP");
    }
    // A client with too small a buffer still gets TC, never part of the set.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let cut = Ask::Udp(Some(1232)).send(&meshdns, GATHERED).await;
    let cut = shape(&cut, Ask::Udp(Some(1232)), 180);
    assert!(cut.truncated && cut.srv == 0, "{cut:?}");
    for fake in &fakes {
        assert_eq!(transports(fake), (1, 3));
    }
}

#[tokio::test]
async fn a_cluster_route_truncated_last_time_is_asked_over_tcp_at_once() {
    let (_local, peer, meshdns) = cluster_route(60).await;
    for asked in 1..=3 {
        let reply = Ask::Tcp.send(&meshdns, CLUSTER_ROUTE).await;
        assert_eq!(shape(&reply, Ask::Tcp, 60).srv, 60);
        assert_eq!(transports(&peer), (1, asked), "UDP only the first time");
    }
}

#[tokio::test]
async fn an_answer_that_shrank_to_fit_goes_back_to_udp() {
    let local = FakeDns::builder().start().await;
    let target = "mongo-0.mongo.db.svc.cluster.local.";
    let big = Answer::records((0..60).map(|i| rr::srv(UPSTREAM, 27_017 + i, target)));
    let small = Answer::records([rr::srv(UPSTREAM, 27_017, target)]);
    // The big set on both transports (over UDP larger than the query allows: taken as
    // truncated), then one target.
    let answers = Behaviour::Sequence(vec![big.clone(), big, small]);
    let peer = (FakeDns::builder().compressing())
        .on(UPSTREAM, RecordType::SRV, answers)
        .start()
        .await;
    let meshdns = Meshdns::in_cluster_a(&local, &format!("b={}", peer.addr)).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        Ask::Tcp.send(&meshdns, CLUSTER_ROUTE).await;
        seen.push(transports(&peer));
    }
    assert_eq!(
        seen,
        [(1, 1), (1, 2), (2, 2)],
        "UDP then TCP; TCP at once, where the set fits; so UDP again"
    );
}

#[tokio::test]
async fn a_peer_without_tcp_keeps_being_asked_over_udp() {
    let local = FakeDns::builder().start().await;
    let peer = srv_dns(2, 60, mongo).udp_only().start().await;
    let meshdns = Meshdns::in_cluster_a(&local, &format!("b={}", peer.addr)).await;
    for asked in 1..=3 {
        let reply = Ask::Udp(Some(1232)).send(&meshdns, CLUSTER_ROUTE).await;
        let got = shape(&reply, Ask::Udp(Some(1232)), 60);
        assert!(got.truncated && got.srv == 0, "its TC, every time: {got:?}");
        assert_eq!(
            peer.count(Via::Udp),
            asked,
            "never TCP at once: it has none"
        );
    }
}

/// A kube-dns stand-in on UDP that answers every query with `records` A records of the
/// question's name, one record hickory cannot parse (a CAA with an empty tag, RFC 8659 §4.1;
/// meshdns's own walk takes it) and an OPT record: what meshdns must fit without hickory.
async fn raw_udp_upstream(records: u8) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65_535];
        loop {
            let Ok((len, peer)) = socket.recv_from(&mut buf).await else {
                continue;
            };
            let query = &buf[..len];
            let Some(question) = support::raw::question(query) else {
                continue;
            };
            let mut reply = query[..12].to_vec();
            reply[2] |= 0x80;
            reply[3] = 0x80;
            reply[4..12].copy_from_slice(&[0, 1, 0, records + 1, 0, 0, 0, 1]);
            reply.extend_from_slice(question);
            for i in 0..records {
                reply.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 192, 0, 2, i]);
            }
            reply.extend_from_slice(&[0xc0, 12, 1, 1, 0, 1, 0, 0, 0, 30, 0, 2, 0, 0]);
            reply.extend_from_slice(&[0, 0, 41, 4, 208, 0, 0, 0, 0, 0, 0]);
            let _ = socket.send_to(&reply, peer).await;
        }
    });
    (addr, task)
}

/// A cached answer too big for a client's UDP size is cut for it; when the cut cannot re-encode
/// the answer (a record hickory rejects), the reply still carries an OPT record, because the
/// client sent one (RFC 6891 §7: a responder "MUST include an OPT record" in its response to
/// a query with one). A stub that gets
/// none concludes the server lacks EDNS (systemd-resolved then downgrades the server's feature
/// level, and DO with it).
#[tokio::test]
async fn a_cut_that_cannot_reencode_keeps_the_clients_opt_record() {
    let (upstream, task) = raw_udp_upstream(90).await;
    let upstreams = upstream.to_string();
    let meshdns = Meshdns::start(&[
        ("MESHDNS_UPSTREAMS", upstreams.as_str()),
        ("MESHDNS_CACHE_SIZE", "10000"),
    ])
    .await;
    let first = with_edns(query(NAME, RecordType::A), 4096)
        .to_vec()
        .unwrap();
    let whole = support::udp_raw(meshdns.addr, &first)
        .await
        .expect("a reply");
    assert!(whole.len() > 1232 && !support::raw::header(&whole).truncation);
    let asked = with_edns(query(NAME, RecordType::A), 1232);
    let bytes = support::udp_raw(meshdns.addr, &asked.to_vec().unwrap())
        .await
        .expect("a reply");
    assert!(bytes.len() <= 1232);
    let cut = support::raw::header(&bytes);
    assert!(cut.truncation, "TC: the answer does not fit");
    assert_eq!(cut.id, asked.id);
    assert!(
        Message::from_vec(&bytes)
            .expect("a DNS message")
            .edns
            .is_some(),
        "the client sent EDNS and got no OPT record back"
    );
    task.abort();
}

/// A reply cut for a small UDP size (re-encoded record by record) still matches the client's
/// query: its ID, its question as spelled (letter case included), RD and CD as sent, and the
/// AA bit as the upstream gave it; whole RRsets with TC — on a miss and on a hit.
#[tokio::test]
async fn a_cut_reply_keeps_the_clients_id_question_spelling_and_flags() {
    let records: Vec<Record> = (0..60u8).map(|i| rr::a(NAME, [192, 0, 2, i])).collect();
    let answer = Answer {
        authoritative: true,
        ..Answer::records(records)
    };
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[]).await;
    for round in ["miss", "hit"] {
        let mut asked = query("WWW.Example.COM.", RecordType::A);
        asked.metadata.recursion_desired = false;
        asked.metadata.checking_disabled = true;
        let reply = udp(meshdns.addr, &asked).await;
        assert!(reply.bytes.len() <= 512, "{round}");
        assert!(reply.msg.truncation, "{round}: TC");
        assert!(
            reply.msg.answers.is_empty(),
            "{round}: all of the set or none"
        );
        assert_eq!(reply.msg.queries, asked.queries, "{round}");
        assert_eq!(
            reply.msg.queries[0].name().to_ascii(),
            "WWW.Example.COM.",
            "{round}"
        );
        assert!(!reply.msg.recursion_desired, "{round}: RD");
        assert!(reply.msg.checking_disabled, "{round}: CD");
        assert!(reply.msg.authoritative, "{round}: AA");
        assert!(
            reply.msg.edns.is_none(),
            "{round}: no OPT for a client without"
        );
    }
}

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
