//! One client query, from bytes to reply bytes: the cache-hit path, then inspect → route →
//! the route's resolver, over one immutable [`Snapshot`] of the configuration.
//!
//! This module only routes. What each route does lives with it: [`passthrough`] (kube-dns),
//! [`rewrite`](crate::rewrite) (a cluster's zone), [`gather`](crate::gather) (distributed and
//! clusterset zones); the cache's protocol — lookup, in-flight sharing, stale, remembered
//! failures — is the cache's own ([`Cache::get_or_resolve`]). Requests are counted and timed
//! here, the one place every answer passes.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use hickory_proto::op::{Query, ResponseCode};
use hickory_proto::rr::RecordType;
use tokio::time::Instant;

use crate::cache::{Cache, Lookup, Miss};
use crate::loops::Loops;
use crate::metrics::{DropReason, Metrics};
use crate::own_names;
use crate::passthrough;
use crate::reply::{self, ExtendedError};
use crate::request::{Inspected, Plain, Request, inspect};
use crate::route::Route;
use crate::snapshot::Snapshot;
use crate::wire::{self, Proto};

/// What the cache-hit path made of a query.
#[derive(Debug)]
pub enum FastPath {
    /// Served from the cache.
    Answered(Vec<u8>),
    /// Not served: what the cache-hit path read of the query, when it is a plain one (its
    /// cache key among it), so the miss does not read the bytes again.
    Miss(Option<Plain>),
}

/// Everything needed to answer queries; shared by all listeners.
#[derive(Debug)]
pub struct Resolver {
    snapshot: ArcSwap<Snapshot>,
    cache: Arc<Cache>,
    metrics: Arc<Metrics>,
    loops: Loops,
}

