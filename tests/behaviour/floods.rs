//! Floods (docs/design.md, "Memory and overload", "Limits and bad input" and "Cache"): more
//! queries than the in-flight cap are shed and counted, a slowloris TCP client cannot take the
//! TCP listener (nor UDP) for longer than the idle timeout, and a random-subdomain flood keeps
//! the cache at its bound.
//!
//! Every meshdns has its own registry: the counts below are exact.

use crate::support;

use std::time::Duration;

use hickory_proto::op::{OpCode, ResponseCode};
use hickory_proto::rr::RecordType;
use support::{
    Answer, Behaviour, FakeDns, Meshdns, eventually, frame_of, query, read_frame, rr, udp,
};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

const FAST: &str = "fast.example.com.";

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
    const CAP: usize = 64;
    const TOTAL: usize = 160;
    let upstream = slow_upstream(Duration::from_millis(1500)).await;
    let cap = CAP.to_string();
    let meshdns = Meshdns::before(
        &upstream,
        &[
            ("MESHDNS_TIMEOUT", "5s"),
            ("MESHDNS_ATTEMPT_TIMEOUT", "4s"),
            ("MESHDNS_MAX_INFLIGHT", &cap),
        ],
    )
    .await;
    // Distinct names (no sharing of in-flight misses), all sent within the upstream's delay.
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.connect(meshdns.addr).await.unwrap();
    for i in 0..TOTAL {
        let bytes = query(&format!("q{i}.flood.example.com."), RecordType::A)
            .to_vec()
            .unwrap();
        socket.send(&bytes).await.unwrap();
    }
    // Wait for the state itself: every query taken in, the cap's worth in flight (the
    // upstream holds each for 1.5 s, so none has finished yet).
    let all_taken_in = eventually(50, || async {
        meshdns.metric("meshdns_inflight", &[]).await + meshdns.dropped("inflight_limit").await
            >= TOTAL as f64
    })
    .await;
    assert!(all_taken_in, "every query was taken in");
    assert_eq!(meshdns.metric("meshdns_inflight", &[]).await, CAP as f64);
    let shed = meshdns.dropped("inflight_limit").await;
    assert_eq!(
        shed,
        (TOTAL - CAP) as f64,
        "every query beyond the cap is shed"
    );
    // The slow answers come back, one per query that was let in.
    let mut answered = 0;
    let mut buf = vec![0u8; 4096];
    while let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(3), socket.recv(&mut buf)).await
    {
        answered += 1;
        if answered == CAP {
            break;
        }
    }
    assert_eq!(answered, CAP);
    // Once they are out, a normal query is answered at once.
    let reply = udp(meshdns.addr, &query(FAST, RecordType::A)).await;
    assert_eq!(reply.answer_lines(), ["fast.example.com. A 192.0.2.1"]);
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
    for _ in 0..meshdns::testing::server::TCP_MAX_CONNECTIONS {
        let mut stream = TcpStream::connect(server).await.unwrap();
        stream.write_all(&[0]).await.unwrap();
        held.push(stream);
    }
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_holds_the_tcp_cap_but_not_udp_and_slots_come_back() {
    let upstream = slow_upstream(Duration::from_millis(10)).await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let mut held = slowloris(meshdns.addr).await;
    // One more connection is closed at once, without a reply. No wait is needed: meshdns
    // accepts in order, so it has taken every slowloris before this one.
    let mut extra = TcpStream::connect(meshdns.addr).await.unwrap();
    let _ = extra.write_all(&notify_frame()).await;
    let closed = tokio::time::timeout(Duration::from_secs(2), read_frame(&mut extra))
        .await
        .expect("a connection over the cap is closed at once");
    assert!(closed.is_none(), "no reply over the cap");
    assert_eq!(meshdns.dropped("tcp_connection_limit").await, 1.0);
    // UDP does not care.
    let reply = udp(meshdns.addr, &query(FAST, RecordType::A)).await;
    assert_eq!(reply.answer_lines().len(), 1);
    // A slot freed by a closing client is taken by the next one.
    held.truncate(held.len() - 1);
    let served_again = eventually(50, || async {
        let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();
        let _ = stream
            .write_all(&frame_of(&query(FAST, RecordType::A).to_vec().unwrap()))
            .await;
        read_frame(&mut stream).await.is_some()
    })
    .await;
    assert!(served_again, "the freed slot serves the next client");
}

/// The idle timeout is what frees the slots of clients that never close: on tokio's paused
/// clock, the whole `IDLE_TIMEOUT` passes at once.
#[tokio::test(start_paused = true)]
async fn slowloris_connections_idle_out_and_tcp_serves_again() {
    let upstream = slow_upstream(Duration::from_millis(10)).await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    let mut held = slowloris(meshdns.addr).await;
    tokio::time::sleep(meshdns::testing::server::TCP_IDLE_TIMEOUT + Duration::from_secs(1)).await;
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
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
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
        peak = peak.max(meshdns.metric("meshdns_cache_entries", &[]).await);
    }
    let evicted = meshdns.metric("meshdns_cache_evictions_total", &[]).await;
    assert_eq!(peak, 100.0, "cache entries stay at the bound");
    assert_eq!(
        evicted, 1900.0,
        "2000 names through a 100-entry cache: every name after the 100th evicts one"
    );
}
