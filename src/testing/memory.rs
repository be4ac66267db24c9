//! The situations that the memory measurements (`tests/memory/`) weigh, built from inside the
//! crate so that what they drive stays `pub(crate)`: each is a value made before measuring,
//! with the measured work as one method and what the test asserts on as its result. The test
//! binary keeps the counting allocator, runs each alone, and holds the bounds and the
//! assertions; this module owns only the situations — what is made first, what the measured
//! work does — and never reads the heap itself, nor changes how the crate behaves: it calls
//! only what the crate's own paths call. Where the measured work holds futures that
//! borrow the scenario, the test hands in its reading of the heap (`live`), taken just before
//! and just after that work.
//!
//! - [`CacheFill`]: typical entries inserted into a cache sized for them.
//! - [`MissesInFlight`]: misses waiting on a silent kube-dns, each through `Resolver::handle`.
//! - [`WaitingExchanges`]: upstream exchanges waiting on a silent endpoint.

use std::future::Future;
use std::net::{SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use tokio::time::Instant;

use crate::background::{Background, Owner};
use crate::cache::{Cache, CacheKey, Generation};
use crate::config::{self, CacheConfig, Config, Transport};
use crate::metrics::Metrics;
use crate::query::Resolver;
use crate::upstream::{GroupSpec, Upstream};
use crate::wire::Proto;

/// The attempt timeout of the silent upstream's exchanges: past twice this, each has made its
/// second attempt (the retry), listening beside the first.
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(50);

/// How many failed exchanges mark a silent upstream down and start its probe, before measuring:
/// what that allocates once is not the measured work's.
const WARMING: usize = 4;

/// A cache sized for its entries, and the entries' keys and replies, made before measuring.
pub struct CacheFill {
    cache: Cache,
    entries: Vec<(CacheKey, Vec<u8>)>,
    now: Instant,
}

impl CacheFill {
    /// A cache sized for `entries` (each a client's query and the upstream's reply, as wire
    /// bytes) and their keys. Every query must be cacheable.
    pub fn new(entries: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        let config = CacheConfig {
            size: entries.len(),
            max_ttl: Duration::from_secs(3600),
            negative_ttl: Duration::from_secs(5),
            serve_stale: Duration::from_secs(300),
        };
        let cache = Cache::new(
            &config,
            Metrics::new().cache(),
            Arc::new(Background::new(1)),
        );
        let entries = (entries.into_iter())
            .map(|(query, reply)| {
                let key = CacheKey::from_request(&query).expect("a cacheable query");
                (key, reply)
            })
            .collect();
        let now = Instant::now();
        Self {
            cache,
            entries,
            now,
        }
    }

    /// The measured work: every entry inserted, in order.
    pub fn insert_all(&self) {
        for (key, reply) in &self.entries {
            self.cache
                .insert(key, reply, self.now, Generation::default());
        }
    }

    /// How many entries the cache holds.
    pub fn held(&self) -> usize {
        self.cache.len()
    }
}

/// What the futures of a measured wait hold: the bytes the heap grew by while they were
/// started and polled (`live` read before and after), and whether every one of them was
/// still waiting each time it was polled.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub bytes: isize,
    pub still_waiting: bool,
}

/// Misses of distinct names to a silent kube-dns (flood (b) of the bench's `overload` group,
/// in small), answered through `Resolver::handle` as a UDP listener asks.
pub struct MissesInFlight {
    resolver: Resolver,
    queries: Vec<Bytes>,
    /// The root of the resolver's tasks, held as `run` holds it.
    _background: Arc<Background>,
    /// Never answers, and is kept open so that nothing refuses the queries either.
    _silent: UdpSocket,
}

impl MissesInFlight {
    /// A resolver whose kube-dns is silent and the queries of `count` misses, made and
    /// [warmed](Self::warm) before measuring: `None` when the warming misses were not answered
    /// by their deadline. Must be made inside the runtime.
    pub async fn warmed(count: usize) -> Option<Self> {
        let misses = Self::new(count);
        let answered = misses.warm().await;
        answered.then_some(misses)
    }

    /// A resolver whose kube-dns is silent, and the queries of `count` misses.
    fn new(count: usize) -> Self {
        let silent = silent_socket();
        let upstream = silent.local_addr().expect("a bound socket").to_string();
        let attempt_timeout = format!("{}ms", ATTEMPT_TIMEOUT.as_millis());
        let vars = [
            ("MESHDNS_UPSTREAMS", upstream.as_str()),
            ("MESHDNS_ATTEMPT_TIMEOUT", attempt_timeout.as_str()),
            ("MESHDNS_TIMEOUT", "1s"),
        ];
        let config = Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .expect("a valid configuration");
        let background = Arc::new(Background::new(16));
        let resolver = Resolver::for_config(&config, Arc::new(Metrics::new()), &background);
        let queries = (0..count)
            .map(|i| query(&format!("fx{i}.flood.test.")))
            .collect();
        Self {
            resolver,
            queries,
            _background: background,
            _silent: silent,
        }
    }

