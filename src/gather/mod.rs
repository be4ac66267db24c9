//! Gathering: one question asked of several clusters at once, the answers merged.
//!
//! Each leg asks its cluster with the query's deadline and the usual endpoint failover (and
//! its retransmissions: a lost datagram is sent again on the endpoint's retransmission timer,
//! see `upstream`). The reply waits for every leg, but not for long once some leg has answered
//! (the stragglers rule): a leg still pending keeps the rest of its current attempt — its
//! retransmissions included, so a leg that lost a packet is no straggler — and at most one
//! more attempt if its exchange has one left at an endpoint that is up: the next endpoint, or
//! for a cluster of one endpoint the same once more (the retry; an attempt whose sends were
//! all lost, or that made few because its endpoint's retransmission timeout was high, is no
//! dead cluster). A leg whose endpoint is known down, or whose attempt is still silent after
//! its retransmissions and the attempt timeout with no attempt at an endpoint up left, is cut.
//! The endpoints' health is read from their records whenever a leg ends, and the cut-off
//! recomputed from the legs still pending (never later than it was); a leg whose cluster has
//! every endpoint known down is not waited for at all. So a gathered answer is partial only
//! when a cluster really failed to answer; a cluster whose first endpoint is dead but whose
//! second answers is still in the reply; any number of dead clusters cost at most two attempt
//! timeouts, and nothing once health checks have marked them down; and a cut leg keeps
//! running in the background set, its answer, when it comes, refreshing what the cache holds
//! for that leg (a later failure of the cluster is filled from it).
//!
//! A leg's cache entry is keyed by its peer's identity ([`TargetId`], which a reload hands on to
//! the same cluster at the same endpoints), never by the cluster's position in the list, and
//! written with the generation of the configuration the leg started under: a leg that straggles
//! past a reload which removed or reordered clusters can neither land under another cluster's key
//! nor write into the new configuration's cache. The gatherer reaches the cache only through the
//! gathered route's door ([`GatherDoor`]). It offers the door only a leg it counts as answered (a
//! complete NOERROR or NXDOMAIN); what of that is kept, for how long and what is stale is the
//! cache's to decide, not this module's.
//!
//! It owns the legs of one gathering and when to stop waiting for them; the merge of their
//! answers is the `merge` module's, the names they are asked under `naming`'s, and each leg's
//! exchange and failover its cluster's upstream group's.

mod merge;
mod naming;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::TXT;
use hickory_proto::rr::{Name, RData, Record};
use hickory_proto::serialize::binary::BinEncodable;
use prometheus::IntCounter;
use tokio::time::{Instant, sleep_until};

use crate::background::Background;
use crate::cache::{Cache, CacheKey, GatherDoor, Generation, KeyFlags, TargetId, may_share};
use crate::config::Config;
use crate::reply;
use crate::request::Request;
use crate::rewrite::Peer;
use crate::upstream::{Progress, Upstream};
use crate::wire;

#[cfg(any(test, feature = "testing"))]
pub use merge::PARTIAL_TTL;
#[cfg(any(test, feature = "testing"))]
pub(crate) use merge::merge;
pub(crate) use merge::{Leg, Merged};
#[cfg(test)]
pub(crate) use naming::ClientHost;
pub(crate) use naming::{Naming, Plan, Scheme};

/// TTL of the MCS `dns-version` record.
const SCHEMA_VERSION_TTL: u32 = 300;

/// A leg running: its slot in the gathered list, and what it brought.
type LegRun = Pin<Box<dyn Future<Output = (usize, Leg)> + Send>>;

/// One leg of a gathering: the peer it asks, what it brought (`Failed` until it answers), its
/// cache key, and its progress while it runs (`None`: finished, or never started).
struct Asked {
    peer: Arc<Peer>,
    leg: Leg,
    key: Option<CacheKey>,
    running: Option<Arc<Progress>>,
}

/// The series gathered answers are counted into.
#[derive(Debug, Clone)]
pub(crate) struct GatherMetrics {
    /// `meshdns_gather_partial_total`.
    pub(crate) partial: IntCounter,
    /// `meshdns_gather_txt_disagreements_total`.
    pub(crate) txt_disagreements: IntCounter,
}

/// The gathered zones and whom to ask for them.
#[derive(Debug)]
pub(crate) struct Gatherer {
    /// Every configured cluster, each leg's target.
    peers: Vec<Arc<Peer>>,
    /// The gathered zones' identity as a target: their answers are cached under it.
    pub(crate) target: TargetId,
    /// The cache, for the legs (their writes carry this gatherer's configuration's generation).
    cache: GatherDoor,
    attempt_timeout: Duration,
    negative_ttl: Duration,
    metrics: GatherMetrics,
    background: Arc<Background>,
}

