//! Memory held by misses in flight to a silent upstream, measured: flood (b) of the bench's
//! `overload` group (misses to a black-holed kube-dns, up to `MESHDNS_MAX_INFLIGHT` of them
//! waiting out their deadline) in small. A counting allocator around the system one tracks
//! the bytes live on the heap; each miss is a distinct name answered through
//! `Resolver::handle`, boxed as the task that runs a miss holds it, and polled until its
//! exchange has made both of its attempts. What a miss then holds is its future, the leader's
//! box of its resolution, its flight, the upstream's room for a second attempt, two sockets'
//! registrations and its copies of the query.
//!
//! It runs alone (`tests/memory/main.rs`): nothing else allocates in this process while it measures.

use std::future::Future;
use std::net::UdpSocket;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use meshdns::Config;
use meshdns::testing::background::Background;
use meshdns::testing::metrics::Metrics;
use meshdns::testing::query::Resolver;
use meshdns::testing::wire::Proto;

use crate::support::counting;

use counting::live;

use crate::support::waiting;

const SILENT: &str = "the upstream is silent: still waiting";

const MISSES: usize = 200;
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(50);

/// What one miss in flight may hold in all. Measured on x86_64 Linux (debug build, as
/// `cargo test` runs it): 9,528 bytes per miss before (the cache's future holding a
/// resolution passed by value twice, dead, besides the copy it boxes; the attempt's future
/// with room for a stream exchange), 5,221 after (the leader boxes the resolution it makes;
/// awaited inline it is 4,757, but glibc's heap then fragments further under a flood: 21.7
/// against 17.1 MiB peak). The bound leaves room for changes of layout; a change that crosses
/// it should say why a miss grew.
const BYTES_PER_MISS_BOUND: usize = 6_000;

type Miss<'a> = Pin<Box<dyn Future<Output = Option<Vec<u8>>> + 'a>>;

fn query(name: &str) -> Bytes {
    let mut query = Message::query();
    query.add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    Bytes::from(query.to_vec().unwrap())
}

#[test]
fn a_miss_waiting_on_a_silent_upstream_holds_little_memory() {
    crate::alone_on_one_thread(measure());
}

async fn measure() {
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let upstream = silent.local_addr().unwrap().to_string();
    let vars = [
        ("MESHDNS_UPSTREAMS", upstream.as_str()),
        ("MESHDNS_ATTEMPT_TIMEOUT", "50ms"),
        ("MESHDNS_TIMEOUT", "1s"),
    ];
    let config = Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .expect("a valid configuration");
    let metrics = Arc::new(Metrics::new());
    let background = Arc::new(Background::new(16));
    let resolver = Resolver::for_config(&config, metrics, &background);
    // The upstream fails until it is marked down and its probe runs, as in the flood: what
    // that allocates once is not the misses'.
    let warm: Vec<_> = (0..4)
        .map(|i| resolver.handle(query(&format!("warm{i}.flood.test.")), Proto::Udp))
        .collect();
    let answered = tokio::time::timeout(Duration::from_secs(10), join_all(warm)).await;
    assert!(answered.is_ok(), "answered (SERVFAIL) at the deadline");
    let queries: Vec<Bytes> = (0..MISSES)
        .map(|i| query(&format!("fx{i}.flood.test.")))
        .collect();
    let mut misses: Vec<Miss<'_>> = Vec::with_capacity(MISSES);

    let before = live();
    for query in &queries {
        misses.push(Box::pin(resolver.handle(query.clone(), Proto::Udp)));
    }
    waiting::poll_all(&mut misses, SILENT);
    // Past the attempt timeout every exchange makes its second attempt (the retry).
    tokio::time::sleep(ATTEMPT_TIMEOUT * 2).await;
    waiting::poll_all(&mut misses, SILENT);
    let held = usize::try_from(live() - before).expect("the misses hold memory");

    let per_miss = held / MISSES;
    println!("{held} bytes for {MISSES} misses in flight = {per_miss} bytes each");
    assert!(
        per_miss <= BYTES_PER_MISS_BOUND,
        "{per_miss} bytes per miss in flight, more than {BYTES_PER_MISS_BOUND}"
    );
    drop(misses);
}
