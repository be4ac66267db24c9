//! One client query, from bytes to reply bytes: inspect, route, ask, answer. This is the
//! pipeline every listener calls; it owns the per-query deadline (`MESHDNS_TIMEOUT`).

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use tokio::time::Instant;

use crate::config::{Config, Transport};
use crate::gather::{Gatherer, Naming};
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
    pub fn label(self) -> &'static str {
        match self {
            Proto::Udp => "udp",
            Proto::Tcp => "tcp",
        }
    }
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
    timeout: Duration,
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
        let gatherer = Gatherer::new(
            config,
            clusters.iter().map(|c| Arc::clone(&c.upstream)).collect(),
        );
        Self {
            router: Router::new(config),
            local,
            clusters,
            gatherer,
            timeout: config.timeout,
            negative_ttl: config.cache.negative_ttl,
        }
    }

    /// Answers one query; `None` means the input is dropped without a reply.
    pub async fn handle(&self, bytes: &[u8], proto: Proto) -> Option<Vec<u8>> {
        let request = match inspect(bytes) {
            Inspected::Query(request) => request,
            Inspected::Reply(reply) => return Some(reply),
            Inspected::Drop => return None,
        };
        let limit = match proto {
            Proto::Udp => usize::from(request.max_payload()),
            Proto::Tcp => wire::MAX_MESSAGE,
        };
        let deadline = Instant::now() + self.timeout;
        let route = self.router.route(request.queries.first()?.name());
        tracing::debug!(name = %request.queries.first()?.name(), route = route.label(), proto = proto.label(), "query");
        Some(match route {
            Route::Passthrough => self.passthrough(bytes, &request, limit, deadline).await,
            Route::Cluster(index) => self.cluster(index, &request, limit, deadline).await,
            Route::Distributed(index) => {
                self.gather(self.gatherer.distributed(index), &request, limit, deadline)
                    .await
            }
            Route::Clusterset => {
                self.gather(self.gatherer.clusterset(), &request, limit, deadline)
                    .await
            }
        })
    }

    /// Forwards the client's bytes as they are; the reply goes back as it is but for the ID
    /// (and a cut with TC when it is larger than a UDP client accepts).
    async fn passthrough(
        &self,
        bytes: &[u8],
        request: &Message,
        limit: usize,
        deadline: Instant,
    ) -> Vec<u8> {
        match self.local.exchange(bytes, deadline).await {
            Ok(answered) => {
                let mut reply = answered.bytes;
                wire::set_id(&mut reply, request.id);
                if reply.len() <= limit {
                    return reply;
                }
                match Message::from_vec(&reply) {
                    Ok(full) => reply::encode_fitted(&full, limit),
                    Err(_) => self.failed(
                        request,
                        ExtendedError::NetworkError,
                        "upstream reply unreadable",
                        limit,
                    ),
                }
            }
            Err(error) => {
                tracing::debug!(%error, "pass-through failed");
                self.failed(
                    request,
                    ExtendedError::NoReachableAuthority,
                    "no upstream answered",
                    limit,
                )
            }
        }
    }

    /// Asks the cluster with the name rewritten into its domain, and maps the reply back.
    async fn cluster(
        &self,
        index: usize,
        request: &Message,
        limit: usize,
        deadline: Instant,
    ) -> Vec<u8> {
        let Some(route) = self.clusters.get(index) else {
            return self.failed(
                request,
                ExtendedError::NetworkError,
                "no such cluster",
                limit,
            );
        };
        let Some(asked) = request.queries.first() else {
            return self.failed(request, ExtendedError::NetworkError, "no question", limit);
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
            return reply::encode_fitted(&reply, limit);
        };
        let answered = match route.upstream.exchange(&upstream_bytes, deadline).await {
            Ok(answered) => answered,
            Err(error) => {
                tracing::debug!(cluster = route.upstream.name(), %error, "cluster query failed");
                return self.failed(
                    request,
                    ExtendedError::NoReachableAuthority,
                    "cluster DNS did not answer",
                    limit,
                );
            }
        };
        let Ok(upstream_reply) = Message::from_vec(&answered.bytes) else {
            return self.failed(
                request,
                ExtendedError::NetworkError,
                "cluster DNS reply unreadable",
                limit,
            );
        };
        let mut client_reply = route.map.reply_to_client(upstream_reply, asked);
        client_reply.metadata.id = request.id;
        reply::encode_fitted(&client_reply, limit)
    }

    /// Gathers from every cluster (or the one a prefixed host names) and merges.
    async fn gather(
        &self,
        naming: Option<&Naming>,
        request: &Message,
        limit: usize,
        deadline: Instant,
    ) -> Vec<u8> {
        let Some(naming) = naming else {
            return self.failed(
                request,
                ExtendedError::NetworkError,
                "no such gathered zone",
                limit,
            );
        };
        let merged = self.gatherer.answer(request, naming, deadline).await;
        reply::encode_fitted(&merged.reply, limit)
    }

    fn failed(&self, request: &Message, code: ExtendedError, why: &str, limit: usize) -> Vec<u8> {
        reply::encode_fitted(&reply::servfail(request, code, why), limit)
    }
}
