//! Failure and overload (docs/design.md, "Behaviour under failure", and the rules behind it in
//! "Pass-through", "Cache", "Memory and overload", "Limits and bad input"): what a pod sees when kube-dns or a peer answers errors, goes
//! silent or comes back, when a client stops reading, when meshdns itself runs out of
//! descriptors, and at shutdown. One test per behaviour, each named after it.
//!
//! Most run on tokio's paused clock: the fakes and meshdns share the test's runtime on
//! loopback, and the clock jumps only when every task waits on a timer, so a reply that comes
//! "at once" takes no time at all and one that waited for a timeout took exactly that long.
//! Counts are exact: each meshdns has its own registry, each fake notes what it was asked.

use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType;
use meshdns::testing::server::{MAX_QUERY_FRAME, TCP_WRITE_TIMEOUT};
use support::configmap::ConfigMapDir;
use support::{
    Answer, Behaviour, FakeDns, Meshdns, Reply, Via, ask_timed, frame_of, query, read_frame, rr,
    tcp, tcp_client_that_never_reads, udp,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};
use tokio::time::Instant;

/// `MESHDNS_ATTEMPT_TIMEOUT`'s default: the client timer when a stale answer is at hand.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);

/// `MESHDNS_TIMEOUT`'s default: a query's whole deadline.
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// What "at once" allows on the paused clock: no timer was waited for.
const AT_ONCE: Duration = Duration::from_millis(1);

/// The address as the `endpoint` label shows it.
fn endpoint(fake: &FakeDns) -> String {
    fake.addr.to_string()
}

/// The answer section of `name`'s A records as meshdns gives them now, as lines.
async fn answer_lines(meshdns: &Meshdns, name: &str) -> Vec<String> {
    udp(meshdns.addr, &query(name, RecordType::A))
        .await
        .answer_lines()
}

/// How many queries for `name` (any case) the fake received.
/// The exchanges `fake` saw for `name` (a retransmission on the same socket is the same one).
fn asked(fake: &FakeDns, name: &str) -> usize {
    fake.exchanges()
        .iter()
        .filter(|seen| seen.name.eq_ignore_ascii_case(name))
        .count()
}

// An upstream error reply without a question (NSD, CoreDNS when they cannot parse a query).

const CANNOT_PARSE: &str = "cannot-parse.example.com.";
const MALFORMED: &str = "malformed.example.com.";

/// kube-dns answering REFUSED to [`CANNOT_PARSE`] and FORMERR to [`MALFORMED`], both without
/// the question, and NOERROR to `www`.
async fn questionless_kube_dns() -> FakeDns {
    FakeDns::builder()
        .on(
            CANNOT_PARSE,
            RecordType::A,
            Behaviour::ErrorWithoutQuestion(ResponseCode::Refused),
        )
        .on(
            MALFORMED,
            RecordType::A,
            Behaviour::ErrorWithoutQuestion(ResponseCode::FormErr),
        )
        .answer(
            "www.example.com.",
            RecordType::A,
            Answer::records([rr::a("www.example.com.", [192, 0, 2, 80])]),
        )
        .start()
        .await
}

