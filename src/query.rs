//! One client query, from bytes to reply bytes: the cache-hit path, then inspect → route →
//! the route's resolver, over one immutable [`Snapshot`] of the configuration.
//!
//! This module routes. What each route does lives with it: [`passthrough`] (kube-dns),
//! [`rewrite`](crate::rewrite) (a cluster's zone), [`gather`](crate::gather) (distributed and
//! clusterset zones), [`own_names`]; the cache's protocol — lookup, in-flight sharing, stale,
//! remembered failures — is the cache's own ([`Cache::get_or_resolve`]). Requests are counted
//! and timed here, the one place every answer passes, and every reply is cut to the client's
//! size and has its AD bit cleared here. The answers made here belong to no route: REFUSED to
//! a zone transfer, SERVFAIL when nothing came before the deadline, and the NXDOMAIN of a
//! search-list expansion the router found (`search` decides which names).
//!
//! It owns the current snapshot (an atomic pointer that a reload swaps, [`Resolver::replace`]);
//! building one is the snapshot module's.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use hickory_proto::op::{Query, ResponseCode};
use hickory_proto::rr::RecordType;
use tokio::time::Instant;

use crate::background::Background;
use crate::cache::{Cache, Lookup, Miss};
use crate::config::Config;
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
pub(crate) enum FastPath {
    /// Served from the cache.
    Answered(Vec<u8>),
    /// Not served: what the cache-hit path made of the query when it is a plain one, so the
    /// miss neither reads the bytes nor routes the name again.
    Miss(Option<Routed>),
}

/// A plain query the cache-hit path read and routed: its view (the cache key filed under the
/// route's target), its route, and the snapshot that routed it. A route is valid only with the
/// snapshot it came from (its target's identity, the generation the answer is written with),
/// so the two travel together: a reload between the hit path and the miss changes neither.
#[derive(Debug)]
pub(crate) struct Routed {
    plain: Plain,
    route: Route,
    snapshot: Arc<Snapshot>,
}

/// Everything needed to answer queries; shared by all listeners.
#[derive(Debug)]
pub(crate) struct Resolver {
    snapshot: ArcSwap<Snapshot>,
    cache: Arc<Cache>,
    metrics: Arc<Metrics>,
    loops: Loops,
}

