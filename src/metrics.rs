//! Every metric of meshdns, defined once: the families (name, type, labels, help) as constants,
//! the closed label sets, and small recording functions the query path calls.
//!
//! One process-wide registry ([`LazyLock`]) rather than a handle passed around: the metrics are
//! per process anyway, and the recording points sit in modules (cache, gather, upstream) that
//! would otherwise all need a new constructor argument. Tests that read exact values run
//! serialised (see `tests/metrics.rs`).
//!
//! Labels come only from closed sets — enums here, or names bounded by the configuration
//! (cluster names, endpoint addresses) — never from a query. Series of the closed sets are
//! created up front, so the DNS path only touches atomics (no label hashing, no lock) and a
//! first scrape already shows every series at 0 (`rate()` works from the start).

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::query::Proto;
use crate::route::Route;
use crate::wire;

/// The type of a family, as the text exposition format spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric family: what the registry, the README table and the dashboard check agree on.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

pub const REQUESTS_TOTAL: Family = Family {
    name: "meshdns_requests_total",
    kind: Kind::Counter,
    labels: &["proto", "route", "rcode"],
    help: "Client queries answered, by transport, route and response code.",
};
pub const REQUEST_DURATION_SECONDS: Family = Family {
    name: "meshdns_request_duration_seconds",
    kind: Kind::Histogram,
    labels: &["route"],
    help: "Time from a query's arrival to its reply being ready, by route.",
};
pub const CACHE_HITS_TOTAL: Family = Family {
    name: "meshdns_cache_hits_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Queries answered from a fresh cache entry.",
};
pub const CACHE_MISSES_TOTAL: Family = Family {
    name: "meshdns_cache_misses_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Cache lookups that found no fresh entry and went upstream.",
};
pub const CACHE_STALE_SERVED_TOTAL: Family = Family {
    name: "meshdns_cache_stale_served_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Expired answers served because the upstream failed (RFC 8767).",
};
pub const CACHE_ENTRIES: Family = Family {
    name: "meshdns_cache_entries",
    kind: Kind::Gauge,
    labels: &[],
    help: "Entries in the cache.",
};
pub const CACHE_EVICTIONS_TOTAL: Family = Family {
    name: "meshdns_cache_evictions_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Cache entries evicted to stay within MESHDNS_CACHE_SIZE.",
};
pub const UPSTREAM_REQUESTS_TOTAL: Family = Family {
    name: "meshdns_upstream_requests_total",
    kind: Kind::Counter,
    labels: &["cluster", "result"],
    help: "Attempts at an upstream endpoint, by cluster and result.",
};
pub const UPSTREAM_DURATION_SECONDS: Family = Family {
    name: "meshdns_upstream_duration_seconds",
    kind: Kind::Histogram,
    labels: &["cluster"],
    help: "Duration of one attempt at an upstream endpoint, by cluster.",
};
pub const UPSTREAM_HEALTHY: Family = Family {
    name: "meshdns_upstream_healthy",
    kind: Kind::Gauge,
    labels: &["cluster", "endpoint"],
    help: "1 while an endpoint is considered up, 0 while it is skipped until a probe succeeds.",
};
pub const GATHER_PARTIAL_TOTAL: Family = Family {
    name: "meshdns_gather_partial_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Gathered answers sent without some cluster (its leg failed or straggled).",
};
pub const INFLIGHT: Family = Family {
    name: "meshdns_inflight",
    kind: Kind::Gauge,
    labels: &[],
    help: "Client queries being answered now.",
};
pub const DROPPED_TOTAL: Family = Family {
    name: "meshdns_dropped_total",
    kind: Kind::Counter,
    labels: &["reason"],
    help: "Client queries or connections not served, by reason.",
};
pub const BUILD_INFO: Family = Family {
    name: "meshdns_build_info",
    kind: Kind::Gauge,
    labels: &["version"],
    help: "Always 1; the version label says which meshdns runs.",
};

