//! TCP from the client side (docs/design.md, "Limits and bad input"; RFC 7766 §6.2.1.1): several
//! queries on one connection are all answered, each as soon as it is ready, each its own reply
//! even when the client gave them one ID. And TCP to the
//! upstreams ("DNS over TLS", the same reuse for TCP): `transport=tcp` and the retries after a
//! truncated UDP reply share one pipelined connection per endpoint, which a peer may close or
//! reset at any time without failing a query.

use crate::support::{self, dot};

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use dot::{Behaviour as StreamBehaviour, DotServer};
use meshdns::testing::upstream::stream::{StreamEndpoint, StreamSettings};

use hickory_proto::op::Message;
use hickory_proto::rr::{Record, RecordType};
use support::{Answer, Behaviour, FakeDns, Meshdns, frame_of, query, read_frame, rr};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const SLOW: &str = "slow.example.com.";

fn fast(i: usize) -> String {
    format!("fast-{i}.example.com.")
}

/// meshdns before an upstream that answers [`SLOW`] after 200 ms (within
/// one attempt timeout) and `fast-N` at once.
async fn serving() -> (FakeDns, Meshdns) {
    let mut upstream = FakeDns::builder().on(
        SLOW,
        RecordType::A,
        Behaviour::Delay(
            Duration::from_millis(200),
            Answer::records([rr::a(SLOW, [192, 0, 2, 99])]),
        ),
    );
    for i in 0..8 {
        let name = fast(i);
        let ip = [192, 0, 2, u8::try_from(i).unwrap()];
        upstream = upstream.answer(&name, RecordType::A, Answer::records([rr::a(&name, ip)]));
    }
    let upstream = upstream.start().await;
    let meshdns = Meshdns::before(&upstream, &[]).await;
    (upstream, meshdns)
}

/// Writes all `queries` in one go on a new connection.
async fn pipeline(meshdns: &Meshdns, queries: &[Message]) -> TcpStream {
    let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();
    let bytes: Vec<u8> = queries
        .iter()
        .flat_map(|q| frame_of(&q.to_vec().unwrap()))
        .collect();
    stream.write_all(&bytes).await.unwrap();
    stream
}

/// The next reply on `stream`, parsed.
async fn next_reply(stream: &mut TcpStream) -> Message {
    let bytes = tokio::time::timeout(support::CLIENT_TIMEOUT, read_frame(stream))
        .await
        .expect("a reply in time")
        .expect("a whole frame");
    Message::from_vec(&bytes).unwrap()
}

#[tokio::test]
async fn pipelined_queries_on_one_connection_are_all_answered() {
    let (_upstream, meshdns) = serving().await;
    let queries: Vec<Message> = (0..8).map(|i| query(&fast(i), RecordType::A)).collect();
    let mut stream = pipeline(&meshdns, &queries).await;
    let mut answered = HashSet::new();
    for _ in 0..queries.len() {
        let reply = next_reply(&mut stream).await;
        let asked = queries
            .iter()
            .find(|q| q.id == reply.id)
            .expect("a known ID");
        assert_eq!(reply.queries, asked.queries);
        assert_eq!(reply.answers.len(), 1);
        answered.insert(reply.id);
    }
    assert_eq!(answered.len(), queries.len());
}

#[tokio::test]
async fn a_slow_query_does_not_hold_back_a_fast_one() {
    let (_upstream, meshdns) = serving().await;
    let slow = query(SLOW, RecordType::A);
    let quick = query(&fast(0), RecordType::A);
    let mut stream = pipeline(&meshdns, &[slow.clone(), quick.clone()]).await;
    assert_eq!(
        next_reply(&mut stream).await.id,
        quick.id,
        "the fast one first"
    );
    assert_eq!(next_reply(&mut stream).await.id, slow.id);
}

#[tokio::test]
async fn replies_still_arrive_after_the_client_closes_its_sending_side() {
    let (_upstream, meshdns) = serving().await;
    let slow = query(SLOW, RecordType::A);
    let mut stream = pipeline(&meshdns, std::slice::from_ref(&slow)).await;
    stream.shutdown().await.unwrap();
    assert_eq!(next_reply(&mut stream).await.id, slow.id);
    assert_eq!(read_frame(&mut stream).await, None, "then meshdns closes");
}

// TCP to the upstreams.

