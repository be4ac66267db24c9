//! The immutable state one query runs on: the routing table, the upstream groups (kube-dns
//! and each peer cluster), the gathered zones and the timeouts — everything that comes from
//! the configuration. The resolver holds the current snapshot behind an atomic pointer; a
//! query takes it once and finishes on it, so a reload swaps in a new one without touching a
//! query in flight.
//!
//! Each snapshot is a [`Generation`], one more than the snapshot it replaces: what a query (and
//! the work it leaves behind: a refresh, a straggling leg) writes into the cache carries it, so
//! the cache can refuse what comes from a configuration it has moved past.
//!
//! Each target a route goes to (kube-dns, a peer, the gathered zones, the answers made here)
//! has a [`TargetId`], which a client's cache key carries. A target whose configuration a
//! reload leaves as it was keeps the identity of the one it replaces, so its cached answers
//! stay; a changed one gets a new identity, and its old answers are never found again.
//!
//! It owns building a snapshot from a [`Config`] — the groups (a reload's unchanged ones taken
//! over with their health), the routes, the identities — and changes nothing once built: when
//! a new one is made is the reload's, and which one new queries start on the resolver's.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::rr::Name;

use crate::background::Background;
use crate::cache::{Cache, Generation, TargetId};
use crate::config::{Cluster, Config, Endpoint, IpNet, TlsFiles, Transport};
use crate::gather::Gatherer;
use crate::metrics::Metrics;
use crate::rewrite::{Peer, ZoneMap};
use crate::route::{Route, Router};
use crate::upstream::{GroupSpec, Upstream, UpstreamMetrics};

/// The name of the local upstream group when `MESHDNS_LOCAL_CLUSTER` is unset.
pub(crate) const LOCAL_UPSTREAM: &str = "local";

/// One configuration, ready to answer queries.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// Which applied configuration this is (the first is the default generation).
    pub(crate) generation: Generation,
    /// `MESHDNS_ALLOW_FROM`: client networks served; others get REFUSED.
    allow_from: Vec<IpNet>,
    pub(crate) router: Router,
    /// kube-dns: pass-through, and the local cluster's names.
    pub(crate) local: Arc<Upstream>,
    /// Pass-through's target: kube-dns.
    passthrough: TargetId,
    /// What the gathered zones' answers depend on, and their target.
    gathered: GatheredIdentity,
    /// The gathered zones, and the configured clusters (which the routes to them hold too):
    /// [`Gatherer::peers`] is the snapshot's one list of them.
    pub(crate) gatherer: Gatherer,
    /// The target of the answers made here (the pod's own names, search expansions): a new
    /// one per snapshot, so a reload never keeps them.
    local_answers: TargetId,
    /// `MESHDNS_TIMEOUT`: the deadline of one client query.
    pub(crate) timeout: Duration,
    /// `MESHDNS_ATTEMPT_TIMEOUT`: also how long a client waits when a stale answer is at hand.
    pub(crate) attempt_timeout: Duration,
    /// `MESHDNS_CACHE_NEGATIVE_TTL`: the TTL of meshdns's own negative answers.
    pub(crate) negative_ttl: Duration,
}

/// What a gathered answer depends on: every peer (by identity, in order) and the zones.
#[derive(Debug, PartialEq)]
struct GatheredIdentity {
    peers: Vec<TargetId>,
    distributed: Vec<Name>,
    clusterset: Option<Name>,
}

/// The local cluster's DNS (kube-dns) as an upstream group: `MESHDNS_UPSTREAMS` over UDP, named
/// after the local cluster (or [`LOCAL_UPSTREAM`]).
pub(crate) fn local_group(config: &Config) -> GroupSpec {
    let name = config.local_cluster().map_or(LOCAL_UPSTREAM, |c| &c.name);
    GroupSpec {
        name: name.to_string(),
        endpoints: config
            .upstreams
            .iter()
            .copied()
            .map(Endpoint::Addr)
            .collect(),
        transport: Transport::Udp,
        tls_name: None,
        tls: None,
        attempt_timeout: config.attempt_timeout,
        own: config.own_addresses(),
    }
}

/// The upstream groups a new snapshot is made of: those of the previous snapshot (`kept`) taken
/// over when their make-up did not change, new ones otherwise.
struct Groups<'a> {
    kept: Vec<&'a Arc<Upstream>>,
    metrics: UpstreamMetrics,
    /// Whose children new groups' owners are (the instance's root: shutdown ends their work).
    background: &'a Background,
}

impl Groups<'_> {
    /// The group of `spec`, which resolves names through `local` (kube-dns) when given.
    fn group(&self, spec: GroupSpec, local: Option<&Arc<Upstream>>) -> Arc<Upstream> {
        // A group that resolves names through kube-dns is kept only with kube-dns.
        let reusable = local.is_none_or(|l| self.kept.iter().any(|k| Arc::ptr_eq(k, l)));
        match self.kept.iter().find(|k| reusable && *k.spec() == spec) {
            Some(same) => Arc::clone(same),
            None => Upstream::new(spec, local, &self.metrics, self.background.owner()),
        }
    }

    /// TLS groups the new snapshot replaces (a rotation changed their files) may still open
    /// connections for queries in flight on them: with the new certificates.
    fn retire_replaced_tls(&self, peers: &[Arc<Peer>], tls: &TlsFiles) {
        let current: Vec<&Arc<Upstream>> = peers.iter().map(|p| &p.upstream).collect();
        for retired in (self.kept.iter()).filter(|k| !current.iter().any(|c| Arc::ptr_eq(c, k))) {
            retired.retire_tls(&tls.loaded);
        }
    }
}

