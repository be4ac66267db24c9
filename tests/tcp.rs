//! TCP from the client side (docs/design.md, "Limits and bad input"; RFC 7766 §6.2.1.1): several
//! queries on one connection are all answered, each as soon as it is ready.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
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
