//! What one TCP connection may hold on the heap (docs/design.md, "Memory and overload"): a
//! client that pipelines thousands of queries on a connection it keeps open costs meshdns the
//! queries being answered at once (at most 32), not every query it ever sent.
//!
//! Found by the overload benchmark: 300 connections that each sent 2,000 pipelined queries and
//! kept the connection open took meshdns to 1 GiB — every answered query's task stayed on the
//! heap until the connection closed. A counting allocator measures the heap here; the test runs
//! alone (`tests/memory/main.rs`), so nothing else allocates in this process while it measures.

use crate::support;

use crate::support::counting;

use hickory_proto::rr::RecordType;
use support::{Answer, Behaviour, FakeDns, Meshdns, frame_of, query, read_frame};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Queries pipelined on the one connection.
const QUERIES: usize = 2_000;

/// What the connection may leave on the heap once every reply is read: the connection's
/// buffers and a few finished queries. One retained query costs over 1.5 KB, so keeping all
/// 2,000 would be several MB.
const HEAP_BOUND: isize = 128 * 1024;

/// On one thread, as meshdns runs by default.
#[test]
fn answered_queries_of_an_open_tcp_connection_leave_the_heap() {
    crate::alone_on_one_thread(measure());
}

async fn measure() {
    let upstream = FakeDns::builder()
        .otherwise(Behaviour::Answer(Answer::nxdomain("example.com.")))
        .start()
        .await;
    // One name, cached after the first query: the fake upstream records what it sees, and
    // only meshdns's heap should grow here.
    let meshdns = Meshdns::before(&upstream, &[("MESHDNS_CACHE_SIZE", "100")]).await;
    let one = frame_of(&query("host.example.com.", RecordType::A).to_vec().unwrap());
    let queries: Vec<u8> = one.repeat(QUERIES);
    let mut stream = TcpStream::connect(meshdns.addr).await.unwrap();

    let before = counting::live();
    stream.write_all(&queries).await.unwrap();
    for answered in 0..QUERIES {
        let reply = tokio::time::timeout(support::CLIENT_TIMEOUT, read_frame(&mut stream)).await;
        assert!(
            matches!(reply, Ok(Some(_))),
            "reply {answered} of {QUERIES}"
        );
    }
    let held = counting::live() - before;

    println!("heap held by the open connection after {QUERIES} answered queries: {held} bytes");
    assert!(
        held < HEAP_BOUND,
        "the open connection holds {held} bytes after {QUERIES} answered queries \
         (bound {HEAP_BOUND})"
    );
    drop(stream);
}