impl Gatherer {
    /// The gatherer over `peers`; `generation` is the configuration's, `target` its own.
    pub(crate) fn new(
        config: &Config,
        cache: Arc<Cache>,
        peers: Vec<Arc<Peer>>,
        metrics: GatherMetrics,
        background: Arc<Background>,
        (generation, target): (Generation, TargetId),
    ) -> Self {
        Self {
            peers,
            target,
            cache: GatherDoor::new(cache, generation),
            attempt_timeout: config.attempt_timeout,
            negative_ttl: config.cache.negative_ttl,
            metrics,
            background,
        }
    }

    /// Every configured cluster, in the configuration's order: the snapshot's one list of them.
    pub(crate) fn peers(&self) -> &[Arc<Peer>] {
        &self.peers
    }

    /// Answers `request` for a name under `naming`'s zone: the complete reply, with the
    /// client's ID (not yet cut to its size).
    pub(crate) async fn answer(
        &self,
        naming: &Naming,
        request: &Request,
        deadline: Instant,
    ) -> Vec<u8> {
        let merged = self.merged(request, naming, deadline).await;
        if merged.partial {
            self.metrics.partial.inc();
        }
        if merged.txt_disagreed {
            self.metrics.txt_disagreements.inc();
        }
        reply::encode_fitted(&merged.reply, wire::MAX_MESSAGE)
    }

    async fn merged(&self, client: &Request, naming: &Naming, deadline: Instant) -> Merged {
        let (request, asked) = (client.message(), client.query());
        let (legs, fallback) = match naming.plan(asked.name(), asked.query_type(), &self.peers) {
            Plan::Ask { legs, fallback } => (legs, fallback),
            Plan::NoData => return self.negative(request, ResponseCode::NoError, naming),
            Plan::NxDomain => return self.negative(request, ResponseCode::NXDomain, naming),
            Plan::SchemaVersion => {
                return Merged::whole(schema_version(request));
            }
        };
        let mut gathered = self.ask_all(client, legs, deadline).await;
        let prefixed_nxdomain = fallback.is_some()
            && matches!(gathered.as_slice(), [(_, Leg::Answered(reply))]
                if reply.response_code == ResponseCode::NXDomain);
        if let Some(fallback) = fallback
            && prefixed_nxdomain
        {
            // The prefixed cluster, answering, does not have the name: what the cache holds
            // for it (a member since removed) must not come back stale, not even while the
            // fallback below runs. Perhaps a name that merely begins like a prefix.
            if let Some(key) = client.key() {
                self.cache.forget_answer(&key.for_target(self.target));
            }
            gathered = self.ask_all(client, fallback, deadline).await;
        }
        let merged = merge::merge(request, naming, &gathered, self.negative_ttl);
        if prefixed_nxdomain && merged.reply.response_code == ResponseCode::ServFail {
            // The fallback could not complete (a cluster is down): the prefixed cluster's
            // NXDOMAIN stands, never a SERVFAIL that would let a stale copy be served.
            tracing::debug!("fallback incomplete; the prefixed cluster's NXDOMAIN stands");
            return self.negative(request, ResponseCode::NXDomain, naming);
        }
        if merged.partial {
            // Failed, or filled from the leg's last good answer (stale).
            let missing: Vec<&str> = gathered
                .iter()
                .filter(|(_, leg)| !matches!(leg, Leg::Answered(_)))
                .map(|(peer, _)| peer.cluster.name.as_str())
                .collect();
            tracing::debug!(?missing, "partial gathered answer");
        }
        merged
    }

    /// NODATA or NXDOMAIN with the zone's SOA, for what no cluster needs to be asked.
    fn negative(&self, request: &Message, rcode: ResponseCode, naming: &Naming) -> Merged {
        Merged::whole(reply::negative(
            request,
            rcode,
            &naming.zone,
            self.negative_ttl,
        ))
    }