/// Every family, in the order of DESIGN.md.
pub const FAMILIES: [&Family; 14] = [
    &REQUESTS_TOTAL,
    &REQUEST_DURATION_SECONDS,
    &CACHE_HITS_TOTAL,
    &CACHE_MISSES_TOTAL,
    &CACHE_STALE_SERVED_TOTAL,
    &CACHE_ENTRIES,
    &CACHE_EVICTIONS_TOTAL,
    &UPSTREAM_REQUESTS_TOTAL,
    &UPSTREAM_DURATION_SECONDS,
    &UPSTREAM_HEALTHY,
    &GATHER_PARTIAL_TOTAL,
    &INFLIGHT,
    &DROPPED_TOTAL,
    &BUILD_INFO,
];

/// Buckets of `request_duration_seconds`: a cache hit over loopback takes tens of µs, a
/// pass-through to kube-dns about a millisecond, a cross-cluster query a few to tens of ms, and
/// a failing one runs into `MESHDNS_ATTEMPT_TIMEOUT` (500 ms) or `MESHDNS_TIMEOUT` (2 s).
pub const REQUEST_BUCKETS: [f64; 17] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.0, 5.0,
];

/// Buckets of `upstream_duration_seconds`: one network round trip, from a node-local kube-dns
/// (~100 µs) to a peer cluster far away, up to the attempt and query timeouts.
pub const UPSTREAM_BUCKETS: [f64; 15] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
    5.0,
];

/// The `rcode` label values; any other code (BADVERS, YXDOMAIN, …) counts as `other`.
pub const RCODES: [&str; 7] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other",
];

fn rcode_index(reply: &[u8]) -> usize {
    // The header's RCODE is the index into RCODES for codes 0..=5.
    wire::rcode(reply).map_or(6, |code| usize::from(code).min(6))
}

const PROTOS: [Proto; 2] = [Proto::Udp, Proto::Tcp];

fn proto_index(proto: Proto) -> usize {
    match proto {
        Proto::Udp => 0,
        Proto::Tcp => 1,
    }
}

/// The `route` label values, in the index order of `route_index`.
pub const ROUTES: [&str; 4] = ["passthrough", "cluster", "distributed", "clusterset"];

fn route_index(route: Route) -> usize {
    match route {
        Route::Passthrough => 0,
        Route::Cluster(_) => 1,
        Route::Distributed(_) => 2,
        Route::Clusterset => 3,
    }
}

/// How one attempt at an upstream endpoint ended: the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamResult {
    /// An answer: NOERROR or NXDOMAIN.
    Ok,
    Servfail,
    Refused,
    /// Another response code (FORMERR, NOTIMP, …): the endpoint answered but could not help.
    OtherRcode,
    Timeout,
    /// A network error (connection refused, reset, unreachable) or a query that could not be sent.
    Error,
}

impl UpstreamResult {
    pub const ALL: [UpstreamResult; 6] = [
        UpstreamResult::Ok,
        UpstreamResult::Servfail,
        UpstreamResult::Refused,
        UpstreamResult::OtherRcode,
        UpstreamResult::Timeout,
        UpstreamResult::Error,
    ];

    pub fn label(self) -> &'static str {
        match self {
            UpstreamResult::Ok => "ok",
            UpstreamResult::Servfail => "servfail",
            UpstreamResult::Refused => "refused",
            UpstreamResult::OtherRcode => "other_rcode",
            UpstreamResult::Timeout => "timeout",
            UpstreamResult::Error => "error",
        }
    }

    /// The result of a reply that was accepted, from its response code.
    pub fn of_reply(reply: &[u8]) -> Self {
        match wire::rcode(reply) {
            Some(0 | 3) => UpstreamResult::Ok,
            Some(2) => UpstreamResult::Servfail,
            Some(5) => UpstreamResult::Refused,
            _ => UpstreamResult::OtherRcode,
        }
    }
}