/// meshdns counted one TCP connection to `cluster` (`meshdns_upstream_connections_total`).
async fn assert_one_tcp_connection_counted(meshdns: &Meshdns, cluster: &str) {
    let connections = [("peer", cluster), ("transport", "tcp")];
    assert_eq!(
        meshdns
            .metric("meshdns_upstream_connections_total", &connections)
            .await,
        1.0,
        "one connection counted for {cluster}"
    );
}

/// meshdns with cluster `b` at `peer` over `transport=tcp`.
async fn meshdns_with_tcp_peer(peer: &DotServer) -> Meshdns {
    let kube = FakeDns::silent().await;
    let clusters = format!("a=; b={} transport=tcp", peer.addr);
    Meshdns::before(
        &kube,
        &[
            ("MESHDNS_LOCAL_CLUSTER", "a"),
            ("MESHDNS_CLUSTERS", &clusters),
            ("MESHDNS_ATTEMPT_TIMEOUT", "1s"),
        ],
    )
    .await
}

#[tokio::test]
async fn misses_over_transport_tcp_share_one_connection() {
    let peer = DotServer::plain(StreamBehaviour::Answer).await;
    let meshdns = meshdns_with_tcp_peer(&peer).await;
    let outcome = dot::traffic_through_meshdns(meshdns.addr, 200).await;
    assert_eq!(outcome.failed, Vec::<String>::new());
    assert_eq!(peer.queries(), 200, "every miss went to the peer");
    assert_eq!(peer.connections(), 1, "one connection for 200 misses");
    assert_one_tcp_connection_counted(&meshdns, "b").await;
}

#[tokio::test]
async fn a_tcp_peer_closing_every_fifth_query_in_good_order_fails_no_query() {
    let peer = Arc::new(DotServer::plain(StreamBehaviour::CloseAfter(5)).await);
    let meshdns = meshdns_with_tcp_peer(&peer).await;
    dot::no_query_fails(&meshdns, &peer, |_| async {}).await;
    assert!(peer.connections() >= 60, "{}", peer.connections());
}

#[tokio::test]
async fn a_tcp_peer_resetting_every_fifth_query_fails_no_query() {
    let peer = Arc::new(DotServer::plain(StreamBehaviour::ResetAfter(5)).await);
    let meshdns = meshdns_with_tcp_peer(&peer).await;
    dot::no_query_fails(&meshdns, &peer, |_| async {}).await;
    assert!(peer.connections() >= 60, "{}", peer.connections());
}

#[tokio::test]
async fn a_tcp_peer_restarted_mid_traffic_fails_no_query() {
    let peer = Arc::new(DotServer::plain(StreamBehaviour::Answer).await);
    let meshdns = meshdns_with_tcp_peer(&peer).await;
    dot::no_query_fails(&meshdns, &peer, |peer| async move {
        // Replaced behind its address at a third of the traffic; restarted in place, its port
        // refusing connections for 100 ms, at two thirds.
        while peer.queries() < 100 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        peer.restart();
        while peer.queries() < 200 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        peer.restart_after(Duration::from_millis(100)).await;
    })
    .await;
    assert!(
        peer.connections() >= 3,
        "one per run of the server at least"
    );
}

/// Answers every UDP query on `port` of 127.0.0.1 with its question and TC set, nothing else:
/// the client must ask again over TCP.
async fn truncating_udp(port: u16) -> tokio::task::JoinHandle<()> {
    let socket = tokio::net::UdpSocket::bind(("127.0.0.1", port))
        .await
        .expect("the UDP port of the TCP fake is free");
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((len, from)) = socket.recv_from(&mut buf).await {
            let Ok(query) = Message::from_vec(&buf[..len]) else {
                continue;
            };
            let mut reply = Message::response(query.id, query.op_code);
            reply.metadata.truncation = true;
            reply.metadata.recursion_desired = query.recursion_desired;
            reply.queries = query.queries.clone();
            let _ = socket.send_to(&reply.to_vec().unwrap(), from).await;
        }
    })
}