#[tokio::test(start_paused = true)]
async fn an_error_reply_without_a_question_is_relayed_at_once_with_the_question_restored() {
    let upstream = questionless_kube_dns().await;
    // With the cache on: an error that describes meshdns's query is no answer to keep.
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let cases = [
        ("Cannot-Parse.Example.COM.", ResponseCode::Refused),
        ("MALFORMED.example.com.", ResponseCode::FormErr),
    ];
    for (name, rcode) in cases {
        for over_tcp in [false, true] {
            let asked = query(name, RecordType::A);
            let started = Instant::now();
            let reply = if over_tcp {
                tcp(meshdns.addr, &asked).await
            } else {
                udp(meshdns.addr, &asked).await
            };
            let took = started.elapsed();
            assert_eq!(reply.msg.response_code, rcode, "{name}");
            assert_eq!(
                reply.msg.queries, asked.queries,
                "the client's question, as spelled, is put back"
            );
            assert!(took < AT_ONCE, "{name} relayed at once, not after {took:?}");
        }
        assert_eq!(
            asked(&upstream, name),
            2,
            "{name}: one attempt per client query, nothing retried, nothing cached"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_reply_without_a_question_never_marks_kube_dns_down() {
    let upstream = questionless_kube_dns().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    for _ in 0..10 {
        let (reply, took) = ask_timed(&meshdns, CANNOT_PARSE).await;
        assert_eq!(reply.msg.response_code, ResponseCode::Refused);
        assert!(took < AT_ONCE, "REFUSED at once, not after {took:?}");
    }
    assert_eq!(meshdns.upstream_healthy("local", &upstream).await, 1.0);
    assert_eq!(meshdns.upstream_requests("local", "refused").await, 10.0);
    assert_eq!(meshdns.upstream_requests("local", "timeout").await, 0.0);
    // kube-dns is still asked first, and answers.
    let (reply, took) = ask_timed(&meshdns, "www.example.com.").await;
    assert_eq!(reply.answer_lines(), ["www.example.com. A 192.0.2.80"]);
    assert!(took < AT_ONCE);
}

#[tokio::test(start_paused = true)]
async fn a_peers_error_reply_without_a_question_fails_its_query_at_once_over_tcp() {
    let kube_dns = FakeDns::builder().start().await;
    let peer = FakeDns::builder()
        .otherwise(Behaviour::ErrorWithoutQuestion(ResponseCode::FormErr))
        .tcp_only()
        .start()
        .await;
    let peers = format!("b={} transport=tcp", peer.addr);
    let meshdns = Meshdns::in_cluster_a(&kube_dns, &peers).await;
    for _ in 0..5 {
        let (reply, took) = ask_timed(&meshdns, "mongo-0.mongo.db.cluster.b.").await;
        // A FORMERR describes meshdns's query to the peer, not the client's question.
        assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
        assert!(took < AT_ONCE, "SERVFAIL at once, not after {took:?}");
    }
    assert_eq!(peer.count(Via::Tcp), 5);
    assert_eq!(meshdns.upstream_healthy("b", &peer).await, 1.0);
    assert_eq!(meshdns.upstream_requests("b", "timeout").await, 0.0);
}

// Memory follows the configuration: fewer overlapping attempts.

#[tokio::test(start_paused = true)]
async fn a_silent_upstream_costs_one_attempt_per_endpoint_and_one_retry() {
    let first = FakeDns::silent().await;
    let second = FakeDns::silent().await;
    // A long deadline: the attempts are bounded by the endpoints, not by the time left.
    let meshdns = Meshdns::before_all(&[&first, &second], &[("MESHDNS_TIMEOUT", "4s")]).await;
    let (reply, took) = ask_timed(&meshdns, "www.example.com.").await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert!(took <= Duration::from_secs(4) + AT_ONCE, "{took:?}");
    assert_eq!(
        (first.exchanges().len(), second.exchanges().len()),
        (2, 1),
        "the first endpoint, the second, then one retry"
    );
    let sent = first.seen().len() + second.seen().len();
    assert!(
        sent > 3 && sent <= 3 + meshdns::testing::upstream::MAX_RETRANSMITS as usize,
        "and at most the bounded retransmissions: {sent} datagrams"
    );
}

// A TCP client that stops reading.

const BIG: &str = "big.example.com.";

/// A TXT answer of about 53 KB: a few dozen fill the kernel's buffers of a connection.
fn big_answer() -> Answer {
    let filler = "x".repeat(250);
    Answer::records((0..200).map(|i| rr::txt(BIG, &format!("{i:03}{filler}"))))
}

/// kube-dns with [`BIG`] (over TCP; TC over UDP) and a quick NODATA to anything else; meshdns before
/// it with the cache on, [`BIG`] already cached, and an in-flight cap of `cap`.
async fn serving_big_answers(cap: usize) -> (FakeDns, Meshdns) {
    let upstream = FakeDns::builder()
        .on(BIG, RecordType::TXT, Behaviour::TruncateUdp(big_answer()))
        .otherwise(Behaviour::Answer(Answer::nodata("example.com.")))
        .start()
        .await;
    let cap = cap.to_string();
    let meshdns = Meshdns::before(
        &upstream,
        &[
            ("MESHDNS_CACHE_SIZE", "100"),
            ("MESHDNS_MAX_INFLIGHT", &cap),
        ],
    )
    .await;
    let primed = tcp(meshdns.addr, &query(BIG, RecordType::TXT)).await;
    assert_eq!(primed.msg.answers.len(), 200);
    (upstream, meshdns)
}

/// Far more replies than the kernel's buffers and meshdns's queue of one connection hold.
const UNREAD: usize = 200;

/// A connection that asks [`UNREAD`] times for [`BIG`] and never reads.
async fn stalled_client(server: SocketAddr) -> TcpStream {
    let mut stream = tcp_client_that_never_reads(server).await;
    let frames: Vec<u8> = (0..UNREAD)
        .flat_map(|_| frame_of(&query(BIG, RecordType::TXT).to_vec().unwrap()))
        .collect();
    stream.write_all(&frames).await.unwrap();
    stream
}

/// Reads `stream` to its end; the whole replies read. No timeout: on the paused clock one
/// would fire whenever the kernel is a moment behind; meshdns's own idle timeout ends a
/// connection that is not closed otherwise.
async fn frames_until_closed(stream: &mut TcpStream) -> usize {
    let mut frames = 0;
    while read_frame(stream).await.is_some() {
        frames += 1;
    }
    frames
}

#[tokio::test(start_paused = true)]
async fn a_tcp_client_that_stops_reading_loses_its_connection_and_holds_no_inflight_slot() {
    let (_upstream, meshdns) = serving_big_answers(8).await;
    let mut stalled = stalled_client(meshdns.addr).await;
    // Everything that can be answered has been; the writer waits for the client.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(meshdns.metric("meshdns_inflight", &[]).await, 0.0);
    assert_eq!(meshdns.dropped("tcp_stalled").await, 0.0, "not yet");
    // A write that makes no progress for the write timeout closes the connection.
    tokio::time::sleep(TCP_WRITE_TIMEOUT).await;
    assert_eq!(meshdns.dropped("tcp_stalled").await, 1.0);
    let read = frames_until_closed(&mut stalled).await;
    assert!(read < UNREAD, "closed, not served: {read} replies");
    assert_eq!(meshdns.metric("meshdns_inflight", &[]).await, 0.0);
}

#[tokio::test(start_paused = true)]
async fn udp_misses_are_not_shed_while_stalled_tcp_clients_wait() {
    const CAP: usize = 8;
    let (_upstream, meshdns) = serving_big_answers(CAP).await;
    // Two connections whose answered queries wait to be written: far more than the cap.
    let _stalled = [
        stalled_client(meshdns.addr).await,
        stalled_client(meshdns.addr).await,
    ];
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answered_over_tcp = meshdns
        .metric(
            "meshdns_requests_total",
            &[
                ("proto", "tcp"),
                ("route", "passthrough"),
                ("rcode", "NOERROR"),
            ],
        )
        .await;
    assert!(
        answered_over_tcp > CAP as f64,
        "more replies wait on the stalled connections than the cap ({answered_over_tcp} answered)"
    );
    assert_eq!(meshdns.metric("meshdns_inflight", &[]).await, 0.0);
    for i in 0..2 * CAP {
        let (reply, took) = ask_timed(&meshdns, &format!("fast-{i}.example.com.")).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError);
        assert!(took < AT_ONCE);
    }
    assert_eq!(meshdns.dropped("inflight_limit").await, 0.0);
    assert_eq!(meshdns.dropped("tcp_stalled").await, 0.0, "still waiting");
    tokio::time::sleep(TCP_WRITE_TIMEOUT).await;
    assert_eq!(meshdns.dropped("tcp_stalled").await, 2.0);
}

#[tokio::test(start_paused = true)]
async fn tcp_clients_pipelining_slow_queries_leave_udp_half_the_inflight_slots() {
    const CAP: usize = 8;
    let mut upstream = FakeDns::builder().otherwise(Behaviour::Delay(
        Duration::from_secs(1),
        Answer::nxdomain("example.com."),
    ));
    for i in 0..CAP {
        let name = format!("fast-{i}.example.com.");
        upstream = upstream.answer(
            &name,
            RecordType::A,
            Answer::records([rr::a(&name, [192, 0, 2, 1])]),
        );
    }
    let upstream = upstream.start().await;
    let cap = CAP.to_string();
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_MAX_INFLIGHT", &cap)]).await;
    // Two connections pipelining more slow queries than there are slots: TCP waits for a
    // slot where UDP would be dropped, so it must not be able to take them all.
    let slow: Vec<u8> = (0..2 * CAP)
        .flat_map(|i| {
            let name = format!("slow-{i}.example.com.");
            frame_of(&query(&name, RecordType::A).to_vec().unwrap())
        })
        .collect();
    let mut connections = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();
        stream.write_all(&slow).await.unwrap();
        connections.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        meshdns.metric("meshdns_inflight", &[]).await,
        (CAP / 2) as f64,
        "TCP holds its half"
    );
    for i in 0..CAP {
        let (reply, took) = ask_timed(&meshdns, &format!("fast-{i}.example.com.")).await;
        assert_eq!(reply.msg.response_code, ResponseCode::NoError);
        assert!(took < AT_ONCE, "fast-{i} at once, not after {took:?}");
    }
    assert_eq!(meshdns.dropped("inflight_limit").await, 0.0);
}

#[tokio::test(start_paused = true)]
async fn a_query_frame_over_the_cap_closes_the_connection_without_a_reply() {
    let upstream = FakeDns::builder().start().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();
    let len = u16::try_from(MAX_QUERY_FRAME + 1).unwrap();
    let mut frame = len.to_be_bytes().to_vec();
    frame.resize(2 + MAX_QUERY_FRAME + 1, 0);
    // The write may already meet the closed connection.
    let _ = stream.write_all(&frame).await;
    assert_eq!(frames_until_closed(&mut stream).await, 0);
    // The next connection is served.
    let reply = tcp(meshdns.addr, &query("www.example.com.", RecordType::A)).await;
    assert_eq!(
        reply.msg.response_code,
        ResponseCode::Refused,
        "the fake's default"
    );
}

// An outage: stale answers at once, one refresh per entry per recheck period, failures
// remembered.

/// kube-dns that answers each of `names` once (TTL 30) and then never again.
async fn answers_once_then_goes_down(names: &[&str]) -> FakeDns {
    let mut builder = FakeDns::builder();
    for (i, name) in names.iter().enumerate() {
        let [hi, lo] = u16::try_from(i).unwrap().to_be_bytes();
        builder = builder.on(
            name,
            RecordType::A,
            Behaviour::AnswerThenDrop(1, Answer::records([rr::a(name, [10, 0, hi, lo])])),
        );
    }
    builder.otherwise(Behaviour::Drop).start().await
}

/// The record's TTL (the answer's first).
fn ttl(reply: &Reply) -> u32 {
    reply
        .msg
        .answers
        .first()
        .map(|record| record.ttl)
        .expect("an answer record")
}

/// Past the answers' TTL of 30 s, well within `MESHDNS_SERVE_STALE` (300 s).
const EXPIRED: Duration = Duration::from_secs(31);

#[tokio::test(start_paused = true)]
async fn stale_answers_are_served_at_once_during_an_outage() {
    const ONE: &str = "one.example.com.";
    const TWO: &str = "two.example.com.";
    let upstream = answers_once_then_goes_down(&[ONE, TWO]).await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let one = answer_lines(&meshdns, ONE).await;
    let two = answer_lines(&meshdns, TWO).await;
    tokio::time::sleep(EXPIRED).await;

    // The first client to meet the outage waits the client timer (RFC 8767 §5), no longer.
    let (reply, took) = ask_timed(&meshdns, ONE).await;
    assert_eq!(reply.answer_lines(), one);
    assert!(
        took >= ATTEMPT_TIMEOUT && took < ATTEMPT_TIMEOUT + AT_ONCE,
        "{took:?}"
    );
    // Its exchange goes on in the background until the query's deadline, and fails.
    tokio::time::sleep(QUERY_TIMEOUT).await;

    // From then on every stale answer of that upstream is served at once: the one that
    // failed, and one nobody has asked for since the outage began.
    for (name, lines) in [(ONE, &one), (TWO, &two), (ONE, &one), (TWO, &two)] {
        let (reply, took) = ask_timed(&meshdns, name).await;
        assert_eq!(&reply.answer_lines(), lines);
        assert!(
            ttl(&reply) <= meshdns::testing::cache::STALE_TTL,
            "a stale TTL"
        );
        assert!(took < AT_ONCE, "{name} stale at once, not after {took:?}");
    }
    assert!(
        meshdns
            .metric("meshdns_cache_stale_served_total", &[])
            .await
            >= 5.0
    );
}

#[tokio::test(start_paused = true)]
async fn an_outage_is_seen_at_the_first_attempt_that_times_out() {
    const ONE: &str = "one.example.com.";
    const TWO: &str = "two.example.com.";
    let upstream = answers_once_then_goes_down(&[ONE, TWO]).await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    answer_lines(&meshdns, ONE).await;
    let two = answer_lines(&meshdns, TWO).await;
    tokio::time::sleep(EXPIRED).await;

    let (_, took) = ask_timed(&meshdns, ONE).await;
    assert!(
        took >= ATTEMPT_TIMEOUT,
        "the first client waits the client timer"
    );
    // The first exchange is still trying (it gives up only at its deadline), but its first
    // attempt timed out: the next client with a stale answer at hand does not wait again.
    let (reply, took) = ask_timed(&meshdns, TWO).await;
    assert_eq!(reply.answer_lines(), two);
    assert!(took < AT_ONCE, "stale at once, not after {took:?}");
}

#[tokio::test(start_paused = true)]
async fn clients_that_meet_an_outage_together_each_wait_at_most_the_client_timer() {
    const ONE: &str = "one.example.com.";
    let upstream = answers_once_then_goes_down(&[ONE]).await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let one = answer_lines(&meshdns, ONE).await;
    tokio::time::sleep(EXPIRED).await;
    // Five clients a tenth of a second apart, before the first one's client timer runs out:
    // the later ones share its exchange, and get the stale answer no later than it.
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..5u32 {
        let addr = meshdns.addr;
        clients.spawn(async move {
            tokio::time::sleep(Duration::from_millis(100) * i).await;
            let started = Instant::now();
            let reply = udp(addr, &query(ONE, RecordType::A)).await;
            (i, reply.answer_lines(), started.elapsed())
        });
    }
    for (i, lines, took) in clients.join_all().await {
        assert_eq!(lines, one, "client {i} gets the stale answer");
        assert!(
            took < ATTEMPT_TIMEOUT + AT_ONCE,
            "client {i} waited {took:?}"
        );
    }
    assert_eq!(asked(&upstream, ONE), 1 + 2, "one exchange for all of them");
}

#[tokio::test(start_paused = true)]
async fn an_outage_costs_each_name_at_most_two_upstream_queries_per_recheck_period() {
    const NAMES: [&str; 3] = ["a.example.com.", "b.example.com.", "c.example.com."];
    const ROUND: Duration = Duration::from_millis(250);
    let recheck = meshdns::testing::cache::RECHECK_PERIOD;
    let upstream = answers_once_then_goes_down(&NAMES).await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    for name in NAMES {
        answer_lines(&meshdns, name).await;
    }
    tokio::time::sleep(EXPIRED).await;

    // Every name asked four times a second for two recheck periods and then some; when
    // each upstream query went out, to a round's precision.
    let outage = Instant::now();
    let mut sent: HashMap<&str, Vec<Duration>> = HashMap::new();
    while outage.elapsed() < 2 * recheck + Duration::from_secs(5) {
        for name in NAMES {
            assert_eq!(
                answer_lines(&meshdns, name).await.len(),
                1,
                "{name} served stale"
            );
        }
        tokio::time::sleep(ROUND).await;
        for name in NAMES {
            let times = sent.entry(name).or_default();
            let now = outage.elapsed();
            let total = asked(&upstream, name) - 1;
            times.resize(total, now);
        }
    }
    for name in NAMES {
        let times = &sent[name];
        for (i, start) in times.iter().enumerate() {
            let within = times[i..]
                .iter()
                .take_while(|t| **t < *start + recheck)
                .count();
            assert!(
                within <= 2,
                "{name}: {within} upstream queries within {recheck:?} of {start:?} ({times:?})"
            );
        }
        assert!(
            times.iter().any(|t| *t >= recheck),
            "{name} is still rechecked after a recheck period ({times:?})"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn background_refreshes_in_an_outage_stay_within_the_background_bound() {
    const NAMES: usize = 300;
    let names: Vec<String> = (0..NAMES).map(|i| format!("n{i}.example.com.")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let upstream = answers_once_then_goes_down(&refs).await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "1000")]).await;
    for name in &refs {
        answer_lines(&meshdns, name).await;
    }
    tokio::time::sleep(EXPIRED).await;
    // The outage is seen once, then every name is asked at once: each is served stale and
    // wants a refresh, but background work is one bounded set.
    answer_lines(&meshdns, refs[0]).await;
    tokio::time::sleep(QUERY_TIMEOUT).await;
    for name in &refs[1..] {
        let (reply, took) = ask_timed(&meshdns, name).await;
        assert_eq!(reply.answer_lines().len(), 1, "{name} served stale");
        assert!(took < AT_ONCE);
    }
    // Within the first attempt of each refresh.
    tokio::time::sleep(ATTEMPT_TIMEOUT / 5).await;
    let refreshing: usize = refs[1..]
        .iter()
        .map(|name| asked(&upstream, name) - 1)
        .sum();
    assert!(
        refreshing <= meshdns::testing::background::DEFAULT_LIMIT,
        "{refreshing} refreshes at once"
    );
    assert!(
        refreshing > meshdns::testing::background::DEFAULT_LIMIT / 2,
        "{refreshing}"
    );
    // The set is full, and what it turned away is counted.
    let scrape = meshdns.scrape().await;
    assert_eq!(
        scrape.value("meshdns_background_tasks", &[]),
        meshdns::testing::background::DEFAULT_LIMIT as f64
    );
    assert!(
        scrape.value("meshdns_background_refused_total", &[])
            >= (NAMES - 1 - meshdns::testing::background::DEFAULT_LIMIT) as f64
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_name_is_asked_upstream_at_most_once_per_second() {
    const DEAD: &str = "dead.example.com.";
    const ROUND: Duration = Duration::from_millis(100);
    let upstream = FakeDns::builder()
        .on(
            DEAD,
            RecordType::A,
            Behaviour::Answer(Answer::rcode(ResponseCode::ServFail)),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let started = Instant::now();
    let mut sent = Vec::new();
    while started.elapsed() < Duration::from_secs(20) {
        let (reply, took) = ask_timed(&meshdns, DEAD).await;
        assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
        assert!(took < AT_ONCE);
        if asked(&upstream, DEAD) > sent.len() {
            sent.push(started.elapsed());
        }
        tokio::time::sleep(ROUND).await;
    }
    assert!(sent.len() >= 4, "the name is still retried: {sent:?}");
    for pair in sent.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= meshdns::testing::cache::FAILURE_TTL_FIRST,
            "asked again after {gap:?}: {sent:?}"
        );
        assert!(
            gap <= meshdns::testing::cache::FAILURE_TTL_MAX + ROUND + AT_ONCE,
            "remembered too long, {gap:?}: {sent:?}"
        );
    }
}

// Health probes over the cluster's transport.

#[tokio::test(start_paused = true)]
async fn a_tcp_only_endpoint_marked_down_comes_back_through_a_tcp_probe() {
    const DROPPED_PROBES: usize = 2;
    let kube_dns = FakeDns::builder().start().await;
    // Cluster b's DNS, reachable over TCP only, silent for a while: the first probes get no
    // answer, the next one does.
    let peer = FakeDns::builder()
        .on(
            ".",
            RecordType::NS,
            Behaviour::DropFirst(
                DROPPED_PROBES,
                Box::new(Behaviour::Answer(Answer::rcode(ResponseCode::Refused))),
            ),
        )
        .otherwise(Behaviour::Drop)
        .tcp_only()
        .start()
        .await;
    let peers = format!("b={} transport=tcp", peer.addr);
    let meshdns = Meshdns::in_cluster_a(&kube_dns, &peers).await;
    assert_eq!(meshdns.upstream_healthy("b", &peer).await, 1.0);
    for _ in 0..5 {
        let reply = udp(
            meshdns.addr,
            &query("mongo-0.mongo.db.cluster.b.", RecordType::A),
        )
        .await;
        assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
        if meshdns.upstream_healthy("b", &peer).await == 0.0 {
            break;
        }
    }
    assert_eq!(
        meshdns.upstream_healthy("b", &peer).await,
        0.0,
        "marked down"
    );
    let probes = || {
        peer.seen()
            .iter()
            .filter(|s| s.name == "." && s.rtype == RecordType::NS)
            .count()
    };
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if meshdns.upstream_healthy("b", &peer).await == 1.0 {
            break;
        }
    }
    assert_eq!(
        meshdns.upstream_healthy("b", &peer).await,
        1.0,
        "marked up again"
    );
    assert_eq!(probes(), DROPPED_PROBES + 1, "probed until it answered");
    assert!(peer.seen().iter().all(|s| s.via == Via::Tcp));
}

/// Regression: the probe of a down endpoint was spawned into the bounded background set, and
/// when the set was full it was refused and retried only at the endpoint's next failure — which
/// an endpoint tried last might never have: it stayed down for good. Probes run under their
/// endpoint now, and are never refused.
#[tokio::test(start_paused = true)]
async fn a_down_endpoint_is_probed_back_up_while_the_background_set_is_full() {
    const LEGS: usize = meshdns::testing::background::DEFAULT_LIMIT + 44;
    let kube = FakeDns::builder().start().await;
    // b answers the gathered names and its probe, and never `dead-0` or `dead-1`; c answers
    // nothing, so every gathered query leaves c's leg straggling in the background set until
    // its deadline.
    let b = FakeDns::builder()
        .on(
            "dead-0.db.svc.cluster.local.",
            RecordType::A,
            Behaviour::Drop,
        )
        .on(
            "dead-1.db.svc.cluster.local.",
            RecordType::A,
            Behaviour::Drop,
        )
        .on(
            ".",
            RecordType::NS,
            Behaviour::Answer(Answer::rcode(ResponseCode::Refused)),
        )
        .nxdomain_otherwise()
        .start()
        .await;
    let c = FakeDns::silent().await;
    let peers = format!("b={}; c={}", b.addr, c.addr);
    let meshdns = Meshdns::in_cluster_a(&kube, &peers).await;
    let mut clients = tokio::task::JoinSet::new();
    for i in 0..LEGS {
        let addr = meshdns.addr;
        clients.spawn(async move {
            udp(
                addr,
                &query(&format!("x{i}.db.svc.distributed.local."), RecordType::A),
            )
            .await;
        });
    }
    // Two queries whose attempts all fail mark b's endpoint down at 1 s, while c's legs fill
    // the set (until 2 s).
    for dead in ["dead-0.db.cluster.b.", "dead-1.db.cluster.b."] {
        let addr = meshdns.addr;
        clients.spawn(async move {
            udp(addr, &query(dead, RecordType::A)).await;
        });
    }
    tokio::time::sleep(ATTEMPT_TIMEOUT * 2 + Duration::from_millis(10)).await;
    assert_eq!(
        meshdns.upstream_healthy("b", &b).await,
        0.0,
        "b marked down"
    );
    assert!(
        meshdns
            .metric("meshdns_background_refused_total", &[])
            .await
            > 0.0,
        "the set is full"
    );
    clients.join_all().await;
    // Two probe intervals (1 s each).
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        meshdns.upstream_healthy("b", &b).await,
        1.0,
        "probed back up, however full the set was"
    );
}

// Work and series that end with their endpoint (docs/design.md, "Live configuration").

/// A peer cluster's member as its own DNS names it.
const MEMBER: &str = "mongo-0.mongo.db.svc.cluster.local.";

/// A DNS server that answers `name` A with `ip`.
async fn answering(name: &str, ip: [u8; 4]) -> FakeDns {
    FakeDns::builder()
        .answer(name, RecordType::A, Answer::records([rr::a(name, ip)]))
        .start()
        .await
}

/// The `. NS` probes `fake` received.
fn probes(fake: &FakeDns) -> usize {
    fake.seen()
        .iter()
        .filter(|s| s.name == "." && s.rtype == RecordType::NS)
        .count()
}

/// Asks `name` until `endpoint` of `cluster` is marked down.
async fn mark_down(meshdns: &Meshdns, name: &str, cluster: &str, endpoint: &FakeDns) {
    for _ in 0..10 {
        udp(meshdns.addr, &query(name, RecordType::A)).await;
        if meshdns.upstream_healthy(cluster, endpoint).await == 0.0 {
            return;
        }
    }
    panic!("{cluster}'s endpoint {} is not marked down", endpoint.addr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_removed_while_down_is_no_longer_probed_and_its_series_go() {
    const B: &str = "mongo-0.mongo.db.cluster.b.";
    const C: &str = "mongo-0.mongo.db.cluster.c.";
    let kube = FakeDns::builder().start().await;
    let (removed, kept_down) = (FakeDns::silent().await, FakeDns::silent().await);
    let moved_to = answering(MEMBER, [10, 2, 0, 1]).await;
    let clusters = |b: &FakeDns| format!("a=; b={}; c={}", b.addr, kept_down.addr);
    let mut dir = ConfigMapDir::new("removed-down", &[("MESHDNS_CLUSTERS", &clusters(&removed))]);
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_CONFIG_DIR", &path),
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_TIMEOUT", "300ms"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "100ms"),
        ],
    )
    .await;
    mark_down(&meshdns, B, "b", &removed).await;
    mark_down(&meshdns, C, "c", &kept_down).await;
    assert!(
        support::eventually(100, || async {
            probes(&removed) >= 1 && probes(&kept_down) >= 1
        })
        .await,
        "each down endpoint is probed"
    );
    assert_eq!(
        meshdns.metric("meshdns_background_tasks", &[]).await,
        0.0,
        "probes run under their endpoint, not in the bounded set"
    );
    // b moves to a healthy endpoint; c stays as it is, down and probed.
    dir.update(&[("MESHDNS_CLUSTERS", &clusters(&moved_to))]);
    let removed_label = endpoint(&removed);
    assert!(
        support::eventually(100, || async {
            let scrape = meshdns.scrape().await;
            scrape.value("meshdns_config_reloads_total", &[("result", "applied")]) == 1.0
                && !scrape
                    .label_values("meshdns_upstream_healthy", "endpoint")
                    .contains(&removed_label)
        })
        .await,
        "the removed endpoint's probe and series end with it"
    );
    // Probe rounds go on for c (two more of its probes): none reaches the removed endpoint.
    let (after_removal, c_probes) = (probes(&removed), probes(&kept_down));
    assert!(
        support::eventually(100, || async { probes(&kept_down) >= c_probes + 2 }).await,
        "c is still probed"
    );
    assert_eq!(
        probes(&removed),
        after_removal,
        "the removed endpoint is not probed"
    );
    assert_eq!(
        answer_lines(&meshdns, B).await.len(),
        1,
        "b answers from its new endpoint"
    );
    let scrape = meshdns.scrape().await;
    assert_eq!(
        scrape.label_values("meshdns_upstream_healthy", "endpoint"),
        {
            let mut now = vec![endpoint(&kube), endpoint(&kept_down), endpoint(&moved_to)];
            now.sort_unstable();
            now
        },
        "series of the endpoints configured now, and only those"
    );
    assert_eq!(scrape.value("meshdns_background_refused_total", &[]), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_clusters_series_go_and_a_kept_clusters_stay() {
    let kube = FakeDns::builder().start().await;
    let (b, c) = (
        FakeDns::builder().start().await,
        FakeDns::builder().start().await,
    );
    let mut dir = ConfigMapDir::new(
        "removed-cluster",
        &[(
            "MESHDNS_CLUSTERS",
            &format!("a=; b={}; c={}", b.addr, c.addr),
        )],
    );
    let path = dir.path.display().to_string();
    let meshdns = Meshdns::before(
        &kube,
        &[
            ("MESHDNS_CONFIG_DIR", &path),
            ("MESHDNS_LOCAL_CLUSTER", "a"),
        ],
    )
    .await;
    for name in ["x.cluster.b.", "x.cluster.c."] {
        udp(meshdns.addr, &query(name, RecordType::A)).await;
    }
    assert_eq!(meshdns.upstream_requests("c", "refused").await, 1.0);
    // c's endpoint moves to b's address (a new group named c), b goes.
    dir.update(&[("MESHDNS_CLUSTERS", &format!("a=; c={}", b.addr))]);
    assert!(
        support::eventually(100, || async {
            meshdns.config_reloads("applied").await == 1.0
        })
        .await
    );
    let scrape = meshdns.scrape().await;
    assert_eq!(
        scrape.label_values("meshdns_upstream_requests_total", "peer"),
        ["a", "c"],
        "b's series are gone"
    );
    assert_eq!(
        scrape.value(
            "meshdns_upstream_requests_total",
            &[("peer", "c"), ("result", "refused")]
        ),
        1.0,
        "c's series, kept across the change of its group"
    );
    assert_eq!(
        scrape.label_values("meshdns_upstream_healthy", "endpoint"),
        {
            let mut now = vec![endpoint(&kube), endpoint(&b)];
            now.sort_unstable();
            now
        }
    );
}

// Host-name endpoints.

#[tokio::test(start_paused = true)]
async fn a_host_name_that_resolves_again_is_followed_within_15_seconds() {
    const NAME: &str = "dns-b.example.test.";
    let peer = answering(MEMBER, [10, 2, 0, 1]).await;
    let failing = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::rcode(ResponseCode::ServFail)))
        .start()
        .await;
    let kube_addr = failing.addr.to_string();
    let peers = format!("b=dns-b.example.test:{}", peer.addr.port());
    let meshdns = Meshdns::in_cluster_a(&failing, &peers).await;
    // Minutes of failed resolutions: the retry has backed off as far as it goes.
    tokio::time::sleep(Duration::from_secs(400)).await;
    assert!(
        answer_lines(&meshdns, "mongo-0.mongo.db.cluster.b.")
            .await
            .is_empty()
    );
    drop(failing);
    tokio::time::sleep(Duration::from_millis(1)).await; // the stopped fake lets go of its port
    let _kube = FakeDns::builder()
        .answer(
            NAME,
            RecordType::A,
            Answer::records([rr::a(NAME, [127, 0, 0, 1])]),
        )
        .start_on(&kube_addr)
        .await;
    let fixed = Instant::now();
    while answer_lines(&meshdns, "mongo-0.mongo.db.cluster.b.")
        .await
        .is_empty()
    {
        assert!(
            fixed.elapsed() <= meshdns::testing::upstream::MAX_RETRY,
            "not followed within {:?}",
            meshdns::testing::upstream::MAX_RETRY
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(meshdns::testing::upstream::MAX_RETRY <= Duration::from_secs(15));
}

// Local resource errors are meshdns's own.

/// Set in the child process that [`a_local_resource_error_never_marks_an_endpoint_down`]
/// starts with a low descriptor limit of its own.
const DESCRIPTORS_LIMITED: &str = "FAILURE_TEST_DESCRIPTORS_LIMITED";

/// Running out of descriptors is process-wide, so the test runs itself again as a child
/// process under `ulimit -n`, where it uses up every descriptor left and asks meshdns.
#[test]
fn a_local_resource_error_never_marks_an_endpoint_down() {
    if std::env::var_os(DESCRIPTORS_LIMITED).is_some() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(with_no_descriptors_left());
        return;
    }
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -n 256 && exec "$0" "$@""#)
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "failure::a_local_resource_error_never_marks_an_endpoint_down",
            "--test-threads",
            "1",
            "--nocapture",
        ])
        .env(DESCRIPTORS_LIMITED, "1")
        .output()
        .expect("the test binary runs again under sh");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(
        output.status.success() && text(&output.stdout).contains("1 passed"),
        "the child failed:\n{}\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

async fn with_no_descriptors_left() {
    const WWW: &str = "www.example.com.";
    let upstream = FakeDns::builder()
        .answer(
            WWW,
            RecordType::A,
            Answer::records([rr::a(WWW, [192, 0, 2, 80])]),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    // The client's socket, made while descriptors are left.
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(meshdns.addr).await.unwrap();
    let ask = async |client: &UdpSocket| {
        let asked = query(WWW, RecordType::A);
        client.send(&asked.to_vec().unwrap()).await.unwrap();
        let mut buf = vec![0u8; 4096];
        let len = tokio::time::timeout(support::CLIENT_TIMEOUT, client.recv(&mut buf))
            .await
            .expect("a reply in time")
            .unwrap();
        Message::from_vec(&buf[..len]).unwrap().response_code
    };
    assert_eq!(ask(&client).await, ResponseCode::NoError);

    let mut held = Vec::new();
    let exhausted = take_every_descriptor(&mut held).await;
    assert_eq!(exhausted.raw_os_error(), Some(24), "EMFILE: {exhausted}");
    for _ in 0..5 {
        // No socket for the attempt: meshdns's own failure, answered at once.
        assert_eq!(ask(&client).await, ResponseCode::ServFail);
    }
    drop(held);

    assert_eq!(meshdns.upstream_healthy("local", &upstream).await, 1.0);
    assert_eq!(
        meshdns.upstream_requests("local", "local_error").await,
        10.0
    );
    assert_eq!(meshdns.upstream_requests("local", "error").await, 0.0);
    assert_eq!(ask(&client).await, ResponseCode::NoError);
}

/// Opens `/dev/null` into `held` until the process has no descriptor left, then again until
/// none has come free for a while; the error that said none was left. meshdns reads its
/// configuration once more on the blocking pool as it starts (reload.rs), so a file it had
/// open when the descriptors ran out is closed a moment later, and that descriptor would give
/// the next attempt its socket (1 run in about 1,500 before the second pass).
async fn take_every_descriptor(held: &mut Vec<std::fs::File>) -> std::io::Error {
    const QUIET: Duration = Duration::from_millis(100);
    let take = |held: &mut Vec<std::fs::File>| loop {
        match std::fs::File::open("/dev/null") {
            Ok(file) => held.push(file),
            Err(error) => return error,
        }
    };
    let _ = take(held);
    loop {
        let before = held.len();
        tokio::time::sleep(QUIET).await;
        let exhausted = take(held);
        if held.len() == before {
            return exhausted;
        }
    }
}

// Duration bounds.

/// `--check` validates exactly what a start does, and binds nothing: a value it passes is one
/// the process runs with.
#[test]
fn a_duration_beyond_its_maximum_exits_64_naming_the_variable() {
    for variable in [
        "MESHDNS_TIMEOUT",
        "MESHDNS_ATTEMPT_TIMEOUT",
        "MESHDNS_CACHE_MAX_TTL",
        "MESHDNS_CACHE_NEGATIVE_TTL",
        "MESHDNS_SERVE_STALE",
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_meshdns"))
            .arg("--check")
            .env_clear()
            .env("MESHDNS_UPSTREAMS", "127.0.0.1:1")
            .env(variable, "5124095576030431h")
            .output()
            .expect("the meshdns binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{variable}: {stderr}");
        assert!(stderr.contains(variable), "{stderr}");
    }
}

// Shutdown and listeners.

/// `run` on the binary's runtime (one thread), on a thread of its own, with the shutdown in
/// the caller's hand: once `run` returns the runtime is dropped, and with it every task `run`
/// left behind, as when the binary exits.
struct Isolated {
    addr: SocketAddr,
    admin: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    ended: tokio::sync::oneshot::Receiver<std::io::Result<()>>,
}

impl Isolated {
    fn start(vars: &[(&str, &str)], mut listeners: meshdns::Listeners) -> Isolated {
        let config =
            meshdns::Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
                .expect("a valid test config");
        let admin = meshdns::bind_admin("127.0.0.1:0".parse().unwrap()).unwrap();
        let admin_addr = admin.local_addr().unwrap();
        listeners.admin = Some(admin);
        let addr = listeners.local_addrs()[0];
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (done, ended) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let runtime = meshdns::process::runtime(1).unwrap();
            let shutdown = async {
                let _ = stopped.await;
            };
            let result = runtime.block_on(meshdns::run(config, listeners, shutdown));
            drop(runtime);
            let _ = done.send(result);
        });
        Isolated {
            addr,
            admin: admin_addr,
            stop: Some(stop),
            ended,
        }
    }

    fn shut_down(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Whether `run` has returned (its result is then lost to [`Isolated::ended`]).
    fn has_ended(&mut self) -> bool {
        !matches!(
            self.ended.try_recv(),
            Err(tokio::sync::oneshot::error::TryRecvError::Empty)
        )
    }

    /// What `run` returned, once its runtime is gone.
    async fn ended(self, within: Duration) -> std::io::Result<()> {
        tokio::time::timeout(within, self.ended)
            .await
            .expect("run returned in time")
            .expect("run's thread reported")
    }
}

fn loopback() -> meshdns::Listeners {
    meshdns::bind(&["127.0.0.1:0".parse().unwrap()]).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_tcp_replies_are_written_before_shutdown() {
    // More replies than the kernel's buffers of a connection hold (a few MiB), fewer than
    // meshdns reads before its queue for the connection is full: when shutdown comes, every
    // query has been read and answered, and many replies still wait to be written.
    const QUERIES: usize = 90;
    let upstream = FakeDns::builder()
        .on(BIG, RecordType::TXT, Behaviour::TruncateUdp(big_answer()))
        .start()
        .await;
    let kube_dns = endpoint(&upstream);
    let mut meshdns = Isolated::start(
        &[
            ("MESHDNS_UPSTREAMS", &kube_dns),
            ("MESHDNS_CACHE_SIZE", "100"),
        ],
        loopback(),
    );
    tcp(meshdns.addr, &query(BIG, RecordType::TXT)).await;
    let mut client = tcp_client_that_never_reads(meshdns.addr).await;
    let queries: Vec<Message> = (0..QUERIES).map(|_| query(BIG, RecordType::TXT)).collect();
    let frames: Vec<u8> = queries
        .iter()
        .flat_map(|q| frame_of(&q.to_vec().unwrap()))
        .collect();
    client.write_all(&frames).await.unwrap();
    // Wait for the state itself: every query read and answered (its reply queued).
    let admin = meshdns.admin;
    let answered = || async move {
        let scrape = support::admin::get(admin, "/metrics").await;
        support::admin::Scrape::parse(&scrape.body).value(
            "meshdns_requests_total",
            &[
                ("proto", "tcp"),
                ("route", "passthrough"),
                ("rcode", "NOERROR"),
            ],
        )
    };
    assert!(
        support::eventually(50, || async { answered().await >= (QUERIES + 1) as f64 }).await,
        "every query read and answered"
    );

    meshdns.shut_down();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !meshdns.has_ended(),
        "run returned while replies were still queued"
    );
    assert_eq!(
        answered().await,
        (QUERIES + 1) as f64,
        "every query read and answered, no more"
    );
    // The client reads now; meshdns writes what is queued, closes, and only then returns.
    let mut ids: Vec<u16> = Vec::new();
    while let Some(frame) = read_frame(&mut client).await {
        ids.push(Message::from_vec(&frame).unwrap().id);
    }
    meshdns
        .ended(meshdns::SHUTDOWN_GRACE)
        .await
        .expect("a clean shutdown");
    let mut asked: Vec<u16> = queries.iter().map(|q| q.id).collect();
    ids.sort_unstable();
    asked.sort_unstable();
    assert_eq!(
        ids, asked,
        "every query answered before shutdown got its reply"
    );
}

/// A TCP socket neither connected nor listening, non-blocking: every read on it fails with
/// ENOTCONN, every accept with EINVAL. Handed to `run` as a listener, it is one that broke.
fn broken_socket() -> socket2::Socket {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_nonblocking(true).unwrap();
    socket
}

/// What `run` returns by itself (no shutdown is asked for) with `listeners`, and the address
/// of their first DNS listener.
async fn run_ends_with(listeners: meshdns::Listeners) -> (std::io::Error, SocketAddr) {
    let upstream = FakeDns::builder().start().await;
    let meshdns = Isolated::start(&[("MESHDNS_UPSTREAMS", &endpoint(&upstream))], listeners);
    let addr = meshdns.addr;
    let error = meshdns
        .ended(Duration::from_secs(5))
        .await
        .expect_err("a failed listener ends run");
    (error, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_fails_ends_run_with_an_error() {
    let mut listeners = loopback();
    listeners.udp.push(broken_socket().into());
    let (error, addr) = run_ends_with(listeners).await;
    assert_eq!(error.kind(), std::io::ErrorKind::NotConnected, "{error}");
    // The listeners that were fine are closed too: nothing serves half the sockets.
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_listener_that_cannot_accept_ends_run_with_an_error() {
    let mut listeners = loopback();
    listeners.tcp.push(broken_socket().into());
    let (error, addr) = run_ends_with(listeners).await;
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput, "{error}");
    assert!(TcpStream::connect(addr).await.is_err());
}