/// Why a client's query (or connection) was not served: the `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// UDP query dropped because `MAX_INFLIGHT` queries were being answered.
    InflightLimit,
    /// TCP connection closed at once because `MAX_CONNECTIONS` were open.
    TcpConnectionLimit,
    /// Not a standard query: dropped (no full header, or a response), or answered at once with
    /// FORMERR, NOTIMP or BADVERS.
    Malformed,
    /// Client outside `MESHDNS_ALLOW_FROM`: answered REFUSED.
    NotAllowed,
}

impl DropReason {
    pub const ALL: [DropReason; 4] = [
        DropReason::InflightLimit,
        DropReason::TcpConnectionLimit,
        DropReason::Malformed,
        DropReason::NotAllowed,
    ];

    pub fn label(self) -> &'static str {
        match self {
            DropReason::InflightLimit => "inflight_limit",
            DropReason::TcpConnectionLimit => "tcp_connection_limit",
            DropReason::Malformed => "malformed",
            DropReason::NotAllowed => "not_allowed",
        }
    }
}

struct Metrics {
    registry: Registry,
    /// Indexed by `(proto * ROUTES.len() + route) * RCODES.len() + rcode`.
    requests: Vec<IntCounter>,
    /// Indexed by route.
    request_duration: Vec<Histogram>,
    cache_hits: IntCounter,
    cache_misses: IntCounter,
    cache_stale_served: IntCounter,
    cache_entries: IntGauge,
    cache_evictions: IntCounter,
    upstream_requests: IntCounterVec,
    upstream_duration: HistogramVec,
    upstream_healthy: IntGaugeVec,
    gather_partial: IntCounter,
    inflight: IntGauge,
    /// Indexed by [`DropReason`] (its variants are declared in the order of `ALL`).
    dropped: Vec<IntCounter>,
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Registers `collector`. The names and labels are constants checked by the unit tests, so a
/// failure here is a programming error that every test run would show at once.
fn register<C: Collector + Clone + 'static>(
    registry: &Registry,
    collector: prometheus::Result<C>,
) -> C {
    let collector = collector.expect("metric definitions are valid constants");
    registry
        .register(Box::new(collector.clone()))
        .expect("metric names are unique");
    collector
}

fn opts(family: &Family) -> Opts {
    Opts::new(family.name, family.help)
}

fn histogram_opts(family: &Family, buckets: &[f64]) -> HistogramOpts {
    HistogramOpts::new(family.name, family.help).buckets(buckets.to_vec())
}

impl Metrics {
    fn new() -> Self {
        let registry = Registry::new();
        let requests = register(
            &registry,
            IntCounterVec::new(opts(&REQUESTS_TOTAL), REQUESTS_TOTAL.labels),
        );
        let request_duration = register(
            &registry,
            HistogramVec::new(
                histogram_opts(&REQUEST_DURATION_SECONDS, &REQUEST_BUCKETS),
                REQUEST_DURATION_SECONDS.labels,
            ),
        );
        let counter = |family: &Family| register(&registry, IntCounter::with_opts(opts(family)));
        let gauge = |family: &Family| register(&registry, IntGauge::with_opts(opts(family)));
        let cache_hits = counter(&CACHE_HITS_TOTAL);
        let cache_misses = counter(&CACHE_MISSES_TOTAL);
        let cache_stale_served = counter(&CACHE_STALE_SERVED_TOTAL);
        let cache_entries = gauge(&CACHE_ENTRIES);
        let cache_evictions = counter(&CACHE_EVICTIONS_TOTAL);
        let upstream_requests = register(
            &registry,
            IntCounterVec::new(
                opts(&UPSTREAM_REQUESTS_TOTAL),
                UPSTREAM_REQUESTS_TOTAL.labels,
            ),
        );
        let upstream_duration = register(
            &registry,
            HistogramVec::new(
                histogram_opts(&UPSTREAM_DURATION_SECONDS, &UPSTREAM_BUCKETS),
                UPSTREAM_DURATION_SECONDS.labels,
            ),
        );
        let upstream_healthy = register(
            &registry,
            IntGaugeVec::new(opts(&UPSTREAM_HEALTHY), UPSTREAM_HEALTHY.labels),
        );
        let gather_partial = counter(&GATHER_PARTIAL_TOTAL);
        let inflight = gauge(&INFLIGHT);
        let dropped = register(
            &registry,
            IntCounterVec::new(opts(&DROPPED_TOTAL), DROPPED_TOTAL.labels),
        );
        let build_info = register(
            &registry,
            IntGaugeVec::new(opts(&BUILD_INFO), BUILD_INFO.labels),
        );
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);