#[tokio::test]
async fn tcp_retries_after_truncation_share_one_connection() {
    let peer = DotServer::plain(StreamBehaviour::Answer).await;
    let udp = truncating_udp(peer.addr.port()).await;
    let upstream = peer.addr.to_string();
    let meshdns = Meshdns::start(&[("MESHDNS_UPSTREAMS", &upstream)]).await;
    for i in 0..200 {
        let name = format!("host-{i}.example.com.");
        let reply = support::udp(
            meshdns.addr,
            &support::with_edns(query(&name, RecordType::A), 1232),
        )
        .await;
        assert_eq!(
            reply.answer_lines(),
            [format!(
                "{name} A {}",
                std::net::Ipv4Addr::from(dot::ANSWER)
            )],
            "the whole answer, fetched over TCP"
        );
    }
    assert_eq!(peer.queries(), 200);
    assert_eq!(peer.connections(), 1, "one connection for 200 retries");
    assert_one_tcp_connection_counted(&meshdns, "local").await;
    udp.abort();
}

#[tokio::test]
async fn a_hundred_queries_answered_in_reverse_over_one_tcp_connection() {
    let peer = DotServer::plain(StreamBehaviour::Reverse(100)).await;
    let endpoint = Arc::new(StreamEndpoint::tcp(
        peer.addr,
        StreamSettings::default(),
        Default::default(),
    ));
    let mut asked = tokio::task::JoinSet::new();
    for i in 0..100 {
        let endpoint = Arc::clone(&endpoint);
        asked.spawn(async move {
            let name = format!("q{i}.test.");
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            let reply = endpoint
                .exchange(&dot::query(&name, RecordType::A), deadline)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(dot::parse_reply(&reply), (name, true));
        });
    }
    while let Some(done) = asked.join_next().await {
        done.expect("every query gets its own reply");
    }
    assert_eq!((endpoint.connects(), peer.connections()), (1, 1));
}

#[tokio::test]
async fn a_tcp_connection_that_hangs_is_given_up_and_its_queries_answered_on_a_new_one() {
    let peer = DotServer::plain(StreamBehaviour::SilentFirst).await;
    let settings = StreamSettings {
        idle_timeout: Duration::from_millis(300),
        ..StreamSettings::default()
    };
    let endpoint = StreamEndpoint::tcp(peer.addr, settings, Default::default());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let reply = endpoint
        .exchange(&dot::query("a.test.", RecordType::A), deadline)
        .await
        .expect("answered on the second connection, within the deadline");
    assert_eq!(dot::parse_reply(&reply), ("a.test.".to_string(), true));
    assert_eq!((endpoint.connects(), peer.connections()), (2, 2));
}

/// Queries pipelined on one connection with the same ID (RFC 7766 §7: a client should not,
/// but a server must cope) each get a reply of their own, complete and carrying the question
/// it answers — two of them the same question, one of them another.
#[tokio::test]
async fn pipelined_queries_with_one_id_each_get_their_own_complete_answer() {
    use tokio::io::AsyncWriteExt;
    let names = ["one.example.com.", "two.example.com."];
    let mut builder = FakeDns::builder();
    for (i, name) in (1u8..).zip(names) {
        let records: Vec<Record> = (0..3).map(|j| rr::a(name, [192, 0, i, j])).collect();
        let slow = Behaviour::Delay(
            Duration::from_millis(50 * u64::from(i)),
            Answer::records(records),
        );
        builder = builder.on(name, RecordType::A, slow);
    }
    let upstream = builder.start().await;
    let meshdns = Meshdns::cached_failing_fast(&upstream, &[]).await;
    let asked = [names[0], names[1], names[0]];
    let mut stream = tokio::net::TcpStream::connect(meshdns.addr).await.unwrap();
    let mut frames = Vec::new();
    for name in asked {
        let mut msg = query(name, RecordType::A);
        msg.metadata.id = 7;
        frames.extend(support::frame_of(&msg.to_vec().unwrap()));
    }
    stream.write_all(&frames).await.unwrap();
    let mut answered = Vec::new();
    for _ in asked {
        let bytes = tokio::time::timeout(support::CLIENT_TIMEOUT, support::read_frame(&mut stream))
            .await
            .expect("a reply in time")
            .expect("a whole frame");
        let reply = Message::from_vec(&bytes).unwrap();
        assert_eq!(reply.id, 7);
        let name = reply.queries[0].name().to_ascii();
        assert_eq!(reply.answers.len(), 3, "{name}: the whole set");
        assert!(
            reply.answers.iter().all(|r| r.name.to_ascii() == name),
            "{name}"
        );
        answered.push(name);
    }
    answered.sort();
    assert_eq!(answered, [names[0], names[0], names[1]]);
}