impl Resolver {
    pub fn new(snapshot: Snapshot, cache: Arc<Cache>, metrics: Arc<Metrics>) -> Self {
        Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            cache,
            loops: Loops::new(metrics.loops()),
            metrics,
        }
    }

    /// The snapshot queries start on now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Whether a client at `ip` is served, under the current snapshot.
    pub fn allows(&self, ip: std::net::IpAddr) -> bool {
        self.snapshot.load().allows(ip)
    }

    /// `MESHDNS_TIMEOUT`, as configured now: the deadline of one client query.
    pub fn timeout(&self) -> Duration {
        self.snapshot.load().timeout
    }

    /// Makes `snapshot` the one new queries start on; queries in flight finish on theirs.
    pub fn replace(&self, snapshot: Snapshot) {
        self.snapshot.store(Arc::new(snapshot));
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Answers one query; `None` means the input is dropped without a reply.
    pub async fn handle(&self, bytes: Bytes, proto: Proto) -> Option<Vec<u8>> {
        match self.answer_from_cache(&bytes, proto) {
            FastPath::Answered(reply) => Some(reply),
            FastPath::Miss(plain) => self.handle_miss(bytes, proto, plain).await,
        }
    }

    /// The cache-hit path, synchronous and without parsing the message: a listener calls it
    /// before spending a task on the query. Only plain queries take it ([`Plain::read`]); hits
    /// are counted and timed here.
    pub fn answer_from_cache(&self, bytes: &[u8], proto: Proto) -> FastPath {
        let started = Instant::now();
        let Some(mut plain) = Plain::read(bytes) else {
            return FastPath::Miss(None);
        };
        let snapshot = self.snapshot.load();
        let route =
            (snapshot.router).route(wire::question_name(plain.question(bytes)).unwrap_or_default());
        plain.set_target(snapshot.target(&route));
        let Some(key) = plain.shared_key() else {
            return FastPath::Miss(Some(plain));
        };
        let Lookup::Fresh { reply, refresh } = self.cache.lookup(key, bytes, started) else {
            return FastPath::Miss(Some(plain));
        };
        let kind = route.kind();
        if refresh
            && let Inspected::Query(request) =
                inspect(Bytes::copy_from_slice(bytes), Some(plain.clone()))
        {
            let (deadline, route) = (started + snapshot.timeout, route.into_owned());
            let snapshot = arc_swap::Guard::into_inner(snapshot);
            let generation = snapshot.generation;
            let resolution = resolve(snapshot, route, request, deadline);
            self.cache.refresh(key, generation, resolution);
        }
        let reply = reply::fit_wire(reply, proto.reply_limit(plain.payload()));
        self.metrics
            .record_request(proto, kind, &reply, started.elapsed());
        FastPath::Answered(reply)
    }

    /// Everything but a cache hit: inspect, route, resolve through the cache (which shares the
    /// exchange with identical misses and stores the answer), and cut to the client's size.
    /// `plain` is what [`answer_from_cache`](Self::answer_from_cache) read of the query, if it
    /// is a plain one. `bytes` is shared with the exchange, which relays it on pass-through.
    pub async fn handle_miss(
        &self,
        bytes: Bytes,
        proto: Proto,
        plain: Option<Plain>,
    ) -> Option<Vec<u8>> {
        let started = Instant::now();
        let request = match inspect(bytes, plain) {
            Inspected::Query(request) => request,
            Inspected::Reply(reply) => {
                self.metrics.dropped(DropReason::Malformed);
                return Some(reply);
            }
            Inspected::Drop => {
                self.metrics.dropped(DropReason::Malformed);
                return None;
            }
        };
        let snapshot = self.snapshot.load_full();
        let route = snapshot.router.route(request.name()).into_owned();
        let kind = route.kind();
        if request.came_back() {
            let reply = self.loops.answer(request.message());
            self.metrics
                .record_request(proto, kind, &reply, started.elapsed());
            return Some(reply);
        }
        let limit = proto.reply_limit(request.opt().map(|o| o.payload));
        tracing::debug!(name = %request.query().name(), route = kind.label(), proto = proto.label(), "query");
        let complete = if is_transfer(request.query()) {
            // A pod's stub resolver is no zone transfer path.
            reply::encode_fitted(
                &reply::synthesized(request.message(), ResponseCode::Refused),
                wire::MAX_MESSAGE,
            )
        } else {
            let deadline = started + snapshot.timeout;
            let miss = Miss {
                deadline,
                client_timer: snapshot.attempt_timeout,
                upstream_failing: snapshot.upstream_failing(&route),
                generation: snapshot.generation,
            };
            let key = (request.shared_key()).map(|key| key.for_target(snapshot.target(&route)));
            // Boxed here, before the cache gets it: `get_or_resolve`'s future kept a
            // resolution passed by value twice for as long as it waited (an async fn's argument
            // stays even once moved on), and this one would keep room for it too, to await it
            // when the reply may not be shared. Measured as the miss task's 4,864 bytes falling
            // to 1,920 (2,560 with the unshared branch's room left).
            let resolution = Box::pin(resolve(snapshot, route, Arc::clone(&request), deadline));
            let answered = match key {
                Some(key) => {
                    self.cache
                        .get_or_resolve(&key, request.bytes(), miss, resolution)
                        .await
                }
                None => Some(resolution.await),
            };
            answered.unwrap_or_else(|| {
                reply::servfail_bytes(
                    request.message(),
                    ExtendedError::NoReachableAuthority,
                    "no answer before the deadline",
                )
            })
        };
        let mut reply = reply::fit_wire(complete, limit);
        // RFC 6840 §5.8 for every route (a hit patches its copy the same way).
        wire::clear_unasked_ad(&mut reply, request.bytes(), request.dnssec_ok());
        self.metrics
            .record_request(proto, kind, &reply, started.elapsed());
        Some(reply)
    }
}

fn is_transfer(query: &Query) -> bool {
    matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR)
}

/// The complete reply (not yet cut to the client's size) along `route`. It owns what it needs
/// (no borrowed arguments), so the cache may finish it in the background after the client
/// was answered.
async fn resolve(
    snapshot: Arc<Snapshot>,
    route: Route,
    request: Arc<Request>,
    deadline: Instant,
) -> Vec<u8> {
    match route {
        Route::Passthrough => passthrough::forward(&snapshot.local, &request, deadline).await,
        // The routes to one peer: its zone (names rewritten), a reverse name of its networks
        // (asked as is, the reply mapped back), a namespace it claims (forwarded verbatim).
        Route::Cluster(peer) => peer.ask(&request, deadline, snapshot.negative_ttl).await,
        Route::Reverse(peer) => peer.ask_verbatim(&request, deadline).await,
        Route::Namespace(peer) => passthrough::forward(&peer.upstream, &request, deadline).await,
        Route::Distributed(naming) | Route::Clusterset(naming) => {
            (snapshot.gatherer)
                .answer(&naming, &request, deadline)
                .await
        }
        Route::SelfName(own) => own_names::answer(&own, request.query(), request.message()),
        Route::Search(domain) => {
            let nxdomain = ResponseCode::NXDomain;
            let reply =
                reply::negative(request.message(), nxdomain, &domain, snapshot.negative_ttl);
            reply::encode_fitted(&reply, wire::MAX_MESSAGE)
        }
    }
}