        let mut request_series = Vec::with_capacity(PROTOS.len() * ROUTES.len() * RCODES.len());
        for proto in PROTOS {
            for route in ROUTES {
                for rcode in RCODES {
                    request_series.push(requests.with_label_values(&[proto.label(), route, rcode]));
                }
            }
        }
        Self {
            registry,
            requests: request_series,
            request_duration: ROUTES
                .iter()
                .map(|route| request_duration.with_label_values(&[*route]))
                .collect(),
            cache_hits,
            cache_misses,
            cache_stale_served,
            cache_entries,
            cache_evictions,
            upstream_requests,
            upstream_duration,
            upstream_healthy,
            gather_partial,
            inflight,
            dropped: DropReason::ALL
                .iter()
                .map(|reason| dropped.with_label_values(&[reason.label()]))
                .collect(),
        }
    }
}

/// Creates every family (so a scrape before the first query shows them all).
pub fn init() {
    LazyLock::force(&METRICS);
}

/// The text exposition format's content type, as Prometheus expects it.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The whole registry in the text exposition format. Reading the metrics takes only the
/// registry's short read locks; the DNS path never waits on a scrape.
pub fn encode() -> String {
    let families = METRICS.registry.gather();
    TextEncoder::new()
        .encode_to_string(&families)
        .unwrap_or_else(|error| format!("# encoding failed: {error}\n"))
}

/// One client query answered with `reply`, `elapsed` after it arrived.
pub fn record_request(proto: Proto, route: Route, reply: &[u8], elapsed: Duration) {
    let metrics = &*METRICS;
    let index = (proto_index(proto) * ROUTES.len() + route_index(route)) * RCODES.len()
        + rcode_index(reply);
    if let Some(counter) = metrics.requests.get(index) {
        counter.inc();
    }
    if let Some(histogram) = metrics.request_duration.get(route_index(route)) {
        histogram.observe(elapsed.as_secs_f64());
    }
}

/// A client query or connection not served.
pub fn dropped(reason: DropReason) {
    if let Some(counter) = METRICS.dropped.get(reason as usize) {
        counter.inc();
    }
}

pub fn cache_hit() {
    METRICS.cache_hits.inc();
}

pub fn cache_miss() {
    METRICS.cache_misses.inc();
}

pub fn cache_stale_served() {
    METRICS.cache_stale_served.inc();
}

pub fn cache_evicted(entries: u64) {
    METRICS.cache_evictions.inc_by(entries);
}

pub fn set_cache_entries(entries: usize) {
    METRICS
        .cache_entries
        .set(i64::try_from(entries).unwrap_or(i64::MAX));
}

/// A gathered answer went out without some cluster.
pub fn gather_partial() {
    METRICS.gather_partial.inc();
}

/// Counts a query as in flight until the guard is dropped.
#[must_use = "the query counts as in flight only while the guard lives"]
pub struct InflightGuard(());

pub fn inflight() -> InflightGuard {
    METRICS.inflight.inc();
    InflightGuard(())
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        METRICS.inflight.dec();
    }
}

/// The series of one upstream group (one cluster), resolved once when the group is built so
/// that recording an attempt is two atomic updates.
#[derive(Debug, Clone)]
pub struct UpstreamMetrics {
    /// Indexed like [`UpstreamResult::ALL`].
    results: Vec<IntCounter>,
    duration: Histogram,
}

