//! Pass-through (docs/design.md, "Pass-through"): names outside meshdns' zones go to the local
//! cluster DNS, and the client gets that server's reply verbatim but for its own ID.
//!
//! Tests about deadlines and failover run on tokio's paused clock (the fakes still answer over
//! 127.0.0.1): the durations measured are exact virtual time, whatever the machine's load.

use crate::support;

use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption, NSIDPayload};
use support::{Answer, Behaviour, FakeDns, Meshdns, Via, query, rr, tcp, udp, with_edns};
use tokio::time::Instant;

const NAME: &str = "www.example.com.";

fn www() -> Answer {
    Answer::records([rr::a(NAME, [192, 0, 2, 1]), rr::a(NAME, [192, 0, 2, 2])])
}

#[tokio::test]
async fn udp_passthrough_is_the_upstream_reply_byte_for_byte_but_the_id() {
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, www())
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    assert_eq!(
        support::without_id(&reply.bytes),
        support::without_id(&upstream.last_reply())
    );
    assert_eq!(reply.answer_lines().len(), 2);
}

#[tokio::test]
async fn tcp_passthrough_is_the_upstream_reply_byte_for_byte_but_the_id() {
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, www())
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = tcp(meshdns.addr, &query(NAME, RecordType::A)).await;
    // The client asked without EDNS: the OPT record that carried meshdns's loop marker
    // upstream (and the upstream's OPT in reply to it) is all that is taken off.
    let sent = upstream.last_reply();
    assert_eq!(
        support::without_id(&reply.bytes),
        support::without_id(&support::raw::without_opt(&sent).expect("an OPT record"))
    );
    assert_eq!(reply.answer_lines().len(), 2);
}

#[tokio::test]
async fn nxdomain_keeps_its_soa() {
    let upstream = FakeDns::builder()
        .answer(
            "gone.example.com.",
            RecordType::A,
            Answer::nxdomain("example.com."),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query("gone.example.com.", RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
    assert_eq!(
        reply.authority_lines(),
        [support::record_line(&rr::soa("example.com."))]
    );
}

#[tokio::test]
async fn edns_options_of_the_upstream_reply_survive() {
    let nsid = EdnsOption::NSID(NSIDPayload::new(b"kube-dns-7f9c".to_vec()).unwrap());
    let unknown = EdnsOption::Unknown(65001, b"private".to_vec());
    let mut answer = www();
    answer.options = vec![nsid.clone(), unknown.clone()];
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &with_edns(query(NAME, RecordType::A), 1232)).await;
    let edns = reply.msg.edns.expect("an OPT record");
    assert_eq!(edns.option(EdnsCode::NSID), Some(&nsid));
    assert_eq!(edns.option(EdnsCode::Unknown(65001)), Some(&unknown));
}

#[tokio::test]
async fn the_aa_ad_and_cd_bits_survive() {
    let mut answer = www();
    answer.authoritative = true;
    answer.authentic_data = true;
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let mut asked = with_edns(query(NAME, RecordType::A), 1232);
    asked.metadata.checking_disabled = true;
    // AD only for a client that asks for it (RFC 6840 §5.8; see the next test).
    asked.metadata.authentic_data = true;
    let reply = udp(meshdns.addr, &asked).await;
    assert!(reply.msg.authoritative, "AA");
    assert!(reply.msg.authentic_data, "AD");
    assert!(reply.msg.checking_disabled, "CD");
}

/// A query for [`NAME`] that sets AD, DO (over EDNS), or neither.
fn asking_ad(ad: bool, dnssec_ok: bool) -> hickory_proto::op::Message {
    let mut asked = with_edns(query(NAME, RecordType::A), 1232);
    asked.metadata.authentic_data = ad;
    if let Some(edns) = asked.edns.as_mut() {
        edns.set_dnssec_ok(dnssec_ok);
    }
    asked
}

#[tokio::test]
async fn ad_reaches_only_a_client_that_set_ad_or_do_on_a_miss_and_on_a_hit() {
    // kube-dns validates and sets AD whoever asks (as some resolvers do).
    let mut answer = www();
    answer.authentic_data = true;
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let ad_of = |reply: &support::Reply| reply.msg.authentic_data;
    // Without EDNS, with EDNS but neither bit: AD=0, on the miss and on the hit.
    for asked in [query(NAME, RecordType::A), asking_ad(false, false)] {
        let miss = udp(meshdns.addr, &asked).await;
        let hit = udp(meshdns.addr, &asked).await;
        assert!(!ad_of(&miss) && !ad_of(&hit), "{:?}", asked.edns);
        assert_eq!(miss.answer_lines().len(), 2);
        assert_eq!(hit.answer_lines().len(), 2);
    }
    assert_eq!(
        upstream.exchanges().len(),
        2,
        "the second of each pair was a hit"
    );
    // AD set, DO set: AD as kube-dns said, on a hit of what an AD=0 client's query stored
    // and on a miss.
    let with_ad = udp(meshdns.addr, &asking_ad(true, false)).await;
    assert!(ad_of(&with_ad), "AD, a hit");
    let with_do = udp(meshdns.addr, &asking_ad(false, true)).await;
    assert!(ad_of(&with_do), "DO, a miss");
    assert!(
        ad_of(&udp(meshdns.addr, &asking_ad(false, true)).await),
        "DO, a hit"
    );
    assert_eq!(upstream.exchanges().len(), 3);
    // And the other bits of the reply are kube-dns's, but for AD.
    let cleared = udp(meshdns.addr, &asking_ad(false, false)).await;
    assert_eq!(cleared.bytes[2..3], upstream.last_reply()[2..3]);
    assert_eq!(cleared.bytes[3] | 0x20, upstream.last_reply()[3]);
}

#[tokio::test]
async fn a_client_without_edns_gets_no_opt() {
    let mut answer = www();
    answer.options = vec![EdnsOption::Unknown(65001, b"private".to_vec())];
    let upstream = FakeDns::builder()
        .answer(NAME, RecordType::A, answer)
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert!(reply.msg.edns.is_none());
    assert_eq!(reply.answer_lines().len(), 2);
}

#[tokio::test]
async fn a_reply_with_the_wrong_id_is_ignored_and_the_right_one_used() {
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::WrongIdFirst(www()))
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.answer_lines().len(), 2);
    assert_eq!(
        upstream.count(Via::Udp),
        1,
        "answered from the first attempt"
    );
}