    /// Before measuring: a few misses fail until the upstream is marked down and its probe
    /// runs, as in the flood. True when each was answered (SERVFAIL) by its deadline.
    async fn warm(&self) -> bool {
        let warm: Vec<_> = (0..WARMING)
            .map(|i| (self.resolver).handle(query(&format!("warm{i}.flood.test.")), Proto::Udp))
            .collect();
        let answered = tokio::time::timeout(Duration::from_secs(10), join_all(warm)).await;
        answered.is_ok()
    }

    /// The measured work: every miss started, boxed as the task that runs a miss holds it, and
    /// polled until its exchange has made both of its attempts.
    pub async fn hold(&self, live: impl Fn() -> isize) -> Held {
        let start = |i: usize| (self.resolver).handle(self.queries[i].clone(), Proto::Udp);
        hold_waiting(self.queries.len(), start, live).await
    }
}

/// Exchanges of one query with a UDP group whose only endpoint is silent.
pub struct WaitingExchanges {
    group: Arc<Upstream>,
    query: Vec<u8>,
    count: usize,
    /// Never answers, and is kept open so that nothing refuses the queries either.
    _silent: UdpSocket,
}

impl WaitingExchanges {
    /// A group whose endpoint is silent and the query of `count` exchanges, made and
    /// [warmed](Self::warm) before measuring: `None` when a warming exchange did not fail.
    pub async fn warmed(count: usize) -> Option<Self> {
        let exchanges = Self::new(count);
        let failed = exchanges.warm().await;
        failed.then_some(exchanges)
    }

    /// A group whose endpoint is silent, and the query of `count` exchanges.
    fn new(count: usize) -> Self {
        let silent = silent_socket();
        let addr: SocketAddr = silent.local_addr().expect("a bound socket");
        let spec = GroupSpec {
            name: "local".into(),
            endpoints: vec![config::Endpoint::Addr(addr)],
            transport: Transport::Udp,
            tls_name: None,
            tls: None,
            attempt_timeout: ATTEMPT_TIMEOUT,
            own: Vec::new(),
        };
        let group = Upstream::new(spec, None, &Metrics::new().upstream(), Owner::default());
        Self {
            group,
            query: query("fx1.flood.test.").to_vec(),
            count,
            _silent: silent,
        }
    }

    /// Before measuring: a few exchanges fail until the endpoint is marked down and its probe
    /// runs, as in the flood. True when every one of them failed.
    async fn warm(&self) -> bool {
        let mut failed = true;
        for _ in 0..WARMING {
            let deadline = Instant::now() + ATTEMPT_TIMEOUT * 2;
            failed &= self.group.exchange(&self.query, deadline).await.is_err();
        }
        failed
    }

    /// The measured work: every exchange started, boxed as the task that runs a miss holds its
    /// exchange, and polled until it has made both of its attempts.
    pub async fn hold(&self, live: impl Fn() -> isize) -> Held {
        let deadline = Instant::now() + Duration::from_secs(10);
        let start = |_| self.group.exchange(&self.query, deadline);
        hold_waiting(self.count, start, live).await
    }
}

/// Starts `count` futures with `start`, each boxed, and polls each by hand (so that nothing
/// else, a task or a set of futures, allocates beside them) as its task would be on a wake-up:
/// once at once, and once more past twice the attempt timeout, when each has made its second
/// attempt. The heap is read with `live` just before the first is started and after the last
/// poll; the room for the futures is made before.
async fn hold_waiting<Waiting: Future>(
    count: usize,
    start: impl Fn(usize) -> Waiting,
    live: impl Fn() -> isize,
) -> Held {
    let mut waiting: Vec<Pin<Box<Waiting>>> = Vec::with_capacity(count);
    let before = live();
    waiting.extend((0..count).map(|i| Box::pin(start(i))));
    let mut still_waiting = all_pending(&mut waiting);
    tokio::time::sleep(ATTEMPT_TIMEOUT * 2).await;
    still_waiting &= all_pending(&mut waiting);
    let bytes = live() - before;
    Held {
        bytes,
        still_waiting,
    }
}

/// Polls each of `futures` once, as a wake-up would: true when none of them has finished.
fn all_pending<F: Future>(futures: &mut [Pin<Box<F>>]) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    let mut pending = true;
    for future in futures {
        pending &= future.as_mut().poll(&mut cx).is_pending();
    }
    pending
}

/// A UDP socket on loopback that nobody reads: an upstream that never answers.
fn silent_socket() -> UdpSocket {
    UdpSocket::bind("127.0.0.1:0").expect("a loopback socket")
}

/// A query for the A records of `name`, as wire bytes.
fn query(name: &str) -> Bytes {
    let mut query = Message::query();
    let name = Name::from_ascii(name).expect("a valid name");
    query.add_query(Query::query(name, RecordType::A));
    Bytes::from(query.to_vec().expect("a query encodes"))
}