    /// Runs every leg concurrently and returns them in cluster order; legs that did not answer
    /// in time are `Failed`, or filled from their last good answer.
    async fn ask_all(
        &self,
        request: &Request,
        legs: Vec<(Arc<Peer>, Name)>,
        deadline: Instant,
    ) -> Vec<(Arc<Peer>, Leg)> {
        // A reply that may be scoped to the client's subnet is no leg's answer for others.
        let shared = may_share(request.question(), request.opt());
        let flags = KeyFlags {
            edns: true,
            ..request.key_flags()
        };
        let mut asked: Vec<Asked> = Vec::with_capacity(legs.len());
        let mut running: FuturesUnordered<LegRun> = FuturesUnordered::new();
        for (slot, (peer, name)) in legs.into_iter().enumerate() {
            let query = name.to_bytes().ok().and_then(|name| request.for_leg(&name));
            let key = (query.as_deref()).and_then(|query| {
                CacheKey::for_leg(peer.target, wire::first_question(query)?, flags)
            });
            let mut leg = Asked {
                peer,
                leg: Leg::Failed,
                key,
                running: None,
            };
            if let (Some(key), Some(query)) = (leg.key.clone(), query) {
                let progress = Arc::new(Progress::default());
                leg.running = Some(Arc::clone(&progress));
                let peer = Arc::clone(&leg.peer);
                // Its answer is kept also when the reply has gone out without this leg (unless
                // a reload came in between: then the cache refuses it).
                let answered = self.cache.ask(key, shared, async move {
                    ask_leg(&peer.upstream, &query, deadline, &progress).await
                });
                running.push(Box::pin(async move { (slot, answered.await) }));
            } else {
                tracing::debug!(cluster = %leg.peer.cluster.name, "leg not asked: its query could not be made");
            }
            asked.push(leg);
        }
        let mut cutoff = self.cutoff(deadline, false, &asked);
        let mut answered = false;
        while !running.is_empty() {
            tokio::select! {
                Some((slot, leg)) = running.next() => {
                    answered |= matches!(leg, Leg::Answered(_));
                    if let Some(entry) = asked.get_mut(slot) {
                        (entry.leg, entry.running) = (leg, None);
                    }
                    cutoff = cutoff.min(self.cutoff(deadline, answered, &asked));
                }
                () = sleep_until(cutoff) => break,
            }
        }
        if !running.is_empty() {
            let cut: Vec<&str> = (asked.iter())
                .filter(|a| a.running.is_some())
                .map(|a| a.peer.cluster.name.as_str())
                .collect();
            tracing::debug!(?cut, "stragglers cut");
            // Cut legs finish in the background and refresh their cache entries; when the
            // set is full they are dropped here instead.
            self.background
                .spawn(async move { while running.next().await.is_some() {} });
        }
        for entry in &mut asked {
            if matches!(entry.leg, Leg::Failed)
                && let Some(key) = &entry.key
                && let Some(last) =
                    (self.cache.last_good(key)).and_then(|b| Message::from_vec(&b).ok())
            {
                entry.leg = Leg::Stale(last);
            }
        }
        asked.into_iter().map(|a| (a.peer, a.leg)).collect()
    }

    /// Until when the reply waits for the legs of `asked` still running, recomputed whenever a
    /// leg ends (the caller keeps the earliest: a leg that moves on to its next attempt does
    /// not push it back). A leg whose cluster has every endpoint known down is never waited
    /// for: its answer, should one come, refreshes the cache in the background, and the
    /// endpoints' probes find out when the cluster is back. Of the others, before any leg
    /// has `answered` the reply waits up to the `deadline`; after, the stragglers rule.
    fn cutoff(&self, deadline: Instant, answered: bool, asked: &[Asked]) -> Instant {
        let now = Instant::now();
        let mut waited = (asked.iter())
            .filter_map(|a| (a.running.as_deref()).filter(|_| !a.peer.upstream.known_down()))
            .peekable();
        if waited.peek().is_none() {
            now
        } else if answered {
            deadline.min(self.stragglers_cutoff(now, waited))
        } else {
            deadline
        }
    }

    /// How long the reply still waits, from `now` (a leg's end, once some leg answered), for
    /// the legs whose progress is `pending`: the latest of their own cutoffs (see the module
    /// documentation).
    fn stragglers_cutoff<'a>(
        &self,
        now: Instant,
        pending: impl Iterator<Item = &'a Progress>,
    ) -> Instant {
        pending
            .map(|progress| match progress.now() {
                // Not started yet (a moment at most): one attempt.
                None => now + self.attempt_timeout,
                Some(attempt) if !attempt.endpoint_up => now,
                Some(attempt) => {
                    let one_more = if attempt.next_up {
                        self.attempt_timeout
                    } else {
                        Duration::ZERO
                    };
                    attempt.silent_at + one_more
                }
            })
            .max()
            .unwrap_or(now)
            .max(now)
    }
}

/// One leg's outcome, with the reply bytes worth caching when it answered.
async fn ask_leg(
    upstream: &Upstream,
    query: &[u8],
    deadline: Instant,
    progress: &Progress,
) -> (Leg, Option<Vec<u8>>) {
    let answered = match upstream
        .exchange_reporting(query, deadline, Some(progress))
        .await
    {
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
        Err(error) => {
            tracing::debug!(cluster = upstream.name(), %error, "leg's reply unreadable");
            (Leg::Failed, None)
        }
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
