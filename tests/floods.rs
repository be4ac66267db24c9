//! Floods (DESIGN.md, "Limits and bad input" and "Cache"; issue 9): more queries than the
//! in-flight cap are shed and counted, a slowloris TCP client cannot take the TCP listener (nor
//! UDP) for longer than the idle timeout, and a random-subdomain flood keeps the cache at its
//! bound.
//!
//! The counters are read in-process from the metrics registry this test binary shares with the
//! meshdns instances it starts. Each test reads only a series no other test here moves.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use hickory_proto::op::{OpCode, ResponseCode};
use hickory_proto::rr::RecordType;
use meshdns::server::MAX_INFLIGHT;
use support::{Answer, Behaviour, FakeDns, Meshdns, frame_of, query, read_frame, rr, tcp, udp};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

const FAST: &str = "fast.example.com.";

/// The most queries the other tests of this file have in flight at once (the cache flood's
/// batches of 50), which the process-wide `meshdns_inflight` gauge also counts.
const OTHER_TESTS_INFLIGHT: usize = 64;

/// Every series of the process's registry, `name{labels}` → value.
fn scrape() -> HashMap<String, f64> {
    meshdns::metrics::encode()
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

fn series(name: &str) -> f64 {
    meshdns::metrics::init();
    scrape().get(name).copied().unwrap_or_default()
}

fn dropped(reason: &str) -> f64 {
    series(&format!("meshdns_dropped_total{{reason=\"{reason}\"}}"))
}

/// An upstream that answers [`FAST`] at once and everything else after `delay`.
async fn slow_upstream(delay: Duration) -> FakeDns {
    FakeDns::builder()
        .answer(
            FAST,
            RecordType::A,
            Answer::records([rr::a(FAST, [192, 0, 2, 1])]),
        )
        .otherwise(Behaviour::Delay(
            delay,
            Answer::rcode(ResponseCode::NoError),
        ))
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_beyond_the_inflight_cap_are_shed_counted_and_service_resumes() {
    let upstream = slow_upstream(Duration::from_millis(2500)).await;
    let meshdns = Meshdns::start(&[
        ("MESHDNS_UPSTREAMS", &upstream.addr.to_string()),
        ("MESHDNS_TIMEOUT", "5s"),
        ("MESHDNS_ATTEMPT_TIMEOUT", "4s"),
    ])
    .await;
    let before = dropped("inflight_limit");
    // 2.5 × the cap, distinct names (no sharing of in-flight misses), in paced bursts so the
    // kernel's receive buffer does not drop them before meshdns does.
    let total = MAX_INFLIGHT * 5 / 2;
    let mut senders = Vec::new();
    for _ in 0..8 {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(meshdns.addr).await.unwrap();
        senders.push(socket);
    }
    let mut peak_inflight = 0f64;
    for i in 0..total {
        let bytes = query(&format!("q{i}.flood.example.com."), RecordType::A)
            .to_vec()
            .unwrap();
        senders[i % senders.len()].send(&bytes).await.unwrap();
        if i % 128 == 127 {
            tokio::time::sleep(Duration::from_millis(3)).await;
            peak_inflight = peak_inflight.max(series("meshdns_inflight"));
        }
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    peak_inflight = peak_inflight.max(series("meshdns_inflight"));
    let shed = dropped("inflight_limit") - before;
    assert!(
        shed >= 1.0,
        "queries beyond the cap are counted as shed (got {shed}, peak in flight {peak_inflight})"
    );
    // The gauge is the process's: the other tests here add at most 50 queries of their own.
    assert!(
        peak_inflight <= (MAX_INFLIGHT + OTHER_TESTS_INFLIGHT) as f64,
        "never more than the cap in flight (peak {peak_inflight})"
    );
    // Once the slow answers are out, a normal query is answered at once.
    tokio::time::sleep(Duration::from_millis(2600)).await;
    let reply = udp(meshdns.addr, &query(FAST, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), ["fast.example.com. A 192.0.2.1"]);
    println!("shed {shed} of {total} queries; peak in flight {peak_inflight}");
}

/// A query meshdns answers itself (NOTIMP), so only the listener is under test.
fn notify_frame() -> Vec<u8> {
    let mut msg = query(FAST, RecordType::SOA);
    msg.metadata.op_code = OpCode::Notify;
    frame_of(&msg.to_vec().unwrap())
}

/// Opens `MAX_CONNECTIONS` TCP connections that each send one byte of a length prefix and
/// then nothing: every slot is held by a slowloris.
async fn slowloris(server: std::net::SocketAddr) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for _ in 0..meshdns::server::TCP_MAX_CONNECTIONS {
        let mut stream = TcpStream::connect(server).await.unwrap();
        stream.write_all(&[0]).await.unwrap();
        held.push(stream);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_holds_the_tcp_cap_but_not_udp_and_slots_come_back() {
    let upstream = slow_upstream(Duration::from_millis(10)).await;
    let meshdns = Meshdns::start(&[("MESHDNS_UPSTREAMS", &upstream.addr.to_string())]).await;
    let before = dropped("tcp_connection_limit");
    let mut held = slowloris(meshdns.addr).await;
    // Give meshdns time to accept them all.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // One more connection is closed at once, without a reply.
    let mut extra = TcpStream::connect(meshdns.addr).await.unwrap();
    let _ = extra.write_all(&notify_frame()).await;
    let closed = tokio::time::timeout(Duration::from_secs(2), read_frame(&mut extra))
        .await
        .expect("a connection over the cap is closed at once");
    assert!(closed.is_none(), "no reply over the cap");
    assert!(dropped("tcp_connection_limit") - before >= 1.0);
    // UDP does not care.
    let reply = udp(meshdns.addr, &query(FAST, RecordType::A)).await;
    assert_eq!(reply.answer_lines().len(), 1);
    // A slot freed by a closing client is taken by the next one.
    held.truncate(held.len() - 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let reply = tcp(meshdns.addr, &query(FAST, RecordType::A)).await;
    assert_eq!(reply.answer_lines().len(), 1);
}

/// The idle timeout is what frees the slots of clients that never close: on tokio's paused
/// clock, the whole `IDLE_TIMEOUT` passes at once.
#[tokio::test(start_paused = true)]
async fn slowloris_connections_idle_out_and_tcp_serves_again() {
    let upstream = slow_upstream(Duration::from_millis(10)).await;
    let meshdns = Meshdns::start(&[("MESHDNS_UPSTREAMS", &upstream.addr.to_string())]).await;
    let mut held = slowloris(meshdns.addr).await;
    tokio::time::sleep(meshdns::server::TCP_IDLE_TIMEOUT + Duration::from_secs(1)).await;
    for stream in &mut held {
        assert!(
            read_frame(stream).await.is_none(),
            "the slowloris connection was closed"
        );
    }
    let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();
    stream.write_all(&notify_frame()).await.unwrap();
    let reply = read_frame(&mut stream)
        .await
        .expect("served again over TCP");
    let reply = hickory_proto::op::Message::from_vec(&reply).unwrap();
    assert_eq!(reply.response_code, ResponseCode::NotImp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_random_subdomain_flood_keeps_the_cache_at_its_bound() {
    let upstream = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::nxdomain("example.com.")))
        .start()
        .await;
    let meshdns = Meshdns::start(&[
        ("MESHDNS_UPSTREAMS", &upstream.addr.to_string()),
        ("MESHDNS_CACHE_SIZE", "100"),
    ])
    .await;
    let evictions_before = series("meshdns_cache_evictions_total");
    let mut peak = 0f64;
    for batch in 0..40 {
        let mut asks = tokio::task::JoinSet::new();
        for i in 0..50 {
            let name = format!("r{batch}x{i}.random.example.com.");
            let addr = meshdns.addr;
            asks.spawn(async move { udp(addr, &query(&name, RecordType::A)).await });
        }
        for reply in asks.join_all().await {
            assert_eq!(reply.msg.response_code, ResponseCode::NXDomain);
        }
        peak = peak.max(series("meshdns_cache_entries"));
    }
    let evicted = series("meshdns_cache_evictions_total") - evictions_before;
    assert!(
        peak <= 100.0,
        "cache entries stay at the bound (peak {peak})"
    );
    assert!(
        evicted >= 1800.0,
        "2000 names through a 100-entry cache evict (evicted {evicted})"
    );
}
