//! Memory held by upstream exchanges waiting on a silent endpoint, measured: what a miss in
//! flight costs the upstream side during flood (b) of the bench's `overload` group (misses to
//! a black-holed kube-dns, each waiting out its deadline). A counting allocator around the
//! system one tracks the bytes live on the heap; the exchanges are boxed, as the task that
//! runs a miss holds its exchange, and each has made both of its attempts (the second, after
//! the attempt timeout, listening beside the first), so each holds its own future, the room
//! for its second attempt, two sockets' registrations and its copies of the query.
//!
//! It runs alone (`tests/memory/main.rs`): nothing else allocates in this process while it measures.

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use meshdns::testing::config::{self, Transport};
use meshdns::testing::metrics::Metrics;
use meshdns::testing::upstream::{Answered, GroupSpec, Upstream, UpstreamError};
use tokio::time::Instant;

use crate::support::counting;

use counting::live;

use crate::support::waiting;

const SILENT: &str = "the endpoint is silent: still waiting";

const EXCHANGES: usize = 200;
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(50);

/// What one waiting exchange may hold in all. Measured on x86_64 Linux (debug build, as
/// `cargo test` runs it): 2,830 bytes per exchange before the attempt's future shed its room
/// for a stream exchange (an attempt's future is held once inline and once in the box of a
/// second attempt), 2,307 after. The bound leaves 10% for changes of layout; a change that
/// crosses it should say why the exchange grew.
const BYTES_PER_EXCHANGE_BOUND: usize = 2_560;

type Exchange<'a> = Pin<Box<dyn Future<Output = Result<Answered, UpstreamError>> + 'a>>;

#[test]
fn an_exchange_waiting_on_a_silent_endpoint_holds_little_memory() {
    crate::alone_on_one_thread(measure());
}

async fn measure() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr: SocketAddr = silent.local_addr().unwrap();
    let spec = GroupSpec {
        name: "local".into(),
        endpoints: vec![config::Endpoint::Addr(addr)],
        transport: Transport::Udp,
        tls_name: None,
        tls: None,
        attempt_timeout: ATTEMPT_TIMEOUT,
        own: Vec::new(),
    };
    let group: Arc<Upstream> = Upstream::new(
        spec,
        None,
        &Metrics::new().upstream(),
        meshdns::testing::background::Owner::default(),
    );
    let mut query = Message::query();
    query.add_query(Query::query(
        Name::from_ascii("fx1.flood.test.").unwrap(),
        RecordType::A,
    ));
    let query = query.to_vec().unwrap();
    // The endpoint fails until it is marked down and its probe runs, as in the flood: what
    // that allocates once is not the exchanges'.
    for _ in 0..4 {
        let failed = group
            .exchange(&query, Instant::now() + ATTEMPT_TIMEOUT * 2)
            .await;
        assert!(failed.is_err());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut exchanges: Vec<Exchange<'_>> = Vec::with_capacity(EXCHANGES);

    let before = live();
    for _ in 0..EXCHANGES {
        exchanges.push(Box::pin(group.exchange(&query, deadline)));
    }
    waiting::poll_all(&mut exchanges, SILENT);
    // Past the attempt timeout every exchange makes its second attempt (the retry).
    tokio::time::sleep(ATTEMPT_TIMEOUT * 2).await;
    waiting::poll_all(&mut exchanges, SILENT);
    let held = usize::try_from(live() - before).expect("the exchanges hold memory");

    let per_exchange = held / EXCHANGES;
    println!("{held} bytes for {EXCHANGES} waiting exchanges = {per_exchange} bytes each");
    assert!(
        per_exchange <= BYTES_PER_EXCHANGE_BOUND,
        "{per_exchange} bytes per waiting exchange, more than {BYTES_PER_EXCHANGE_BOUND}"
    );
    drop(exchanges);
}