#[tokio::test]
async fn a_reply_to_another_question_is_ignored_and_the_right_one_used() {
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::WrongQuestionFirst(www()))
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.msg.queries[0].name().to_ascii(), NAME);
    assert_eq!(reply.answer_lines().len(), 2);
    assert_eq!(
        upstream.count(Via::Udp),
        1,
        "answered from the first attempt"
    );
}

#[tokio::test]
async fn a_reply_from_another_port_is_ignored_and_the_right_one_used() {
    let forged = Answer::records([rr::a(NAME, [203, 0, 113, 66])]);
    let upstream = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::ForgedFromAnotherPortFirst {
                forged,
                real: www(),
            },
        )
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(
        reply.answer_lines(),
        [format!("{NAME} A 192.0.2.1"), format!("{NAME} A 192.0.2.2")]
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_upstream_gives_servfail_within_the_deadline() {
    let upstream = FakeDns::silent().await;
    let meshdns = Meshdns::before(
        &upstream,
        &[
            ("MESHDNS_TIMEOUT", "1s"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "300ms"),
        ],
    )
    .await;
    let started = Instant::now();
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    let took = started.elapsed();
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert_eq!(
        took,
        Duration::from_secs(1),
        "at the deadline: neither giving up early nor missing it"
    );
}

#[tokio::test(start_paused = true)]
async fn garbage_from_the_upstream_is_ignored_until_the_deadline() {
    let upstream = FakeDns::builder()
        .otherwise(Behaviour::Garbage)
        .start()
        .await;
    let meshdns = Meshdns::before(
        &upstream,
        &[
            ("MESHDNS_TIMEOUT", "500ms"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ],
    )
    .await;
    let started = Instant::now();
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::ServFail);
    assert_eq!(started.elapsed(), Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_silent_first_upstream_fails_over_to_the_second() {
    let silent = FakeDns::silent().await;
    let second = FakeDns::builder()
        .answer(NAME, RecordType::A, www())
        .start()
        .await;
    let meshdns = Meshdns::before_all(
        &[&silent, &second],
        &[
            ("MESHDNS_TIMEOUT", "2s"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ],
    )
    .await;
    let started = Instant::now();
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.answer_lines().len(), 2);
    assert_eq!(silent.count(Via::Udp), 1);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(200),
        "one attempt timeout, not the deadline"
    );
}

/// An upstream slower than the attempt timeout still answers the query: the overdue attempt
/// keeps listening while the next one is sent, and the first reply wins.
#[tokio::test(start_paused = true)]
async fn a_reply_arriving_after_the_attempt_timeout_is_still_used() {
    let slow = FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::Delay(Duration::from_millis(350), www()),
        )
        .start()
        .await;
    let meshdns = Meshdns::before(
        &slow,
        &[
            ("MESHDNS_TIMEOUT", "2s"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "200ms"),
        ],
    )
    .await;
    let started = Instant::now();
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
    assert_eq!(reply.answer_lines().len(), 2);
    assert_eq!(
        slow.count(Via::Udp),
        2,
        "a second attempt went out at 200 ms"
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(350),
        "the first attempt's late reply, not the second's (at 550 ms)"
    );
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_that_keeps_failing_is_skipped() {
    let silent = FakeDns::silent().await;
    let names: Vec<String> = (0..5).map(|i| format!("host-{i}.example.com.")).collect();
    let mut second = FakeDns::builder();
    for name in &names {
        second = second.answer(
            name,
            RecordType::A,
            Answer::records([rr::a(name, [192, 0, 2, 7])]),
        );
    }
    let second = second.start().await;
    let meshdns =
        Meshdns::before_all(&[&silent, &second], &[("MESHDNS_ATTEMPT_TIMEOUT", "200ms")]).await;
    for name in &names {
        let reply = udp(meshdns.addr, &query(name, RecordType::A)).await;
        assert_eq!(reply.answer_lines().len(), 1, "{name}");
    }
    // Three failures in a row mark it down; background probes ask for ". NS", not our names.
    let asked: Vec<String> = silent.names().into_iter().filter(|n| n != ".").collect();
    assert_eq!(asked, names[..3]);
}

/// An upstream with 100 A records for NAME that truncates over UDP (TC, no records) and
/// answers whole over TCP.
async fn truncating_upstream_of_100_records() -> FakeDns {
    let many: Vec<_> = (0..100).map(|i| rr::a(NAME, [10, 0, 0, i])).collect();
    FakeDns::builder()
        .on(
            NAME,
            RecordType::A,
            Behaviour::TruncateUdp(Answer::records(many)),
        )
        .start()
        .await
}

#[tokio::test]
async fn a_truncated_upstream_reply_is_fetched_again_over_tcp() {
    let upstream = truncating_upstream_of_100_records().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = tcp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert!(!reply.msg.truncation);
    assert_eq!(reply.answer_lines().len(), 100);
    // The client's TCP query went out over UDP first, was cut, and came again over TCP.
    assert_eq!((upstream.count(Via::Udp), upstream.count(Via::Tcp)), (1, 1));
}

#[tokio::test]
async fn a_small_udp_client_gets_tc_and_none_of_a_set_too_big_for_512_bytes() {
    let upstream = truncating_upstream_of_100_records().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert!(reply.bytes.len() <= 512, "{} bytes", reply.bytes.len());
    assert!(reply.msg.truncation);
    // Whole RRsets or none (RFC 2181 §9): a client without TCP never takes part for all.
    assert_eq!(reply.answer_lines().len(), 0);
}

#[tokio::test]
async fn a_tcp_retry_cut_mid_frame_leaves_the_truncated_reply() {
    let upstream = FakeDns::builder()
        .on(NAME, RecordType::A, Behaviour::CloseTcpMidFrame(www()))
        .start()
        .await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let reply = udp(meshdns.addr, &query(NAME, RecordType::A)).await;
    assert!(reply.msg.truncation, "the client is told to ask over TCP");
    assert_eq!(reply.msg.response_code, ResponseCode::NoError);
}

/// With `MESHDNS_THREADS=2` two UDP sockets share the port, each with its own loop: every
/// query, hit or miss, from clients the kernel spreads over both, is answered exactly once,
/// with its own ID and question, from the address it was sent to (the clients' sockets are
/// connected to it, so nothing else reaches them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_answer_every_udp_query_exactly_once() {
    const NAMES: usize = 20;
    const CLIENTS: usize = 8;
    const PER_CLIENT: usize = 50;
    let mut builder = FakeDns::builder();
    for i in 0..NAMES {
        let name = format!("n{i}.example.com.");
        builder = builder.answer(
            &name,
            RecordType::A,
            Answer::records([rr::a(&name, [192, 0, 2, i as u8])]),
        );
    }
    let upstream = builder.start().await;
    let meshdns = Meshdns::before(
        &upstream,
        &[("MESHDNS_THREADS", "2"), ("MESHDNS_CACHE_SIZE", "1000")],
    )
    .await;
    let clients = (0..CLIENTS).map(|client| {
        let server = meshdns.addr;
        tokio::spawn(async move {
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            socket.connect(server).await.unwrap();
            let mut asked = std::collections::HashMap::new();
            for i in 0..PER_CLIENT {
                let mut msg = query(&format!("n{}.example.com.", i % NAMES), RecordType::A);
                msg.metadata.id = (client * PER_CLIENT + i) as u16;
                socket.send(&msg.to_vec().unwrap()).await.unwrap();
                asked.insert(msg.metadata.id, msg);
                if i % 10 == 9 {
                    // Pauses let some names reach the cache, so that hits and misses mix.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            let mut buf = vec![0; 4096];
            while !asked.is_empty() {
                let len = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf))
                    .await
                    .unwrap_or_else(|_| panic!("client {client}: {} unanswered", asked.len()))
                    .unwrap();
                let reply = hickory_proto::op::Message::from_vec(&buf[..len]).unwrap();
                let query = (asked.remove(&reply.metadata.id))
                    .unwrap_or_else(|| panic!("a reply to no query of ours, or a second one"));
                assert_eq!(
                    reply.queries, query.queries,
                    "the question of its own query"
                );
                assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
            }
            let late = tokio::time::timeout(Duration::from_millis(200), socket.recv(&mut buf));
            assert!(late.await.is_err(), "no reply beyond one per query");
        })
    });
    for client in clients.collect::<Vec<_>>() {
        client.await.unwrap();
    }
}