impl UpstreamMetrics {
    pub fn new(cluster: &str) -> Self {
        let metrics = &*METRICS;
        Self {
            results: UpstreamResult::ALL
                .iter()
                .map(|result| {
                    metrics
                        .upstream_requests
                        .with_label_values(&[cluster, result.label()])
                })
                .collect(),
            duration: metrics.upstream_duration.with_label_values(&[cluster]),
        }
    }

    /// One attempt at an endpoint of this group.
    pub fn record(&self, result: UpstreamResult, elapsed: Duration) {
        // The variants are declared in the order of ALL.
        if let Some(counter) = self.results.get(result as usize) {
            counter.inc();
        }
        self.duration.observe(elapsed.as_secs_f64());
    }
}

/// The `upstream_healthy` series of one endpoint; set to 1 when created.
pub fn endpoint_health(cluster: &str, endpoint: &str) -> IntGauge {
    let gauge = METRICS
        .upstream_healthy
        .with_label_values(&[cluster, endpoint]);
    gauge.set(1);
    gauge
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_registered_with_its_type_and_labels() {
        init();
        // Vectors without series are not gathered; give the configuration-bounded ones one.
        let _ = UpstreamMetrics::new("unit-test");
        let _ = endpoint_health("unit-test", "127.0.0.1:53");
        let gathered = METRICS.registry.gather();
        assert_eq!(gathered.len(), FAMILIES.len());
        for family in FAMILIES {
            let found = gathered
                .iter()
                .find(|g| g.name() == family.name)
                .unwrap_or_else(|| panic!("{} is not registered", family.name));
            assert_eq!(
                format!("{:?}", found.get_field_type()).to_lowercase(),
                family.kind.as_str()
            );
            for metric in found.get_metric() {
                let mut labels: Vec<&str> = metric.get_label().iter().map(|l| l.name()).collect();
                let mut expected = family.labels.to_vec();
                labels.sort_unstable();
                expected.sort_unstable();
                assert_eq!(labels, expected, "labels of {}", family.name);
            }
        }
    }

    #[test]
    fn rcodes_map_onto_their_labels() {
        let reply = |code: u8| [0, 0, 0x81, code, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(RCODES[rcode_index(&reply(0))], "NOERROR");
        assert_eq!(RCODES[rcode_index(&reply(2))], "SERVFAIL");
        assert_eq!(RCODES[rcode_index(&reply(3))], "NXDOMAIN");
        assert_eq!(RCODES[rcode_index(&reply(5))], "REFUSED");
        assert_eq!(RCODES[rcode_index(&reply(9))], "other");
        assert_eq!(RCODES[rcode_index(&[])], "other");
        assert_eq!(UpstreamResult::of_reply(&reply(3)), UpstreamResult::Ok);
        assert_eq!(
            UpstreamResult::of_reply(&reply(2)),
            UpstreamResult::Servfail
        );
        assert_eq!(
            UpstreamResult::of_reply(&reply(4)),
            UpstreamResult::OtherRcode
        );
    }

    #[test]
    fn label_enums_index_in_the_order_of_all() {
        for (i, result) in UpstreamResult::ALL.iter().enumerate() {
            assert_eq!(*result as usize, i);
        }
        for (i, reason) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i);
        }
    }

    #[test]
    fn buckets_resolve_cache_hits_and_timeouts() {
        const { assert!(REQUEST_BUCKETS[0] <= 0.000_05) };
        assert!(REQUEST_BUCKETS.contains(&0.5) && REQUEST_BUCKETS.contains(&2.0));
        assert!(UPSTREAM_BUCKETS.contains(&0.5) && UPSTREAM_BUCKETS.contains(&2.0));
        assert!(REQUEST_BUCKETS.windows(2).all(|w| w[0] < w[1]));
        assert!(UPSTREAM_BUCKETS.windows(2).all(|w| w[0] < w[1]));
    }
}