fn same_endpoints(a: &Upstream, b: &Upstream) -> bool {
    a.spec().endpoints == b.spec().endpoints
}

/// A peer cluster as an upstream group (the local cluster is kube-dns's group instead).
fn peer_group(config: &Config, cluster: &Cluster) -> GroupSpec {
    GroupSpec {
        name: cluster.name.clone(),
        endpoints: cluster.endpoints.clone(),
        transport: cluster.transport,
        tls_name: cluster.tls_name.clone(),
        tls: match cluster.transport {
            Transport::Tls => config.tls.as_ref().map(|t| t.loaded.clone()),
            Transport::Udp | Transport::Tcp => None,
        },
        attempt_timeout: config.attempt_timeout,
        own: config.own_addresses(),
    }
}

/// The peer of `cluster`, asked through its group. Its answers depend on its cluster's
/// configuration and the endpoints it is asked at (kube-dns's for the local cluster): when
/// neither changed, it keeps the target of `previous`'s peer.
fn peer(
    config: &Config,
    cluster: &Cluster,
    groups: &Groups<'_>,
    local: &Arc<Upstream>,
    previous: Option<&Snapshot>,
) -> Arc<Peer> {
    let svc = |domain: &Name| {
        domain
            .prepend_label("svc")
            .unwrap_or_else(|_| domain.clone())
    };
    let map = ZoneMap::new(cluster.zone.clone(), svc(&cluster.domain)).beside(svc(&config.domain));
    let upstream = if cluster.is_local {
        Arc::clone(local)
    } else {
        groups.group(peer_group(config, cluster), Some(local))
    };
    let same = |p: &&Arc<Peer>| p.cluster == *cluster && same_endpoints(&p.upstream, &upstream);
    let target = (previous.iter().flat_map(|p| p.gatherer.peers()).find(same))
        .map_or_else(TargetId::fresh, |p| p.target);
    Arc::new(Peer {
        cluster: cluster.clone(),
        target,
        map,
        upstream,
    })
}

impl Snapshot {
    /// The snapshot of `config`. Upstream groups of `previous` whose make-up did not change
    /// are taken over as they are — with their endpoints' health and resolved names — so a
    /// reload costs the groups it does not touch nothing.
    pub(crate) fn new(
        config: &Config,
        cache: &Arc<Cache>,
        metrics: &Metrics,
        background: &Arc<Background>,
        previous: Option<&Snapshot>,
    ) -> Self {
        let generation = previous.map_or(Generation::default(), |p| p.generation.next());
        let groups = Groups {
            kept: previous.map_or(Vec::new(), |p| p.groups().collect()),
            metrics: metrics.upstream(),
            background,
        };
        let local = groups.group(local_group(config), None);
        // kube-dns's answers depend on its endpoints only.
        let passthrough = previous
            .filter(|p| same_endpoints(&p.local, &local))
            .map_or_else(TargetId::fresh, |p| p.passthrough);
        let peers: Vec<Arc<Peer>> = (config.clusters.iter())
            .map(|cluster| peer(config, cluster, &groups, &local, previous))
            .collect();
        if let Some(tls) = &config.tls {
            groups.retire_replaced_tls(&peers, tls);
        }
        let gathered = GatheredIdentity {
            peers: peers.iter().map(|p| p.target).collect(),
            distributed: config.distributed_zones.clone(),
            clusterset: config.clusterset_zone.clone(),
        };
        let gatherer = Gatherer::new(
            config,
            Arc::clone(cache),
            peers,
            metrics.gather(),
            Arc::clone(background),
            (
                generation,
                (previous.filter(|p| p.gathered == gathered))
                    .map_or_else(TargetId::fresh, |p| p.gatherer.target),
            ),
        );
        Self {
            generation,
            allow_from: config.allow_from.clone(),
            router: Router::new(config, gatherer.peers()),
            local,
            passthrough,
            gathered,
            gatherer,
            local_answers: TargetId::fresh(),
            timeout: config.timeout,
            attempt_timeout: config.attempt_timeout,
            negative_ttl: config.cache.negative_ttl,
        }
    }

    /// Every upstream group of this snapshot, kube-dns first.
    fn groups(&self) -> impl Iterator<Item = &Arc<Upstream>> {
        std::iter::once(&self.local).chain(
            (self.gatherer.peers().iter())
                .map(|p| &p.upstream)
                .filter(|u| !Arc::ptr_eq(u, &self.local)),
        )
    }

    /// The identity of the target `route` goes to: what its answers are cached under.
    pub(crate) fn target(&self, route: &Route) -> TargetId {
        match route {
            Route::Passthrough => self.passthrough,
            Route::Cluster(peer) | Route::Reverse(peer) | Route::Namespace(peer) => peer.target,
            Route::Distributed(_) | Route::Clusterset(_) => self.gatherer.target,
            Route::SelfName(_) | Route::Search(_) => self.local_answers,
        }
    }

    /// Whether a client at `ip` is served.
    pub(crate) fn allows(&self, ip: IpAddr) -> bool {
        self.allow_from.iter().any(|net| net.contains(&ip))
    }

    /// Whether the upstream of `route` is failing (stale answers are then served at once).
    /// Gathered routes fill failed legs from the cache themselves.
    pub(crate) fn upstream_failing(&self, route: &Route) -> bool {
        match route {
            Route::Passthrough => self.local.is_failing(),
            Route::Cluster(peer) | Route::Reverse(peer) | Route::Namespace(peer) => {
                peer.upstream.is_failing()
            }
            // Answered locally or gathered: no one upstream whose failure serves stale at once.
            Route::Distributed(_)
            | Route::Clusterset(_)
            | Route::SelfName(_)
            | Route::Search(_) => false,
        }
    }
}
