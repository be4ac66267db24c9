//! Gathering: one question asked of several clusters at once, the answers merged.
//!
//! Each leg is its own task with the query's deadline and the usual endpoint failover. The
//! reply waits for every leg, but not for long: once the first leg has answered, the others get
//! at most one attempt timeout more ([`Gatherer::answer`]). A leg cut off this way keeps
//! running — its answer, when it comes, refreshes what the cache holds for it — so a dead
//! cluster costs one attempt timeout, not the whole deadline.

mod merge;
mod naming;

use std::sync::Arc;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, Query, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};

use crate::cache::{Cache, CacheKey, KeyFlags};
use crate::config::{Cluster, Config};
use crate::reply;
use crate::upstream::Upstream;
use crate::wire;

pub use merge::{Leg, Merged, PARTIAL_TTL, merge};
pub use naming::{Naming, Plan, Scheme};

/// TTL of the MCS `dns-version` record.
const SCHEMA_VERSION_TTL: u32 = 300;

/// The gathered zones and whom to ask for them.
#[derive(Debug)]
pub struct Gatherer {
    clusters: Vec<Cluster>,
    upstreams: Vec<Arc<Upstream>>,
    cache: Arc<Cache>,
    distributed: Vec<Naming>,
    clusterset: Option<Naming>,
    attempt_timeout: Duration,
    negative_ttl: Duration,
}

impl Gatherer {
    /// `upstreams[i]` asks `config.clusters[i]`.
    pub fn new(config: &Config, cache: Arc<Cache>, upstreams: Vec<Arc<Upstream>>) -> Self {
        Self {
            clusters: config.clusters.clone(),
            upstreams,
            cache,
            distributed: config
                .distributed_zones
                .iter()
                .map(|zone| Naming {
                    zone: zone.clone(),
                    scheme: Scheme::Prefix,
                })
                .collect(),
            clusterset: config.clusterset_zone.as_ref().map(|zone| Naming {
                zone: zone.clone(),
                scheme: Scheme::Clusterset,
            }),
            attempt_timeout: config.attempt_timeout,
            negative_ttl: config.cache.negative_ttl,
        }
    }

    /// The naming of distributed zone `index`.
    pub fn distributed(&self, index: usize) -> Option<&Naming> {
        self.distributed.get(index)
    }

    /// The naming of the clusterset zone, when one is configured.
    pub fn clusterset(&self) -> Option<&Naming> {
        self.clusterset.as_ref()
    }

    /// Answers `request` for a name under `naming`'s zone; the reply still needs the client's
    /// ID (it has it already: `synthesized` copies it) and size.
    pub async fn answer(&self, request: &Message, naming: &Naming, deadline: Instant) -> Merged {
        let Some(asked) = request.queries.first() else {
            return Merged {
                reply: reply::synthesized(request, ResponseCode::FormErr),
                partial: false,
            };
        };
        let legs = match naming.plan(asked.name(), asked.query_type(), &self.clusters) {
            Plan::Ask(legs) => legs,
            Plan::NoData => {
                return Merged {
                    reply: reply::negative(
                        request,
                        ResponseCode::NoError,
                        &naming.zone,
                        self.negative_ttl,
                    ),
                    partial: false,
                };
            }
            Plan::SchemaVersion => {
                return Merged {
                    reply: schema_version(request),
                    partial: false,
                };
            }
        };
        let gathered = self.ask_all(request, legs, deadline).await;
        let merged = merge::merge(
            request,
            naming,
            &self.clusters,
            &gathered,
            self.negative_ttl,
        );
        if merged.partial {
            let missing: Vec<&str> = gathered
                .iter()
                .filter(|(_, leg)| matches!(leg, Leg::Failed))
                .map(|(i, _)| self.clusters[*i].name.as_str())
                .collect();
            tracing::debug!(?missing, "partial gathered answer");
        }
        merged
    }

