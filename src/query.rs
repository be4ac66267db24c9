//! One client query, from bytes to reply bytes: inspect, route, ask, answer. This is the
//! pipeline every listener calls; it owns the per-query deadline (`MESHDNS_TIMEOUT`).

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use tokio::time::{Instant, timeout, timeout_at};

use crate::cache::{Cache, CacheKey, Flight, Lookup};
use crate::config::{Config, Transport};
use crate::gather::{Gatherer, Naming};
use crate::metrics::{self, DropReason};
use crate::reply::{self, ExtendedError};
use crate::request::{Inspected, inspect};
use crate::rewrite::ZoneMap;
use crate::route::{Route, Router};
use crate::upstream::Upstream;
use crate::wire;

/// The transport a query came in on: it decides how large the reply may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Udp,
    Tcp,
}

impl Proto {
    /// How large a reply may be: over UDP the client's EDNS payload size (512 without EDNS,
    /// and never less, RFC 6891), over TCP any size.
    pub fn reply_limit(self, edns_payload: Option<u16>) -> usize {
        match self {
            Proto::Udp => usize::from(edns_payload.unwrap_or(0)).max(wire::CLASSIC_UDP_SIZE),
            Proto::Tcp => wire::MAX_MESSAGE,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
}

/// What the cache-hit path made of a query.
#[derive(Debug)]
pub enum FastPath {
    /// Served from the cache.
    Answered(Vec<u8>),
    /// Not served: the key to share the miss under, when the query is cacheable.
    Miss(Option<CacheKey>),
}

/// A cluster as the query path sees it: how its names map, and whom to ask.
#[derive(Debug)]
struct ClusterRoute {
    map: ZoneMap,
    upstream: Arc<Upstream>,
}

/// Everything needed to answer queries; shared by all listeners.
#[derive(Debug)]
pub struct Resolver {
    router: Router,
    local: Arc<Upstream>,
    clusters: Vec<ClusterRoute>,
    gatherer: Gatherer,
    cache: Arc<Cache>,
    timeout: Duration,
    attempt_timeout: Duration,
    negative_ttl: Duration,
}

/// The name of the local upstream group when `MESHDNS_LOCAL_CLUSTER` is unset.
pub const LOCAL_UPSTREAM: &str = "local";

impl Resolver {
    pub fn new(config: &Config) -> Self {
        let local_name = config
            .clusters
            .iter()
            .find(|c| c.is_local)
            .map_or(LOCAL_UPSTREAM, |c| c.name.as_str());
        let local = Arc::new(Upstream::new(
            local_name,
            &config.upstreams,
            Transport::Udp,
            config.attempt_timeout,
        ));
        let clusters: Vec<ClusterRoute> = config
            .clusters
            .iter()
            .map(|cluster| ClusterRoute {
                map: ZoneMap {
                    client: cluster.zone.clone(),
                    upstream: cluster
                        .domain
                        .prepend_label("svc")
                        .unwrap_or_else(|_| cluster.domain.clone()),
                },
                upstream: if cluster.is_local {
                    Arc::clone(&local)
                } else {
                    Arc::new(Upstream::new(
                        &cluster.name,
                        &cluster.endpoints,
                        cluster.transport,
                        config.attempt_timeout,
                    ))
                },
            })
            .collect();
        let cache = Arc::new(Cache::new(&config.cache));
        let gatherer = Gatherer::new(
            config,
            Arc::clone(&cache),
            clusters.iter().map(|c| Arc::clone(&c.upstream)).collect(),
        );
        Self {
            router: Router::new(config),
            local,
            clusters,
            gatherer,
            cache,
            timeout: config.timeout,
            attempt_timeout: config.attempt_timeout,
            negative_ttl: config.cache.negative_ttl,
        }
    }

    /// Answers one query; `None` means the input is dropped without a reply.
    pub async fn handle(self: &Arc<Self>, bytes: &[u8], proto: Proto) -> Option<Vec<u8>> {
        match self.answer_from_cache(bytes, proto) {
            FastPath::Answered(reply) => Some(reply),
            FastPath::Miss(key) => self.handle_miss(bytes, proto, key).await,
        }
    }

    /// The cache-hit path, synchronous and without parsing the message: a listener calls it
    /// before spending a task on the query. Hits are counted and measured here.
    pub fn answer_from_cache(self: &Arc<Self>, bytes: &[u8], proto: Proto) -> FastPath {
        let started = Instant::now();
        // Only version-0 EDNS is served here; anything else gets its BADVERS on the slow path.
        let Some(opt) = wire::opt(bytes).filter(|opt| opt.is_none_or(|o| o.version == 0)) else {
            return FastPath::Miss(None);
        };
        let Some(key) = CacheKey::from_request_and_opt(bytes, opt) else {
            return FastPath::Miss(None);
        };
        let Lookup::Fresh { reply, refresh } = self.cache.lookup(&key, bytes, started) else {
            return FastPath::Miss(Some(key));
        };
        let route = self
            .router
            .route(wire::first_question_name(bytes).unwrap_or_default());
        if refresh && let Ok(request) = Message::from_vec(bytes) {
            self.prefetch(key, bytes.to_vec(), request, route);
        }
        let limit = proto.reply_limit(opt.map(|o| o.payload));
        let reply = reply::fit_wire(reply, limit);
        metrics::record_request(proto, route, &reply, started.elapsed());
        FastPath::Answered(reply)
    }

    /// Everything but a cache hit: parse, route, resolve (sharing the upstream exchange with
    /// identical misses in flight), cache, and cut to the client's size. `key` is the cache key
    /// [`answer_from_cache`](Self::answer_from_cache) found no fresh entry for, if any.
    pub async fn handle_miss(
        self: &Arc<Self>,
        bytes: &[u8],
        proto: Proto,
        key: Option<CacheKey>,
    ) -> Option<Vec<u8>> {
        let started = Instant::now();
        let request = match inspect(bytes) {
            Inspected::Query(request) => request,
            Inspected::Reply(reply) => {
                metrics::dropped(DropReason::Malformed);
                return Some(reply);
            }
            Inspected::Drop => {
                metrics::dropped(DropReason::Malformed);
                return None;
            }
        };
        let limit = proto.reply_limit(request.edns.as_ref().map(|e| e.max_payload()));
        let deadline = started + self.timeout;
        let route = self.router.route(wire::first_question_name(bytes)?);
        tracing::debug!(name = %request.queries.first()?.name(), route = route.label(), proto = proto.label(), "query");
        let complete = match key {
            Some(key) => {
                self.shared_miss(&key, bytes, &request, route, deadline)
                    .await
            }
            None => self.resolve(route, bytes, &request, deadline).await,
        };
        let reply = reply::fit_wire(complete, limit);
        metrics::record_request(proto, route, &reply, started.elapsed());
        Some(reply)
    }

    /// A miss in front of [`resolve`](Self::resolve): one upstream exchange shared by
    /// identical misses in flight; its reply cached (and its TTLs cut to the cached ones), or,
    /// when the upstream failed, a stale entry.
    async fn shared_miss(
        self: &Arc<Self>,
        key: &CacheKey,
        bytes: &[u8],
        request: &Message,
        route: Route,
        deadline: Instant,
    ) -> Vec<u8> {
        loop {
            match self.cache.flight(key) {
                Flight::Leader(leader) => {
                    let reply = self
                        .resolve_or_stale(key, bytes, request, route, deadline)
                        .await;
                    leader.finish(&reply);
                    return reply;
                }
                Flight::Follower(follower) => {
                    match timeout_at(deadline, follower.wait(bytes)).await {
                        Ok(Some(reply)) => return reply,
                        // The leader went away without an answer: lead or follow anew.
                        Ok(None) => continue,
                        Err(_) => {
                            return self.failed(
                                request,
                                ExtendedError::NoReachableAuthority,
                                "no answer before the deadline",
                            );
                        }
                    }
                }
            }
        }
    }

    /// The leader's part of a miss: resolve, then cache the reply (its TTLs cut to the cached
    /// ones) or, when the upstream failed, answer from a stale entry. With a stale entry at
    /// hand the client waits for the upstream at most one attempt timeout (RFC 8767 §5, the
    /// client response timer); the upstream is then asked again in the background.
    async fn resolve_or_stale(
        self: &Arc<Self>,
        key: &CacheKey,
        bytes: &[u8],
        request: &Message,
        route: Route,
        deadline: Instant,
    ) -> Vec<u8> {
        let resolving = self.resolve(route, bytes, request, deadline);
        let mut reply = if self.cache.has_stale(key, Instant::now()) {
            match timeout(self.attempt_timeout, resolving).await {
                Ok(reply) => reply,
                Err(_) => {
                    self.prefetch(key.clone(), bytes.to_vec(), request.clone(), route);
                    self.failed(
                        request,
                        ExtendedError::NoReachableAuthority,
                        "upstream slow",
                    )
                }
            }
        } else {
            resolving.await
        };
        if is_failure(&reply) {
            if let Some(stale) = self.cache.stale(key, bytes, Instant::now()) {
                reply = stale;
            }
        } else {
            self.cache.insert_and_cap(key, &mut reply, Instant::now());
        }
        reply
    }

    /// Refreshes a popular entry before it expires, off the client's path.
    fn prefetch(self: &Arc<Self>, key: CacheKey, bytes: Vec<u8>, request: Message, route: Route) {
        let resolver = Arc::clone(self);
        tokio::spawn(async move {
            let deadline = Instant::now() + resolver.timeout;
            let reply = resolver.resolve(route, &bytes, &request, deadline).await;
            if !is_failure(&reply) {
                resolver.cache.insert(&key, &reply, Instant::now());
            }
        });
    }

    /// The complete reply (not yet cut to the client's size) along `route`.
    async fn resolve(
        &self,
        route: Route,
        bytes: &[u8],
        request: &Message,
        deadline: Instant,
    ) -> Vec<u8> {
        match route {
            Route::Passthrough => self.passthrough(bytes, request, deadline).await,
            Route::Cluster(index) => self.cluster(index, request, deadline).await,
            Route::Distributed(index) => {
                self.gather(self.gatherer.distributed(index), request, deadline)
                    .await
            }
            Route::Clusterset => {
                self.gather(self.gatherer.clusterset(), request, deadline)
                    .await
            }
        }
    }

    /// Forwards the client's bytes as they are; the reply goes back as it is but for the ID.
    async fn passthrough(&self, bytes: &[u8], request: &Message, deadline: Instant) -> Vec<u8> {
        match self.local.exchange(bytes, deadline).await {
            Ok(answered) => {
                let mut reply = answered.bytes;
                wire::set_id(&mut reply, request.id);
                reply
            }
            Err(error) => {
                tracing::debug!(%error, "pass-through failed");
                self.failed(
                    request,
                    ExtendedError::NoReachableAuthority,
                    "no upstream answered",
                )
            }
        }
    }

    /// Asks the cluster with the name rewritten into its domain, and maps the reply back.
    async fn cluster(&self, index: usize, request: &Message, deadline: Instant) -> Vec<u8> {
        let (Some(route), Some(asked)) = (self.clusters.get(index), request.queries.first()) else {
            return self.failed(request, ExtendedError::NetworkError, "no such cluster");
        };
        let Some(upstream_bytes) = route
            .map
            .request_to_upstream(request)
            .and_then(|m| m.to_vec().ok())
        else {
            // The name cannot exist in the cluster's domain (too long once rewritten).
            let reply = reply::negative(
                request,
                ResponseCode::NXDomain,
                &route.map.client,
                self.negative_ttl,
            );
            return reply::encode_fitted(&reply, wire::MAX_MESSAGE);
        };
        let answered = match route.upstream.exchange(&upstream_bytes, deadline).await {
            Ok(answered) => answered,
            Err(error) => {
                tracing::debug!(cluster = route.upstream.name(), %error, "cluster query failed");
                return self.failed(
                    request,
                    ExtendedError::NoReachableAuthority,
                    "cluster DNS did not answer",
                );
            }
        };
        let Ok(upstream_reply) = Message::from_vec(&answered.bytes) else {
            return self.failed(
                request,
                ExtendedError::NetworkError,
                "cluster DNS reply unreadable",
            );
        };
        if matches!(
            upstream_reply.response_code,
            ResponseCode::Refused | ResponseCode::FormErr | ResponseCode::NotImp
        ) {
            // These describe meshdns's query to the peer, not the client's question: as a
            // resolver would, the client gets SERVFAIL, and the reason in an Extended DNS Error.
            let why = format!("cluster DNS answered {}", upstream_reply.response_code);
            return self.failed(request, ExtendedError::NetworkError, &why);
        }
        let mut client_reply = route.map.reply_to_client(upstream_reply, asked);
        client_reply.metadata.id = request.id;
        reply::encode_fitted(&client_reply, wire::MAX_MESSAGE)
    }

    /// Gathers from every cluster (or the one a prefixed host names) and merges.
    async fn gather(
        &self,
        naming: Option<&Naming>,
        request: &Message,
        deadline: Instant,
    ) -> Vec<u8> {
        let Some(naming) = naming else {
            return self.failed(
                request,
                ExtendedError::NetworkError,
                "no such gathered zone",
            );
        };
        let merged = self.gatherer.answer(request, naming, deadline).await;
        if merged.partial {
            metrics::gather_partial();
        }
        reply::encode_fitted(&merged.reply, wire::MAX_MESSAGE)
    }

    fn failed(&self, request: &Message, code: ExtendedError, why: &str) -> Vec<u8> {
        reply::encode_fitted(&reply::servfail(request, code, why), wire::MAX_MESSAGE)
    }
}

/// A reply that says the upstream failed rather than answering: the cache then serves stale.
fn is_failure(reply: &[u8]) -> bool {
    wire::rcode(reply).is_none_or(|rcode| rcode == wire::RCODE_SERVFAIL)
}