impl Resolver {
    /// The resolver of `config`: its cache (whose refreshes and cut legs run in `background`)
    /// and its first snapshot.
    pub(crate) fn for_config(
        config: &Config,
        metrics: Arc<Metrics>,
        background: &Arc<Background>,
    ) -> Self {
        let cache = Arc::new(Cache::new(
            &config.cache,
            metrics.cache(),
            Arc::clone(background),
        ));
        let snapshot = Snapshot::new(config, &cache, &metrics, background, None);
        Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            cache,
            loops: Loops::new(metrics.loops()),
            metrics,
        }
    }

    /// The snapshot queries start on now.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// The snapshot queries start on now, borrowed without counting a reference: what the UDP
    /// loop serves a whole batch of datagrams under (one load, not two per datagram). Dropped
    /// before any await, so a reload is never held up by it.
    pub(crate) fn current(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.snapshot.load()
    }

    /// Whether a client at `ip` is served, under the current snapshot.
    pub(crate) fn allows(&self, ip: std::net::IpAddr) -> bool {
        self.snapshot.load().allows(ip)
    }

    /// `MESHDNS_TIMEOUT`, as configured now: the deadline of one client query.
    pub(crate) fn timeout(&self) -> Duration {
        self.snapshot.load().timeout
    }

    /// Makes `snapshot` the one new queries start on; queries in flight finish on theirs.
    pub(crate) fn replace(&self, snapshot: Snapshot) {
        self.snapshot.store(Arc::new(snapshot));
    }

    pub(crate) fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Answers one query; `None` means the input is dropped without a reply.
    pub(crate) async fn handle(&self, bytes: Bytes, proto: Proto) -> Option<Vec<u8>> {
        let fast = self.answer_from_cache(&self.current(), &bytes, proto, Vec::new());
        match fast {
            FastPath::Answered(reply) => Some(reply),
            FastPath::Miss(routed) => self.handle_miss(bytes, proto, routed).await,
        }
    }

    /// The cache-hit path, synchronous and without parsing the message: a listener calls it
    /// before spending a task on the query. Only plain queries take it ([`Plain::read`]); hits
    /// are counted and timed here. `snapshot` is the one queries start on now
    /// ([`current`](Self::current)); a hit is written into `reply`, a buffer whose room is
    /// reused (the UDP loop's replies allocate nothing).
    pub(crate) fn answer_from_cache(
        &self,
        snapshot: &Arc<Snapshot>,
        bytes: &[u8],
        proto: Proto,
        reply: Vec<u8>,
    ) -> FastPath {
        let started = Instant::now();
        let Some(mut plain) = Plain::read(bytes) else {
            return FastPath::Miss(None);
        };
        let route =
            (snapshot.router).route(wire::question_name(plain.question(bytes)).unwrap_or_default());
        plain.set_target(snapshot.target(&route));
        let hit =
            (plain.shared_key()).map(|key| (key, self.cache.lookup(key, bytes, started, reply)));
        let Some((key, Lookup::Fresh { reply, refresh })) = hit else {
            return FastPath::Miss(Some(Routed {
                plain,
                route: route.into_owned(),
                snapshot: Arc::clone(snapshot),
            }));
        };
        let kind = route.kind();
        if refresh
            && let Inspected::Query(request) =
                inspect(Bytes::copy_from_slice(bytes), Some(plain.clone()))
        {
            let (deadline, route) = (started + snapshot.timeout, route.into_owned());
            let snapshot = Arc::clone(snapshot);
            let generation = snapshot.generation;
            self.cache.refresh(key, generation, move || {
                resolve(snapshot, route, request, deadline)
            });
        }
        let reply = reply::fit_wire(reply, proto.reply_limit(plain.payload()));
        self.metrics
            .record_request(proto, kind, &reply, started.elapsed());
        FastPath::Answered(reply)
    }

    /// Everything but a cache hit: inspect, route, resolve through the cache (which shares the
    /// exchange with identical misses and stores the answer), and cut to the client's size.
    /// `routed` is what [`answer_from_cache`](Self::answer_from_cache) made of the query, if
    /// it is a plain one: its view, its route and the snapshot the query then runs on. `bytes`
    /// is shared with the exchange, which relays it on pass-through.
    pub(crate) async fn handle_miss(
        &self,
        bytes: Bytes,
        proto: Proto,
        routed: Option<Routed>,
    ) -> Option<Vec<u8>> {
        let started = Instant::now();
        let (plain, routed) = (routed.map(|r| (r.plain, (r.snapshot, r.route)))).unzip();
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
        let (snapshot, route) = routed.unwrap_or_else(|| {
            let snapshot = self.snapshot.load_full();
            let route = snapshot.router.route(request.name()).into_owned();
            (snapshot, route)
        });
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
            let resolution = {
                let request = Arc::clone(&request);
                move || resolve(snapshot, route, request, deadline)
            };
            let answered = match key {
                Some(key) => {
                    self.cache
                        .get_or_resolve(&key, request.bytes(), miss, resolution)
                        .await
                }
                None => Some(Box::pin(resolution()).await),
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

#[cfg(test)]
mod tests {
    use hickory_proto::op::Message;
    use hickory_proto::rr::{Name, RData};

    use super::*;
    use crate::config::tests::config_from;

    /// A pod at `ip`, whose own name `mongo-0.mongo.db.svc.cluster.local` is answered here.
    fn pod_at(ip: &str) -> Config {
        config_from(&[
            ("MESHDNS_UPSTREAMS", "127.0.0.1:9"),
            ("MESHDNS_POD_IP", ip),
            ("MESHDNS_POD_HOSTNAME", "mongo-0"),
            ("MESHDNS_POD_SUBDOMAIN", "mongo"),
            ("MESHDNS_POD_NAMESPACE", "db"),
        ])
        .unwrap()
    }

    fn addresses(reply: &[u8]) -> Vec<String> {
        let reply = Message::from_vec(reply).unwrap();
        (reply.answers.iter())
            .map(|record| match &record.data {
                RData::A(a) => a.to_string(),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_miss_is_answered_on_the_snapshot_that_routed_it_when_a_reload_comes_between() {
        let (old, new) = (pod_at("10.8.1.2"), pod_at("10.8.1.3"));
        let metrics = Arc::new(Metrics::new());
        let background = Arc::new(Background::new(4));
        let resolver = Resolver::for_config(&old, Arc::clone(&metrics), &background);
        let first = resolver.snapshot();
        let second = Snapshot::new(&new, resolver.cache(), &metrics, &background, Some(&first));
        let mut query = Message::query();
        let own = Name::from_ascii("mongo-0.mongo.db.svc.cluster.local.").unwrap();
        query.add_query(Query::query(own, RecordType::A));
        let query = Bytes::from(query.to_vec().unwrap());

        let FastPath::Miss(routed) =
            resolver.answer_from_cache(&resolver.current(), &query, Proto::Udp, Vec::new())
        else {
            panic!("nothing is cached yet");
        };
        assert!(routed.is_some(), "a plain query is routed on the hit path");
        resolver.replace(second);
        let reply = resolver
            .handle_miss(query.clone(), Proto::Udp, routed)
            .await;
        assert_eq!(addresses(&reply.unwrap()), ["10.8.1.2"]);
        // The next query starts on the new snapshot, and the answer cached under the old one's
        // target is not its answer.
        let reply = resolver.handle(query, Proto::Udp).await;
        assert_eq!(addresses(&reply.unwrap()), ["10.8.1.3"]);
    }
}