    /// Runs every leg concurrently and returns them in cluster order; legs that did not answer
    /// in time are `Failed`.
    async fn ask_all(
        &self,
        request: &Message,
        legs: Vec<(usize, Name)>,
        deadline: Instant,
    ) -> Vec<(usize, Leg)> {
        let (done, mut results) = mpsc::channel::<(usize, Leg)>(legs.len().max(1));
        let mut gathered: Vec<(usize, Leg)> = Vec::with_capacity(legs.len());
        let mut keys: Vec<CacheKey> = Vec::with_capacity(legs.len());
        for (slot, (index, name)) in legs.into_iter().enumerate() {
            let key = leg_key(index, &name, request);
            gathered.push((index, Leg::Failed));
            keys.push(key.clone());
            let (Some(upstream), Some(query)) = (
                self.upstreams.get(index).map(Arc::clone),
                leg_query(request, name),
            ) else {
                continue;
            };
            let cache = Arc::clone(&self.cache);
            let done = done.clone();
            tokio::spawn(async move {
                let leg = ask_leg(&upstream, &query, deadline).await;
                if let Some(bytes) = &leg.1 {
                    // Also when the reply has gone out without this leg: it refreshes the
                    // answer a later failure of this cluster is filled from.
                    cache.insert(&key, bytes, Instant::now());
                }
                let _ = done.send((slot, leg.0)).await;
            });
        }
        drop(done);
        let mut cutoff = deadline;
        let mut waiting = gathered.len();
        while waiting > 0 {
            match timeout_at(cutoff, results.recv()).await {
                Ok(Some((slot, leg))) => {
                    waiting -= 1;
                    if let Some(entry) = gathered.get_mut(slot) {
                        entry.1 = leg;
                    }
                    // The first answer starts the stragglers' clock.
                    cutoff = cutoff.min(Instant::now() + self.attempt_timeout);
                }
                Ok(None) | Err(_) => break,
            }
        }
        let now = Instant::now();
        for ((_, leg), key) in gathered.iter_mut().zip(&keys) {
            if matches!(leg, Leg::Failed)
                && let Some(last) = self
                    .cache
                    .last_good(key, now)
                    .and_then(|b| Message::from_vec(&b).ok())
                && matches!(
                    last.response_code,
                    ResponseCode::NoError | ResponseCode::NXDomain
                )
            {
                *leg = Leg::Stale(last);
            }
        }
        gathered
    }
}

/// The cache key of a leg: the cluster, the rewritten question, and the flags the leg's own
/// query carries (EDNS always; DO and CD from the client).
fn leg_key(cluster: usize, name: &Name, request: &Message) -> CacheKey {
    let (qtype, qclass) = request
        .queries
        .first()
        .map_or((RecordType::A, DNSClass::IN), |q| {
            (q.query_type(), q.query_class())
        });
    let flags = KeyFlags {
        edns: true,
        dnssec_ok: request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok),
        checking_disabled: request.checking_disabled,
    };
    CacheKey::for_leg(cluster, name, qtype, qclass, flags)
}

/// The leg's query: the rewritten question, recursion desired, EDNS with our UDP size (so
/// large sets come in one datagram, or over TCP when truncated), the client's DO and CD bits.
fn leg_query(request: &Message, name: Name) -> Option<Vec<u8>> {
    let asked = request.queries.first()?;
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.metadata.checking_disabled = request.checking_disabled;
    let mut leg_question = Query::query(name, asked.query_type());
    leg_question.set_query_class(asked.query_class());
    query.add_query(leg_question);
    let mut edns = Edns::new();
    edns.set_max_payload(reply::ADVERTISED_UDP_SIZE);
    edns.set_dnssec_ok(request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok));
    query.set_edns(edns);
    query.to_vec().ok()
}

/// One leg's outcome, with the reply bytes worth caching when it answered.
async fn ask_leg(upstream: &Upstream, query: &[u8], deadline: Instant) -> (Leg, Option<Vec<u8>>) {
    let answered = match upstream.exchange(query, deadline).await {
        Ok(answered) => answered,
        Err(error) => {
            tracing::debug!(cluster = upstream.name(), %error, "leg failed");
            return (Leg::Failed, None);
        }
    };
    if wire::is_truncated(&answered.bytes) {
        // Even TCP could not fetch the whole set: an incomplete leg is a failed leg, so the
        // merge never presents part of a cluster's set as all of it.
        tracing::debug!(cluster = upstream.name(), "leg truncated and TCP failed");
        return (Leg::Failed, None);
    }
    match Message::from_vec(&answered.bytes) {
        Ok(reply)
            if matches!(
                reply.response_code,
                ResponseCode::NoError | ResponseCode::NXDomain
            ) =>
        {
            (Leg::Answered(reply), Some(answered.bytes))
        }
        Ok(reply) => {
            tracing::debug!(cluster = upstream.name(), rcode = %reply.response_code, "leg answered with an error");
            (Leg::Failed, None)
        }
        Err(_) => (Leg::Failed, None),
    }
}

/// `dns-version.<zone> TXT "1.0.0"` (KEP-1645).
fn schema_version(request: &Message) -> Message {
    let mut reply = reply::synthesized(request, ResponseCode::NoError);
    reply.metadata.authoritative = true;
    if let Some(asked) = request.queries.first() {
        let data = RData::TXT(TXT::new(vec![naming::MCS_SCHEMA_VERSION.to_string()]));
        reply.add_answer(Record::from_rdata(
            asked.name().clone(),
            SCHEMA_VERSION_TTL,
            data,
        ));
    }
    reply
}
